"""The runtime's vocabulary: errors, ports, events and commands.

Reference: ``host/lib/cloud-credential-runtime.ts`` (``CloudCredentialRuntime``),
catalogued in ``design/behaviors/runtime.md`` (RT-001 … RT-141). The design is
in ``docs/runtime.md``.

Conventions (shared with the lease registry, ``docs/events-and-commands.md``):

* Every event carries ``now_ms`` (milliseconds since the Unix epoch).
* Host calls carry a ``call_id`` the shell chose (a non-negative ``int``);
  each is answered once by :class:`Answer` or :class:`Failed`.
* Ids the runtime chooses itself (``cmd_id``, ``timer_id``, ``signal`` ids of
  starts and holds) are **negative** integers from one counter, so they never
  collide with the registry's (positive) ids: a :class:`TimerFired` with a
  negative id is the runtime's, a positive one the registry's.
* No error text carries a secret or an input value: texts are the catalog's
  fixed messages (its table "Error messages"), a consumer's class name, or
  ``"a credential consumer failed"``.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal, Protocol

from .._base import Command, Event
from ..registry import Assignment, CleanupRequest, InstallRequest, RunStatus, TaskView
from ..replica import ReplicaView

__all__ = [
    "CLEANUP_CLASSES",
    "ENV_READY_POLL_MS",
    "ENV_READY_TIMEOUT_MS",
    "LAUNCH_READY_DEADLINE_MS",
    "RECOVERY_RETRY_BASE_MS",
    "RECOVERY_RETRY_MAX_MS",
    "SHUTDOWN_DRAIN_MS",
    "V1_FRAME_KINDS",
    "AbandonStart",
    "Abort",
    "AcquireHold",
    "Answer",
    "AwaitLaunchReady",
    "BeginStart",
    "CloseAssignment",
    "ConsumerPort",
    "ConsumerWork",
    "CredentialFailure",
    "CredentialUnavailable",
    "EndStart",
    "EnginesPort",
    "Failed",
    "FilesPort",
    "GitHold",
    "HandleFrame",
    "HoldInfo",
    "Interrupt",
    "InterruptRecovery",
    "InterruptStarts",
    "JournalRecord",
    "JournalSettle",
    "Log",
    "McpPort",
    "Notify",
    "OwedCleanup",
    "PersonPort",
    "ReaderRef",
    "Recover",
    "ReleaseHold",
    "ReplicaPort",
    "ResumeRecovered",
    "RunSetup",
    "RuntimeShutdown",
    "SendAck",
    "StartupStatus",
    "TaskCleanupRequest",
    "TransportConnected",
    "WorkDone",
]

#: How long a start waits for its grant, installed and opened (RT-028, RT-139).
LAUNCH_READY_DEADLINE_MS: Final = 3 * 60_000
#: How long an install waits for the env replica's exact snapshot (RT-073).
ENV_READY_TIMEOUT_MS: Final = 60_000
#: The reference's poll period; the core never polls (event-driven, RT-074),
#: kept for a shell without a change feed (catalog port note 3).
ENV_READY_POLL_MS: Final = 50
#: How long shutdown joins accepted work (RT-135).
SHUTDOWN_DRAIN_MS: Final = 30_000
#: First retry delay of a recovered start whose startup failed (RT-106).
RECOVERY_RETRY_BASE_MS: Final = 1_000
#: Largest retry delay of a recovered start (RT-106).
RECOVERY_RETRY_MAX_MS: Final = 30_000
#: Selective expansion order of a cleanup without a lease (RT-097, RT-141).
CLEANUP_CLASSES: Final = ("engine", "mcp", "github", "ssh")
#: The v1 lease frame kinds the runtime owns (RT-125, RT-141); not ``lease.deny``.
V1_FRAME_KINDS: Final = (
    "lease.grant.v1",
    "lease.unavailable",
    "lease.stale",
    "credential.changed",
    "credential.refresh.result",
)


# ---------------------------------------------------------------------------
# Errors


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialFailure:
    """An error value the runtime reports (it never raises one).

    The reference's ``CredentialLeaseUnavailableError`` (``by is None``), its
    ``StartInterruptedError`` (``by`` = ``"takeover"`` / ``"shutdown"``), or the
    aggregate close failure (``causes`` non-empty, RT-088).

    Attributes:
        message: a fixed text of the catalog's error table; never a secret.
        by: who interrupted a start, for ``StartInterruptedError``.
        causes: the failures an aggregate carries, in attempt order.
    """

    message: str
    by: Literal["takeover", "shutdown"] | None = None
    causes: tuple[CredentialFailure, ...] = ()

    @staticmethod
    def interrupted(by: Literal["takeover", "shutdown"]) -> CredentialFailure:
        """``StartInterruptedError(by)`` with the reference's message (catalog Conventions)."""
        msg = "the runner is shutting down" if by == "shutdown" else "this start was interrupted"
        return CredentialFailure(message=msg, by=by)


class CredentialUnavailable(Exception):  # noqa: N818 - the reference's CLU
    """What a port raises for the reference's ``CredentialLeaseUnavailableError``.

    The runtime passes ``message`` on as a :class:`CredentialFailure`, so it
    must be a fixed text that carries no secret. Any other exception a port
    raises is reported as ``"a credential consumer failed"``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---------------------------------------------------------------------------
# Ports: synchronous, non-I/O objects the core calls in the same step


class GitHold(Protocol):
    """The owner's Git credentials held for a task-up (reference ``TaskGitCredentialHold``).

    Its signal is the shell's; the core calls :meth:`release` exactly once.
    """

    def release(self) -> None:
        """Release the hold (called once by the runtime, RT-043)."""


class ConsumerPort(Protocol):
    """A consumer's synchronous gate (reference: ``openEngineGate``/``closeEngineGate``).

    ``open`` and ``close`` must not do I/O (they flip in-memory admission
    state); either may raise, which the runtime reports (RT-082, RT-087).
    ``close`` covers the given run and every older run.
    """

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit work of ``assignment`` on ``view``."""

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older."""


class EnginesPort(ConsumerPort, Protocol):
    """The engines' gate and in-memory state (reference ``credential-consumers/engines``)."""

    def forget(self, assignment: Assignment) -> None:
        """Drop in-memory state of the run on teardown (``forgetLeasedEngines``, RT-099)."""


class McpPort(ConsumerPort, Protocol):
    """The MCP consumer's gate plus its one leased record per task (RT-086)."""

    def forget(self, assignment: Assignment) -> None:
        """Forget the task's leased record, given its own assignment (``forgetLeasedMcp``)."""

    def leased_run(self, task_id: str) -> Assignment | None:
        """The assignment the task's leased MCP record serves, or ``None``."""

    def install(self, request: InstallRequest) -> None:
        """Install connections synchronously (reference ``installMcpConnections``)."""


class PersonPort(ConsumerPort, Protocol):
    """The owner's GitHub sign-in and SSH key (reference ``./credential-consumers/github``)."""

    def install(self, request: InstallRequest) -> None:
        """Install synchronously (reference ``installPersonCredentials``)."""

    def hold_git(self, assignment: Assignment) -> GitHold:
        """Hold the run's Git credentials; raises :class:`CredentialUnavailable`
        when the manifest names one the lease could not read (RT-040)."""


class FilesPort(ConsumerPort, Protocol):
    """The task's Files gate (reference ``TaskFilesConsumer.open``/``close``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderRef:
    """The grant's project-value reader handed to the replica's activation (RT-067).

    Reads through it are the registry's ``ProjectValueRead(install_cmd_id=…)``.
    """

    install_cmd_id: int


class ReplicaPort(Protocol):
    """The env replica as the runtime drives it: a core machine plus three queries.

    :class:`leasegate.core.replica.ReplicaManager` satisfies it. The runtime
    feeds it the replica's own events (``ExpectActivation``,
    ``SettleActivation``, ``ActivateAssignment`` with a :class:`ReaderRef`,
    ``EnvFrameReceived``, ``ValueReadCompleted``/``ValueReadFailed``,
    ``DropAssignment``, ``DropAll``, ``ReadinessDeadline``) and routes the
    commands it returns (catalog "Siblings": the contract the runtime relies on).
    """

    def handle(self, event: Event) -> list[Command]:
        """Apply one replica event; return its commands. Never raises."""

    def reader_generation(self, task_id: str, run_epoch: int) -> int | None:
        """The run's reader generation, or ``None`` when not active."""

    def read_view_at(
        self, task_id: str, run_epoch: int, project_ids: tuple[str, ...], generation: int
    ) -> ReplicaView | None:
        """The committed snapshot of exactly ``project_ids`` produced under ``generation``."""


# ---------------------------------------------------------------------------
# Cleanup requests and the journal


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskCleanupRequest:
    """The cleanup procedure's request (reference ``TaskCredentialCleanupRequest``).

    Attributes:
        task_id, run_epoch: the run; the cleanup covers it and older runs.
        reason: ``"stop"``, ``"park"``, ``"teardown"``, ``"recovery"`` or the
            lease's own reason (adapter, catalog "Undefined").
        credential_ids: ``None`` for a whole-task cleanup; a tuple (even
            empty) for a selective one.
        lease: the registry's exact request, or ``None`` for the runtime's own
            (boot recovery).
        remove_files_session: remove the Files session (from the lease, or a
            whole-task cleanup on a task machine).
    """

    task_id: str
    run_epoch: int
    reason: str
    credential_ids: tuple[str, ...] | None
    lease: CleanupRequest | None = None
    remove_files_session: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class OwedCleanup:
    """A journal row: cleanup owed for ``(task_id, run_epoch)`` (no secret)."""

    task_id: str
    run_epoch: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StartupStatus:
    """A read-only, secret-free snapshot of one start (``startup_status``).

    What a host needs to say why a launch-ready wait has not been answered;
    reading it changes nothing and emits nothing.

    Attributes:
        start_id: the start (a negative ``int``).
        assignment: the start's run.
        live: the start is the task's newest, not aborted, not ended, and the
            runtime is not shut down (what ``assert_current`` calls current).
        aborted: the start's abort reason, or ``None``.
        startup: the registry's ``StartRun``: ``"pending"``, ``"done"`` or
            ``"failed"``.
        launch_waits: launch-ready waits registered on the start now.
        env_waiting: an install of the run waits for the env replica's
            exact snapshot (granted, snapshot not committed; RT-073).
        gate_open: the runtime's gate is open for the run.
        registry: the registry's :class:`~leasegate.core.registry.RunStatus`
            of the task when it is the start's run, else ``None``.
        replica_boot_id: the env replica's ``boot_id`` when the runtime has
            a replica that reports one (``ReplicaManager`` does), else ``None``.
    """

    start_id: int
    assignment: Assignment
    live: bool
    aborted: CredentialFailure | None
    startup: Literal["pending", "done", "failed"]
    launch_waits: int
    env_waiting: bool
    gate_open: bool
    registry: RunStatus | None
    replica_boot_id: str | None


# ---------------------------------------------------------------------------
# Events (host calls and completions)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BeginStart(Event):
    """``beginStart``: answered at once by ``Answer(value=start_id)`` or ``Failed``.

    RT-010..016.
    """

    call_id: int
    task_id: str
    run_epoch: int
    recovery: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaitLaunchReady(Event):
    """``waitForLaunchReady(start)``: ``Answer(value=TaskView)`` or ``Failed`` (RT-027..036)."""

    call_id: int
    start_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AcquireHold(Event):
    """``tryAcquireTaskUpHold``: ``Answer(value=HoldInfo | None)`` or ``Failed`` (RT-037..042)."""

    call_id: int
    start_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseHold(Event):
    """``TaskUpHold.release()``; idempotent (RT-043)."""

    hold_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EndStart(Event):
    """``endStart(start)`` (RT-045, RT-046)."""

    start_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AbandonStart(Event):
    """``abandonStart(start, hold)``: answered when done (RT-047..049)."""

    call_id: int
    start_id: int
    hold_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Interrupt(Event):
    """``interrupt(start)`` (RT-021, RT-022)."""

    start_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InterruptStarts(Event):
    """``interruptStarts(taskId, {exact, below})`` (RT-023..025)."""

    task_id: str
    exact: int | None = None
    below: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InterruptRecovery(Event):
    """``interruptRecovery(taskId)`` (RT-111)."""

    task_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloseAssignment(Event):
    """``closeAssignment(assignment, reason)``: answered when the close settles (RT-050..056)."""

    call_id: int
    task_id: str
    run_epoch: int
    reason: Literal["stop", "park", "teardown", "superseded"] = "stop"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HandleFrame(Event):
    """``handleFrame(frame)``: ``Answer(value=bool)`` (RT-117..126).

    ``frame``: the frame as a JSON value (``dict``), a decoded frame, or its
    JSON text (``str``), which is handled as the value it parses to; an env
    apply in the wire's compact form takes the replica's text fast path
    (``docs/runtime.md``, decisions).
    """

    call_id: int
    frame: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Recover(Event):
    """``recover(runEpochForTask)`` with the journal's owed rows (RT-100).

    Attributes:
        owed: the journal's rows, oldest first.
        admitted: the admitted run of each task (``runEpochForTask``; a task
            absent here counts as run 0).
    """

    call_id: int
    owed: tuple[OwedCleanup, ...]
    admitted: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResumeRecovered(Event):
    """``resumeRecovered(assignment, setup?)`` (RT-101..116)."""

    task_id: str
    run_epoch: int
    has_setup: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TransportConnected(Event):
    """Host: the transport (re)connected and authenticated to the bridge (LR-010).

    Fed for every connection a transport reports (a WebSocket transport's
    ``Reauthenticated(n)`` marker, before the first frame of connection
    ``n``). The runtime decides whether it counts as a re-authentication,
    which is what the registry's :class:`~leasegate.core.registry.BridgeAuthenticated`
    means (the reference's ``CloudCredentialRuntime.bridgeAuthenticated``):
    it does for a same-process reconnect (``connection > 1``) and for the
    first connection once a :class:`~leasegate.core.registry.SendFailed` was
    handled (a frame was lost for want of a connection); otherwise nothing
    is emitted. A ``connection`` that is not a positive ``int`` is ignored.

    Attributes:
        connection: the connection's ordinal, ``1`` for the first one.
    """

    connection: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeShutdown(Event):
    """``shutdown()``: answered once the drain ended or its bound elapsed (RT-128..136)."""

    call_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkDone(Event):
    """Completion of a :class:`ConsumerWork`, :class:`RunSetup` or journal command.

    Attributes:
        cmd_id: the command's id.
        error: ``None`` on success, else a :class:`CredentialFailure`.
    """

    cmd_id: int
    error: CredentialFailure | None = None


# ---------------------------------------------------------------------------
# Commands


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Answer(Command):
    """Completes host call ``call_id`` with ``value`` (start id, view, hold, bool, ``None``)."""

    call_id: int
    value: object = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Command):
    """Fails host call ``call_id`` with ``error``."""

    call_id: int
    error: CredentialFailure


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Abort(Command):
    """Abort signal ``id`` of ``kind`` start / hold / recovery; the first reason wins."""

    kind: Literal["start", "hold", "recovery"]
    id: int
    reason: CredentialFailure


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerWork(Command):
    """An awaited consumer operation; the shell feeds :class:`WorkDone`.

    ``op`` is one of ``install`` (engines, files), ``cleanup`` (engines,
    person, mcp), ``close-consumers`` (files), ``drain`` (engines, person,
    mcp), ``quiesce`` (host), ``remove-paths`` (host). ``request`` is the
    :class:`InstallRequest`, the consumer :class:`CleanupRequest` or the
    :class:`TaskCleanupRequest`.
    """

    cmd_id: int
    consumer: Literal["engines", "person", "mcp", "files", "host"]
    op: Literal["install", "cleanup", "close-consumers", "drain", "quiesce", "remove-paths"]
    request: object = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunSetup(Command):
    """Run a recovered run's setup with the recovery's signal; feed :class:`WorkDone` (RT-112)."""

    cmd_id: int
    task_id: str
    run_epoch: int
    recovery_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Notify(Command):
    """Call ``mcpServedChanged`` / ``envServedChanged`` for ``task_id`` (RT-081)."""

    what: Literal["mcp-served", "env-served"]
    task_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendAck(Command):
    """Send the replica's ack frame with ``send``, ignoring its boolean (RT-122)."""

    frame: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Log(Command):
    """A warning, prefixed ``[credentials] task <id> run <n>: …`` (no secret)."""

    message: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JournalRecord(Command):
    """Record durably that cleanup is owed; feed :class:`WorkDone` once durable.

    Backed by ``CleanupJournal.record_owed(task_id, run_epoch, reason)``.
    """

    cmd_id: int
    task_id: str
    run_epoch: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JournalSettle(Command):
    """The owed cleanups of ``task_id`` at runs ≤ ``run_epoch`` are done.

    Backed by ``CleanupJournal.settle(task_id, run)`` for each run listed.
    """

    cmd_id: int
    task_id: str
    runs: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class HoldInfo:
    """A task-up hold (reference ``TaskUpHold``): identity, not value (RT-063 note)."""

    hold_id: int
    assignment: Assignment
    view: TaskView
    git: GitHold
