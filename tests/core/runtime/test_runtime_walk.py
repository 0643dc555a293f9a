"""Random walks over the whole composition: no input makes it raise, no secret is
shown, and the runtime's state agrees with the registry's at every step."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from runtime_kit import RtDriver, all_texts, commit_frame, engine, grant, manifest

from leasegate.core.registry import SendFrame, TimerFired
from leasegate.core.runtime import (
    AbandonStart,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    EndStart,
    HoldInfo,
    Interrupt,
    InterruptRecovery,
    InterruptStarts,
    MemoryJournal,
    Recover,
    ReleaseHold,
    ResumeRecovered,
    RuntimeShutdown,
    Settled,
    WorkDone,
)

TASKS = ("task-a", "task-b")


def _check(d: RtDriver) -> None:
    rt = d.rt
    for task in TASKS:
        run = rt.open_run(task)
        if run is not None:
            st = rt.registry.status(task)
            assert st is not None
            assert st.assignment.run_epoch == run
            assert st.gate_open
        status = rt.status(task)
        if status is None:
            continue
        assert status.current_start in (None, *status.starts)
        for hold_id, hold_run in status.holds:
            if rt.hold_reason(hold_id) is None:
                assert rt.open_run(task) == hold_run
        if status.phase == "shut":
            assert all(rt.open_run(t) is None for t in TASKS)


def _walk(seed: int, steps: int = 70, replica: bool = True) -> RtDriver:
    rnd = random.Random(seed)
    d = RtDriver(replica=replica, journal=MemoryJournal(), seed=f"s{seed}")
    d.hold_work = lambda c: rnd.random() < 0.3
    starts: list[int] = []
    holds: list[int] = []
    shut_at = rnd.randrange(steps // 2, steps * 3)
    for i in range(steps):
        task = rnd.choice(TASKS)
        st0 = d.rt.registry.status(task)
        run = (
            st0.assignment.run_epoch
            if st0 is not None and rnd.random() < 0.6
            else rnd.randint(1, 3)
        )
        op = rnd.randrange(24)
        now = d.now
        c = d.cid()
        ev: Any = None
        if i == shut_at:
            ev = RuntimeShutdown(now_ms=now, call_id=c)
        elif op == 0:
            rec = rnd.random() < 0.2
            d.feed(BeginStart(now_ms=now, call_id=c, task_id=task, run_epoch=run, recovery=rec))
            r = d.result(c)
            if isinstance(r, Answer):
                starts.append(r.value)  # type: ignore[arg-type]
        elif op == 1 and starts:
            cur = d.rt.current_start(task)
            sid = cur if cur is not None and rnd.random() < 0.8 else rnd.choice(starts)
            ev = AwaitLaunchReady(now_ms=now, call_id=c, start_id=sid)
        elif op == 2 and starts:
            cur = d.rt.current_start(task)
            sid = cur if cur is not None and rnd.random() < 0.8 else rnd.choice(starts)
            d.feed(AcquireHold(now_ms=now, call_id=c, start_id=sid))
            r = d.result(c)
            if isinstance(r, Answer) and isinstance(r.value, HoldInfo):
                holds.append(r.value.hold_id)
        elif op == 3 and holds:
            ev = ReleaseHold(now_ms=now, hold_id=holds.pop(rnd.randrange(len(holds))))
        elif op == 4 and starts:
            ev = EndStart(now_ms=now, start_id=rnd.choice(starts))
        elif op == 5 and starts:
            h = holds.pop() if holds and rnd.random() < 0.5 else None
            ev = AbandonStart(now_ms=now, call_id=c, start_id=rnd.choice(starts), hold_id=h)
        elif op == 6 and starts:
            ev = Interrupt(now_ms=now, start_id=rnd.choice(starts))
        elif op == 7:
            exact = rnd.choice([None, run])
            below = rnd.choice([None, run + 1])
            ev = InterruptStarts(now_ms=now, task_id=task, exact=exact, below=below)
        elif op == 8:
            reason: Any = rnd.choice(["stop", "park", "teardown", "superseded"])
            ev = CloseAssignment(now_ms=now, call_id=c, task_id=task, run_epoch=run, reason=reason)
        elif op in (9, 10):
            st = d.rt.registry.status(task)
            if st is None:
                continue
            r = st.assignment.run_epoch
            try:
                op_id = d.op_id(task, r)
            except AssertionError:
                continue
            if op == 9:
                two = [engine(0), engine(1)]
                m = manifest(engines=[engine(0)] if rnd.random() < 0.5 else two)
                d.frame(grant(op_id, task=task, epoch=r, m=m, lease_id=f"lease-{i}"))
                if rnd.random() < 0.7:
                    d.frame(commit_frame(task, r, ("proj-0",)))
            else:
                kind = rnd.choice(["lease.deny", "lease.unavailable"])
                d.frame({"kind": kind, "opId": op_id, "error": "CANARY-x"})
        elif op == 11:
            st = d.rt.registry.status(task)
            d.frame(commit_frame(task, run if st is None else st.assignment.run_epoch, ("proj-0",)))
        elif op == 12:
            d.frame(
                {
                    "kind": "credential.changed",
                    "taskId": task,
                    "runEpoch": run,
                    "credentialId": "engine-0",
                    "revision": "rev-0",
                    "version": 4 + i,
                }
            )
        elif op == 13 and d.pending_work:
            d.finish_work(rnd.choice(d.pending_work), ok=rnd.random() < 0.8)
        elif op == 14:
            d.advance(rnd.choice([10, 1_000, 30_000, 70_000, 200_000]))
        elif op == 15:
            setup = rnd.random() < 0.5
            ev = ResumeRecovered(now_ms=now, task_id=task, run_epoch=run, has_setup=setup)
        elif op == 16 and d.pending_setups:
            d.finish_setup(None if rnd.random() < 0.5 else "setup failed")
        elif op == 17:
            ev = InterruptRecovery(now_ms=now, task_id=task)
        elif op == 18:
            ev = Recover(now_ms=now, call_id=c, owed=d.journal.owed(), admitted=((task, run),))
        elif op == 19:
            ev = rnd.choice(
                [
                    WorkDone(now_ms=now, cmd_id=rnd.randint(-50, 50)),
                    TimerFired(now_ms=now, timer_id=rnd.randint(-50, 50)),
                    EndStart(now_ms=now, start_id=12345),
                    ReleaseHold(now_ms=now, hold_id=-3),
                ]
            )
        elif op == 20:
            junk = [None, 5, "x", {"kind": "env.replica.v1.page"}, {"kind": "lease.grant.v1"}]
            d.frame(rnd.choice(junk))
        elif op == 21:
            ev = Settled(now_ms=now, call_id=c)
        elif op >= 22:  # a start brought to an open gate, then a hold
            d.feed(BeginStart(now_ms=now, call_id=c, task_id=task, run_epoch=run))
            r = d.result(c)
            if isinstance(r, Answer):
                starts.append(r.value)  # type: ignore[arg-type]
                with contextlib.suppress(AssertionError):
                    d.frame(grant(d.op_id(task, run), task=task, epoch=run, lease_id=f"l-{i}"))
                d.frame(commit_frame(task, run, ("proj-0",)))
                c2 = d.cid()
                d.feed(AcquireHold(now_ms=d.now, call_id=c2, start_id=r.value))  # type: ignore[arg-type]
                h2 = d.result(c2)
                if isinstance(h2, Answer) and isinstance(h2.value, HoldInfo):
                    holds.append(h2.value.hold_id)
        if ev is not None:
            d.feed(ev)
        _check(d)
    # drain what is left
    d.hold_work = lambda c: False
    while d.pending_work:
        d.finish_work(d.pending_work[0])
        _check(d)
    while d.pending_setups:
        d.finish_setup()
    d.advance(10 * 60_000)
    _check(d)
    return d


@pytest.mark.parametrize("seed", range(60))
def test_walk_never_raises_never_leaks_and_agrees_with_the_registry(seed: int) -> None:
    d = _walk(seed, replica=seed % 2 == 0)
    assert "CANARY" not in all_texts(d.out)
    assert d.rt.internal_errors == 0


def test_walk_is_deterministic() -> None:
    a = _walk(7)
    b = _walk(7)
    assert all_texts(a.out) == all_texts(b.out)
    assert any(isinstance(c, SendFrame) for c in a.out)


_WEIRD: list[Any] = [None, -1, "x", 1.5, True, 10**30, (), {}, [1], (("t", 1),)]
_FIELDS: list[tuple[type, list[str]]] = [
    (BeginStart, ["task_id", "run_epoch", "recovery"]),
    (AwaitLaunchReady, ["start_id"]),
    (AcquireHold, ["start_id"]),
    (ReleaseHold, ["hold_id"]),
    (EndStart, ["start_id"]),
    (AbandonStart, ["start_id", "hold_id"]),
    (Interrupt, ["start_id"]),
    (InterruptStarts, ["task_id", "exact", "below"]),
    (InterruptRecovery, ["task_id"]),
    (CloseAssignment, ["task_id", "run_epoch", "reason"]),
    (Recover, ["owed", "admitted"]),
    (ResumeRecovered, ["task_id", "run_epoch", "has_setup"]),
    (WorkDone, ["cmd_id", "error"]),
]


@pytest.mark.parametrize(("cls", "fields"), _FIELDS, ids=[c.__name__ for c, _ in _FIELDS])
def test_malformed_host_events_never_raise(cls: type, fields: list[str]) -> None:
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    for field in fields:
        for w in _WEIRD:
            d = RtDriver(replica=True)
            s = d.usable()
            defaults: dict[str, Any] = {
                "task_id": "task-1",
                "run_epoch": 1,
                "start_id": s,
                "hold_id": 1,
                "exact": None,
                "below": None,
                "reason": "stop",
                "owed": (),
                "admitted": (),
                "has_setup": False,
                "cmd_id": 1,
                "error": None,
                "recovery": False,
            }
            kw = {k: v for k, v in defaults.items() if k in names}
            kw["now_ms"] = d.now
            if "call_id" in names:
                kw["call_id"] = d.cid()
            kw[field] = w
            d.rt.handle(cls(**kw))
            d.rt.handle(TimerFired(now_ms=d.now, timer_id=1))
            assert d.rt.internal_errors == 0, (field, w)
            assert d.rt.registry.internal_errors == 0, (field, w)
