"""Example frames and envelopes for the wire tests (valid unless stated).

Every builder returns a fresh JSON value (dicts and lists) so a test may
mutate it. Secrets contain ``CANARY`` so tests can assert they never leak.
Other test suites may import these builders (``from wire_examples import
...``) to get valid grants with a correct manifest digest.
"""

from __future__ import annotations

import copy
from typing import Any

from leasegate.core import canonical_dumps, sha256_hex
from leasegate.core.wire.credentials import credential_parameter_name

ORG = "org-1"
USER = "user-1"
TASK = "task-1"
NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000


def session(
    sid: str = "s-cred", purpose: str = "credentials", expires_at: int = NOW_MS + HOUR_MS
) -> dict[str, Any]:
    """A lease session with canary secrets."""
    return {
        "id": sid,
        "purpose": purpose,
        "accessKeyId": "ASIAEXAMPLEEXAMPLE01",
        "secretAccessKey": f"CANARY-secret-{sid}",
        "sessionToken": f"CANARY-token-{sid}-" + "x" * 600,
        "expiresAt": expires_at,
    }


def engine_entry(i: int, session_id: str = "s-cred", auth_kind: str = "env") -> dict[str, Any]:
    """A manifest engine entry ``engine-{i}``."""
    cid = f"engine-{i}"
    return {
        "credentialId": cid,
        "engine": "claude-code",
        "revision": f"rev-{i}",
        "parameter": credential_parameter_name(ORG, USER, "engine", cid),
        "version": 3,
        "sessionId": session_id,
        "authKind": auth_kind,
    }


def mcp_entry(
    i: int, session_id: str | None = "s-cred", auth_kind: str = "token"
) -> dict[str, Any]:
    """A manifest MCP entry ``mcp-{i}``; ``none`` has null parameter/version/session."""
    cid = f"mcp-{i}"
    none = auth_kind == "none"
    return {
        "credentialId": cid,
        "server": "linear",
        "revision": f"rev-m{i}",
        "parameter": None if none else credential_parameter_name(ORG, None, "mcp", cid),
        "version": None if none else 1,
        "sessionId": None if none else session_id,
        "authKind": auth_kind,
    }


def static_entry(cls: str, session_id: str = "s-cred") -> dict[str, Any]:
    """The owner's ``github`` or ``ssh`` manifest entry."""
    cid = f"{cls}-1"
    return {
        "credentialId": cid,
        "revision": "rev-1",
        "parameter": credential_parameter_name(ORG, USER, cls, cid),  # type: ignore[arg-type]
        "version": 2,
        "sessionId": session_id,
    }


def manifest(engines: int = 2, mcp: int = 1, projects: int = 1) -> dict[str, Any]:
    """A manifest with ``engines`` engines, ``mcp`` MCP entries, GitHub, SSH."""
    return {
        "engines": [engine_entry(i) for i in range(engines)],
        "mcp": [mcp_entry(i) for i in range(mcp)],
        "github": static_entry("github"),
        "ssh": static_entry("ssh"),
        "projects": [{"projectId": f"proj-{i}", "sessionId": "s-cred"} for i in range(projects)],
    }


def digest_of(manifest_value: dict[str, Any]) -> str:
    """The manifest digest, computed independently of the codec."""
    return sha256_hex(canonical_dumps(manifest_value))


def lease(
    manifest_value: dict[str, Any] | None = None, *, files: bool = False, **over: Any
) -> dict[str, Any]:
    """A lease with a correct digest (computed from ``manifest_value``)."""
    m = manifest() if manifest_value is None else manifest_value
    sessions = [session()]
    if files:
        sessions.append(session("s-files", "files"))
    out: dict[str, Any] = {
        "taskId": TASK,
        "runEpoch": 1,
        "leaseId": "lease-1",
        "orgId": ORG,
        "userId": USER,
        "region": "us-east-1",
        "manifestRevision": 4,
        "manifestDigest": digest_of(m),
        "manifest": m,
        "sessions": sessions,
        "files": {"bucket": "files-bucket", "prefix": "tasks/task-1/", "readOnly": False}
        if files
        else None,
        "expiresAt": NOW_MS + 2 * HOUR_MS,
    }
    out.update(over)
    return out


def grant(op_id: str = "lease-1-abc", **lease_over: Any) -> dict[str, Any]:
    """A ``lease.grant.v1`` frame."""
    return {"kind": "lease.grant.v1", "opId": op_id, "lease": lease(**lease_over)}


def big_grant() -> dict[str, Any]:
    """The benchmark grant: 14 credentials (10 engines, 2 MCP, GitHub, SSH), 2 projects."""
    return {
        "kind": "lease.grant.v1",
        "opId": "lease-1-bench",
        "lease": lease(manifest(engines=10, mcp=2, projects=2), files=True),
    }


FRAMES: dict[str, dict[str, Any]] = {
    "lease.request": {
        "kind": "lease.request",
        "opId": "lease-1-abc",
        "taskId": TASK,
        "runEpoch": 1,
    },
    "lease.grant.v1": grant(),
    "lease.unavailable": {"kind": "lease.unavailable", "opId": "lease-1-abc"},
    "lease.deny": {"kind": "lease.deny", "opId": "lease-1-abc", "error": "not allowed"},
    "lease.stale": {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": 1,
        "wantedRevision": 5,
        "minRevision": 5,
        "removed": ["engine-0"],
    },
    "credential.changed": {
        "kind": "credential.changed",
        "taskId": TASK,
        "runEpoch": 1,
        "credentialId": "engine-0",
        "revision": "rev-0",
        "version": 4,
    },
    "credential.refresh": {
        "kind": "credential.refresh",
        "opId": "refresh-2-abc",
        "taskId": TASK,
        "runEpoch": 1,
        "credentialId": "engine-0",
        "revision": "rev-0",
    },
    "credential.refresh.result": {
        "kind": "credential.refresh.result",
        "opId": "refresh-2-abc",
        "outcome": "refreshed",
        "version": 4,
        "expiresAt": NOW_MS + HOUR_MS,
    },
}


def frame(kind: str) -> dict[str, Any]:
    """A fresh copy of the example frame of ``kind``."""
    return copy.deepcopy(FRAMES[kind])
