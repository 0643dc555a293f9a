"""``DurableTaskRuntime``: the event-sourced task runtime over the store.

The reference imports a ``DurableTaskRuntime`` it does not include; this is
orchestration.md's proposed design. All decisions are the pure
:class:`~leasegate.core.ledger.TaskRuntimeProjection`'s; this class runs
the commit protocol:

1. **refresh**: ``read_after(last_ordinal)``; on
   :class:`~leasegate.core.ledger.OrchestrationSnapshotRequiredError`, reload
   from the snapshot and read after it;
2. **plan** the transition on the fresh state (an error raises
   :class:`~leasegate.core.ledger.DurableTaskRuntimeError`, a no-op returns);
3. **append** with ``expected_last_ordinal`` = the projection's ordinal; on
   :class:`~leasegate.core.ledger.OrchestrationConcurrencyError`, go back to
   1 (at most ``max_retries`` times, then re-raise);
4. **apply** the committed event (an idempotent replay refreshes instead);
5. ``compact_if_needed(last_ordinal, projection)``; a lock timeout there is
   ignored (the mutation is already durable; the next commit compacts).

Every method is durable when it returns (the store's append is). Times are
epoch milliseconds from ``now``; ids come from ``create_id`` (both
injectable).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leasegate.core.ledger import (
    DurableTaskRuntimeError,
    OrchestrationConcurrencyError,
    OrchestrationLockTimeoutError,
    OrchestrationSnapshotRequiredError,
)
from leasegate.core.ledger._runtime import PlannedEvent, TaskRuntimeProjection

from .contract import EventStore
from .event_store import AppendEventInput

__all__ = ["AttemptLease", "DurableTaskRuntime"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptLease:
    """What :meth:`DurableTaskRuntime.lease_attempt` returns.

    Attributes:
        lease_id: ``lease-<id>``.
        fencing_token: strictly increasing per task, across its attempts.
        expires_at: ISO-8601 UTC with milliseconds.
        expires_at_ms: the same instant in epoch milliseconds.
    """

    lease_id: str
    fencing_token: int
    expires_at: str
    expires_at_ms: int


class DurableTaskRuntime:
    """Objectives, tasks and attempts, durable through an event store.

    Args:
        store: the session's event store (any :class:`~.contract.EventStore`:
            the file store or the PostgreSQL backend).
        now: epoch milliseconds (default: the system clock).
        create_id: returns unique id text for attempt and lease ids
            (default: UUID4 hex).
        max_retries: optimistic-concurrency retries per call.

    Raises:
        OrchestrationEventStoreError: the store is corrupt.
        DurableTaskRuntimeError: the snapshot is not a runtime projection.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        now: Callable[[], int] | None = None,
        create_id: Callable[[], str] | None = None,
        max_retries: int = 3,
    ) -> None:
        self.store = store
        self._now = now or _now_ms
        self._create_id = create_id or (lambda: uuid.uuid4().hex)
        self._max_retries = max_retries
        self._proj = TaskRuntimeProjection()
        self._load()

    # -- protocol --------------------------------------------------------

    def _load(self, required: int | None = None) -> None:
        for _ in range(self._max_retries + 1):
            snap = self.store.read_projection_snapshot()
            if snap is None:
                proj = TaskRuntimeProjection()
            else:
                loaded = TaskRuntimeProjection.from_snapshot(snap.projection, snap.through_ordinal)
                if isinstance(loaded, DurableTaskRuntimeError):
                    raise loaded
                proj = loaded
            if required is not None and proj.last_ordinal < required:
                raise DurableTaskRuntimeError(
                    "Required orchestration projection snapshot is unavailable."
                )
            try:
                events = self.store.read_after(proj.last_ordinal)
            except OrchestrationSnapshotRequiredError:
                continue  # a compaction landed in between: load it
            self._proj = proj
            self._apply_all(events)
            return
        raise DurableTaskRuntimeError("Orchestration store kept compacting during load.")

    def _apply_all(self, events: Sequence[Mapping[str, Any]]) -> None:
        for event in events:
            problem = self._proj.apply(event)
            if problem is not None:
                self._proj = TaskRuntimeProjection()
                raise problem

    def _refresh(self) -> None:
        try:
            events = self.store.read_after(self._proj.last_ordinal)
        except OrchestrationSnapshotRequiredError as exc:
            self._load(required=exc.through_ordinal)
            return
        self._apply_all(events)

    def _commit(
        self, plan: Callable[[TaskRuntimeProjection], PlannedEvent | Exception | None]
    ) -> dict[str, Any] | None:
        """Run the commit protocol; return the committed event or ``None``."""
        for attempt in range(self._max_retries + 1):
            self._refresh()
            planned = plan(self._proj)
            if planned is None:
                return None
            if isinstance(planned, Exception):
                raise planned
            expected = self._proj.last_ordinal
            try:
                event = self.store.append(
                    AppendEventInput(
                        type=planned.type,
                        aggregate_id=planned.aggregate_id,
                        actor=planned.actor,
                        payload=planned.payload,
                        idempotency_key=planned.idempotency_key,
                    ),
                    expected_last_ordinal=expected,
                )
            except OrchestrationConcurrencyError:
                if attempt == self._max_retries:
                    raise
                continue
            if event["ordinal"] == expected + 1:
                self._apply_all([event])
            else:
                self._refresh()
            # Compaction is housekeeping after a durable commit: a lock
            # timeout here must not report the committed mutation as failed
            # (the next commit compacts instead).
            with contextlib.suppress(OrchestrationLockTimeoutError):
                self.store.compact_if_needed(self._proj.last_ordinal, lambda: self._proj.state)
            return event
        raise AssertionError("unreachable")  # pragma: no cover

    # -- views -----------------------------------------------------------

    def get_snapshot(self) -> dict[str, Any]:
        """A deep copy of the current state (refreshed from the store):
        ``{lastOrdinal, objectives, tasks, attempts}``, maps in creation order."""
        self._refresh()
        return copy.deepcopy(self._proj.state)

    # -- objectives ------------------------------------------------------

    def create_objective(
        self,
        objective_id: str,
        title: str,
        description: str,
        *,
        acceptance_criteria: Sequence[Mapping[str, Any]] = (),
        risk_budget: Mapping[str, Any] | None = None,
    ) -> None:
        """Create an ``active`` objective (``objective.created``).

        Raises:
            DurableTaskRuntimeError: duplicate id, blank title/description.
        """
        now = self._now()
        self._commit(
            lambda p: p.plan_create_objective(
                objective_id=objective_id,
                title=title,
                description=description,
                acceptance_criteria=acceptance_criteria,
                risk_budget=risk_budget,
                now_ms=now,
            )
        )

    def ensure_objective(self, objective: Mapping[str, Any]) -> None:
        """Create the objective, or update its title, description, criteria
        and budget when they differ (``objective.updated``); else nothing."""
        now = self._now()
        self._commit(lambda p: p.plan_ensure_objective(objective, now))

    def record_objective_evidence(self, objective_id: str, evidence: Mapping[str, Any]) -> None:
        """Record evidence once per ``evidenceId`` (same content → no-op)."""
        now = self._now()
        self._commit(lambda p: p.plan_record_evidence(objective_id, evidence, now))

    def pause_objective(self, objective_id: str) -> None:
        """``active`` → ``paused``; its ready tasks become ``blocked``."""
        now = self._now()
        self._commit(lambda p: p.plan_objective_status(objective_id, "paused", now))

    def resume_objective(self, objective_id: str) -> None:
        """``paused`` → ``active``; its blocked tasks become ``ready``."""
        now = self._now()
        self._commit(lambda p: p.plan_objective_status(objective_id, "active", now))

    def cancel_objective(self, objective_id: str) -> None:
        """→ ``cancelled``; non-terminal tasks and active attempts cancelled.

        Raises:
            DurableTaskRuntimeError: "Objective '<id>' is terminal." when completed.
        """
        now = self._now()
        self._commit(lambda p: p.plan_objective_status(objective_id, "cancelled", now))

    def complete_objective_from_owner(self, objective_id: str, acceptance_override: bool) -> None:
        """→ ``completed``; needs trusted evidence for each required
        criterion unless ``acceptance_override``.

        Raises:
            DurableTaskRuntimeError: missing evidence, or cancelled (terminal).
        """
        now = self._now()
        self._commit(
            lambda p: p.plan_complete_objective(objective_id, bool(acceptance_override), now)
        )

    # -- tasks -----------------------------------------------------------

    def create_task(self, spec: Mapping[str, Any]) -> None:
        """Create a ``ready`` task: ``{taskId, objectiveId, title, description,
        role, requiredCapabilities, riskBudget, verificationOfTaskId?,
        acceptanceCriterionIds?}``. The objective must be active."""
        now = self._now()
        self._commit(lambda p: p.plan_create_task(spec, now))

    def fail_task(self, task_id: str, reason_code: str) -> None:
        """Fail a task and cancel its active attempts; terminal → no-op."""
        now = self._now()
        self._commit(lambda p: p.plan_fail_task(task_id, reason_code, now))

    # -- attempts --------------------------------------------------------

    def queue_attempt(self, task_id: str, dispatch: Mapping[str, Any]) -> dict[str, Any]:
        """Queue a new attempt; returns its state (status ``queued``).

        Raises:
            DurableTaskRuntimeError: not dispatchable, an active attempt
                exists, or the attempt budget is exhausted.
        """
        attempt_id = f"attempt-{self._create_id()}"
        now = self._now()
        self._commit(lambda p: p.plan_queue_attempt(task_id, dispatch, attempt_id, now))
        return copy.deepcopy(self._proj.state["attempts"][attempt_id])

    def lease_attempt(self, attempt_id: str, owner_id: str, ttl_ms: int) -> AttemptLease:
        """Lease a queued attempt to ``owner_id`` for ``ttl_ms`` milliseconds.

        Returns the lease id, the fencing token (task's last + 1) and expiry.

        Raises:
            DurableTaskRuntimeError: "Lease TTL must be positive.", not queued,
                task not ready, objective not active.
        """
        lease_id = f"lease-{self._create_id()}"
        now = self._now()
        self._commit(lambda p: p.plan_lease(attempt_id, owner_id, ttl_ms, lease_id, now))
        lease = self._proj.state["attempts"][attempt_id]["lease"]
        return AttemptLease(
            lease["leaseId"], lease["fencingToken"], lease["expiresAt"], lease["expiresAtMs"]
        )

    def start_attempt(self, attempt_id: str, lease_id: str, fencing_token: int) -> None:
        """``leased`` → ``running`` with the current lease id and token.

        Raises:
            DurableTaskRuntimeError: "Attempt '<id>' lease or fencing token is
                stale." or "Attempt '<id>' lease expired."
        """
        now = self._now()
        self._commit(lambda p: p.plan_start(attempt_id, lease_id, fencing_token, now))

    def finish_attempt(
        self,
        attempt_id: str,
        lease_id: str,
        fencing_token: int,
        outcome: str,
        reason_code: str = "",
    ) -> None:
        """``running`` → ``completed``/``failed`` (the task completes, or is
        ready again after a failure). Same fencing checks as start."""
        now = self._now()
        self._commit(
            lambda p: p.plan_finish(attempt_id, lease_id, fencing_token, outcome, reason_code, now)
        )

    def cancel_attempt(self, attempt_id: str, reason_code: str) -> dict[str, Any]:
        """Cancel an active attempt; a terminal one is returned unchanged.

        Raises:
            DurableTaskRuntimeError: unknown attempt, blank reason.
        """
        now = self._now()
        self._commit(lambda p: p.plan_cancel_attempt(attempt_id, reason_code, now))
        return copy.deepcopy(self._proj.state["attempts"][attempt_id])

    def _expire_all(
        self, planner: Callable[[TaskRuntimeProjection], list[PlannedEvent]]
    ) -> list[str]:
        done: list[str] = []
        while True:
            event = self._commit(lambda p: next(iter(planner(p)), None))
            if event is None:
                return done
            done.append(event["aggregateId"])

    def expire_leases(self) -> list[str]:
        """Expire every leased/running attempt whose lease ended; their ids."""
        now = self._now()
        return self._expire_all(lambda p: p.plan_expire_leases(now))

    def recover_interrupted_unbound_attempts(
        self, predicate: Callable[[dict[str, Any]], bool]
    ) -> list[str]:
        """Fence on restart: expire (``worker_process_interrupted``) every
        leased/running attempt matching ``predicate``; their ids, in order."""
        now = self._now()
        return self._expire_all(lambda p: p.plan_recover_interrupted(predicate, now))
