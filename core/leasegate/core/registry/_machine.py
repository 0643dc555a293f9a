"""The lease registry: per-task credential leases as a pure, deterministic machine.

Theory of operation
===================

One :class:`LeaseRegistry` holds one *run* record per task (``(task_id,
run_epoch)``), exactly as the reference ``TaskCredentialLeaseRegistry`` of
``host/lib/cloud-credential-leases.ts`` holds its ``TaskState`` map. Its only
interface is ``handle(event) -> list[Command]``: events are host calls,
frames, timer fires and completions of earlier commands; commands are what
the shell must do (send a frame, start a timer, call a gate callback, read
SSM through a session reader, run a cleanup or an install, answer a call,
report a sanitized error). The vocabulary is in :mod:`._vocab` and
``docs/events-and-commands.md``.

How the reference's ``async`` code is kept
------------------------------------------

The reference is a web of ``async`` functions whose fences are re-checked
after each ``await``. Rewriting it as explicit state records would re-derive
every interleaving by hand; instead each ``async`` function here is a
*generator coroutine* with the same statements in the same order, run by the
tiny deterministic scheduler of :mod:`._sched`:

* ``await something`` becomes ``yield future``: the coroutine is suspended
  until the future settles, and resumed from a FIFO microtask queue. A future
  of an external operation is created together with its command (keyed by
  ``cmd_id``); the completion event settles it.
* a call to another ``async`` function that the reference awaits at once is
  ``yield from``; one whose promise is kept (a full cleanup joined by later
  callers, a cleanup queued on the run's FIFO) is started as a task and its
  future stored, exactly where the reference stores its promise.
* the reference's *synchronous* callbacks — ``closeTaskGate`` and
  ``openTaskGate`` — are commands (:class:`CloseGate`, :class:`OpenGate`)
  whose outcome (:class:`GateCallbackDone` / :class:`GateCallbackFailed`)
  the shell feeds back at once. The coroutine that issued one is suspended on
  it (``yield Sync(cmd_id)``) and nothing that depends on the outcome is
  emitted before it arrives. While a gate outcome is outstanding no microtask
  runs (as no promise continuation runs during a JavaScript callback), but
  other events *are* handled: they model calls the callback made into the
  registry (re-entrancy, catalog note 2); the open then re-checks LR-060 when
  its outcome arrives and undoes itself with a "cleanup-failed" close.

Because everything is keyed by integers drawn from one counter and every
queue is FIFO, the same construction and the same events give the same
commands, byte for byte.

Where things are
----------------

This module keeps the machine itself: the public surface, the plumbing (ids,
commands, timers, reports), the event handlers (``_HANDLERS``, one per event
class, and ``_FRAME_HANDLERS``), starting and ending runs and the gate. Each
other concern is a module of functions taking the machine: :mod:`._requests`
(the lease op), :mod:`._grants` (validating and committing a grant),
:mod:`._bundles` (materializing a grant, readers), :mod:`._cleanup` (the
run's FIFO, the startup, full and floor cleanups), :mod:`._refresh` (bundle
timers, rotations, credential refreshes) and :mod:`._projects` (project value
reads); :mod:`._records` holds the data and :mod:`._phases` the run phases
and every allowed move between them.

Per-run state is the reference's ``TaskState`` (:class:`._records.Run`):
phase, gate flag, quarantine flag (``gate_close_failed``), committed bundle
and its generation, wanted and minimum revisions, remembered identities,
pending removals and the cleaned set, the pending lease op, pending
refreshes, the five timers (renewal, retry, expiry, floor grace, cleanup
retry), the FIFO tail of cleanups and installs, the full cleanup in flight,
the startup, the waiters and the gate-hold count.

Secrets stay in :class:`~leasegate.core.Secret` values: sessions, SSM values
and material never reach an error text (errors are the reference's fixed
texts, or "credential lease operation failed"), a status or a repr.

Decisions on the reference's quirks are recorded in ``docs/registry.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from .._base import Command, Event, OpIdSource
from .._model import DecodeError
from .._sched import Co, Future, Scheduler, Sync
from ..wire import decode_frame
from ..wire._common import is_valid_assignment
from ..wire.lease import (
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    LeaseDeny,
    LeaseGrant,
    LeaseRequest,
    LeaseStale,
    LeaseUnavailable,
)
from ._bundles import destroy_bundle, files_access, seal
from ._cleanup import (
    complete_ended_cleanup,
    escalate_launch_fence,
    finish_startup,
    full_cleanup,
    handle_denied,
    handle_stale,
)
from ._grants import handle_grant
from ._new import (
    new_assignment,
    new_call_done,
    new_cancel_timer,
    new_close_gate,
    new_open_gate,
    new_start_timer,
)
from ._phases import ENDED, LOST, RECOVERING, USABLE, enter, initial_phase
from ._plans import ManifestPlan
from ._projects import read_project_value
from ._records import (
    SANITIZED,
    Bundle,
    External,
    Hold,
    InstallRec,
    LeaseError,
    ReadError,
    Run,
    RunStatus,
    Unavailable,
    run_status,
    unavailable_refresh,
)
from ._refresh import (
    apply_announced,
    handle_changed,
    handle_refresh_result,
    request_refresh,
    settle_refresh,
)
from ._requests import arm_retry, cancel_pending, handle_unavailable, request_lease
from ._vocab import (
    Assignment,
    BridgeAuthenticated,
    CallDone,
    CleanupFailed,
    CleanupFinished,
    CloseRun,
    FilesAccess,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    GateReason,
    GrantHookFailed,
    InstallFailed,
    InstallFinished,
    LaunchFenceFailed,
    ProjectValueDone,
    ProjectValueRead,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    RefreshRequested,
    ReportError,
    RunCleanup,
    RunInstall,
    SendFailed,
    Shutdown,
    StartRun,
    TaskView,
    TimerFired,
    WaitCancelled,
    WaiterResolved,
    WaitUsable,
)

__all__ = ["LeaseRegistry"]


class LeaseRegistry:
    """The lease registry machine. Reference: ``TaskCredentialLeaseRegistry``.

    Args:
        runner_kind: ``"owned"`` (no Files session) or ``"task-machine"``
            (exactly one Files session; full cleanups remove it) (LR-022).
        op_id_seed: seed of the :class:`~leasegate.core._base.OpIdSource`
            whose ids form the random part of op ids (LR-013).
        install_external: whether the host installs credentials; without it
            an install is only a barrier on the run's queue (LR-055, LR-057).

    Use :meth:`handle` for every event; it returns the commands to carry out,
    in order, and never raises. Queries (:meth:`status`,
    :meth:`current_view`, :meth:`files_access`, :meth:`install_is_current`)
    change nothing.
    """

    def __init__(
        self,
        *,
        runner_kind: Literal["owned", "task-machine"],
        op_id_seed: str,
        install_external: bool = True,
    ) -> None:
        self._runner_kind: Final = runner_kind
        self._ids = OpIdSource(op_id_seed)
        self._install_external: Final = install_external
        self._sched = Scheduler()
        self._tasks: dict[str, Run] = {}
        self._out: list[Command] = []
        self._now = 0
        self._next = 0
        self._io: dict[int, Future[Any]] = {}
        self._io_kind: dict[int, type[Command]] = {}
        self._timers: dict[int, Callable[[], Co[None]]] = {}
        self._hooks: dict[int, Assignment] = {}
        # Hooks whose grant settled: their failure is still reported if it is
        # fed before any other event (LR-019; see ``handle``).
        self._settled_hooks: dict[int, Assignment] = {}
        self._installs: dict[int, InstallRec] = {}
        self._waiter_run: dict[int, Run] = {}
        self._plans: dict[str, ManifestPlan] = {}
        self._internal_errors = 0

    # ------------------------------------------------------------------
    # The public surface

    def handle(self, event: Event) -> list[Command]:
        """Handle one event and return the commands it causes, in order.

        Args:
            event: any event of :mod:`leasegate.core.registry`; its
                ``now_ms`` becomes the registry's clock.

        Returns:
            The commands, in the order the reference performs the matching
            calls. Never raises: an unknown event or an unmatched completion
            returns ``[]``.
        """
        now = getattr(event, "now_ms", None)
        if type(now) is int:
            self._now = now
        if self._settled_hooks and type(event) is not GrantHookFailed:
            self._settled_hooks.clear()
        try:
            handler = _HANDLERS.get(type(event))
            if handler is None:
                handler = _handler_of(event, _HANDLERS)
            if handler is not None:
                handler(self, event)
            self._sched.drain()
        except Exception:  # noqa: BLE001 - the core never raises (STYLE)
            self._internal_errors += 1
            self._out.append(ReportError(assignment=Assignment("", 0), message=SANITIZED))
        out, self._out = self._out, []
        return out

    def status(self, task_id: str) -> RunStatus | None:
        """The run registered for ``task_id``, as a :class:`RunStatus`, or ``None``."""
        st = self._tasks.get(task_id)
        return None if st is None else run_status(st)

    def current_view(self, task_id: str, run_epoch: int, now_ms: int) -> TaskView | None:
        """The committed view while the run is usable at ``now_ms``, else ``None`` (LR-139)."""
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch:
            return None
        if not self._usable(st, now_ms) or st.bundle is None:
            return None
        return st.bundle.view

    def files_access(self, task_id: str, run_epoch: int, now_ms: int) -> FilesAccess | None:
        """The Files access while usable, else ``None`` (``None`` for owned runners; LR-140)."""
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch or st.bundle is None:
            return None
        if not self._usable(st, now_ms):
            return None
        return files_access(self, st.bundle)

    def install_is_current(self, cmd_id: int, now_ms: int) -> bool:
        """The reference's ``isCurrent()`` of install ``cmd_id`` at ``now_ms`` (LR-056, LR-100)."""
        rec = self._installs.get(cmd_id)
        if rec is None:
            return False
        saved, self._now = self._now, now_ms
        try:
            return rec.is_current()
        finally:
            self._now = saved

    # ------------------------------------------------------------------
    # Plumbing

    def _id(self) -> int:
        self._next += 1
        return self._next

    def _emit(self, cmd: Command) -> None:
        self._out.append(cmd)

    def _io_cmd(self, make: Callable[[int], Command]) -> Future[Any]:
        cid = self._id()
        fut: Future[Any] = Future(self._sched)
        cmd = make(cid)
        self._io[cid] = fut
        self._io_kind[cid] = type(cmd)
        self._emit(cmd)
        return fut

    def _take_io(self, cid: int, kind: type[Command]) -> Future[Any] | None:
        """The pending future of I/O command ``cid`` if it is a ``kind``
        command (removed), else ``None``: a completion of another kind (a
        ``CleanupFinished`` for a read's id) matches nothing and is ignored,
        and the command stays pending for its real completion."""
        if self._io_kind.get(cid) is not kind:
            return None
        del self._io_kind[cid]
        return self._io.pop(cid, None)

    def _start_timer(self, delay: int, cb: Callable[[], Co[None]]) -> int:
        tid = self._id()
        self._timers[tid] = cb
        self._emit(new_start_timer(tid, delay))
        return tid

    def _clear_timer(self, tid: int | None) -> None:
        if tid is None:
            return
        if self._timers.pop(tid, None) is not None:
            self._emit(new_cancel_timer(tid))

    @property
    def internal_errors(self) -> int:
        """How many unexpected Python exceptions were contained (a bug if not 0).

        ``handle`` never raises: an exception that is neither a reference
        error nor an external failure is reported sanitized like any other
        and counted here so tests can assert there was none.
        """
        return self._internal_errors

    def _report(self, error: BaseException, assignment: Assignment) -> None:
        # LR-161: reported: grantAccepted, gate close, grant, change, refresh-apply and cleanup
        # failures.
        if not isinstance(error, (LeaseError, External)):
            self._internal_errors += 1
        msg = error.message if isinstance(error, LeaseError) else SANITIZED
        self._emit(ReportError(assignment=assignment, message=msg))

    def _background(self, fut: Future[Any], assignment: Assignment) -> None:
        def cb() -> None:
            if fut.error is not None:
                self._report(fut.error, assignment)

        fut.add(cb)

    def _answer(self, fut: Future[Any], call_id: int) -> None:
        # LR-159: a call fails with the original error object, not a sanitized copy.
        def cb() -> None:
            err = fut.error
            if err is None:
                self._emit(new_call_done(call_id, None))
            else:
                msg = err.message if isinstance(err, LeaseError) else SANITIZED
                self._emit(new_call_done(call_id, msg))

        fut.add(cb)

    def _answer_value(self, fut: Future[Any], call_id: int) -> None:
        def cb() -> None:
            err = fut.error
            if err is None:
                self._emit(ProjectValueDone(call_id=call_id, result=fut.value))
            else:
                msg = err.message if isinstance(err, LeaseError) else SANITIZED
                self._emit(new_call_done(call_id, msg))

        fut.add(cb)

    def _prune_installs(self, st: Run) -> None:
        """Forget ``st``'s install records whose grant can no longer be read or installed."""
        keep: list[int] = []
        for cid in st.install_ids:
            rec = self._installs.get(cid)
            if rec is None:
                continue
            live = self._tasks.get(st.assignment.task_id) is st and (
                rec.installing()
                or (st.bundle is not None and st.bundle.grant_id == rec.granted.grant_id)
            )
            if live:
                keep.append(cid)
            else:
                del self._installs[cid]
        st.install_ids = tuple(keep)

    def _forget_installs(self, st: Run) -> None:
        """Forget every install record of a run that left the registry."""
        for cid in st.install_ids:
            self._installs.pop(cid, None)
        st.install_ids = ()

    # ------------------------------------------------------------------
    # Event handlers: one per event class, looked up in ``_HANDLERS``

    def _on_gate_done(self, ev: GateCallbackDone) -> None:
        self._sched.outcome(ev.cmd_id, True)

    def _on_gate_failed(self, ev: GateCallbackFailed) -> None:
        self._sched.outcome(ev.cmd_id, False)

    def _on_read_completed(self, ev: ReadCompleted) -> None:
        fut = self._take_io(ev.cmd_id, ReadParameters)
        if fut is not None:
            fut.resolve(ev)

    def _on_read_failed(self, ev: ReadFailed) -> None:
        fut = self._take_io(ev.cmd_id, ReadParameters)
        if fut is not None:
            fut.reject(ReadError(ev.access_denied is True))

    def _on_timer(self, ev: TimerFired) -> None:
        cb = self._timers.pop(ev.timer_id, None)
        if cb is not None:
            self._sched.spawn(cb())

    def _on_frame(self, ev: FrameReceived) -> None:
        value = ev.frame
        frame = value if isinstance(value, _FRAME_TYPES) else decode_frame(value)
        if isinstance(frame, DecodeError):
            return
        handler = _FRAME_HANDLERS.get(type(frame))
        if handler is None:
            handler = _handler_of(frame, _FRAME_HANDLERS)
        if handler is not None:
            handler(self, frame)

    def _on_send_failed(self, ev: SendFailed) -> None:
        # LR-014: a failed send of the pending op arms the retry; LR-104: a refresh's resolves
        # unavailable.
        cmd_id = ev.cmd_id
        for st in list(self._tasks.values()):
            if st.pending is not None and st.pending.send_cmd == cmd_id:
                cancel_pending(self, st)
                arm_retry(self, st)
                return
            for ref in list(st.refresh_by_op.values()):
                if ref.send_cmd == cmd_id:
                    settle_refresh(self, st, ref, unavailable_refresh(ref.op_id))
                    return

    def _on_start(self, ev: StartRun) -> None:
        task = self._sched.spawn(self._start_assignment(ev.task_id, ev.run_epoch, ev.recovery))
        self._answer(task.future, ev.call_id)

    def _on_close(self, ev: CloseRun) -> None:
        task = self._sched.spawn(self._close_assignment(ev.task_id, ev.run_epoch, ev.reason))
        self._answer(task.future, ev.call_id)

    def _on_bridge_authenticated(self, ev: BridgeAuthenticated) -> None:
        self._sched.spawn(self._bridge_authenticated())

    def _on_launch_fence_failed(self, ev: LaunchFenceFailed) -> None:
        self._sched.spawn(escalate_launch_fence(self, ev.task_id, ev.run_epoch))

    def _on_shutdown(self, ev: Shutdown) -> None:
        task = self._sched.spawn(self._shutdown())
        self._answer(task.future, ev.call_id)

    def _on_wait_cancelled(self, ev: WaitCancelled) -> None:
        st = self._waiter_run.pop(ev.call_id, None)
        if st is not None and ev.call_id in st.waiters:
            del st.waiters[ev.call_id]
            self._emit(CallDone(call_id=ev.call_id, error="aborted"))

    def _on_project_value_read(self, ev: ProjectValueRead) -> None:
        task = self._sched.spawn(read_project_value(self, ev))
        self._answer_value(task.future, ev.call_id)

    def _on_grant_hook_failed(self, ev: GrantHookFailed) -> None:
        # LR-019: reported once, while the grant is in flight or, once it
        # settled, before any other event (a grant refused before its
        # first read settles inside the handle() that accepted it).
        a = self._hooks.pop(ev.cmd_id, None)
        if a is None:
            a = self._settled_hooks.pop(ev.cmd_id, None)
        if a is not None:
            self._report(External(), a)

    # ------------------------------------------------------------------
    # Runs

    def _new_run(self, a: Assignment, needs_startup: bool) -> Run:
        return Run(assignment=a, phase=initial_phase(needs_startup), tail=self._sched.resolved())

    def _is_active(self, st: Run) -> bool:
        # LR-125: an ended run still registered ignores grants, stale frames, changes and refresh
        # results.
        return self._tasks.get(st.assignment.task_id) is st and st.phase is not ENDED

    def _usable(self, st: Run, now: int | None = None) -> bool:
        t = self._now if now is None else now
        b = st.bundle
        return bool(
            not st.gate_close_failed
            and st.gate_open
            and b is not None
            and b.expires_at > t
            and b.lease.manifest_revision >= st.min_revision
            and st.phase is USABLE
        )

    def _start_assignment(self, task_id: object, run_epoch: object, recovery: bool) -> Co[None]:
        """``startAssignment`` (LR-001–LR-009)."""
        # LR-003: a first start registers a waiting run, closes its gate "starting", then requests;
        # LR-005: a newer epoch ends the old run "superseded" synchronously first; LR-008: a start
        # of the same assignment only attempts a request (or joins a recovery).
        if not is_valid_assignment(task_id, run_epoch):
            raise LeaseError("invalid task assignment")
        assert isinstance(task_id, str)
        assert isinstance(run_epoch, int)
        a = new_assignment(task_id, run_epoch)
        current = self._tasks.get(task_id)
        while current is not None:
            if run_epoch < current.assignment.run_epoch:
                raise LeaseError("stale task assignment")
            if run_epoch == current.assignment.run_epoch:
                if current.phase is RECOVERING:
                    fut = yield from finish_startup(self, current)
                    yield fut
                    if current.gate_close_failed and self._is_active(current):
                        # Quirk Q1 (docs/registry.md): the reference leaves a
                        # run whose first close failed quarantined for good
                        # here; the port runs the "cleanup-failed" full
                        # cleanup the first start could not reach.
                        fut = yield from full_cleanup(self, current, "cleanup-failed")
                        yield fut
                elif current.phase is not ENDED:
                    request_lease(self, current)
                return
            yield from self._end_synchronously(current, "superseded")
            registered = self._tasks.get(task_id)
            if registered is None or registered is current:
                break
            # A start made from inside the "superseded" close callback
            # registered another run meanwhile (a reference quirk found by the
            # Q13: the reference overwrites it, so an older epoch
            # could replace a newer one and request and open for it). Decide
            # again against the run registered now: an older epoch fails as
            # "stale task assignment" (LR-002), a newer one supersedes it.
            # Test: test_LR_005_reentrant_newer_start_…
            current = registered
        needs_startup = current is not None or recovery
        st = self._new_run(a, needs_startup)
        if current is not None:
            st.startup = ("predecessor", current)
        elif recovery:
            st.startup = ("recovery", None)
        if current is not None:
            self._forget_installs(current)
        self._tasks[task_id] = st
        closed = yield from self._close_gate(st, "recovery" if recovery else "starting")
        if needs_startup:
            fut = yield from finish_startup(self, st)
            yield fut
            if not closed:
                fut = yield from full_cleanup(self, st, "cleanup-failed")
                yield fut
        elif not closed:
            fut = yield from full_cleanup(self, st, "cleanup-failed")
            yield fut
        else:
            request_lease(self, st)

    def _bridge_authenticated(self) -> Co[None]:
        """``bridgeAuthenticated`` (LR-010)."""
        for st in list(self._tasks.values()):
            if st.phase is ENDED:
                continue
            cancel_pending(self, st)
            request_lease(self, st)
        return
        yield

    # ------------------------------------------------------------------
    # Gate

    def _close_gate(self, st: Run, reason: GateReason) -> Co[bool]:
        """``#closeGate``: clear the flag, call the gate; a failure quarantines (LR-069)."""
        st.gate_open = False
        cid = self._id()
        self._emit(new_close_gate(cid, st.assignment, reason))
        ok = yield Sync(cid)
        if ok:
            return True
        st.gate_close_failed = True
        self._report(External(), st.assignment)
        return False

    def _may_open(self, st: Run, bundle: Bundle, generation: int) -> bool:
        """``#mayOpenGate`` (LR-060)."""
        # LR-135: a committed grant waiting on its predecessor's readers opens nothing after a
        # stop, supersession, expiry, floor raise, full cleanup or another hold.
        return bool(
            self._is_active(st)
            and st.phase not in (RECOVERING, LOST)
            and st.gate_holds == 0
            and st.full_cleanup is None
            and not st.gate_close_failed
            and st.bundle is bundle
            and st.generation == generation
            and bundle.lease.manifest_revision >= st.min_revision
            and bundle.expires_at > self._now
        )

    def _open_gate(self, st: Run, bundle: Bundle, generation: int) -> Co[None]:
        """``#openGate`` (LR-061, LR-063, LR-064)."""
        if not self._may_open(st, bundle, generation):
            return
        cid = self._id()
        self._emit(new_open_gate(cid, st.assignment, bundle.view))
        ok = yield Sync(cid)
        if not ok:
            yield from self._close_gate(st, "cleanup-failed")
            raise External()
        if not self._may_open(st, bundle, generation):
            if not (yield from self._close_gate(st, "cleanup-failed")):
                raise Unavailable("task gate reopened across a fence and could not be closed")
            return
        st.gate_open = True
        enter(st, USABLE)
        for call_id in st.waiters:
            self._waiter_run.pop(call_id, None)
            self._emit(WaiterResolved(call_id=call_id, view=bundle.view))
        st.waiters.clear()
        apply_announced(self, st)

    def _release_hold(self, st: Run) -> Co[None]:
        """``#releaseHold`` (LR-066, LR-067)."""
        st.gate_holds -= 1
        if st.gate_holds > 0 or st.gate_open or st.bundle is None:
            return
        yield from self._open_gate(st, st.bundle, st.generation)

    def _release(self, st: Run, hold: Hold) -> Co[None]:
        if not hold.holding:
            return
        hold.holding = False
        yield from self._release_hold(st)

    # ------------------------------------------------------------------
    # Ending

    def _end_synchronously(self, st: Run, reason: GateReason) -> Co[None]:
        """``#endSynchronously`` (LR-121)."""
        # LR-109: a run's pending refreshes resolve unavailable, timers cancelled; LR-130: an
        # install in flight is not interrupted (its isCurrent turns false).
        enter(st, ENDED)
        yield from self._close_gate(st, reason)
        cancel_pending(self, st)
        for name in ("renewal_timer", "retry_timer", "expiry_timer", "floor_timer"):
            self._clear_timer(getattr(st, name))
            setattr(st, name, None)
        self._clear_timer(st.cleanup_retry_timer)
        st.cleanup_retry_timer = None
        if st.bundle is not None:
            seal(st.bundle)
        for ref in list(st.refresh_by_op.values()):
            settle_refresh(self, st, ref, unavailable_refresh(ref.op_id))
        for call_id in st.waiters:
            self._waiter_run.pop(call_id, None)
            self._emit(CallDone(call_id=call_id, error="task assignment ended"))
        st.waiters.clear()

    def _close_assignment(self, task_id: str, run_epoch: int, reason: str) -> Co[None]:
        """``closeAssignment`` (LR-119–LR-124)."""
        # LR-120: reasons stop (default), park, teardown, superseded map to their gate and cleanup
        # reasons.
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch:
            return
        gate: GateReason = {
            "stop": "stopped",
            "park": "parked",
            "teardown": "teardown",
        }.get(reason, "superseded")  # type: ignore[assignment]
        # Quirk Q15 (docs/registry.md): the reference removes the ended run
        # when the first of several closes of it has cleaned up, while a
        # later close's cleanup of the same run still drains; a same-epoch
        # start then registered a fresh run that requested and opened its
        # gates before that cleanup ended. The ended run stays registered
        # (a same-epoch start is then a no-op, LR-123) until the last close
        # of it has settled. Test: test_LR_123_an_ended_run_stays_…
        st.closes_in_flight += 1
        try:
            yield from self._end_synchronously(st, gate)
            yield from complete_ended_cleanup(self, st, gate)
        finally:
            st.closes_in_flight -= 1
        if st.closes_in_flight == 0 and self._tasks.get(task_id) is st:
            del self._tasks[task_id]
            self._forget_installs(st)

    def _shutdown(self) -> Co[None]:
        """``shutdown`` (LR-126–LR-128)."""
        # LR-127: completes once the bundles of every removed run were destroyed after their reads.
        states = list(self._tasks.values())
        self._tasks.clear()
        for st in states:
            self._forget_installs(st)
        for st in states:
            if st.phase is not ENDED:
                yield from self._end_synchronously(st, "shutdown")
        futs = [destroy_bundle(self, st.bundle) for st in states if st.bundle is not None]
        yield self._sched.gather(futs)

    def _wait_until_usable(self, ev: WaitUsable) -> None:
        """``waitUntilUsable`` (LR-141, LR-142)."""
        st = self._tasks.get(ev.task_id)
        if st is not None and st.assignment.run_epoch == ev.run_epoch and self._usable(st):
            assert st.bundle is not None
            self._emit(WaiterResolved(call_id=ev.call_id, view=st.bundle.view))
            return
        if st is None or st.assignment.run_epoch != ev.run_epoch or st.phase is ENDED:
            self._emit(CallDone(call_id=ev.call_id, error="task assignment is not active"))
            return
        st.waiters[ev.call_id] = None
        self._waiter_run[ev.call_id] = st


_FRAME_TYPES: Final = (
    LeaseGrant,
    LeaseUnavailable,
    LeaseDeny,
    LeaseStale,
    CredentialChanged,
    CredentialRefreshResult,
    LeaseRequest,
    CredentialRefresh,
)

# ---------------------------------------------------------------------------
# Dispatch tables

#: A handler: called with the registry and one event (or frame) of its class.
_Handler = Callable[[LeaseRegistry, Any], None]


def _completion(kind: type[Command], ok: bool) -> _Handler:
    """The handler of a cleanup's or an install's outcome: settles that ``kind`` command."""

    def settle(m: LeaseRegistry, ev: Any) -> None:
        fut = m._take_io(ev.cmd_id, kind)
        if fut is not None:
            if ok:
                fut.resolve(None)
            else:
                fut.reject(External())

    return settle


def _spawning(handler: Callable[[LeaseRegistry, Any], Co[None]]) -> _Handler:
    """A frame handler that runs the coroutine ``handler`` as a task (its own failure path)."""

    def spawn(m: LeaseRegistry, frame: Any) -> None:
        m._sched.spawn(handler(m, frame))

    return spawn


def _handler_of(value: object, table: dict[type[Any], _Handler]) -> _Handler | None:
    """The handler of ``value`` whose exact type is not in ``table``.

    The first entry, in the table's order, whose class ``value`` is an
    instance of (an event or frame of a subclass is handled as its class),
    or ``None``: an unknown event or frame is ignored.
    """
    for cls, handler in table.items():
        if isinstance(value, cls):
            return handler
    return None


#: The handler of each event class of :mod:`leasegate.core.registry`: ``handle``
#: looks the event's type up here (``_handler_of`` for a subclass); an event
#: of any other type is ignored.
_HANDLERS: Final[dict[type[Event], _Handler]] = {
    GateCallbackDone: LeaseRegistry._on_gate_done,
    GateCallbackFailed: LeaseRegistry._on_gate_failed,
    ReadCompleted: LeaseRegistry._on_read_completed,
    ReadFailed: LeaseRegistry._on_read_failed,
    CleanupFinished: _completion(RunCleanup, ok=True),
    InstallFinished: _completion(RunInstall, ok=True),
    CleanupFailed: _completion(RunCleanup, ok=False),
    InstallFailed: _completion(RunInstall, ok=False),
    TimerFired: LeaseRegistry._on_timer,
    FrameReceived: LeaseRegistry._on_frame,
    SendFailed: LeaseRegistry._on_send_failed,
    StartRun: LeaseRegistry._on_start,
    CloseRun: LeaseRegistry._on_close,
    BridgeAuthenticated: LeaseRegistry._on_bridge_authenticated,
    LaunchFenceFailed: LeaseRegistry._on_launch_fence_failed,
    Shutdown: LeaseRegistry._on_shutdown,
    RefreshRequested: request_refresh,
    WaitUsable: LeaseRegistry._wait_until_usable,
    WaitCancelled: LeaseRegistry._on_wait_cancelled,
    ProjectValueRead: LeaseRegistry._on_project_value_read,
    GrantHookFailed: LeaseRegistry._on_grant_hook_failed,
}

#: The handler of each frame class the registry answers (a ``FrameReceived``);
#: the requests it sends itself, and any other frame, are ignored.
_FRAME_HANDLERS: Final[dict[type[Any], _Handler]] = {
    LeaseGrant: _spawning(handle_grant),
    LeaseUnavailable: handle_unavailable,
    LeaseDeny: _spawning(handle_denied),
    LeaseStale: _spawning(handle_stale),
    CredentialChanged: _spawning(handle_changed),
    CredentialRefreshResult: _spawning(handle_refresh_result),
}
