"""Reference quirks (catalog end): the decisions of docs/registry.md, tested."""

from __future__ import annotations

from registry_kit import TASK, Driver, kinds, sends

from leasegate.core.registry import CloseRun, LaunchFenceFailed


def test_quirk_Q1_same_epoch_start_finishes_the_cleanup_failed_full_cleanup() -> None:
    d = Driver(auto_cleanups=False)
    d.gate_fail = lambda c: getattr(c, "reason", "") == "recovery"
    d.start(recovery=True)
    out = d.finish_cleanup(ok=False)
    assert kinds(out) == ["done:credential lease operation failed"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.quarantined
    assert st.phase == "recovering"
    d.gate_fail = lambda c: False
    assert kinds(d.start()) == ["cleanup:full:recovery"]
    out = d.finish_cleanup()
    assert kinds(out) == ["close:cleanup-failed", "cleanup:full:cleanup-failed"]
    out = d.finish_cleanup()
    assert "send:lease.request" in kinds(out)
    st = d.reg.status(TASK)
    assert st is not None
    assert not st.quarantined
    assert st.phase == "waiting"


def test_quirk_Q2_full_cleanup_never_revives_an_ended_run() -> None:
    d = Driver(auto_cleanups=False)
    d.gate_fail = lambda c: getattr(c, "reason", "") == "recovery"
    d.start(recovery=True)  # close failed; startup cleanup in flight
    d.gate_fail = lambda c: False
    d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))
    out = d.finish_cleanup()  # the startup cleanup: the start would now run its
    # "cleanup-failed" full cleanup on the ended run; the port does nothing.
    assert "cleanup:full:cleanup-failed" not in kinds(out)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "ended"
    d.finish_cleanup(ok=False)  # the close's own cleanup fails: the run stays registered
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "ended"
    assert sends(d.log) == []
    assert d.advance(10 * 60_000) == []


def test_quirk_Q11_launch_fence_during_startup_keeps_phase_lost() -> None:
    d = Driver(auto_cleanups=False)
    d.start(recovery=True)
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_cleanup()  # the startup cleanup
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert st.full_cleanup
    assert sends(d.log) == []
    out = d.finish_cleanup()  # the fence's full cleanup
    assert "send:lease.request" in kinds(out)
    assert d.reg.status(TASK).phase == "waiting"  # type: ignore[union-attr]
