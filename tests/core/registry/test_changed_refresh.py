"""LR-091 … LR-109: credential.changed, refresh requests and results."""

from __future__ import annotations

from registry_kit import (
    TASK,
    Driver,
    engine,
    kinds,
    manifest,
    mcp,
    of,
    param,
    reads,
    sends,
)

from leasegate.core.registry import (
    LEASE_REQUEST_TIMEOUT_MS,
    CallDone,
    CloseRun,
    Identity,
    OpenGate,
    ReadFailed,
    RefreshDone,
    RefreshRequested,
    RunCleanup,
    RunInstall,
    SendFailed,
    SendFrame,
    StartTimer,
)
from leasegate.core.wire.lease import CredentialRefresh


def changed(
    cid: str = "engine-0", version: int = 5, rev: str = "rev-0", epoch: int = 1
) -> dict[str, object]:
    return {
        "kind": "credential.changed",
        "taskId": TASK,
        "runEpoch": epoch,
        "credentialId": cid,
        "revision": rev,
        "version": version,
    }


P0 = param("engine", "engine-0")


def test_LR_091_inapplicable_changes_are_ignored() -> None:
    d = Driver()
    d.start()
    assert d.frame(changed()) == []  # not usable
    d.grant(m=manifest(engines=[engine(0)], mcps=[mcp(0, auth="none")]))
    assert d.frame(changed(epoch=2)) == []
    assert d.frame(changed(cid="nope")) == []
    assert d.frame(changed(rev="rev-9")) == []
    assert d.frame(changed(cid="mcp-0", rev="rev-m0")) == []  # authKind none
    assert d.frame(changed(version=3)) == []  # not newer
    assert d.frame({"kind": "credential.changed"}) == []


def test_LR_091_a_rotation_announced_before_the_first_grant_is_usable_is_read_once_it_is() -> None:
    d = Driver(auto_reads=False)
    d.start()
    assert d.frame(changed(version=4)) == []  # no grant yet: remembered
    d.grant()
    assert d.frame(changed(version=5)) == []  # the grant is still reading: remembered
    assert d.frame(changed(cid="nope")) == []  # not in the grant: dropped when applied
    out = d.finish_read()
    names = kinds(out)
    assert "OpenGate" in names
    # Once usable, the highest announced version is read, after the open.
    assert reads(out) == [(f"{P0}:5",)]
    assert names.index("OpenGate") < names.index("ReadParameters")
    out = d.finish_read()
    inst = of(out, RunInstall)[0].request
    assert inst.reason == "credential-change"
    assert inst.next.engines[0].observed_version == 5
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[0].observed_version == 5
    assert reads(d.frame(changed(version=5))) == []  # applied once


def test_LR_091_an_announced_version_the_grant_already_carries_is_not_read_again() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.frame(changed(version=3))  # the grant pins version 3
    d.grant()
    out = d.finish_read()
    assert "OpenGate" in kinds(out)
    assert reads(out) == []


def test_LR_092_change_reads_exactly_one_selector_and_failure_requests() -> None:
    d = Driver()
    d.usable()
    out = d.frame(changed())
    assert reads(out) == [(f"{P0}:5",)]
    d2 = Driver(auto_reads=False)
    d2.start()
    d2.grant()
    d2.finish_read()
    d2.frame(changed())
    cmd = d2.pending_reads.pop(0)
    out = d2.feed(ReadFailed(now_ms=d2.now, cmd_id=cmd.cmd_id, access_denied=False))
    assert kinds(out) == [
        "report:credential lease operation failed",
        "CancelTimer",
        "StartTimer",
        "send:lease.request",
    ]


def test_LR_093_read_fence_after_change_read() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    d.frame(changed())
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
    out = d.finish_read()
    assert "report:credential read crossed an assignment fence" in kinds(out)
    assert of(out, RunInstall) == []


def test_LR_094_non_refusal_change_installs_and_commits_without_open() -> None:
    d = Driver()
    d.usable()
    out = d.frame(changed())
    inst = of(out, RunInstall)[0].request
    assert inst.reason == "credential-change"
    assert inst.project_set_changed is False
    assert inst.previous is not None
    assert inst.previous.engines[0].observed_version == 3
    assert inst.next.engines[0].observed_version == 5
    assert of(out, OpenGate) == []
    assert [t.delay_ms for t in of(out, StartTimer)] != []
    st = d.reg.status(TASK)
    assert st is not None
    assert st.generation == 2
    assert st.gate_open


def test_LR_095_refusal_closes_holds_cleans_installs_and_reopens() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.ssm.denied.add(P0)
    out = d.frame(changed())
    assert kinds(out)[-2:] == ["close:manifest-narrowed", "cleanup:selective:lease-replaced"]
    assert of(out, RunCleanup)[0].request.removed == (Identity("engine", "engine-0", "rev-0"),)
    assert d.reg.status(TASK).holds == 1  # type: ignore[union-attr]
    out = d.finish_cleanup()
    inst = of(out, RunInstall)[0].request
    assert inst.next.engines[0].availability == "access-denied"
    assert of(out, OpenGate)[0].view.engines[0].availability == "access-denied"
    st = d.reg.status(TASK)
    assert st is not None
    assert st.holds == 0
    assert st.gate_open


def test_LR_096_refusal_fence() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.ssm.denied.add(P0)
    d.frame(changed())
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
    out = d.finish_cleanup()
    # The refusal had taken a hold: it escalates first, reports after (LR-098).
    assert "cleanup:full:manifest-narrowed" in kinds(out)
    out = d.finish_cleanup()
    assert "report:a refused credential's cleanup crossed an assignment fence" in kinds(out)


def test_LR_097_refusal_close_failure_goes_to_full_cleanup_only() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.ssm.denied.add(P0)
    failed: list[object] = []

    def once(c: object) -> bool:
        if getattr(c, "reason", "") == "manifest-narrowed" and not failed:
            failed.append(c)
            return True
        return False

    d.gate_fail = once
    out = d.frame(changed())
    names = kinds(out)
    assert names.count("report:credential lease operation failed") == 1
    assert names.count("close:manifest-narrowed") == 2  # the refusal's, the full cleanup's
    assert "cleanup:selective:lease-replaced" not in names
    assert d.reg.status(TASK).full_cleanup  # type: ignore[union-attr]


def test_LR_098_failed_change_install_escalates_then_reports_and_requests() -> None:
    d = Driver()
    d.usable()
    d.install_fail = lambda c: c.request.reason == "credential-change"
    out = d.frame(changed())
    names = kinds(out)
    assert names.index("cleanup:full:manifest-narrowed") < names.index(
        "report:credential lease operation failed"
    )
    assert "send:lease.request" in names


def test_LR_099_denied_credential_change_has_no_gate_call() -> None:
    d = Driver()
    d.start()
    d.ssm.denied.add(P0)
    d.grant()
    d.ssm.denied.clear()
    out = d.frame(changed())
    assert not any(k.startswith("close:") for k in kinds(out))
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[0].availability == "available"


def test_LR_100_change_install_is_current_is_the_read_fence() -> None:
    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    d.finish_install()
    out = d.frame(changed())
    cmd = of(out, RunInstall)[0]
    assert d.reg.install_is_current(cmd.cmd_id, d.now) is True
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
    assert d.reg.install_is_current(cmd.cmd_id, d.now) is False


def test_LR_101_raised_version_is_the_known_version() -> None:
    d = Driver()
    d.usable()
    d.frame(changed(version=5))
    assert d.frame(changed(version=5)) == []
    assert d.frame(changed(version=4)) == []


def _refresh(
    d: Driver, call_id: int, cid: str = "engine-0", rev: str | None = "rev-0", epoch: int = 1
) -> list[object]:
    return d.feed(
        RefreshRequested(
            now_ms=d.now,
            call_id=call_id,
            task_id=TASK,
            run_epoch=epoch,
            credential_id=cid,
            revision=rev,
        )
    )


def test_LR_102_refresh_refused_when_not_usable_or_not_in_manifest() -> None:
    d = Driver()
    d.start()
    assert of(_refresh(d, 1), CallDone)[0].error == "task credentials are not usable"
    d.grant()
    assert of(_refresh(d, 2, epoch=2), CallDone)[0].error == "task credentials are not usable"
    assert (
        of(_refresh(d, 3, cid="x"), CallDone)[0].error == "credential is not in the active manifest"
    )
    assert (
        of(_refresh(d, 4, rev="r"), CallDone)[0].error == "credential is not in the active manifest"
    )
    assert (
        of(_refresh(d, 5, rev=None), CallDone)[0].error
        == "credential is not in the active manifest"
    )


def test_LR_103_duplicate_refresh_shares_the_pending_result() -> None:
    d = Driver()
    d.usable()
    out = _refresh(d, 1)
    assert len(sends(out)) == 1
    assert _refresh(d, 2) == []
    op = sends(out)[0].op_id
    out = d.frame(
        {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": "unavailable",
            "version": None,
            "expiresAt": None,
        }
    )
    assert sorted(r.call_id for r in of(out, RefreshDone)) == [1, 2]


def test_LR_104_refresh_frame_and_send_failure() -> None:
    d = Driver()
    d.usable()
    out = _refresh(d, 1)
    frame = sends(out)[0]
    assert isinstance(frame, CredentialRefresh)
    assert frame.op_id.startswith("refresh-2-")
    assert (frame.credential_id, frame.revision, frame.task_id, frame.run_epoch) == (
        "engine-0",
        "rev-0",
        TASK,
        1,
    )
    assert [t.delay_ms for t in of(out, StartTimer)] == [LEASE_REQUEST_TIMEOUT_MS]
    send = of(out, SendFrame)[0]
    out = d.feed(SendFailed(now_ms=d.now, cmd_id=send.cmd_id))
    done = of(out, RefreshDone)[0]
    assert (done.result.outcome, done.result.version, done.result.op_id) == (
        "unavailable",
        None,
        frame.op_id,
    )


def test_LR_105_refresh_timeout_resolves_unavailable() -> None:
    d = Driver()
    d.usable()
    op = sends(_refresh(d, 1))[0].op_id
    out = d.advance(LEASE_REQUEST_TIMEOUT_MS)
    assert of(out, RefreshDone)[0].result.outcome == "unavailable"
    assert (
        d.frame(
            {
                "kind": "credential.refresh.result",
                "opId": op,
                "outcome": "fresh",
                "version": 4,
                "expiresAt": None,
            }
        )
        == []
    )


def test_LR_106_generation_change_resolves_unavailable_without_read() -> None:
    d = Driver()
    d.usable()
    op = sends(_refresh(d, 1))[0].op_id
    d.frame(changed(version=4))  # a commit: generation moves
    out = d.frame(
        {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": "refreshed",
            "version": 9,
            "expiresAt": None,
        }
    )
    assert reads(out) == []
    assert of(out, RefreshDone)[0].result.outcome == "unavailable"


def test_LR_107_refreshed_applies_the_version_then_resolves() -> None:
    d = Driver()
    d.usable()
    op = sends(_refresh(d, 1))[0].op_id
    out = d.frame(
        {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": "refreshed",
            "version": 6,
            "expiresAt": None,
        }
    )
    assert reads(out) == [(f"{P0}:6",)]
    names = kinds(out)
    assert names.index("RunInstall") < names.index("RefreshDone")
    assert of(out, RefreshDone)[0].result.outcome == "refreshed"


def test_LR_108_needs_sign_in_requests_a_lease() -> None:
    d = Driver()
    d.usable()
    op = sends(_refresh(d, 1))[0].op_id
    out = d.frame(
        {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": "needs_sign_in",
            "version": None,
            "expiresAt": None,
        }
    )
    assert "send:lease.request" in kinds(out)
    assert of(out, RefreshDone)[0].result.outcome == "needs_sign_in"


def test_LR_109_ending_a_run_resolves_refreshes_unavailable() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    _refresh(d, 1)
    out = d.feed(CloseRun(now_ms=d.now, call_id=2, task_id=TASK, run_epoch=1))
    assert of(out, RefreshDone)[0].result.outcome == "unavailable"
    assert d.reg.status(TASK).refreshes == ()  # type: ignore[union-attr]


def test_LR_100_change_install_project_reads_need_a_usable_grant() -> None:
    from leasegate.core.registry import ProjectValueRead, StagedRef

    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    d.finish_install()
    d.ssm.denied.add(P0)
    out = d.frame(changed())  # a refusal: gate closed, hold, cleanup, then install
    cmd = of(d.log, RunInstall)[-1]
    assert cmd.request.reason == "credential-change"
    sid = "0123abcd-0000-4000-8000-00000000abcd"
    out = d.feed(
        ProjectValueRead(
            now_ms=d.now,
            call_id=61,
            task_id=TASK,
            run_epoch=1,
            project_id="proj-0",
            key="K",
            ref=StagedRef(staging_id=sid),
            install_cmd_id=cmd.cmd_id,
        )
    )
    assert [c.error for c in of(out, CallDone)] == ["task credentials are not usable"]
    assert d.reg.install_is_current(cmd.cmd_id, d.now) is True
