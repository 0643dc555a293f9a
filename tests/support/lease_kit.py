"""Lease builders and a fake Parameter Store shared by the core test kits.

Used by ``tests/core/registry/registry_kit.py`` and
``tests/core/runtime/runtime_kit.py`` (importable as ``lease_kit``: pytest's
``pythonpath`` setting puts ``tests/support`` on ``sys.path``). Builders return
the JSON values a cloud would send, so tests can also mutate them into
malformed variants. Secrets contain ``CANARY``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from leasegate.core import DecodeError, Secret, decode, sha256_hex
from leasegate.core.registry import ReadCompleted, ReadFailed, ReadParameters, SsmParameter
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
from leasegate.core.wire.lease import TaskLease, canonical_manifest_json

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


def envelope_header(cls: str, cid: str = "cred-1", user: str | None = USER) -> dict[str, Any]:
    """The keys every leased value envelope starts with, for ``ORG``/``user``/``cls``/``cid``."""
    return {
        "v": 1,
        "kind": "leased-credential",
        "class": cls,
        "orgId": ORG,
        "userId": user,
        "credentialId": cid,
    }


def typed(value: Any) -> Any:
    """``value`` as nested ``(type, contents)``: equal only for the same types all the way down.

    A ``DecodeError`` becomes its field and reason; a ``Secret`` its revealed
    text (for comparisons inside a test only: never print the result).
    """
    if isinstance(value, DecodeError):
        return (DecodeError, value.field, value.reason)
    if isinstance(value, Secret):
        return (Secret, value.reveal())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value), tuple(typed(getattr(value, f.name)) for f in fields))
    if isinstance(value, tuple | list):
        return (type(value), tuple(typed(x) for x in value))
    if isinstance(value, Mapping):
        return (type(value), tuple((typed(k), typed(x)) for k, x in value.items()))
    return (type(value), value)


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
        unknown: list[str] = []
        for sel in cmd.selectors:
            if sel in self.latest or sel.startswith("/uai/projects/"):
                if sel in self.denied:
                    return ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=True)
                name, _, ver = sel.rpartition(":") if ":" in sel else (sel, "", "")
                known = (name, int(ver)) in self.values if ver else sel in self.latest
                if not known:
                    # A project parameter the store does not hold: Parameter
                    # Store names it in InvalidParameters.
                    unknown.append(sel)
                    continue
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
        return ReadCompleted(
            now_ms=now, cmd_id=cmd.cmd_id, parameters=tuple(params), invalid=tuple(unknown)
        )
