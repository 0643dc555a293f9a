"""Starts, launch-ready waits, task-up holds, abandon and close (RT-011 … RT-056).

Functions of the runtime (``rt``, a :class:`~._machine.CredentialRuntime`):
a start is admitted or refused at once (``BeginStart``), a launch-ready wait
(the coroutine :func:`wait`) waits for the start's ``StartRun`` and then the
registry's usable view under its own deadline, a hold is taken at once or
refused, and a close of a run is the registry's ``CloseRun`` (the coroutine
:func:`_close_run`), joined per ``(task, run, reason)`` by the coroutine
:func:`close_assignment`; ``AwaitLaunchReady`` (:func:`await_launch`) and
``AbandonStart`` (:func:`abandon`) are coroutines too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from .._base import Command
from .._sched import Co
from ..registry import (
    Assignment,
    CallDone,
    CloseRun,
    StartRun,
    WaitCancelled,
    WaiterResolved,
    WaitUsable,
)
from . import _common
from ._common import CLU_DEADLINE, CLU_INTERRUPTED, CLU_NEWER, Done, prefix
from ._vocab import Abort, Answer, CredentialFailure, Failed, GitHold, HoldInfo, Log

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = [
    "STARTED",
    "Hold",
    "Outcome",
    "Start",
    "Wait",
    "abandon",
    "abort_hold",
    "abort_start",
    "acquire_hold",
    "await_launch",
    "begin_start",
    "cancel_usable",
    "close_assignment",
    "end_start",
    "interrupt_tokens",
    "live",
    "release_hold",
    "wait",
    "wait_end",
]


class Start:
    """A start token (``beginStart``'s): its run, abort reason and ``StartRun`` outcome."""

    __slots__ = ("assignment", "id", "listeners", "reason", "released_holds", "startup")

    def __init__(self, sid: int, a: Assignment) -> None:
        self.id = sid
        self.assignment = a
        self.reason: CredentialFailure | None = None
        #: None: pending; True: resolved; a failure: rejected.
        self.startup: bool | CredentialFailure | None = None
        #: Called once ``startup`` settles (made by the first :meth:`listen`).
        self.listeners: list[Callable[[], None]] | None = None
        #: Holds of this start released before any abort: their signal still
        #: follows the start's (RT-041, as ``AbortSignal.any`` does), until
        #: the start ends (made by the first release).
        self.released_holds: list[Hold] | None = None

    def listen(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once ``startup`` settles (the caller checked it has not)."""
        if self.listeners is None:
            self.listeners = [fn]
        else:
            self.listeners.append(fn)


class Hold:
    """A task-up hold: its run, start, Git hold and signal reason."""

    __slots__ = ("git", "id", "reason", "released", "run", "start", "waiters")

    def __init__(self, hid: int, run: int, start: Start, git: GitHold) -> None:
        self.id = hid
        self.run = run
        self.start = start
        self.git = git
        self.reason: CredentialFailure | None = None
        self.released = False
        self.waiters: list[Callable[[], None]] = []


class Wait:
    """A launch-ready wait: its start, deadline timer, registry call and resumption."""

    __slots__ = ("end", "id", "reg_cid", "start", "timer")

    def __init__(self, wid: int, start: Start) -> None:
        self.id = wid
        self.start = start
        self.timer = 0
        self.reg_cid: int | None = None
        #: Resumes the wait's coroutine (with :data:`STARTED` or its outcome) while it
        #: waits; ``None`` once it ended.
        self.end: Callable[[object], None] | None = None


#: What a launch wait's startup phase is resumed with when ``StartRun`` succeeded.
STARTED = object()

#: A launch wait's outcome: the usable view and ``None``, or ``None`` and the failure.
Outcome = tuple[object, "CredentialFailure | None"]


# ----------------------------------------------------------------------
# Starts


def live(rt: CredentialRuntime, st: Start) -> bool:
    """Whether ``st`` is current: the task's newest, not aborted, not ended, not shut down."""
    # RT-020: only the token instance beginStart returned is live; a look-alike is refused.
    if rt._shut:
        return False
    rec = rt._tasks.get(st.assignment.task_id)
    if rec is None or rec.newest is not st or st.reason is not None:
        return False
    return st.id in rec.starts


def begin_start(
    rt: CredentialRuntime, task: str, run: int, recovery: bool
) -> Start | CredentialFailure:
    """``beginStart``: admit run ``run`` of ``task`` (a new start token) or refuse it."""
    # RT-011: a run below the task's begun run is refused; RT-012: the same run or a newer one
    # is admitted and becomes the floor; RT-014: the registry's startAssignment is called
    # exactly once; RT-015: the token holds an immutable copy of the assignment.
    # RT-016: a recovery of run R below N ends, of run N yields or is kept by the start kind.
    from . import _recovery

    if rt._shut:
        return CredentialFailure.interrupted("shutdown")
    if type(task) is not str or type(run) is not int:
        return CredentialFailure(message="invalid task assignment")
    rec = rt._rec(task)
    if (run if rec.floor is None else rec.floor) > run:
        return CredentialFailure(message=CLU_NEWER)
    rec.floor = run
    interrupt_tokens(rt, task, None, None)
    _recovery.end_recovery(rt, task, run - 1)
    if not recovery:
        _recovery.yield_recovery(rt, task, run)
    st = Start(rt._id(), Assignment(task, run))
    if not rec.starts:
        rec.starts_seq = rt._next_seq()
    rec.starts[st.id] = st
    rt._all_starts[st.id] = st
    rec.newest = st
    if rec.assigned is None:
        rec.assigned_seq = rt._next_seq()
    rec.assigned = run
    rt._sync_phase(rec)
    wid = rt._track("startup")

    def started(cmd: Command) -> None:
        rt._untrack(wid)
        err = cmd.error if isinstance(cmd, CallDone) else None
        st.startup = True if err is None else CredentialFailure(message=err)
        for fn in list(st.listeners or ()):
            fn()

    rt._reg_call(
        lambda cid: StartRun(
            now_ms=rt._now, call_id=cid, task_id=task, run_epoch=run, recovery=recovery
        ),
        started,
    )
    return st


def interrupt_tokens(
    rt: CredentialRuntime, task: str, exact: int | None, below: int | None
) -> None:
    """Abort the task's unended start tokens selected by ``exact``/``below``."""
    # RT-013: an admitted start aborts every unended token of the task, same run included;
    # RT-024 (exact) and RT-025 (below) select the tokens interruptStarts aborts.
    rec = rt._tasks.get(task)
    if rec is None:
        return
    for st in list(rec.starts.values()):
        run = st.assignment.run_epoch
        if exact is not None and run != exact:
            continue
        if below is not None and run >= below:
            continue
        abort_start(rt, st, CredentialFailure.interrupted("takeover"))


def abort_start(rt: CredentialRuntime, st: Start, reason: CredentialFailure) -> None:
    """Abort a start's signal (first reason wins): its waits, and its holds with it."""
    if st.reason is not None:
        return
    st.reason = reason
    rt._emit(Abort(kind="start", id=st.id, reason=reason))
    for w in list(rt._waits.values()):
        if w.start is st:
            wait_end(rt, w, None, reason)
    rec = rt._tasks.get(st.assignment.task_id)
    for h in list(rec.holds.values()) if rec is not None else ():
        if h.start is st:
            abort_hold(rt, h, reason)
    # RT-041: a released hold's signal still follows its start's.
    released, st.released_holds = st.released_holds, None
    for h in released or ():
        abort_hold(rt, h, reason)


def end_start(rt: CredentialRuntime, st: Start) -> None:
    """``endStart``: forget the start (its record; not its run)."""
    st.released_holds = None
    rec = rt._tasks.get(st.assignment.task_id)
    rt._all_starts.pop(st.id, None)
    if rec is None:
        return
    if rec.newest is st:
        rec.newest = None
    rec.starts.pop(st.id, None)


# ----------------------------------------------------------------------
# Launch-ready wait


def await_launch(rt: CredentialRuntime, call_id: int, start_id: int) -> Co[None]:
    """``waitForLaunchReady``: answer ``call_id`` with the usable view or the failure."""
    st = rt._all_starts.get(start_id)
    if st is None or not live(rt, st):
        rt._emit(Failed(call_id=call_id, error=CredentialFailure(message=CLU_INTERRUPTED)))
        return
    w = Wait(rt._id(), st)
    view, err = yield from wait(rt, w)
    if err is None:
        rt._emit(Answer(call_id=call_id, value=view))
    else:
        rt._emit(Failed(call_id=call_id, error=err))
    cancel_usable(rt, w)


def wait(rt: CredentialRuntime, w: Wait) -> Co[Outcome]:
    """Wait for ``w.start``'s startup, then its usable view, under the launch deadline.

    Returns the outcome once :func:`wait_end` ended the wait; the caller acts on
    it, then calls :func:`cancel_usable` (the registry's wait is cancelled after).
    """
    # RT-029: the deadline rejects a wait in either phase; RT-030: the wait does not wait for
    # an unsettled startup; RT-031: a startup error rejects the wait unwrapped; RT-032: after
    # the startup, registry.waitUntilUsable with the wait's own abort.
    rt._waits[w.id] = w
    w.timer = rt._set_timer(
        rt._launch_ms,
        lambda: wait_end(rt, w, None, CredentialFailure(message=CLU_DEADLINE)),
    )
    if w.start.startup is not True:
        got = yield from rt._call(functools.partial(_startup, rt, w))
        if got is not STARTED:
            return cast(Outcome, got)
    got = yield from rt._call(functools.partial(_usable, rt, w))
    return cast(Outcome, got)


def _startup(rt: CredentialRuntime, w: Wait, resume: Callable[[object], None]) -> None:
    # Phase "startup": resumed with STARTED, or ended by a startup failure or wait_end.
    st = w.start
    w.end = resume

    def settled() -> None:
        if w.end is not resume:
            return  # the wait ended meanwhile
        if st.startup is True:
            w.end = None
            resume(STARTED)
        elif isinstance(st.startup, CredentialFailure):
            wait_end(rt, w, None, st.startup)

    if st.startup is None:
        st.listen(settled)
    else:
        settled()


def _usable(rt: CredentialRuntime, w: Wait, resume: Callable[[object], None]) -> None:
    # Phase "usable": the registry's WaitUsable, until wait_end ends the wait.
    w.end = resume
    a = w.start.assignment

    def answered(cmd: Command) -> None:
        w.reg_cid = None
        if w.id not in rt._waits:
            return
        if isinstance(cmd, WaiterResolved):
            if live(rt, w.start):
                wait_end(rt, w, cmd.view, None)
            else:
                wait_end(rt, w, None, CredentialFailure(message=CLU_INTERRUPTED))
        elif isinstance(cmd, CallDone):
            wait_end(rt, w, None, CredentialFailure(message=cmd.error or CLU_INTERRUPTED))

    cid = rt._id()
    w.reg_cid = cid
    rt._reg_calls[cid] = answered
    rt._reg(WaitUsable(now_ms=rt._now, call_id=cid, task_id=a.task_id, run_epoch=a.run_epoch))


def wait_end(rt: CredentialRuntime, w: Wait, view: object, err: CredentialFailure | None) -> None:
    """Settle a launch wait once: clear its deadline, resume its coroutine with the outcome."""
    # RT-033: an interrupted token rejects its wait with the token's reason; RT-035: a settled
    # wait clears its deadline and leaves the tracked set.
    if rt._waits.pop(w.id, None) is None:
        return
    rt._clear_timer(w.timer)
    end, w.end = w.end, None
    if end is not None:
        end((view, err))


def cancel_usable(rt: CredentialRuntime, w: Wait) -> None:
    """Cancel an ended wait's registry ``WaitUsable``, if it is still outstanding."""
    if w.reg_cid is not None:
        cid, w.reg_cid = w.reg_cid, None
        rt._reg_calls.pop(cid, None)
        rt._reg(WaitCancelled(now_ms=rt._now, call_id=cid))


# ----------------------------------------------------------------------
# Holds


def acquire_hold(rt: CredentialRuntime, call_id: int, start_id: int) -> None:
    """``tryAcquireTaskUpHold``: answer ``HoldInfo``, ``None`` or the Git failure."""
    # RT-038: a run that is not the task's open run gets no hold; RT-039: nor one without a
    # current view; RT-042: two acquisitions are two independent holds.
    st = rt._all_starts.get(start_id)
    if st is None or not live(rt, st):
        rt._emit(Answer(call_id=call_id, value=None))
        return
    a = st.assignment
    rec = rt._rec(a.task_id)
    if rec.open_run != a.run_epoch:
        rt._emit(Answer(call_id=call_id, value=None))
        return
    view = rt.registry.current_view(a.task_id, a.run_epoch, rt._now)
    if view is None:
        rt._emit(Answer(call_id=call_id, value=None))
        return
    try:
        git = rt._person.hold_git(a)
    except Exception as e:  # noqa: BLE001 - a port's failure is reported
        rt._emit(Failed(call_id=call_id, error=_common.failure(e)))
        return
    h = Hold(rt._id(), a.run_epoch, st, git)
    if not rec.holds:
        rec.holds_seq = rt._next_seq()
    rec.holds[h.id] = h
    rt._all_holds[h.id] = h
    rt._work[h.id] = "hold"
    rt._emit(
        Answer(call_id=call_id, value=HoldInfo(hold_id=h.id, assignment=a, view=view, git=git))
    )


def abort_hold(rt: CredentialRuntime, h: Hold, reason: CredentialFailure) -> None:
    """Abort a hold's signal (first reason wins)."""
    if h.reason is not None:
        return
    h.reason = reason
    rt._emit(Abort(kind="hold", id=h.id, reason=reason))


def release_hold(rt: CredentialRuntime, hold_id: int) -> None:
    """``TaskUpHold.release``: idempotent; releases the Git hold; wakes its joiners."""
    # RT-044: settled() and the shutdown drain wait for a hold's release.
    h = rt._all_holds.get(hold_id)
    if h is None or h.released:
        return
    h.released = True
    del rt._all_holds[h.id]
    if h.reason is None and rt._all_starts.get(h.start.id) is h.start:
        if h.start.released_holds is None:
            h.start.released_holds = [h]
        else:
            h.start.released_holds.append(h)
    try:
        h.git.release()
    except Exception:  # noqa: BLE001 - a port's failure is its own
        rt._emit(Log(message=prefix(h.start.assignment) + "git hold release failed"))
    rec = rt._tasks.get(h.start.assignment.task_id)
    if rec is not None:
        rec.holds.pop(h.id, None)
    rt._untrack(h.id)
    for fn in h.waiters:
        fn()


# ----------------------------------------------------------------------
# Abandon and close


def abandon(rt: CredentialRuntime, call_id: int, start_id: int, hold_id: int | None) -> Co[None]:
    """``abandonStart``: release the hold, end the start, close its run if it is current."""
    # RT-049: a superseded or ended token's abandon releases the hold and closes nothing.
    if hold_id is not None:
        release_hold(rt, hold_id)
    st = rt._all_starts.get(start_id)
    if st is None:
        rt._emit(Answer(call_id=call_id))
        return
    task = st.assignment.task_id
    rec = rt._rec(task)
    closes = rec.newest is st and st.id in rec.starts
    end_start(rt, st)
    if not closes:
        rt._emit(Answer(call_id=call_id))
        return
    err = yield from close_assignment(rt, task, st.assignment.run_epoch, "stop")
    if err is None:
        rt._emit(Answer(call_id=call_id))
    else:
        rt._emit(Failed(call_id=call_id, error=err))


def close_assignment(
    rt: CredentialRuntime, task: str, run: int, reason: str
) -> Co[CredentialFailure | None]:
    """``closeAssignment``: the registry's ``CloseRun``, joined per ``(task, run, reason)``.

    Returns the close's failure, or ``None``. Every caller joins the one close
    under way (:func:`_close_run`), the first caller first.
    """
    # RT-051: a close of the same (task, run, reason) joins the one under way; RT-052: another
    # reason makes a separate close; RT-053: a settled close is made again; RT-054: a close of
    # run N ends a recovery of run R <= N; RT-055: after shutdown it only joins; RT-056:
    # closing the begun run drops its record; RT-137: after shutdown no cleanup starts.
    from . import _recovery

    _recovery.end_recovery(rt, task, run)
    key = (task, run, reason)
    under = rt._closing.get(key)
    if under is not None:
        err = yield from rt._call(under.append)
        return cast("CredentialFailure | None", err)
    if rt._shut:
        return None
    rec = rt._rec(task)
    if rec.assigned == run:
        rec.assigned = None
        rt._sync_phase(rec)
    joiners: list[Done] = []
    rt._closing[key] = joiners

    def start(resume: Done) -> None:
        joiners.append(resume)
        rt._spawn(_close_run(rt, key, joiners))

    err = yield from rt._call(start)
    return cast("CredentialFailure | None", err)


def _close_run(rt: CredentialRuntime, key: tuple[str, int, str], joiners: list[Done]) -> Co[None]:
    # The registry's CloseRun, tracked; its outcome goes to every joiner in join order.
    task, run, reason = key
    wid = rt._track("close")
    cmd = yield from rt._call(
        lambda resume: rt._reg_call(
            lambda cid: CloseRun(
                now_ms=rt._now,
                call_id=cid,
                task_id=task,
                run_epoch=run,
                reason=reason,  # type: ignore[arg-type]
            ),
            resume,
        )
    )
    rt._untrack(wid)
    if rt._closing.get(key) is joiners:
        del rt._closing[key]
    err = cmd.error if isinstance(cmd, CallDone) else None
    failure = None if err is None else CredentialFailure(message=err)
    for fn in joiners:
        fn(failure)
