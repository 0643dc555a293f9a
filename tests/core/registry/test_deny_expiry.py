"""LR-110 … LR-118: lease.unavailable, lease.deny, expiry and renewal."""

from __future__ import annotations

from registry_kit import T0, TASK, Driver, kinds, of, reads, reports, sends

from leasegate.core.registry import (
    LEASE_RENEW_LEAD_MS,
    LEASE_RETRY_MS,
    OpenGate,
    RunInstall,
    StartTimer,
)


def test_LR_110_unavailable_drops_op_and_arms_retry_gate_untouched() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    d.start()
    op = d.op_id()
    assert d.frame({"kind": "lease.unavailable", "opId": "other"}) == []
    assert d.frame({"kind": "lease.unavailable"}) == []
    out = d.frame({"kind": "lease.unavailable", "opId": op})
    assert kinds(out) == ["CancelTimer", "StartTimer"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.gate_open
    assert st.pending_op is None
    assert "retry" in st.timers


def test_LR_111_deny_frame_must_be_exact() -> None:
    d = Driver()
    d.start()
    op = d.op_id()
    for bad in [
        {"kind": "lease.deny", "opId": op},
        {"kind": "lease.deny", "opId": op, "error": ""},
        {"kind": "lease.deny", "opId": op, "error": "x" * 513},
        {"kind": "lease.deny", "opId": op, "error": "x", "extra": 1},
        {"kind": "lease.deny", "opId": "bad op", "error": "x"},
        {"kind": "lease.deny", "opId": "other", "error": "x"},
        [{"kind": "lease.deny", "opId": op, "error": "x"}],
    ]:
        assert d.frame(bad) == []
    assert d.frame({"kind": "lease.deny", "opId": op, "error": "x" * 512}) != []


def test_LR_112_deny_cleans_up_then_retries_after_30s() -> None:
    d = Driver()
    d.usable()
    d.start()
    op = d.op_id()
    out = d.frame({"kind": "lease.deny", "opId": op, "error": "CANARY-deny-text"})
    names = kinds(out)
    assert names[:4] == ["CancelTimer", "close:denied", "close:denied", "cleanup:full:denied"]
    assert sends(out) == []
    assert [t.delay_ms for t in of(out, StartTimer)] == [LEASE_RETRY_MS]
    assert "CANARY" not in repr(out)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "waiting"
    assert "retry" in st.timers
    out = d.advance(LEASE_RETRY_MS)
    assert "send:lease.request" in kinds(out)


def test_LR_113_deny_cleanup_failure() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()
    d.frame({"kind": "lease.deny", "opId": d.op_id(), "error": "no"})
    out = d.finish_cleanup(ok=False)
    assert kinds(out)[:3] == [
        "report:credential lease operation failed",
        "close:cleanup-failed",
        "StartTimer",
    ]
    assert reports(out) == ["credential lease operation failed"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert "cleanup-retry" in st.timers


def test_LR_114_bundle_timer_delays() -> None:
    d = Driver()
    d.start()
    out = d.grant(expires_at=T0 + 700_000)
    assert [t.delay_ms for t in of(out, StartTimer)] == [100_000, 700_000]
    e = Driver()
    e.start()
    out = e.grant(expires_at=T0 + 500_000)
    assert [t.delay_ms for t in of(out, StartTimer)] == [1_000, 500_000]


def test_LR_115_renewal_requests_with_gate_open() -> None:
    d = Driver()
    d.start()
    d.grant(expires_at=T0 + LEASE_RENEW_LEAD_MS + 5_000)
    out = d.advance(5_000)
    assert kinds(out) == ["StartTimer", "send:lease.request"]
    assert d.reg.current_view(TASK, 1, d.now) is not None


def test_LR_116_expiry_closes_and_cleans_then_requests() -> None:
    d = Driver()
    d.start()
    d.grant(expires_at=T0 + LEASE_RENEW_LEAD_MS + 5_000)
    d.advance(LEASE_RENEW_LEAD_MS + 4_999)
    # Whatever renewal attempts happened, leave no op pending at expiry.
    d.frame({"kind": "lease.unavailable", "opId": d.op_id()})
    out = d.advance(1)
    names = kinds(out)
    assert names[:3] == ["close:expired", "close:expired", "cleanup:full:expired"]
    assert names.index("cleanup:full:expired") < names.index("CloseReader")
    assert names.index("CloseReader") < names.index("send:lease.request")
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "waiting"
    assert st.installed_revision is None


def test_LR_117_expired_bundle_is_never_usable() -> None:
    d = Driver()
    d.start()
    d.grant(expires_at=T0 + 10_000)
    assert d.reg.current_view(TASK, 1, T0 + 9_999) is not None
    assert d.reg.current_view(TASK, 1, T0 + 10_000) is None
    assert d.reg.files_access(TASK, 1, T0 + 10_000) is None


def test_LR_118_renewal_grant_is_a_full_grant() -> None:
    d = Driver()
    d.usable()
    d.start()
    out = d.grant(lease_id="lease-2")
    assert reads(out)
    inst = of(out, RunInstall)[0].request
    assert inst.previous is not None
    assert inst.project_set_changed is False
    assert of(out, OpenGate)[0].view.lease_id == "lease-2"
    assert not any(k.startswith("close:") for k in kinds(out))
