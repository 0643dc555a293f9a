"""Recovery: ``Recover`` at boot, recovered runs and their setup (RT-102 … RT-116).

``Recover(owed, admitted)`` (:func:`recover`, a coroutine) runs one whole-task
cleanup per owed task, attempts all, and answers with the first failure.
``ResumeRecovered`` registers a recovery (:class:`Recovery`) whose start is
attempted and retried with backoff while it is current (:func:`attempt`); its
setup runs once its gate opens (:func:`run_recovered_setup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._sched import Co
from ..registry import Assignment
from . import _cleanup, _starts
from ._common import Parts, is_run, prefix
from ._vocab import (
    RECOVERY_RETRY_MAX_MS,
    Abort,
    Answer,
    CredentialFailure,
    Failed,
    Log,
    OwedCleanup,
    Recover,
    RunSetup,
    TaskCleanupRequest,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._machine import CredentialRuntime

__all__ = [
    "Recovery",
    "abort_recovery",
    "attempt",
    "end_recovery",
    "recover",
    "resume",
    "run_recovered_setup",
    "yield_recovery",
]


class Recovery:
    """A recovered run (``resumeRecovered``): its signal, retry timer, setup state."""

    __slots__ = (
        "attempts",
        "has_setup",
        "id",
        "reason",
        "retry",
        "run",
        "running",
        "waiters",
        "yielded",
    )

    def __init__(self, rid: int, run: int, has_setup: bool) -> None:
        self.id = rid
        self.run = run
        self.has_setup = has_setup
        self.reason: CredentialFailure | None = None
        self.retry: int | None = None
        self.running: int | None = None
        self.attempts = 0
        self.yielded = False
        self.waiters: list[Callable[[], None]] = []


def recover(rt: CredentialRuntime, ev: Recover) -> Co[None]:
    """``recover``: a whole-task cleanup per owed task; answer once all settled."""
    if rt._shut:
        rt._emit(Failed(call_id=ev.call_id, error=CredentialFailure.interrupted("shutdown")))
        return
    admitted: dict[str, int] = {}
    pairs = ev.admitted if isinstance(ev.admitted, (tuple, list)) else ()
    for pair in pairs:
        if isinstance(pair, tuple) and len(pair) == 2 and type(pair[0]) is str and is_run(pair[1]):
            admitted[pair[0]] = pair[1]
    tasks: dict[str, int] = {}
    rows = ev.owed if isinstance(ev.owed, (tuple, list)) else ()
    for row in rows:
        if (
            not isinstance(row, OwedCleanup)
            or type(row.task_id) is not str
            or not is_run(row.run_epoch)
            or type(row.reason) is not str
        ):
            continue
        rt._rec(row.task_id).owed[row.run_epoch] = True
        tasks[row.task_id] = max(tasks.get(row.task_id, row.run_epoch), row.run_epoch)
    wid = rt._track("recover")
    order = list(tasks)
    call_id = ev.call_id
    err: CredentialFailure | None = None
    if order:

        def start(done: Callable[[CredentialFailure | None], None]) -> None:
            parts = Parts(order, done)
            for task in order:
                run = max(tasks[task], admitted.get(task, 0))
                req = TaskCleanupRequest(
                    task_id=task,
                    run_epoch=run,
                    reason="recovery",
                    credential_ids=None,
                    remove_files_session=rt._kind == "task-machine",
                )
                _cleanup.cleanup(rt, req, lambda e, t=task: parts.fill(t, e))  # type: ignore[misc]

        err = yield from rt._until(start)
    rt._untrack(wid)
    if err is None:
        rt._emit(Answer(call_id=call_id))
    else:
        rt._emit(Failed(call_id=call_id, error=err))


def abort_recovery(rt: CredentialRuntime, rec: Recovery) -> None:
    """Abort a recovery's signal (first reason wins)."""
    if rec.reason is None:
        rec.reason = CredentialFailure.interrupted("takeover")
        rt._emit(Abort(kind="recovery", id=rec.id, reason=rec.reason))


def end_recovery(rt: CredentialRuntime, task: str, through: int) -> None:
    """End the task's recovery if its run is ``<= through``."""
    # RT-110: an ended recovery is aborted (first reason wins), its retry cleared, its setup
    # discarded.
    t = rt._tasks.get(task)
    rec = None if t is None else t.recovery
    if t is None or rec is None or rec.run > through:
        return
    abort_recovery(rt, rec)
    rt._clear_timer(rec.retry)
    rec.retry = None
    rec.has_setup = False
    if rec.running is None:
        t.recovery = None


def yield_recovery(rt: CredentialRuntime, task: str, run: int) -> None:
    """An ordinary start of the recovery's run: the recovery yields."""
    # RT-109: an ordinary start of the recovery's run clears its retry; the recovery yields.
    t = rt._tasks.get(task)
    rec = None if t is None else t.recovery
    if rec is None or rec.run != run:
        return
    rec.yielded = True
    rt._clear_timer(rec.retry)
    rec.retry = None


def _recovering(rt: CredentialRuntime, task: str, rec: Recovery) -> bool:
    t = rt._tasks.get(task)
    return (
        not rt._shut
        and rec.reason is None
        and not rec.yielded
        and t is not None
        and t.recovery is rec
    )


def resume(rt: CredentialRuntime, task: str, run: int, has_setup: bool) -> None:
    """``resumeRecovered``: register a recovery with 0 attempts and attempt its start."""
    # RT-102: resumeRecovered registers a recovery with 0 attempts and begins its start.
    if rt._shut:
        return
    t = rt._rec(task)
    prev = t.recovery
    if prev is not None:
        end_recovery(rt, task, prev.run)
        if prev.running is not None:
            t.replaced.append(prev)
    rec = Recovery(rt._id(), run, has_setup)
    if t.recovery is None:
        t.recovery_seq = rt._next_seq()
    t.recovery = rec
    rt._start(attempt(rt, task, run, rec))


def attempt(rt: CredentialRuntime, task: str, run: int, rec: Recovery) -> Co[None]:
    """One attempt of a recovered start: wait for launch-ready, or retry with backoff."""
    # RT-104: a refused recovery start is logged, no retry; RT-105: it waits for launch-ready
    # and ends its token; RT-107: a startup failure after the recovery ended only ends the
    # token; RT-108: a retry timer makes a fresh attempt while current; RT-116: the recovery
    # outlives its wait's deadline.
    if not _recovering(rt, task, rec):
        return
    r = _starts.begin_start(rt, task, run, True)
    if isinstance(r, CredentialFailure):
        rt._emit(Log(message=prefix(Assignment(task, run)) + "no recovered start: " + r.message))
        return
    st = r
    wid = rt._track("recovery-attempt")
    if st.startup is None:
        yield from rt._call(lambda resume: st.listen(lambda: resume(None)))
    if st.startup is True:
        w: _starts.Wait | None = None
        if _starts.live(rt, st):
            w = _starts.Wait(rt._id(), st)
            yield from _starts.wait(rt, w)
        _starts.end_start(rt, st)
        rt._untrack(wid)
        if w is not None:
            _starts.cancel_usable(rt, w)
        return
    _starts.end_start(rt, st)
    rt._untrack(wid)
    if st.reason is not None or not _recovering(rt, task, rec):
        return
    delay = min(RECOVERY_RETRY_MAX_MS, rt._retry_base * 2**rec.attempts)
    rec.attempts += 1

    def fire() -> None:
        rec.retry = None
        rt._start(attempt(rt, task, run, rec))

    rec.retry = rt._set_timer(delay, fire)


def run_recovered_setup(rt: CredentialRuntime, a: Assignment) -> None:
    """After a gate open: a current recovery of that run runs its setup once (``RunSetup``)."""
    # RT-113: a recovery without setup is done at its gate open; RT-114: another run's open, an
    # ended recovery or a setup already run runs nothing; RT-115: a failing setup is logged and
    # nothing propagates.
    t = rt._tasks.get(a.task_id)
    rec = None if t is None else t.recovery
    if (
        t is None
        or rec is None
        or rec.run != a.run_epoch
        or rec.running is not None
        or rec.reason is not None
    ):
        return
    rt._clear_timer(rec.retry)
    rec.retry = None
    if not rec.has_setup:
        t.recovery = None
        return
    rec.has_setup = False
    wid = rt._track("setup")

    def settled(err: CredentialFailure | None) -> None:
        if err is not None:
            rt._emit(Log(message=prefix(a) + "recovered runtime setup failed: " + err.message))
        rec.running = None
        if t.recovery is rec:
            t.recovery = None
        if rec in t.replaced:
            t.replaced.remove(rec)
        rt._untrack(wid)
        for fn in rec.waiters:
            fn()

    cid = rt._id()
    rec.running = cid
    rt._cont[cid] = settled
    rt._emit(RunSetup(cmd_id=cid, task_id=a.task_id, run_epoch=a.run_epoch, recovery_id=rec.id))
