"""LR-139 … LR-142 (views, Files access, waiters), LR-155 … LR-163 (readers, errors, limits)."""

from __future__ import annotations

import re

from registry_kit import T0, TASK, Driver, engine, kinds, manifest, of, reads, reports

from leasegate.core.registry import (
    LEASE_MIN_REVISION_GRACE_MS,
    LEASE_RENEW_LEAD_MS,
    LEASE_REQUEST_TIMEOUT_MS,
    LEASE_RETRY_MS,
    CallDone,
    CloseReader,
    CloseRun,
    LaunchFenceFailed,
    OpenReader,
    ReadFailed,
    ReportError,
    StartTimer,
    WaitCancelled,
    WaiterResolved,
    WaitUsable,
)
from leasegate.core.wire._common import MAX_SSM_GET_PARAMETERS, OP_ID_PATTERN


def test_LR_139_current_view_only_while_usable() -> None:
    d = Driver()
    d.start()
    assert d.reg.current_view(TASK, 1, d.now) is None
    d.grant()
    assert d.reg.current_view(TASK, 1, d.now) is not None
    assert d.reg.current_view(TASK, 2, d.now) is None
    assert d.reg.current_view("other", 1, d.now) is None
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 5,
            "minRevision": 5,
            "removed": [],
        }
    )
    assert d.reg.current_view(TASK, 1, d.now) is None


def test_LR_140_files_access_only_for_task_machines_and_only_the_files_session() -> None:
    d = Driver(runner_kind="task-machine")
    d.start()
    d.grant(files=True)
    fa = d.reg.files_access(TASK, 1, d.now)
    assert fa is not None
    assert fa.region == "us-east-1"
    assert fa.files.bucket == "files-bucket"
    assert fa.credentials.secret_access_key.reveal() == "CANARY-secret-sf"
    assert "CANARY" not in repr(fa)
    o = Driver()
    o.usable()
    assert o.reg.files_access(TASK, 1, o.now) is None


def test_LR_141_wait_until_usable_immediate_answers() -> None:
    d = Driver()
    out = d.feed(WaitUsable(now_ms=d.now, call_id=1, task_id=TASK, run_epoch=1))
    assert [c.error for c in of(out, CallDone)] == ["task assignment is not active"]
    d.usable()
    out = d.feed(WaitUsable(now_ms=d.now, call_id=2, task_id=TASK, run_epoch=1))
    assert [c.call_id for c in of(out, WaiterResolved)] == [2]


def test_LR_142_waiter_survives_expiry_and_cleanups_and_aborts() -> None:
    d = Driver()
    d.start()
    d.feed(WaitUsable(now_ms=d.now, call_id=1, task_id=TASK, run_epoch=1))
    d.feed(WaitUsable(now_ms=d.now, call_id=2, task_id=TASK, run_epoch=1))
    out = d.feed(WaitCancelled(now_ms=d.now, call_id=2))
    assert [(c.call_id, c.error) for c in of(out, CallDone)] == [(2, "aborted")]
    d.frame({"kind": "lease.deny", "opId": d.op_id(), "error": "no"})
    assert d.reg.status(TASK).waiters == 1  # type: ignore[union-attr]
    d.advance(LEASE_RETRY_MS)
    out = d.grant()
    assert [c.call_id for c in of(out, WaiterResolved)] == [1]


def test_LR_155_sealed_reader_refuses_reads_and_closes_once_after_drain() -> None:
    d = Driver(auto_reads=False)
    d.start()
    out = d.grant()
    rid = of(out, OpenReader)[0].reader_id
    d.finish_read()
    # a change reads through the committed reader; a stop seals it meanwhile
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
    d.auto_cleanups = False
    out = d.feed(CloseRun(now_ms=d.now, call_id=4, task_id=TASK, run_epoch=1))
    assert of(out, CloseReader) == []
    d.finish_cleanup()
    assert of(d.log, CloseReader) == []  # still draining
    out = d.finish_read()
    assert [c.reader_id for c in of(d.log, CloseReader)] == [rid]


def test_LR_156_reader_gets_only_its_session() -> None:
    d = Driver()
    d.start()
    out = d.grant()
    o = of(out, OpenReader)[0]
    assert o.session.id == "s1"
    assert o.session.purpose == "credentials"
    assert o.region == "us-east-1"
    assert "CANARY" not in repr(o)


def test_LR_157_reports_are_sanitized() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    cmd = d.pending_reads.pop(0)
    out = d.feed(ReadFailed(now_ms=d.now, cmd_id=cmd.cmd_id, access_denied=False))
    r = of(out, ReportError)
    assert [x.message for x in r] == ["credential lease operation failed"]
    assert r[0].assignment.task_id == TASK


def test_LR_158_messages_quote_no_names_selectors_or_values() -> None:
    d = Driver()
    d.start()
    d.ssm.values[(engine(0)["parameter"], 3)] = '{"CANARY": 1}'
    out = d.grant()
    for m in reports(out):
        assert "/" not in m
        assert "CANARY" not in m
        assert ":" not in m


def test_LR_159_api_errors_are_returned_to_the_caller() -> None:
    d = Driver(auto_cleanups=False)
    d.start(recovery=True)
    out = d.finish_cleanup(ok=False)
    assert [c.error for c in of(out, CallDone)] == ["credential lease operation failed"]
    assert reports(out) == []


def test_LR_160_background_full_cleanup_failure_is_reported() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    out = d.finish_cleanup(ok=False)
    # reported by the cleanup's failure path and by the background wrapper
    assert reports(out) == [
        "credential lease operation failed",
        "credential lease operation failed",
    ]


def test_LR_161_send_and_unmatched_frames_are_not_reported() -> None:
    d = Driver()
    d.start()
    for f in [{"kind": "lease.grant.v1"}, {"kind": "nope"}, 5, None, "x"]:
        assert d.frame(f) == []
    assert reports(d.log) == []


def test_LR_162_timing_constants() -> None:
    assert LEASE_RENEW_LEAD_MS == 600_000
    assert LEASE_REQUEST_TIMEOUT_MS == 20_000
    assert LEASE_RETRY_MS == 30_000
    assert LEASE_MIN_REVISION_GRACE_MS == 60_000
    d = Driver()
    d.start()
    d.grant(expires_at=T0 + 1)
    # renewal at least 1 000, expiry at least 0
    assert [t.delay_ms for t in of(d.log, StartTimer)][-2:] == [1_000, 1]


def test_LR_163_limits_and_patterns() -> None:
    assert MAX_SSM_GET_PARAMETERS == 10
    assert OP_ID_PATTERN == r"[A-Za-z0-9_-]{1,128}"
    d = Driver()
    d.start()
    op = d.op_id()
    assert re.fullmatch(OP_ID_PATTERN, op)
    assert len(op.split("-", 2)[2]) <= 64
    out = d.grant(m=manifest(engines=[engine(i) for i in range(21)]))
    assert [len(r) for r in reads(out)] == [10, 10, 1]
    assert kinds(out)[-1] == "GrantSettled"
