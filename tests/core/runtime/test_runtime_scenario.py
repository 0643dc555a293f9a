"""A whole runner in the core alone: two tasks, three runs, env, rotation,
narrowing, denial, stop, crash and recovery, shutdown; secrets never shown."""

from __future__ import annotations

from runtime_kit import RtDriver, all_texts, engine, manifest, of

from leasegate.core.runtime import (
    ConsumerWork,
    Failed,
    JournalSettle,
    Log,
    MemoryJournal,
    Recover,
    ReleaseHold,
    RuntimeShutdown,
)

A, B = "task-a", "task-b"


def _no_canary(*drivers: RtDriver) -> None:
    for d in drivers:
        text = all_texts(d.out)
        assert "CANARY" not in text
        for c in of(d.out, Failed):
            assert "CANARY" not in repr(c.error)
        for c in of(d.out, Log):
            assert "CANARY" not in c.message


def test_whole_runner_scenario() -> None:
    journal = MemoryJournal()
    d = RtDriver(real_replica=True, journal=journal)
    two = manifest(engines=[engine(0), engine(1)])

    # Task A run 1: a grant with its env snapshot.
    a1 = d.begin(A, 1)
    wa1 = d.wait(a1)
    d.grant(A, 1, m=two)
    assert d.result(wa1) is None  # waiting for the env snapshot
    d.snapshot(A, 1, n=1)
    assert d.value(wa1).assignment.run_epoch == 1
    assert d.rt.env_snapshot(A, 1, ("proj-0",)) is not None
    hold = d.hold(a1).value  # type: ignore[union-attr]

    # A rotation (credential.changed): same grant, same reader generation.
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": A,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 7,
        }
    )
    assert d.rt.hold_reason(hold.hold_id) is None
    assert d.rt.env_snapshot(A, 1, ("proj-0",)) is not None
    d.feed(ReleaseHold(now_ms=d.now, hold_id=hold.hold_id))

    # A narrowing: the renewal names one engine fewer -> a selective cleanup.
    d.begin(A, 1)
    d.grant(A, 1, m=manifest(engines=[engine(0)]), revision=5, lease_id="lease-2")
    d.snapshot(A, 1, n=2)
    cleanups = [c.request for c in of(d.out, ConsumerWork) if c.op == "cleanup"]
    assert any(r.mode == "selective" for r in cleanups)
    assert d.rt.open_run(A) == 1

    # Task B run 1, then a denial of its renewal.
    d.begin(B, 1)
    d.grant(B, 1)
    d.snapshot(B, 1, n=1)
    assert d.rt.open_run(B) == 1
    d.begin(B, 1)
    d.frame({"kind": "lease.deny", "opId": d.op_id(B, 1), "error": "CANARY-denied"})
    assert d.rt.open_run(B) is None
    full = [c.request for c in of(d.out, ConsumerWork) if c.op == "cleanup"]
    assert full[-1].reason == "denied"

    # Task A run 2 supersedes run 1; then a stop of run 2 whose cleanup is in flight.
    a2 = d.begin(A, 2)
    assert d.rt.start_reason(a1) is not None
    wa2 = d.wait(a2)
    d.grant(A, 2)
    d.snapshot(A, 2, n=3)
    assert d.value(wa2).assignment.run_epoch == 2
    d.hold_work = lambda c: c.op == "quiesce"
    stop = d.close(A, 2)
    assert d.result(stop) is None
    assert any(r.task_id == A and r.run_epoch == 2 for r in journal.owed())

    _no_canary(d)

    # Crash: the core is dropped mid-cleanup; a new one recovers from the journal.
    del d
    d2 = RtDriver(real_replica=True, journal=journal, seed="seed-2")
    owed = journal.owed()
    d2.feed(Recover(now_ms=d2.now, call_id=1, owed=owed, admitted=((A, 2), (B, 1))))
    assert d2.value(1) is None
    assert journal.owed() == ()
    settled = {(c.task_id, c.runs) for c in of(d2.out, JournalSettle)}
    assert any(t == A and 2 in runs for t, runs in settled)

    # The runner goes on: task B run 2, then shutdown.
    b2 = d2.begin(B, 2)
    w = d2.wait(b2)
    d2.grant(B, 2)
    d2.snapshot(B, 2, n=1)
    assert d2.value(w).assignment.run_epoch == 2
    d2.feed(RuntimeShutdown(now_ms=d2.now, call_id=2))
    assert d2.value(2) is None
    assert d2.rt.open_run(B) is None
    assert d2.rt.env_snapshot(B, 2, ("proj-0",)) is None
    assert d2.real is not None
    assert d2.real.read_status(B) is None  # the replica's values left memory
    _no_canary(d2)
