"""A fresh reviewer's attacks on the runtime core (issue #5).

Each test here killed a mutant of ``core/leasegate/core/runtime/_machine.py``
that the rest of ``tests/core/runtime`` let survive. All are driven by events
only.

Mutation run (2026-11-30, 78 single mutants of ``_machine.py``, each run
against all of ``tests/core/runtime``). Killed by the earlier suite: 58.
Survivors killed by this module: M06 envSnapshot checks only "some run open"
(RT-057), M18 close clears serving only for ``opened == run`` (RT-064), M20
``env_ready_timeout_ms or default`` (RT-140), M29 setup-running guard dropped
(RT-114), M34 one close fan-out per cleanup (RT-090), M35 cleanup continues
after a gate close throws (RT-090), M42 drop memory and journal settle before
remove-paths (RT-099), M63 per-task cleanup queue bypassed (RT-100).
Survivors judged equivalent (no event sequence tells them apart):
M04 no fence before activation (the registry only emits RunInstall for a
current install, synchronously); M09 env wait reads the run's current reader
generation instead of its own (the registry never has two installs of one run
at once, and the fence after the wait withdraws a replaced one); M11 ``_live``
without the newest check (admission aborts every older token); M28 / M61 /
M37 / M49 / M52 / M53 / M66 / M73 each guarded by a second, redundant check
(``has_setup`` vs ``running``; ``released`` vs the id map; shutdown's close of
begun records aborts holds first; the token abort vs ``yielded``; cleanups
are tracked work vs the queue check; the requester of a queued cleanup is
tracked work in the round's snapshot; every start is aborted at
shutdown); M77 generation binding without the ``is view`` check (the map
holds the view, so its ``id`` cannot be reused while bound).
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from runtime_kit import TASK, Boom, RtDriver, all_texts, commit_frame, of

from leasegate.core.registry import StartTimer, TimerFired
from leasegate.core.runtime import (
    AbandonStart,
    AcquireHold,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    EndStart,
    HandleFrame,
    Interrupt,
    InterruptRecovery,
    InterruptStarts,
    JournalRecord,
    JournalSettle,
    OwedCleanup,
    Recover,
    ReleaseHold,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    Settled,
    WorkDone,
)

P0 = ("proj-0",)


def _served_replica(d: RtDriver) -> None:
    """Open run 1 of TASK serving env from its grant's generation (replica fake)."""
    d.usable()
    d.frame(commit_frame(TASK, 1, P0))
    assert d.rt.open_run(TASK) == 1
    assert d.rt.env_snapshot(TASK, 1, P0) is not None


def test_RT_057_another_run_is_never_read_from_the_replica() -> None:
    # Mutant: envSnapshot checked only that *some* run of the task is open.
    d = RtDriver(replica=True)
    _served_replica(d)
    assert d.replica is not None
    seen: list[tuple[Any, ...]] = []
    real = d.replica.read_view_at

    def spy(task: str, run: int, projects: tuple[str, ...], gen: int) -> object | None:
        seen.append((task, run, projects, gen))
        return real(task, run, projects, gen)

    d.replica.read_view_at = spy  # type: ignore[method-assign]
    for run in (0, 2, 99):
        assert d.rt.env_snapshot(TASK, run, P0) is None
    assert seen == []  # not consulted at all
    assert d.rt.env_snapshot(TASK, 1, P0) is not None
    assert len(seen) == 1


def test_RT_064_a_cleanup_of_a_newer_run_withdraws_an_older_open_run() -> None:
    # Mutant: a close cleared serving only for exactly the open run (== not <=).
    # The registry ignores a host close of a run newer than its own, so the
    # close for M > N comes from the cleanup procedure (a boot sweep's owed row).
    d = RtDriver(replica=True)
    _served_replica(d)
    n = len(d.out)
    d.feed(
        Recover(now_ms=d.now, call_id=1, owed=(OwedCleanup(task_id=TASK, run_epoch=2, reason="x"),))
    )
    assert d.rt.open_run(TASK) is None
    assert d.rt.env_snapshot(TASK, 1, P0) is None
    notes = [c for c in d.out[n:] if type(c).__name__ == "Notify" and c.what == "env-served"]
    assert len(notes) == 1  # once, by the first close of the fan-out


def test_RT_090_a_failing_gate_close_stops_the_cleanup_and_keeps_the_record() -> None:
    # Mutant: the cleanup procedure went on to drain, delete and settle the
    # journal after refuseNewWork/closeGate threw.
    d = RtDriver()
    d.engines.fail_close = Boom("CANARY-close")
    owed = (OwedCleanup(task_id=TASK, run_epoch=3, reason="stop"),)
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    assert d.error(1).message == "a credential consumer failed"
    assert "CANARY" not in all_texts(d.out)
    assert [c.op for c in of(d.out, ConsumerWork)] == []  # no drain, no delete
    assert of(d.out, JournalSettle) == []
    assert [(r.task_id, r.run_epoch) for r in d.journal.owed()] == [(TASK, 3)]
    # once the fence closes again, the retry does the whole procedure
    d.engines.fail_close = None
    d.feed(Recover(now_ms=d.now, call_id=2, owed=d.journal.owed()))
    assert d.value(2) is None
    assert d.journal.owed() == ()
    assert "remove-paths" in [c.op for c in of(d.out, ConsumerWork)]


def test_RT_114_a_renewal_open_during_the_running_setup_keeps_the_recovery() -> None:
    # Mutant: the "setup running" guard dropped; a renewal's open then removed
    # the record while the setup still ran, so a later whole-task cleanup
    # neither aborted the recovery nor waited for its setup.
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    rec_id = d.rt.status(TASK).recovery_id  # type: ignore[union-attr]
    d.grant()
    assert len(d.pending_setups) == 1
    d.begin()
    d.grant(lease_id="lease-2")  # renewal opens again while the setup runs
    assert len(of(d.out, RunSetup)) == 1
    assert d.rt.has_recovery(TASK)
    n = len(d.out)
    d.close(run=1, reason="teardown")
    assert d.aborts("recovery", rec_id)  # the running setup is told to stop
    assert of(d.out[n:], JournalSettle) == []  # the cleanup waits for the setup
    d.finish_setup()
    assert of(d.out[n:], JournalSettle) != []
    assert not d.rt.has_recovery(TASK)


def test_RT_140_a_zero_env_timeout_is_honoured() -> None:
    # Mutant: ``env_ready_timeout_ms or ENV_READY_TIMEOUT_MS``.
    d = RtDriver(replica=True, env_ready_timeout_ms=0)
    n = len(d.out)
    d.usable()
    delays = [c.delay_ms for c in of(d.out[n:], StartTimer) if c.timer_id < 0]
    assert delays == [0]
    d.advance(0)
    logs = [c.message for c in d.out if type(c).__name__ == "Log"]
    assert logs == [
        "[credentials] task task-1 run 1: install failed: the task's env values did not arrive"
        " in time"
    ]


# ---------------------------------------------------------------------------
# Adversarial events: garbage, repeats, unknown ids; (SEC) invariants each step.

_GARBAGE: list[Any] = [
    None,
    0,
    -1,
    2**80,
    "x",
    "CANARY-garbage",
    1.5,
    True,
    [],
    {},
    {"kind": "lease.grant.v1"},
    {"kind": "lease.grant.v1", "opId": None, "lease": "CANARY"},
    {"kind": "env.replica.v1.commit", "taskId": TASK, "runEpoch": "1"},
    {"kind": "env.replica.v1.begin", "taskId": TASK, "runEpoch": 1, "projectIds": [1, 2]},
    {"kind": "env.replica.v1.page", "taskId": None},
    {"kind": "credential.changed", "credentialId": {"x": "CANARY"}},
    {"kind": "lease.deny", "opId": 7},
    {"kind": "lease.stale"},
    {"kind": "credential.refresh.result", "value": "CANARY-token"},
    object(),
]


def _invariants(d: RtDriver) -> None:
    rt = d.rt
    # env is served only for the exact open run
    for task in (TASK, "task-b"):
        status = rt.status(task)
        if status is None:
            continue
        if status.served_generation is not None:
            assert status.open_run is not None, "served without an open run"
        if status.open_run is not None:
            run = status.open_run
            assert rt.env_snapshot(task, run + 1, P0) is None
            assert rt.env_snapshot(task, run - 1, P0) is None
        # one live start per task at most: only the newest can be current
        assert status.current_start in (None, *status.starts)


def test_RT_129_garbage_repeats_and_unknown_ids_never_raise_or_leak() -> None:
    for seed in range(12):
        rng = random.Random(seed)
        d = RtDriver(replica=True, files=True)
        starts: list[Any] = [0, -5, 10**9, "s", None]
        for _ in range(160):
            g = rng.choice(_GARBAGE)
            now = d.now
            c = d.cid()
            pick = rng.randrange(19)
            ev: Any
            if pick == 0:
                ev = BeginStart(now_ms=now, call_id=c, task_id=TASK, run_epoch=rng.choice([1, 2]))
            elif pick == 1:
                ev = BeginStart(now_ms=now, call_id=c, task_id=g, run_epoch=g)  # type: ignore[arg-type]
            elif pick == 2:
                ev = AwaitLaunchReady(now_ms=now, call_id=c, start_id=rng.choice(starts))
            elif pick == 3:
                ev = AcquireHold(now_ms=now, call_id=c, start_id=rng.choice(starts))
            elif pick == 4:
                ev = ReleaseHold(now_ms=now, hold_id=rng.choice([*starts, g]))
            elif pick == 5:
                ev = EndStart(now_ms=now, start_id=rng.choice([*starts, g]))
            elif pick == 6:
                ev = Interrupt(now_ms=now, start_id=rng.choice([*starts, g]))
            elif pick == 7:
                ev = InterruptStarts(now_ms=now, task_id=TASK, exact=g, below=None)  # type: ignore[arg-type]
            elif pick == 8:
                ev = InterruptRecovery(now_ms=now, task_id=g)  # type: ignore[arg-type]
            elif pick == 9:
                ev = CloseAssignment(now_ms=now, call_id=c, task_id=TASK, run_epoch=1, reason=g)  # type: ignore[arg-type]
            elif pick == 10:
                ev = HandleFrame(now_ms=now, call_id=c, frame=g)
            elif pick == 11:
                ev = WorkDone(now_ms=now, cmd_id=rng.choice([*starts, g]), error=g)  # type: ignore[arg-type]
            elif pick == 12:
                ev = TimerFired(now_ms=now, timer_id=rng.choice([-1, -2, -3, 1, 2, 10**6]))
            elif pick == 13:
                ev = Recover(now_ms=now, call_id=c, owed=g, admitted=g)  # type: ignore[arg-type]
            elif pick == 14:
                ev = ResumeRecovered(
                    now_ms=now, task_id=TASK, run_epoch=rng.choice([1, 2, g]), has_setup=True
                )
            elif pick == 15:
                ev = AbandonStart(now_ms=now, call_id=c, start_id=rng.choice(starts), hold_id=g)  # type: ignore[arg-type]
            elif pick == 16:
                ev = Settled(call_id=c, now_ms=now)
            elif pick == 17:
                with contextlib.suppress(AssertionError):  # no lease.request yet
                    d.grant(run=rng.choice([1, 2]))
                _invariants(d)
                continue
            else:
                ev = RuntimeShutdown(now_ms=now, call_id=c)
            d.feed(ev)  # the driver asserts no internal error
            for cmd in d.out[-50:]:
                sid = getattr(cmd, "value", None)
                if isinstance(sid, int) and not isinstance(sid, bool):
                    starts.append(sid)
            if rng.random() < 0.2:
                d.advance(rng.choice([0, 50, 1_000, 60_000, 180_000]))
            _invariants(d)
        assert "CANARY" not in all_texts(d.out), seed


def _ops(cmds: list[Any]) -> list[str]:
    out = []
    for c in cmds:
        if isinstance(c, ConsumerWork):
            out.append(f"{c.consumer}:{c.op}")
        elif isinstance(c, (JournalRecord, JournalSettle)):
            out.append(type(c).__name__)
    return out


def test_RT_099_memory_and_journal_only_after_the_paths_are_removed() -> None:
    # Mutant: dropMemory and the journal settle ran before remove-paths
    # settled, so a failed delete left no durable record to retry from.
    d = RtDriver(replica=True)
    assert d.replica is not None
    d.hold_work = lambda c: c.op == "remove-paths"
    owed = (OwedCleanup(task_id=TASK, run_epoch=2, reason="stop"),)
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    assert [c.op for c in d.pending_work] == ["remove-paths"]
    assert of(d.out, JournalSettle) == []
    assert ("drop", TASK, 2) not in d.replica.calls  # memory kept until deleted
    d.finish_work(ok=False)
    assert d.error(1).message == "host remove-paths failed"
    assert of(d.out, JournalSettle) == []
    assert ("drop", TASK, 2) not in d.replica.calls
    assert [(r.task_id, r.run_epoch) for r in d.journal.owed()] == [(TASK, 2)]
    d.hold_work = lambda c: False
    d.feed(Recover(now_ms=d.now, call_id=2, owed=d.journal.owed()))
    assert d.value(2) is None
    assert ("drop", TASK, 2) in d.replica.calls
    assert d.journal.owed() == ()


def test_RT_100_cleanups_of_one_task_never_interleave() -> None:
    # Mutant: the per-task cleanup queue was bypassed; a boot sweep's cleanup
    # then ran beside a registry cleanup of the same task.
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "cleanup"
    n = len(d.out)
    d.close(run=1, reason="stop")
    assert [c.op for c in d.pending_work] == ["cleanup"] * 3
    owed = (OwedCleanup(task_id=TASK, run_epoch=1, reason="stop"),)
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    assert len(of(d.out[n:], JournalRecord)) == 1  # the second waits its turn
    assert len(d.pending_work) == 3
    d.hold_work = lambda c: False
    while d.pending_work:
        d.finish_work()
    assert len(of(d.out[n:], JournalRecord)) == 2
    assert d.value(1) is None
    # each cleanup's steps ran in one piece: record … settle, then the next
    seq = [x for x in _ops(d.out[n:]) if x in ("JournalRecord", "JournalSettle")]
    assert seq[:2] == ["JournalRecord", "JournalSettle"]


def test_RT_134_a_queued_cleanup_started_during_the_drain_is_joined() -> None:
    # Mutant: the drain finished after one round (and ignored the cleanup
    # queue), answering shutdown while a queued cleanup had just begun.
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "cleanup"
    d.close(run=1)
    owed = (OwedCleanup(task_id=TASK, run_epoch=1, reason="stop"),)
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=2))
    first = list(d.pending_work)
    for w in first:
        d.finish_work(w)
    assert len(d.pending_work) == 3  # the queued boot-sweep cleanup began
    assert d.result(2) is None  # and shutdown waits for it
    d.hold_work = lambda c: False
    while d.pending_work:
        d.finish_work()
    assert d.value(2) is None
    assert d.value(1) is None


def test_RT_090_refuse_new_work_and_close_gate_each_run_the_close() -> None:
    # Mutant: the cleanup procedure ran the close fan-out once. The reference's
    # coordinator calls refuseNewWork and then closeGate, each the whole close.
    d = RtDriver(files=True)
    owed = (OwedCleanup(task_id=TASK, run_epoch=4, reason="stop"),)
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    closes = [e for e in d.log if e[1] == "close"]
    assert (
        closes
        == [
            ("engines", "close", TASK, "4"),
            ("person", "close", TASK, "4"),
            ("files", "close", TASK, "4"),
        ]
        * 2
    )


_SERVED_SEEN: list[int] = []


def _served_from_the_open_grant(d: RtDriver) -> None:
    rt = d.rt
    for task in (TASK, "task-b"):
        status = rt.status(task)
        if status is None or status.open_run is None:
            continue
        run, gen = status.open_run, status.served_generation
        view = rt.registry.current_view(task, run, d.now)
        if gen is None or view is None:
            continue
        bound = rt.view_generation(view)  # bound to this very instance, or None
        assert bound is not None, (task, run)
        assert bound == gen, (task, run, gen)
        snap = rt.env_snapshot(task, run, view.project_ids)
        if snap is not None:
            assert snap["gen"] == gen  # type: ignore[index]
            _SERVED_SEEN.append(gen)


def test_RT_062_walk_env_is_served_only_from_the_open_grants_generation() -> None:
    # An invariant walk, not a mutant killer: it rarely reaches the renewal
    # window (a same-run grant activated and committed before its gate opens),
    # so M07/M08 are killed by the RT-062/RT-063 tests, not by this walk.
    for seed in range(25):
        rng = random.Random(seed)
        d = RtDriver(replica=True)
        run = 1
        starts: list[int] = []
        lease = 0
        for _ in range(60):
            pick = rng.randrange(9)
            if pick == 0:
                run += rng.choice([0, 1])
                r = d.begin_result(TASK, run)
                if r is not None and isinstance(getattr(r, "value", None), int):
                    starts.append(r.value)  # type: ignore[union-attr]
            elif pick in (1, 2):
                lease += 1
                with contextlib.suppress(AssertionError):
                    d.grant(run=run, lease_id=f"lease-{lease}")
            elif pick in (3, 4):
                d.frame(commit_frame(TASK, rng.choice([run, run - 1]), P0))
            elif pick == 5 and starts:
                d.hold(rng.choice(starts))
            elif pick == 6:
                d.close(run=rng.choice([run, run - 1]), reason=rng.choice(["stop", "teardown"]))
            elif pick == 7:
                d.advance(rng.choice([0, 1_000, 60_000]))
            elif pick == 8 and rng.random() < 0.1:
                d.feed(RuntimeShutdown(now_ms=d.now, call_id=d.cid()))
            _served_from_the_open_grant(d)
            assert d.rt.env_snapshot(TASK, run + 1, P0) is None
        assert "CANARY" not in all_texts(d.out)
    assert len(set(_SERVED_SEEN)) > 3  # the walk did serve env, from several generations
