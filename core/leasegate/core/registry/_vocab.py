"""The lease registry's vocabulary: its events, its commands and its views.

Every event carries ``now_ms`` (milliseconds since the Unix epoch); it is the
registry's only clock. Every command that expects an answer carries an id
chosen by the registry (``cmd_id``, ``timer_id`` or ``reader_id``, drawn from
one counter per registry, never reused); the answering event echoes it. Host
calls carry a ``call_id`` chosen by the shell; the registry answers each call
exactly once with :class:`CallDone`, :class:`RefreshDone` or
:class:`WaiterResolved`.

The full contract, including the gate-callback protocol, is in
``docs/events-and-commands.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

from .._base import Command, Event
from .._model import Model
from .._secret import Secret
from ..wire.credentials import LeasedValue
from ..wire.lease import (
    CredentialRefreshResult,
    LeaseFiles,
    LeaseSession,
    ManifestEngine,
    ManifestMcp,
    ManifestStatic,
)

__all__ = [
    "Assignment",
    "Availability",
    "BridgeAuthenticated",
    "CallDone",
    "CancelTimer",
    "CleanupFailed",
    "CleanupFinished",
    "CleanupReason",
    "CleanupRequest",
    "CloseGate",
    "CloseReader",
    "CloseRun",
    "CredentialEntry",
    "FilesAccess",
    "FilesCredentials",
    "FrameReceived",
    "GateCallbackDone",
    "GateCallbackFailed",
    "GateReason",
    "GrantAccepted",
    "GrantHookFailed",
    "GrantSettled",
    "Identity",
    "InstallFailed",
    "InstallFinished",
    "InstallRequest",
    "LaunchFenceFailed",
    "LegacyRef",
    "OpenGate",
    "OpenReader",
    "ProjectValue",
    "ProjectValueDone",
    "ProjectValueRead",
    "ReadCompleted",
    "ReadFailed",
    "ReadParameters",
    "RefreshDone",
    "RefreshRequested",
    "ReportError",
    "RowRef",
    "RunCleanup",
    "RunInstall",
    "SendFailed",
    "SendFrame",
    "Shutdown",
    "SsmParameter",
    "StagedRef",
    "StartRun",
    "StartTimer",
    "TaskView",
    "TimerFired",
    "WaitCancelled",
    "WaitUsable",
    "WaiterResolved",
]

#: Reasons a task gate is closed (Appendix A of the catalog).
GateReason: TypeAlias = Literal[
    "starting",
    "recovery",
    "superseded",
    "minimum-revision",
    "manifest-narrowed",
    "denied",
    "expired",
    "stopped",
    "parked",
    "teardown",
    "cleanup-failed",
    "fence-failed",
    "shutdown",
]
#: Cleanup reasons: the gate reasons plus ``lease-replaced``.
CleanupReason: TypeAlias = GateReason | Literal["lease-replaced"]
#: A credential record's availability (LR-027, LR-032, LR-033).
Availability: TypeAlias = Literal["available", "access-denied", "not-required"]


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """One task run: ``(task_id, run_epoch)``. Reference: ``TaskAssignment``."""

    task_id: str
    run_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """A cleanup identity ``{class, credentialId, revision}`` (Conventions).

    Two identities are equal when all three fields are equal.
    """

    credential_class: Literal["engine", "mcp", "github", "ssh"]
    credential_id: str
    revision: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SsmParameter:
    """One parameter a ``GetParameters`` call returned (decrypted).

    ``type`` is SSM's ``Type`` (``SecureString`` expected), ``version`` its
    ``Version``; ``value`` is the decrypted text, a :class:`Secret`. The shell
    builds it and refuses a parameter without a string name, type and value
    and an integer version (LR-156, "Parameter Store returned an incomplete
    parameter", reported as a :class:`ReadFailed`).
    """

    name: str
    type: str
    value: Secret
    version: int


# ---------------------------------------------------------------------------
# Views


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class CredentialEntry:
    """One credential of a view: its manifest entry plus what was read.

    ``material`` is ``None`` unless ``availability`` is ``available``;
    ``observed_version`` is the SSM version read (it may be newer than the
    manifest's, LR-041/LR-101). Reference: ``TaskEngineCredential`` & co.
    Immutable; the views of runs that read the same material for the same
    manifest entry share one entry.
    """

    manifest: ManifestEngine | ManifestMcp | ManifestStatic
    availability: Availability
    material: LeasedValue | None
    observed_version: int | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """The credentials a run may use: immutable, no STS credential (LR-038).

    ``expires_at`` is :func:`~leasegate.core.wire.lease.lease_expires_at` in
    ms; entry tuples follow the manifest order. Reference:
    ``TaskCredentialView``, ``freezeView``.
    """

    assignment: Assignment
    lease_id: str
    manifest_revision: int
    manifest_digest: str
    expires_at: int
    project_ids: tuple[str, ...]
    engines: tuple[CredentialEntry, ...]
    mcp: tuple[CredentialEntry, ...]
    github: CredentialEntry | None
    ssh: CredentialEntry | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FilesCredentials:
    """The Files session's STS credentials (secrets are :class:`Secret`)."""

    access_key_id: str
    secret_access_key: Secret
    session_token: Secret
    expires_at: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FilesAccess:
    """A task machine's Files access (LR-140). Reference: ``TaskLeaseFilesAccess``."""

    assignment: Assignment
    region: str
    files: LeaseFiles
    credentials: FilesCredentials


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CleanupRequest:
    """What a cleanup must remove. Reference: ``CredentialCleanupRequest``.

    ``mode`` ``full`` removes everything of the run (``removed`` empty;
    ``remove_files_session`` true exactly for task machines); ``selective``
    removes the listed identities only (``remove_files_session`` false).
    """

    assignment: Assignment
    mode: Literal["full", "selective"]
    reason: CleanupReason
    removed: tuple[Identity, ...]
    remove_files_session: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InstallRequest:
    """What an install must put in place. Reference: ``CredentialInstallRequest``.

    ``previous``/``next`` are views; ``files`` the Files access of ``next``
    (``None`` on owned runners); ``reason`` ``grant`` or
    ``credential-change``; ``project_set_changed`` per LR-054. The
    reference's ``isCurrent()`` is :meth:`LeaseRegistry.install_is_current`
    (a query by the install's ``cmd_id``).
    """

    assignment: Assignment
    owner_org_id: str
    owner_user_id: str
    previous: TaskView | None
    next: TaskView
    files: FilesAccess | None
    reason: Literal["grant", "credential-change"]
    project_set_changed: bool


# ---------------------------------------------------------------------------
# Events: host calls


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StartRun(Event):
    """Host: ``startAssignment(assignment, {recovery})``; answered by :class:`CallDone`.

    ``task_id``/``run_epoch`` are taken as given (any object) and validated
    (LR-001).
    """

    call_id: int
    task_id: object
    run_epoch: object
    recovery: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloseRun(Event):
    """Host: ``closeAssignment(assignment, reason)``; answered by :class:`CallDone`."""

    call_id: int
    task_id: str
    run_epoch: int
    reason: Literal["stop", "park", "teardown", "superseded"] = "stop"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BridgeAuthenticated(Event):
    """Host: the bridge re-authenticated in the same process (LR-010)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RefreshRequested(Event):
    """Host: ``requestCredentialRefresh``; answered by :class:`RefreshDone` or :class:`CallDone`."""

    call_id: int
    task_id: str
    run_epoch: int
    credential_id: str
    revision: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LaunchFenceFailed(Event):
    """Host: ``escalateLaunchFence(assignment)`` (LR-076)."""

    task_id: str
    run_epoch: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Shutdown(Event):
    """Host: ``shutdown()``; answered by :class:`CallDone` once readers drained."""

    call_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WaitUsable(Event):
    """Host: ``waitUntilUsable(assignment)``.

    Answered by :class:`WaiterResolved` or :class:`CallDone`.
    """

    call_id: int
    task_id: str
    run_epoch: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StagedRef:
    """A staged project env value: read without a version (LR-145)."""

    staging_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LegacyRef:
    """A legacy project env value pinned at an SSM version (LR-146)."""

    ssm_version: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RowRef:
    """A row-backed value: a cloud lease cannot read it (LR-143)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProjectValueRead(Event):
    """Host: ``readProjectValue(assignment, {projectId, key, valueRef})``.

    With ``install_cmd_id`` it is a read through the ``projectValues`` reader
    of that :class:`RunInstall` instead (LR-154, LR-100). Answered by
    :class:`ProjectValueDone` or :class:`CallDone` (an error).
    """

    call_id: int
    task_id: str
    run_epoch: int
    project_id: str
    key: str
    ref: StagedRef | LegacyRef | RowRef
    install_cmd_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WaitCancelled(Event):
    """Host: the abort signal of a waiting :class:`WaitUsable` fired."""

    call_id: int


# ---------------------------------------------------------------------------
# Events: frames and completions


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FrameReceived(Event):
    """A frame from the cloud: a JSON value, or an already decoded frame model."""

    frame: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TimerFired(Event):
    """A :class:`StartTimer` elapsed (a cancelled timer's fire is ignored)."""

    timer_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GateCallbackDone(Event):
    """A :class:`CloseGate` or :class:`OpenGate` callback returned normally."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GateCallbackFailed(Event):
    """A :class:`CloseGate` or :class:`OpenGate` callback raised."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendFailed(Event):
    """A :class:`SendFrame` could not be handed over (``send`` false or raised)."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadCompleted(Event):
    """A :class:`ReadParameters` returned: parameters and invalid selectors."""

    cmd_id: int
    parameters: tuple[SsmParameter, ...]
    invalid: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadFailed(Event):
    """A :class:`ReadParameters` failed; ``access_denied`` per LR-034 (shell-classified)."""

    cmd_id: int
    access_denied: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CleanupFinished(Event):
    """A :class:`RunCleanup` succeeded."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CleanupFailed(Event):
    """A :class:`RunCleanup` failed (reported as "credential lease operation failed")."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InstallFinished(Event):
    """A :class:`RunInstall` succeeded."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InstallFailed(Event):
    """A :class:`RunInstall` failed."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GrantHookFailed(Event):
    """The host's ``grantAccepted`` hook for :class:`GrantAccepted` ``cmd_id`` raised.

    Feed it at once, before any other event: it is reported once (LR-019),
    also for a grant that settled inside the ``handle()`` that accepted it;
    fed after another event, for a settled grant, it is ignored.
    """

    cmd_id: int


# ---------------------------------------------------------------------------
# Commands


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendFrame(Command):
    """Send ``frame`` (a ``LeaseRequest`` or ``CredentialRefresh``).

    Feed :class:`SendFailed` if it could not be handed over.
    """

    cmd_id: int
    frame: Model


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StartTimer(Command):
    """Start a one-shot timer of ``delay_ms`` milliseconds; feed :class:`TimerFired`."""

    timer_id: int
    delay_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelTimer(Command):
    """Cancel timer ``timer_id`` (a fire already queued is ignored by the core)."""

    timer_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloseGate(Command):
    """Call ``closeTaskGate(assignment, reason)`` now; feed its outcome at once."""

    cmd_id: int
    assignment: Assignment
    reason: GateReason


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OpenGate(Command):
    """Call ``openTaskGate(assignment, view)`` now; feed its outcome at once."""

    cmd_id: int
    assignment: Assignment
    view: TaskView


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OpenReader(Command):
    """Create an SSM reader for one ``credentials`` session (region + that session only)."""

    reader_id: int
    assignment: Assignment
    region: str
    session: LeaseSession


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadParameters(Command):
    """``GetParameters(Names=selectors, WithDecryption=True)`` through ``reader_id``."""

    cmd_id: int
    reader_id: int
    selectors: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloseReader(Command):
    """Destroy reader ``reader_id`` (emitted once, after its reads drained). No answer."""

    reader_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunCleanup(Command):
    """Run ``cleanupExternal(request)``; feed :class:`CleanupFinished`/:class:`CleanupFailed`."""

    cmd_id: int
    request: CleanupRequest


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunInstall(Command):
    """Run ``installExternal(request)``; feed :class:`InstallFinished`/:class:`InstallFailed`."""

    cmd_id: int
    request: InstallRequest


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GrantAccepted(Command):
    """Call the host's ``grantAccepted(assignment)`` hook (LR-019)."""

    cmd_id: int
    assignment: Assignment


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GrantSettled(Command):
    """Call the release function the ``grantAccepted`` hook ``cmd_id`` returned."""

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CallDone(Command):
    """Answer host call ``call_id``: ``error`` ``None`` (success) or an error text."""

    call_id: int
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RefreshDone(Command):
    """Answer a :class:`RefreshRequested` with its result frame (LR-104)."""

    call_id: int
    result: CredentialRefreshResult


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProjectValue:
    """A project value read: the raw envelope (a :class:`Secret`), its SSM version, its name."""

    raw_value: Secret
    version: int
    parameter: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProjectValueDone(Command):
    """Answer a :class:`ProjectValueRead`: the value, or ``None`` when absent (LR-148)."""

    call_id: int
    result: ProjectValue | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WaiterResolved(Command):
    """Answer a :class:`WaitUsable` with the view that became usable."""

    call_id: int
    view: TaskView


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReportError(Command):
    """``onError(error, assignment)``: ``message`` is sanitized (LR-157)."""

    assignment: Assignment
    message: str
