"""LR-066 … LR-077: gate holds, quarantine, the full-cleanup procedure, the queue."""

from __future__ import annotations

from registry_kit import TASK, Driver, engine, kinds, manifest, of, sends

from leasegate.core.registry import (
    LEASE_RETRY_MS,
    BridgeAuthenticated,
    CloseRun,
    LaunchFenceFailed,
    OpenGate,
    RunCleanup,
    StartRun,
)


def _fence(d: Driver) -> list[object]:
    return d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))


def _narrowing_grant(d: Driver) -> None:
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0)]))


def test_LR_066_committed_grant_waiting_for_old_readers_does_not_open_under_a_hold() -> None:
    d = Driver(auto_reads=False, auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.finish_read()
    # a credential change keeps the old bundle's reader busy
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 7,
        }
    )
    change = d.pending_reads.pop(0)
    # grant A commits and waits for the old reader to drain before opening
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0), engine(1)]), lease_id="lease-A")
    d.finish_read()
    assert d.reg.status(TASK).installed_revision == 5  # type: ignore[union-attr]
    # grant B narrows against A: close, hold, selective cleanup in flight
    d.feed(BridgeAuthenticated(now_ms=d.now))
    d.grant(revision=6, m=manifest(engines=[engine(0)]), lease_id="lease-B")
    d.finish_read()
    assert d.reg.status(TASK).holds == 1  # type: ignore[union-attr]
    # the old reader drains: A's open is skipped because B holds the gate
    out = d.finish_read(change)
    assert of(out, OpenGate) == []
    assert not d.reg.status(TASK).gate_open  # type: ignore[union-attr]
    # B's release opens B's view
    out = d.finish_cleanup()
    assert [o.view.lease_id for o in of(out, OpenGate)] == ["lease-B"]


def test_LR_067_last_release_opens_the_committed_bundle() -> None:
    d = Driver(auto_cleanups=False)
    _narrowing_grant(d)
    out = d.finish_cleanup()
    o = of(out, OpenGate)
    assert len(o) == 1
    assert o[0].view.manifest_revision == 5
    st = d.reg.status(TASK)
    assert st is not None
    assert st.holds == 0
    assert st.gate_open


def test_LR_068_failed_hold_transition_goes_lost_before_release() -> None:
    d = Driver(auto_cleanups=False)
    _narrowing_grant(d)
    out = d.finish_cleanup(ok=False)
    assert of(out, OpenGate) == []
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert st.holds == 0


def test_LR_069_quarantine_blocks_requests_grants_opens_and_views() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "fence-failed"
    _fence(d)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.quarantined
    assert d.reg.current_view(TASK, 1, d.now) is None
    assert d.reg.files_access(TASK, 1, d.now) is None
    assert sends(d.start()) == []


def test_LR_070_quarantine_lifted_only_by_full_cleanup() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "fence-failed"
    _fence(d)
    d.gate_fail = lambda c: False
    out = d.finish_cleanup()
    # retried close after the cleanup lifts it; a second full cleanup follows
    assert kinds(out)[-2:] == ["close:fence-failed", "cleanup:full:fence-failed"]
    assert not d.reg.status(TASK).quarantined  # type: ignore[union-attr]
    d.finish_cleanup()
    assert d.reg.status(TASK).phase == "waiting"  # type: ignore[union-attr]


def test_LR_070_retried_close_failure_keeps_quarantine() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "fence-failed"
    _fence(d)
    out = d.finish_cleanup()
    assert "report:task gate closure failed; assignment remains quarantined" in kinds(out)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.quarantined
    assert st.phase == "lost"
    assert "cleanup-retry" in st.timers


def test_LR_071_full_cleanup_order_and_join() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = _fence(d)
    assert kinds(out) == ["close:fence-failed", "cleanup:full:fence-failed"]
    assert of(out, RunCleanup)[0].request.remove_files_session is False
    assert d.reg.status(TASK).phase == "lost"  # type: ignore[union-attr]
    assert _fence(d) == []  # joins: no second close, no second cleanup
    t = Driver(runner_kind="task-machine", auto_cleanups=False)
    t.start()
    t.grant(files=True)
    out = _fence(t)
    assert of(out, RunCleanup)[0].request.remove_files_session is True


def test_LR_071_a_full_cleanup_started_from_inside_its_own_first_close_joins_it() -> None:
    """Decision R3: a launch-fence escalation re-entered from its close callback joins."""
    d = Driver(auto_cleanups=False)
    d.usable()
    reentered: list[list[object]] = []

    def inner(cmd: object) -> None:
        assert getattr(cmd, "reason", None) == "fence-failed"
        reentered.append(_fence(d))

    d.on_gate = inner
    mark = len(d.log)
    _fence(d)
    assert reentered == [[]]  # joined: no second close, no second cleanup
    assert kinds(d.log[mark:]) == ["close:fence-failed", "cleanup:full:fence-failed"]
    out = d.finish_cleanup()
    assert kinds(out).count("send:lease.request") == 1
    assert of(out, RunCleanup) == []
    assert d.pending_cleanups == []


def test_LR_072_success_drops_bundle_then_requests() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    _fence(d)
    out = d.finish_cleanup()
    assert kinds(out) == ["CloseReader", "CancelTimer", "StartTimer", "send:lease.request"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision is None
    assert st.phase == "waiting"
    assert st.generation == 2


def test_LR_073_failure_reports_closes_and_arms_cleanup_retry() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    _fence(d)
    out = d.finish_cleanup(ok=False)
    names = kinds(out)
    assert names[:3] == [
        "report:credential lease operation failed",
        "close:cleanup-failed",
        "StartTimer",
    ]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert "cleanup-retry" in st.timers
    out = d.advance(LEASE_RETRY_MS)
    assert kinds(out) == ["close:fence-failed", "cleanup:full:fence-failed"]


def test_LR_074_full_cleanup_keeps_op_and_old_generation_timers_do_nothing() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()
    op = d.op_id()
    _fence(d)
    assert d.reg.status(TASK).pending_op == op  # type: ignore[union-attr]
    d.finish_cleanup()  # new generation, bundle dropped
    # the old bundle's renewal and expiry timers were not cancelled, they do nothing
    out = d.advance(3 * 3_600_000)
    assert not any(k.startswith("close:expired") for k in kinds(out))


def test_LR_074_expiry_during_full_cleanup_closes_again_and_joins() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    _fence(d)
    out = d.advance(2 * 3_600_000)
    assert "close:expired" in kinds(out)
    assert not any(k.startswith("cleanup:") for k in kinds(out))


def test_LR_075_full_cleanup_cancels_selective_retry_and_blocks_narrowing() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 5,
            "minRevision": 5,
            "removed": ["engine-0"],
        }
    )
    d.finish_cleanup(ok=False)  # selective cleanup fails: selective retry armed
    assert "cleanup-retry" in d.reg.status(TASK).timers  # type: ignore[union-attr]
    out = _fence(d)
    assert kinds(out)[0] == "CancelTimer"
    assert "cleanup-retry" not in d.reg.status(TASK).timers  # type: ignore[union-attr]
    out = d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 7,
            "minRevision": 7,
            "removed": [],
        }
    )
    assert not any(k.startswith("close:") for k in kinds(out))


def test_LR_076_launch_fence_only_for_the_exact_active_run() -> None:
    d = Driver()
    d.usable()
    assert d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=2)) == []
    assert d.feed(LaunchFenceFailed(now_ms=d.now, task_id="other", run_epoch=1)) == []
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=1, task_id=TASK, run_epoch=1))
    assert _fence(d) == []


def test_LR_077_queue_is_fifo_per_run() -> None:
    d = Driver(auto_cleanups=False, auto_installs=False)
    d.start()
    d.grant()
    d.feed(StartRun(now_ms=d.now, call_id=50, task_id=TASK, run_epoch=2))
    # predecessor's ended cleanup waits for its install; a failing install does not block it
    assert d.pending_cleanups == []
    d.finish_install(ok=False)
    assert [c.request.reason for c in d.pending_cleanups] == ["superseded"]
