"""LR-053 … LR-065: install, commit, open and the gate-open conditions."""

from __future__ import annotations

from registry_kit import T0, TASK, Driver, engine, kinds, lease_json, manifest, of, reports

from leasegate.core.registry import (
    LEASE_RENEW_LEAD_MS,
    CloseRun,
    FilesAccess,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    LaunchFenceFailed,
    OpenGate,
    RunInstall,
    StartTimer,
    WaiterResolved,
)


def _stale(
    wanted: int, minimum: int | None = None, removed: tuple[str, ...] = ()
) -> dict[str, object]:
    return {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": 1,
        "wantedRevision": wanted,
        "minRevision": minimum,
        "removed": list(removed),
    }


def test_LR_053_install_request_contents() -> None:
    d = Driver(runner_kind="task-machine")
    d.start()
    out = d.grant(files=True)
    req = of(out, RunInstall)[0].request
    assert req.assignment.task_id == TASK
    assert (req.owner_org_id, req.owner_user_id) == ("org-1", "user-1")
    assert req.previous is None
    assert req.next.manifest_revision == 4
    assert isinstance(req.files, FilesAccess)
    assert req.files.credentials.access_key_id == "ASIAEXAMPLEEXAMPLE01"
    assert req.reason == "grant"
    assert req.project_set_changed is True
    d2 = Driver()
    d2.start()
    assert of(d2.grant(), RunInstall)[0].request.files is None


def test_LR_054_project_set_changed_ignores_order() -> None:
    d = Driver()
    d.start()
    m1 = manifest(projects=2)
    d.grant(m=m1)
    d.start()
    m2 = manifest(projects=2)
    m2["projects"] = list(reversed(m2["projects"]))
    out = d.grant(m=m2, revision=5)
    assert of(out, RunInstall)[0].request.project_set_changed is False
    d.start()
    out = d.grant(m=manifest(projects=3), revision=6)
    assert of(out, RunInstall)[0].request.project_set_changed is True


def test_LR_055_install_waits_for_queue_and_fails_with_predecessor_error() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0)]))
    assert of(d.log, RunInstall)[-1].request.next.manifest_revision == 4
    # the narrowing cleanup fails: the install is never run (LR-051 escalates)
    out = d.finish_cleanup(ok=False)
    assert of(out, RunInstall) == []


def test_LR_055_quarantined_install_fails_without_queueing() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "manifest-narrowed"
    d.grant(revision=5, m=manifest(engines=[engine(0)]))
    d.gate_fail = lambda c: False
    out = d.finish_cleanup()
    assert of(out, RunInstall) == []


def test_LR_056_is_current_during_install_only() -> None:
    d = Driver(auto_installs=False)
    d.start()
    out = d.grant()
    cmd = of(out, RunInstall)[0]
    assert d.reg.install_is_current(cmd.cmd_id, d.now) is True
    assert d.reg.install_is_current(cmd.cmd_id, T0 + 10 * 3_600_000) is False  # expired
    d.finish_install()
    assert d.reg.install_is_current(cmd.cmd_id, d.now) is False  # after its own open
    e = Driver(auto_installs=False, auto_cleanups=False)
    e.start()
    cmd = of(e.grant(), RunInstall)[0]
    e.feed(CloseRun(now_ms=e.now, call_id=5, task_id=TASK, run_epoch=1))
    assert e.reg.install_is_current(cmd.cmd_id, e.now) is False


def test_LR_057_failed_install_escalates_to_full_cleanup() -> None:
    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    out = d.finish_install(ok=False)
    names = kinds(out)
    assert "close:manifest-narrowed" in names
    assert "cleanup:full:manifest-narrowed" in names
    assert "report:credential lease operation failed" in names
    # success of the full cleanup requests again; no separate retry timer
    assert "send:lease.request" in names
    st = d.reg.status(TASK)
    assert st is not None
    assert "retry" not in st.timers
    assert st.phase == "waiting"


def test_LR_057_without_install_external_failure_only_retries() -> None:
    d = Driver(install_external=False, auto_reads=False)
    d.start()
    d.grant()
    d.feed(FrameReceived(now_ms=d.now, frame={"kind": "lease.unavailable", "opId": d.op_id()}))
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
    assert not any(k.startswith("cleanup:") for k in kinds(out))


def test_LR_058_commit_updates_state_and_arms_bundle_timers() -> None:
    d = Driver()
    d.start()
    out = d.grant(expires_at=T0 + 3_600_000)
    timers = [c.delay_ms for c in of(out, StartTimer)]
    assert timers == [3_600_000 - LEASE_RENEW_LEAD_MS, 3_600_000]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.pending_op is None
    assert st.generation == 1
    assert st.wanted_revision == 4
    assert st.timers == ("renewal", "expiry")


def test_LR_059_old_bundle_destroyed_before_open() -> None:
    d = Driver()
    d.usable()
    d.start()
    out = d.grant(revision=5)
    names = kinds(out)
    assert names.index("CloseReader") < names.index("OpenGate")


def test_LR_060_no_open_when_fence_moved_before_open() -> None:
    # An old reader still reading (a credential change in flight) delays the open;
    # an escalation meanwhile means no open at all.
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
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
    change_read = d.pending_reads.pop(0)
    d.start()
    d.grant(revision=5)
    d.finish_read()  # the new grant's read; it commits, waits for the old reader
    assert opens(d.log[-3:]) == []
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    out = d.finish_read(change_read)
    assert of(out, OpenGate) == []


def opens(cmds: list[object]) -> list[object]:
    return [c for c in cmds if isinstance(c, OpenGate)]


def test_LR_061_open_marks_usable_and_resolves_waiters() -> None:
    from leasegate.core.registry import WaiterResolved, WaitUsable

    d = Driver()
    d.start()
    d.feed(WaitUsable(now_ms=d.now, call_id=77, task_id=TASK, run_epoch=1))
    out = d.grant()
    resolved = of(out, WaiterResolved)
    assert [r.call_id for r in resolved] == [77]
    assert resolved[0].view == d.reg.current_view(TASK, 1, d.now)
    assert d.reg.status(TASK).phase == "usable"  # type: ignore[union-attr]


def test_LR_062_renewal_opens_again_on_the_new_view() -> None:
    d = Driver()
    d.usable()
    d.start()
    out = d.grant(lease_id="lease-2")
    o = of(out, OpenGate)
    assert len(o) == 1
    assert o[0].view.lease_id == "lease-2"


def test_LR_063_open_failure_closes_and_escalates_after_install() -> None:
    d = Driver()
    d.start()
    d.gate_fail = lambda c: isinstance(c, OpenGate)
    out = d.grant()
    names = kinds(out)
    assert "close:cleanup-failed" in names
    assert "cleanup:full:manifest-narrowed" in names
    assert "report:credential lease operation failed" in names


def test_LR_063_open_failure_without_install_only_retries() -> None:
    d = Driver(install_external=False)
    d.start()
    d.gate_fail = lambda c: isinstance(c, OpenGate)
    out = d.grant()
    names = kinds(out)
    assert "close:cleanup-failed" in names
    assert not any(n.startswith("cleanup:") for n in names)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision == 4
    assert not st.gate_open
    assert "retry" in st.timers


def _until_open(d: Driver) -> OpenGate:
    """Feed the default grant, answering everything but the first OpenGate."""
    body = {"kind": "lease.grant.v1", "opId": d.op_id(), "lease": lease_json()}
    cmds = d.reg.handle(FrameReceived(now_ms=d.now, frame=body))
    while True:
        found = [c for c in cmds if isinstance(c, OpenGate)]
        if found:
            return found[0]
        evs = [e for c in cmds for e in d._auto(c)]
        cmds = [x for ev in evs for x in d.reg.handle(ev)]


def _pump(d: Driver, cmds: list[object]) -> list[object]:
    """Answer everything automatically; return every command."""
    seen = list(cmds)
    todo = list(cmds)
    while todo:
        evs = [e for c in todo for e in d._auto(c)]  # type: ignore[arg-type]
        todo = [x for ev in evs for x in d.reg.handle(ev)]
        seen.extend(todo)
    return seen


def test_LR_064_reentrant_fence_move_during_open_is_undone() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    open_cmd = _until_open(d)
    # The open callback stops the run: that call is fed before the open's outcome.
    stop = d.reg.handle(CloseRun(now_ms=d.now, call_id=3, task_id=TASK, run_epoch=1))
    assert [getattr(c, "reason", None) for c in stop] == ["stopped"]
    d.reg.handle(GateCallbackDone(now_ms=d.now, cmd_id=stop[0].cmd_id))  # type: ignore[attr-defined]
    after = d.reg.handle(GateCallbackDone(now_ms=d.now, cmd_id=open_cmd.cmd_id))
    assert [getattr(c, "reason", None) for c in after] == ["cleanup-failed"]
    rest = _pump(d, after)
    assert not any(isinstance(c, WaiterResolved) for c in rest)
    st = d.reg.status(TASK)
    assert st is not None
    assert not st.gate_open
    assert st.phase == "ended"


def test_LR_064_failed_compensating_close_raises_into_failure_path() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    open_cmd = _until_open(d)
    # A floor raise re-entered from the callback; its close succeeds.
    stale = d.reg.handle(FrameReceived(now_ms=d.now, frame=_stale(9, 9)))
    d.reg.handle(GateCallbackDone(now_ms=d.now, cmd_id=stale[0].cmd_id))  # type: ignore[attr-defined]
    after = d.reg.handle(GateCallbackDone(now_ms=d.now, cmd_id=open_cmd.cmd_id))
    comp = after[0]
    assert getattr(comp, "reason", None) == "cleanup-failed"
    out = d.reg.handle(GateCallbackFailed(now_ms=d.now, cmd_id=comp.cmd_id))  # type: ignore[attr-defined]
    rest = _pump(d, out)
    msgs = [getattr(c, "message", None) for c in rest]
    assert "task gate reopened across a fence and could not be closed" in msgs
    assert "cleanup:full:manifest-narrowed" in kinds(rest)  # type: ignore[arg-type]


def test_LR_065_commit_below_wanted_revision_requests_again() -> None:
    d = Driver()
    d.start()
    first = d.op_id()
    d.frame(_stale(9))  # wantedRevision 9; the op is replaced by a new request
    assert d.op_id() != first
    out = d.grant()  # revision 4 < 9
    assert kinds(out)[-5:] == [
        "OpenGate",
        "CancelTimer",  # the renewal timer (LR-012)
        "StartTimer",
        "send:lease.request",
        "GrantSettled",
    ]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.gate_open
    assert st.pending_op is not None
