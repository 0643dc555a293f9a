"""The reference cloud: a scriptable protocol peer of a leasegate runner.

Theory of operation
===================

:class:`ReferenceCloud` is the cloud half of the protocol as one plain,
thread-safe object: JSON frames in (:meth:`ReferenceCloud.receive`), JSON
frames out (an *outbox* drained by :meth:`ReferenceCloud.take_outgoing`), and
explicit SSM writes through an injected boto3-shaped client. It decides
everything; the transports (:mod:`._transport`) only move text.

What it keeps:

* a directory: orgs, users (each in one org), projects (each in one org) and
  credentials (engine, MCP, GitHub, SSH; a person's or org-wide);
* project env values, as records with a head (``revision`` counts metadata
  versions, ``generation`` value versions) and a per-project
  ``recordVersion``;
* assignments ``(taskId, runEpoch)``: org, user, projects, runner boot id,
  the manifest revision, and what the next ``lease.request`` is answered with
  (a grant, ``lease.deny`` or ``lease.unavailable``).

Every credential value and every env value is written into SSM as the exact
envelope the runner's parsers accept (``leasegate.core.wire.credentials``
``encode_leased_value``; ``wire.env`` ``StagedEnvelope`` /
``LegacyEnvelope``), at the exact parameter names
(``credential_parameter_name``, ``project_env_staged_parameter``,
``project_env_legacy_parameter``). Every frame is built from the wire models
and encoded with ``encode_frame``; no frame is a hand-built dict.

Env delivery (reference ``project-env-task-replica.ts``, ER-028–ER-094):
after every grant the cloud opens a **new stream** for the run and sends one
snapshot attempt over it (``begin``, the pages of every granted project in
manifest order, ``commit`` with ``highWater`` ``{stream, 0}``); later changes
of a granted project's values follow as live ``apply`` frames with delivery
sequences 1, 2, 3, ... on that stream. Frames go out **one at a time**: the
next is sent only after the runner acked the previous one (stop-and-wait),
so the delivery cursor never gaps. An ack with ``activation_pending`` (the
runner accepted a grant but has not activated the replica yet, ER-018) or
``task_assignment_mismatch`` makes the cloud resend the same frame after
``retry_delay_ms``; an ack that says the runner's replica moved on
(``reader_changed``, ``delivery_gap``, ``snapshot_*``, ...) makes it start
a fresh snapshot on a new stream; ``runner_boot_mismatch`` and
``replica_restart_required`` end delivery for that run (recorded in
:attr:`ReferenceCloud.delivery_errors`).

Time: every expiry and retry deadline is in milliseconds since the epoch from
the injected ``clock``. Randomness: ids come from a seed (deterministic).

Secrets: values are held as :class:`~leasegate.core.Secret`; the cloud's
log lines (logger ``leasegate.testing.cloud``), reprs and errors never show
one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

from leasegate.core import Secret, canonical_dumps, encode, loads, utf16_len
from leasegate.core._json import JsonError
from leasegate.core.wire import DecodeError, decode_frame, encode_frame
from leasegate.core.wire._common import MAX_ERROR_CHARS, is_op_id, is_valid_assignment
from leasegate.core.wire.credentials import (
    CredentialClass,
    CredentialLocation,
    EngineValue,
    GithubValue,
    LeasedValue,
    McpHeader,
    McpValue,
    SshValue,
    credential_parameter_name,
    encode_leased_value,
    project_env_legacy_parameter,
    project_env_staged_parameter,
)
from leasegate.core.wire.env import (
    MAX_PAGE_RECORDS,
    Binding,
    BindingState,
    DeliveryCursor,
    EnvAck,
    EnvApply,
    EnvBegin,
    EnvCommit,
    EnvPage,
    Head,
    LegacyEnvelope,
    ProjectVersion,
    StagedEnvelope,
    ValueRef,
    ValueRefLegacy,
    ValueRefStaged,
)
from leasegate.core.wire.lease import (
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    LeaseDeny,
    LeaseFiles,
    LeaseGrant,
    LeaseRequest,
    LeaseSession,
    LeaseStale,
    LeaseUnavailable,
    Manifest,
    ManifestEngine,
    ManifestMcp,
    ManifestProject,
    ManifestStatic,
    RefreshOutcome,
    TaskLease,
    manifest_digest,
)
from leasegate.shells.ssm import _quiet_aws_debug

__all__ = [
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_RETRY_DELAY_MS",
    "DEFAULT_SESSION_TTL_MS",
    "CloudError",
    "DeliveryError",
    "ManualClock",
    "MemoryParameterStore",
    "ParameterWriter",
    "ReferenceCloud",
    "SessionMinter",
]

_log: Final = logging.getLogger("leasegate.testing.cloud")

#: Default lease lifetime, in milliseconds (15 minutes).
DEFAULT_LEASE_TTL_MS: Final = 15 * 60_000
#: Default STS session lifetime, in milliseconds (15 minutes, STS's minimum).
DEFAULT_SESSION_TTL_MS: Final = 15 * 60_000
#: Default delay before an env frame is resent after ``activation_pending``,
#: in milliseconds.
DEFAULT_RETRY_DELAY_MS: Final = 50
#: Default records per env page. With keys of at most 256 characters a
#: result is well under 1 KiB, so 100 records keep every page ack far below
#: ``MAX_PROJECT_ENV_ACK_PAGE_BYTES`` (256 KiB).
DEFAULT_PAGE_SIZE: Final = 100
#: How many times one env frame is resent on ``activation_pending`` /
#: ``task_assignment_mismatch`` before the run's delivery gives up.
DEFAULT_MAX_RETRIES: Final = 1200
#: How many fresh snapshots one run may need in a row before delivery gives up.
MAX_RESYNCS: Final = 8

_CREDENTIALS_SESSION: Final = "credentials"
_FILES_SESSION: Final = "files"
#: Most distinct manifests the cloud remembers with their digests.
_MANIFESTS_MAX: Final = 256
_RETRY_CODES: Final = frozenset({"activation_pending", "task_assignment_mismatch"})
_FATAL_CODES: Final = frozenset({"runner_boot_mismatch", "replica_restart_required"})


class CloudError(ValueError):
    """A scripting call was given something the cloud cannot do.

    The message names the problem, never a secret value.
    """


class ParameterWriter(Protocol):
    """What the cloud needs of an SSM client: boto3's ``put_parameter``.

    Called as ``put_parameter(Name=..., Value=..., Type="SecureString",
    Overwrite=True)``; must return a mapping with ``"Version"`` (an ``int``).
    A boto3 ``ssm`` client fits; so does :class:`MemoryParameterStore`.
    """

    def put_parameter(self, **kwargs: Any) -> Any:
        """Write one parameter; return ``{"Version": int, ...}``."""
        ...


class SessionMinter(Protocol):
    """What the cloud needs of an STS client: boto3's ``assume_role``.

    Called as ``assume_role(RoleArn=..., RoleSessionName=...,
    DurationSeconds=...)``; must return ``{"Credentials": {"AccessKeyId",
    "SecretAccessKey", "SessionToken", ...}}``. moto's STS answers with
    fresh ``ASIA...`` keys per call (its ``get_session_token`` returns one
    fixed key pair, so it would not give each lease its own session).
    """

    def assume_role(self, **kwargs: Any) -> Any:
        """Mint one session."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryError:
    """Why env delivery to a run stopped (no secret in it).

    Attributes:
        task_id, run_epoch: the run.
        code: the ack code that ended delivery, or ``"retries_exhausted"`` /
            ``"resyncs_exhausted"``.
    """

    task_id: str
    run_epoch: int
    code: str


class ManualClock:
    """A settable clock for synchronous tests: ``clock()`` returns ``now_ms``.

    Args:
        now_ms: the starting time, in milliseconds since the epoch.
    """

    def __init__(self, now_ms: int = 1_800_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        """The current time in milliseconds."""
        return self.now_ms

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds; return the new time."""
        self.now_ms += ms
        return self.now_ms


class MemoryParameterStore:
    """An in-memory stand-in for SSM's ``put_parameter`` / ``get_parameters``.

    For synchronous tests that need no server. Values are held as
    :class:`~leasegate.core.Secret`; versions start at 1 per name and rise by
    one per write. ``get_parameters`` accepts ``name`` or ``name:version``
    selectors and answers in boto3's shape.
    """

    def __init__(self) -> None:
        self._history: dict[str, list[Secret]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryParameterStore({len(self._history)} parameters)"

    def put_parameter(self, **kwargs: Any) -> dict[str, Any]:
        """Store ``Value`` under ``Name``; return ``{"Version": n}``."""
        name, value = kwargs["Name"], kwargs["Value"]
        with self._lock:
            versions = self._history.setdefault(name, [])
            versions.append(Secret(value))
            return {"Version": len(versions), "Tier": "Standard"}

    def get_parameters(self, **kwargs: Any) -> dict[str, Any]:
        """Answer a ``GetParameters`` call in boto3's shape (decrypted)."""
        found: list[dict[str, Any]] = []
        invalid: list[str] = []
        with self._lock:
            for selector in kwargs["Names"]:
                name, _, ver = selector.partition(":")
                versions = self._history.get(name)
                n = int(ver) if ver.isdigit() else (len(versions) if versions else 0)
                if not versions or not 1 <= n <= len(versions):
                    invalid.append(selector)
                    continue
                found.append(
                    {
                        "Name": name,
                        "Type": "SecureString",
                        "Value": versions[n - 1].reveal(),
                        "Version": n,
                    }
                )
        return {"Parameters": found, "InvalidParameters": invalid}


# ---------------------------------------------------------------------------
# Directory records


@dataclasses.dataclass(slots=True)
class _Credential:
    credential_id: str
    credential_class: CredentialClass
    org_id: str
    user_id: str | None  # None: org-wide
    owner: str  # the user who added it
    name: str | None  # engine or MCP server name
    auth_kind: str | None  # None for github / ssh
    revision: str
    version: int | None  # SSM version; None for MCP "none"
    value: LeasedValue | None

    def __repr__(self) -> str:
        return (
            f"_Credential({self.credential_class} {self.credential_id!r} "
            f"revision={self.revision!r} version={self.version})"
        )

    @property
    def parameter(self) -> str | None:
        if self.value is None:
            return None
        return self.value.location.parameter


@dataclasses.dataclass(slots=True)
class _Record:
    key: str
    revision: int
    generation: int
    tombstone: bool
    value_ref: ValueRef | None
    binding: Binding | None
    policy_epoch: int | None
    listing_generation: int

    def state(self) -> BindingState:
        return BindingState(
            key=self.key,
            head=Head(
                revision=self.revision,
                generation=self.generation,
                tombstone=self.tombstone,
                value_ref=self.value_ref,
            ),
            binding=self.binding,
            policy_epoch=self.policy_epoch,
            listing_generation=self.listing_generation,
        )


@dataclasses.dataclass(slots=True)
class _Project:
    project_id: str
    org_id: str
    record_version: int = 0
    records: dict[str, _Record] = dataclasses.field(default_factory=dict)


_Answer = Literal["grant", "deny", "unavailable"]


@dataclasses.dataclass(slots=True)
class _Delivery:
    """Env delivery to one run: one stream, frames sent one at a time."""

    stream_id: str
    projects: tuple[str, ...]
    live: bool = False  # the snapshot's commit was acked
    next_seq: int = 1
    queue: deque[Any] = dataclasses.field(default_factory=deque)
    inflight: Any = None
    retry_at: int | None = None
    retries: int = 0


@dataclasses.dataclass(slots=True)
class _Assignment:
    task_id: str
    run_epoch: int
    org_id: str
    user_id: str
    projects: tuple[str, ...]
    runner_boot_id: str
    credentials: tuple[str, ...] | None  # None: every credential the user may use
    excluded: set[str]
    files: LeaseFiles | None
    revision: int = 1
    answer: _Answer = "grant"
    deny_error: str = "lease denied"
    last_op: str | None = None
    granted: TaskLease | None = None
    delivery: _Delivery | None = None
    resyncs: int = 0
    failed: bool = False


# ---------------------------------------------------------------------------
# The cloud


class _QuietCalls:
    """The cloud's own view of an SSM or STS client: every method call runs
    with the runner reader's AWS-stack DEBUG filter on (the one filter of
    :mod:`leasegate.shells.ssm`), so botocore's DEBUG lines of the cloud's
    writes and mints (parameter values, minted session keys) are dropped.
    Other attributes pass through; INFO and above always pass."""

    __slots__ = ("_client",)

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with _quiet_aws_debug():
                return attr(*args, **kwargs)

        return call


class ReferenceCloud:
    """A scriptable cloud peer: directory, SSM writes, grants, env streams.

    Args:
        ssm: a boto3 ``ssm`` client (or :class:`MemoryParameterStore`); every
            envelope is written through it with ``put_parameter``.
        clock: returns the current time in milliseconds since the epoch
            (e.g. :class:`ManualClock`); every expiry and retry uses it.
        sts: a boto3 ``sts`` client whose ``assume_role`` mints each lease
            session (e.g. moto's STS on the SSM endpoint), or ``None`` to
            mint deterministic synthetic keys.
        region: the lease's region (``us-east-1``).
        lease_ttl_ms: each lease's ``expiresAt`` is ``clock() + lease_ttl_ms``.
        session_ttl_ms: each session's ``expiresAt`` is
            ``clock() + session_ttl_ms``.
        retry_delay_ms: delay before an env frame is resent after
            ``activation_pending`` / ``task_assignment_mismatch``.
        max_retries: resends of one frame before delivery gives up.
        page_size: records per env page (1–1024).
        policy_epoch: the ``policyEpoch`` of new env records (the runner's
            default policy epochs are ``(1,)``).
        seed: seeds every id the cloud draws (op, lease, stream, attempt,
            staging ids), so a scripted run is reproducible.
        role_arn: the role each lease session assumes (``sts`` only).

    Raises:
        CloudError: ``page_size`` outside 1–1024 or a negative delay/TTL.

    Thread safety: every public method takes one internal lock; transports
    may call :meth:`receive` from their own thread while a test scripts.
    Listeners added with :meth:`add_listener` are called (under the lock)
    whenever frames are queued, so a transport can wake up and send them.
    """

    def __init__(
        self,
        *,
        ssm: ParameterWriter,
        clock: Callable[[], int],
        sts: SessionMinter | None = None,
        region: str = "us-east-1",
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        session_ttl_ms: int = DEFAULT_SESSION_TTL_MS,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        page_size: int = DEFAULT_PAGE_SIZE,
        policy_epoch: int = 1,
        seed: str = "reference-cloud",
        role_arn: str = "arn:aws:iam::123456789012:role/leasegate-task-lease",
    ) -> None:
        if not 1 <= page_size <= MAX_PAGE_RECORDS:
            raise CloudError("page_size must be 1 to 1024")
        if min(lease_ttl_ms, session_ttl_ms, retry_delay_ms, max_retries) < 0:
            raise CloudError("delays, lifetimes and retries must be >= 0")
        self._ssm: Final = _QuietCalls(ssm)
        self._sts: Final = None if sts is None else _QuietCalls(sts)
        self._clock: Final = clock
        self.region: Final = region
        self.lease_ttl_ms = lease_ttl_ms
        self.session_ttl_ms = session_ttl_ms
        self.retry_delay_ms = retry_delay_ms
        self.max_retries = max_retries
        self.page_size = page_size
        self.policy_epoch = policy_epoch
        self.role_arn = role_arn
        self._seed: Final = seed.encode()
        self._counter = 0
        self._lock: Final = threading.RLock()
        self._orgs: dict[str, None] = {}
        self._users: dict[str, str] = {}  # user -> org
        self._projects: dict[str, _Project] = {}
        self._credentials: dict[str, _Credential] = {}
        self._assignments: dict[tuple[str, int], _Assignment] = {}
        #: Manifests granted, each with its digest: the leases of equal
        #: manifests share one (at most _MANIFESTS_MAX, emptied when full).
        self._manifests: dict[Manifest, tuple[Manifest, str]] = {}
        self._refresh_outcomes: dict[str, RefreshOutcome] = {}
        self._outbox: deque[Any] = deque()
        self._listeners: list[Callable[[], None]] = []
        #: Every frame received and sent, as ``("in" | "out", kind)`` (no
        #: contents: a transcript for assertions that holds no secret).
        self.transcript: list[tuple[str, str]] = []
        #: Runs whose env delivery stopped, and why.
        self.delivery_errors: list[DeliveryError] = []

    def __repr__(self) -> str:
        return (
            f"ReferenceCloud(region={self.region!r}, orgs={len(self._orgs)}, "
            f"users={len(self._users)}, projects={len(self._projects)}, "
            f"credentials={len(self._credentials)}, "
            f"assignments={len(self._assignments)}, outbox={len(self._outbox)})"
        )

    def now_ms(self) -> int:
        """The cloud's clock: milliseconds since the epoch."""
        return self._clock()

    # ------------------------------------------------------------------
    # Ids

    def _draw(self, prefix: str) -> str:
        self._counter += 1
        h = hashlib.sha256(self._seed + b"\x00" + str(self._counter).encode()).hexdigest()
        return f"{prefix}-{self._counter}-{h[:12]}"

    def _uuid(self) -> str:
        self._counter += 1
        h = hashlib.sha256(self._seed + b"\x01" + str(self._counter).encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    # ------------------------------------------------------------------
    # Outbox and listeners

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever frames are queued for the runner.

        Called with the cloud's lock held, from whichever thread queued the
        frames: a listener must only wake its transport (e.g.
        ``loop.call_soon_threadsafe(event.set)``), never call back in.
        """
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        """Forget a listener added with :meth:`add_listener` (no-op if absent)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _send(self, frame: Any) -> None:
        # Frames wait as models (their secrets hidden); encoded when taken.
        kind = frame.TAG[1]
        self._outbox.append(frame)
        self.transcript.append(("out", kind))
        _log.debug("queued %s", kind)
        for listener in list(self._listeners):
            listener()

    def take_outgoing(self) -> list[dict[str, Any]]:
        """Drain the outbox: every frame queued for the runner, in order.

        Returns:
            JSON values (``dict``), each as ``encode_frame`` wrote it (secrets
            revealed: this is the wire). Frames whose retry is due (see
            :meth:`poll`) are queued first.
        """
        with self._lock:
            self._poll_locked()
            out = [encode_frame(f) for f in self._outbox]
            self._outbox.clear()
            return out

    def poll(self) -> None:
        """Queue every env frame whose resend time has come (per ``clock()``)."""
        with self._lock:
            self._poll_locked()

    def next_deadline_ms(self) -> int | None:
        """The earliest pending resend time (ms since the epoch), or ``None``."""
        with self._lock:
            times = [
                a.delivery.retry_at
                for a in self._assignments.values()
                if a.delivery is not None and a.delivery.retry_at is not None
            ]
            return min(times) if times else None

    def runner_connected(self) -> None:
        """A runner (re)connected: send again every env frame still waiting for its ack.

        Delivery is stop-and-wait, so a frame whose ack was lost with the
        previous connection (a bridge that stopped reading, a dropped
        connection, WS-008) would otherwise wait forever. The frame goes out
        again unchanged, from the run's delivery cursor: the runner's replica
        answers a frame it already consumed from its receipts (ER-041, ER-055)
        and consumes one it never saw. A frame whose resend is already
        scheduled (``retry_delay_ms``) waits for it. Called by
        :class:`~leasegate.testing.CloudWebSocketServer` for every connection
        it serves; a transport of a test's own calls it the same way.
        """
        with self._lock:
            for a in self._assignments.values():
                d = a.delivery
                if d is not None and not a.failed and d.inflight is not None and d.retry_at is None:
                    self._send(d.inflight)

    def _poll_locked(self) -> None:
        now = self._clock()
        for a in self._assignments.values():
            d = a.delivery
            if d is not None and d.retry_at is not None and d.retry_at <= now:
                d.retry_at = None
                if d.inflight is None:
                    self._start_snapshot(a)
                else:
                    self._send(d.inflight)

    # ------------------------------------------------------------------
    # Directory

    def add_org(self, org_id: str) -> None:
        """Add an organization (a path segment, ``[A-Za-z0-9_.-]{1,128}``)."""
        with self._lock:
            try:
                credential_parameter_name(org_id, None, "engine", "x")
            except ValueError:
                raise CloudError("invalid org id") from None
            self._orgs[org_id] = None

    def add_user(self, org_id: str, user_id: str) -> None:
        """Add a person to an organization. User ids are unique in the cloud.

        Raises:
            CloudError: unknown org, or the user exists.
        """
        with self._lock:
            self._need_org(org_id)
            if user_id in self._users:
                raise CloudError("user exists")
            try:
                credential_parameter_name(org_id, user_id, "github", "x")
            except ValueError:
                raise CloudError("invalid user id") from None
            self._users[user_id] = org_id

    def add_project(self, org_id: str, project_id: str) -> None:
        """Add a project (``[A-Za-z0-9_.-]{1,128}``) to an organization.

        Raises:
            CloudError: unknown org, an invalid id, or the project exists.
        """
        with self._lock:
            self._need_org(org_id)
            if project_id in self._projects:
                raise CloudError("project exists")
            if project_env_legacy_parameter(project_id, "K") is None or len(project_id) > 128:
                raise CloudError("invalid project id")
            self._projects[project_id] = _Project(project_id=project_id, org_id=org_id)

    def _need_org(self, org_id: str) -> None:
        if org_id not in self._orgs:
            raise CloudError("unknown org")

    def _org_of(self, user_id: str) -> str:
        org = self._users.get(user_id)
        if org is None:
            raise CloudError("unknown user")
        return org

    # ------------------------------------------------------------------
    # Credentials

    def _location(
        self, user_id: str, cls: CredentialClass, credential_id: str, org_wide: bool
    ) -> CredentialLocation:
        org = self._org_of(user_id)
        if credential_id in self._credentials:
            raise CloudError("credential exists")
        try:
            credential_parameter_name(org, None if org_wide else user_id, cls, credential_id)
        except ValueError:
            raise CloudError("invalid credential id") from None
        return CredentialLocation(
            org_id=org,
            user_id=None if org_wide else user_id,
            credential_class=cls,
            credential_id=credential_id,
        )

    def _write_credential(self, cred: _Credential) -> None:
        assert cred.value is not None
        out = self._ssm.put_parameter(
            Name=cred.value.location.parameter,
            Value=encode_leased_value(cred.value),
            Type="SecureString",
            Overwrite=True,
        )
        cred.version = int(out["Version"])
        _log.info("wrote credential %s version %d", cred.credential_id, cred.version)

    def _add(self, cred: _Credential) -> int:
        if cred.value is not None:
            self._write_credential(cred)
        self._credentials[cred.credential_id] = cred
        return cred.version or 0

    def add_engine_credential(
        self,
        user_id: str,
        credential_id: str,
        *,
        engine: str = "claude-code",
        auth_kind: Literal["env", "config-dir", "oauth", "token"] = "env",
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        org_wide: bool = False,
        revision: str = "r1",
    ) -> int:
        """Add an engine credential and write its envelope into SSM.

        Args:
            user_id: the person who owns it (``org_wide``: whose org owns it).
            credential_id: a path segment, unique in the cloud.
            engine: the engine name in the manifest.
            auth_kind: ``env`` (give ``env``) or a files kind (give ``files``).
            env: variable name -> value (secret).
            files: relative path -> content (secret).
            org_wide: an org credential (``/uai/orgs/{org}/credentials/...``).
            revision: the credential's revision in manifests.

        Returns:
            The SSM parameter version written (1 for a new parameter).

        Raises:
            CloudError: unknown user, a duplicate or invalid id, or material
                that does not fit ``auth_kind``.
        """
        with self._lock:
            loc = self._location(user_id, "engine", credential_id, org_wide)
            if auth_kind == "env":
                if not env or files is not None:
                    raise CloudError("an env credential needs env and no files")
                value: LeasedValue = EngineValue(
                    location=loc,
                    auth_kind="env",
                    env={k: Secret(v) for k, v in env.items()},
                    files=None,
                )
            else:
                if not files or env is not None:
                    raise CloudError("a files credential needs files and no env")
                value = EngineValue(
                    location=loc,
                    auth_kind=auth_kind,
                    env=None,
                    files={k: Secret(v) for k, v in files.items()},
                )
            return self._add(
                _Credential(
                    credential_id,
                    "engine",
                    loc.org_id,
                    loc.user_id,
                    user_id,
                    engine,
                    auth_kind,
                    revision,
                    None,
                    value,
                )
            )

    def add_mcp(
        self,
        user_id: str,
        credential_id: str,
        *,
        server: str,
        auth_kind: Literal["token", "oauth", "none"] = "token",
        header: tuple[str, str] | None = None,
        access_token: str | None = None,
        org_wide: bool = False,
        revision: str = "r1",
    ) -> int:
        """Add an MCP connection; ``token`` needs ``header=(name, value)``,
        ``oauth`` needs ``access_token``, ``none`` needs nothing (no SSM write).

        Returns:
            The SSM version written, or 0 for ``none``.

        Raises:
            CloudError: as :meth:`add_engine_credential`.
        """
        with self._lock:
            loc = self._location(user_id, "mcp", credential_id, org_wide)
            value: LeasedValue | None
            if auth_kind == "token":
                if header is None:
                    raise CloudError("a token MCP connection needs a header")
                value = McpValue(
                    location=loc,
                    auth_kind="token",
                    header=McpHeader(name=header[0], value=Secret(header[1])),
                    access_token=None,
                )
            elif auth_kind == "oauth":
                if access_token is None:
                    raise CloudError("an oauth MCP connection needs an access token")
                value = McpValue(
                    location=loc, auth_kind="oauth", header=None, access_token=Secret(access_token)
                )
            else:
                value = None
            return self._add(
                _Credential(
                    credential_id,
                    "mcp",
                    loc.org_id,
                    loc.user_id,
                    user_id,
                    server,
                    auth_kind,
                    revision,
                    None,
                    value,
                )
            )

    def set_github(
        self, user_id: str, credential_id: str, token: str, *, revision: str = "r1"
    ) -> int:
        """Give a person a GitHub sign-in (a token); returns the SSM version."""
        return self._set_static(
            user_id,
            "github",
            credential_id,
            lambda loc: GithubValue(location=loc, token=Secret(token)),
            revision,
        )

    def set_ssh(
        self, user_id: str, credential_id: str, private_key: str, *, revision: str = "r1"
    ) -> int:
        """Give a person an SSH key; returns the SSM version."""
        return self._set_static(
            user_id,
            "ssh",
            credential_id,
            lambda loc: SshValue(location=loc, private_key=Secret(private_key)),
            revision,
        )

    def _set_static(
        self,
        user_id: str,
        cls: Literal["github", "ssh"],
        credential_id: str,
        make: Callable[[CredentialLocation], GithubValue | SshValue],
        revision: str,
    ) -> int:
        """Replace the person's one GitHub or SSH credential; returns the SSM version."""
        with self._lock:
            loc = self._location(user_id, cls, credential_id, False)
            value = make(loc)
            self._drop_static(user_id, cls)
            return self._add(
                _Credential(
                    credential_id,
                    cls,
                    loc.org_id,
                    user_id,
                    user_id,
                    None,
                    None,
                    revision,
                    None,
                    value,
                )
            )

    def _drop_static(self, user_id: str, cls: str) -> None:
        for cid, c in list(self._credentials.items()):
            if c.credential_class == cls and c.user_id == user_id:
                del self._credentials[cid]

    def credential_parameter(self, credential_id: str) -> str | None:
        """The SSM parameter name of a credential (``None`` for MCP ``none``)."""
        with self._lock:
            return self._cred(credential_id).parameter

    def credential_version(self, credential_id: str) -> int | None:
        """The credential's current SSM version (``None`` for MCP ``none``)."""
        with self._lock:
            return self._cred(credential_id).version

    def _cred(self, credential_id: str) -> _Credential:
        c = self._credentials.get(credential_id)
        if c is None:
            raise CloudError("unknown credential")
        return c

    def rotate(
        self,
        credential_id: str,
        *,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        header_value: str | None = None,
        access_token: str | None = None,
        token: str | None = None,
        private_key: str | None = None,
    ) -> int:
        """Rotate a credential: write new material as a new SSM version.

        Give the new material that fits the credential's class and auth kind
        (``env``/``files`` for an engine, ``header_value``/``access_token`` for
        MCP, ``token`` for GitHub, ``private_key`` for SSH); with none, the
        same material is written again (still a new version). Then every
        granted run whose manifest has the credential gets
        ``credential.changed`` with the credential's revision and the new
        version (reference ``handleCredentialChanged``, LR-091, LR-092).

        Returns:
            The new SSM version.

        Raises:
            CloudError: unknown credential, MCP ``none`` (nothing to rotate),
                or material of the wrong kind.
        """
        with self._lock:
            c = self._cred(credential_id)
            v = c.value
            if v is None:
                raise CloudError("an MCP connection without auth has nothing to rotate")
            if isinstance(v, EngineValue):
                if v.auth_kind == "env" and env is not None:
                    v = dataclasses.replace(v, env={k: Secret(x) for k, x in env.items()})
                elif v.auth_kind != "env" and files is not None:
                    v = dataclasses.replace(v, files={k: Secret(x) for k, x in files.items()})
                elif env is not None or files is not None:
                    raise CloudError("material does not fit the credential")
            elif isinstance(v, McpValue):
                if header_value is not None and v.header is not None:
                    v = dataclasses.replace(
                        v, header=McpHeader(name=v.header.name, value=Secret(header_value))
                    )
                elif access_token is not None and v.auth_kind == "oauth":
                    v = dataclasses.replace(v, access_token=Secret(access_token))
                elif header_value is not None or access_token is not None:
                    raise CloudError("material does not fit the credential")
            elif isinstance(v, GithubValue) and token is not None:
                v = GithubValue(location=v.location, token=Secret(token))
            elif isinstance(v, SshValue) and private_key is not None:
                v = SshValue(location=v.location, private_key=Secret(private_key))
            c.value = v
            self._write_credential(c)
            assert c.version is not None
            for a in self._assignments.values():
                if a.granted is not None and credential_id in _manifest_ids(a.granted.manifest):
                    self._send(
                        CredentialChanged(
                            task_id=a.task_id,
                            run_epoch=a.run_epoch,
                            credential_id=credential_id,
                            revision=c.revision,
                            version=c.version,
                        )
                    )
            return c.version

    def set_refresh_outcome(self, credential_id: str, outcome: RefreshOutcome) -> None:
        """How the next ``credential.refresh`` for the credential is answered.

        ``fresh`` (the default): the current version; ``refreshed``: the
        credential is rotated (same material, new version) and that version
        answered; ``needs_sign_in``, ``unavailable``, ``failed``: no version.
        Reference: ``handleRefreshResult`` (LR-104–LR-108).
        """
        with self._lock:
            self._cred(credential_id)
            self._refresh_outcomes[credential_id] = outcome

    # ------------------------------------------------------------------
    # Env values

    def _project(self, project_id: str) -> _Project:
        p = self._projects.get(project_id)
        if p is None:
            raise CloudError("unknown project")
        return p

    def set_env_value(
        self,
        project_id: str,
        key: str,
        value: str,
        *,
        binding: Binding | None = None,
        policy_epoch: int | None = None,
        legacy: bool = False,
    ) -> int:
        """Create or change a project env value; stream it to granted runs.

        Writes a v2 staged envelope at a fresh staging id (or, ``legacy``, a
        v1 envelope at ``/uai/projects/{p}/env/{key}`` read by version), then
        advances the record: a new key gets head ``(revision 1, generation 1)``
        (ER-073), a changed value ``generation + 1`` (ER-076), a deleted key
        ``revision + 1, generation + 1`` (ER-078). The project's
        ``recordVersion`` rises by one and every run streaming the project
        gets a live ``apply`` at the next delivery sequence.

        Args:
            binding: the record's binding (``None``: materialize); a changed
                binding on an existing key is a metadata change
                (``revision + 1``, ER-077).
            policy_epoch: defaults to the cloud's ``policy_epoch``.

        Returns:
            The project's new ``recordVersion``.

        Raises:
            CloudError: unknown project or an invalid key.
        """
        with self._lock:
            p = self._project(project_id)
            if project_env_legacy_parameter(project_id, key) is None or len(key) > 256:
                raise CloudError("invalid env key")
            epoch = self.policy_epoch if policy_epoch is None else policy_epoch
            ref = self._write_env(p, key, value, legacy)
            cur = p.records.get(key)
            if cur is None:
                rec = _Record(key, 1, 1, False, ref, binding, epoch, 1)
            elif cur.tombstone:
                rec = _Record(
                    key,
                    cur.revision + 1,
                    cur.generation + 1,
                    False,
                    ref,
                    cur.binding,
                    cur.policy_epoch,
                    cur.listing_generation,
                )
            else:
                rec = dataclasses.replace(cur, generation=cur.generation + 1, value_ref=ref)
            p.records[key] = rec
            version = self._bump(p, rec)
            if cur is not None and (binding != rec.binding or epoch != rec.policy_epoch):
                meta = dataclasses.replace(
                    rec, revision=rec.revision + 1, binding=binding, policy_epoch=epoch
                )
                p.records[key] = meta
                version = self._bump(p, meta)
            return version

    def delete_env_value(self, project_id: str, key: str) -> int:
        """Delete a project env value: the record becomes a tombstone.

        Head ``revision + 1, generation + 1, tombstone, valueRef null``
        (ER-078); a live ``apply`` goes to every run streaming the project.

        Returns:
            The project's new ``recordVersion``.

        Raises:
            CloudError: unknown project, or no live value under ``key``.
        """
        with self._lock:
            p = self._project(project_id)
            cur = p.records.get(key)
            if cur is None or cur.tombstone:
                raise CloudError("no such env value")
            rec = dataclasses.replace(
                cur,
                revision=cur.revision + 1,
                generation=cur.generation + 1,
                tombstone=True,
                value_ref=None,
            )
            p.records[key] = rec
            return self._bump(p, rec)

    def env_record(self, project_id: str, key: str) -> BindingState | None:
        """The current state of one env record (no value), or ``None``."""
        with self._lock:
            rec = self._project(project_id).records.get(key)
            return None if rec is None else rec.state()

    def env_parameter(self, project_id: str, key: str) -> str | None:
        """The SSM parameter holding the record's current value, or ``None``."""
        with self._lock:
            rec = self._project(project_id).records.get(key)
            if rec is None or rec.value_ref is None:
                return None
            if isinstance(rec.value_ref, ValueRefStaged):
                return project_env_staged_parameter(project_id, key, rec.value_ref.staging_id)
            return project_env_legacy_parameter(project_id, key)

    def _write_env(self, p: _Project, key: str, value: str, legacy: bool) -> ValueRef:
        if legacy:
            name = project_env_legacy_parameter(p.project_id, key)
            assert name is not None
            envelope: StagedEnvelope | LegacyEnvelope = LegacyEnvelope(
                v=1,
                kind="project-env",
                org_id=p.org_id,
                project_id=p.project_id,
                key=key,
                value=Secret(value),
                updated_at=self._clock(),
            )
        else:
            staging_id = self._uuid()
            staged = project_env_staged_parameter(p.project_id, key, staging_id)
            assert staged is not None
            name = staged
            envelope = StagedEnvelope(
                v=2,
                kind="project-env",
                org_id=p.org_id,
                project_id=p.project_id,
                key=key,
                staging_id=staging_id,
                value=Secret(value),
            )
        out = self._ssm.put_parameter(
            Name=name,
            Value=canonical_dumps(encode(envelope)),
            Type="SecureString",
            Overwrite=True,
        )
        _log.info("wrote env value %s/%s", p.project_id, key)
        if legacy:
            return ValueRefLegacy(ssm_version=int(out["Version"]))
        assert isinstance(envelope, StagedEnvelope)
        return ValueRefStaged(staging_id=envelope.staging_id)

    def _bump(self, p: _Project, rec: _Record) -> int:
        p.record_version += 1
        for a in self._assignments.values():
            d = a.delivery
            if d is not None and not a.failed and p.project_id in d.projects:
                seq = d.next_seq
                d.next_seq += 1
                self._enqueue(
                    a,
                    EnvApply(
                        op_id=self._draw("env"),
                        task_id=a.task_id,
                        run_epoch=a.run_epoch,
                        runner_boot_id=a.runner_boot_id,
                        stream_id=d.stream_id,
                        attempt_id=None,
                        project_id=p.project_id,
                        record_version=p.record_version,
                        state=rec.state(),
                        delivery=DeliveryCursor(stream_id=d.stream_id, sequence=seq),
                    ),
                )
        return p.record_version

    # ------------------------------------------------------------------
    # Assignments and scripted lease answers

    def assign(
        self,
        task_id: str,
        run_epoch: int,
        org_id: str,
        user_id: str,
        projects: Sequence[str] = (),
        *,
        runner_boot_id: str,
        credentials: Sequence[str] | None = None,
        files: LeaseFiles | None = None,
    ) -> None:
        """Assign a task run to a person; its ``lease.request`` gets a grant.

        Args:
            task_id, run_epoch: the run (``taskId`` rule; epoch ≥ 1).
            org_id, user_id: the owner (the user must be in the org).
            projects: project ids (of the org) whose env values the task may
                read, in manifest order; streamed to the runner after each grant.
            runner_boot_id: the runner's boot id, carried by env frames.
            credentials: credential ids for the manifest, in order; ``None``:
                every credential the user may use (the user's and the org's
                engine and MCP credentials in the order added, the user's
                GitHub sign-in and SSH key).
            files: a Files mount (task machines): adds a ``files`` session.

        Raises:
            CloudError: an invalid task id, run epoch or boot id (``OP_ID``),
                unknown org/user/project, or a user of another org.
        """
        with self._lock:
            if not is_valid_assignment(task_id, run_epoch):
                raise CloudError("invalid task assignment")
            if not is_op_id(runner_boot_id):
                raise CloudError("invalid runner boot id")
            self._need_org(org_id)
            if self._org_of(user_id) != org_id:
                raise CloudError("user is not in the org")
            for pid in projects:
                if self._project(pid).org_id != org_id:
                    raise CloudError("project is not in the org")
            if credentials is not None:
                for cid in credentials:
                    self._cred(cid)
            self._assignments[(task_id, run_epoch)] = _Assignment(
                task_id=task_id,
                run_epoch=run_epoch,
                org_id=org_id,
                user_id=user_id,
                projects=tuple(projects),
                runner_boot_id=runner_boot_id,
                credentials=None if credentials is None else tuple(credentials),
                excluded=set(),
                files=files,
            )

    def _assignment(self, task_id: str, run_epoch: int) -> _Assignment:
        a = self._assignments.get((task_id, run_epoch))
        if a is None:
            raise CloudError("unknown assignment")
        return a

    def granted_lease(self, task_id: str, run_epoch: int) -> TaskLease | None:
        """The last lease granted to the run (its secrets are ``Secret``s)."""
        with self._lock:
            return self._assignment(task_id, run_epoch).granted

    def manifest_revision(self, task_id: str, run_epoch: int) -> int:
        """The run's current manifest revision (what the next grant carries)."""
        with self._lock:
            return self._assignment(task_id, run_epoch).revision

    def _prompt(self, a: _Assignment, floor: int | None, removed: Iterable[str]) -> None:
        self._send(
            LeaseStale(
                task_id=a.task_id,
                run_epoch=a.run_epoch,
                wanted_revision=a.revision,
                min_revision=floor,
                removed=tuple(removed),
            )
        )

    def narrow(
        self,
        task_id: str,
        run_epoch: int,
        *,
        remove: Sequence[str] = (),
        floor: int | bool | None = True,
    ) -> None:
        """Narrow the run's manifest: drop credentials, raise the revision.

        The removed credential ids leave the run's manifest for good; the
        revision rises by one and ``lease.stale`` is sent with
        ``wantedRevision`` = the new revision, ``removed`` = ``remove`` and
        ``minRevision`` = the new revision (``floor=True``), the given int,
        or ``null`` (``floor=None``/``False``). Reference ``handleStale``
        (LR-078–LR-084).

        Raises:
            CloudError: unknown assignment or credential id.
        """
        with self._lock:
            a = self._assignment(task_id, run_epoch)
            for cid in remove:
                self._cred(cid)
                a.excluded.add(cid)
            a.revision += 1
            min_rev = (
                a.revision
                if floor is True
                else (None if floor is None or floor is False else int(floor))
            )
            self._prompt(a, min_rev, remove)

    def deny(
        self, task_id: str, run_epoch: int, error: str = "lease denied", *, prompt: bool = True
    ) -> None:
        """Answer the run's lease requests with ``lease.deny`` from now on.

        ``error`` (1–512 characters) is the deny text. With ``prompt`` the
        revision rises and a ``lease.stale`` (no floor) is sent so that the
        runner asks at once (LR-080) and gets the deny (LR-111, LR-112).
        :meth:`allow` grants again.

        Raises:
            CloudError: unknown assignment, or ``error`` outside 1–512 units.
        """
        with self._lock:
            if not 1 <= utf16_len(error) <= MAX_ERROR_CHARS:
                raise CloudError("a deny error is 1 to 512 characters")
            a = self._assignment(task_id, run_epoch)
            a.answer, a.deny_error = "deny", error
            if prompt:
                a.revision += 1
                self._prompt(a, None, ())

    def make_unavailable(self, task_id: str, run_epoch: int, *, prompt: bool = True) -> None:
        """Answer the run's lease requests with ``lease.unavailable`` from now on.

        With ``prompt``, as :meth:`deny`. Reference ``handleUnavailable``
        (LR-110). :meth:`allow` grants again.
        """
        with self._lock:
            a = self._assignment(task_id, run_epoch)
            a.answer = "unavailable"
            if prompt:
                a.revision += 1
                self._prompt(a, None, ())

    def allow(self, task_id: str, run_epoch: int) -> None:
        """Grant the run's lease requests again (after deny/make_unavailable)."""
        with self._lock:
            self._assignment(task_id, run_epoch).answer = "grant"

    # ------------------------------------------------------------------
    # Frames in

    def receive_text(self, text: str) -> None:
        """Take one JSON text frame from the runner (see :meth:`receive`)."""
        try:
            value = loads(text)
        except (JsonError, ValueError):
            _log.warning("ignored a frame that is not JSON")
            return
        self.receive(value)

    def receive(self, value: object) -> None:
        """Take one frame (a JSON value) from the runner; queue the answers.

        * ``lease.request``: a grant, deny or unavailable for the run (an
          unknown run: ``lease.unavailable``); a grant starts a fresh env
          snapshot for the run's projects.
        * ``credential.refresh``: a ``credential.refresh.result``.
        * ``env.replica.v1.ack``: the env delivery state machine (module
          docstring).
        * anything else, or a value that does not decode: ignored (logged
          by kind only). Never raises for any input.
        """
        frame = decode_frame(value)
        with self._lock:
            if isinstance(frame, DecodeError):
                _log.warning("ignored an invalid frame (%s: %s)", frame.field, frame.reason)
                self.transcript.append(("in", "invalid"))
                return
            kind = encode_frame(frame)["kind"]
            self.transcript.append(("in", kind))
            if isinstance(frame, LeaseRequest):
                self._on_request(frame)
            elif isinstance(frame, CredentialRefresh):
                self._on_refresh(frame)
            elif isinstance(frame, EnvAck):
                self._on_ack(frame)
            else:
                _log.warning("ignored a %s frame from the runner", kind)

    def _on_request(self, req: LeaseRequest) -> None:
        a = self._assignments.get((req.task_id, req.run_epoch))
        if a is None:
            self._send(LeaseUnavailable(op_id=req.op_id))
            return
        a.last_op = req.op_id
        if a.answer == "deny":
            self._send(LeaseDeny(op_id=req.op_id, error=a.deny_error))
            return
        if a.answer == "unavailable":
            self._send(LeaseUnavailable(op_id=req.op_id))
            return
        lease = self._lease(a)
        a.granted = lease
        self._send(LeaseGrant(op_id=req.op_id, lease=lease))
        a.resyncs = 0
        a.failed = False
        self._start_snapshot(a)

    def _manifest_credentials(self, a: _Assignment) -> list[_Credential]:
        if a.credentials is not None:
            chosen = [self._credentials[c] for c in a.credentials if c in self._credentials]
        else:
            chosen = [
                c
                for c in self._credentials.values()
                if c.org_id == a.org_id and (c.user_id == a.user_id or c.user_id is None)
            ]
        return [c for c in chosen if c.credential_id not in a.excluded]

    def _lease(self, a: _Assignment) -> TaskLease:
        engines: list[ManifestEngine] = []
        mcp: list[ManifestMcp] = []
        github = ssh = None
        for c in self._manifest_credentials(a):
            param, version = c.parameter, c.version
            if c.credential_class == "engine":
                assert param is not None
                assert version is not None
                assert c.name is not None
                engines.append(
                    ManifestEngine(
                        credential_id=c.credential_id,
                        engine=c.name,
                        revision=c.revision,
                        parameter=param,
                        version=version,
                        session_id=_CREDENTIALS_SESSION,
                        auth_kind=c.auth_kind,  # type: ignore[arg-type]
                    )
                )
            elif c.credential_class == "mcp":
                assert c.name is not None
                mcp.append(
                    ManifestMcp(
                        credential_id=c.credential_id,
                        server=c.name,
                        revision=c.revision,
                        parameter=param,
                        version=version,
                        session_id=None if param is None else _CREDENTIALS_SESSION,
                        auth_kind=c.auth_kind,  # type: ignore[arg-type]
                    )
                )
            else:
                assert param is not None
                assert version is not None
                static = ManifestStatic(
                    credential_id=c.credential_id,
                    revision=c.revision,
                    parameter=param,
                    version=version,
                    session_id=_CREDENTIALS_SESSION,
                )
                if c.credential_class == "github":
                    github = static
                else:
                    ssh = static
        manifest = Manifest(
            engines=tuple(engines),
            mcp=tuple(mcp),
            github=github,
            ssh=ssh,
            projects=tuple(
                ManifestProject(project_id=p, session_id=_CREDENTIALS_SESSION) for p in a.projects
            ),
        )
        known = self._manifests.get(manifest)
        if known is None:
            if len(self._manifests) >= _MANIFESTS_MAX:
                self._manifests.clear()
            known = self._manifests[manifest] = (manifest, manifest_digest(manifest))
        manifest, digest = known
        prev = a.granted
        if (
            prev is not None
            and prev.manifest_digest != digest
            and prev.manifest_revision >= a.revision
        ):
            # A changed manifest (a rotation's new version, a new credential)
            # always advances the revision: the registry refuses a grant that
            # changes the manifest at the same revision (LR-021).
            a.revision = prev.manifest_revision + 1
        now = self._clock()
        sessions = [self._session(_CREDENTIALS_SESSION, "credentials", now)]
        if a.files is not None:
            sessions.append(self._session(_FILES_SESSION, "files", now))
        return TaskLease(
            task_id=a.task_id,
            run_epoch=a.run_epoch,
            lease_id=self._draw("lease"),
            org_id=a.org_id,
            user_id=a.user_id,
            region=self.region,
            manifest_revision=a.revision,
            manifest_digest=digest,
            manifest=manifest,
            sessions=tuple(sessions),
            files=a.files,
            expires_at=now + self.lease_ttl_ms,
        )

    def _session(
        self, session_id: str, purpose: Literal["credentials", "files"], now: int
    ) -> LeaseSession:
        if self._sts is not None:
            out = self._sts.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=self._draw("lease-session")[:64],
                DurationSeconds=max(900, -(-self.session_ttl_ms // 1000)),
            )
            creds = out["Credentials"]
            key_id = str(creds["AccessKeyId"])
            secret = Secret(str(creds["SecretAccessKey"]))
            token = Secret(str(creds["SessionToken"]))
        else:
            h = self._draw("session").encode()
            digest = hashlib.sha256(self._seed + h).hexdigest()
            key_id = "ASIA" + digest[:16].upper()
            secret = Secret(digest[16:56])
            token = Secret(hashlib.sha256(digest.encode()).hexdigest() * 4)
        _log.info("minted a %s session %s", purpose, key_id)
        return LeaseSession(
            id=session_id,
            purpose=purpose,
            access_key_id=key_id,
            secret_access_key=secret,
            session_token=token,
            expires_at=now + self.session_ttl_ms,
        )

    def _on_refresh(self, req: CredentialRefresh) -> None:
        c = self._credentials.get(req.credential_id)
        outcome: RefreshOutcome = self._refresh_outcomes.pop(req.credential_id, "fresh")
        if outcome in ("fresh", "refreshed") and (c is None or c.value is None):
            outcome = "failed"
        version: int | None = None
        if outcome == "refreshed" and c is not None and c.value is not None:
            self._write_credential(c)
            version = c.version
        elif outcome == "fresh" and c is not None:
            version = c.version
        self._send(
            CredentialRefreshResult(
                op_id=req.op_id,
                outcome=outcome,
                version=version,
                expires_at=None if version is None else self._clock() + self.lease_ttl_ms,
            )
        )

    # ------------------------------------------------------------------
    # Env delivery

    def _start_snapshot(self, a: _Assignment) -> None:
        """A new stream and one snapshot attempt of the run's granted projects."""
        projects = a.projects
        if a.granted is not None:
            projects = tuple(p.project_id for p in a.granted.manifest.projects)
        stream = self._draw("stream")
        attempt = self._draw("attempt")
        d = _Delivery(stream_id=stream, projects=projects)
        a.delivery = d
        common: dict[str, Any] = {
            "task_id": a.task_id,
            "run_epoch": a.run_epoch,
            "runner_boot_id": a.runner_boot_id,
            "stream_id": stream,
            "attempt_id": attempt,
        }
        d.queue.append(EnvBegin(op_id=self._draw("env"), project_ids=projects, **common))
        versions: list[ProjectVersion] = []
        for pid in projects:
            p = self._projects[pid]
            states = [p.records[k].state() for k in sorted(p.records)]
            after: str | None = None
            chunks = [states[i : i + self.page_size] for i in range(0, len(states), self.page_size)]
            for i, chunk in enumerate(chunks or [[]]):
                d.queue.append(
                    EnvPage(
                        op_id=self._draw("env"),
                        project_id=pid,
                        after=after,
                        record_version=p.record_version,
                        records=tuple(chunk),
                        complete=i == max(len(chunks), 1) - 1,
                        **common,
                    )
                )
                if chunk:
                    after = chunk[-1].key
            versions.append(ProjectVersion(project_id=pid, record_version=p.record_version))
        d.queue.append(
            EnvCommit(
                op_id=self._draw("env"),
                high_water=DeliveryCursor(stream_id=stream, sequence=0),
                versions=tuple(versions),
                **common,
            )
        )
        _log.info("snapshot of %d projects for a run on %s", len(projects), stream)
        self._pump(a)

    def _enqueue(self, a: _Assignment, frame: Any) -> None:
        assert a.delivery is not None
        a.delivery.queue.append(frame)
        self._pump(a)

    def _pump(self, a: _Assignment) -> None:
        d = a.delivery
        if d is None or d.inflight is not None or d.retry_at is not None or a.failed:
            return
        if d.queue:
            d.inflight = d.queue.popleft()
            d.retries = 0
            self._send(d.inflight)

    def _fail(self, a: _Assignment, code: str) -> None:
        a.failed = True
        if a.delivery is not None:
            a.delivery.queue.clear()
            a.delivery.inflight = None
            a.delivery.retry_at = None
        self.delivery_errors.append(DeliveryError(a.task_id, a.run_epoch, code))
        _log.warning("env delivery stopped for a run: %s", code)

    def _on_ack(self, ack: EnvAck) -> None:
        a = self._assignments.get((ack.task_id, ack.run_epoch))
        if a is None or a.delivery is None or a.failed:
            return
        d = a.delivery
        if d.inflight is None or d.inflight.op_id != ack.op_id or d.retry_at is not None:
            return  # an ack of a frame we no longer wait for (old stream, duplicate)
        if ack.ok:
            if isinstance(d.inflight, EnvCommit):
                d.live = True
                a.resyncs = 0
            d.inflight = None
            self._pump(a)
            return
        code = ack.code or "unknown"
        if code in _FATAL_CODES:
            self._fail(a, code)
        elif code in _RETRY_CODES:
            d.retries += 1
            if d.retries > self.max_retries:
                self._fail(a, "retries_exhausted")
            else:
                d.retry_at = self._clock() + self.retry_delay_ms
                _log.debug("env frame refused (%s); resend scheduled", code)
        else:
            # The replica moved on (reader_changed, a gap, a conflict, ...) or
            # consumed an apply as an error: send a fresh snapshot instead.
            self._resync(a, code)

    def _resync(self, a: _Assignment, code: str) -> None:
        a.resyncs += 1
        if a.resyncs > MAX_RESYNCS:
            self._fail(a, "resyncs_exhausted")
            return
        _log.info("env delivery resynchronizes after %s", code)
        assert a.delivery is not None
        a.delivery.queue.clear()
        a.delivery.inflight = None
        a.delivery.retry_at = self._clock() + self.retry_delay_ms

    def delivery_state(self, task_id: str, run_epoch: int) -> dict[str, Any] | None:
        """The run's env delivery, for assertions (no values): ``None`` before
        the first grant, else ``{stream_id, live, next_sequence, queued,
        inflight_kind, retry_at, failed}``."""
        with self._lock:
            a = self._assignment(task_id, run_epoch)
            d = a.delivery
            if d is None:
                return None
            return {
                "stream_id": d.stream_id,
                "live": d.live,
                "next_sequence": d.next_seq,
                "queued": len(d.queue),
                "inflight_kind": None if d.inflight is None else encode_frame(d.inflight)["kind"],
                "retry_at": d.retry_at,
                "failed": a.failed,
            }


def _manifest_ids(m: Manifest) -> set[str]:
    ids = {e.credential_id for e in m.engines} | {e.credential_id for e in m.mcp}
    for s in (m.github, m.ssh):
        if s is not None:
            ids.add(s.credential_id)
    return ids
