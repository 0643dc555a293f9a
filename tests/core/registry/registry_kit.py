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

import gc
import types
from collections.abc import Callable
from typing import Any

from core_kit import *  # noqa: F403 - lease_kit's builders, re-exported for the tests
from core_kit import T0, TASK, EventDriver, FakeSsm, grant

from leasegate.core._base import Command
from leasegate.core.registry import (
    CallDone,
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
)
from leasegate.core.wire.lease import LeaseGrant


class Driver(EventDriver):
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
        self.log: list[Command] = []  # every command, in order
        super().__init__(self.log)
        self.ssm = FakeSsm()
        self.auto_reads = auto_reads
        self.auto_cleanups = auto_cleanups
        self.auto_installs = auto_installs
        self.gate_fail: Callable[[Command], bool] = lambda c: False
        self.cleanup_fail: Callable[[RunCleanup], bool] = lambda c: False
        self.install_fail: Callable[[RunInstall], bool] = lambda c: False
        self.pending_reads: list[ReadParameters] = []
        self.pending_cleanups: list[RunCleanup] = []
        self.pending_installs: list[RunInstall] = []
        self.on_gate: Callable[[Command], None] | None = None
        self._call = 0

    # -- feeding
    def _handle(self, event: Any) -> list[Command]:
        out = self.reg.handle(event)
        assert self.reg.internal_errors == 0, "the registry contained an internal error"
        return out

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
        if self._book_timer(cmd):
            return []
        if isinstance(cmd, ReadParameters):
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


def reachable(root: object, *, into_functions: bool = True) -> list[object]:
    """Objects reachable from ``root`` through references, ``root`` included.

    Modules, types and code objects are not followed (nor listed). With
    ``into_functions=False`` functions and bound methods are listed but what
    they reference (globals, closures, defaults) is not followed.
    """
    skip = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType)
    stop = (types.FunctionType, types.MethodType)
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen[id(obj)] = obj
        if into_functions or not isinstance(obj, stop):
            todo.extend(gc.get_referents(obj))
    return list(seen.values())
