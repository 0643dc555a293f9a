"""LR-018 … LR-025: grant acceptance and validation before any read."""

from __future__ import annotations

from typing import Any

import pytest
from registry_kit import (
    T0,
    TASK,
    Driver,
    engine,
    grant,
    kinds,
    lease_json,
    manifest,
    mcp,
    of,
    reads,
    reports,
    session,
    static,
)

from leasegate.core.registry import (
    LEASE_RETRY_MS,
    GrantAccepted,
    GrantHookFailed,
    GrantSettled,
    LaunchFenceFailed,
    OpenReader,
    TimerFired,
)


def test_LR_018_unmatched_or_malformed_grants_are_ignored() -> None:
    d = Driver(auto_reads=False)
    d.start()
    op = d.op_id()
    assert d.frame({"kind": "lease.grant.v1", "opId": op}) == []
    assert d.frame(grant(op, task="other")) == []
    assert d.frame(grant(op, epoch=2)) == []
    assert d.frame(grant("lease-9-x")) == []
    assert kinds(d.frame(grant(op)))[:2] == ["CancelTimer", "GrantAccepted"]
    assert d.frame(grant(op)) == []  # duplicate while answering


def test_LR_019_grant_accepted_hook_before_readers_and_settled_at_end() -> None:
    d = Driver()
    d.start()
    out = d.grant()
    names = kinds(out)
    assert names.index("GrantAccepted") < names.index("OpenReader")
    assert names[-1] == "GrantSettled"
    hook = of(out, GrantAccepted)[0]
    assert of(out, GrantSettled)[0].cmd_id == hook.cmd_id
    assert hook.assignment.task_id == TASK


def test_LR_019_hook_failure_is_reported_and_handling_goes_on() -> None:
    d = Driver(auto_reads=False)
    d.start()
    out = d.grant()
    hook = of(out, GrantAccepted)[0]
    out = d.feed(GrantHookFailed(now_ms=d.now, cmd_id=hook.cmd_id))
    assert reports(out) == ["credential lease operation failed"]
    d.finish_read()
    assert d.reg.status(TASK).gate_open  # type: ignore[union-attr]


@pytest.mark.parametrize("refusal", ["digest", "cleanup"])
def test_LR_019_hook_failure_of_a_grant_refused_before_its_first_read_is_reported(
    refusal: str,
) -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    if refusal == "cleanup":
        d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
        out = d.grant()
        assert reports(out) == ["task cleanup is in progress"]
    else:
        out = d.grant(digest="a" * 64)
        assert reports(out) == ["grant manifest digest does not match"]
    hook = of(out, GrantAccepted)[0]
    assert of(out, GrantSettled)[0].cmd_id == hook.cmd_id  # settled in the same handle()
    out = d.feed(GrantHookFailed(now_ms=d.now, cmd_id=hook.cmd_id))
    assert reports(out) == ["credential lease operation failed"]
    # Reported once.
    assert d.feed(GrantHookFailed(now_ms=d.now, cmd_id=hook.cmd_id)) == []


def test_LR_019_a_hook_failure_fed_after_a_later_event_is_not_reported() -> None:
    d = Driver()
    d.start()
    out = d.grant(digest="a" * 64)
    hook = of(out, GrantAccepted)[0]
    d.feed(TimerFired(now_ms=d.now, timer_id=10**12))  # any other event
    assert d.feed(GrantHookFailed(now_ms=d.now, cmd_id=hook.cmd_id)) == []


def _validate(d: Driver, **kw: Any) -> list[str]:
    out = d.grant(**kw)
    assert of(out, OpenReader) == []
    assert reads(out) == []
    return reports(out)


def test_LR_020_cleanup_in_progress_assignment_and_digest() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    # The op is still pending while the full cleanup runs.
    assert _validate(d) == ["task cleanup is in progress"]
    d = Driver()
    d.start()
    assert _validate(d, digest="a" * 64) == ["grant manifest digest does not match"]


def test_LR_021_revision_floor_installed_digest_and_expiry() -> None:
    d = Driver()
    d.usable()
    d.start()  # new request (renewal)
    assert _validate(d, revision=3) == ["grant is older than the installed manifest"]
    d.start()
    m = manifest(engines=[engine(0), engine(1)])
    assert _validate(d, m=m) == ["grant changed the manifest without advancing its revision"]
    d.start()
    assert _validate(d, expires_at=T0) == ["grant is expired"]
    d.start()
    out = d.grant()  # same revision, same digest: a renewal passes
    assert reports(out) == []
    assert of(out, OpenReader)
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 9,
            "minRevision": 4,
            "removed": [],
        }
    )
    d2 = Driver()
    d2.start()
    d2.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 9,
            "minRevision": 7,
            "removed": [],
        }
    )
    assert _validate(d2, revision=6) == ["grant is below the task's minimum revision"]


@pytest.mark.parametrize(
    ("kind", "files", "extra", "message"),
    [
        ("owned", True, [], "owned runner received a Files session"),
        ("owned", False, [session("sf", "files")], "owned runner received a Files session"),
        ("task-machine", False, [], "task machine did not receive exactly one Files session"),
        (
            "task-machine",
            True,
            [session("sf2", "files")],
            "task machine did not receive exactly one Files session",
        ),
    ],
)
def test_LR_022_files_session_rules(kind: str, files: bool, extra: list[Any], message: str) -> None:
    d = Driver(runner_kind=kind)
    d.start()
    body = lease_json(files=files, sessions=[session(), *extra])
    if not files and extra:
        body["files"] = None
    out = d.frame({"kind": "lease.grant.v1", "opId": d.op_id(), "lease": body})
    assert reports(out) == [message]
    assert reads(out) == []


def test_LR_022_task_machine_with_one_files_session_passes() -> None:
    d = Driver(runner_kind="task-machine")
    d.start()
    out = d.grant(files=True)
    assert reports(out) == []
    assert [c.session.id for c in of(out, OpenReader)] == ["s1"]


def test_LR_023_unique_credential_ids_and_parameters() -> None:
    d = Driver()
    d.start()
    dup = engine(1)
    dup["credentialId"] = "engine-0"
    assert _validate(d, m=manifest(engines=[engine(0), dup])) == [
        "credential ids are not unique across the manifest"
    ]
    d.advance(LEASE_RETRY_MS)
    same_param = engine(1)
    same_param["parameter"] = engine(0)["parameter"]
    assert _validate(d, m=manifest(engines=[engine(0), same_param])) == [
        "credential parameters are not unique across the manifest"
    ]
    d.advance(LEASE_RETRY_MS)
    # null parameters (MCP authKind none) are not counted
    out = d.grant(m=manifest(engines=[engine(0)], mcps=[mcp(0, auth="none"), mcp(1, auth="none")]))
    assert reports(out) == []
    assert static("github")["parameter"] != static("ssh")["parameter"]


def test_LR_024_failed_validation_drops_op_reports_and_arms_retry() -> None:
    d = Driver()
    d.start()
    out = d.grant(digest="b" * 64)
    assert kinds(out) == [
        "CancelTimer",
        "GrantAccepted",
        "report:grant manifest digest does not match",
        "StartTimer",
        "GrantSettled",
    ]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.pending_op is None
    assert st.timers == ("retry",)
    assert not any(k.startswith("close:") or k.startswith("cleanup:") for k in kinds(out))


def test_LR_025_failed_grant_while_quarantined_joins_full_cleanup_instead_of_retry() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()  # a renewal op is pending
    d.gate_fail = lambda c: getattr(c, "reason", "") == "fence-failed"
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    st = d.reg.status(TASK)
    assert st is not None
    assert st.quarantined
    assert st.full_cleanup
    assert st.pending_op
    d.gate_fail = lambda c: False
    out = d.grant(revision=5)
    assert reports(out) == ["task cleanup is in progress"]
    st = d.reg.status(TASK)
    assert st is not None
    assert "retry" not in st.timers
    assert st.pending_op is None
    # The joined cleanup: the quarantine loop closes again and cleans again.
    out = d.finish_cleanup()
    assert kinds(out) == ["CloseReader", "close:fence-failed", "cleanup:full:fence-failed"]
    out = d.finish_cleanup()
    assert "send:lease.request" in kinds(out)
