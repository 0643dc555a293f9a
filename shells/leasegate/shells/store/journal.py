"""``CleanupJournal``: the runtime's durable record of cleanups it owes.

A runner records that it owes a cleanup for ``(task_id, run_epoch)`` *before*
it materializes anything for that run (credentials, env files, keys), and
settles it after the cleanup completed. A runner killed in between finds the
entry on its next start: :meth:`CleanupJournal.recover` runs the cleanup for
every owed run, oldest first, and settles each, and the runner asks for no
grant until it returns.

The journal holds no secret: task ids, run epochs (integers), reason codes
and an optional fencing token. Values are checked to be plain ``str``/``int``
(a :class:`~leasegate.core.Secret` is refused, with a message that does not
show it).

Storage: its own event-store session (``cleanup-journal:<runner_id>``) with
``cleanup.owed`` / ``cleanup.settled`` events keyed
``cleanup-owed:<task>:<epoch>@<ordinal>`` / ``cleanup-settled:<task>:<epoch>@<ordinal>``
where ``<ordinal>`` is the last ordinal the call saw (a call appends only
when the run's state must change, checked against the same log it appends
to, so a retried call never duplicates and a run recorded again after a
settle is owed again), and a projection ``{lastOrdinal, owed: [...]}``
that compaction snapshots. Every method is durable when it returns.

Interface for the runtime (issue #8, item 5)::

    journal = CleanupJournal(agent_dir, runner_id="runner-1")
    journal.recover(cleanup_run)            # at boot, before any grant
    journal.record_owed(task_id, epoch, "run_started")   # before materializing
    ...                                     # run; then clean up
    journal.settle(task_id, epoch)          # after the cleanup completed
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import time
from collections.abc import Callable
from typing import Any

from leasegate.core import is_safe_int
from leasegate.core.ledger import (
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationLockTimeoutError,
    OrchestrationSnapshotRequiredError,
    event_file_name,
)

from .contract import EventStore
from .event_store import AppendEventInput, OrchestrationEventStore

#: How many lost ``expected_last_ordinal`` races one journal call survives.
APPEND_RACE_ATTEMPTS = 12

__all__ = ["CleanupClaimError", "CleanupJournal", "OwedCleanup"]


@dataclasses.dataclass(frozen=True, slots=True)
class OwedCleanup:
    """One owed cleanup: the run ``(task_id, run_epoch)``, why it is owed,
    the fencing token of the attempt that owed it (if any), the runner
    host that recorded it (``host_id``), and the host holding its cleanup
    claim with the claim's token (``claimed_by``, ``claim_token``; 0: never
    claimed)."""

    task_id: str
    run_epoch: int
    reason: str
    fencing_token: int | None = None
    host_id: str | None = None
    claimed_by: str | None = None
    claim_token: int = 0


class CleanupClaimError(OrchestrationEventStoreError):
    """A cleanup claim or a fenced settle was refused: another host holds
    the claim (or a newer claim token exists). The caller must not run, or
    must stop treating as its own, that cleanup."""


def _check(task_id: Any, run_epoch: Any, reason: Any = "x") -> None:
    if type(task_id) is not str or not task_id or type(reason) is not str or not reason:
        raise OrchestrationEventStoreError(
            "Cleanup journal task id and reason must be non-empty plain strings."
        )
    if not is_safe_int(run_epoch) or run_epoch < 0:
        raise OrchestrationEventStoreError(
            "Cleanup journal run epoch must be a non-negative integer."
        )


def _owed_from(item: Any, *, settled: bool = False) -> OwedCleanup | None:
    """An owed-cleanup record (``{taskId, runEpoch, reason, [fencingToken]}``,
    or ``{taskId, runEpoch}`` for a settlement) decoded, or ``None`` when it
    is not exactly that shape."""
    if type(item) is not dict:
        return None
    allowed = (
        {"taskId", "runEpoch", "claimToken"}
        if settled
        else {"taskId", "runEpoch", "reason", "fencingToken", "hostId", "claimedBy", "claimToken"}
    )
    task_id: Any = item.get("taskId")
    epoch: Any = item.get("runEpoch")
    reason = "settled" if settled else item.get("reason")
    token: Any = item.get("fencingToken")
    host: Any = item.get("hostId")
    claimed_by: Any = item.get("claimedBy")
    claim: Any = item.get("claimToken", 0)
    if (
        (host is not None and (type(host) is not str or not host))
        or (claimed_by is not None and (type(claimed_by) is not str or not claimed_by))
        or not is_safe_int(claim)
        or claim < 0
    ):
        return None
    if (
        not item.keys() <= allowed
        or type(task_id) is not str
        or not task_id
        or type(reason) is not str
        or not reason
        or not is_safe_int(epoch)
        or epoch < 0
        or (token is not None and (not is_safe_int(token) or token < 0))
    ):
        return None
    return OwedCleanup(task_id, epoch, reason, token, host, claimed_by, claim)


class CleanupJournal:
    """Owed cleanups, durable in an event store (:class:`~.contract.EventStore`;
    default: the file store :class:`OrchestrationEventStore`).

    Args:
        agent_dir: the agent's directory (the store lives under it).
        runner_id: one journal per runner identity.
        store: use this store instead (the PostgreSQL backend for a fleet;
            tests inject crash seams).
        host_id: this runner host's identity: recorded with each owed
            cleanup and used for cleanup claims (fleet recovery,
            ``docs/ledger.md``). ``None``: a single host, no claims.

    Raises:
        OrchestrationEventStoreError: a corrupt journal (naming the file),
            including a well-formed store event or snapshot that is not a
            journal record ("Invalid cleanup journal event: <name>",
            "Invalid cleanup journal snapshot.").
    """

    def __init__(
        self,
        agent_dir: str | os.PathLike[str],
        runner_id: str = "default",
        *,
        store: EventStore | None = None,
        host_id: str | None = None,
    ) -> None:
        if host_id is not None and (type(host_id) is not str or not host_id):
            raise OrchestrationEventStoreError("Cleanup journal host id must be a plain string.")
        self.host_id = host_id
        self.store = store or OrchestrationEventStore(agent_dir, f"cleanup-journal:{runner_id}")
        self._last = 0
        self._owed: dict[tuple[str, int], OwedCleanup] = {}
        self._reload()

    def _reload(self) -> None:
        snap = self.store.read_projection_snapshot()
        self._owed = {}
        self._last = 0
        if snap is not None:
            self._last = snap.through_ordinal
            items = snap.projection.get("owed")
            decoded = [_owed_from(item) for item in items] if type(items) is list else [None]
            if snap.projection.get("lastOrdinal") != snap.through_ordinal or None in decoded:
                raise OrchestrationEventStoreError(
                    "Invalid cleanup journal snapshot.", file=event_file_name(snap.through_ordinal)
                )
            for owed in decoded:
                assert owed is not None
                self._owed[(owed.task_id, owed.run_epoch)] = owed
        try:
            events = self.store.read_after(self._last)
        except OrchestrationSnapshotRequiredError:
            self._reload()
            return
        self._apply(events)

    def _apply(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            settled = ev["type"] == "cleanup.settled"
            owed = _owed_from(ev["payload"], settled=settled)
            if owed is None or ev["type"] not in ("cleanup.owed", "cleanup.settled"):
                raise OrchestrationEventStoreError(
                    f"Invalid cleanup journal event: {event_file_name(ev['ordinal'])}",
                    file=event_file_name(ev["ordinal"]),
                )
            key = (owed.task_id, owed.run_epoch)
            known = self._owed.get(key)
            if settled:
                self._owed.pop(key, None)
            elif known is None:
                self._owed[key] = owed
            elif owed.claim_token > known.claim_token:  # a claim on an owed run
                self._owed[key] = dataclasses.replace(
                    known, claimed_by=owed.claimed_by, claim_token=owed.claim_token
                )
            self._last = ev["ordinal"]

    def _refresh(self) -> None:
        try:
            self._apply(self.store.read_after(self._last))
        except OrchestrationSnapshotRequiredError:
            self._reload()

    def _projection(self) -> dict[str, Any]:
        owed = []
        for o in self._owed.values():
            item: dict[str, Any] = {
                "taskId": o.task_id,
                "runEpoch": o.run_epoch,
                "reason": o.reason,
            }
            if o.fencing_token is not None:
                item["fencingToken"] = o.fencing_token
            if o.host_id is not None:
                item["hostId"] = o.host_id
            if o.claimed_by is not None:
                item["claimedBy"] = o.claimed_by
                item["claimToken"] = o.claim_token
            owed.append(item)
        return {"lastOrdinal": self._last, "owed": owed}

    def _append_if(
        self, needed: Callable[[], bool], make: Callable[[int], AppendEventInput]
    ) -> None:
        """Append ``make(last_ordinal)`` unless ``needed()`` is false, atomically.

        The check and the append see the same log: the append carries
        ``expected_last_ordinal``, and a lost race re-reads and re-checks. The
        idempotency key a caller builds includes the ordinal the check saw, so
        a run recorded, settled and recorded again gets a fresh key each time
        (a replayed key would silently drop the second record). A lost race
        waits a random 0–2^n ms (n the losses so far, at most 64 ms) before
        the next try, so hosts racing in lockstep drift apart; after
        :data:`APPEND_RACE_ATTEMPTS` lost races it raises ESE.
        """
        for attempt in range(APPEND_RACE_ATTEMPTS):
            self._refresh()
            if not needed():
                return
            try:
                self.store.append(make(self._last), expected_last_ordinal=self._last)
            except OrchestrationConcurrencyError:
                time.sleep(random.uniform(0, min(2**attempt, 64)) / 1000)  # noqa: S311 - jitter
                continue
            self._refresh()
            # Housekeeping after a durable append: a lock timeout must not
            # report the recorded cleanup as failed.
            with contextlib.suppress(OrchestrationLockTimeoutError):
                self.store.compact_if_needed(self._last, self._projection)
            return
        raise OrchestrationEventStoreError("Cleanup journal kept losing the append race.")

    def record_owed(
        self, task_id: str, run_epoch: int, reason: str, *, fencing_token: int | None = None
    ) -> None:
        """Durably record that run ``(task_id, run_epoch)`` owes a cleanup.

        Idempotent: a call for a run already owed changes nothing (its first
        reason is kept). A run that was settled and is recorded again is owed
        again.

        Raises:
            OrchestrationEventStoreError: a non-string id/reason (e.g. a
                Secret), a negative epoch, or a store failure.
        """
        _check(task_id, run_epoch, reason)
        if fencing_token is not None and (not is_safe_int(fencing_token) or fencing_token < 0):
            raise OrchestrationEventStoreError("Cleanup journal fencing token must be an integer.")
        payload: dict[str, Any] = {"taskId": task_id, "runEpoch": run_epoch, "reason": reason}
        if fencing_token is not None:
            payload["fencingToken"] = fencing_token
        if self.host_id is not None:
            payload["hostId"] = self.host_id
        self._append_if(
            lambda: (task_id, run_epoch) not in self._owed,
            lambda last: AppendEventInput(
                type="cleanup.owed",
                aggregate_id=task_id,
                actor="runtime",
                payload=payload,
                idempotency_key=f"cleanup-owed:{task_id}:{run_epoch}@{last}",
            ),
        )

    def settle(self, task_id: str, run_epoch: int, *, claim_token: int | None = None) -> None:
        """Durably record that the cleanup of ``(task_id, run_epoch)`` is done.

        Idempotent; settling a run that owes nothing appends nothing. With
        ``claim_token`` (from :meth:`claim`) the settle is fenced: it commits
        only while that token is the run's newest claim, checked against
        the same log it appends to (on PostgreSQL: by the database).

        Raises:
            CleanupClaimError: a newer claim exists (another host took the
                cleanup over).
        """
        _check(task_id, run_epoch)
        payload: dict[str, Any] = {"taskId": task_id, "runEpoch": run_epoch}
        if claim_token is not None:
            if not is_safe_int(claim_token) or claim_token < 1:
                raise OrchestrationEventStoreError("Cleanup claim token must be positive.")
            payload["claimToken"] = claim_token

        def needed() -> bool:
            owed = self._owed.get((task_id, run_epoch))
            if owed is None:
                return False
            if claim_token is not None and owed.claim_token != claim_token:
                raise CleanupClaimError(
                    f"Cleanup of {task_id}:{run_epoch} was claimed again "
                    f"(token {owed.claim_token}, this settle holds {claim_token})."
                )
            return True

        self._append_if(
            needed,
            lambda last: AppendEventInput(
                type="cleanup.settled",
                aggregate_id=task_id,
                actor="runtime",
                payload=payload,
                idempotency_key=f"cleanup-settled:{task_id}:{run_epoch}@{last}",
            ),
        )

    def claim(self, task_id: str, run_epoch: int, *, take_over_from: str | None = None) -> int:
        """Claim the cleanup of an owed run for this journal's ``host_id``
        before running it; returns the claim token (strictly increasing per
        run). Exactly one host wins a claim: the append carries
        ``expected_last_ordinal``, so two hosts racing for it are ordered by
        the store, and the loser re-reads and is refused.

        A run is claimable when nobody claimed it, this host holds the claim
        (returns the same token), or it is held by ``take_over_from`` (the
        dead host whose cleanups this host takes over). A claim held by any
        other host is refused: two takers never both run a cleanup.

        Raises:
            CleanupClaimError: the run owes nothing, or another host holds
                the claim.
            OrchestrationEventStoreError: no ``host_id``, or a store failure.
        """
        _check(task_id, run_epoch)
        me = self.host_id
        if me is None:
            raise OrchestrationEventStoreError("Cleanup claims need a journal host id.")
        key = (task_id, run_epoch)

        def needed() -> bool:
            owed = self._owed.get(key)
            if owed is None:
                raise CleanupClaimError(f"Cleanup of {task_id}:{run_epoch} is not owed.")
            if owed.claimed_by == me:
                return False
            if owed.claimed_by not in (None, take_over_from):
                raise CleanupClaimError(
                    f"Cleanup of {task_id}:{run_epoch} is claimed by another host."
                )
            return True

        def make(last: int) -> AppendEventInput:
            owed = self._owed[key]
            payload: dict[str, Any] = {
                "taskId": task_id,
                "runEpoch": run_epoch,
                "reason": owed.reason,
                "claimedBy": me,
                "claimToken": owed.claim_token + 1,
            }
            return AppendEventInput(
                type="cleanup.owed",
                aggregate_id=task_id,
                actor="runtime",
                payload=payload,
                idempotency_key=f"cleanup-claimed:{task_id}:{run_epoch}@{last}",
            )

        self._append_if(needed, make)
        owed = self._owed.get(key)
        if owed is None or owed.claimed_by != me:
            raise CleanupClaimError(f"Cleanup of {task_id}:{run_epoch} was not claimed.")
        return owed.claim_token

    def take_over(
        self, cleanup: Callable[[OwedCleanup], None], *, dead_host_id: str
    ) -> list[OwedCleanup]:
        """Fleet recovery: run the owed cleanups of a dead host's journal from
        this host. Open the dead host's journal (its ``runner_id``) with this
        host's ``host_id``, then call this. For each owed run, oldest first:
        :meth:`claim` it (taking it over from ``dead_host_id``), run
        ``cleanup``, and settle it with the claim token. A run another live
        host already claimed is skipped (it runs it).

        Returns:
            The runs this host cleaned up.

        Raises:
            Exception: whatever ``cleanup`` raised; that run stays owed and
                claimed by this host (a retry by this host continues it).
            CleanupClaimError: the claim was taken over while ``cleanup``
                ran (the settle is refused).
        """
        done: list[OwedCleanup] = []
        for item in self.owed():
            try:
                token = self.claim(item.task_id, item.run_epoch, take_over_from=dead_host_id)
            except CleanupClaimError:
                continue
            cleanup(item)
            self.settle(item.task_id, item.run_epoch, claim_token=token)
            done.append(item)
        return done

    def owed(self) -> list[OwedCleanup]:
        """Every run that still owes a cleanup, in the order they were recorded."""
        self._refresh()
        return list(self._owed.values())

    def recover(self, cleanup: Callable[[OwedCleanup], None]) -> list[OwedCleanup]:
        """Boot-time recovery: call ``cleanup`` for every owed run, oldest
        first, settling each after it returns. Call before asking for any
        grant. With a ``host_id``, each run is claimed first (:meth:`claim`)
        and one claimed by another host is skipped.

        Returns:
            The runs cleaned up.

        Raises:
            Exception: whatever ``cleanup`` raised; that run and the ones after
                it stay owed (retry on the next start).
        """
        done: list[OwedCleanup] = []
        for item in self.owed():
            if self.host_id is None:
                cleanup(item)
                self.settle(item.task_id, item.run_epoch)
            else:
                # A fleet host claims first, so no taker runs it meanwhile.
                try:
                    token = self.claim(item.task_id, item.run_epoch)
                except CleanupClaimError:
                    continue
                cleanup(item)
                self.settle(item.task_id, item.run_epoch, claim_token=token)
            done.append(item)
        return done
