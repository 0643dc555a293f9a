"""The lease registry: per-task credential leases as a pure, deterministic machine.

Theory of operation
===================

One :class:`LeaseRegistry` holds one *run* record per task (``(task_id,
run_epoch)``), exactly as the reference ``TaskCredentialLeaseRegistry`` of
``host/lib/cloud-credential-leases.ts`` holds its ``TaskState`` map. Its only
interface is ``handle(event) -> list[Command]``: events are host calls,
frames, timer fires and completions of earlier commands; commands are what
the shell must do (send a frame, start a timer, call a gate callback, read
SSM through a session reader, run a cleanup or an install, answer a call,
report a sanitized error). The vocabulary is in :mod:`._vocab` and
``docs/events-and-commands.md``.

How the reference's ``async`` code is kept
------------------------------------------

The reference is a web of ``async`` functions whose fences are re-checked
after each ``await``. Rewriting it as explicit state records would re-derive
every interleaving by hand; instead each ``async`` function here is a
*generator coroutine* with the same statements in the same order, run by the
tiny deterministic scheduler of :mod:`._sched`:

* ``await something`` becomes ``yield future``: the coroutine is suspended
  until the future settles, and resumed from a FIFO microtask queue. A future
  of an external operation is created together with its command (keyed by
  ``cmd_id``); the completion event settles it.
* a call to another ``async`` function that the reference awaits at once is
  ``yield from``; one whose promise is kept (a full cleanup joined by later
  callers, a cleanup queued on the run's FIFO) is started as a task and its
  future stored, exactly where the reference stores its promise.
* the reference's *synchronous* callbacks — ``closeTaskGate`` and
  ``openTaskGate`` — are commands (:class:`CloseGate`, :class:`OpenGate`)
  whose outcome (:class:`GateCallbackDone` / :class:`GateCallbackFailed`)
  the shell feeds back at once. The coroutine that issued one is suspended on
  it (``yield Sync(cmd_id)``) and nothing that depends on the outcome is
  emitted before it arrives. While a gate outcome is outstanding no microtask
  runs (as no promise continuation runs during a JavaScript callback), but
  other events *are* handled: they model calls the callback made into the
  registry (re-entrancy, catalog note 2); the open then re-checks LR-060 when
  its outcome arrives and undoes itself with a "cleanup-failed" close.

Because everything is keyed by integers drawn from one counter and every
queue is FIFO, the same construction and the same events give the same
commands, byte for byte.

Per-run state is the reference's ``TaskState`` (see :class:`_Run`): phase,
gate flag, quarantine flag (``gate_close_failed``), committed bundle and its
generation, wanted and minimum revisions, remembered identities, pending
removals and the cleaned set, the pending lease op, pending refreshes, the
five timers (renewal, retry, expiry, floor grace, cleanup retry), the FIFO
tail of cleanups and installs, the full cleanup in flight, the startup, the
waiters and the gate-hold count.

Secrets stay in :class:`~leasegate.core.Secret` values: sessions, SSM values
and material never reach an error text (errors are the reference's fixed
texts, or "credential lease operation failed"), a status or a repr.

Decisions on the reference's quirks are recorded in ``docs/registry.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable
from typing import Any, Final, Literal

from .._base import Command, Event, OpIdSource
from .._json import is_safe_int, sha256_hex
from .._model import DecodeError
from .._secret import Secret
from ..wire import decode_frame
from ..wire._common import (
    MAX_SSM_GET_PARAMETERS,
    OP_ID_RE,
    PROJECT_ENV_KEY_RE,
    PROJECT_ENV_STAGING_ID_RE,
    PROJECT_PATH_SEGMENT_RE,
    is_valid_assignment,
)
from ..wire.credentials import CredentialLocation, LeasedValue, parse_leased_value
from ..wire.credentials import parse_parameter_name as _parse_name
from ..wire.env import parse_legacy_envelope, parse_staged_envelope
from ..wire.lease import (
    MAX_MANIFEST_ENTRIES,
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    LeaseDeny,
    LeaseGrant,
    LeaseRequest,
    LeaseStale,
    LeaseUnavailable,
    ManifestEngine,
    ManifestMcp,
    ManifestStatic,
    TaskLease,
    lease_expires_at,
    manifest_digest,
)
from .._sched import Co, Future, Join, Scheduler, Sync
from ._vocab import (
    Assignment,
    Availability,
    BridgeAuthenticated,
    CallDone,
    CancelTimer,
    CleanupFailed,
    CleanupFinished,
    CleanupReason,
    CleanupRequest,
    CloseGate,
    CloseReader,
    CloseRun,
    CredentialEntry,
    FilesAccess,
    FilesCredentials,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    GateReason,
    GrantAccepted,
    GrantHookFailed,
    GrantSettled,
    Identity,
    InstallFailed,
    InstallFinished,
    InstallRequest,
    LaunchFenceFailed,
    LegacyRef,
    OpenGate,
    OpenReader,
    ProjectValue,
    ProjectValueDone,
    ProjectValueRead,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    RefreshDone,
    RefreshRequested,
    ReportError,
    RowRef,
    RunCleanup,
    RunInstall,
    SendFailed,
    SendFrame,
    Shutdown,
    StagedRef,
    StartRun,
    StartTimer,
    TaskView,
    TimerFired,
    WaitCancelled,
    WaiterResolved,
    WaitUsable,
)

__all__ = [
    "LEASE_MIN_REVISION_GRACE_MS",
    "LEASE_RENEW_LEAD_MS",
    "LEASE_REQUEST_TIMEOUT_MS",
    "LEASE_RETRY_MS",
    "LeaseRegistry",
    "RunStatus",
]

#: Renewal is requested this long before the lease expires (LR-162).
LEASE_RENEW_LEAD_MS: Final = 600_000
#: A lease op or a refresh unanswered this long is dropped (LR-162).
LEASE_REQUEST_TIMEOUT_MS: Final = 20_000
#: Lease retry, selective cleanup retry and full cleanup retry delay (LR-162).
LEASE_RETRY_MS: Final = 30_000
#: Grace after a floor narrowing before the full cleanup (LR-162).
LEASE_MIN_REVISION_GRACE_MS: Final = 60_000

#: A lease with less than this left at a commit is *short*: the reference's
#: delay (remaining − lead) would be under a quarter of its lifetime, down to
#: the 1 s floor, so it is renewed on :func:`_renew_delay`'s fraction instead
#: (4/3 × :data:`LEASE_RENEW_LEAD_MS`, 13 min 20 s, so that a 15-minute lease
#: committed after up to 100 s of latency keeps the reference's schedule;
#: docs/registry.md, R1).
_SHORT_LEASE_MS: Final = 800_000
#: The largest jitter taken off a short lease's renewal delay, in permille.
_SHORT_RENEW_JITTER_PERMILLE: Final = 100

_SANITIZED: Final = "credential lease operation failed"
_UNSAFE_OP_CHARS: Final = re.compile(r"[^A-Za-z0-9_-]")

Phase = Literal["recovering", "waiting", "usable", "narrowing", "lost", "ended"]
FullReason = Literal[
    "denied", "expired", "minimum-revision", "manifest-narrowed", "cleanup-failed", "fence-failed"
]


class _LeaseError(Exception):
    """The reference's ``CredentialLeaseError``: its message is reported as is."""

    # LR-158: no message the registry creates holds a parameter value, envelope, STS field,
    # parameter name, selector, project value or deny text.
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Unavailable(_LeaseError):  # noqa: N818 - the reference name
    """The reference's ``CredentialLeaseUnavailableError``."""

    def __init__(self, message: str = "task credentials are not usable") -> None:
        super().__init__(message)


class _External(Exception):  # noqa: N818 - an external operation's failure
    """An external operation failed (cleanup, install, callback): reported sanitized."""


class _ReadError(_External):
    """A ``GetParameters`` failed; ``access_denied`` as classified by the shell (LR-034)."""

    def __init__(self, access_denied: bool) -> None:
        super().__init__()
        self.access_denied = access_denied


def _is_access_denied(error: BaseException) -> bool:
    return isinstance(error, _ReadError) and error.access_denied


# ---------------------------------------------------------------------------
# Records


@dataclasses.dataclass(slots=True, eq=False)
class _Reader:
    reader_id: int
    session_id: str
    sealed: bool = False
    in_flight: int = 0
    destroyed: bool = False
    drained: list[Future[None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class _Desc:
    cls: Literal["engine", "mcp", "github", "ssh"]
    credential_id: str
    revision: str | None
    parameter: str | None
    version: int | None
    session_id: str | None
    auth_kind: str | None
    location: CredentialLocation | None
    manifest: ManifestEngine | ManifestMcp | ManifestStatic

    @property
    def identity(self) -> Identity:
        return Identity(self.cls, self.credential_id, self.revision)


@dataclasses.dataclass(frozen=True, slots=True)
class _Record:
    desc: _Desc
    availability: Availability
    material: LeasedValue | None
    observed_version: int | None


@dataclasses.dataclass(slots=True, eq=False)
class _Bundle:
    lease: TaskLease
    expires_at: int
    readers: dict[str, _Reader]
    records: dict[str, _Record]
    project_sessions: dict[str, str]
    view: TaskView
    grant_id: int


@dataclasses.dataclass(slots=True, eq=False)
class _PendingLease:
    op_id: str
    timer_id: int
    send_cmd: int
    answering: bool = False


@dataclasses.dataclass(slots=True, eq=False)
class _Refresh:
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
class _Run:
    assignment: Assignment
    phase: Phase
    tail: Future[Any]
    gate_open: bool = False
    gate_close_failed: bool = False
    bundle: _Bundle | None = None
    generation: int = 0
    wanted_revision: int = 0
    min_revision: int = 0
    identities: dict[str, Identity] = dataclasses.field(default_factory=dict)
    removed: dict[Identity, Identity] = dataclasses.field(default_factory=dict)
    cleaned: dict[Identity, None] = dataclasses.field(default_factory=dict)
    pending: _PendingLease | None = None
    refresh_by_op: dict[str, _Refresh] = dataclasses.field(default_factory=dict)
    refresh_by_key: dict[tuple[str, str], _Refresh] = dataclasses.field(default_factory=dict)
    renewal_timer: int | None = None
    retry_timer: int | None = None
    expiry_timer: int | None = None
    floor_timer: int | None = None
    cleanup_retry_timer: int | None = None
    floor_deadline: int | None = None
    full_cleanup: Future[None] | None = None
    startup: tuple[str, _Run | None] | None = None
    startup_future: Future[None] | None = None
    waiters: dict[int, None] = dataclasses.field(default_factory=dict)
    sequence: int = 0
    gate_holds: int = 0
    floor_epoch: int = 0
    install_ids: list[int] = dataclasses.field(default_factory=list)
    cleanups_in_flight: int = 0
    installs_in_flight: int = 0
    grants_in_flight: int = 0
    closes_in_flight: int = 0
    #: Rotations announced while the run was active but not usable:
    #: credential id → (revision, version), applied once a grant is usable
    #: (decision R2; at most ``MAX_MANIFEST_ENTRIES``).
    announced: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True, eq=False)
class _InstallRec:
    run: _Run
    granted: _Bundle
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


class _Hold:
    __slots__ = ("holding",)

    def __init__(self) -> None:
        self.holding = False


def _descriptors(lease: TaskLease) -> list[_Desc]:
    m = lease.manifest
    out: list[_Desc] = [
        _Desc(
            "engine",
            e.credential_id,
            e.revision,
            e.parameter,
            e.version,
            e.session_id,
            e.auth_kind,
            _parse_name(e.parameter),
            e,
        )
        for e in m.engines
    ]
    out.extend(
        _Desc(
            "mcp",
            e.credential_id,
            e.revision,
            e.parameter,
            e.version,
            e.session_id,
            e.auth_kind,
            None if e.parameter is None else _parse_name(e.parameter),
            e,
        )
        for e in m.mcp
    )
    for cls, s in (("github", m.github), ("ssh", m.ssh)):
        if s is not None:
            out.append(
                _Desc(
                    cls,  # type: ignore[arg-type]
                    s.credential_id,
                    s.revision,
                    s.parameter,
                    s.version,
                    s.session_id,
                    None,
                    _parse_name(s.parameter),
                    s,
                )
            )
    return out


def _material_matches(material: LeasedValue, desc: _Desc) -> bool:
    if material.credential_class != desc.cls:
        return False
    if material.credential_class in ("engine", "mcp"):
        return getattr(material, "auth_kind", None) == desc.auth_kind
    return desc.auth_kind is None


def _freeze_view(lease: TaskLease, expires_at: int, records: dict[str, _Record]) -> TaskView:
    """Build the view (LR-036–LR-038); raises ``_LeaseError`` as ``freezeView``."""

    # LR-037: MCP records must be complete for their authKind, or "MCP material is incomplete".
    def need(cid: str) -> _Record:
        rec = records.get(cid)
        if rec is None:
            raise _LeaseError("credential material is incomplete")
        return rec

    def entry(rec: _Record, manifest: Any) -> CredentialEntry:
        return CredentialEntry(
            manifest=manifest,
            availability=rec.availability,
            material=rec.material,
            observed_version=rec.observed_version,
        )

    def static_ok(rec: _Record, cls: str) -> bool:
        return not (
            rec.availability == "not-required"
            or (
                rec.availability == "available"
                and (
                    rec.material is None
                    or rec.material.credential_class != cls
                    or rec.observed_version is None
                )
            )
            or (
                rec.availability == "access-denied"
                and (rec.material is not None or rec.observed_version is not None)
            )
        )

    engines: list[CredentialEntry] = []
    for e in lease.manifest.engines:
        rec = need(e.credential_id)
        if not static_ok(rec, "engine"):
            raise _LeaseError("engine material is incomplete")
        engines.append(entry(rec, e))
    mcp_entries: list[CredentialEntry] = []
    for m in lease.manifest.mcp:
        rec = need(m.credential_id)
        if (
            (m.auth_kind == "none" and (rec.availability != "not-required" or rec.material))
            or (m.auth_kind != "none" and rec.availability == "not-required")
            or (
                rec.availability == "available"
                and (rec.material is None or rec.material.credential_class != "mcp")
            )
            or (rec.availability == "access-denied" and rec.material is not None)
        ):
            raise _LeaseError("MCP material is incomplete")
        mcp_entries.append(entry(rec, m))
    statics: list[CredentialEntry | None] = []
    for cls, s in (("github", lease.manifest.github), ("ssh", lease.manifest.ssh)):
        if s is None:
            statics.append(None)
            continue
        rec = need(s.credential_id)
        if not static_ok(rec, cls):
            raise _LeaseError(f"{cls} material is incomplete")
        statics.append(entry(rec, s))
    return TaskView(
        assignment=Assignment(lease.task_id, lease.run_epoch),
        lease_id=lease.lease_id,
        manifest_revision=lease.manifest_revision,
        manifest_digest=lease.manifest_digest,
        expires_at=expires_at,
        project_ids=tuple(p.project_id for p in lease.manifest.projects),
        engines=tuple(engines),
        mcp=tuple(mcp_entries),
        github=statics[0],
        ssh=statics[1],
    )


def _renew_delay(lease: TaskLease, expires_at: int, now: int) -> int:
    """Milliseconds from ``now`` until the renewal of ``lease``, effective expiry ``expires_at``.

    An ordinary lease (at least 13 min 20 s, :data:`_SHORT_LEASE_MS`, left)
    keeps the reference's delay, ``max(1 000, expires_at − 600 000 − now)``
    (LR-114). A short lease is renewed after two thirds of its remaining
    lifetime less a jitter of 0–10 % of that, never before 1 000 ms: at most
    one renewal per lease lifetime, instead of one a second (docs/registry.md,
    decision R1). The jitter is deterministic, drawn from the SHA-256 of the
    task id, run epoch, lease id and expiry, so that runners renewing leases
    of one length spread out while the same events still give the same
    commands. Never raises.
    """
    remaining = expires_at - now
    if remaining >= _SHORT_LEASE_MS:
        return max(1_000, remaining - LEASE_RENEW_LEAD_MS)
    seed = f"{lease.task_id}\x00{lease.run_epoch}\x00{lease.lease_id}\x00{expires_at}"
    permille = int(sha256_hex(seed)[:8], 16) % (_SHORT_RENEW_JITTER_PERMILLE + 1)
    return max(1_000, remaining * 2 * (1_000 - permille) // 3_000)


def _project_set_key(lease: TaskLease) -> tuple[str, ...]:
    return tuple(sorted(p.project_id for p in lease.manifest.projects))


def _unavailable_refresh(op_id: str) -> CredentialRefreshResult:
    return CredentialRefreshResult(
        op_id=op_id, outcome="unavailable", version=None, expires_at=None
    )


class LeaseRegistry:
    """The lease registry machine. Reference: ``TaskCredentialLeaseRegistry``.

    Args:
        runner_kind: ``"owned"`` (no Files session) or ``"task-machine"``
            (exactly one Files session; full cleanups remove it) (LR-022).
        op_id_seed: seed of the :class:`~leasegate.core._base.OpIdSource`
            whose ids form the random part of op ids (LR-013).
        install_external: whether the host installs credentials; without it
            an install is only a barrier on the run's queue (LR-055, LR-057).

    Use :meth:`handle` for every event; it returns the commands to carry out,
    in order, and never raises. Queries (:meth:`status`,
    :meth:`current_view`, :meth:`files_access`, :meth:`install_is_current`)
    change nothing.
    """

    def __init__(
        self,
        *,
        runner_kind: Literal["owned", "task-machine"],
        op_id_seed: str,
        install_external: bool = True,
    ) -> None:
        self._runner_kind: Final = runner_kind
        self._ids = OpIdSource(op_id_seed)
        self._install_external: Final = install_external
        self._sched = Scheduler()
        self._tasks: dict[str, _Run] = {}
        self._out: list[Command] = []
        self._now = 0
        self._next = 0
        self._io: dict[int, Future[Any]] = {}
        self._io_kind: dict[int, type[Command]] = {}
        self._timers: dict[int, Callable[[], Co[None]]] = {}
        self._hooks: dict[int, Assignment] = {}
        # Hooks whose grant settled: their failure is still reported if it is
        # fed before any other event (LR-019; see ``handle``).
        self._settled_hooks: dict[int, Assignment] = {}
        self._installs: dict[int, _InstallRec] = {}
        self._waiter_run: dict[int, _Run] = {}
        self._internal_errors = 0

    # ------------------------------------------------------------------
    # The public surface

    def handle(self, event: Event) -> list[Command]:
        """Handle one event and return the commands it causes, in order.

        Args:
            event: any event of :mod:`leasegate.core.registry`; its
                ``now_ms`` becomes the registry's clock.

        Returns:
            The commands, in the order the reference performs the matching
            calls. Never raises: an unknown event or an unmatched completion
            returns ``[]``.
        """
        now = getattr(event, "now_ms", None)
        if type(now) is int:
            self._now = now
        if self._settled_hooks and type(event) is not GrantHookFailed:
            self._settled_hooks.clear()
        try:
            self._dispatch(event)
            self._sched.drain()
        except Exception:  # noqa: BLE001 - the core never raises (STYLE)
            self._internal_errors += 1
            self._out.append(ReportError(assignment=Assignment("", 0), message=_SANITIZED))
        out, self._out = self._out, []
        return out

    def status(self, task_id: str) -> RunStatus | None:
        """The run registered for ``task_id``, as a :class:`RunStatus`, or ``None``."""
        st = self._tasks.get(task_id)
        if st is None:
            return None
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
            phase=st.phase,
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

    def current_view(self, task_id: str, run_epoch: int, now_ms: int) -> TaskView | None:
        """The committed view while the run is usable at ``now_ms``, else ``None`` (LR-139)."""
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch:
            return None
        if not self._usable(st, now_ms) or st.bundle is None:
            return None
        return st.bundle.view

    def files_access(self, task_id: str, run_epoch: int, now_ms: int) -> FilesAccess | None:
        """The Files access while usable, else ``None`` (``None`` for owned runners; LR-140)."""
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch or st.bundle is None:
            return None
        if not self._usable(st, now_ms):
            return None
        return self._files_access(st.bundle)

    def install_is_current(self, cmd_id: int, now_ms: int) -> bool:
        """The reference's ``isCurrent()`` of install ``cmd_id`` at ``now_ms`` (LR-056, LR-100)."""
        rec = self._installs.get(cmd_id)
        if rec is None:
            return False
        saved, self._now = self._now, now_ms
        try:
            return rec.is_current()
        finally:
            self._now = saved

    # ------------------------------------------------------------------
    # Plumbing

    def _id(self) -> int:
        self._next += 1
        return self._next

    def _emit(self, cmd: Command) -> None:
        self._out.append(cmd)

    def _io_cmd(self, make: Callable[[int], Command]) -> Future[Any]:
        cid = self._id()
        fut: Future[Any] = Future(self._sched)
        cmd = make(cid)
        self._io[cid] = fut
        self._io_kind[cid] = type(cmd)
        self._emit(cmd)
        return fut

    def _take_io(self, cid: int, kind: type[Command]) -> Future[Any] | None:
        """The pending future of I/O command ``cid`` if it is a ``kind``
        command (removed), else ``None``: a completion of another kind (a
        ``CleanupFinished`` for a read's id) matches nothing and is ignored,
        and the command stays pending for its real completion."""
        if self._io_kind.get(cid) is not kind:
            return None
        del self._io_kind[cid]
        return self._io.pop(cid, None)

    def _start_timer(self, delay: int, cb: Callable[[], Co[None]]) -> int:
        tid = self._id()
        self._timers[tid] = cb
        self._emit(StartTimer(timer_id=tid, delay_ms=delay))
        return tid

    def _clear_timer(self, tid: int | None) -> None:
        if tid is None:
            return
        if self._timers.pop(tid, None) is not None:
            self._emit(CancelTimer(timer_id=tid))

    @property
    def internal_errors(self) -> int:
        """How many unexpected Python exceptions were contained (a bug if not 0).

        ``handle`` never raises: an exception that is neither a reference
        error nor an external failure is reported sanitized like any other
        and counted here so tests can assert there was none.
        """
        return self._internal_errors

    def _report(self, error: BaseException, assignment: Assignment) -> None:
        # LR-161: reported: grantAccepted, gate close, grant, change, refresh-apply and cleanup
        # failures.
        if not isinstance(error, (_LeaseError, _External)):
            self._internal_errors += 1
        msg = error.message if isinstance(error, _LeaseError) else _SANITIZED
        self._emit(ReportError(assignment=assignment, message=msg))

    def _background(self, fut: Future[Any], assignment: Assignment) -> None:
        def cb() -> None:
            if fut.error is not None:
                self._report(fut.error, assignment)

        fut.add(cb)

    def _answer(self, fut: Future[Any], call_id: int) -> None:
        # LR-159: a call fails with the original error object, not a sanitized copy.
        def cb() -> None:
            err = fut.error
            if err is None:
                self._emit(CallDone(call_id=call_id, error=None))
            else:
                msg = err.message if isinstance(err, _LeaseError) else _SANITIZED
                self._emit(CallDone(call_id=call_id, error=msg))

        fut.add(cb)

    def _answer_value(self, fut: Future[Any], call_id: int) -> None:
        def cb() -> None:
            err = fut.error
            if err is None:
                self._emit(ProjectValueDone(call_id=call_id, result=fut.value))
            else:
                msg = err.message if isinstance(err, _LeaseError) else _SANITIZED
                self._emit(CallDone(call_id=call_id, error=msg))

        fut.add(cb)

    def _prune_installs(self, st: _Run) -> None:
        """Forget ``st``'s install records whose grant can no longer be read or installed."""
        keep: list[int] = []
        for cid in st.install_ids:
            rec = self._installs.get(cid)
            if rec is None:
                continue
            live = self._tasks.get(st.assignment.task_id) is st and (
                rec.installing()
                or (st.bundle is not None and st.bundle.grant_id == rec.granted.grant_id)
            )
            if live:
                keep.append(cid)
            else:
                del self._installs[cid]
        st.install_ids = keep

    def _forget_installs(self, st: _Run) -> None:
        """Forget every install record of a run that left the registry."""
        for cid in st.install_ids:
            self._installs.pop(cid, None)
        st.install_ids = []

    def _dispatch(self, ev: Event) -> None:
        sched = self._sched
        if isinstance(ev, (GateCallbackDone, GateCallbackFailed)):
            sched.outcome(ev.cmd_id, isinstance(ev, GateCallbackDone))
        elif isinstance(ev, ReadCompleted):
            fut = self._take_io(ev.cmd_id, ReadParameters)
            if fut is not None:
                fut.resolve(ev)
        elif isinstance(ev, ReadFailed):
            fut = self._take_io(ev.cmd_id, ReadParameters)
            if fut is not None:
                fut.reject(_ReadError(ev.access_denied is True))
        elif isinstance(ev, (CleanupFinished, InstallFinished)):
            kind = RunCleanup if isinstance(ev, CleanupFinished) else RunInstall
            fut = self._take_io(ev.cmd_id, kind)
            if fut is not None:
                fut.resolve(None)
        elif isinstance(ev, (CleanupFailed, InstallFailed)):
            kind = RunCleanup if isinstance(ev, CleanupFailed) else RunInstall
            fut = self._take_io(ev.cmd_id, kind)
            if fut is not None:
                fut.reject(_External())
        elif isinstance(ev, TimerFired):
            cb = self._timers.pop(ev.timer_id, None)
            if cb is not None:
                sched.spawn(cb())
        elif isinstance(ev, FrameReceived):
            self._frame(ev.frame)
        elif isinstance(ev, SendFailed):
            self._send_failed(ev.cmd_id)
        elif isinstance(ev, StartRun):
            task = sched.spawn(self._start_assignment(ev.task_id, ev.run_epoch, ev.recovery))
            self._answer(task.future, ev.call_id)
        elif isinstance(ev, CloseRun):
            task = sched.spawn(self._close_assignment(ev.task_id, ev.run_epoch, ev.reason))
            self._answer(task.future, ev.call_id)
        elif isinstance(ev, BridgeAuthenticated):
            sched.spawn(self._bridge_authenticated())
        elif isinstance(ev, LaunchFenceFailed):
            sched.spawn(self._escalate_launch_fence(ev.task_id, ev.run_epoch))
        elif isinstance(ev, Shutdown):
            task = sched.spawn(self._shutdown())
            self._answer(task.future, ev.call_id)
        elif isinstance(ev, RefreshRequested):
            self._request_refresh(ev)
        elif isinstance(ev, WaitUsable):
            self._wait_until_usable(ev)
        elif isinstance(ev, WaitCancelled):
            st = self._waiter_run.pop(ev.call_id, None)
            if st is not None and ev.call_id in st.waiters:
                del st.waiters[ev.call_id]
                self._emit(CallDone(call_id=ev.call_id, error="aborted"))
        elif isinstance(ev, ProjectValueRead):
            task = sched.spawn(self._read_project_value(ev))
            self._answer_value(task.future, ev.call_id)
        elif isinstance(ev, GrantHookFailed):
            # LR-019: reported once, while the grant is in flight or, once it
            # settled, before any other event (a grant refused before its
            # first read settles inside the handle() that accepted it).
            a = self._hooks.pop(ev.cmd_id, None)
            if a is None:
                a = self._settled_hooks.pop(ev.cmd_id, None)
            if a is not None:
                self._report(_External(), a)

    def _frame(self, value: object) -> None:
        frame = value if isinstance(value, _FRAME_TYPES) else decode_frame(value)
        if isinstance(frame, DecodeError):
            return
        spawn = self._sched.spawn
        if isinstance(frame, LeaseGrant):
            spawn(self._handle_grant(frame))
        elif isinstance(frame, LeaseUnavailable):
            self._handle_unavailable(frame)
        elif isinstance(frame, LeaseDeny):
            spawn(self._handle_denied(frame))
        elif isinstance(frame, LeaseStale):
            spawn(self._handle_stale(frame))
        elif isinstance(frame, CredentialChanged):
            spawn(self._handle_changed(frame))
        elif isinstance(frame, CredentialRefreshResult):
            spawn(self._handle_refresh_result(frame))

    # ------------------------------------------------------------------
    # Runs

    def _new_run(self, a: Assignment, phase: Phase) -> _Run:
        return _Run(assignment=a, phase=phase, tail=self._sched.resolved())

    def _is_active(self, st: _Run) -> bool:
        # LR-125: an ended run still registered ignores grants, stale frames, changes and refresh
        # results.
        return self._tasks.get(st.assignment.task_id) is st and st.phase != "ended"

    def _usable(self, st: _Run, now: int | None = None) -> bool:
        t = self._now if now is None else now
        b = st.bundle
        return bool(
            not st.gate_close_failed
            and st.gate_open
            and b is not None
            and b.expires_at > t
            and b.lease.manifest_revision >= st.min_revision
            and st.phase == "usable"
        )

    def _start_assignment(self, task_id: object, run_epoch: object, recovery: bool) -> Co[None]:
        """``startAssignment`` (LR-001–LR-009)."""
        # LR-003: a first start registers a waiting run, closes its gate "starting", then requests;
        # LR-005: a newer epoch ends the old run "superseded" synchronously first; LR-008: a start
        # of the same assignment only attempts a request (or joins a recovery).
        if not is_valid_assignment(task_id, run_epoch):
            raise _LeaseError("invalid task assignment")
        assert isinstance(task_id, str)
        assert isinstance(run_epoch, int)
        a = Assignment(task_id, run_epoch)
        current = self._tasks.get(task_id)
        while current is not None:
            if run_epoch < current.assignment.run_epoch:
                raise _LeaseError("stale task assignment")
            if run_epoch == current.assignment.run_epoch:
                if current.phase == "recovering":
                    fut = yield from self._finish_startup(current)
                    yield fut
                    if current.gate_close_failed and self._is_active(current):
                        # Quirk Q1 (docs/registry.md): the reference leaves a
                        # run whose first close failed quarantined for good
                        # here; the port runs the "cleanup-failed" full
                        # cleanup the first start could not reach.
                        fut = yield from self._full_cleanup(current, "cleanup-failed")
                        yield fut
                elif current.phase != "ended":
                    self._request(current)
                return
            yield from self._end_synchronously(current, "superseded")
            registered = self._tasks.get(task_id)
            if registered is None or registered is current:
                break
            # A start made from inside the "superseded" close callback
            # registered another run meanwhile (a reference quirk found by the
            # Q13: the reference overwrites it, so an older epoch
            # could replace a newer one and request and open for it). Decide
            # again against the run registered now: an older epoch fails as
            # "stale task assignment" (LR-002), a newer one supersedes it.
            # Test: test_LR_005_reentrant_newer_start_…
            current = registered
        needs_startup = current is not None or recovery
        st = self._new_run(a, "recovering" if needs_startup else "waiting")
        if current is not None:
            st.startup = ("predecessor", current)
        elif recovery:
            st.startup = ("recovery", None)
        if current is not None:
            self._forget_installs(current)
        self._tasks[task_id] = st
        closed = yield from self._close_gate(st, "recovery" if recovery else "starting")
        if needs_startup:
            fut = yield from self._finish_startup(st)
            yield fut
            if not closed:
                fut = yield from self._full_cleanup(st, "cleanup-failed")
                yield fut
        elif not closed:
            fut = yield from self._full_cleanup(st, "cleanup-failed")
            yield fut
        else:
            self._request(st)

    def _finish_startup(self, st: _Run) -> Co[Future[None]]:
        """``#finishStartup``: the startup cleanup, joined by later starts (LR-004, LR-007)."""
        if st.startup is None:
            if self._is_active(st):
                st.phase = "waiting"
                self._request(st)
            return self._sched.resolved()
        if st.startup_future is not None:
            return st.startup_future
        task = self._sched.create(self._startup_op(st))
        fut: Future[None] = task.future
        st.startup_future = fut
        # The caller that starts the startup gets a future settled only after
        # the startup is cleared, as the reference's ``.finally()`` chain: the
        # callers that joined it resume first (decision R4, docs/registry.md).
        first: Future[None] = Future(self._sched)

        def clear() -> None:
            if st.startup_future is fut:
                st.startup_future = None
            if fut.error is not None:
                first.reject(fut.error)
            else:
                first.resolve(None)

        fut.add(clear)
        task.step()
        yield Join(task)
        return first

    def _startup_op(self, st: _Run) -> Co[None]:
        startup = st.startup
        assert startup is not None
        kind, pred = startup
        if kind == "predecessor" and pred is not None:
            yield from self._complete_ended_cleanup(pred, "superseded")
        else:
            yield self._run_cleanup(st, self._full_request(st, "recovery"))
        st.startup = None
        if not self._is_active(st):
            return
        if st.full_cleanup is not None:
            # Quirk Q11 (docs/registry.md): a full cleanup started during the
            # startup (a launch fence) owns the phase; it sets ``waiting`` and
            # requests when it succeeds.
            return
        st.phase = "waiting"
        self._request(st)

    def _full_request(self, st: _Run, reason: CleanupReason) -> CleanupRequest:
        return CleanupRequest(
            assignment=st.assignment,
            mode="full",
            reason=reason,
            removed=(),
            remove_files_session=self._runner_kind == "task-machine",
        )

    def _bridge_authenticated(self) -> Co[None]:
        """``bridgeAuthenticated`` (LR-010)."""
        for st in list(self._tasks.values()):
            if st.phase == "ended":
                continue
            self._cancel_pending(st)
            self._request(st)
        return
        yield

    # ------------------------------------------------------------------
    # Lease requests

    def _op_id(self, prefix: str, st: _Run) -> str:
        random = _UNSAFE_OP_CHARS.sub("", self._ids.next())[:64]
        st.sequence += 1
        op = f"{prefix}-{st.sequence}-{random or 'op'}"
        if OP_ID_RE.fullmatch(op) is None:
            raise _LeaseError("could not create a safe operation id")
        return op

    def _request(self, st: _Run) -> None:
        """``#request`` (LR-011, LR-012)."""
        # LR-014: a send that fails cancels the timeout and arms the retry, unreported.
        if (
            not self._is_active(st)
            or st.gate_close_failed
            or st.phase in ("recovering", "lost")
            or st.full_cleanup is not None
            or st.pending is not None
        ):
            return
        self._clear_timer(st.retry_timer)
        st.retry_timer = None
        self._clear_timer(st.renewal_timer)
        st.renewal_timer = None
        op_id = self._op_id("lease", st)

        def timeout() -> Co[None]:
            # LR-015: the 20 000 ms timeout drops a still-pending op no grant began answering and
            # arms the retry; a late grant is ignored.
            if st.pending is None or st.pending.op_id != op_id or st.pending.answering:
                return
            st.pending = None
            self._arm_retry(st)
            yield from ()

        tid = self._start_timer(LEASE_REQUEST_TIMEOUT_MS, timeout)
        cid = self._id()
        st.pending = _PendingLease(op_id=op_id, timer_id=tid, send_cmd=cid)
        a = st.assignment
        self._emit(
            SendFrame(
                cmd_id=cid,
                frame=LeaseRequest(op_id=op_id, task_id=a.task_id, run_epoch=a.run_epoch),
            )
        )

    def _send_failed(self, cmd_id: int) -> None:
        for st in list(self._tasks.values()):
            if st.pending is not None and st.pending.send_cmd == cmd_id:
                self._cancel_pending(st)
                self._arm_retry(st)
                return
            for ref in list(st.refresh_by_op.values()):
                if ref.send_cmd == cmd_id:
                    self._settle_refresh(st, ref, _unavailable_refresh(ref.op_id))
                    return

    def _arm_retry(self, st: _Run) -> None:
        """``#armRetry`` (LR-016)."""
        if not self._is_active(st) or st.retry_timer is not None or st.pending is not None:
            return
        holder: list[int] = []

        def fire() -> Co[None]:
            if st.retry_timer != holder[0]:
                return
            st.retry_timer = None
            self._request(st)
            yield from ()

        holder.append(self._start_timer(LEASE_RETRY_MS, fire))
        st.retry_timer = holder[0]

    def _cancel_pending(self, st: _Run) -> None:
        if st.pending is None:
            return
        self._clear_timer(st.pending.timer_id)
        st.pending = None

    # ------------------------------------------------------------------
    # Gate

    def _close_gate(self, st: _Run, reason: GateReason) -> Co[bool]:
        """``#closeGate``: clear the flag, call the gate; a failure quarantines (LR-069)."""
        st.gate_open = False
        cid = self._id()
        self._emit(CloseGate(cmd_id=cid, assignment=st.assignment, reason=reason))
        ok = yield Sync(cid)
        if ok:
            return True
        st.gate_close_failed = True
        self._report(_External(), st.assignment)
        return False

    def _may_open(self, st: _Run, bundle: _Bundle, generation: int) -> bool:
        """``#mayOpenGate`` (LR-060)."""
        # LR-135: a committed grant waiting on its predecessor's readers opens nothing after a
        # stop, supersession, expiry, floor raise, full cleanup or another hold.
        return bool(
            self._is_active(st)
            and st.phase not in ("recovering", "lost")
            and st.gate_holds == 0
            and st.full_cleanup is None
            and not st.gate_close_failed
            and st.bundle is bundle
            and st.generation == generation
            and bundle.lease.manifest_revision >= st.min_revision
            and bundle.expires_at > self._now
        )

    def _open_gate(self, st: _Run, bundle: _Bundle, generation: int) -> Co[None]:
        """``#openGate`` (LR-061, LR-063, LR-064)."""
        if not self._may_open(st, bundle, generation):
            return
        cid = self._id()
        self._emit(OpenGate(cmd_id=cid, assignment=st.assignment, view=bundle.view))
        ok = yield Sync(cid)
        if not ok:
            yield from self._close_gate(st, "cleanup-failed")
            raise _External()
        if not self._may_open(st, bundle, generation):
            if not (yield from self._close_gate(st, "cleanup-failed")):
                raise _Unavailable("task gate reopened across a fence and could not be closed")
            return
        st.gate_open = True
        st.phase = "usable"
        for call_id in st.waiters:
            self._waiter_run.pop(call_id, None)
            self._emit(WaiterResolved(call_id=call_id, view=bundle.view))
        st.waiters.clear()
        self._apply_announced(st)

    def _release_hold(self, st: _Run) -> Co[None]:
        """``#releaseHold`` (LR-066, LR-067)."""
        st.gate_holds -= 1
        if st.gate_holds > 0 or st.gate_open or st.bundle is None:
            return
        yield from self._open_gate(st, st.bundle, st.generation)

    def _release(self, st: _Run, hold: _Hold) -> Co[None]:
        if not hold.holding:
            return
        hold.holding = False
        yield from self._release_hold(st)

    # ------------------------------------------------------------------
    # Readers

    def _read(self, reader: _Reader, selectors: tuple[str, ...]) -> Co[ReadCompleted]:
        """``ManagedSessionReader.read`` (LR-155)."""
        if reader.sealed:
            raise _Unavailable("credential reader is sealed")
        reader.in_flight += 1
        try:
            fut = self._io_cmd(
                lambda cid: ReadParameters(
                    cmd_id=cid, reader_id=reader.reader_id, selectors=selectors
                )
            )
            result: ReadCompleted = yield fut
        finally:
            reader.in_flight -= 1
            if reader.in_flight == 0:
                drained, reader.drained = reader.drained, []
                for d in drained:
                    d.resolve(None)
        return result

    def _destroy_reader(self, reader: _Reader) -> Co[None]:
        reader.sealed = True
        if reader.in_flight > 0:
            fut: Future[None] = Future(self._sched)
            reader.drained.append(fut)
            yield fut
        if reader.destroyed:
            return
        reader.destroyed = True
        self._emit(CloseReader(reader_id=reader.reader_id))

    def _destroy_bundle(self, bundle: _Bundle) -> Future[None]:
        """``#destroyBundle``: seal, then close each reader once drained (LR-059, LR-155)."""
        self._seal(bundle)
        tasks = [self._sched.spawn(self._destroy_reader(r)) for r in bundle.readers.values()]
        return self._sched.gather([t.future for t in tasks])

    @staticmethod
    def _seal(bundle: _Bundle) -> None:
        for r in bundle.readers.values():
            r.sealed = True

    # ------------------------------------------------------------------
    # Grants

    def _handle_grant(self, frame: LeaseGrant) -> Co[None]:
        """``handleGrant`` (LR-018, LR-019)."""
        lease = frame.lease
        st = self._tasks.get(lease.task_id)
        if (
            st is None
            or st.assignment.run_epoch != lease.run_epoch
            or st.pending is None
            or st.pending.op_id != frame.op_id
            or st.pending.answering
        ):
            return
        st.pending.answering = True
        self._clear_timer(st.pending.timer_id)
        hook = self._id()
        self._hooks[hook] = st.assignment
        self._emit(GrantAccepted(cmd_id=hook, assignment=st.assignment))
        st.grants_in_flight += 1
        try:
            yield from self._answer_grant(st, frame)
        finally:
            st.grants_in_flight -= 1
            if self._hooks.pop(hook, None) is not None:
                self._settled_hooks[hook] = st.assignment
            self._emit(GrantSettled(cmd_id=hook))

    def _answer_grant(self, st: _Run, frame: LeaseGrant) -> Co[None]:
        """``#answerGrant`` (LR-020–LR-065, LR-129–LR-138)."""
        # LR-053: installExternal gets the assignment, owner, previous and next views; LR-058:
        # after the post-install fence the candidate is committed in one step; LR-062: every
        # committed grant opens the gate with its view; LR-068: a failing transition holding the
        # gate starts the full cleanup before it releases its hold.
        # LR-049: a non-empty narrowing list closes the gate "manifest-narrowed", seals, cleans
        # selectively; LR-050: an empty one makes no gate call; LR-051: a failed selective cleanup
        # or fence starts the full cleanup before the hold is released; LR-052: a failed close
        # still runs the queued cleanup, then the fence fails.
        # LR-017: the op stays pending while its grant is answered; LR-024: a failed validation
        # drops the op, reports, arms the retry; LR-025: while quarantined it joins the
        # "manifest-narrowed" full cleanup instead; LR-118: a renewal grant is handled like any
        # grant; LR-132: a dropped op before any install discards and reports the grant.
        base_generation = st.generation
        candidate: _Bundle | None = None
        external_attempted = False
        installing = [False]
        hold = _Hold()
        try:
            descs = self._validate_grant(st, frame)
            candidate = yield from self._materialize(st, frame.lease, descs)
            self._assert_candidate(st, frame, base_generation, candidate)
            yield from self._preserve(st, frame, base_generation, candidate)
            self._assert_candidate(st, frame, base_generation, candidate)

            old = st.bundle
            if old is not None:
                narrowed = self._removed_identities(old, candidate) + self._refused_identities(
                    old, candidate
                )
            else:
                narrowed = self._removed_known(st, candidate) + self._refused_known(st, candidate)
            if narrowed:
                yield from self._close_gate(st, "manifest-narrowed")
                if old is not None:
                    self._seal(old)
                st.gate_holds += 1
                hold.holding = True
                yield self._run_cleanup(
                    st,
                    CleanupRequest(
                        assignment=st.assignment,
                        mode="selective",
                        reason="lease-replaced",
                        removed=tuple(narrowed),
                        remove_files_session=False,
                    ),
                )
                self._assert_candidate(st, frame, base_generation, candidate)

            self._assert_candidate(st, frame, base_generation, candidate)
            granted = candidate

            def installing_now() -> bool:
                return bool(
                    installing[0]
                    and self._is_active(st)
                    and not st.gate_close_failed
                    and st.full_cleanup is None
                    and granted.expires_at > self._now
                    and granted.lease.manifest_revision >= st.min_revision
                    and (
                        st.bundle is granted
                        or (
                            st.pending is not None
                            and st.pending.op_id == frame.op_id
                            and st.generation == base_generation
                        )
                    )
                )

            request = InstallRequest(
                assignment=st.assignment,
                owner_org_id=candidate.lease.org_id,
                owner_user_id=candidate.lease.user_id,
                previous=old.view if old is not None else None,
                next=candidate.view,
                files=self._files_access(candidate),
                reason="grant",
                project_set_changed=old is None
                or _project_set_key(old.lease) != _project_set_key(candidate.lease),
            )
            external_attempted = self._install_external
            installing[0] = True
            yield self._run_install(st, request, installing_now, granted, installing_now)
            self._assert_candidate(st, frame, base_generation, candidate)

            st.pending = None
            st.bundle = candidate
            candidate = None
            st.generation += 1
            installed = st.bundle
            installed_generation = st.generation
            st.identities = {
                r.desc.credential_id: r.desc.identity for r in installed.records.values()
            }
            st.wanted_revision = max(st.wanted_revision, installed.lease.manifest_revision)
            if installed.lease.manifest_revision >= st.min_revision:
                self._clear_floor(st)
            self._arm_bundle_timers(st)
            if old is not None:
                yield self._destroy_bundle(old)
            try:
                if hold.holding:
                    yield from self._release(st, hold)
                else:
                    yield from self._open_gate(st, installed, installed_generation)
            finally:
                installing[0] = False
            if (
                self._is_active(st)
                and st.bundle is not None
                and st.bundle.lease.manifest_revision < st.wanted_revision
            ):
                self._request(st)
        except Exception as error:  # noqa: BLE001 - the reference's catch-all
            installing[0] = False
            escalation: Future[None] | None = None
            if (hold.holding or external_attempted or st.gate_close_failed) and self._is_active(st):
                escalation = yield from self._full_cleanup(st, "manifest-narrowed")
            yield from self._release(st, hold)
            if st.pending is not None and st.pending.op_id == frame.op_id:
                st.pending = None
            if candidate is not None:
                yield self._destroy_bundle(candidate)
            self._report(error, st.assignment)
            if escalation is not None:
                with contextlib.suppress(Exception):  # the cleanup owns its retry
                    yield escalation
            elif self._is_active(st):
                self._arm_retry(st)

    def _validate_grant(self, st: _Run, frame: LeaseGrant) -> list[_Desc]:
        """``#validateGrantBeforeRead`` (LR-020–LR-023); returns the manifest's descriptors."""
        # LR-090: during a narrowing a grant at or above the floor is accepted and narrowed against
        # the sealed bundle.
        lease = frame.lease
        if (
            st.phase in ("recovering", "lost", "ended")
            or st.gate_close_failed
            or st.full_cleanup is not None
        ):
            raise _Unavailable("task cleanup is in progress")
        if (lease.task_id, lease.run_epoch) != (st.assignment.task_id, st.assignment.run_epoch):
            raise _LeaseError("grant belongs to another task assignment")
        if manifest_digest(lease.manifest) != lease.manifest_digest:
            raise _LeaseError("grant manifest digest does not match")
        if lease.manifest_revision < st.min_revision:
            raise _LeaseError("grant is below the task's minimum revision")
        b = st.bundle
        if b is not None and lease.manifest_revision < b.lease.manifest_revision:
            raise _LeaseError("grant is older than the installed manifest")
        if (
            b is not None
            and lease.manifest_revision == b.lease.manifest_revision
            and lease.manifest_digest != b.lease.manifest_digest
        ):
            raise _LeaseError("grant changed the manifest without advancing its revision")
        if lease_expires_at(lease) <= self._now:
            raise _LeaseError("grant is expired")
        files_sessions = [s for s in lease.sessions if s.purpose == "files"]
        if self._runner_kind == "owned":
            if files_sessions or lease.files is not None:
                raise _LeaseError("owned runner received a Files session")
        elif len(files_sessions) != 1 or lease.files is None:
            raise _LeaseError("task machine did not receive exactly one Files session")
        descs = _descriptors(lease)
        ids = [d.credential_id for d in descs]
        if len(set(ids)) != len(ids):
            raise _LeaseError("credential ids are not unique across the manifest")
        params = [d.parameter for d in descs if d.parameter is not None]
        if len(set(params)) != len(params):
            raise _LeaseError("credential parameters are not unique across the manifest")
        return descs

    def _materialize(self, st: _Run, lease: TaskLease, descs: list[_Desc]) -> Co[_Bundle]:
        """``#materializeBundle`` (LR-026–LR-036, LR-040)."""
        # LR-029: entries grouped by sessionId in manifest order, read in chunks of at most 10.
        readers: dict[str, _Reader] = {}
        try:
            for session in lease.sessions:
                if session.purpose != "credentials":
                    continue
                rid = self._id()
                readers[session.id] = _Reader(reader_id=rid, session_id=session.id)
                self._emit(
                    OpenReader(
                        reader_id=rid,
                        assignment=st.assignment,
                        region=lease.region,
                        session=session,
                    )
                )
            records: dict[str, _Record] = {}
            grouped: dict[str, list[_Desc]] = {}
            for d in descs:
                if d.auth_kind == "none":
                    records[d.credential_id] = _Record(d, "not-required", None, None)
                    continue
                if not d.parameter or not d.version or not d.session_id or d.location is None:
                    raise _LeaseError("manifest credential is incomplete")
                grouped.setdefault(d.session_id, []).append(d)
            for session_id, group in grouped.items():
                reader = readers.get(session_id)
                if reader is None:
                    raise _LeaseError("manifest names a missing session")
                for off in range(0, len(group), MAX_SSM_GET_PARAMETERS):
                    batch = group[off : off + MAX_SSM_GET_PARAMETERS]
                    selectors = tuple(f"{d.parameter}:{d.version}" for d in batch)
                    yield from self._read_batch(reader, batch, selectors, records)
            # Manifest order for every identity list (catalog note 11).
            ordered = {
                d.credential_id: records[d.credential_id]
                for d in descs
                if d.credential_id in records
            }
            expires_at = lease_expires_at(lease)
            view = _freeze_view(lease, expires_at, ordered)
            return _Bundle(
                lease=lease,
                expires_at=expires_at,
                readers=readers,
                records=ordered,
                project_sessions={p.project_id: p.session_id for p in lease.manifest.projects},
                view=view,
                grant_id=self._id(),
            )
        except Exception:
            tasks = [self._sched.spawn(self._destroy_reader(r)) for r in readers.values()]
            yield self._sched.gather([t.future for t in tasks])
            raise

    def _assert_batch(
        self,
        batch: list[_Desc],
        selectors: tuple[str, ...],
        result: ReadCompleted,
        records: dict[str, _Record],
    ) -> None:
        """``#assertMaterialBatch`` (LR-031, LR-032)."""
        if len(result.invalid) != 0:
            raise _LeaseError("Parameter Store rejected a credential selector")
        if len(result.parameters) != len(batch):
            raise _LeaseError("Parameter Store omitted or added credential material")
        expected = {d.parameter: d for d in batch}
        seen: set[str] = set()
        for p in result.parameters:
            d = expected.get(p.name)
            if (
                d is None
                or p.name in seen
                or p.type != "SecureString"
                or type(p.version) is not int
                or p.version != d.version
                or not hasattr(p.value, "reveal")
            ):
                raise _LeaseError("Parameter Store returned inexact credential material")
            if f"{p.name}:{p.version}" not in selectors:
                raise _LeaseError("Parameter Store returned an unrequested credential version")
            raw = p.value.reveal()
            material = parse_leased_value(raw, d.location)
            if material is None or not _material_matches(material, d):
                raise _LeaseError("credential envelope does not match its manifest entry")
            seen.add(p.name)
            records[d.credential_id] = _Record(d, "available", material, p.version)

    def _read_batch(
        self,
        reader: _Reader,
        batch: list[_Desc],
        selectors: tuple[str, ...],
        records: dict[str, _Record],
    ) -> Co[None]:
        """``#readMaterialBatch``: access-denied isolation by singletons (LR-033)."""
        try:
            result = yield from self._read(reader, selectors)
            self._assert_batch(batch, selectors, result, records)
            return
        except Exception as error:
            if not _is_access_denied(error):
                raise
        for d, sel in zip(batch, selectors, strict=True):
            try:
                result = yield from self._read(reader, (sel,))
                self._assert_batch([d], (sel,), result, records)
            except Exception as error:
                if not _is_access_denied(error):
                    raise
                records[d.credential_id] = _Record(d, "access-denied", None, None)

    def _assert_candidate(
        self, st: _Run, frame: LeaseGrant, base_generation: int, candidate: _Bundle
    ) -> None:
        """``#assertCandidateCurrent`` (LR-039)."""
        # LR-133: a floor raise above the candidate or its expiry fails it while reads, cleanup or
        # install are in flight; LR-134: a full cleanup does not stop the grant's candidate fence.
        if (
            not self._is_active(st)
            or st.gate_close_failed
            or st.pending is None
            or st.pending.op_id != frame.op_id
            or st.generation != base_generation
            or candidate.lease.manifest_revision < st.min_revision
            or candidate.expires_at <= self._now
        ):
            raise _Unavailable("grant became stale while it was being read")

    def _preserve(
        self, st: _Run, frame: LeaseGrant, base_generation: int, candidate: _Bundle
    ) -> Co[None]:
        """``#preserveObservedVersions`` (LR-041–LR-045)."""
        # LR-042: no preservation for a new identity or a version not above the candidate's;
        # LR-043: a session without a candidate reader fails; LR-044: reads one at a time, the
        # fence after each, the view rebuilt.
        current = st.bundle
        if current is None:
            return
        changed = False
        for old in list(current.records.values()):
            nxt = candidate.records.get(old.desc.credential_id)
            old_known = max(old.desc.version or 0, old.observed_version or 0)
            next_known = (
                max(nxt.desc.version or 0, nxt.observed_version or 0) if nxt is not None else 0
            )
            if (
                nxt is None
                or old_known == 0
                or old_known <= next_known
                or old.desc.identity != nxt.desc.identity
                or not nxt.desc.parameter
                or not nxt.desc.session_id
            ):
                continue
            reader = candidate.readers.get(nxt.desc.session_id)
            if reader is None:
                raise _LeaseError("candidate credential session is missing")
            desc = dataclasses.replace(nxt.desc, version=old_known)
            selector = f"{desc.parameter}:{desc.version}"
            yield from self._read_batch(reader, [desc], (selector,), candidate.records)
            self._assert_candidate(st, frame, base_generation, candidate)
            changed = True
        if changed:
            candidate.view = _freeze_view(candidate.lease, candidate.expires_at, candidate.records)

    @staticmethod
    def _removed_identities(old: _Bundle, nxt: _Bundle) -> list[Identity]:
        keys = {r.desc.identity for r in nxt.records.values()}
        return [r.desc.identity for r in old.records.values() if r.desc.identity not in keys]

    @staticmethod
    def _removed_known(st: _Run, nxt: _Bundle) -> list[Identity]:
        # LR-048 (removed identities from the remembered ones); LR-089 (a dropped below-floor
        # bundle's removals resolved through them).
        keys = {r.desc.identity for r in nxt.records.values()}
        return [i for i in st.identities.values() if i not in keys and i not in st.cleaned]

    @staticmethod
    def _refused_identities(old: _Bundle, nxt: _Bundle) -> list[Identity]:
        # LR-047: refused = committed available records whose candidate is access-denied.
        out = []
        for r in old.records.values():
            rep = nxt.records.get(r.desc.credential_id)
            if (
                r.availability == "available"
                and rep is not None
                and rep.availability == "access-denied"
                and rep.desc.identity == r.desc.identity
            ):
                out.append(r.desc.identity)
        return out

    @staticmethod
    def _refused_known(st: _Run, nxt: _Bundle) -> list[Identity]:
        # LR-048: without a committed bundle, from the remembered identities (not the cleaned set).
        out = []
        for r in nxt.records.values():
            if r.availability != "access-denied":
                continue
            known = st.identities.get(r.desc.credential_id)
            if known is not None and known == r.desc.identity and known not in st.cleaned:
                out.append(r.desc.identity)
        return out

    def _files_access(self, bundle: _Bundle) -> FilesAccess | None:
        lease = bundle.lease
        if lease.files is None:
            return None
        session = next((s for s in lease.sessions if s.purpose == "files"), None)
        if session is None:
            raise _LeaseError("Files metadata has no Files session")
        return FilesAccess(
            assignment=Assignment(lease.task_id, lease.run_epoch),
            region=lease.region,
            files=lease.files,
            credentials=FilesCredentials(
                access_key_id=session.access_key_id,
                secret_access_key=session.secret_access_key,
                session_token=session.session_token,
                expires_at=session.expires_at,
            ),
        )

    # ------------------------------------------------------------------
    # Queue

    def _run_cleanup(self, st: _Run, request: CleanupRequest) -> Future[None]:
        """``#runCleanup``: queue on the run's FIFO (LR-077)."""
        prev = st.tail
        st.cleanups_in_flight += 1

        def op() -> Co[None]:
            try:
                with contextlib.suppress(Exception):  # a cleanup runs after any outcome
                    yield prev
                yield self._io_cmd(lambda cid: RunCleanup(cmd_id=cid, request=request))
            finally:
                st.cleanups_in_flight -= 1

        fut: Future[None] = self._sched.spawn(op()).future
        st.tail = fut
        return fut

    def _run_install(
        self,
        st: _Run,
        request: InstallRequest,
        is_current: Callable[[], bool],
        granted: _Bundle,
        installing: Callable[[], bool],
    ) -> Future[None]:
        """``#runInstall`` (LR-055)."""
        if st.gate_close_failed:
            return self._sched.rejected(_Unavailable("task gate closure is quarantined"))
        if not self._install_external:
            return st.tail
        prev = st.tail
        st.installs_in_flight += 1

        def op() -> Co[None]:
            try:
                yield prev

                def make(cid: int) -> Command:
                    self._prune_installs(st)
                    self._installs[cid] = _InstallRec(st, granted, is_current, installing)
                    st.install_ids.append(cid)
                    return RunInstall(cmd_id=cid, request=request)

                yield self._io_cmd(make)
            finally:
                st.installs_in_flight -= 1

        fut: Future[None] = self._sched.spawn(op()).future
        st.tail = fut
        return fut

    # ------------------------------------------------------------------
    # Full cleanup

    def _full_cleanup(self, st: _Run, reason: FullReason) -> Co[Future[None]]:
        """``#fullCleanupAndContinue`` (LR-070–LR-075); never for an inactive run (quirk)."""
        # LR-071: a new full cleanup: phase lost first, in this step; LR-074: it cancels neither
        # the pending op nor the renewal, expiry or grace timers.
        if st.full_cleanup is not None:
            return st.full_cleanup
        if not self._is_active(st):
            # Reference quirk (docs/registry.md, Q2): the reference would
            # turn ``ended`` into ``lost`` here and could revive the run.
            return self._sched.resolved()
        st.phase = "lost"
        self._clear_timer(st.cleanup_retry_timer)
        st.cleanup_retry_timer = None
        task = self._sched.create(self._full_cleanup_op(st, reason))
        op: Future[None] = task.future
        st.full_cleanup = op
        outer = self._sched.create(self._full_cleanup_wrap(st, reason, op))
        task.step()
        yield Join(task)
        outer.step()
        return outer.future

    def _full_cleanup_op(self, st: _Run, reason: FullReason) -> Co[None]:
        # LR-072: on success, with the run active, the committed bundle is dropped and destroyed
        # and the remembered identities forgotten.
        if (yield from self._close_gate(st, reason)):
            st.gate_close_failed = False
        if st.bundle is not None:
            self._seal(st.bundle)
        request = self._full_request(st, reason)
        yield self._run_cleanup(st, request)
        if not self._is_active(st):
            return
        bundle = st.bundle
        st.bundle = None
        st.generation += 1
        if bundle is not None:
            yield self._destroy_bundle(bundle)
        st.identities.clear()
        while st.gate_close_failed:
            if not (yield from self._close_gate(st, reason)):
                raise _Unavailable("task gate closure failed; assignment remains quarantined")
            st.gate_close_failed = False
            yield self._run_cleanup(st, request)
            if not self._is_active(st):
                return
        if not self._is_active(st):
            return
        st.phase = "waiting"
        self._clear_floor(st)

    def _full_cleanup_wrap(self, st: _Run, reason: FullReason, op: Future[None]) -> Co[None]:
        # LR-160: a full cleanup failing in background is reported by the cleanup and by its
        # caller.
        completed = False
        try:
            yield op
            completed = True
        except Exception as error:
            self._report(error, st.assignment)
            if self._is_active(st):
                st.phase = "lost"
                yield from self._close_gate(st, "cleanup-failed")
                self._arm_cleanup_retry(st, reason)
            raise
        finally:
            if st.full_cleanup is op:
                st.full_cleanup = None
            if completed:
                if reason == "denied":
                    self._arm_retry(st)
                else:
                    self._request(st)

    def _arm_cleanup_retry(self, st: _Run, reason: FullReason) -> None:
        """``#armCleanupRetry`` (LR-073)."""
        if not self._is_active(st) or st.cleanup_retry_timer is not None:
            return
        holder: list[int] = []

        def fire() -> Co[None]:
            if st.cleanup_retry_timer != holder[0]:
                return
            st.cleanup_retry_timer = None
            fut = yield from self._full_cleanup(st, reason)
            self._background(fut, st.assignment)

        holder.append(self._start_timer(LEASE_RETRY_MS, fire))
        st.cleanup_retry_timer = holder[0]

    # ------------------------------------------------------------------
    # Bundle timers, floors

    def _arm_bundle_timers(self, st: _Run) -> None:
        """``#armBundleTimers`` (LR-114–LR-116; a short lease's renewal: decision R1)."""
        b = st.bundle
        if b is None:
            return
        self._clear_timer(st.renewal_timer)
        self._clear_timer(st.expiry_timer)
        generation = st.generation
        renewal: list[int] = []
        expiry: list[int] = []

        def renew() -> Co[None]:
            # LR-115: the renewal attempts a lease.request (nothing if one is pending), gate open
            # meanwhile.
            if st.renewal_timer != renewal[0] or st.generation != generation:
                return
            st.renewal_timer = None
            self._request(st)
            yield from ()

        def expire() -> Co[None]:
            if st.expiry_timer != expiry[0] or st.generation != generation:
                return
            st.expiry_timer = None
            yield from self._close_gate(st, "expired")
            fut = yield from self._full_cleanup(st, "expired")
            self._background(fut, st.assignment)

        renewal.append(self._start_timer(_renew_delay(b.lease, b.expires_at, self._now), renew))
        st.renewal_timer = renewal[0]
        expiry.append(self._start_timer(max(0, b.expires_at - self._now), expire))
        st.expiry_timer = expiry[0]

    def _clear_floor(self, st: _Run) -> None:
        self._clear_timer(st.floor_timer)
        st.floor_timer = None
        st.floor_deadline = None
        st.removed.clear()
        st.cleaned.clear()
        st.floor_epoch += 1

    def _has_uncleaned(self, st: _Run) -> bool:
        return any(k not in st.cleaned for k in st.removed)

    def _begin_narrowing(self, st: _Run) -> Co[None]:
        """``#beginNarrowing`` (LR-083–LR-088)."""
        # LR-085: a 60 000 ms grace deadline after a successful close; LR-087: below the floor
        # without uncleaned removals, no selective cleanup runs.
        if st.phase == "lost" or st.full_cleanup is not None:
            return
        below = bool(st.bundle and st.bundle.lease.manifest_revision < st.min_revision)
        removed = [i for k, i in st.removed.items() if k not in st.cleaned]
        if not below and not removed:
            return
        st.phase = "narrowing"
        closed = yield from self._close_gate(st, "minimum-revision")
        if st.bundle is not None:
            self._seal(st.bundle)
        if not closed:
            fut = yield from self._full_cleanup(st, "minimum-revision")
            self._background(fut, st.assignment)
            return
        if st.floor_deadline is None:
            st.floor_deadline = self._now + LEASE_MIN_REVISION_GRACE_MS
            deadline = st.floor_deadline
            holder: list[int] = []

            def grace() -> Co[None]:
                if st.floor_timer != holder[0] or st.floor_deadline != deadline:
                    return
                st.floor_timer = None
                if self._is_active(st) and (
                    st.bundle is None or st.bundle.lease.manifest_revision < st.min_revision
                ):
                    fut = yield from self._full_cleanup(st, "minimum-revision")
                    self._background(fut, st.assignment)

            holder.append(self._start_timer(LEASE_MIN_REVISION_GRACE_MS, grace))
            st.floor_timer = holder[0]
        if removed:
            bundle = st.bundle
            cleanup = self._run_cleanup(
                st,
                CleanupRequest(
                    assignment=st.assignment,
                    mode="selective",
                    reason="minimum-revision",
                    removed=tuple(removed),
                    remove_files_session=False,
                ),
            )
            self._sched.spawn(self._after_floor_cleanup(st, cleanup, bundle, removed))

    def _after_floor_cleanup(
        self, st: _Run, cleanup: Future[None], bundle: _Bundle | None, removed: list[Identity]
    ) -> Co[None]:
        floor_epoch = st.floor_epoch
        try:
            yield cleanup
        except Exception as error:  # noqa: BLE001
            self._report(error, st.assignment)
            self._arm_selective_retry(st)
            return
        try:
            if st.floor_epoch == floor_epoch:
                # Quirk Q12 (docs/registry.md): only into the cleaned set of
                # the floor it was started for, never a later one's.
                for i in removed:
                    st.cleaned[i] = None
            if (
                bundle is not None
                and self._is_active(st)
                and st.bundle is bundle
                and bundle.lease.manifest_revision < st.min_revision
            ):
                st.bundle = None
                st.generation += 1
                yield self._destroy_bundle(bundle)
        except Exception as error:  # noqa: BLE001
            self._report(error, st.assignment)
            self._arm_selective_retry(st)

    def _arm_selective_retry(self, st: _Run) -> None:
        """``#armSelectiveCleanupRetry`` (LR-088)."""
        if not self._is_active(st) or st.cleanup_retry_timer is not None:
            return
        if st.phase == "lost" or st.full_cleanup is not None:
            return
        holder: list[int] = []

        def fire() -> Co[None]:
            if st.cleanup_retry_timer != holder[0]:
                return
            st.cleanup_retry_timer = None
            if (
                st.bundle is not None and st.bundle.lease.manifest_revision < st.min_revision
            ) or self._has_uncleaned(st):
                yield from self._begin_narrowing(st)

        holder.append(self._start_timer(LEASE_RETRY_MS, fire))
        st.cleanup_retry_timer = holder[0]

    # ------------------------------------------------------------------
    # Frames

    def _state_for_pending(self, op_id: str) -> _Run | None:
        for st in self._tasks.values():
            if st.pending is not None and st.pending.op_id == op_id:
                return st
        return None

    def _handle_unavailable(self, frame: LeaseUnavailable) -> None:
        """``handleUnavailable`` (LR-110)."""
        st = self._state_for_pending(frame.op_id)
        if st is None:
            return
        self._cancel_pending(st)
        self._arm_retry(st)

    def _handle_denied(self, frame: LeaseDeny) -> Co[None]:
        """``handleDenied`` (LR-111–LR-113); its rejection is not re-reported (docs/registry.md)."""
        st = self._state_for_pending(frame.op_id)
        if st is None:
            return
        self._cancel_pending(st)
        yield from self._close_gate(st, "denied")
        fut = yield from self._full_cleanup(st, "denied")
        with contextlib.suppress(Exception):  # already reported by the cleanup's path
            yield fut

    def _handle_stale(self, frame: LeaseStale) -> Co[None]:
        """``handleStale`` (LR-078–LR-083)."""
        # LR-079: a stale frame at or below the handled floor is ignored; LR-081: a higher
        # minRevision raises the floor and resolves the removals; LR-089: removals resolved through
        # the remembered identities.
        st = self._tasks.get(frame.task_id)
        if st is None or st.assignment.run_epoch != frame.run_epoch or st.phase == "ended":
            return
        installed = st.bundle.lease.manifest_revision if st.bundle is not None else 0
        handled = max(st.min_revision, installed)
        min_rev = frame.min_revision
        if frame.wanted_revision <= st.wanted_revision and (min_rev or 0) <= handled:
            return
        st.wanted_revision = max(st.wanted_revision, frame.wanted_revision)
        if min_rev is not None:
            already = min_rev <= handled
            st.min_revision = max(st.min_revision, min_rev)
            if not already:
                for cid in frame.removed:
                    rec = st.bundle.records.get(cid) if st.bundle is not None else None
                    ident = rec.desc.identity if rec is not None else st.identities.get(cid)
                    if ident is None:
                        continue
                    st.removed[ident] = ident
                if (
                    st.bundle is not None and st.bundle.lease.manifest_revision < st.min_revision
                ) or self._has_uncleaned(st):
                    yield from self._begin_narrowing(st)
        self._cancel_pending(st)
        self._request(st)

    def _handle_changed(self, frame: CredentialChanged) -> Co[None]:
        """``handleCredentialChanged`` (LR-091–LR-101)."""
        st = self._tasks.get(frame.task_id)
        if st is None or st.assignment.run_epoch != frame.run_epoch:
            return
        if self._is_active(st) and not self._usable(st):
            self._announce(st, frame.credential_id, frame.revision, frame.version)
            return
        yield from self._changed(st, frame.credential_id, frame.revision, frame.version)

    def _changed(self, st: _Run, credential_id: str, revision: str, version: int) -> Co[None]:
        """Apply one announced version; its failure is reported, then a request (LR-091)."""
        try:
            yield from self._apply_version(st, credential_id, revision, version)
        except Exception as error:  # noqa: BLE001
            self._report(error, st.assignment)
            if self._is_active(st):
                self._request(st)

    @staticmethod
    def _announce(st: _Run, credential_id: str, revision: str, version: int) -> None:
        """Remember a rotation announced while the run is not usable (decision R2).

        LR-091 ignores it; the port keeps the highest version per credential
        id (a later revision replaces an earlier one) and re-reads it once a
        grant is usable (:meth:`_apply_announced`), through every check of
        :meth:`_apply_version`. At most ``MAX_MANIFEST_ENTRIES`` credential
        ids are kept: a manifest cannot name more; further ones are ignored.
        """
        known = st.announced.get(credential_id)
        if known is not None and known[0] == revision and known[1] >= version:
            return
        if known is None and len(st.announced) >= MAX_MANIFEST_ENTRIES:
            return
        st.announced[credential_id] = (revision, version)

    def _apply_announced(self, st: _Run) -> None:
        """Once the run is usable, re-read the rotations announced before (decision R2)."""
        if not st.announced or not self._usable(st):
            return
        announced, st.announced = st.announced, {}
        for credential_id, (revision, version) in announced.items():
            self._sched.spawn(self._changed(st, credential_id, revision, version))

    def _assert_read_fence(self, st: _Run, bundle: _Bundle, generation: int) -> None:
        """``#assertReadFence`` (LR-093)."""
        if (
            not self._is_active(st)
            or not st.gate_open
            or st.bundle is not bundle
            or st.generation != generation
            or bundle.expires_at <= self._now
            or bundle.lease.manifest_revision < st.min_revision
        ):
            raise _Unavailable("credential read crossed an assignment fence")

    def _assert_refusal_fence(self, st: _Run, bundle: _Bundle, generation: int) -> None:
        """``#assertRefusalFence`` (LR-096)."""
        if (
            not self._is_active(st)
            or st.phase != "usable"
            or st.gate_close_failed
            or st.full_cleanup is not None
            or st.bundle is not bundle
            or st.generation != generation
            or bundle.expires_at <= self._now
            or bundle.lease.manifest_revision < st.min_revision
        ):
            raise _Unavailable("a refused credential's cleanup crossed an assignment fence")

    def _apply_version(self, st: _Run, credential_id: str, revision: str, version: int) -> Co[None]:
        """``#applyCredentialVersion`` (LR-091–LR-101)."""
        # LR-094: a change that is no refusal installs with reason "credential-change", gate open;
        # LR-095: a refusal closes the gate, holds and cleans selectively; LR-097: a failed refusal
        # close runs the full cleanup in background; LR-098: a failure after a hold, an install or
        # while quarantined runs the full cleanup; LR-099: an access-denied credential is read
        # again on a newer version, no refusal.
        if not self._usable(st):
            return
        bundle = st.bundle
        assert bundle is not None
        generation = st.generation
        current = bundle.records.get(credential_id)
        if (
            current is None
            or current.desc.revision != revision
            or current.desc.auth_kind == "none"
            or not current.desc.parameter
            or not current.desc.session_id
            or current.desc.location is None
            or version <= max(current.desc.version or 0, current.observed_version or 0)
        ):
            return
        reader = bundle.readers.get(current.desc.session_id)
        if reader is None:
            raise _LeaseError("credential session is missing")
        selector = f"{current.desc.parameter}:{version}"
        replacement = dict(bundle.records)
        desc = dataclasses.replace(current.desc, version=version)
        yield from self._read_batch(reader, [desc], (selector,), replacement)
        self._assert_read_fence(st, bundle, generation)
        nxt = _Bundle(
            lease=bundle.lease,
            expires_at=bundle.expires_at,
            readers=bundle.readers,
            records=replacement,
            project_sessions=bundle.project_sessions,
            view=_freeze_view(bundle.lease, bundle.expires_at, replacement),
            grant_id=bundle.grant_id,
        )
        new_rec = replacement.get(credential_id)
        refused = (
            current.availability == "available"
            and new_rec is not None
            and new_rec.availability == "access-denied"
        )
        hold = _Hold()
        if refused:
            if not (yield from self._close_gate(st, "manifest-narrowed")):
                fut = yield from self._full_cleanup(st, "manifest-narrowed")
                self._background(fut, st.assignment)
                return
            st.gate_holds += 1
            hold.holding = True
        attempted = False

        def fence() -> None:
            # LR-136: a change fails its fence when a grant commits, a floor rises, the bundle
            # expires or the run ends.
            if refused:
                self._assert_refusal_fence(st, bundle, generation)
            else:
                self._assert_read_fence(st, bundle, generation)

        def is_current() -> bool:
            try:
                fence()
            except _LeaseError:
                return False
            return True

        try:
            if refused:
                yield self._run_cleanup(
                    st,
                    CleanupRequest(
                        assignment=st.assignment,
                        mode="selective",
                        reason="lease-replaced",
                        removed=(current.desc.identity,),
                        remove_files_session=False,
                    ),
                )
                self._assert_refusal_fence(st, bundle, generation)
            request = InstallRequest(
                assignment=st.assignment,
                owner_org_id=bundle.lease.org_id,
                owner_user_id=bundle.lease.user_id,
                previous=bundle.view,
                next=nxt.view,
                files=self._files_access(nxt),
                reason="credential-change",
                project_set_changed=False,
            )
            attempted = self._install_external
            yield self._run_install(st, request, is_current, bundle, lambda: False)
            fence()
            st.bundle = nxt
            st.generation += 1
            self._arm_bundle_timers(st)
            yield from self._release(st, hold)
        except Exception:
            if (hold.holding or attempted or st.gate_close_failed) and self._is_active(st):
                escalation = yield from self._full_cleanup(st, "manifest-narrowed")
                yield from self._release(st, hold)
                with contextlib.suppress(Exception):  # the cleanup owns its retry
                    yield escalation
            yield from self._release(st, hold)
            raise

    # ------------------------------------------------------------------
    # Refresh

    def _request_refresh(self, ev: RefreshRequested) -> None:
        """``requestCredentialRefresh`` (LR-102–LR-105)."""
        st = self._tasks.get(ev.task_id)
        if st is None or st.assignment.run_epoch != ev.run_epoch or not self._usable(st):
            self._emit(CallDone(call_id=ev.call_id, error="task credentials are not usable"))
            return
        assert st.bundle is not None
        rec = st.bundle.records.get(ev.credential_id)
        if rec is None or ev.revision is None or rec.desc.revision != ev.revision:
            self._emit(
                CallDone(call_id=ev.call_id, error="credential is not in the active manifest")
            )
            return
        key = (ev.credential_id, ev.revision)
        existing = st.refresh_by_key.get(key)
        if existing is not None:
            existing.call_ids.append(ev.call_id)
            return
        op_id = self._op_id("refresh", st)
        holder: list[_Refresh] = []

        def timeout() -> Co[None]:
            ref = holder[0]
            if st.refresh_by_op.get(ref.op_id) is ref:
                del st.refresh_by_op[ref.op_id]
                st.refresh_by_key.pop(ref.key, None)
                for call_id in ref.call_ids:
                    self._emit(RefreshDone(call_id=call_id, result=_unavailable_refresh(op_id)))
            yield from ()

        tid = self._start_timer(LEASE_REQUEST_TIMEOUT_MS, timeout)
        cid = self._id()
        ref = _Refresh(
            op_id=op_id,
            key=key,
            assignment=st.assignment,
            credential_id=ev.credential_id,
            revision=ev.revision,
            generation=st.generation,
            timer_id=tid,
            send_cmd=cid,
            call_ids=[ev.call_id],
        )
        holder.append(ref)
        st.refresh_by_op[op_id] = ref
        st.refresh_by_key[key] = ref
        self._emit(
            SendFrame(
                cmd_id=cid,
                frame=CredentialRefresh(
                    op_id=op_id,
                    task_id=ev.task_id,
                    run_epoch=ev.run_epoch,
                    credential_id=ev.credential_id,
                    revision=ev.revision,
                ),
            )
        )

    def _settle_refresh(self, st: _Run, ref: _Refresh, result: CredentialRefreshResult) -> None:
        if st.refresh_by_op.get(ref.op_id) is not ref:
            return
        self._clear_timer(ref.timer_id)
        del st.refresh_by_op[ref.op_id]
        st.refresh_by_key.pop(ref.key, None)
        for call_id in ref.call_ids:
            self._emit(RefreshDone(call_id=call_id, result=result))

    def _handle_refresh_result(self, frame: CredentialRefreshResult) -> Co[None]:
        """``handleRefreshResult`` (LR-106–LR-108)."""
        # LR-107: refreshed or fresh with an unchanged generation is applied as a
        # credential.changed.
        st: _Run | None = None
        ref: _Refresh | None = None
        for cand in self._tasks.values():
            found = cand.refresh_by_op.get(frame.op_id)
            if found is not None:
                st, ref = cand, found
                break
        if st is None or ref is None:
            return
        if (
            not self._is_active(st)
            or st.assignment != ref.assignment
            or st.generation != ref.generation
        ):
            self._settle_refresh(st, ref, _unavailable_refresh(frame.op_id))
            return
        if frame.outcome in ("refreshed", "fresh") and frame.version is not None:
            try:
                yield from self._apply_version(st, ref.credential_id, ref.revision, frame.version)
            except Exception as error:  # noqa: BLE001
                self._report(error, st.assignment)
                self._request(st)
        elif frame.outcome == "needs_sign_in":
            self._request(st)
        self._settle_refresh(st, ref, frame)

    # ------------------------------------------------------------------
    # Project value reads

    def _read_project_value(self, ev: ProjectValueRead) -> Co[ProjectValue | None]:
        """``readProjectValue`` and a grant's ``projectValues`` (LR-143–LR-154)."""
        # LR-153: projectValueReader's read, bound to the assignment named in the event.
        if (
            type(ev.project_id) is not str
            or PROJECT_PATH_SEGMENT_RE.fullmatch(ev.project_id) is None
            or type(ev.key) is not str
            or PROJECT_ENV_KEY_RE.fullmatch(ev.key) is None
        ):
            raise _LeaseError("invalid project env identity")
        if isinstance(ev.ref, RowRef) or not isinstance(ev.ref, (StagedRef, LegacyRef)):
            raise _LeaseError("a cloud lease cannot read a row-backed value")
        if ev.install_cmd_id is not None:
            rec = self._installs.get(ev.install_cmd_id)
            # The reference's projectValues reader is bound to its grant's
            # run; here the install is named by id, so a read naming another
            # assignment than that install's run is refused (Q14).
            if rec is None or (ev.task_id, ev.run_epoch) != (
                rec.run.assignment.task_id,
                rec.run.assignment.run_epoch,
            ):
                raise _Unavailable()
            result = yield from self._grant_read(rec, ev)
            return result
        st = self._tasks.get(ev.task_id)
        if st is None or st.assignment.run_epoch != ev.run_epoch or not self._usable(st):
            raise _Unavailable()
        bundle = st.bundle
        assert bundle is not None
        generation = st.generation
        result = yield from self._read_project_from(
            bundle, lambda: self._assert_read_fence(st, bundle, generation), ev
        )
        return result

    def _grant_read(self, rec: _InstallRec, ev: ProjectValueRead) -> Co[ProjectValue | None]:
        """``#grantProjectValueReader`` (LR-154, LR-100)."""
        st, granted = rec.run, rec.granted
        b = st.bundle
        if (
            self._tasks.get(st.assignment.task_id) is st
            and b is not None
            and b.grant_id == granted.grant_id
            and self._usable(st)
        ):
            generation = st.generation
            result = yield from self._read_project_from(
                b, lambda: self._assert_read_fence(st, b, generation), ev
            )
            return result
        if not rec.installing():
            raise _Unavailable()

        def fence() -> None:
            if not rec.installing():
                raise _Unavailable("credential read crossed an assignment fence")

        result = yield from self._read_project_from(granted, fence, ev)
        return result

    def _read_project_from(
        self, bundle: _Bundle, fence: Callable[[], None], ev: ProjectValueRead
    ) -> Co[ProjectValue | None]:
        """``#readProjectValueFrom`` (LR-144–LR-152)."""
        # LR-137: a read in flight when the bundle is replaced, its gate closes, it expires, the
        # floor rises or the run ends fails (#assertReadFence); LR-147: one GetParameters call with
        # one selector, no isolation; LR-149: the one parameter's name, type and version are
        # checked; LR-151: a legacy envelope's exact keys.
        ref = ev.ref
        session_id = bundle.project_sessions.get(ev.project_id)
        if not session_id:
            raise _LeaseError("project is not in the active manifest")
        reader = bundle.readers.get(session_id)
        if reader is None:
            raise _LeaseError("project credentials session is missing")
        expected: int | None
        if isinstance(ref, StagedRef):
            sid = ref.staging_id
            if type(sid) is not str or PROJECT_ENV_STAGING_ID_RE.fullmatch(sid) is None:
                raise _LeaseError("invalid project env staging id")
            parameter = f"/uai/projects/{ev.project_id}/env-values/{sha256_hex(ev.key)}/{sid}"
            selector = parameter
            expected = None
        else:
            assert isinstance(ref, LegacyRef)
            if not is_safe_int(ref.ssm_version) or ref.ssm_version <= 0:
                raise _LeaseError("invalid legacy project env version")
            parameter = f"/uai/projects/{ev.project_id}/env/{ev.key}"
            selector = f"{parameter}:{ref.ssm_version}"
            expected = ref.ssm_version
        result = yield from self._read(reader, (selector,))
        fence()
        if len(result.invalid) == 1 and result.invalid[0] == selector:
            if len(result.parameters) != 0:
                raise _LeaseError("Parameter Store returned conflicting project results")
            return None
        if len(result.invalid) != 0 or len(result.parameters) != 1:
            raise _LeaseError("Parameter Store returned an inexact project result")
        observed = result.parameters[0]
        if (
            observed.name != parameter
            or observed.type != "SecureString"
            or not is_safe_int(observed.version)
            or observed.version <= 0
            or (expected is not None and observed.version != expected)
        ):
            raise _LeaseError("Parameter Store returned the wrong project parameter")
        raw = observed.value.reveal() if isinstance(observed.value, Secret) else None
        # One envelope check for the registry and the replica (LR-150/151, ER-098/100).
        if raw is None:
            raise _LeaseError("project value envelope does not match its reference")
        if isinstance(ref, StagedRef):
            opened = parse_staged_envelope(
                raw,
                org_id=bundle.lease.org_id,
                project_id=ev.project_id,
                key=ev.key,
                staging_id=ref.staging_id,
            )
        else:
            opened = parse_legacy_envelope(
                raw, org_id=bundle.lease.org_id, project_id=ev.project_id, key=ev.key
            )
        if not isinstance(opened, Secret):
            raise _LeaseError("project value envelope does not match its reference")
        return ProjectValue(raw_value=observed.value, version=observed.version, parameter=parameter)

    # ------------------------------------------------------------------
    # Ending

    def _escalate_launch_fence(self, task_id: str, run_epoch: int) -> Co[None]:
        """``escalateLaunchFence`` (LR-076)."""
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch or not self._is_active(st):
            return
        fut = yield from self._full_cleanup(st, "fence-failed")
        self._background(fut, st.assignment)

    def _end_synchronously(self, st: _Run, reason: GateReason) -> Co[None]:
        """``#endSynchronously`` (LR-121)."""
        # LR-109: a run's pending refreshes resolve unavailable, timers cancelled; LR-130: an
        # install in flight is not interrupted (its isCurrent turns false).
        st.phase = "ended"
        yield from self._close_gate(st, reason)
        self._cancel_pending(st)
        for name in ("renewal_timer", "retry_timer", "expiry_timer", "floor_timer"):
            self._clear_timer(getattr(st, name))
            setattr(st, name, None)
        self._clear_timer(st.cleanup_retry_timer)
        st.cleanup_retry_timer = None
        if st.bundle is not None:
            self._seal(st.bundle)
        for ref in list(st.refresh_by_op.values()):
            self._settle_refresh(st, ref, _unavailable_refresh(ref.op_id))
        for call_id in st.waiters:
            self._waiter_run.pop(call_id, None)
            self._emit(CallDone(call_id=call_id, error="task assignment ended"))
        st.waiters.clear()

    def _complete_ended_cleanup(self, st: _Run, reason: GateReason) -> Co[None]:
        """``#completeEndedCleanup`` (LR-122)."""
        if st.startup is not None:
            fut = yield from self._finish_startup(st)
            yield fut
        if st.gate_close_failed and (yield from self._close_gate(st, reason)):
            st.gate_close_failed = False
        request = self._full_request(st, reason)
        yield self._run_cleanup(st, request)
        bundle = st.bundle
        st.bundle = None
        st.generation += 1
        if bundle is not None:
            yield self._destroy_bundle(bundle)
        st.identities.clear()
        while st.gate_close_failed:
            if not (yield from self._close_gate(st, reason)):
                raise _Unavailable("task gate closure failed; assignment remains quarantined")
            st.gate_close_failed = False
            yield self._run_cleanup(st, request)

    def _close_assignment(self, task_id: str, run_epoch: int, reason: str) -> Co[None]:
        """``closeAssignment`` (LR-119–LR-124)."""
        # LR-120: reasons stop (default), park, teardown, superseded map to their gate and cleanup
        # reasons.
        st = self._tasks.get(task_id)
        if st is None or st.assignment.run_epoch != run_epoch:
            return
        gate: GateReason = {
            "stop": "stopped",
            "park": "parked",
            "teardown": "teardown",
        }.get(reason, "superseded")  # type: ignore[assignment]
        # Quirk Q15 (docs/registry.md): the reference removes the ended run
        # when the first of several closes of it has cleaned up, while a
        # later close's cleanup of the same run still drains; a same-epoch
        # start then registered a fresh run that requested and opened its
        # gates before that cleanup ended. The ended run stays registered
        # (a same-epoch start is then a no-op, LR-123) until the last close
        # of it has settled. Test: test_LR_123_an_ended_run_stays_…
        st.closes_in_flight += 1
        try:
            yield from self._end_synchronously(st, gate)
            yield from self._complete_ended_cleanup(st, gate)
        finally:
            st.closes_in_flight -= 1
        if st.closes_in_flight == 0 and self._tasks.get(task_id) is st:
            del self._tasks[task_id]
            self._forget_installs(st)

    def _shutdown(self) -> Co[None]:
        """``shutdown`` (LR-126–LR-128)."""
        # LR-127: completes once the bundles of every removed run were destroyed after their reads.
        states = list(self._tasks.values())
        self._tasks.clear()
        for st in states:
            self._forget_installs(st)
        for st in states:
            if st.phase != "ended":
                yield from self._end_synchronously(st, "shutdown")
        futs = [self._destroy_bundle(st.bundle) for st in states if st.bundle is not None]
        yield self._sched.gather(futs)

    def _wait_until_usable(self, ev: WaitUsable) -> None:
        """``waitUntilUsable`` (LR-141, LR-142)."""
        st = self._tasks.get(ev.task_id)
        if st is not None and st.assignment.run_epoch == ev.run_epoch and self._usable(st):
            assert st.bundle is not None
            self._emit(WaiterResolved(call_id=ev.call_id, view=st.bundle.view))
            return
        if st is None or st.assignment.run_epoch != ev.run_epoch or st.phase == "ended":
            self._emit(CallDone(call_id=ev.call_id, error="task assignment is not active"))
            return
        st.waiters[ev.call_id] = None
        self._waiter_run[ev.call_id] = st


_FRAME_TYPES: Final = (
    LeaseGrant,
    LeaseUnavailable,
    LeaseDeny,
    LeaseStale,
    CredentialChanged,
    CredentialRefreshResult,
    LeaseRequest,
    CredentialRefresh,
)
