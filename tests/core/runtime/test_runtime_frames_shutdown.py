"""RT-117 … RT-141: frame dispatch, bridge, shutdown ordering and drain, constants."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_kit import TASK, RtDriver, begin_frame, commit_frame, grant, of

from leasegate.core.registry import (
    BridgeAuthenticated,
    CancelTimer,
    FrameReceived,
    StartTimer,
)
from leasegate.core.runtime import (
    CLEANUP_CLASSES,
    ENV_READY_POLL_MS,
    ENV_READY_TIMEOUT_MS,
    LAUNCH_READY_DEADLINE_MS,
    RECOVERY_RETRY_BASE_MS,
    RECOVERY_RETRY_MAX_MS,
    SHUTDOWN_DRAIN_MS,
    V1_FRAME_KINDS,
    Answer,
    ConsumerWork,
    CredentialFailure,
    DetachConsumers,
    EndStart,
    ReleaseHold,
    ResumeRecovered,
    RuntimeShutdown,
    SendAck,
    Settled,
)

SHUTDOWN = CredentialFailure.interrupted("shutdown")


def _frames(d: RtDriver) -> list[Any]:
    return [e.frame for e in d.reg_events if isinstance(e, FrameReceived)]


def test_RT_117_grant_is_started_and_answered_true_without_waiting() -> None:
    d = RtDriver(replica=True)
    d.begin()
    c = d.grant()
    assert d.value(c) is True
    assert "install" in d.rt.tracked()  # still waiting for env: handled in the background


def test_RT_118_a_serial_dispatcher_does_not_deadlock() -> None:
    # Against the fake replica. Each handleFrame is answered before the next is fed.
    d = RtDriver(replica=True)
    s = d.begin()
    w = d.wait(s)
    g = d.grant()
    assert d.value(g) is True
    f = d.frame(commit_frame(TASK, 1, ("proj-0",)))
    assert d.value(f) is True
    assert d.value(w) is not None


def test_RT_119_unavailable_and_stale_are_handled_synchronously() -> None:
    d = RtDriver()
    d.begin()
    op = d.op_id()
    n = len(d.out)
    c = d.frame({"kind": "lease.unavailable", "opId": op})
    assert d.value(c) is True
    assert any(isinstance(x, StartTimer) and x.timer_id > 0 for x in d.out[n:])
    st = {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": 1,
        "wantedRevision": 9,
        "minRevision": None,
        "removed": [],
    }
    c = d.frame(st)
    assert d.value(c) is True
    assert _frames(d)[-1] is st


def test_RT_120_deny_goes_to_the_registry_and_is_reported_unhandled() -> None:
    d = RtDriver()
    d.begin()
    deny = {"kind": "lease.deny", "opId": d.op_id(), "error": "no"}
    c = d.frame(deny)
    assert d.value(c) is False
    assert _frames(d)[-1] is deny


def test_RT_121_changed_and_refresh_result_go_to_the_registry() -> None:
    d = RtDriver()
    for f in (
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "e",
            "revision": "r",
            "version": 2,
        },
        {
            "kind": "credential.refresh.result",
            "opId": "x",
            "outcome": "unavailable",
            "version": None,
            "expiresAt": None,
        },
    ):
        c = d.frame(f)
        assert d.value(c) is True
        assert _frames(d)[-1] is f


def test_RT_122_replica_frames_are_handled_and_acked() -> None:
    d = RtDriver(replica=True)
    d.usable()
    f = commit_frame(TASK, 1, ("proj-0",))
    n = len(d.out)
    c = d.frame(f)
    assert d.replica is not None
    assert ("frame", "EnvCommit", TASK, 1) in d.replica.calls
    acks = of(d.out[n:], SendAck)
    assert [(a.frame.task_id, a.frame.ok) for a in acks] == [(TASK, True)]
    assert d.out[n:].index(acks[0]) < d.out[n:].index(d.result(c))  # type: ignore[arg-type]
    assert d.value(c) is True


def test_RT_123_shutdown_during_replica_handling_sends_no_ack() -> None:
    # The fake answers synchronously; the asynchronous case (reads through the
    # grant's reader pending at shutdown) is tested with the real replica in
    # test_runtime_replica_int.py. Here: shut down, then the frame is taken.
    d = RtDriver(replica=True)
    d.usable()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    c = d.frame(commit_frame(TASK, 1, ("proj-0",)))
    assert d.value(c) is True
    assert of(d.out, SendAck) == []


@pytest.mark.parametrize(
    "frame",
    [
        {"kind": "env.replica.v1.commit", "taskId": TASK, "runEpoch": 1, "projectIds": []},
        {"kind": "env.replica.v1.commit", "taskId": 5},
        {"kind": "something.else"},
        "not a frame",
    ],
)
def test_RT_124_unhandled_frames_are_false_and_call_nothing(frame: object) -> None:
    d = RtDriver()  # no replica
    n = len(d.reg_events)
    c = d.frame(frame)
    assert d.value(c) is False
    assert len(d.reg_events) == n
    d2 = RtDriver(replica=True)
    c2 = d2.frame({"kind": "env.replica.v1.commit", "taskId": 5})
    assert d2.value(c2) is False


@pytest.mark.parametrize(
    ("frame", "handled"),
    [
        ({"kind": "lease.grant.v1"}, True),
        ({"kind": "lease.unavailable"}, True),
        ({"kind": "lease.stale"}, True),
        ({"kind": "credential.changed"}, True),
        ({"kind": "credential.refresh.result"}, True),
        (begin_frame(TASK, 1, ("proj-0",)), True),
        ({"kind": "env.replica.v1.begin", "taskId": TASK, "runEpoch": 1}, False),
        ({"kind": "lease.deny", "opId": "x", "error": "e"}, False),
        ({"kind": "other"}, False),
    ],
)
def test_RT_125_after_shutdown_frames_are_taken_and_ignored(frame: object, handled: bool) -> None:
    d = RtDriver()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    n = len(d.reg_events)
    c = d.frame(frame)
    assert d.value(c) is handled
    assert len(d.reg_events) == n
    assert of(d.out, SendAck) == []


def test_RT_126_lease_frames_reach_the_registry_unmodified() -> None:
    d = RtDriver()
    d.begin()
    bad = {"kind": "lease.grant.v1", "opId": d.op_id(), "lease": {"nonsense": True}}
    c = d.frame(bad)
    assert d.value(c) is True
    assert _frames(d)[-1] is bad


def test_RT_127_bridge_authenticated_only_before_shutdown() -> None:
    d = RtDriver()
    d.feed(BridgeAuthenticated(now_ms=d.now))
    assert len([e for e in d.reg_events if isinstance(e, BridgeAuthenticated)]) == 1
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    d.feed(BridgeAuthenticated(now_ms=d.now))
    assert len([e for e in d.reg_events if isinstance(e, BridgeAuthenticated)]) == 1


def test_RT_128_shutdown_runs_once_and_answers_every_call() -> None:
    d = RtDriver()
    d.usable()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=2))
    shutdowns = [e for e in d.reg_events if type(e).__name__ == "Shutdown"]
    assert len(shutdowns) == 1
    assert d.value(1) is None
    assert d.value(2) is None
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=3))
    assert d.value(3) is None
    assert len([e for e in d.reg_events if type(e).__name__ == "Shutdown"]) == 1


def test_RT_129_shut_down_as_soon_as_the_call_returns() -> None:
    d = RtDriver(replica=True)
    s = d.usable()
    d.hold_work = lambda c: c.op == "drain"
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert d.result(1) is None  # the promise has not settled
    assert d.begin_result(run=2) is not None
    assert d.error(d._call) == SHUTDOWN  # beginStart throws
    assert d.rt.current_start(TASK) is None
    assert d.hold(s).value is None  # type: ignore[union-attr]
    assert d.error(d.wait(s)) == CredentialFailure(message="this start was interrupted")
    assert d.rt.env_snapshot(TASK, 1, ("proj-0",)) is None
    v = d.rt.registry.current_view(TASK, 1, d.now)
    assert v is None
    d.grant(lease_id="lease-2")  # a grant after the shutdown opens no gate
    assert d.rt.open_run(TASK) is None
    assert d.rt.status(TASK).phase == "shut"  # type: ignore[union-attr]


def test_RT_130_shutdown_order_gates_then_aborts_then_scrub() -> None:
    d = RtDriver(replica=True)
    s = d.usable()
    d.frame(commit_frame(TASK, 1, ("proj-0",)))
    h = d.hold(s).value  # type: ignore[union-attr]
    s2 = d.begin(task="t2")
    w2 = d.wait(s2)
    ln = len(d.log)
    n = len(d.out)
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    out = d.out[n:]
    assert ("engines", "close", TASK, "1") in d.log[ln:]
    assert ("engines", "close", "t2", "1") in d.log[ln:]
    kinds = [type(c).__name__ for c in out]
    first_abort = kinds.index("Abort")
    assert kinds.index("Failed") < first_abort or d.error(w2) is not None
    assert d.rt.hold_reason(h.hold_id) is not None
    assert "DetachConsumers" in kinds
    assert d.replica is not None
    assert ("drop_all",) in d.replica.calls


def test_RT_130_begun_records_the_registry_does_not_track_are_closed_too() -> None:
    d = RtDriver()
    d.begin(task="")  # the registry refuses it ("invalid task assignment"); the record stays
    assert d.rt.registry.status("") is None
    ln = len(d.log)
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert ("engines", "close", "", "1") in d.log[ln:]
    status = d.rt.status("")
    assert status is not None
    assert status.run_epoch is None
    assert status.phase == "shut"


def test_RT_131_scrub_ends_recoveries_drops_replica_detaches() -> None:
    d = RtDriver(replica=True)
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert not d.rt.has_recovery(TASK)
    assert d.replica is not None
    assert d.replica.calls.count(("drop_all",)) == 2  # both scrubs (drain ended at once)
    assert len(of(d.out, DetachConsumers)) == 2


def test_RT_132_a_hold_fenced_by_shutdowns_close_keeps_withdrawn() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.feed(EndStart(now_ms=d.now, start_id=s))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert d.rt.hold_reason(h.hold_id) == CredentialFailure(
        message="the task's credentials were withdrawn"
    )


def test_RT_133_drain_rounds_join_work_and_consumer_drains() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.hold_work = lambda c: c.op == "drain"
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    drains = [c for c in d.pending_work if c.op == "drain"]
    assert [c.consumer for c in drains] == ["engines", "person", "mcp"]
    for c in list(drains):
        d.finish_work(c)
    assert d.result(1) is None  # the hold is still tracked
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    # the round joined the hold's release; nothing new was registered: done
    assert len([c for c in of(d.out, ConsumerWork) if c.op == "drain"]) == 3
    assert d.value(1) is None


def test_RT_134_work_registered_during_the_drain_is_joined() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op in ("drain", "quiesce")
    c = d.close()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    for w in [w for w in d.pending_work if w.op == "drain"]:
        d.finish_work(w)
    assert d.result(1) is None  # the close's cleanup is joined
    d.finish_work(next(w for w in d.pending_work if w.op == "quiesce"))
    for w in [w for w in d.pending_work if w.op == "drain"]:
        d.finish_work(w)
    assert d.value(1) is None
    assert d.value(c) is None


def test_RT_135_the_drain_is_bounded() -> None:
    d = RtDriver(shutdown_drain_ms=1_000)
    s = d.usable()
    d.hold(s)
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    d.advance(999)
    assert d.result(1) is None
    d.advance(1)
    assert d.value(1) is None
    d2 = RtDriver()
    n = len(d2.out)
    d2.feed(RuntimeShutdown(now_ms=d2.now, call_id=1))
    bound = [c for c in of(d2.out[n:], StartTimer) if c.delay_ms == SHUTDOWN_DRAIN_MS]
    assert len(bound) == 1
    assert bound[0].timer_id in [c.timer_id for c in of(d2.out[n:], CancelTimer)]


def test_RT_136_second_scrub_before_the_answer() -> None:
    d = RtDriver(replica=True)
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    kinds = [type(c).__name__ for c in d.out]
    assert kinds.count("DetachConsumers") == 2
    last_detach = len(kinds) - 1 - kinds[::-1].index("DetachConsumers")
    assert kinds.index("Answer") > last_detach


def test_RT_137_no_cleanup_starts_after_shutdown() -> None:
    d = RtDriver()
    s = d.usable()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    n = len(d.reg_events)
    c = d.close()
    d.feed(
        __import__("leasegate.core.runtime", fromlist=["AbandonStart"]).AbandonStart(
            now_ms=d.now, call_id=77, start_id=s
        )
    )
    assert d.value(c) is None
    assert d.value(77) is None
    assert [e for e in d.reg_events[n:] if type(e).__name__ == "CloseRun"] == []


def test_RT_138_settled_is_a_single_pass_over_tracked_work() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.feed(Settled(now_ms=d.now, call_id=5))
    assert d.result(5) is None
    h2 = d.hold(s).value  # type: ignore[union-attr]
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    assert isinstance(d.result(5), Answer)  # h2 registered later is not included
    assert h2 is not None


def test_RT_139_constants() -> None:
    assert LAUNCH_READY_DEADLINE_MS == 180_000
    assert ENV_READY_TIMEOUT_MS == 60_000
    assert ENV_READY_POLL_MS == 50
    assert SHUTDOWN_DRAIN_MS == 30_000
    assert RECOVERY_RETRY_BASE_MS == 1_000
    assert RECOVERY_RETRY_MAX_MS == 30_000


def test_RT_140_zero_options_are_honoured() -> None:
    d = RtDriver(launch_deadline_ms=0, recovery_retry_base_ms=0)
    s = d.begin()
    n = len(d.out)
    d.wait(s)
    assert [c.delay_ms for c in of(d.out[n:], StartTimer) if c.timer_id < 0] == [0]
    d2 = RtDriver(recovery_retry_base_ms=0)
    d2.usable(run=1)
    d2.work_fail = lambda c: c.op == "cleanup"
    d2.feed(ResumeRecovered(now_ms=d2.now, task_id=TASK, run_epoch=2))
    retry = d2.rt.status(TASK).recovery_retry_timer  # type: ignore[union-attr]
    assert d2.timers[retry] == d2.now  # type: ignore[index]


def test_RT_141_cleanup_classes_and_v1_kinds() -> None:
    assert CLEANUP_CLASSES == ("engine", "mcp", "github", "ssh")
    assert set(V1_FRAME_KINDS) == {
        "lease.grant.v1",
        "lease.unavailable",
        "lease.stale",
        "credential.changed",
        "credential.refresh.result",
    }
    assert "lease.deny" not in V1_FRAME_KINDS
    assert grant  # kit import
