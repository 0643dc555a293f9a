"""Lease and credential frames: ``lease.*`` and ``credential.*``.

Theory of operation
===================

Every frame is a frozen dataclass deriving :class:`~leasegate.core.Model`,
tagged by its ``kind``. The declarations below *are* the protocol: the one
validator in ``_model.py`` compiles them into a strict decoder (exact key
sets, exact JSON types, safe integers, full-match patterns, UTF-16 lengths)
and an encoder that is its exact inverse. ``docs/protocol.md`` documents each
field; a test checks that the docs and these declarations agree.

Who sends what:

* runner → cloud: :class:`LeaseRequest`, :class:`CredentialRefresh`;
* cloud → runner: :class:`LeaseGrant`, :class:`LeaseUnavailable`,
  :class:`LeaseDeny`, :class:`LeaseStale`, :class:`CredentialChanged`,
  :class:`CredentialRefreshResult`.

What the codec checks and what it leaves to the registry
--------------------------------------------------------

The reference's parsers for these frames (``parseLeaseGrantV1Frame`` and its
siblings in ``src/cloud-credentials``) are not part of the reference; only
``parseLeaseDenyFrame`` is. A frame that does not parse is *ignored* by the
registry (LR-018, LR-078, LR-091, LR-106, LR-110, LR-111), while a grant that
parses but fails the registry's own validation is *answered*: reported, its
op dropped, the retry armed (LR-020–LR-028, LR-036). To keep both behaviors
observable, the codec checks form (types, key sets, id patterns, lengths,
bounds) and leaves to the registry every rule the reference's registry checks
itself: the manifest digest (LR-020), revisions and expiry against the run
(LR-021), the Files session count (LR-022), unique credential ids and
parameters (LR-023), an entry's empty parameter or session id, version 0 (or
``null`` on an MCP entry), or a parameter name :func:`~.credentials.parse_parameter_name`
refuses (LR-028), an engine with auth kind ``none`` (LR-036), sessions a
manifest entry names but the lease lacks (LR-030). Those values therefore
decode. Decisions are listed in ``docs/protocol.md`` § Decisions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Final, Literal, TypeAlias

from leasegate.core._model import Model, encode, spec

from .._json import canonical_dumps, sha256_hex
from .._secret import Secret
from ._common import (
    ACCESS_KEY_ID_PATTERN,
    DIGEST_PATTERN,
    MAX_ERROR_CHARS,
    NAME_MAX_CHARS,
    OP_ID_PATTERN,
    PARAMETER_NAME_MAX_CHARS,
    PATH_SEGMENT_MAX_CHARS,
    PATH_SEGMENT_PATTERN,
    PROJECT_PATH_SEGMENT_PATTERN,
    REGION_PATTERN,
    TASK_ID_MAX_CHARS,
)

__all__ = [
    "AUTH_KINDS",
    "FRAMES",
    "MAX_MANIFEST_ENTRIES",
    "MAX_REMOVED",
    "MAX_SESSIONS",
    "AuthKind",
    "CredentialChanged",
    "CredentialRefresh",
    "CredentialRefreshResult",
    "LeaseDeny",
    "LeaseFiles",
    "LeaseFrame",
    "LeaseGrant",
    "LeaseRequest",
    "LeaseSession",
    "LeaseStale",
    "LeaseUnavailable",
    "Manifest",
    "ManifestEngine",
    "ManifestMcp",
    "ManifestProject",
    "ManifestStatic",
    "RefreshOutcome",
    "SessionPurpose",
    "TaskLease",
    "canonical_manifest_json",
    "lease_expires_at",
    "manifest_digest",
]

#: How a credential authenticates. ``env``: engine material is environment
#: variables; ``config-dir``/``oauth``/``token`` on an engine: files;
#: ``token`` on an MCP connection: one HTTP header; ``oauth`` on an MCP
#: connection: a bearer access token; ``none``: no secret (MCP only; an engine
#: with ``none`` decodes but the registry refuses it, LR-036).
AuthKind: TypeAlias = Literal["env", "config-dir", "oauth", "token", "none"]
AUTH_KINDS: Final[tuple[AuthKind, ...]] = ("env", "config-dir", "oauth", "token", "none")

#: ``credentials`` sessions read SSM parameters; the one ``files`` session of a
#: task machine is handed to the Files mount (LR-022, LR-026).
SessionPurpose: TypeAlias = Literal["credentials", "files"]

#: ``credential.refresh.result`` outcomes. ``refreshed``: a new version was
#: written; ``fresh``: the current version is still good; ``needs_sign_in``:
#: the owner must sign in again (a ``lease.stale`` follows); ``unavailable``:
#: the cloud cannot refresh now; ``failed``: the refresh was tried and failed
#: (decided here: the reference lets "any other outcome" resolve as is, LR-108).
RefreshOutcome: TypeAlias = Literal["refreshed", "fresh", "needs_sign_in", "unavailable", "failed"]

#: Most entries in each manifest list (engines, mcp, projects).
MAX_MANIFEST_ENTRIES: Final = 64
#: Most sessions in one lease.
MAX_SESSIONS: Final = 32
#: Most credential ids in one ``lease.stale`` ``removed`` list.
MAX_REMOVED: Final = 1024

_ENGINE_NAME: Final = r"[a-z0-9][a-z0-9._-]{0,63}"
_BUCKET: Final = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
_PREFIX: Final = r"(?:[^/\x00-\x1f\x7f][^\x00-\x1f\x7f]*/)?"


def _name(wire: str) -> Any:
    """An opaque name: 1–128 UTF-16 units."""
    return spec(wire, min_len=1, max_len=NAME_MAX_CHARS)


def _op_id() -> Any:
    return spec("opId", pattern=OP_ID_PATTERN)


def _task_id() -> Any:
    return spec("taskId", min_len=1, max_len=TASK_ID_MAX_CHARS, no_control=True)


def _run_epoch() -> Any:
    return spec("runEpoch", minimum=1)


def _segment(wire: str) -> Any:
    return spec(wire, pattern=PATH_SEGMENT_PATTERN)


# ---------------------------------------------------------------------------
# The lease


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ManifestEngine(Model):
    """One engine credential of the manifest; the list order is the try order.

    Wire: ``{credentialId, engine, revision, parameter, version, sessionId,
    authKind}``. ``parameter`` (≤ 2048 units) and ``sessionId`` (≤ 128) may
    be empty and ``version`` (a safe integer ≥ 0) may be 0 here: the registry
    refuses those grants with "manifest credential is incomplete" (LR-028).
    Reference: ``LeaseManifestEngine``, ``descriptorFromEngine``.
    """

    credential_id: str = _name("credentialId")
    #: Which engine the credential is for, e.g. ``claude-code``:
    #: ``[a-z0-9][a-z0-9._-]{0,63}``.
    engine: str = spec("engine", pattern=_ENGINE_NAME)
    revision: str | None = _name("revision")
    parameter: str = spec("parameter", max_len=PARAMETER_NAME_MAX_CHARS)
    version: int = spec("version", minimum=0)
    session_id: str = spec("sessionId", max_len=NAME_MAX_CHARS)
    auth_kind: AuthKind = spec("authKind")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ManifestMcp(Model):
    """One MCP connection of the manifest.

    Wire: ``{credentialId, server, revision, parameter, version, sessionId,
    authKind}``; ``parameter``, ``version`` and ``sessionId`` are ``null`` for
    auth kind ``none`` (no secret). A non-``none`` entry with a ``null`` is
    decoded and refused by the registry (LR-028). Reference:
    ``LeaseManifestMcp``, ``descriptorFromMcp``.
    """

    credential_id: str = _name("credentialId")
    #: Which MCP server the connection is for: ``[a-z0-9][a-z0-9._-]{0,63}``.
    server: str = spec("server", pattern=_ENGINE_NAME)
    revision: str | None = _name("revision")
    parameter: str | None = spec("parameter", max_len=PARAMETER_NAME_MAX_CHARS)
    version: int | None = spec("version", minimum=0)
    session_id: str | None = spec("sessionId", max_len=NAME_MAX_CHARS)
    auth_kind: AuthKind = spec("authKind")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ManifestStatic(Model):
    """The owner's GitHub sign-in or SSH key (``manifest.github`` / ``.ssh``).

    Wire: ``{credentialId, revision, parameter, version, sessionId}`` (no auth
    kind). Same LR-028 leniency as :class:`ManifestEngine`. Reference:
    ``LeaseManifestStatic``, ``descriptorFromStatic``.
    """

    credential_id: str = _name("credentialId")
    revision: str | None = _name("revision")
    parameter: str = spec("parameter", max_len=PARAMETER_NAME_MAX_CHARS)
    version: int = spec("version", minimum=0)
    session_id: str = spec("sessionId", max_len=NAME_MAX_CHARS)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ManifestProject(Model):
    """A project whose env values the task may read, through ``sessionId``.

    Wire: ``{projectId, sessionId}``; ``projectId`` matches
    ``PROJECT_PATH_SEGMENT`` (≤ 128 units) since it is a parameter path
    segment. Reference: ``lease.manifest.projects`` (LR-038, LR-143).
    """

    project_id: str = spec(
        "projectId", pattern=PROJECT_PATH_SEGMENT_PATTERN, max_len=PATH_SEGMENT_MAX_CHARS
    )
    session_id: str = _name("sessionId")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Manifest(Model):
    """What the task may use; its canonical JSON is hashed into the digest.

    Wire: ``{engines, mcp, github, ssh, projects}``: ordered lists of at most
    :data:`MAX_MANIFEST_ENTRIES` entries each, ``github``/``ssh`` an entry or
    ``null``. Reference: the type of ``TaskLeaseV1.manifest``.
    """

    engines: tuple[ManifestEngine, ...] = spec("engines", max_items=MAX_MANIFEST_ENTRIES)
    mcp: tuple[ManifestMcp, ...] = spec("mcp", max_items=MAX_MANIFEST_ENTRIES)
    github: ManifestStatic | None = spec("github")
    ssh: ManifestStatic | None = spec("ssh")
    projects: tuple[ManifestProject, ...] = spec("projects", max_items=MAX_MANIFEST_ENTRIES)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSession(Model):
    """One scoped STS session of the lease.

    Wire: ``{id, purpose, accessKeyId, secretAccessKey, sessionToken,
    expiresAt}``. ``secretAccessKey`` (1–1024 units) and ``sessionToken``
    (1–16384 units) are :class:`~leasegate.core.Secret`; ``expiresAt`` is
    milliseconds since the epoch. Reference: ``LeaseSession``,
    ``defaultSessionReaderFactory`` (LR-026, LR-156).
    """

    id: str = _name("id")
    purpose: SessionPurpose = spec("purpose")
    access_key_id: str = spec("accessKeyId", pattern=ACCESS_KEY_ID_PATTERN)
    secret_access_key: Secret = spec("secretAccessKey", min_len=1, max_len=1024)
    session_token: Secret = spec("sessionToken", min_len=1, max_len=16384)
    expires_at: int = spec("expiresAt", minimum=0)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseFiles(Model):
    """The task's Files mount (task machines only; ``null`` on owned runners).

    Wire: ``{bucket, prefix, readOnly}``: an S3 bucket name, a key prefix
    (empty, or ending in ``/`` and not starting with one, ≤ 1024 units) and
    whether the mount is read-only. Read with the lease's one ``files``
    session. Reference: ``LeaseFiles`` (opaque there; decided here).
    """

    bucket: str = spec("bucket", pattern=_BUCKET)
    prefix: str = spec("prefix", pattern=_PREFIX, max_len=1024)
    read_only: bool = spec("readOnly")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskLease(Model):
    """A granted lease: one task run's manifest, sessions and expiry.

    Wire: ``{taskId, runEpoch, leaseId, orgId, userId, region,
    manifestRevision, manifestDigest, manifest, sessions, files, expiresAt}``.

    * ``taskId``: 1–128 UTF-16 units, no control characters; ``runEpoch`` ≥ 1.
    * ``orgId``/``userId``: the owner the lease was granted for (path
      segments, ≤ 128 units).
    * ``manifestRevision``: a safe integer ≥ 0; ``manifestDigest``: lowercase
      hex SHA-256 of :func:`canonical_manifest_json` (checked by the registry,
      LR-020).
    * ``sessions``: at most :data:`MAX_SESSIONS`, ids unique (a duplicate id
      would orphan a reader in the reference's map).
    * ``expiresAt``: milliseconds since the epoch; the effective expiry is
      :func:`lease_expires_at`.

    Reference: ``TaskLeaseV1``.
    """

    task_id: str = _task_id()
    run_epoch: int = _run_epoch()
    lease_id: str = _name("leaseId")
    org_id: str = _segment("orgId")
    user_id: str = _segment("userId")
    region: str = spec("region", pattern=REGION_PATTERN)
    manifest_revision: int = spec("manifestRevision", minimum=0)
    manifest_digest: str = spec("manifestDigest", pattern=DIGEST_PATTERN)
    manifest: Manifest = spec("manifest")
    sessions: tuple[LeaseSession, ...] = spec("sessions", max_items=MAX_SESSIONS)
    files: LeaseFiles | None = spec("files")
    expires_at: int = spec("expiresAt", minimum=0)

    def _check(self) -> tuple[str, str] | None:
        seen: set[str] = set()
        for i, session in enumerate(self.sessions):
            if session.id in seen:
                return (f"sessions[{i}].id", "repeats an earlier session id")
            seen.add(session.id)
        return None


def canonical_manifest_json(manifest: Manifest) -> str:
    """The canonical JSON text of a manifest: sorted keys, no whitespace.

    Keys sorted by UTF-16 code units, non-ASCII written as itself, list order
    kept (see ``docs/protocol.md`` § Canonical JSON). The reference cloud
    must produce the same text. Reference: ``canonicalManifestJson``.
    Never raises for a decoded manifest.
    """
    return canonical_dumps(encode(manifest))


def manifest_digest(manifest: Manifest) -> str:
    """Lowercase hex SHA-256 of the UTF-8 of :func:`canonical_manifest_json`.

    Compared with ``TaskLease.manifest_digest`` (LR-020 step 3). Reference:
    ``digestManifest``.
    """
    return sha256_hex(canonical_manifest_json(manifest))


def lease_expires_at(lease: TaskLease) -> int:
    """The lease's effective expiry, in milliseconds since the epoch.

    The earliest of ``lease.expiresAt`` and every session's ``expiresAt``
    (``credentials`` and ``files`` alike): past it, some session the lease
    relies on can no longer read. Reference: ``taskLeaseV1ExpiresAt``
    (decided here; LR-021, LR-114, LR-117).
    """
    out = lease.expires_at
    for session in lease.sessions:
        if session.expires_at < out:
            out = session.expires_at
    return out


# ---------------------------------------------------------------------------
# Frames


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRequest(Model):
    """runner → cloud: ask for a lease for one task run.

    Wire: exactly ``{kind: "lease.request", opId, taskId, runEpoch}``.
    Reference: ``#request`` (LR-013).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "lease.request")
    op_id: str = _op_id()
    task_id: str = _task_id()
    run_epoch: int = _run_epoch()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGrant(Model):
    """cloud → runner: the answer to a ``lease.request``.

    Wire: ``{kind: "lease.grant.v1", opId, lease}``; ``opId`` echoes the
    request's. Reference: ``LeaseGrantV1Frame``, ``handleGrant`` (LR-018).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "lease.grant.v1")
    op_id: str = _op_id()
    lease: TaskLease = spec("lease")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseUnavailable(Model):
    """cloud → runner: no lease can be granted now; the runner retries.

    Wire: exactly ``{kind: "lease.unavailable", opId}``. Reference:
    ``LeaseUnavailableFrame``, ``handleUnavailable`` (LR-110).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "lease.unavailable")
    op_id: str = _op_id()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseDeny(Model):
    """cloud → runner: the lease is refused; the run is cleaned up.

    Wire: exactly ``{kind: "lease.deny", opId, error}``; ``error`` is 1 to
    :data:`~._common.MAX_ERROR_CHARS` (512) UTF-16 units. Reference:
    ``parseLeaseDenyFrame`` (LR-111).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "lease.deny")
    op_id: str = _op_id()
    error: str = spec("error", min_len=1, max_len=MAX_ERROR_CHARS)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseStale(Model):
    """cloud → runner: the task's manifest moved on; ask again.

    Wire: ``{kind: "lease.stale", taskId, runEpoch, wantedRevision,
    minRevision, removed}``: ``wantedRevision`` ≥ 0, ``minRevision`` ≥ 0 or
    ``null`` (no floor), ``removed`` the credential ids (not identities) that
    left, at most :data:`MAX_REMOVED`. Reference: ``LeaseStaleFrame``,
    ``handleStale`` (LR-078–LR-084).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "lease.stale")
    task_id: str = _task_id()
    run_epoch: int = _run_epoch()
    wanted_revision: int = spec("wantedRevision", minimum=0)
    min_revision: int | None = spec("minRevision", minimum=0)
    removed: tuple[str, ...] = spec(
        "removed", max_items=MAX_REMOVED, min_len=1, max_len=NAME_MAX_CHARS
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialChanged(Model):
    """cloud → runner: a credential of the task has a new SSM version.

    Wire: ``{kind: "credential.changed", taskId, runEpoch, credentialId,
    revision, version}``; ``version`` ≥ 1. Reference:
    ``CredentialChangedFrame``, ``handleCredentialChanged`` (LR-091).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "credential.changed")
    task_id: str = _task_id()
    run_epoch: int = _run_epoch()
    credential_id: str = _name("credentialId")
    revision: str = _name("revision")
    version: int = spec("version", minimum=1)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialRefresh(Model):
    """runner → cloud: please refresh one credential (e.g. an OAuth token).

    Wire: exactly ``{kind: "credential.refresh", opId, taskId, runEpoch,
    credentialId, revision}``. Reference: ``requestCredentialRefresh``
    (LR-104).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "credential.refresh")
    op_id: str = _op_id()
    task_id: str = _task_id()
    run_epoch: int = _run_epoch()
    credential_id: str = _name("credentialId")
    revision: str = _name("revision")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialRefreshResult(Model):
    """cloud → runner (and the registry's own timeout answer): a refresh's end.

    Wire: ``{kind: "credential.refresh.result", opId, outcome, version,
    expiresAt}``: ``outcome`` one of :data:`RefreshOutcome`; ``version`` ≥ 1 or ``null`` and never
    ``null`` when the outcome is ``refreshed`` or ``fresh``; ``expiresAt`` ms
    since the epoch or ``null``. Reference: ``CredentialRefreshResultFrame``,
    ``unavailableRefresh``, ``handleRefreshResult`` (LR-104–LR-108).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "credential.refresh.result")
    op_id: str = _op_id()
    outcome: RefreshOutcome = spec("outcome")
    version: int | None = spec("version", minimum=1)
    expires_at: int | None = spec("expiresAt", minimum=0)

    def _check(self) -> tuple[str, str] | None:
        if self.outcome in ("refreshed", "fresh") and self.version is None:
            return ("version", "required for this outcome")
        return None


#: Every lease and credential frame class, for ``decode_frame``'s dispatch.
FRAMES: Final[tuple[type[Model], ...]] = (
    LeaseRequest,
    LeaseGrant,
    LeaseUnavailable,
    LeaseDeny,
    LeaseStale,
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
)

#: Any lease or credential frame.
LeaseFrame: TypeAlias = (
    LeaseRequest
    | LeaseGrant
    | LeaseUnavailable
    | LeaseDeny
    | LeaseStale
    | CredentialChanged
    | CredentialRefresh
    | CredentialRefreshResult
)
