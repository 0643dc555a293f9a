"""No event makes the replica raise or show a value (random walks, events only)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from replica_kit import (
    TASK,
    Driver,
    FakeReader,
    apply,
    begin,
    commit,
    legacy_ref,
    page,
    reachable_values,
    reads,
    staged_ref,
    state,
)

from leasegate.core import Secret
from leasegate.core.replica import (
    ActivateAssignment,
    AwaitReady,
    DropAll,
    DropAssignment,
    EnvFrameReceived,
    ExpectActivation,
    ReadinessDeadline,
    ReplicaLimits,
    SettleActivation,
    StartTimer,
    ValueReadCompleted,
    ValueReadFailed,
)

JUNK: list[Any] = [None, [], {}, "x", 1, True, [1], {"a": 1}, float("nan"), -1, 2**60]


def _frame(rng: random.Random) -> Any:
    task = rng.choice([TASK, "t2"])
    run = rng.choice([1, 2])
    stream = rng.choice(["S1", "S2"])
    att = rng.choice(["A1", "A2", "A3"])
    ref = rng.choice([staged_ref(rng.randint(1, 3)), legacy_ref(rng.randint(1, 2)), None])
    st = state(
        rng.choice(["A", "B", "C"]),
        rev=rng.randint(0, 3),
        gen=rng.randint(0, 3),
        tomb=rng.random() < 0.2,
        ref=ref,
        binding=rng.choice([None, {"kind": "omit"}, {"kind": "env"}]),
        epoch=rng.choice([1, 2, None]),
        lg=rng.randint(0, 2),
    )
    kind = rng.randrange(5)
    if kind == 0:
        return begin(
            att,
            tuple(rng.sample(["p1", "p2"], rng.randint(0, 2))),
            stream=stream,
            task=task,
            run=run,
        )
    if kind == 1:
        recs = sorted([st], key=lambda s: s["key"]) if rng.random() < 0.8 else []
        return page(
            recs,
            project=rng.choice(["p1", "p2"]),
            after=rng.choice([None, None, "A"]) if not recs or recs[0]["key"] > "A" else None,
            version=rng.randint(0, 3),
            complete=rng.random() < 0.7,
            attempt=att,
            stream=stream,
            task=task,
            run=run,
        )
    if kind == 2:
        return apply(
            st,
            rng.randint(1, 4),
            project=rng.choice(["p1", "p2"]),
            version=rng.randint(0, 4),
            attempt=rng.choice([None, att]),
            stream=stream,
            task=task,
            run=run,
        )
    if kind == 3:
        return commit(
            [(p, rng.randint(0, 3)) for p in rng.sample(["p1", "p2"], rng.randint(0, 2))],
            seq=rng.randint(0, 3),
            attempt=att,
            stream=stream,
            task=task,
            run=run,
        )
    return rng.choice(JUNK)


@pytest.mark.parametrize("seed", range(12))
def test_random_events_never_raise_and_never_show_values(seed: int) -> None:
    rng = random.Random(seed)
    d = Driver(limits=ReplicaLimits(max_task_entries=rng.randint(1, 12)))
    pending: list[Any] = []
    timers: list[int] = []
    readers = [FakeReader("r1"), FakeReader("r2")]
    for _ in range(400):
        r = rng.random()
        if r < 0.45:
            ev: Any = EnvFrameReceived(now_ms=0, frame=_frame(rng))
        elif r < 0.65 and pending:
            cmd = pending.pop(rng.randrange(len(pending)))
            roll = rng.random()
            if roll < 0.6:
                ev = cmd.reader.answer(cmd)
            elif roll < 0.8:
                ev = ValueReadFailed(now_ms=0, cmd_id=cmd.cmd_id)
            else:
                ev = ValueReadCompleted(
                    now_ms=0,
                    cmd_id=cmd.cmd_id,
                    raw=rng.choice([None, Secret("CANARY{")]),
                    version=rng.choice([None, 1, True, "x"]),
                )
        elif r < 0.72:
            ev = ActivateAssignment(
                now_ms=0,
                task_id=rng.choice([TASK, "t2", *JUNK]),
                run_epoch=rng.choice([1, 2, 3, *JUNK]),
                org_id=rng.choice(["org1", "org2", *JUNK]),
                reader=rng.choice([*readers, None]),
            )
        elif r < 0.78:
            ev = ExpectActivation(
                now_ms=0, task_id=rng.choice([TASK, *JUNK]), run_epoch=rng.choice([1, *JUNK])
            )
        elif r < 0.82:
            ev = SettleActivation(
                now_ms=0, task_id=rng.choice([TASK, *JUNK]), token=rng.choice([1, 2, 3, *JUNK])
            )
        elif r < 0.86:
            ev = DropAssignment(
                now_ms=0,
                task_id=rng.choice([TASK, "t2", *JUNK]),
                run_epoch=rng.choice([1, 2, *JUNK]),
            )
        elif r < 0.87:
            ev = DropAll(now_ms=0)
        elif r < 0.93:
            ev = AwaitReady(
                now_ms=0,
                waiter_id=rng.choice([1, 2, 3, *JUNK]),
                task_id=rng.choice([TASK, *JUNK]),
                run_epoch=rng.choice([1, 2, *JUNK]),
                timeout_ms=rng.choice([1, 100, 0, *JUNK]),
            )
        elif timers or r < 0.95:
            ev = ReadinessDeadline(now_ms=0, timer_id=timers.pop() if timers else rng.choice(JUNK))
        else:
            ev = ValueReadCompleted(now_ms=0, cmd_id=rng.choice(JUNK), raw=None)
        cmds = d.send(ev)
        pending.extend(reads(cmds))
        timers.extend(c.timer_id for c in cmds if isinstance(c, StartTimer))
        for c in cmds:
            assert "CANARY" not in repr(c)
    while pending:  # drain: every lane completes
        cmd = pending.pop()
        pending.extend(reads(d.send(ValueReadFailed(now_ms=0, cmd_id=cmd.cmd_id))))
    assert not d.m._busy
    d.drop_all()
    assert reachable_values(d.m) == []
    assert d.m.ledger_totals == (0, 0)
