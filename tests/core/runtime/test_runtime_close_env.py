"""RT-050 … RT-064: close de-duplication, env snapshot serving and reader generations."""

from __future__ import annotations

from runtime_kit import TASK, RtDriver, commit_frame, of

from leasegate.core.registry import CloseRun, OpenGate
from leasegate.core.runtime import (
    CredentialFailure,
    Notify,
    ResumeRecovered,
    RuntimeShutdown,
)

P0 = ("proj-0",)


def test_RT_050_close_calls_the_registry_once_and_settles_with_it() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "quiesce"
    c = d.close()
    assert [(e.task_id, e.run_epoch, e.reason) for e in d.reg_calls(CloseRun)] == [
        (TASK, 1, "stop")
    ]
    assert d.result(c) is None
    assert "close" in d.rt.tracked()
    d.finish_work(ok=False)
    assert d.error(c) == CredentialFailure(message="credential lease operation failed")
    assert "close" not in d.rt.tracked()


def test_RT_051_a_second_close_joins_the_one_under_way() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "quiesce"
    a = d.close()
    b = d.close()
    assert len(d.reg_calls(CloseRun)) == 1
    d.finish_work()
    assert d.value(a) is None
    assert d.value(b) is None


def test_RT_052_dedup_is_per_reason() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "quiesce"
    d.close(reason="stop")
    d.close(reason="teardown")
    assert [e.reason for e in d.reg_calls(CloseRun)] == ["stop", "teardown"]


def test_RT_053_a_settled_close_is_made_again() -> None:
    d = RtDriver()
    d.usable()
    a = d.close()
    assert d.value(a) is None
    d.close()
    assert len(d.reg_calls(CloseRun)) == 2


def test_RT_054_close_ends_a_recovery_of_its_run_or_older() -> None:
    for close_run, ends in ((2, True), (3, True), (1, False)):
        d = RtDriver()
        d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=2))
        d.close(run=close_run)
        assert d.rt.has_recovery(TASK) is not ends, close_run
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=2))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    # Fault injection: the shutdown's scrub ends every recovery not running a setup (and a
    # running one is kept by a close too), so no event keeps one here; it is put back to test
    # that a close after shutdown still ends it.
    d.rt._tasks[TASK].recovery = d.rt._tasks[TASK].recovery or _rec(2)
    d.close(run=2)
    assert not d.rt.has_recovery(TASK)


def _rec(run: int) -> object:
    from leasegate.core.runtime._recovery import Recovery as _Recovery

    return _Recovery(-99_999, run, False)


def test_RT_055_after_shutdown_close_joins_or_resolves_without_the_registry() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "quiesce"
    a = d.close()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    b = d.close()
    c = d.close(reason="park")
    assert d.value(c) is None
    assert d.result(b) is None
    assert len(d.reg_calls(CloseRun)) == 1
    d.finish_work()
    assert d.value(a) is None
    assert d.value(b) is None


def test_RT_056_closing_the_begun_run_drops_the_begun_record() -> None:
    d = RtDriver()
    d.begin(run=2)
    d.close(run=1)
    assert d.rt.status(TASK).run_epoch == 2  # type: ignore[union-attr]
    d.close(run=2)
    assert d.rt.status(TASK).run_epoch is None  # type: ignore[union-attr]


def _served(replica: bool = True) -> RtDriver:
    d = RtDriver(replica=replica)
    d.usable()
    if replica:
        d.frame(commit_frame(TASK, 1, P0))
    return d


def test_RT_057_env_only_for_the_exact_open_run() -> None:
    d = _served()
    assert d.rt.env_snapshot(TASK, 1, P0) is not None
    assert d.replica is not None
    calls = len(d.replica.calls)
    assert d.rt.env_snapshot(TASK, 2, P0) is None
    assert d.rt.env_snapshot("other", 1, P0) is None
    assert len(d.replica.calls) == calls


def test_RT_058_no_generation_no_env() -> None:
    d = _served(replica=False)
    assert d.rt.open_run(TASK) == 1
    assert d.rt.env_snapshot(TASK, 1, P0) is None


def test_RT_059_env_is_the_replicas_read_at_the_served_generation() -> None:
    d = _served()
    assert d.replica is not None
    snap = d.rt.env_snapshot(TASK, 1, P0)
    assert snap is d.replica.snaps[(TASK, 1)][2]
    assert d.rt.env_snapshot(TASK, 1, ("proj-0", "proj-1")) is None


def test_RT_060_opening_sets_or_clears_the_served_generation() -> None:
    d = _served()
    assert d.rt.status(TASK).served_generation == 1  # type: ignore[union-attr]
    d.begin()
    d.grant(lease_id="lease-2")
    d.frame(commit_frame(TASK, 1, P0))
    assert d.rt.status(TASK).served_generation == 2  # type: ignore[union-attr]
    d2 = _served(replica=False)
    assert d2.rt.status(TASK).served_generation is None  # type: ignore[union-attr]


def test_RT_061_credential_change_keeps_the_grants_generation() -> None:
    d = _served()
    gen = d.rt.status(TASK).served_generation  # type: ignore[union-attr]
    n = len(d.reg_events)
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 4,
        }
    )
    v2 = d.rt.registry.current_view(TASK, 1, d.now)
    assert v2 is not None
    installs = [
        c.request for c in d.out if type(c).__name__ == "ConsumerWork" and c.op == "install"
    ]
    assert installs[-1].reason == "credential-change"
    assert installs[-1].next is v2
    assert d.rt.view_generation(v2) == gen  # the next view inherits the generation
    # The registry keeps the gate open across a credential change (it sends no OpenGate), so
    # the open hook is called with V2 directly: opened on V2, the gate serves the inherited
    # generation.
    assert d.rt._open_gate(v2.assignment, v2) is None  # V2's gate opens
    assert d.rt.status(TASK).served_generation == gen  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is not None
    assert n < len(d.reg_events)


def test_RT_062_a_renewals_snapshot_is_not_served_before_its_gate_opens() -> None:
    # Against the fake replica (its contract), not the real one.
    d = _served()
    assert d.replica is not None
    old = d.rt.env_snapshot(TASK, 1, P0)
    d.begin()
    d.grant(lease_id="lease-2")  # activation: generation 2; its snapshot not yet committed
    assert d.replica.gen[(TASK, 1)] == 2
    d.replica.commit(TASK, 1, P0)  # committed under 2, gate still on 1
    assert d.rt.status(TASK).served_generation == 1  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is None
    d.frame(commit_frame(TASK, 1, P0))  # the install proceeds and opens
    assert d.rt.status(TASK).served_generation == 2  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is not None
    assert old is not None


def test_RT_063_generations_are_bound_to_the_view_instance() -> None:
    import dataclasses

    d = _served()
    view = d.rt.registry.current_view(TASK, 1, d.now)
    assert view is not None
    twin = dataclasses.replace(view)
    assert twin == view
    assert twin is not view
    # The registry opens gates with its own view instances only, so the open hook is called
    # with an equal copy directly to show the binding is by instance.
    assert d.rt._open_gate(view.assignment, twin) is None
    assert d.rt.status(TASK).served_generation is None  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is None


def test_RT_064_close_of_the_served_run_or_newer_stops_env_first() -> None:
    d = _served()
    _, cmds = d.close_hook(0)  # older: untouched
    assert of(cmds, Notify) == []
    assert d.rt.open_run(TASK) == 1
    log_n = len(d.log)
    failures, cmds = d.close_hook(1)
    assert failures == []
    notes = of(cmds, Notify)
    assert [(x.what, x.task_id) for x in notes] == [("env-served", TASK)]
    assert d.rt.open_run(TASK) is None
    assert d.rt.status(TASK).served_generation is None  # type: ignore[union-attr]
    # env serving went first: before any consumer fence
    assert cmds.index(notes[0]) == 0
    assert d.log[log_n][1] == "close"
    _, cmds = d.close_hook(1)  # nothing open: nobody notified
    assert of(cmds, Notify) == []
    assert OpenGate  # vocabulary
