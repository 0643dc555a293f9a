"""Shutdown: the synchronous steps, the drain in rounds, the bound (RT-129 … RT-137).

:func:`shutdown` performs the reference's synchronous steps in order (the
registry's shutdown, every begun run closed, waits, starts and holds
aborted, the scrub), arms the drain's bound and starts :func:`drain`, a
coroutine: once the registry's shutdown answered, rounds of the consumers'
``drain`` joined with the work tracked at the round's start, until no work is
left (:func:`drain_check`, run at the end of every ``handle``, resumes it);
:func:`finish` answers every ``RuntimeShutdown`` call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._base import Command
from .._sched import Co
from ..registry import Shutdown
from ..replica import DropAll
from . import _install, _recovery, _starts
from ._phases import Phase, enter
from ._vocab import Answer, ConsumerWork, CredentialFailure

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = ["drain", "drain_check", "finish", "shutdown"]


def shutdown(rt: CredentialRuntime, call_id: int) -> None:
    """``shutdown``: the synchronous steps now; ``call_id`` is answered when the drain ends."""
    # RT-129: the runtime is shut down when the call returns; RT-130: its synchronous steps in
    # order; RT-132: a hold fenced by a close keeps its first reason.
    rt._shutdown_calls.append(call_id)
    if rt._shutdown_done:
        rt._emit(Answer(call_id=call_id))
        return
    if rt._shut:
        return
    rt._shut = True

    def ended(cmd: Command) -> None:
        rt._reg_ended = True

    rt._reg_call(lambda cid: Shutdown(now_ms=rt._now, call_id=cid), ended)
    records = list(rt._tasks.values())
    for rec in sorted(
        (r for r in records if r.assigned is not None), key=operator.attrgetter("assigned_seq")
    ):
        assert rec.assigned is not None
        rt._close(rec.task_id, rec.assigned)
    for rec in records:
        rec.assigned = None
        if rec.phase is not Phase.SHUT:
            enter(rec, Phase.SHUT)
    reason = CredentialFailure.interrupted("shutdown")
    for w in list(rt._waits.values()):
        _starts.wait_end(rt, w, None, reason)
    for rec in sorted((r for r in records if r.starts), key=operator.attrgetter("starts_seq")):
        for st in list(rec.starts.values()):
            _starts.abort_start(rt, st, reason)
    for rec in sorted((r for r in records if r.holds), key=operator.attrgetter("holds_seq")):
        for h in list(rec.holds.values()):
            _starts.abort_hold(rt, h, reason)
    _scrub(rt)
    rt._bound = rt._set_timer(rt._drain_ms, lambda: finish(rt))
    rt._start(drain(rt))


def _scrub(rt: CredentialRuntime) -> None:
    from ._machine import DetachConsumers

    recs = sorted(
        (r for r in rt._tasks.values() if r.recovery is not None),
        key=operator.attrgetter("recovery_seq"),
    )
    for t in recs:
        if t.recovery is not None:
            _recovery.end_recovery(rt, t.task_id, t.recovery.run)
    rt._rep(DropAll(now_ms=rt._now))
    for inst in list(rt._env_waits.values()):
        _install.env_eval(rt, inst)
    rt._emit(DetachConsumers())


def drain(rt: CredentialRuntime) -> Co[None]:
    """The shutdown drain, started by :func:`shutdown`; ends with :func:`finish`.

    Each wait is a condition on the runtime's state, so the coroutine is resumed
    by :func:`drain_check` at the end of a ``handle`` that made it true (one
    step per ``handle``), never from a completion.
    """
    # RT-133: the drain awaits the registry's shutdown, then repeats rounds until none is left;
    # RT-134: work registered during the drain is joined by a later round.
    yield from _when(rt, lambda: rt._reg_ended)
    while True:
        yield from _round(rt)
        if not rt._work:
            break
    finish(rt)


def _round(rt: CredentialRuntime) -> Co[None]:
    # One round: the consumers' drains, joined with the work tracked at its start and every
    # queued cleanup.
    drained: dict[str, bool] = {}
    joined = list(rt._work)
    for name in ("engines", "person", "mcp"):
        drained[name] = False
        cid = rt._id()
        rt._cont[cid] = lambda err, n=name: drained.__setitem__(n, True)  # type: ignore[misc]
        rt._emit(ConsumerWork(cmd_id=cid, consumer=name, op="drain"))
    yield from _when(
        rt,
        lambda: (
            all(drained.values())
            and not any(w in rt._work for w in joined)
            and not any(r.cleanups for r in rt._tasks.values())
        ),
    )


def _when(rt: CredentialRuntime, cond: Callable[[], bool]) -> Co[None]:
    # Suspend until drain_check finds ``cond()`` true.
    def start(resume: Callable[[object], None]) -> None:
        rt._drain_wait = (cond, resume)

    yield from rt._call(start)


def drain_check(rt: CredentialRuntime) -> None:
    """Resume the shutdown drain if what it waits for holds (at the end of every ``handle``)."""
    got = rt._drain_wait
    if got is None or rt._shutdown_done:
        return
    cond, resume = got
    if cond():
        rt._drain_wait = None
        resume(None)


def finish(rt: CredentialRuntime) -> None:
    """End the shutdown (the drain ended or its bound elapsed): scrub, answer every call."""
    if rt._shutdown_done:
        return
    rt._shutdown_done = True
    rt._drain_wait = None
    if rt._bound is not None:
        rt._clear_timer(rt._bound)
        rt._bound = None
    _scrub(rt)
    for call_id in rt._shutdown_calls:
        rt._emit(Answer(call_id=call_id))
