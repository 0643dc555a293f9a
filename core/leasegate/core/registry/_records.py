"""The lease registry's records: per-run state, bundles, readers, errors, timings.

Plain data shared by the registry's modules (no behavior beyond
:func:`run_status` and :func:`unavailable_refresh`):

* :class:`Run`: the reference's ``TaskState``, one per registered task run;
  its ``phase`` moves only through :func:`._phases.enter`;
* :class:`Bundle` (a materialized grant with its readers, records and view),
  :class:`Reader` (a session reader), :class:`Desc` (one manifest credential),
  :class:`PendingLease`, :class:`Refresh`, :class:`InstallRec` and
  :class:`Hold`;
* the reference's errors (:class:`LeaseError`, :class:`Unavailable`) and
  external failures (:class:`External`, :class:`ReadError`);
* the public timings (LR-162) and :class:`RunStatus`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from .._sched import Future
from ..wire.credentials import CredentialLocation
from ..wire.lease import (
    CredentialRefreshResult,
    ManifestEngine,
    ManifestMcp,
    ManifestStatic,
    TaskLease,
)
from ._phases import Phase
from ._vocab import Assignment, CredentialEntry, Identity, TaskView

__all__ = [
    "LEASE_MIN_REVISION_GRACE_MS",
    "LEASE_RENEW_LEAD_MS",
    "LEASE_REQUEST_TIMEOUT_MS",
    "LEASE_RETRY_MS",
    "SANITIZED",
    "Bundle",
    "Desc",
    "External",
    "FullReason",
    "Hold",
    "InstallRec",
    "LeaseError",
    "PendingLease",
    "ReadError",
    "Reader",
    "Refresh",
    "Run",
    "RunStatus",
    "Unavailable",
    "is_access_denied",
    "run_status",
    "unavailable_refresh",
]

#: Renewal is requested this long before the lease expires (LR-162).
LEASE_RENEW_LEAD_MS: Final = 600_000
#: A lease op or a refresh unanswered this long is dropped (LR-162).
LEASE_REQUEST_TIMEOUT_MS: Final = 20_000
#: Lease retry, selective cleanup retry and full cleanup retry delay (LR-162).
LEASE_RETRY_MS: Final = 30_000
#: Grace after a floor narrowing before the full cleanup (LR-162).
LEASE_MIN_REVISION_GRACE_MS: Final = 60_000

#: The text of every reported or answered failure that is not the registry's own error.
SANITIZED: Final = "credential lease operation failed"

#: The reasons of a full cleanup (its gate close and its cleanup request).
FullReason = Literal[
    "denied", "expired", "minimum-revision", "manifest-narrowed", "cleanup-failed", "fence-failed"
]


class LeaseError(Exception):
    """The reference's ``CredentialLeaseError``: its message is reported as is."""

    # LR-158: no message the registry creates holds a parameter value, envelope, STS field,
    # parameter name, selector, project value or deny text.
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unavailable(LeaseError):  # noqa: N818 - the reference name
    """The reference's ``CredentialLeaseUnavailableError``."""

    def __init__(self, message: str = "task credentials are not usable") -> None:
        super().__init__(message)


class External(Exception):  # noqa: N818 - an external operation's failure
    """An external operation failed (cleanup, install, callback): reported sanitized."""


class ReadError(External):
    """A ``GetParameters`` failed; ``access_denied`` as classified by the shell (LR-034)."""

    def __init__(self, access_denied: bool) -> None:
        super().__init__()
        self.access_denied = access_denied


def is_access_denied(error: BaseException) -> bool:
    """Whether ``error`` is a read the shell classified as access denied (LR-033)."""
    return isinstance(error, ReadError) and error.access_denied


# ---------------------------------------------------------------------------
# Records


@dataclasses.dataclass(slots=True, eq=False)
class Reader:
    """A session reader (``ManagedSessionReader``): sealed, reads in flight, destroyed."""

    reader_id: int
    session_id: str
    sealed: bool = False
    in_flight: int = 0
    destroyed: bool = False
    #: Futures resolved once no read is in flight (a tuple: nothing per reader while empty).
    drained: tuple[Future[None], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Desc:
    """One credential of a manifest, with its parsed parameter location.

    ``identity`` is its cleanup identity, ``Identity(cls, credential_id,
    revision)``; descriptors are built once per manifest and shared by
    every grant of it (:mod:`._plans`).
    """

    cls: Literal["engine", "mcp", "github", "ssh"]
    credential_id: str
    revision: str | None
    parameter: str | None
    version: int | None
    session_id: str | None
    auth_kind: str | None
    location: CredentialLocation | None
    manifest: ManifestEngine | ManifestMcp | ManifestStatic
    identity: Identity


@dataclasses.dataclass(slots=True, eq=False)
class Bundle:
    """A materialized grant: its lease, readers, records, view and grant id (LR-154).

    ``records`` holds, by credential id in manifest order, what was read (its
    availability, material and observed version) as the view's own entries;
    ``descs`` the descriptor each record was read with, by credential id:
    the plan's shared mapping, or a copy when a preservation read
    (LR-041–LR-045) pinned a newer version than the manifest's.
    """

    lease: TaskLease
    expires_at: int
    readers: dict[str, Reader]
    records: dict[str, CredentialEntry]
    descs: Mapping[str, Desc]
    project_sessions: dict[str, str]
    view: TaskView
    grant_id: int


@dataclasses.dataclass(slots=True, eq=False)
class PendingLease:
    """The run's pending lease op: its timeout and send command (LR-011, LR-017)."""

    op_id: str
    timer_id: int
    send_cmd: int
    answering: bool = False


@dataclasses.dataclass(slots=True, eq=False)
class Refresh:
    """A pending credential refresh and the calls waiting on it (LR-102–LR-105)."""

    op_id: str
    key: tuple[str, str]
    assignment: Assignment
    credential_id: str
    revision: str
    generation: int
    timer_id: int
    send_cmd: int
    call_ids: list[int]


@dataclasses.dataclass(slots=True, eq=False)
class Run:
    """Per-run state, the reference's ``TaskState`` (``phase``: see :mod:`._phases`)."""

    assignment: Assignment
    phase: Phase
    tail: Future[Any]
    gate_open: bool = False
    gate_close_failed: bool = False
    bundle: Bundle | None = None
    generation: int = 0
    wanted_revision: int = 0
    min_revision: int = 0
    #: Remembered identities (LR-048): read-only, often a plan's shared mapping.
    identities: Mapping[str, Identity] = dataclasses.field(default_factory=dict)
    removed: dict[Identity, Identity] = dataclasses.field(default_factory=dict)
    cleaned: dict[Identity, None] = dataclasses.field(default_factory=dict)
    pending: PendingLease | None = None
    refresh_by_op: dict[str, Refresh] = dataclasses.field(default_factory=dict)
    refresh_by_key: dict[tuple[str, str], Refresh] = dataclasses.field(default_factory=dict)
    renewal_timer: int | None = None
    retry_timer: int | None = None
    expiry_timer: int | None = None
    floor_timer: int | None = None
    cleanup_retry_timer: int | None = None
    floor_deadline: int | None = None
    full_cleanup: Future[None] | None = None
    startup: tuple[str, Run | None] | None = None
    startup_future: Future[None] | None = None
    waiters: dict[int, None] = dataclasses.field(default_factory=dict)
    sequence: int = 0
    gate_holds: int = 0
    floor_epoch: int = 0
    install_ids: tuple[int, ...] = ()
    cleanups_in_flight: int = 0
    installs_in_flight: int = 0
    grants_in_flight: int = 0
    closes_in_flight: int = 0
    #: Rotations announced while the run was active but not usable:
    #: credential id → (revision, version), applied once a grant is usable
    #: (decision R2; at most ``MAX_MANIFEST_ENTRIES``).
    announced: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True, eq=False)
class InstallRec:
    """An install's run, grant and fences, for ``isCurrent`` and project reads."""

    run: Run
    granted: Bundle
    is_current: Callable[[], bool]
    installing: Callable[[], bool]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunStatus:
    """A read-only, secret-free snapshot of one registered run.

    Attributes:
        assignment: the run.
        phase: ``recovering``, ``waiting``, ``usable``, ``narrowing``,
            ``lost`` or ``ended``.
        gate_open: whether the registry considers the gate open.
        quarantined: a gate close failed and no full cleanup lifted it.
        holds: gate holds taken (narrowings, refusals in progress).
        installed_revision: the committed bundle's manifest revision, or
            ``None``.
        generation: the bundle generation counter.
        wanted_revision, min_revision: the revisions the cloud asked for.
        floor_deadline_ms: when the floor's grace ends (ms since the
            epoch), or ``None`` when no floor narrowing is under way.
        pending_op: the pending lease op id, or ``None``; ``answering``
            whether a grant for it is being handled.
        timers: names of the armed timers (``renewal``, ``retry``,
            ``expiry``, ``floor``, ``cleanup-retry``).
        full_cleanup: a full cleanup is in flight.
        cleanups, installs: cleanups/installs queued or running.
        grants: grants being handled.
        refreshes: pending refresh op ids.
        waiters: waiting :class:`WaitUsable` calls.
    """

    assignment: Assignment
    phase: str
    gate_open: bool
    quarantined: bool
    holds: int
    installed_revision: int | None
    generation: int
    wanted_revision: int
    min_revision: int
    floor_deadline_ms: int | None
    pending_op: str | None
    answering: bool
    timers: tuple[str, ...]
    full_cleanup: bool
    cleanups: int
    installs: int
    grants: int
    refreshes: tuple[str, ...]
    waiters: int


class Hold:
    """Whether a transition still holds the run's gate closed (LR-066)."""

    __slots__ = ("holding",)

    def __init__(self) -> None:
        self.holding = False


def run_status(st: Run) -> RunStatus:
    """A secret-free :class:`RunStatus` snapshot of ``st``."""
    timers = tuple(
        name
        for name, tid in (
            ("renewal", st.renewal_timer),
            ("retry", st.retry_timer),
            ("expiry", st.expiry_timer),
            ("floor", st.floor_timer),
            ("cleanup-retry", st.cleanup_retry_timer),
        )
        if tid is not None
    )
    return RunStatus(
        assignment=st.assignment,
        phase=st.phase.value,
        gate_open=st.gate_open,
        quarantined=st.gate_close_failed,
        holds=st.gate_holds,
        installed_revision=st.bundle.lease.manifest_revision if st.bundle else None,
        generation=st.generation,
        wanted_revision=st.wanted_revision,
        min_revision=st.min_revision,
        floor_deadline_ms=st.floor_deadline,
        pending_op=st.pending.op_id if st.pending else None,
        answering=bool(st.pending and st.pending.answering),
        timers=timers,
        full_cleanup=st.full_cleanup is not None,
        cleanups=st.cleanups_in_flight,
        installs=st.installs_in_flight,
        grants=st.grants_in_flight,
        refreshes=tuple(st.refresh_by_op),
        waiters=len(st.waiters),
    )


def unavailable_refresh(op_id: str) -> CredentialRefreshResult:
    """An ``unavailable`` refresh result for ``op_id`` (LR-104, LR-109)."""
    return CredentialRefreshResult(
        op_id=op_id, outcome="unavailable", version=None, expires_at=None
    )
