"""The gate-callback protocol of docs/events-and-commands.md (catalog notes 1, 2 and 5)."""

from __future__ import annotations

from registry_kit import T0, TASK, lease_json

from leasegate.core.registry import (
    CleanupFinished,
    CloseGate,
    FrameReceived,
    GateCallbackDone,
    LaunchFenceFailed,
    LeaseRegistry,
    RunCleanup,
    SendFrame,
    StartRun,
)


def _names(cmds: list[object]) -> list[str]:
    return [type(c).__name__ for c in cmds]


def test_nothing_depending_on_a_close_is_emitted_before_its_outcome() -> None:
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    out = reg.handle(StartRun(now_ms=T0, call_id=1, task_id=TASK, run_epoch=1))
    assert _names(out) == ["CloseGate"]  # no request, no timer, no answer yet
    close = out[0]
    assert isinstance(close, CloseGate)
    out = reg.handle(GateCallbackDone(now_ms=T0, cmd_id=close.cmd_id))
    assert _names(out) == ["StartTimer", "SendFrame", "CallDone"]
    assert reg.handle(GateCallbackDone(now_ms=T0, cmd_id=close.cmd_id)) == []  # answered twice


def test_full_cleanup_phase_is_lost_before_its_close_and_no_microtask_runs_meanwhile() -> None:
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    out = reg.handle(StartRun(now_ms=T0, call_id=1, task_id=TASK, run_epoch=1, recovery=True))
    close = out[0]
    out = reg.handle(GateCallbackDone(now_ms=T0, cmd_id=close.cmd_id))
    cleanup = next(c for c in out if isinstance(c, RunCleanup))
    # the startup cleanup completes while a fence's close is outstanding
    out = reg.handle(LaunchFenceFailed(now_ms=T0, task_id=TASK, run_epoch=1))
    assert _names(out) == ["CloseGate"]
    st = reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    fence_close = out[0]
    # a completion arriving now is not acted on until the outcome (no microtask)
    assert reg.handle(CleanupFinished(now_ms=T0, cmd_id=cleanup.cmd_id)) == []
    out = reg.handle(GateCallbackDone(now_ms=T0, cmd_id=fence_close.cmd_id))
    names = _names(out)
    assert "RunCleanup" in names
    assert "SendFrame" not in names
    assert not [c for c in out if isinstance(c, SendFrame)]


def test_reentrant_event_during_a_close_is_handled_before_the_outcome() -> None:
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    out = reg.handle(StartRun(now_ms=T0, call_id=1, task_id=TASK, run_epoch=1))
    reg.handle(GateCallbackDone(now_ms=T0, cmd_id=out[0].cmd_id))  # type: ignore[attr-defined]
    op = reg.status(TASK).pending_op  # type: ignore[union-attr]
    assert op is not None
    # a fence's close is outstanding; the callback passes a grant frame on
    out = reg.handle(LaunchFenceFailed(now_ms=T0, task_id=TASK, run_epoch=1))
    close = out[0]
    body = {"kind": "lease.grant.v1", "opId": op, "lease": lease_json()}
    out = reg.handle(FrameReceived(now_ms=T0, frame=body))
    # handled at once: refused, a full cleanup is in flight (LR-020)
    assert [getattr(c, "message", None) for c in out if type(c).__name__ == "ReportError"] == [
        "task cleanup is in progress"
    ]
    out = reg.handle(GateCallbackDone(now_ms=T0, cmd_id=close.cmd_id))  # type: ignore[attr-defined]
    assert "RunCleanup" in _names(out)
