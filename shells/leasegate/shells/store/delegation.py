"""``DelegationOrchestrationLedger``: durable delegated dispatches.

Records a dispatch before it runs, fences interrupted in-process attempts on
restart, and returns queued work for re-dispatch. It never pretends an
isolated completion can resume.

Implements ``reference/orchestration/delegation-ledger.ts``
(``DelegationOrchestrationLedger``), catalog entries DL-001..DL-027; the
pure rules are in :mod:`leasegate.core.ledger._delegation`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leasegate.core.ledger import DurableTaskRuntimeError
from leasegate.core.ledger._delegation import (
    DEFAULT_OWNER_PREFIX,
    MANAGED_EXECUTION_KIND,
    GoalState,
    derive_worker_task_label,
    goal_objective_id,
    goal_sync_call,
    has_goal_acceptance_override,
    managed_task_id,
    project_goal_acceptance_evidence,
    project_goal_objective,
    select_objective_id,
)
from leasegate.core.ledger._runtime import ACTIVE_ATTEMPT_STATUSES

from .contract import EventStore
from .event_store import OrchestrationEventStore
from .task_runtime import DurableTaskRuntime

__all__ = ["DelegationOrchestrationLedger", "StartedDelegationAttempt"]


@dataclasses.dataclass(frozen=True, slots=True)
class StartedDelegationAttempt:
    """What :meth:`DelegationOrchestrationLedger.start` returns (DL-019)."""

    objective_id: str
    task_id: str
    attempt_id: str
    lease_id: str
    fencing_token: int
    expires_at: str


def _active(attempt: Mapping[str, Any]) -> bool:
    return attempt["status"] in ACTIVE_ATTEMPT_STATUSES


class DelegationOrchestrationLedger:
    """The delegation ledger over a :class:`DurableTaskRuntime` (DL-001).

    Args:
        agent_dir, session_id: locate the session's event store.
        now: epoch milliseconds, for the runtime only.
        store_now, create_event_id: the store's clock and id source (port
            addition, for tests); default as the store's.
        create_id: the runtime's id source.
        runtime: use this runtime instead (tests use a fake).
        store: run the runtime over this store instead of the session's file
            store (e.g. a :class:`~.postgres.PostgresEventStore` shared by a
            fleet); ignored when ``runtime`` is given.
    """

    def __init__(
        self,
        agent_dir: str | os.PathLike[str],
        session_id: str,
        *,
        now: Callable[[], int] | None = None,
        store_now: Callable[[], str] | None = None,
        create_event_id: Callable[[], str] | None = None,
        create_id: Callable[[], str] | None = None,
        runtime: DurableTaskRuntime | None = None,
        store: EventStore | None = None,
    ) -> None:
        self.session_id = session_id
        self.runtime = runtime or DurableTaskRuntime(
            store
            or OrchestrationEventStore(
                agent_dir, session_id, now=store_now, create_event_id=create_event_id
            ),
            now=now,
            create_id=create_id,
        )

    def prepare(
        self,
        *,
        lane_id: str,
        instructions: str,
        execution_contract: Mapping[str, Any],
        required_capabilities: Sequence[str],
        goal: GoalState | None = None,
        verification_of_task_id: str | None = None,
    ) -> dict[str, Any]:
        """Record an in-process delegation and return its active attempt
        (DL-002, DL-005..015). Profile, role and budget come from
        ``execution_contract["worker"]["profile"]``.

        Raises:
            DurableTaskRuntimeError: unknown verification subject, a
                malformed input (a contract without ``worker.profile``
                ``{profileId, role, budget}``, capabilities that are not a
                list of strings, non-string instructions), raised before
                anything is read or appended; or a runtime refusal (e.g. a
                completed goal cancelled).
        """
        worker = (
            execution_contract.get("worker") if isinstance(execution_contract, Mapping) else None
        )
        profile = worker.get("profile") if isinstance(worker, Mapping) else None
        if not isinstance(profile, Mapping) or not all(
            k in profile for k in ("profileId", "role", "budget")
        ):
            raise DurableTaskRuntimeError(
                "Execution contract must carry worker.profile with profileId, role and budget."
            )
        if isinstance(required_capabilities, str | bytes) or not all(
            type(c) is str for c in required_capabilities
        ):
            raise DurableTaskRuntimeError("Required capabilities must be a list of strings.")
        return self._prepare_normalized(
            lane_id=lane_id,
            instructions=instructions,
            profile_id=profile["profileId"],
            role=profile["role"],
            required_capabilities=list(required_capabilities),
            risk_budget=profile["budget"],
            goal=goal,
            verification_of_task_id=verification_of_task_id or None,
            extra={"executionContract": dict(execution_contract)},
        )

    def prepare_managed(
        self,
        *,
        lane_id: str,
        dispatch_sequence: int,
        instructions: str,
        profile_id: str,
        provider: str,
        authorization_id: str,
        role: str,
        risk_budget: Mapping[str, Any],
        goal: GoalState | None = None,
        goal_id: str | None = None,
        worktree_lane_key: str | None = None,
    ) -> dict[str, Any]:
        """Record a managed-process dispatch for task
        ``<lane_id>:turn:<dispatch_sequence>`` (DL-003, DL-004).

        Raises:
            DurableTaskRuntimeError: "Managed dispatch sequence must be a
                positive integer." before anything is read or appended.
        """
        task_id = managed_task_id(lane_id, dispatch_sequence)
        if isinstance(task_id, DurableTaskRuntimeError):
            raise task_id
        meta: dict[str, Any] = {
            "executionKind": MANAGED_EXECUTION_KIND,
            "logicalLaneId": lane_id,
            "dispatchSequence": dispatch_sequence,
            "provider": provider,
            "authorizationId": authorization_id,
        }
        if worktree_lane_key:
            meta["worktreeLaneKey"] = worktree_lane_key
        return self._prepare_normalized(
            lane_id=task_id,
            instructions=instructions,
            profile_id=profile_id,
            role=role,
            required_capabilities=[],
            risk_budget=risk_budget,
            goal=goal,
            goal_id=goal_id or None,
            extra=meta,
        )

    def _prepare_normalized(
        self,
        *,
        lane_id: str,
        instructions: str,
        profile_id: str,
        role: str,
        required_capabilities: list[str],
        risk_budget: Mapping[str, Any],
        goal: GoalState | None,
        extra: dict[str, Any],
        goal_id: str | None = None,
        verification_of_task_id: str | None = None,
    ) -> dict[str, Any]:
        if type(instructions) is not str:
            raise DurableTaskRuntimeError("Delegation instructions must be a string.")
        if not isinstance(risk_budget, Mapping):
            raise DurableTaskRuntimeError("Risk budget must be a JSON object.")
        snapshot = self.runtime.get_snapshot()
        subject = (
            snapshot["tasks"].get(verification_of_task_id) if verification_of_task_id else None
        )
        if verification_of_task_id and subject is None:
            raise DurableTaskRuntimeError(
                f"Unknown verification subject '{verification_of_task_id}'."
            )
        objective_id = select_objective_id(
            subject_objective_id=subject["task"]["objectiveId"] if subject else None,
            goal=goal,
            goal_id=goal_id,
            session_id=self.session_id,
        )
        # DL-008: a goal whose objective is the selected one is synchronized on every prepare;
        # DL-009: a subject of another objective wins over the goal (no synchronization).
        if goal is not None and objective_id == goal_objective_id(goal.goal_id):
            self.synchronize_goal_state(goal)
            snapshot = self.runtime.get_snapshot()
        # DL-007: a missing objective not selected by a goal is created once.
        elif objective_id not in snapshot["objectives"]:
            self.runtime.create_objective(
                objective_id,
                f"Goal {goal_id}" if goal_id else f"Session {self.session_id}",
                "Externally managed goal work" if goal_id else "Session-scoped delegated work",
            )
            snapshot = self.runtime.get_snapshot()
        # DL-010: a missing task is created with the derived title; DL-011: a verification task
        # carries its subject and copies its criteria; DL-012: an existing task is never re-created
        # or updated.
        if lane_id not in snapshot["tasks"]:
            spec: dict[str, Any] = {
                "taskId": lane_id,
                "objectiveId": objective_id,
                "title": derive_worker_task_label(instructions, f"Delegated {role} work"),
                "description": instructions,
                "role": role,
                "requiredCapabilities": required_capabilities,
                "riskBudget": dict(risk_budget),
            }
            if verification_of_task_id:
                spec["verificationOfTaskId"] = verification_of_task_id
                spec["acceptanceCriterionIds"] = list(
                    snapshot["tasks"][verification_of_task_id]["task"].get(
                        "acceptanceCriterionIds", []
                    )
                )
            self.runtime.create_task(spec)
            snapshot = self.runtime.get_snapshot()
        task = snapshot["tasks"].get(lane_id)
        if task is None:
            # DL-015: a runtime lacking the task after createTask.
            raise DurableTaskRuntimeError(f"Failed to create task '{lane_id}'.")
        for attempt_id in reversed(task["attemptIds"]):
            attempt = snapshot["attempts"].get(attempt_id)
            # DL-013: the newest active attempt is returned unchanged, nothing appended.
            if attempt is not None and _active(attempt):
                return attempt  # type: ignore[no-any-return]
        dispatch: dict[str, Any] = {
            "taskId": lane_id,
            "profileId": profile_id,
            "instructions": instructions,
            "resourcePointerIds": [],
        }
        dispatch.update(extra)
        # DL-014: no active attempt: a new attempt is queued with the ordered dispatch.
        return self.runtime.queue_attempt(lane_id, dispatch)

    def synchronize_goal_state(self, goal: GoalState) -> None:
        """DL-016/017: ensure the goal's objective, record its trusted
        evidence, then apply at most one status transition.

        Raises:
            DurableTaskRuntimeError: e.g. "Objective '<id>' is terminal." for
                a cancelled goal over a completed objective (and vice versa).
        """
        objective = project_goal_objective(goal)
        oid = objective["objectiveId"]
        self.runtime.ensure_objective(objective)
        for evidence in project_goal_acceptance_evidence(goal):
            self.runtime.record_objective_evidence(oid, evidence)
        rec = self.runtime.get_snapshot()["objectives"].get(goal_objective_id(goal.goal_id))
        status = rec["objective"]["status"] if rec is not None else None
        call = goal_sync_call(goal.status, status)
        if call == "resume":
            self.runtime.resume_objective(oid)
        elif call == "pause":
            self.runtime.pause_objective(oid)
        elif call == "cancel":
            self.runtime.cancel_objective(oid)
        elif call == "complete":
            self.runtime.complete_objective_from_owner(oid, has_goal_acceptance_override(goal))

    def start(
        self, attempt_id: str, lease_ttl_ms: int, owner_id: str | None = None
    ) -> StartedDelegationAttempt:
        """Lease then start an attempt (DL-018..020); owner defaults to
        ``in-process:<session_id>``.

        Raises:
            DurableTaskRuntimeError: unknown attempt or task; a refused lease
                or start (the lease then stays recorded, DL-020).
        """
        snapshot = self.runtime.get_snapshot()
        attempt = snapshot["attempts"].get(attempt_id)
        if attempt is None:
            raise DurableTaskRuntimeError(f"Unknown attempt '{attempt_id}'.")
        task = snapshot["tasks"].get(attempt["taskId"])
        if task is None:
            raise DurableTaskRuntimeError(f"Unknown task '{attempt['taskId']}'.")
        owner = owner_id if owner_id is not None else f"{DEFAULT_OWNER_PREFIX}{self.session_id}"
        lease = self.runtime.lease_attempt(attempt_id, owner, lease_ttl_ms)
        self.runtime.start_attempt(attempt_id, lease.lease_id, lease.fencing_token)
        return StartedDelegationAttempt(
            objective_id=task["task"]["objectiveId"],
            task_id=task["task"]["taskId"],
            attempt_id=attempt_id,
            lease_id=lease.lease_id,
            fencing_token=lease.fencing_token,
            expires_at=lease.expires_at,
        )

    def cancel(self, attempt_id: str, reason_code: str) -> None:
        """``runtime.cancel_attempt(attempt_id, reason_code)`` and nothing else (DL-021)."""
        self.runtime.cancel_attempt(attempt_id, reason_code)

    def recover_queued_dispatches(self) -> list[dict[str, Any]]:
        """Boot-time recovery (DL-022..027): expire every leased/running
        non-managed attempt, queue one replacement per ready task whose newest
        attempt expired (within ``riskBudget.maxAttempts``, else fail it with
        ``attempt_budget_exhausted``), and return every queued non-managed
        attempt. Call only at boot, before starting work."""
        self.runtime.recover_interrupted_unbound_attempts(
            lambda a: a["dispatch"].get("executionKind") != MANAGED_EXECUTION_KIND
        )
        snapshot = self.runtime.get_snapshot()
        for task in list(snapshot["tasks"].values()):
            attempts = [
                snapshot["attempts"][a] for a in task["attemptIds"] if a in snapshot["attempts"]
            ]
            # DL-023: a task with an active attempt gets nothing queued.
            if any(_active(a) for a in attempts):
                continue
            interrupted = next((a for a in reversed(attempts) if a["status"] == "expired"), None)
            if interrupted is None or task["task"]["status"] != "ready":
                continue
            max_attempts = task["task"]["riskBudget"].get("maxAttempts")
            task_id = task["task"]["taskId"]
            # DL-025: a spent riskBudget.maxAttempts fails the task instead.
            if max_attempts is not None and len(task["attemptIds"]) >= max_attempts:
                self.runtime.fail_task(task_id, "attempt_budget_exhausted")
                snapshot = self.runtime.get_snapshot()
                continue
            # DL-024: the newest expired attempt's dispatch, unchanged; DL-026: managed tasks too
            # (the loop does not filter them; only the returned list does).
            self.runtime.queue_attempt(task_id, interrupted["dispatch"])
            snapshot = self.runtime.get_snapshot()
        return [
            a
            for a in snapshot["attempts"].values()
            if a["status"] == "queued"
            and a["dispatch"].get("executionKind") != MANAGED_EXECUTION_KIND
        ]
