"""LR-001 … LR-010: start, recovery, supersession, stale epochs, reconnect."""

from __future__ import annotations

import pytest
from registry_kit import TASK, Driver, closes, kinds, of, reports, sends

from leasegate.core.registry import (
    BridgeAuthenticated,
    CallDone,
    CloseRun,
    RunCleanup,
)


@pytest.mark.parametrize(
    ("task", "epoch"),
    [
        (5, 1),
        ("", 1),
        ("x" * 129, 1),
        ("a\x00b", 1),
        ("a\x1fb", 1),
        ("a\x7fb", 1),
        (TASK, 0),
        (TASK, -1),
        (TASK, 1.0),
        (TASK, True),
        (TASK, 2**53),
        (TASK, "1"),
    ],
)
def test_LR_001_invalid_assignment_fails_and_registers_nothing(task: object, epoch: object) -> None:
    d = Driver()
    out = d.start(task, epoch)
    assert kinds(out) == ["done:invalid task assignment"]
    assert d.reg.status(TASK) is None


def test_LR_001_boundary_assignment_is_valid() -> None:
    d = Driver()
    out = d.start("x" * 128, 2**53 - 1)
    assert kinds(out)[-1] == "done:None"


def test_LR_002_stale_epoch_fails_and_leaves_run_untouched() -> None:
    d = Driver()
    d.start(epoch=5)
    out = d.start(epoch=4)
    assert kinds(out) == ["done:stale task assignment"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.assignment.run_epoch == 5


def test_LR_003_start_closes_starting_then_requests_without_cleanup() -> None:
    d = Driver()
    out = d.start()
    assert kinds(out) == ["close:starting", "StartTimer", "send:lease.request", "done:None"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "waiting"
    assert st.pending_op is not None


def test_LR_004_recovery_cleans_up_before_the_first_request() -> None:
    d = Driver(auto_cleanups=False)
    out = d.start(recovery=True)
    assert kinds(out) == ["close:recovery", "cleanup:full:recovery"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "recovering"
    assert st.pending_op is None
    out = d.finish_cleanup()
    assert kinds(out) == ["StartTimer", "send:lease.request", "done:None"]
    assert d.reg.status(TASK).phase == "waiting"  # type: ignore[union-attr]


def test_LR_005_superseding_start_ends_old_run_first() -> None:
    d = Driver(auto_cleanups=False)
    d.start(epoch=1)
    out = d.start(epoch=2, recovery=True)
    assert closes(out) == ["superseded", "recovery"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.assignment.run_epoch == 2
    assert st.phase == "recovering"
    d2 = Driver(auto_cleanups=False)
    d2.start(epoch=1)
    assert closes(d2.start(epoch=2)) == ["superseded", "starting"]


def test_LR_006_successor_waits_for_predecessor_cleanup_on_its_queue() -> None:
    d = Driver(auto_cleanups=False)
    d.start(epoch=1)
    out = d.start(epoch=2, recovery=True)
    cleanups = of(out, RunCleanup)
    # Only the predecessor's ended-run cleanup: no separate recovery cleanup.
    assert [(c.request.assignment.run_epoch, c.request.reason) for c in cleanups] == [
        (1, "superseded")
    ]
    assert sends(out) == []
    out = d.finish_cleanup()
    assert [f.run_epoch for f in sends(out)] == [2]
    assert of(out, RunCleanup) == []


def test_LR_006_predecessor_cleanup_queued_behind_its_install() -> None:
    d = Driver(auto_installs=False)
    d.start(epoch=1)
    d.grant()
    assert len(d.pending_installs) == 1
    d.auto_cleanups = False
    out = d.start(epoch=2)
    assert of(out, RunCleanup) == []  # behind the install in flight
    out = d.finish_install()
    assert [c.request.reason for c in of(out, RunCleanup)] == ["superseded"]


def test_LR_007_failed_startup_cleanup_fails_start_and_is_retried_by_same_start() -> None:
    d = Driver(auto_cleanups=False)
    d.start(recovery=True)
    out = d.finish_cleanup(ok=False)
    assert kinds(out) == ["done:credential lease operation failed"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "recovering"
    assert st.pending_op is None
    assert st.timers == ()
    out = d.start(recovery=True)
    assert kinds(out) == ["cleanup:full:recovery"]
    # A start while that one is in flight joins it.
    out = d.start()
    assert kinds(out) == []
    out = d.finish_cleanup()
    assert kinds(out) == ["StartTimer", "send:lease.request", "done:None", "done:None"]


def test_LR_008_same_assignment_start_only_attempts_a_request() -> None:
    d = Driver()
    d.start()
    assert kinds(d.start(recovery=True)) == ["done:None"]  # a request is pending
    d.grant()
    assert d.reg.status(TASK).phase == "usable"  # type: ignore[union-attr]
    # No op pending now: a same-assignment start sends a request, nothing else.
    assert kinds(d.start()) == ["CancelTimer", "StartTimer", "send:lease.request", "done:None"]
    assert d.reg.status(TASK).gate_open  # type: ignore[union-attr]
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=99, task_id=TASK, run_epoch=1))
    assert kinds(d.start()) == ["done:None"]  # ended, being closed: nothing


def test_LR_009_failed_initial_close_quarantines_and_cleans_before_requesting() -> None:
    d = Driver(auto_cleanups=False)
    d.gate_fail = lambda c: getattr(c, "reason", None) == "starting"
    out = d.start()
    assert kinds(out) == [
        "close:starting",
        "report:credential lease operation failed",
        "close:cleanup-failed",
        "cleanup:full:cleanup-failed",
    ]
    out = d.finish_cleanup()
    assert "send:lease.request" in kinds(out)
    assert kinds(out)[-1] == "done:None"
    st = d.reg.status(TASK)
    assert st is not None
    assert not st.quarantined


def test_LR_009_failed_cleanup_after_failed_close_fails_start_and_arms_retry() -> None:
    d = Driver(auto_cleanups=False)
    d.gate_fail = lambda c: getattr(c, "reason", None) == "starting"
    d.start()
    out = d.finish_cleanup(ok=False)
    assert "done:credential lease operation failed" in kinds(out)
    assert "cleanup-retry" in d.reg.status(TASK).timers  # type: ignore[union-attr]
    assert sends(out) == []


def test_LR_010_reconnect_replaces_pending_op_and_keeps_bundles() -> None:
    d = Driver()
    d.start()
    first = d.op_id()
    out = d.feed(BridgeAuthenticated(now_ms=d.now))
    assert kinds(out) == ["CancelTimer", "StartTimer", "send:lease.request"]
    assert d.op_id() != first
    d.grant()
    st = d.reg.status(TASK)
    assert st is not None
    assert st.gate_open
    out = d.feed(BridgeAuthenticated(now_ms=d.now))
    # The renewal timer is cancelled by the request (LR-012).
    assert kinds(out) == ["CancelTimer", "StartTimer", "send:lease.request"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.gate_open
    assert st.phase == "usable"
    assert of(out, CallDone) == []
    assert reports(out) == []
