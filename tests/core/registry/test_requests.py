"""LR-011 … LR-017: lease requests, op ids, timeouts and the retry timer."""

from __future__ import annotations

import re

from registry_kit import TASK, Driver, engine, grant, kinds, manifest, of, sends

from leasegate.core.registry import (
    LEASE_REQUEST_TIMEOUT_MS,
    LEASE_RETRY_MS,
    BridgeAuthenticated,
    LaunchFenceFailed,
    SendFailed,
    SendFrame,
    StartTimer,
)
from leasegate.core.wire.lease import LeaseRequest


def test_LR_011_no_request_while_pending_recovering_lost_or_quarantined() -> None:
    d = Driver(auto_cleanups=False)
    d.start(recovery=True)
    assert sends(d.feed(BridgeAuthenticated(now_ms=d.now))) == []  # recovering
    d.finish_cleanup()
    assert len(sends(d.log)) == 1
    assert sends(d.start()) == []  # pending
    d.grant()
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))  # full cleanup: lost
    assert d.reg.status(TASK).phase == "lost"  # type: ignore[union-attr]
    assert sends(d.feed(BridgeAuthenticated(now_ms=d.now))) == []
    # quarantined (a grant narrowing whose close failed; its cleanup in flight)
    q = Driver(auto_cleanups=False)
    q.start()
    q.grant(m=manifest(engines=[engine(0), engine(1)]))
    q.start()
    q.gate_fail = lambda c: getattr(c, "reason", "") == "manifest-narrowed"
    q.grant(m=manifest(engines=[engine(0)]), revision=5)
    st = q.reg.status(TASK)
    assert st is not None
    assert st.quarantined
    assert not st.full_cleanup
    assert st.phase == "usable"
    assert sends(q.feed(BridgeAuthenticated(now_ms=q.now))) == []
    assert q.reg.status(TASK).pending_op is None  # type: ignore[union-attr]


def test_LR_012_request_order_cancels_retry_and_renewal_then_sends() -> None:
    d = Driver()
    d.usable()
    st = d.reg.status(TASK)
    assert st is not None
    assert "renewal" in st.timers
    out = d.feed(BridgeAuthenticated(now_ms=d.now))
    assert kinds(out) == ["CancelTimer", "StartTimer", "send:lease.request"]
    timer = of(out, StartTimer)[0]
    assert timer.delay_ms == LEASE_REQUEST_TIMEOUT_MS == 20_000
    frame = sends(out)[0]
    assert isinstance(frame, LeaseRequest)
    assert (frame.task_id, frame.run_epoch) == (TASK, 1)
    assert d.reg.status(TASK).pending_op == frame.op_id  # type: ignore[union-attr]


def test_LR_013_op_ids_are_prefixed_counted_and_safe() -> None:
    d = Driver()
    d.start()
    op1 = d.op_id()
    d.feed(BridgeAuthenticated(now_ms=d.now))
    op2 = d.op_id()
    assert re.fullmatch(r"lease-1-[A-Za-z0-9_-]{1,64}", op1)
    assert re.fullmatch(r"lease-2-[A-Za-z0-9_-]{1,64}", op2)
    assert op1.split("-", 2)[2] != op2.split("-", 2)[2]
    # Same seed, same ids; another seed, other ids.
    e = Driver()
    e.start()
    assert e.op_id() == op1
    f = Driver(seed="other")
    f.start()
    assert f.op_id() != op1


def test_LR_014_send_failure_cancels_timeout_and_arms_retry_without_report() -> None:
    d = Driver()
    out = d.start()
    send = of(out, SendFrame)[0]
    timeout = of(out, StartTimer)[0]
    out = d.feed(SendFailed(now_ms=d.now, cmd_id=send.cmd_id))
    assert kinds(out) == ["CancelTimer", "StartTimer"]
    assert out[0].timer_id == timeout.timer_id  # type: ignore[attr-defined]
    assert out[1].delay_ms == LEASE_RETRY_MS  # type: ignore[attr-defined]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.pending_op is None
    assert st.timers == ("retry",)


def test_LR_015_timeout_drops_op_arms_retry_and_late_grant_is_ignored() -> None:
    d = Driver()
    d.start()
    op = d.op_id()
    out = d.advance(LEASE_REQUEST_TIMEOUT_MS)
    assert kinds(out) == ["StartTimer"]
    assert sends(out) == []
    assert d.reg.status(TASK).timers == ("retry",)  # type: ignore[union-attr]
    assert d.frame(grant(op)) == []


def test_LR_016_retry_timer_is_single_and_requests_when_it_fires() -> None:
    d = Driver()
    d.start()
    d.advance(LEASE_REQUEST_TIMEOUT_MS)
    # A lease.unavailable for no op does nothing; the retry stays single.
    d.frame({"kind": "lease.unavailable", "opId": "nope"})
    assert d.reg.status(TASK).timers == ("retry",)  # type: ignore[union-attr]
    out = d.advance(LEASE_RETRY_MS - 1)
    assert sends(out) == []
    out = d.advance(1)
    assert kinds(out) == ["StartTimer", "send:lease.request"]


def test_LR_017_grant_being_answered_keeps_its_op_pending() -> None:
    d = Driver(auto_reads=False)
    d.start()
    op = d.op_id()
    d.grant()
    st = d.reg.status(TASK)
    assert st is not None
    assert st.pending_op == op
    assert st.answering
    # repeated start, reconnect-less requests and time send nothing
    assert sends(d.start()) == []
    assert sends(d.advance(10 * LEASE_REQUEST_TIMEOUT_MS)) == []
    assert d.reg.status(TASK).pending_op == op  # type: ignore[union-attr]
    d.finish_read()
    assert d.reg.status(TASK).gate_open  # type: ignore[union-attr]
