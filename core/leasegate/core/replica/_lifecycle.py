"""Activation and assignment, drops, readiness waiters and exhaustion.

The lifecycle events (ER-005–ER-023, ER-121–ER-123) take effect at once,
even while a frame of the task waits on a value read. A replica ends when it
is dropped, replaced by a newer run or dropped with every other one
(:meth:`_Lifecycle._destroy`), or when the ledger refuses a reservation
(:meth:`_Lifecycle._exhaust`, ER-119): then every value is scrubbed and its
waiters are rejected.
"""

from __future__ import annotations

from .._json import MAX_SAFE_INTEGER, utf16_len
from ..wire._common import is_op_id
from ._accounting import _Accounting
from ._events import (
    ActivateAssignment,
    ActivationOutcome,
    ActivationToken,
    AwaitReady,
    CancelTimer,
    DropAll,
    DropAssignment,
    Dropped,
    ExpectActivation,
    ReadinessDeadline,
    RejectWaiter,
    ResolveWaiter,
    SettleActivation,
    StartTimer,
)
from ._phases import DROPPED, EXHAUSTED, enter
from ._state import (
    _CLOSED_READER,
    _CONTROL_CHARS,
    _EXHAUSTED,
    _NEEDS_RESTART,
    MAX_READY_TIMEOUT_MS,
    _Frame,
    _Replica,
    _scrub_attempt,
    _scrub_project,
    _serves,
)


def _valid_org(org: object) -> bool:
    return (
        type(org) is str and 0 < utf16_len(org) <= 128 and not any(c in _CONTROL_CHARS for c in org)
    )


class _Lifecycle(_Accounting):
    """The lifecycle events' handlers, and how a replica ends."""

    # ------------------------------------------------------------------
    # Activation and assignment

    def _on_activate(self, ev: ActivateAssignment) -> None:
        def fail(msg: str) -> None:
            self._out.append(
                ActivationOutcome(
                    task_id=ev.task_id, run_epoch=ev.run_epoch, outcome=None, error=msg
                )
            )

        task, run = ev.task_id, ev.run_epoch
        # ER-005: the task id is an op id (``isHostOpId``), stricter than the
        # registry's task id rule; refused before anything changes.
        if (
            not is_op_id(task)
            or type(run) is not int
            or not 1 <= run <= MAX_SAFE_INTEGER
            or not _valid_org(ev.org_id)
            or ev.reader is None
        ):
            return fail("invalid task assignment")
        # ER-006: a run below the highest run created for the task is stale; the floor never
        # lowers.
        if run < self._floors.get(task, 0):
            return fail("task assignment run epoch is stale")
        mark = self._restart_marks.get(task)
        # ER-007: a run marked restart-required (ER-119) never activates again, even after a drop.
        if mark == run:
            return fail(_NEEDS_RESTART)
        current = self._replicas.get(task)
        # ER-011: the org of a run's replica cannot change; nothing changes.
        if current is not None and current.run_epoch == run and current.org_id != ev.org_id:
            return fail("task assignment organization cannot change")
        if mark is not None and run > mark:
            del self._restart_marks[task]
        # ER-009 (same reader, same org: "retained", untouched); ER-010 (another reader:
        # "retained", reader generation and fence bumped, no notify).
        if current is not None and current.run_epoch == run:
            if current.reader is not ev.reader:
                current.reader = ev.reader
                current.reader_generation += 1
                current.fence += 1
            self._activated(task, run)
            self._out.append(
                ActivationOutcome(task_id=task, run_epoch=run, outcome="retained", error=None)
            )
            return None
        if current is not None:
            # The reference deletes nothing from the map here: the new
            # replica takes the task's existing position (ER-016).
            # ER-012: a newer run replaces the replica; the old one is destroyed and scrubbed first
            # (#destroyTask).
            self._destroy(current, "assignment replaced")
        # ER-008: a fresh replica ("created"): gate closed, no stream, cursor, attempt or live
        # projects.
        self._replicas[task] = _Replica(task, run, ev.org_id, ev.reader)
        self._floors[task] = run
        self._activated(task, run)
        self._out.append(
            ActivationOutcome(
                task_id=task,
                run_epoch=run,
                outcome="created" if current is None else "replaced",
                error=None,
            )
        )
        self._notify(task)
        return None

    def _activated(self, task: str, run: int) -> None:
        pending = self._pending.get(task)
        if pending is None:
            return
        for token in [k for k, r in pending.items() if r == run]:
            del pending[token]
        if not pending:
            del self._pending[task]

    def _on_expect(self, ev: ExpectActivation) -> None:
        self._token += 1
        # Ill-typed arguments get a token that no frame can ever match.
        if type(ev.task_id) is str and type(ev.run_epoch) is int:
            self._pending.setdefault(ev.task_id, {})[self._token] = ev.run_epoch
        self._out.append(
            ActivationToken(task_id=ev.task_id, run_epoch=ev.run_epoch, token=self._token)
        )

    def _on_settle(self, ev: SettleActivation) -> None:
        if type(ev.task_id) is not str or type(ev.token) is not int:
            return
        pending = self._pending.get(ev.task_id)
        if pending is None:
            return
        pending.pop(ev.token, None)
        if not pending:
            del self._pending[ev.task_id]

    def _on_drop(self, ev: DropAssignment) -> None:
        r = self._replicas.get(ev.task_id) if type(ev.task_id) is str else None
        if r is None or r.run_epoch != ev.run_epoch:
            self._out.append(Dropped(task_id=ev.task_id, run_epoch=ev.run_epoch, dropped=False))
            return
        del self._replicas[ev.task_id]
        self._destroy(r, "task credentials were dropped")
        self._out.append(Dropped(task_id=ev.task_id, run_epoch=ev.run_epoch, dropped=True))
        self._notify(ev.task_id)

    def _on_drop_all(self, ev: DropAll) -> None:
        replicas = list(self._replicas.values())
        self._replicas.clear()
        # ER-022: dropAll clears every pending token (dropAssignment keeps them).
        self._pending.clear()
        for r in replicas:
            self._destroy(r, "runner process ended")
            self._notify(r.task_id)

    def _scrub_live_and_attempt(self, r: _Replica) -> None:
        if r.attempt is not None:
            _scrub_attempt(r.attempt)
        r.attempt = None
        for proj in r.live.values():
            _scrub_project(proj)
        # ER-105: values a waiting page already read are scrubbed at once when the replica is
        # destroyed.
        for e in r.in_flight:
            e.value = None
        r.in_flight.clear()

    def _destroy(self, r: _Replica, reason: str) -> None:
        """End ``r`` (dropped, replaced or dropped with all): reader closed,
        values scrubbed, ledger released, waiters rejected with ``reason``."""
        r.fence += 1
        enter(r, DROPPED)
        r.reader = _CLOSED_READER
        self._scrub_live_and_attempt(r)
        self._clear_ledger(r)
        self._reject_waiters(r, reason)

    def _reject_waiters(self, r: _Replica, reason: str) -> None:
        waiters, r.waiters = r.waiters, {}
        for wid, tid in waiters.items():
            self._timers.pop(tid, None)
            self._out.append(CancelTimer(timer_id=tid))
            self._out.append(RejectWaiter(waiter_id=wid, reason=reason))

    # ------------------------------------------------------------------
    # Readiness

    def _on_await(self, ev: AwaitReady) -> None:
        ms = ev.timeout_ms
        if type(ms) is not int or not 1 <= ms <= MAX_READY_TIMEOUT_MS:
            self._out.append(
                RejectWaiter(
                    waiter_id=ev.waiter_id, reason="invalid task replica readiness timeout"
                )
            )
            return
        r = self._replicas.get(ev.task_id) if type(ev.task_id) is str else None
        if r is None or r.run_epoch != ev.run_epoch or type(ev.waiter_id) is not int:
            self._out.append(
                RejectWaiter(
                    waiter_id=ev.waiter_id, reason="task replica assignment is unavailable"
                )
            )
            return
        if r.phase is EXHAUSTED:
            self._out.append(RejectWaiter(waiter_id=ev.waiter_id, reason=_NEEDS_RESTART))
            return
        if _serves(r):
            self._out.append(ResolveWaiter(waiter_id=ev.waiter_id))
            return
        if ev.waiter_id in r.waiters:
            # A reused waiter id replaces its older registration.
            old = r.waiters.pop(ev.waiter_id)
            self._timers.pop(old, None)
            self._out.append(CancelTimer(timer_id=old))
        self._next_timer += 1
        tid = self._next_timer
        r.waiters[ev.waiter_id] = tid
        self._timers[tid] = (r, ev.waiter_id)
        self._out.append(StartTimer(timer_id=tid, delay_ms=ms))

    def _on_deadline(self, ev: ReadinessDeadline) -> None:
        found = self._timers.pop(ev.timer_id, None) if type(ev.timer_id) is int else None
        if found is None:
            return
        r, wid = found
        if r.waiters.get(wid) == ev.timer_id:
            del r.waiters[wid]
            self._out.append(
                RejectWaiter(
                    waiter_id=wid, reason="task environment replica did not become ready in time"
                )
            )

    # ------------------------------------------------------------------
    # Exhaustion

    def _exhaust(self, r: _Replica, frame: _Frame) -> None:
        """ER-119: the ledger refused a reservation for ``frame``: ``r``
        requires a restart (once), and ``frame`` gets ``replica_restart_required``."""
        if r.phase is not EXHAUSTED:
            enter(r, EXHAUSTED)
            self._restart_marks[r.task_id] = r.run_epoch
            r.fence += 1
            r.reader = _CLOSED_READER
            self._scrub_live_and_attempt(r)
            r.live = {}
            self._clear_ledger(r)
            self._reject_waiters(r, _NEEDS_RESTART)
            self._notify(r.task_id)
        self._error(frame, r, _EXHAUSTED)
