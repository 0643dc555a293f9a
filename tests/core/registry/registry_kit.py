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

import dataclasses
from collections.abc import Callable
from typing import Any

from leasegate.core import Secret, decode, sha256_hex
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
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    ReportError,
    RunCleanup,
    RunInstall,
    SendFrame,
    SsmParameter,
    StartRun,
    StartTimer,
    TimerFired,
)
from leasegate.core.wire.credentials import (
    EngineValue,
    GithubValue,
    McpHeader,
    McpValue,
    SshValue,
    credential_parameter_name,
    encode_leased_value,
    parse_parameter_name,
)
from leasegate.core.wire.lease import LeaseGrant, TaskLease, canonical_manifest_json

ORG = "org-1"
USER = "user-1"
TASK = "task-1"
T0 = 1_800_000_000_000
HOUR = 3_600_000


def param(cls: str, cid: str) -> str:
    """The parameter name of credential ``cid`` of class ``cls``."""
    return credential_parameter_name(ORG, USER, cls, cid)  # type: ignore[arg-type]


def engine(
    i: int, *, version: int = 3, session: str = "s1", auth: str = "env", rev: str | None = None
) -> dict[str, Any]:
    cid = f"engine-{i}"
    return {
        "credentialId": cid,
        "engine": "claude-code",
        "revision": rev if rev is not None else f"rev-{i}",
        "parameter": param("engine", cid),
        "version": version,
        "sessionId": session,
        "authKind": auth,
    }


def mcp(i: int, *, version: int = 1, session: str = "s1", auth: str = "token") -> dict[str, Any]:
    cid = f"mcp-{i}"
    none = auth == "none"
    return {
        "credentialId": cid,
        "server": "linear",
        "revision": f"rev-m{i}",
        "parameter": None if none else param("mcp", cid),
        "version": None if none else version,
        "sessionId": None if none else session,
        "authKind": auth,
    }


def static(cls: str, *, version: int = 2, session: str = "s1") -> dict[str, Any]:
    cid = f"{cls}-1"
    return {
        "credentialId": cid,
        "revision": "rev-1",
        "parameter": param(cls, cid),
        "version": version,
        "sessionId": session,
    }


def manifest(
    engines: list[dict[str, Any]] | None = None,
    mcps: list[dict[str, Any]] | None = None,
    github: dict[str, Any] | None = None,
    ssh: dict[str, Any] | None = None,
    projects: int = 1,
) -> dict[str, Any]:
    return {
        "engines": [engine(0)] if engines is None else engines,
        "mcp": [] if mcps is None else mcps,
        "github": github,
        "ssh": ssh,
        "projects": [{"projectId": f"proj-{i}", "sessionId": "s1"} for i in range(projects)],
    }


def session(
    sid: str = "s1", purpose: str = "credentials", expires_at: int = T0 + 2 * HOUR
) -> dict[str, Any]:
    return {
        "id": sid,
        "purpose": purpose,
        "accessKeyId": "ASIAEXAMPLEEXAMPLE01",
        "secretAccessKey": f"CANARY-secret-{sid}",
        "sessionToken": f"CANARY-token-{sid}",
        "expiresAt": expires_at,
    }


def lease_json(
    m: dict[str, Any] | None = None,
    *,
    revision: int = 4,
    files: bool = False,
    sessions: list[dict[str, Any]] | None = None,
    expires_at: int = T0 + 2 * HOUR,
    digest: str | None = None,
    task: str = TASK,
    epoch: int = 1,
    lease_id: str = "lease-1",
) -> dict[str, Any]:
    m = manifest() if m is None else m
    out_sessions = [session()] if sessions is None else sessions
    if files:
        out_sessions = [*out_sessions, session("sf", "files")]
    body: dict[str, Any] = {
        "taskId": task,
        "runEpoch": epoch,
        "leaseId": lease_id,
        "orgId": ORG,
        "userId": USER,
        "region": "us-east-1",
        "manifestRevision": revision,
        "manifestDigest": "0" * 64,
        "manifest": m,
        "sessions": out_sessions,
        "files": {"bucket": "files-bucket", "prefix": "tasks/", "readOnly": False}
        if files
        else None,
        "expiresAt": expires_at,
    }
    lease = decode(TaskLease, body)
    assert isinstance(lease, TaskLease), lease
    body["manifestDigest"] = digest or sha256_hex(canonical_manifest_json(lease.manifest))
    return body


def grant(op_id: str, **kw: Any) -> dict[str, Any]:
    """A ``lease.grant.v1`` frame (JSON) answering ``op_id``."""
    return {"kind": "lease.grant.v1", "opId": op_id, "lease": lease_json(**kw)}


def envelope(name: str, *, auth: str | None = None) -> str:
    """A valid envelope for parameter ``name`` (class from the name)."""
    loc = parse_parameter_name(name)
    assert loc is not None
    cls = loc.credential_class
    if cls == "engine":
        a = auth or "env"
        if a == "env":
            return encode_leased_value(
                EngineValue(
                    location=loc,
                    auth_kind="env",
                    env={"API_KEY": Secret(f"CANARY-{name}")},
                    files=None,
                )
            )
        return encode_leased_value(
            EngineValue(
                location=loc, auth_kind=a, env=None, files={"cred.json": Secret("CANARY-file")}
            )  # type: ignore[arg-type]
        )
    if cls == "mcp":
        return encode_leased_value(
            McpValue(
                location=loc,
                auth_kind="token",
                header=McpHeader(name="Authorization", value=Secret("CANARY-hdr")),
                access_token=None,
            )
        )
    if cls == "github":
        return encode_leased_value(GithubValue(location=loc, token=Secret("CANARY-gh")))
    return encode_leased_value(SshValue(location=loc, private_key=Secret("CANARY-ssh")))


@dataclasses.dataclass
class FakeSsm:
    """Parameters by name and version; ``denied`` names fail a read with AccessDenied."""

    values: dict[tuple[str, int], str] = dataclasses.field(default_factory=dict)
    denied: set[str] = dataclasses.field(default_factory=set)
    auth: dict[str, str] = dataclasses.field(default_factory=dict)
    #: unversioned parameters: name -> (version, raw)
    latest: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)
    #: selectors answered as InvalidParameters
    invalid: set[str] = dataclasses.field(default_factory=set)

    def answer(self, cmd: ReadParameters, now: int) -> ReadCompleted | ReadFailed:
        params = []
        bad = tuple(s for s in cmd.selectors if s in self.invalid)
        if bad:
            return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=(), invalid=bad)
        for sel in cmd.selectors:
            if sel in self.latest or sel.startswith("/uai/projects/"):
                if sel in self.denied:
                    return ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=True)
                name, _, ver = sel.rpartition(":") if ":" in sel else (sel, "", "")
                if ver:
                    raw = self.values[(name, int(ver))]
                    params.append(
                        SsmParameter(
                            name=name, type="SecureString", value=Secret(raw), version=int(ver)
                        )
                    )
                else:
                    v, raw = self.latest[sel]
                    params.append(
                        SsmParameter(name=sel, type="SecureString", value=Secret(raw), version=v)
                    )
                continue
            name, _, ver = sel.rpartition(":")
            if name in self.denied:
                return ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=True)
            key = (name, int(ver))
            raw = self.values.get(key)
            if raw is None:
                raw = envelope(name, auth=self.auth.get(name))
            params.append(
                SsmParameter(name=name, type="SecureString", value=Secret(raw), version=int(ver))
            )
        return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=tuple(params))


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
