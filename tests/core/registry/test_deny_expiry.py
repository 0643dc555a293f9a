"""LR-110 … LR-118: lease.unavailable, lease.deny, expiry and renewal."""

from __future__ import annotations

from typing import Any

import pytest
from registry_kit import T0, TASK, Driver, closes, kinds, of, reads, reports, sends

from leasegate.core.registry import (
    LEASE_RENEW_LEAD_MS,
    LEASE_RETRY_MS,
    OpenGate,
    RunInstall,
    StartTimer,
)

HOUR_MS = 3_600_000


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


def test_LR_071_LR_112_deny_joining_a_cleanup_in_flight_asks_once_more() -> None:
    # A lease.stale while the grant is installing withdraws it (LR-080); its
    # full cleanup "manifest-narrowed" is in flight when the deny of the new
    # request comes: the deny joins it (LR-071) and that cleanup's end asks
    # again at once (LR-072). The deny of that request, with no cleanup in
    # flight, then waits for the retry (LR-112).
    d = Driver(auto_cleanups=False, auto_installs=False)
    d.start()
    d.grant()
    stale = {"kind": "lease.stale", "taskId": TASK, "runEpoch": 1, "wantedRevision": 100}
    assert "send:lease.request" in kinds(d.frame({**stale, "minRevision": None, "removed": []}))
    assert "cleanup:full:manifest-narrowed" in kinds(d.finish_install())
    out = d.frame({"kind": "lease.deny", "opId": d.op_id(), "error": "x"})
    assert kinds(out) == ["CancelTimer", "close:denied"]
    assert "send:lease.request" in kinds(d.finish_cleanup())
    out = d.frame({"kind": "lease.deny", "opId": d.op_id(), "error": "x"})
    assert kinds(out) == ["CancelTimer", "close:denied", "close:denied", "cleanup:full:denied"]
    out = d.finish_cleanup()
    assert sends(out) == []
    assert [t.delay_ms for t in of(out, StartTimer)] == [LEASE_RETRY_MS]


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
    out = d.grant(expires_at=T0 + 1_000_000)
    assert [t.delay_ms for t in of(out, StartTimer)] == [400_000, 1_000_000]
    e = Driver()
    e.start()
    out = e.grant(expires_at=T0 + 800_000)  # the shortest ordinary lease
    assert [t.delay_ms for t in of(out, StartTimer)] == [200_000, 800_000]


def _renewal_delay(lease_ms: int, **kw: Any) -> int:
    d = Driver()
    d.start(task=kw.setdefault("task", TASK))
    out = d.grant(expires_at=T0 + lease_ms, **kw)
    renewal, expiry = of(out, StartTimer)
    assert expiry.delay_ms == lease_ms
    return int(renewal.delay_ms)


@pytest.mark.parametrize("lease_ms", [300_000, 500_000, 600_001, 799_999])
def test_LR_114_a_short_lease_renews_after_two_thirds_of_its_lifetime_less_jitter(
    lease_ms: int,
) -> None:
    delays = {_renewal_delay(lease_ms, lease_id=f"lease-{i}", task=f"task-{i}") for i in range(12)}
    assert all(lease_ms * 2 * 9 // 30 <= t <= lease_ms * 2 // 3 for t in delays), delays
    assert len(delays) > 1  # the jitter spreads runners out
    # Deterministic: the same events give the same delay.
    assert _renewal_delay(lease_ms, lease_id="lease-3", task="task-3") in delays
    assert _renewal_delay(lease_ms) == _renewal_delay(lease_ms)


def test_LR_114_a_lease_shorter_than_1_5_s_keeps_the_1_s_floor() -> None:
    assert _renewal_delay(1_200) == 1_000


def _requests_in_one_hour(lease_ms: int) -> tuple[int, int]:
    """Drive one simulated hour against a cloud granting ``lease_ms`` leases.

    Returns the number of ``lease.request`` sent and of ``expired`` gate closes.
    """
    d = Driver()
    d.start()
    answered: set[str] = set()
    end = d.now + HOUR_MS
    while d.now < end:
        op = d.op_id()
        if op not in answered:
            answered.add(op)
            d.grant(expires_at=d.now + lease_ms)
        due = min([t for t in d.timers.values() if t > d.now], default=end)
        d.advance(max(1, min(due, end) - d.now))
    requests = [f for f in sends(d.log) if type(f).__name__ == "LeaseRequest"]
    return len(requests), closes(d.log).count("expired")


@pytest.mark.parametrize("lease_ms", [300_000, 600_000, 600_001, 660_000])
def test_LR_114_a_short_lease_cloud_sees_a_bounded_number_of_requests_per_hour(
    lease_ms: int,
) -> None:
    requests, expired = _requests_in_one_hour(lease_ms)
    # One renewal per lifetime, at least 0.6 of it after the commit: at most
    # 1 + 3 600 000 / (0.6 x lifetime) requests an hour (21 for 5-minute leases).
    assert requests <= 1 + HOUR_MS * 10 // (6 * lease_ms), requests
    assert requests >= HOUR_MS * 3 // (2 * lease_ms)  # still renewed every lifetime
    assert expired == 0  # renewed before every expiry


@pytest.mark.parametrize(
    ("lease_ms", "want"), [(800_000, 19), (900_000, 13), (1_200_000, 7), (2 * HOUR_MS, 1)]
)
def test_LR_114_an_ordinary_lease_keeps_the_reference_schedule_for_an_hour(
    lease_ms: int, want: int
) -> None:
    # Renewal at expiresAt - 10 min: every 5 min for 15-min leases (t = 0, 5, ..., 60
    # min), every 10 min for 20-min leases, none within the hour for 2-hour leases.
    assert _requests_in_one_hour(lease_ms) == (want, 0)


def test_LR_115_renewal_requests_with_gate_open() -> None:
    d = Driver()
    d.start()
    d.grant(expires_at=T0 + 900_000 + 5_000)
    d.advance(300_000)
    assert not [f for f in sends(d.log) if type(f).__name__ == "LeaseRequest"][1:]
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
