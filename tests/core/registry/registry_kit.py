"""Test kit for the lease registry: lease builders, a fake Parameter Store and a driver.

The :class:`Driver` feeds events to a :class:`LeaseRegistry` and records every
command. It answers gate callbacks at once (as the shell contract requires;
``gate_fail`` decides which fail), and, when asked, answers reads from a fake
Parameter Store, cleanups and installs. Virtual time only moves when a test
calls :meth:`Driver.advance`, which feeds :class:`TimerFired` for the timers
that are due: everything is an event, nothing sleeps, no clock is mocked.

Secrets contain ``CANARY`` so tests can assert they never leak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lease_kit import (
    HOUR as HOUR,
)
from lease_kit import (
    ORG as ORG,
)
from lease_kit import (
    T0 as T0,
)
from lease_kit import (
    TASK as TASK,
)
from lease_kit import (
    USER as USER,
)
from lease_kit import (
    FakeSsm as FakeSsm,
)
from lease_kit import (  # shared builders, re-exported for the tests
    engine as engine,
)
from lease_kit import (
    envelope as envelope,
)
from lease_kit import (
    grant as grant,
)
from lease_kit import (
    lease_json as lease_json,
)
from lease_kit import (
    manifest as manifest,
)
from lease_kit import (
    mcp as mcp,
)
from lease_kit import (
    param as param,
)
from lease_kit import (
    session as session,
)
from lease_kit import (
    static as static,
)

from leasegate.core._base import Command
from leasegate.core.registry import (
    CallDone,
    CancelTimer,
    CleanupFailed,
    CleanupFinished,
    CloseGate,
    CloseReader,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    InstallFailed,
    InstallFinished,
    LeaseRegistry,
    OpenGate,
    OpenReader,
    ReadParameters,
    ReportError,
    RunCleanup,
    RunInstall,
    SendFrame,
    StartRun,
    StartTimer,
    TimerFired,
)
from leasegate.core.wire.lease import LeaseGrant


class Driver:
    """Feeds events, answers gates at once, optionally answers I/O; records commands."""

    def __init__(
        self,
        *,
        runner_kind: str = "owned",
        auto_reads: bool = True,
        auto_cleanups: bool = True,
        auto_installs: bool = True,
        install_external: bool = True,
        seed: str = "seed",
    ) -> None:
        self.reg = LeaseRegistry(
            runner_kind=runner_kind,  # type: ignore[arg-type]
            op_id_seed=seed,
            install_external=install_external,
        )
        self.now = T0
        self.log: list[Command] = []
        self.ssm = FakeSsm()
        self.auto_reads = auto_reads
        self.auto_cleanups = auto_cleanups
        self.auto_installs = auto_installs
        self.gate_fail: Callable[[Command], bool] = lambda c: False
        self.cleanup_fail: Callable[[RunCleanup], bool] = lambda c: False
        self.install_fail: Callable[[RunInstall], bool] = lambda c: False
        self.timers: dict[int, int] = {}
        self.pending_reads: list[ReadParameters] = []
        self.pending_cleanups: list[RunCleanup] = []
        self.pending_installs: list[RunInstall] = []
        self.on_gate: Callable[[Command], None] | None = None
        self._call = 0

    # -- feeding
    def feed(self, event: Any) -> list[Command]:
        """Feed one event; answer what is automatic; return every command caused."""
        start = len(self.log)
        queue = [event]
        while queue:
            ev = queue.pop(0)
            out = self.reg.handle(ev)
            assert self.reg.internal_errors == 0, "the registry contained an internal error"
            self.log.extend(out)
            for cmd in out:
                queue.extend(self._auto(cmd))
        return self.log[start:]

    def _auto(self, cmd: Command) -> list[Any]:
        now = self.now
        if isinstance(cmd, (CloseGate, OpenGate)):
            if self.on_gate is not None:
                hook, self.on_gate = self.on_gate, None
                hook(cmd)
            ok = not self.gate_fail(cmd)
            return [
                GateCallbackDone(now_ms=now, cmd_id=cmd.cmd_id)
                if ok
                else GateCallbackFailed(now_ms=now, cmd_id=cmd.cmd_id)
            ]
        if isinstance(cmd, StartTimer):
            self.timers[cmd.timer_id] = now + cmd.delay_ms
        elif isinstance(cmd, CancelTimer):
            self.timers.pop(cmd.timer_id, None)
        elif isinstance(cmd, ReadParameters):
            if self.auto_reads:
                return [self.ssm.answer(cmd, now)]
            self.pending_reads.append(cmd)
        elif isinstance(cmd, RunCleanup):
            if self.auto_cleanups:
                return [self._cleanup_outcome(cmd)]
            self.pending_cleanups.append(cmd)
        elif isinstance(cmd, RunInstall):
            if self.auto_installs:
                return [self._install_outcome(cmd)]
            self.pending_installs.append(cmd)
        return []

    def _cleanup_outcome(self, cmd: RunCleanup) -> Any:
        if self.cleanup_fail(cmd):
            return CleanupFailed(now_ms=self.now, cmd_id=cmd.cmd_id)
        return CleanupFinished(now_ms=self.now, cmd_id=cmd.cmd_id)

    def _install_outcome(self, cmd: RunInstall) -> Any:
        if self.install_fail(cmd):
            return InstallFailed(now_ms=self.now, cmd_id=cmd.cmd_id)
        return InstallFinished(now_ms=self.now, cmd_id=cmd.cmd_id)

    # -- manual completions
    def finish_read(self, cmd: ReadParameters | None = None) -> list[Command]:
        cmd = cmd or self.pending_reads.pop(0)
        if cmd in self.pending_reads:
            self.pending_reads.remove(cmd)
        return self.feed(self.ssm.answer(cmd, self.now))

    def finish_cleanup(self, ok: bool = True) -> list[Command]:
        cmd = self.pending_cleanups.pop(0)
        ev = CleanupFinished if ok else CleanupFailed
        return self.feed(ev(now_ms=self.now, cmd_id=cmd.cmd_id))

    def finish_install(self, ok: bool = True) -> list[Command]:
        cmd = self.pending_installs.pop(0)
        ev = InstallFinished if ok else InstallFailed
        return self.feed(ev(now_ms=self.now, cmd_id=cmd.cmd_id))

    # -- time
    def advance(self, ms: int) -> list[Command]:
        """Move virtual time by ``ms``, firing due timers in due order."""
        start = len(self.log)
        end = self.now + ms
        while True:
            due = sorted((t, tid) for tid, t in self.timers.items() if t <= end)
            if not due:
                break
            t, tid = due[0]
            del self.timers[tid]
            self.now = max(self.now, t)
            self.feed(TimerFired(now_ms=self.now, timer_id=tid))
        self.now = end
        return self.log[start:]

    # -- host calls and frames
    def call_id(self) -> int:
        self._call += 1
        return self._call

    def start(
        self, task: object = TASK, epoch: object = 1, recovery: bool = False
    ) -> list[Command]:
        return self.feed(
            StartRun(
                now_ms=self.now,
                call_id=self.call_id(),
                task_id=task,
                run_epoch=epoch,
                recovery=recovery,
            )
        )

    def frame(self, value: Any) -> list[Command]:
        return self.feed(FrameReceived(now_ms=self.now, frame=value))

    def op_id(self) -> str:
        """The op id of the last lease.request sent."""
        for c in reversed(self.log):
            if isinstance(c, SendFrame) and c.frame.__class__.__name__ == "LeaseRequest":
                return c.frame.op_id  # type: ignore[attr-defined, no-any-return]
        raise AssertionError("no lease.request sent")

    def grant(self, **kw: Any) -> list[Command]:
        """Answer the last request with a grant built from ``kw``."""
        return self.frame(grant(self.op_id(), **kw))

    def usable(self) -> list[Command]:
        """Start the run and bring it to an open gate with the default grant."""
        self.start()
        return self.grant()


def kinds(cmds: list[Command]) -> list[str]:
    """Short names of commands (with gate reasons, frame kinds)."""
    out = []
    for c in cmds:
        if isinstance(c, CloseGate):
            out.append(f"close:{c.reason}")
        elif isinstance(c, SendFrame):
            out.append(f"send:{c.frame.TAG[1]}")  # type: ignore[index]
        elif isinstance(c, RunCleanup):
            out.append(f"cleanup:{c.request.mode}:{c.request.reason}")
        elif isinstance(c, ReportError):
            out.append(f"report:{c.message}")
        elif isinstance(c, CallDone):
            out.append(f"done:{c.error}")
        else:
            out.append(type(c).__name__)
    return out


def of(cmds: list[Command], cls: type) -> list[Any]:
    return [c for c in cmds if isinstance(c, cls)]


def sends(cmds: list[Command]) -> list[Any]:
    return [c.frame for c in cmds if isinstance(c, SendFrame)]


def reads(cmds: list[Command]) -> list[tuple[str, ...]]:
    return [c.selectors for c in cmds if isinstance(c, ReadParameters)]


def reports(cmds: list[Command]) -> list[str]:
    return [c.message for c in cmds if isinstance(c, ReportError)]


def closes(cmds: list[Command]) -> list[str]:
    return [c.reason for c in cmds if isinstance(c, CloseGate)]


def opens(cmds: list[Command]) -> list[Any]:
    return [c for c in cmds if isinstance(c, OpenGate)]


__all__ = [
    "T0",
    "TASK",
    "CloseReader",
    "Driver",
    "LeaseGrant",
    "OpenReader",
]
