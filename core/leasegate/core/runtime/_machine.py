"""The runtime machine: the lease registry and the env replica composed (RT-001 … RT-141).

Theory of operation (h11-style)
-------------------------------

:class:`CredentialRuntime` owns a :class:`~leasegate.core.registry.LeaseRegistry`
and talks to the env replica through :class:`~.ReplicaPort` and to the
consumers' gates through synchronous ports. The shell feeds *one* machine:
``runtime.handle(event) -> list[Command]``.

* Host calls (``BeginStart``, ``AwaitLaunchReady``, ``CloseAssignment`` …) are
  events with a ``call_id``; each is answered once by ``Answer``/``Failed``.
* The registry is driven with *negative* call ids; its answers to those are
  intercepted here. Everything else it emits passes through to the shell
  (``SendFrame``, its timers, readers, reads, ``ReportError``, answers of
  refreshes and project reads) and the matching completions are passed back.
* Intercepted registry commands become the runtime's composition, exactly as
  the reference's hooks do:

  - ``CloseGate`` → the synchronous close fan-out (env serving first, holds,
    engines, MCP, person, Files; each attempted; RT-085..089), whose outcome
    is fed back to the registry at once (``GateCallbackDone``/``Failed``);
  - ``OpenGate`` → the open fan-out (RT-080..084), outcome fed back at once;
  - ``RunInstall`` → the install sequence: fence, replica activation with the
    grant's reader, an *event-driven* wait for that reader generation's
    exact snapshot (re-evaluated after every event, never polled), fence,
    engines (awaited), fence, MCP, person, Files (awaited), fence (RT-065..079);
  - ``RunCleanup`` → the cleanup procedure (below) with the lease's request;
  - ``GrantAccepted``/``GrantSettled`` → ``expect_activation`` and its undo.

* Abort signals are ids: ``Abort(kind, id, reason)`` is emitted the first time
  a start, hold or recovery is aborted (first reason wins, RT-026); a hold is
  aborted with its start's reason when its start is (the derived signal).
* The cleanup procedure (catalog "Undefined": the coordinator): journal record
  → refuse new work and close the gate (the close fan-out, twice) → drain
  writers (abort holds ≤ run and join their release; join a running recovered
  setup of a whole-task cleanup; consumer cleanups of engines, person, MCP;
  first failure in that fixed order) → Files ``close-consumers`` → host
  ``quiesce`` → host ``remove-paths`` → drop memory → journal settle.
  Cleanups of one task are serialized. ``Recover`` runs a whole-task cleanup
  per task owed, at the newer of its recorded and admitted run, attempts all,
  then fails with the first failure.
* Tracked work (startups, closes, installs, unreleased holds, cleanups,
  setups, recovery chains) is a dict of ids; shutdown drains it in rounds,
  bounded by a timer.

``handle`` never raises: an unexpected exception is counted in
:attr:`internal_errors` and reported as a sanitized ``Log``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal

from .._base import Command, Event
from ..registry import (
    Assignment,
    BridgeAuthenticated,
    CallDone,
    CancelTimer,
    CleanupFailed,
    CleanupFinished,
    CleanupRequest,
    CloseGate,
    CloseRun,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    GrantAccepted,
    GrantSettled,
    Identity,
    InstallFailed,
    InstallFinished,
    InstallRequest,
    LeaseRegistry,
    LegacyRef,
    OpenGate,
    ProjectValueDone,
    ProjectValueRead,
    RunCleanup,
    RunInstall,
    SendFailed,
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
from ..replica import (
    ActivateAssignment,
    ActivationOutcome,
    ActivationToken,
    DropAll,
    DropAssignment,
    EnvFrameReceived,
    ExpectActivation,
    FrameRejected,
    ReadinessDeadline,
    ReadLegacyValue,
    ReadStagedValue,
    ReplicaView,
    SettleActivation,
    ValueReadCompleted,
    ValueReadFailed,
)
from ..replica import CancelTimer as ReplicaCancelTimer
from ..replica import SendAck as ReplicaSendAck
from ..replica import StartTimer as ReplicaStartTimer
from ..wire import decode_frame
from ..wire.env import EnvApply, EnvBegin, EnvCommit, EnvPage
from ._vocab import (
    CLEANUP_CLASSES,
    ENV_READY_TIMEOUT_MS,
    LAUNCH_READY_DEADLINE_MS,
    RECOVERY_RETRY_BASE_MS,
    RECOVERY_RETRY_MAX_MS,
    SHUTDOWN_DRAIN_MS,
    V1_FRAME_KINDS,
    AbandonStart,
    Abort,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerPort,
    ConsumerWork,
    CredentialFailure,
    CredentialUnavailable,
    EndStart,
    EnginesPort,
    Failed,
    FilesPort,
    GitHold,
    HandleFrame,
    HoldInfo,
    Interrupt,
    InterruptRecovery,
    InterruptStarts,
    JournalRecord,
    JournalSettle,
    Log,
    McpPort,
    Notify,
    OwedCleanup,
    PersonPort,
    ReaderRef,
    Recover,
    ReleaseHold,
    ReplicaPort,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    SendAck,
    StartupStatus,
    TaskCleanupRequest,
    TransportConnected,
    WorkDone,
)

__all__ = [
    "REPLICA_FRAME_KINDS",
    "CredentialRuntime",
    "DetachConsumers",
    "Settled",
    "adapt_cleanup_request",
    "consumer_cleanup_request",
    "is_replica_frame",
]

#: The four env replica frame kinds (RT-122).
REPLICA_FRAME_KINDS = (
    "env.replica.v1.begin",
    "env.replica.v1.page",
    "env.replica.v1.apply",
    "env.replica.v1.commit",
)

#: Views per task whose generation binding is kept (the open one, a candidate,
#: the previous one of a credential change, with margin).
_GENS_KEPT = 8

_ENV_FRAMES = (EnvBegin, EnvPage, EnvApply, EnvCommit)
EnvFrame = EnvBegin | EnvPage | EnvApply | EnvCommit

_CLU_INTERRUPTED = "this start was interrupted"
_CLU_NOT_OPEN = "the task's credentials are no longer open for this run"
_CLU_NEWER = "a newer run of this task has begun"
_CLU_DEADLINE = "the task's credentials did not arrive in time"
_CLU_WITHDRAWN = "the task's credentials were withdrawn"
_CLU_CLEANING = "the task's credentials are being cleaned up"
_CLU_SHUTTING = "the runner is shutting down"
_CLU_INSTALL_WITHDRAWN = "the grant was withdrawn while it was being installed"
_CLU_NO_READER = "the task's env replica is not active"
_CLU_ENV_WITHDRAWN = "the grant was withdrawn while its env values were awaited"
_CLU_ENV_DEADLINE = "the task's env values did not arrive in time"
_AGGREGATE = "the task's credentials could not all be closed"
_CONSUMER_FAILED = "a credential consumer failed"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settled(Event):
    """``settled()``: answered once the work tracked at this moment settled (RT-138)."""

    call_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DetachConsumers(Command):
    """Unset the engine and MCP refreshers and the launch-fence escalator (RT-131)."""


def is_replica_frame(frame: object) -> bool:
    """Whether ``frame`` is a valid ``env.replica.v1`` begin, page, apply or commit frame.

    The reference's four ``isProjectEnvReplicaV1…Frame`` predicates (RT-122,
    RT-124): decided by the wire codec (``leasegate.core.wire.decode_frame``),
    so a malformed frame is not a replica frame.
    """
    return _decode_replica_frame(frame) is not None


def _decode_replica_frame(frame: object) -> EnvFrame | None:
    if isinstance(frame, _ENV_FRAMES):
        return frame
    if not isinstance(frame, dict) or frame.get("kind") not in REPLICA_FRAME_KINDS:
        return None
    got = decode_frame(frame)
    return got if isinstance(got, _ENV_FRAMES) else None


def _frame_kind(frame: object) -> object:
    if isinstance(frame, dict):
        return frame.get("kind")
    tag = getattr(type(frame), "TAG", None)
    if isinstance(tag, tuple) and len(tag) == 2:
        return tag[1]
    return None


def adapt_cleanup_request(request: CleanupRequest, runner_kind: str) -> TaskCleanupRequest:
    """The registry's cleanup request as the procedure's (the reference's adapter).

    Reference: ``adaptLeaseCredentialCleanupRequest`` (catalog "Undefined"):
    ``stopped``/``parked``/``teardown`` map to ``stop``/``park``/``teardown``,
    every other lease reason is kept; a selective request names the unique
    credential ids of ``removed`` in order; ``lease`` is the request itself
    (RT-008). ``runner_kind`` is accepted for the Files-session decision,
    which the lease's ``remove_files_session`` already carries.
    """
    reason = {"stopped": "stop", "parked": "park", "teardown": "teardown"}.get(
        request.reason, request.reason
    )
    ids: tuple[str, ...] | None = None
    if request.mode == "selective":
        ids = tuple(dict.fromkeys(i.credential_id for i in request.removed))
    return TaskCleanupRequest(
        task_id=request.assignment.task_id,
        run_epoch=request.assignment.run_epoch,
        reason=reason,
        credential_ids=ids,
        lease=request,
        remove_files_session=request.remove_files_session,
    )


def consumer_cleanup_request(request: TaskCleanupRequest) -> CleanupRequest:
    """What the consumers' cleanups receive (RT-097; reference ``consumerCleanupRequest``).

    The lease's own request when present; else a selective request expanding
    each id across :data:`CLEANUP_CLASSES` with revision ``None``; else a full
    request with reason ``teardown``/``stopped``/``parked``/``recovery``.
    """
    if request.lease is not None:
        return request.lease
    a = Assignment(request.task_id, request.run_epoch)
    if request.credential_ids is not None:
        removed = tuple(
            Identity(cls, cid, None) for cid in request.credential_ids for cls in CLEANUP_CLASSES
        )
        return CleanupRequest(
            assignment=a,
            mode="selective",
            reason="lease-replaced",
            removed=removed,
            remove_files_session=False,
        )
    reason = {"teardown": "teardown", "stop": "stopped", "park": "parked"}.get(
        request.reason, "recovery"
    )
    return CleanupRequest(
        assignment=a,
        mode="full",
        reason=reason,  # type: ignore[arg-type]
        removed=(),
        remove_files_session=False,
    )


_INVALID = "invalid task assignment"
_MAX_SAFE = 2**53 - 1
_CLOSE_REASONS = ("stop", "park", "teardown", "superseded")


def _is_int(x: object) -> bool:
    return type(x) is int


def _is_run(x: object) -> bool:
    return type(x) is int and 0 <= x <= _MAX_SAFE


def _malformed(ev: Event) -> bool:
    """Whether a runtime host event carries a field of the wrong type (never raises)."""
    if isinstance(ev, (AwaitLaunchReady, AcquireHold, EndStart, Interrupt)):
        return not _is_int(ev.start_id)
    if isinstance(ev, ReleaseHold):
        return not _is_int(ev.hold_id)
    if isinstance(ev, AbandonStart):
        return not _is_int(ev.start_id) or not (ev.hold_id is None or _is_int(ev.hold_id))
    if isinstance(ev, InterruptStarts):
        return (
            type(ev.task_id) is not str
            or not (ev.exact is None or _is_int(ev.exact))
            or not (ev.below is None or _is_int(ev.below))
        )
    if isinstance(ev, InterruptRecovery):
        return type(ev.task_id) is not str
    if isinstance(ev, CloseAssignment):
        return (
            type(ev.task_id) is not str
            or not _is_run(ev.run_epoch)
            or not isinstance(ev.reason, str)
            or ev.reason not in _CLOSE_REASONS
        )
    if isinstance(ev, ResumeRecovered):
        return (
            type(ev.task_id) is not str
            or not _is_run(ev.run_epoch)
            or type(ev.has_setup) is not bool
        )
    if isinstance(ev, (WorkDone, TimerFired)):
        return not _is_int(getattr(ev, "cmd_id", getattr(ev, "timer_id", None)))
    return False


def _failure(error: BaseException) -> CredentialFailure:
    if isinstance(error, CredentialUnavailable) and isinstance(error.message, str):
        return CredentialFailure(message=error.message)
    return CredentialFailure(message=_CONSUMER_FAILED)


def _first(failures: list[CredentialFailure]) -> CredentialFailure | None:
    if not failures:
        return None
    if len(failures) == 1:
        return failures[0]
    return CredentialFailure(message=_AGGREGATE, causes=tuple(failures))


Done = Callable[[CredentialFailure | None], None]


class _Start:
    __slots__ = ("assignment", "id", "listeners", "reason", "released_holds", "startup")

    def __init__(self, sid: int, a: Assignment) -> None:
        self.id = sid
        self.assignment = a
        self.reason: CredentialFailure | None = None
        #: None: pending; True: resolved; a failure: rejected.
        self.startup: bool | CredentialFailure | None = None
        self.listeners: list[Callable[[], None]] = []
        #: Holds of this start released before any abort: their signal still
        #: follows the start's (RT-041, as ``AbortSignal.any`` does), until
        #: the start ends.
        self.released_holds: list[_Hold] = []


class _Hold:
    __slots__ = ("git", "id", "reason", "released", "run", "start", "waiters")

    def __init__(self, hid: int, run: int, start: _Start, git: GitHold) -> None:
        self.id = hid
        self.run = run
        self.start = start
        self.git = git
        self.reason: CredentialFailure | None = None
        self.released = False
        self.waiters: list[Callable[[], None]] = []


class _Wait:
    __slots__ = ("done", "id", "phase", "reg_cid", "start", "timer")

    def __init__(self, wid: int, start: _Start, done: Callable[[object, Any], None]) -> None:
        self.id = wid
        self.start = start
        self.done = done
        self.phase: Literal["startup", "usable"] = "startup"
        self.timer = 0
        self.reg_cid: int | None = None


class _Recovery:
    __slots__ = (
        "attempts",
        "has_setup",
        "id",
        "reason",
        "retry",
        "run",
        "running",
        "waiters",
        "yielded",
    )

    def __init__(self, rid: int, run: int, has_setup: bool) -> None:
        self.id = rid
        self.run = run
        self.has_setup = has_setup
        self.reason: CredentialFailure | None = None
        self.retry: int | None = None
        self.running: int | None = None
        self.attempts = 0
        self.yielded = False
        self.waiters: list[Callable[[], None]] = []


class _Install:
    __slots__ = ("cmd_id", "expired", "gen", "request", "timer")

    def __init__(self, cmd_id: int, request: InstallRequest) -> None:
        self.cmd_id = cmd_id
        self.request = request
        self.gen = 0
        self.timer: int | None = None
        self.expired = False


class _Join:
    """Wait for named parts; then ``done`` with the first failure in part order."""

    __slots__ = ("done", "order", "results")

    def __init__(self, order: list[str], done: Done) -> None:
        self.order = order
        self.results: dict[str, CredentialFailure | None] = {}
        self.done = done

    def fill(self, key: str, error: CredentialFailure | None) -> None:
        if key in self.results:
            return
        self.results[key] = error
        self._check()

    def _check(self) -> None:
        if len(self.results) < len(self.order):
            return
        for k in self.order:
            e = self.results[k]
            if e is not None:
                self.done(e)
                return
        self.done(None)


class CredentialRuntime:
    """The runtime core. Reference: ``CloudCredentialRuntime``.

    Args:
        runner_kind: ``"owned"`` or ``"task-machine"`` (passed to the registry, RT-001).
        op_id_seed: seed of the registry's op ids.
        engines, mcp, person: the consumers' synchronous ports.
        files: the Files port, or ``None`` when not configured.
        replica: the env replica port, or ``None`` (no env wait, RT-079).
        launch_deadline_ms, env_ready_timeout_ms, shutdown_drain_ms,
        recovery_retry_base_ms: options in milliseconds; ``None`` means the
            default, ``0`` is honoured (RT-140).

    Feed every event to :meth:`handle`; carry out the commands in order.
    """

    def __init__(
        self,
        *,
        runner_kind: Literal["owned", "task-machine"],
        op_id_seed: str,
        engines: EnginesPort,
        mcp: McpPort,
        person: PersonPort,
        files: FilesPort | None = None,
        replica: ReplicaPort | None = None,
        launch_deadline_ms: int | None = None,
        env_ready_timeout_ms: int | None = None,
        shutdown_drain_ms: int | None = None,
        recovery_retry_base_ms: int | None = None,
    ) -> None:
        self.registry = LeaseRegistry(
            runner_kind=runner_kind, op_id_seed=op_id_seed, install_external=True
        )
        self._kind = runner_kind
        self._engines = engines
        self._mcp = mcp
        self._person = person
        self._files = files
        self._replica = replica
        self._launch_ms = (
            LAUNCH_READY_DEADLINE_MS if launch_deadline_ms is None else launch_deadline_ms
        )
        self._env_ms = (
            ENV_READY_TIMEOUT_MS if env_ready_timeout_ms is None else env_ready_timeout_ms
        )
        self._drain_ms = SHUTDOWN_DRAIN_MS if shutdown_drain_ms is None else shutdown_drain_ms
        self._retry_base = (
            RECOVERY_RETRY_BASE_MS if recovery_retry_base_ms is None else recovery_retry_base_ms
        )
        self._out: list[Command] = []
        self._now = 0
        self._nid = 0
        self._shut = False
        self._shutdown_calls: list[int] = []
        self._shutdown_done = False
        self._bound: int | None = None
        self._reg_ended = False
        self._round: dict[str, bool] | None = None
        self._round_work: list[int] = []
        self._settled_waiters: list[tuple[int, list[int]]] = []
        self._open: dict[str, int] = {}
        self._served: dict[str, int] = {}
        self._gens: dict[int, tuple[TaskView, int]] = {}
        self._gen_keys: dict[str, list[int]] = {}
        self._assignments: dict[str, int] = {}
        self._floors: dict[str, int] = {}
        self._starts: dict[str, dict[int, _Start]] = {}
        self._newest: dict[str, _Start] = {}
        self._all_starts: dict[int, _Start] = {}
        self._holds: dict[str, dict[int, _Hold]] = {}
        self._all_holds: dict[int, _Hold] = {}
        self._waits: dict[int, _Wait] = {}
        self._closing: dict[tuple[str, int, str], list[Done]] = {}
        self._work: dict[int, str] = {}
        self._timers: dict[int, Callable[[], None]] = {}
        self._cont: dict[int, Done] = {}
        self._reg_calls: dict[int, Callable[[Command], None]] = {}
        self._grant_tokens: dict[int, tuple[str, int]] = {}
        self._recovered: dict[str, _Recovery] = {}
        # recoveries replaced by a later ResumeRecovered whose setup still runs:
        # a whole-task cleanup drains them too (RT-096; docs/runtime.md)
        self._replaced: dict[str, list[_Recovery]] = {}
        self._env_waits: dict[int, _Install] = {}
        self._env_done: dict[int, Done] = {}
        self._frame_calls: dict[str, list[tuple[int, int]]] = {}
        self._rep_timers: dict[int, int] = {}
        self._deferred: list[Callable[[], None]] = []
        self._gate_depth = 0
        self._cleanups: dict[str, list[tuple[TaskCleanupRequest, Done]]] = {}
        self._owed: dict[str, dict[int, bool]] = {}
        self._internal_errors = 0
        # a SendFailed was handled: the first connection counts as a
        # re-authentication (TransportConnected; docs/runtime.md, decisions)
        self._send_failed = False
        self._reauthentications = 0

    # ------------------------------------------------------------------
    # Public surface

    def handle(self, event: Event) -> list[Command]:
        """Handle one event; return the commands it causes, in order. Never raises.

        Args:
            event: a runtime event (:mod:`leasegate.core.runtime`) or a
                registry completion to pass through (``TimerFired`` with a
                positive id, ``ReadCompleted``, ``ReadFailed``, ``SendFailed``,
                ``ProjectValueRead``, ``RefreshRequested``, ``LaunchFenceFailed``,
                ``BridgeAuthenticated``). A :class:`TransportConnected` is
                passed to the registry as ``BridgeAuthenticated`` when it
                counts as a re-authentication (LR-010; ``docs/runtime.md``).
        """
        now = getattr(event, "now_ms", None)
        if type(now) is int:
            self._now = now
        try:
            self._dispatch(event)
            self._settle()
        except Exception:  # noqa: BLE001 - the core never raises
            self._internal_errors += 1
            self._out.append(Log(message="[credentials] internal error"))
        out, self._out = self._out, []
        return out

    @property
    def reauthentications(self) -> int:
        """How many re-authentications reached the registry (LR-010).

        Counts each ``BridgeAuthenticated`` fed directly and each
        :class:`TransportConnected` that counted as one, while not shut down.
        """
        return self._reauthentications

    @property
    def internal_errors(self) -> int:
        """How many unexpected exceptions :meth:`handle` contained (0 unless a bug)."""
        return self._internal_errors

    def current_start(self, task_id: str) -> int | None:
        """``currentStart``: the task's newest start id while live, else ``None`` (RT-017)."""
        st = self._newest.get(task_id)
        return st.id if st is not None and self._live(st) else None

    def assert_current(self, start_id: int) -> CredentialFailure | None:
        """``assertCurrent()``: the failure it would throw, or ``None`` (RT-018, RT-019)."""
        st = self._all_starts.get(start_id)
        if st is None or not self._live(st):
            return CredentialFailure(message=_CLU_INTERRUPTED)
        if self._open.get(st.assignment.task_id) != st.assignment.run_epoch:
            return CredentialFailure(message=_CLU_NOT_OPEN)
        return None

    def start_reason(self, start_id: int) -> CredentialFailure | None:
        """The start's abort reason (its signal's); ``None`` while not aborted, or
        once the start was ended (an ended start's record is forgotten)."""
        st = self._all_starts.get(start_id)
        return None if st is None else st.reason

    def hold_reason(self, hold_id: int) -> CredentialFailure | None:
        """The hold's signal reason (first of fence and start); ``None`` while not
        aborted, or once released (a released hold's record is forgotten)."""
        h = self._all_holds.get(hold_id)
        return None if h is None else h.reason

    def env_snapshot(
        self, task_id: str, run_epoch: int, project_ids: tuple[str, ...]
    ) -> ReplicaView | None:
        """``envSnapshot``: the open run's snapshot from its served generation (RT-057..063).

        Returns:
            The committed :class:`~leasegate.core.replica.ReplicaView` of exactly
            ``project_ids`` (values are :class:`~leasegate.core.Secret`), or
            ``None`` when the run is not open, nothing was served yet, the
            runtime shut down or it has no replica. A pure query.
        """
        # RT-058: a run whose view has no reader generation has no snapshot; RT-059: otherwise the
        # replica's view at the served generation; RT-062: only the open grant's generation is
        # served.
        if self._shut or self._open.get(task_id) != run_epoch:
            return None
        gen = self._served.get(task_id)
        if gen is None or self._replica is None:
            return None
        return self._replica.read_view_at(task_id, run_epoch, tuple(project_ids), gen)

    def consumer_port(
        self, name: Literal["engines", "mcp", "person", "files"]
    ) -> ConsumerPort | None:
        """The consumer port the runtime was built with under ``name`` (``files``
        may be ``None``); a pure query, for shells that ask a port where it wrote."""
        ports: dict[str, ConsumerPort | None] = {
            "engines": self._engines,
            "mcp": self._mcp,
            "person": self._person,
            "files": self._files,
        }
        return ports.get(name)

    def startup_status(self, start_id: int) -> StartupStatus | None:
        """A pure snapshot of start ``start_id`` (:class:`StartupStatus`), or ``None``.

        ``None`` for an unknown start id or one whose record was forgotten
        (ended). Read-only: no state changes, no command. No catalog entry
        (a diagnosis aid for hosts; docs/runtime.md, "Queries").
        """
        st = self._all_starts.get(start_id)
        if st is None:
            return None
        a = st.assignment
        reg = self.registry.status(a.task_id)
        if reg is not None and reg.assignment.run_epoch != a.run_epoch:
            reg = None
        boot = getattr(self._replica, "boot_id", None)
        return StartupStatus(
            start_id=st.id,
            assignment=a,
            live=self._live(st),
            aborted=st.reason,
            startup="pending"
            if st.startup is None
            else ("done" if st.startup is True else "failed"),
            launch_waits=sum(1 for w in self._waits.values() if w.start is st),
            env_waiting=any(
                i.request.assignment == a and i.cmd_id in self._env_waits
                for i in self._env_waits.values()
            ),
            gate_open=self._open.get(a.task_id) == a.run_epoch,
            registry=reg,
            replica_boot_id=boot if type(boot) is str else None,
        )

    def open_run(self, task_id: str) -> int | None:
        """The run the task's gate is open for (``#open``), or ``None``."""
        return self._open.get(task_id)

    def tracked(self) -> tuple[str, ...]:
        """Labels of the tracked work outstanding, in registration order."""
        return tuple(self._work.values())

    def has_recovery(self, task_id: str) -> bool:
        """Whether the task has a recovery record."""
        return task_id in self._recovered

    # ------------------------------------------------------------------
    # Plumbing

    def _id(self) -> int:
        self._nid -= 1
        return self._nid

    def _emit(self, cmd: Command) -> None:
        self._out.append(cmd)

    def _track(self, label: str) -> int:
        wid = self._id()
        self._work[wid] = label
        return wid

    def _untrack(self, wid: int) -> None:
        self._work.pop(wid, None)

    def _set_timer(self, delay: int, cb: Callable[[], None]) -> int:
        # RT-002: the runtime's own timers (launch and env deadlines, recovery retry) are commands
        # with ids of their own, like the registry's.
        tid = self._id()
        self._timers[tid] = cb
        self._emit(StartTimer(timer_id=tid, delay_ms=delay))
        return tid

    def _clear_timer(self, tid: int | None) -> None:
        if tid is not None and self._timers.pop(tid, None) is not None:
            self._emit(CancelTimer(timer_id=tid))

    def _cmd(self, make: Callable[[int], Command], done: Done) -> None:
        cid = self._id()
        self._cont[cid] = done
        self._emit(make(cid))

    def _reg(self, event: Event) -> None:
        # RT-003: a consumer's refresh (RefreshRequested) and RT-004: a launch fence escalation
        # (LaunchFenceFailed) pass to the registry unchanged.
        for cmd in self.registry.handle(event):
            self._route(cmd)

    def _reg_call(self, make: Callable[[int], Event], cb: Callable[[Command], None]) -> int:
        cid = self._id()
        self._reg_calls[cid] = cb
        self._reg(make(cid))
        return cid

    def _route(self, cmd: Command) -> None:
        now = self._now
        if isinstance(cmd, (CallDone, WaiterResolved, ProjectValueDone)) and cmd.call_id < 0:
            cb = self._reg_calls.pop(cmd.call_id, None)
            if cb is not None:
                cb(cmd)
        elif isinstance(cmd, CloseGate):
            err = _first(self._close(cmd.assignment.task_id, cmd.assignment.run_epoch))
            ev = GateCallbackDone if err is None else GateCallbackFailed
            self._reg(ev(now_ms=now, cmd_id=cmd.cmd_id))
        elif isinstance(cmd, OpenGate):
            self._gate_depth += 1
            try:
                err = self._open_gate(cmd.assignment, cmd.view)
                ev = GateCallbackDone if err is None else GateCallbackFailed
                self._reg(ev(now_ms=now, cmd_id=cmd.cmd_id))
            finally:
                self._gate_depth -= 1
            if self._gate_depth == 0:
                deferred, self._deferred = self._deferred, []
                for fn in deferred:
                    fn()
        elif isinstance(cmd, RunInstall):
            self._install(cmd.cmd_id, cmd.request)
        elif isinstance(cmd, RunCleanup):
            cid = cmd.cmd_id

            def cleaned(err: CredentialFailure | None) -> None:
                ev = CleanupFinished if err is None else CleanupFailed
                self._reg(ev(now_ms=self._now, cmd_id=cid))

            self._cleanup(adapt_cleanup_request(cmd.request, self._kind), cleaned)
        # RT-006: a grant accepted with a replica and no shutdown expects its activation (the undo
        # below is GrantSettled); RT-007: without a replica, or after shutdown, the replica is not
        # touched; RT-009: a new grant of a run with an open grant expects a new activation.
        elif isinstance(cmd, GrantAccepted):
            if self._replica is not None and not self._shut:
                a = cmd.assignment
                answers = self._rep(
                    ExpectActivation(now_ms=now, task_id=a.task_id, run_epoch=a.run_epoch)
                )
                for c in answers:
                    if isinstance(c, ActivationToken):
                        self._grant_tokens[cmd.cmd_id] = (a.task_id, c.token)
        elif isinstance(cmd, GrantSettled):
            token = self._grant_tokens.pop(cmd.cmd_id, None)
            if token is not None and self._replica is not None:
                self._rep(SettleActivation(now_ms=now, task_id=token[0], token=token[1]))
        else:
            self._emit(cmd)

    def _settle(self) -> None:
        """Re-evaluate what waits on state: env waits, settled(), the shutdown drain."""
        for inst in list(self._env_waits.values()):
            self._env_eval(inst)
        for call_id, snap in list(self._settled_waiters):
            if not any(w in self._work for w in snap):
                self._settled_waiters.remove((call_id, snap))
                self._emit(Answer(call_id=call_id))
        self._drain_check()

    # ------------------------------------------------------------------
    # Dispatch

    def _dispatch(self, ev: Event) -> None:
        if _malformed(ev):
            # A host call whose fields are not of their declared types: the
            # shell's bug. Answer it (if it expects an answer), change nothing.
            call_id = getattr(ev, "call_id", None)
            if call_id is not None:
                self._emit(Failed(call_id=call_id, error=CredentialFailure(message=_INVALID)))
            return
        if isinstance(ev, WorkDone):
            cont = self._cont.pop(ev.cmd_id, None)
            if cont is not None:
                err = ev.error
                if err is not None and not isinstance(err, CredentialFailure):
                    err = CredentialFailure(message=_CONSUMER_FAILED)
                cont(err)
        elif isinstance(ev, TimerFired):
            if ev.timer_id < 0:
                cb = self._timers.pop(ev.timer_id, None)
                if cb is not None:
                    cb()
            else:
                self._reg(ev)
        elif isinstance(ev, BeginStart):
            r = self._begin_start(ev.task_id, ev.run_epoch, ev.recovery)
            if isinstance(r, CredentialFailure):
                self._emit(Failed(call_id=ev.call_id, error=r))
            else:
                self._emit(Answer(call_id=ev.call_id, value=r.id))
        elif isinstance(ev, AwaitLaunchReady):
            self._await_launch(ev.call_id, ev.start_id)
        elif isinstance(ev, AcquireHold):
            self._acquire_hold(ev.call_id, ev.start_id)
        elif isinstance(ev, ReleaseHold):
            self._release_hold(ev.hold_id)
        elif isinstance(ev, EndStart):
            st = self._all_starts.get(ev.start_id)
            if st is not None:
                self._end_start(st)
        elif isinstance(ev, AbandonStart):
            self._abandon(ev.call_id, ev.start_id, ev.hold_id)
        elif isinstance(ev, Interrupt):
            st = self._all_starts.get(ev.start_id)
            if st is not None and st.id in self._starts.get(st.assignment.task_id, {}):
                self._abort_start(st, CredentialFailure.interrupted("takeover"))
        elif isinstance(ev, InterruptStarts):
            self._interrupt_tokens(ev.task_id, ev.exact, ev.below)
            rec = self._recovered.get(ev.task_id)
            if (
                rec is not None
                and (ev.exact is None or rec.run == ev.exact)
                and (ev.below is None or rec.run < ev.below)
            ):
                self._end_recovery(ev.task_id, rec.run)
        elif isinstance(ev, InterruptRecovery):
            rec = self._recovered.get(ev.task_id)
            if rec is not None:
                self._end_recovery(ev.task_id, rec.run)
        elif isinstance(ev, CloseAssignment):
            call_id = ev.call_id

            def closed(err: CredentialFailure | None) -> None:
                if err is None:
                    self._emit(Answer(call_id=call_id))
                else:
                    self._emit(Failed(call_id=call_id, error=err))

            self._close_assignment(ev.task_id, ev.run_epoch, ev.reason, closed)
        elif isinstance(ev, HandleFrame):
            self._handle_frame(ev.call_id, ev.frame)
        elif isinstance(ev, Recover):
            self._recover(ev)
        elif isinstance(ev, ResumeRecovered):
            self._resume(ev.task_id, ev.run_epoch, ev.has_setup)
        elif isinstance(ev, RuntimeShutdown):
            self._shutdown(ev.call_id)
        elif isinstance(ev, Settled):
            self._settled_waiters.append((ev.call_id, list(self._work)))
        # RT-127: bridgeAuthenticated reaches the registry once; after shutdown it does nothing.
        elif isinstance(ev, BridgeAuthenticated):
            if not self._shut:
                self._reauthentications += 1
                self._reg(ev)
        elif isinstance(ev, TransportConnected):
            n = ev.connection
            if type(n) is int and n > 0 and (n > 1 or self._send_failed) and not self._shut:
                self._reauthentications += 1
                self._reg(BridgeAuthenticated(now_ms=ev.now_ms))
        elif isinstance(ev, SendFailed):
            self._send_failed = True
            self._reg(ev)
        else:
            self._reg(ev)

    # ------------------------------------------------------------------
    # Starts

    def _live(self, st: _Start) -> bool:
        # RT-020: only the token instance beginStart returned is live; a look-alike is refused.
        if self._shut:
            return False
        task = st.assignment.task_id
        if self._newest.get(task) is not st or st.reason is not None:
            return False
        return st.id in self._starts.get(task, {})

    def _begin_start(self, task: str, run: int, recovery: bool) -> _Start | CredentialFailure:
        # RT-011: a run below the task's begun run is refused; RT-012: the same run or a newer one
        # is admitted and becomes the floor; RT-014: the registry's startAssignment is called
        # exactly once; RT-015: the token holds an immutable copy of the assignment.
        # RT-016: a recovery of run R below N ends, of run N yields or is kept by the start kind.
        if self._shut:
            return CredentialFailure.interrupted("shutdown")
        if type(task) is not str or type(run) is not int:
            return CredentialFailure(message="invalid task assignment")
        if self._floors.get(task, run) > run:
            return CredentialFailure(message=_CLU_NEWER)
        self._floors[task] = run
        self._interrupt_tokens(task, None, None)
        self._end_recovery(task, run - 1)
        if not recovery:
            self._yield_recovery(task, run)
        st = _Start(self._id(), Assignment(task, run))
        self._starts.setdefault(task, {})[st.id] = st
        self._all_starts[st.id] = st
        self._newest[task] = st
        self._assignments[task] = run
        wid = self._track("startup")

        def started(cmd: Command) -> None:
            self._untrack(wid)
            err = cmd.error if isinstance(cmd, CallDone) else None
            st.startup = True if err is None else CredentialFailure(message=err)
            for fn in list(st.listeners):
                fn()

        self._reg_call(
            lambda cid: StartRun(
                now_ms=self._now, call_id=cid, task_id=task, run_epoch=run, recovery=recovery
            ),
            started,
        )
        return st

    def _interrupt_tokens(self, task: str, exact: int | None, below: int | None) -> None:
        # RT-013: an admitted start aborts every unended token of the task, same run included;
        # RT-024 (exact) and RT-025 (below) select the tokens interruptStarts aborts.
        for st in list(self._starts.get(task, {}).values()):
            run = st.assignment.run_epoch
            if exact is not None and run != exact:
                continue
            if below is not None and run >= below:
                continue
            self._abort_start(st, CredentialFailure.interrupted("takeover"))

    def _abort_start(self, st: _Start, reason: CredentialFailure) -> None:
        if st.reason is not None:
            return
        st.reason = reason
        self._emit(Abort(kind="start", id=st.id, reason=reason))
        for w in list(self._waits.values()):
            if w.start is st:
                self._wait_end(w, None, reason)
        for h in list(self._holds.get(st.assignment.task_id, {}).values()):
            if h.start is st:
                self._abort_hold(h, reason)
        # RT-041: a released hold's signal still follows its start's.
        released, st.released_holds = st.released_holds, []
        for h in released:
            self._abort_hold(h, reason)

    def _end_start(self, st: _Start) -> None:
        st.released_holds.clear()
        task = st.assignment.task_id
        if self._newest.get(task) is st:
            del self._newest[task]
        self._all_starts.pop(st.id, None)
        entries = self._starts.get(task)
        if entries is not None:
            entries.pop(st.id, None)
            if not entries:
                del self._starts[task]

    # ------------------------------------------------------------------
    # Launch-ready wait

    def _await_launch(self, call_id: int, start_id: int) -> None:
        def done(view: object, err: Any) -> None:
            if err is None:
                self._emit(Answer(call_id=call_id, value=view))
            else:
                self._emit(Failed(call_id=call_id, error=err))

        st = self._all_starts.get(start_id)
        if st is None or not self._live(st):
            done(None, CredentialFailure(message=_CLU_INTERRUPTED))
            return
        self._wait(st, done)

    def _wait(self, st: _Start, done: Callable[[object, Any], None]) -> None:
        # RT-029: the deadline rejects a wait in either phase; RT-030: the wait does not wait for
        # an unsettled startup; RT-031: a startup error rejects the wait unwrapped; RT-032: after
        # the startup, registry.waitUntilUsable with the wait's own abort.
        w = _Wait(self._id(), st, done)
        self._waits[w.id] = w
        w.timer = self._set_timer(
            self._launch_ms,
            lambda: self._wait_end(w, None, CredentialFailure(message=_CLU_DEADLINE)),
        )

        def on_startup() -> None:
            if w.id not in self._waits or w.phase != "startup":
                return
            if st.startup is True:
                self._wait_usable(w)
            elif isinstance(st.startup, CredentialFailure):
                self._wait_end(w, None, st.startup)

        st.listeners.append(on_startup)
        if st.startup is not None:
            on_startup()

    def _wait_usable(self, w: _Wait) -> None:
        w.phase = "usable"
        a = w.start.assignment

        def answered(cmd: Command) -> None:
            w.reg_cid = None
            if w.id not in self._waits:
                return
            if isinstance(cmd, WaiterResolved):
                if self._live(w.start):
                    self._wait_end(w, cmd.view, None)
                else:
                    self._wait_end(w, None, CredentialFailure(message=_CLU_INTERRUPTED))
            elif isinstance(cmd, CallDone):
                self._wait_end(w, None, CredentialFailure(message=cmd.error or _CLU_INTERRUPTED))

        cid = self._id()
        w.reg_cid = cid
        self._reg_calls[cid] = answered
        self._reg(
            WaitUsable(now_ms=self._now, call_id=cid, task_id=a.task_id, run_epoch=a.run_epoch)
        )

    def _wait_end(self, w: _Wait, view: object, err: CredentialFailure | None) -> None:
        # RT-033: an interrupted token rejects its wait with the token's reason; RT-035: a settled
        # wait clears its deadline and leaves the tracked set.
        if self._waits.pop(w.id, None) is None:
            return
        self._clear_timer(w.timer)
        listeners = w.start.listeners
        w.done(view, err)
        if w.reg_cid is not None:
            cid, w.reg_cid = w.reg_cid, None
            self._reg_calls.pop(cid, None)
            self._reg(WaitCancelled(now_ms=self._now, call_id=cid))
        del listeners  # the startup listener checks membership

    # ------------------------------------------------------------------
    # Holds

    def _acquire_hold(self, call_id: int, start_id: int) -> None:
        # RT-038: a run that is not the task's open run gets no hold; RT-039: nor one without a
        # current view; RT-042: two acquisitions are two independent holds.
        st = self._all_starts.get(start_id)
        if st is None or not self._live(st):
            self._emit(Answer(call_id=call_id, value=None))
            return
        a = st.assignment
        if self._open.get(a.task_id) != a.run_epoch:
            self._emit(Answer(call_id=call_id, value=None))
            return
        view = self.registry.current_view(a.task_id, a.run_epoch, self._now)
        if view is None:
            self._emit(Answer(call_id=call_id, value=None))
            return
        try:
            git = self._person.hold_git(a)
        except Exception as e:  # noqa: BLE001 - a port's failure is reported
            self._emit(Failed(call_id=call_id, error=_failure(e)))
            return
        h = _Hold(self._id(), a.run_epoch, st, git)
        self._holds.setdefault(a.task_id, {})[h.id] = h
        self._all_holds[h.id] = h
        self._work[h.id] = "hold"
        self._emit(
            Answer(call_id=call_id, value=HoldInfo(hold_id=h.id, assignment=a, view=view, git=git))
        )

    def _abort_hold(self, h: _Hold, reason: CredentialFailure) -> None:
        if h.reason is not None:
            return
        h.reason = reason
        self._emit(Abort(kind="hold", id=h.id, reason=reason))

    def _release_hold(self, hold_id: int) -> None:
        # RT-044: settled() and the shutdown drain wait for a hold's release.
        h = self._all_holds.get(hold_id)
        if h is None or h.released:
            return
        h.released = True
        del self._all_holds[h.id]
        if h.reason is None and self._all_starts.get(h.start.id) is h.start:
            h.start.released_holds.append(h)
        try:
            h.git.release()
        except Exception:  # noqa: BLE001 - a port's failure is its own
            self._emit(Log(message=self._prefix(h.start.assignment) + "git hold release failed"))
        holds = self._holds.get(h.start.assignment.task_id)
        if holds is not None:
            holds.pop(h.id, None)
            if not holds:
                del self._holds[h.start.assignment.task_id]
        self._untrack(h.id)
        for fn in h.waiters:
            fn()

    @staticmethod
    def _prefix(a: Assignment) -> str:
        return f"[credentials] task {a.task_id} run {a.run_epoch}: "

    # ------------------------------------------------------------------
    # Abandon and close

    def _abandon(self, call_id: int, start_id: int, hold_id: int | None) -> None:
        # RT-049: a superseded or ended token's abandon releases the hold and closes nothing.
        if hold_id is not None:
            self._release_hold(hold_id)
        st = self._all_starts.get(start_id)
        if st is None:
            self._emit(Answer(call_id=call_id))
            return
        task = st.assignment.task_id
        closes = self._newest.get(task) is st and st.id in self._starts.get(task, {})
        self._end_start(st)
        if not closes:
            self._emit(Answer(call_id=call_id))
            return

        def closed(err: CredentialFailure | None) -> None:
            if err is None:
                self._emit(Answer(call_id=call_id))
            else:
                self._emit(Failed(call_id=call_id, error=err))

        self._close_assignment(task, st.assignment.run_epoch, "stop", closed)

    def _close_assignment(self, task: str, run: int, reason: str, done: Done) -> None:
        # RT-051: a close of the same (task, run, reason) joins the one under way; RT-052: another
        # reason makes a separate close; RT-053: a settled close is made again; RT-054: a close of
        # run N ends a recovery of run R <= N; RT-055: after shutdown it only joins; RT-056:
        # closing the begun run drops its record; RT-137: after shutdown no cleanup starts.
        self._end_recovery(task, run)
        key = (task, run, reason)
        under = self._closing.get(key)
        if under is not None:
            under.append(done)
            return
        if self._shut:
            done(None)
            return
        if self._assignments.get(task) == run:
            del self._assignments[task]
        waiters: list[Done] = [done]
        self._closing[key] = waiters
        wid = self._track("close")

        def closed(cmd: Command) -> None:
            self._untrack(wid)
            if self._closing.get(key) is waiters:
                del self._closing[key]
            err = cmd.error if isinstance(cmd, CallDone) else None
            failure = None if err is None else CredentialFailure(message=err)
            for fn in waiters:
                fn(failure)

        self._reg_call(
            lambda cid: CloseRun(
                now_ms=self._now,
                call_id=cid,
                task_id=task,
                run_epoch=run,
                reason=reason,  # type: ignore[arg-type]
            ),
            closed,
        )

    # ------------------------------------------------------------------
    # Gates

    def _close(self, task: str, run: int) -> list[CredentialFailure]:
        # RT-089: a close with nothing open still calls every consumer fence; RT-090: the
        # registry's gate close, refuseNewWork and closeGate run this same close; RT-091: a newer
        # start closes the older run's gate, holds and env.
        failures: list[CredentialFailure] = []
        a = Assignment(task, run)
        opened = self._open.get(task)
        if opened is not None and opened <= run:
            del self._open[task]
            self._served.pop(task, None)
            self._emit(Notify(what="env-served", task_id=task))
        for h in list(self._holds.get(task, {}).values()):
            if h.run <= run:
                self._abort_hold(h, CredentialFailure(message=_CLU_WITHDRAWN))
        try:
            self._engines.close(a)
        except Exception as e:  # noqa: BLE001
            failures.append(_failure(e))
        try:
            rec = self._mcp.leased_run(task)
            if rec is not None and rec.run_epoch <= run:
                self._mcp.close(rec)
        except Exception as e:  # noqa: BLE001
            failures.append(_failure(e))
        try:
            self._person.close(a)
        except Exception as e:  # noqa: BLE001
            failures.append(_failure(e))
        try:
            if self._files is not None:
                self._files.close(a)
        except Exception as e:  # noqa: BLE001
            failures.append(_failure(e))
        return failures

    def _open_gate(self, a: Assignment, view: TaskView) -> CredentialFailure | None:
        # RT-060: opening on a view sets the task's served generation; RT-061: a credential change
        # keeps the generation; RT-083: an envServedChanged failure is swallowed; RT-084: an
        # mcpServedChanged failure propagates after the open was recorded.
        if self._shut:
            return CredentialFailure(message=_CLU_SHUTTING)
        ports: list[ConsumerPort] = [self._engines, self._mcp, self._person]
        if self._files is not None:
            ports.append(self._files)
        for port in ports:
            try:
                port.open(a, view)
            except Exception as e:  # noqa: BLE001
                return _failure(e)
        self._open[a.task_id] = a.run_epoch
        got = self._gens.get(id(view))
        if got is not None and got[0] is view:
            self._served[a.task_id] = got[1]
        else:
            self._served.pop(a.task_id, None)
        self._emit(Notify(what="mcp-served", task_id=a.task_id))
        self._emit(Notify(what="env-served", task_id=a.task_id))
        self._deferred.append(lambda: self._run_recovered_setup(a))
        return None

    # ------------------------------------------------------------------
    # Install sequence

    def _install_fence(self, inst: _Install) -> CredentialFailure | None:
        # RT-066: an install whose isCurrent() is false rejects "the grant was withdrawn" at every
        # fence; RT-075: the fence is checked again after the snapshot arrived.
        if self._shut:
            return CredentialFailure(message=_CLU_SHUTTING)
        if not self.registry.install_is_current(inst.cmd_id, self._now):
            return CredentialFailure(message=_CLU_INSTALL_WITHDRAWN)
        return None

    def _install(self, cmd_id: int, request: InstallRequest) -> None:
        # RT-068: no reader generation after activation rejects the install; RT-069: the generation
        # is recorded for the next view before waiting; RT-077: a failing step stops the install
        # with its error; RT-078: a credential-change install has no activation and no env wait.
        inst = _Install(cmd_id, request)
        wid = self._track("install")

        def finish(err: CredentialFailure | None) -> None:
            self._untrack(wid)
            if err is not None:
                self._emit(
                    Log(message=self._prefix(request.assignment) + "install failed: " + err.message)
                )
                self._reg(InstallFailed(now_ms=self._now, cmd_id=cmd_id))
            else:
                self._reg(InstallFinished(now_ms=self._now, cmd_id=cmd_id))

        inst_finish: Done = finish
        err = self._install_fence(inst)
        if err is not None:
            finish(err)
            return
        a = request.assignment
        replica = self._replica
        if replica is not None and request.reason == "grant":
            outcome = [
                c
                for c in self._rep(
                    ActivateAssignment(
                        now_ms=self._now,
                        task_id=a.task_id,
                        run_epoch=a.run_epoch,
                        org_id=request.owner_org_id,
                        reader=ReaderRef(cmd_id),
                    )
                )
                if isinstance(c, ActivationOutcome)
            ]
            if not outcome or outcome[0].error is not None:
                msg = outcome[0].error if outcome and outcome[0].error else _CLU_NO_READER
                finish(CredentialFailure(message=msg))
                return
            gen = replica.reader_generation(a.task_id, a.run_epoch)
            if gen is None:
                finish(CredentialFailure(message=_CLU_NO_READER))
                return
            self._bind_gen(request.next, gen)
            inst.gen = gen

            def expired() -> None:
                inst.timer = None
                inst.expired = True
                self._env_eval(inst)

            inst.timer = self._set_timer(self._env_ms, expired)
            self._env_waits[cmd_id] = inst
            self._env_done[cmd_id] = inst_finish
            self._env_eval(inst)
            return
        if request.reason == "credential-change" and request.previous is not None:
            got = self._gens.get(id(request.previous))
            if got is not None and got[0] is request.previous:
                self._bind_gen(request.next, got[1])
        self._install_consumers(inst, finish)

    def _bind_gen(self, view: TaskView, gen: int) -> None:
        """Bind a reader generation to ``view`` (the instance); keep a few per task."""
        task = view.assignment.task_id
        keys = self._gen_keys.setdefault(task, [])
        self._gens[id(view)] = (view, gen)
        keys.append(id(view))
        while len(keys) > _GENS_KEPT:
            old = keys.pop(0)
            if old not in keys:
                self._gens.pop(old, None)

    def _env_eval(self, inst: _Install) -> None:
        # RT-070: a grant install with a replica waits for the env snapshot; RT-071: an available
        # snapshot goes on at once; RT-072: a withdrawn grant or a shutdown rejects the wait.
        if inst.cmd_id not in self._env_waits or self._replica is None:
            return
        a = inst.request.assignment
        err: CredentialFailure | None = None
        if (
            self._replica.read_view_at(
                a.task_id, a.run_epoch, inst.request.next.project_ids, inst.gen
            )
            is not None
        ):
            pass
        elif self._shut or not self.registry.install_is_current(inst.cmd_id, self._now):
            err = CredentialFailure(message=_CLU_ENV_WITHDRAWN)
        elif inst.expired:
            err = CredentialFailure(message=_CLU_ENV_DEADLINE)
        else:
            return
        del self._env_waits[inst.cmd_id]
        finish = self._env_done.pop(inst.cmd_id)
        self._clear_timer(inst.timer)
        if err is not None:
            finish(err)
            return
        err = self._install_fence(inst)
        if err is not None:
            finish(err)
            return
        self._install_consumers(inst, finish)

    def _install_consumers(self, inst: _Install, finish: Done) -> None:
        # RT-076: consumers install in order: engines, fence, MCP, persons, Files.
        request = inst.request

        def after_files(err: CredentialFailure | None) -> None:
            finish(err or self._install_fence(inst))

        def after_engines(err: CredentialFailure | None) -> None:
            err = err or self._install_fence(inst)
            if err is not None:
                finish(err)
                return
            try:
                self._mcp.install(request)
                self._person.install(request)
            except Exception as e:  # noqa: BLE001
                finish(_failure(e))
                return
            if self._files is None:
                after_files(None)
                return
            self._cmd(
                lambda cid: ConsumerWork(
                    cmd_id=cid, consumer="files", op="install", request=request
                ),
                after_files,
            )

        self._cmd(
            lambda cid: ConsumerWork(cmd_id=cid, consumer="engines", op="install", request=request),
            after_engines,
        )

    # ------------------------------------------------------------------
    # Frames

    def _handle_frame(self, call_id: int, frame: object) -> None:
        # RT-118: a frame is answered without waiting for an install that waits for env frames;
        # RT-119: unavailable and stale reach the registry at once; RT-120: a deny runs in
        # background; RT-121: changed and refresh results reach the registry; RT-126: lease frames
        # reach the registry unmodified.
        kind = _frame_kind(frame)
        replica = self._replica
        env = _decode_replica_frame(frame)
        if self._shut:
            handled = kind != "lease.deny" and (kind in V1_FRAME_KINDS or env is not None)
            self._emit(Answer(call_id=call_id, value=handled))
            return
        if kind in V1_FRAME_KINDS or kind == "lease.deny":
            self._reg(FrameReceived(now_ms=self._now, frame=frame))
            self._emit(Answer(call_id=call_id, value=kind != "lease.deny"))
            return
        if replica is not None and env is not None:
            wid = self._track("replica-frame")
            self._frame_calls.setdefault(env.task_id, []).append((call_id, wid))
            self._rep(EnvFrameReceived(now_ms=self._now, frame=env))
            return
        self._emit(Answer(call_id=call_id, value=False))

    def _frame_answered(self, task_id: object, handled: bool) -> None:
        calls = self._frame_calls.get(task_id) if isinstance(task_id, str) else None
        if not calls:
            return
        call_id, wid = calls.pop(0)
        if not calls:
            del self._frame_calls[task_id]  # type: ignore[arg-type]
        self._untrack(wid)
        self._emit(Answer(call_id=call_id, value=handled))

    # ------------------------------------------------------------------
    # The replica link

    def _rep(self, event: Event) -> list[Command]:
        """Feed the replica one event; route its commands; return them."""
        if self._replica is None:
            return []
        cmds = self._replica.handle(event)
        for cmd in cmds:
            if isinstance(cmd, ReplicaSendAck):
                ack = cmd.ack
                if not self._shut:
                    self._emit(SendAck(frame=ack))
                self._frame_answered(getattr(ack, "task_id", None), True)
            elif isinstance(cmd, FrameRejected):
                frame = getattr(event, "frame", None)
                self._frame_answered(getattr(frame, "task_id", None), False)
            elif isinstance(cmd, (ReadStagedValue, ReadLegacyValue)):
                self._rep_read(cmd)
            elif isinstance(cmd, ReplicaStartTimer):
                rid = cmd.timer_id
                tid = self._set_timer(
                    cmd.delay_ms,
                    lambda rid=rid: self._rep_timer_fired(rid),  # type: ignore[misc]
                )
                self._rep_timers[rid] = tid
            elif isinstance(cmd, ReplicaCancelTimer):
                self._clear_timer(self._rep_timers.pop(cmd.timer_id, None))
        return cmds

    def _rep_timer_fired(self, rid: int) -> None:
        self._rep_timers.pop(rid, None)
        self._rep(ReadinessDeadline(now_ms=self._now, timer_id=rid))

    def _rep_read(self, cmd: ReadStagedValue | ReadLegacyValue) -> None:
        """A replica value read goes through the grant's reader: the registry (LR-154)."""
        cid = cmd.cmd_id
        reader = cmd.reader
        if not isinstance(reader, ReaderRef):
            self._rep(ValueReadFailed(now_ms=self._now, cmd_id=cid))
            return
        legacy = isinstance(cmd, ReadLegacyValue)
        ref: StagedRef | LegacyRef = (
            LegacyRef(ssm_version=cmd.version)
            if isinstance(cmd, ReadLegacyValue)
            else StagedRef(staging_id=cmd.staging_id)
        )

        def answered(done: Command) -> None:
            if isinstance(done, ProjectValueDone):
                r = done.result
                self._rep(
                    ValueReadCompleted(
                        now_ms=self._now,
                        cmd_id=cid,
                        raw=None if r is None else r.raw_value,
                        version=r.version if (legacy and r is not None) else None,
                    )
                )
            else:
                self._rep(ValueReadFailed(now_ms=self._now, cmd_id=cid))

        self._reg_call(
            lambda call_id: ProjectValueRead(
                now_ms=self._now,
                call_id=call_id,
                task_id=cmd.task_id,
                run_epoch=cmd.run_epoch,
                project_id=cmd.project_id,
                key=cmd.key,
                ref=ref,
                install_cmd_id=reader.install_cmd_id,
            ),
            answered,
        )

    # ------------------------------------------------------------------
    # Cleanup procedure

    def _cleanup(self, req: TaskCleanupRequest, done: Done) -> None:
        queue = self._cleanups.setdefault(req.task_id, [])
        queue.append((req, done))
        if len(queue) == 1:
            self._cleanup_run(req)

    def _cleanup_next(self, task: str) -> None:
        queue = self._cleanups.get(task)
        if not queue:
            return
        queue.pop(0)
        if queue:
            self._cleanup_run(queue[0][0])
        else:
            del self._cleanups[task]

    def _cleanup_run(self, req: TaskCleanupRequest) -> None:
        # RT-098: closeConsumers waits for Files with the request unchanged.
        task, run = req.task_id, req.run_epoch
        wid = self._track("cleanup")
        whole = req.credential_ids is None
        owed = self._owed.setdefault(task, {})
        owed.setdefault(run, False)

        def finish(err: CredentialFailure | None) -> None:
            self._untrack(wid)
            queue = self._cleanups.get(task) or [(req, lambda e: None)]
            done = queue[0][1]
            self._cleanup_next(task)
            done(err)

        def fail(err: CredentialFailure) -> None:
            self._owed.setdefault(task, {})[run] = True
            finish(err)

        def settled(err: CredentialFailure | None) -> None:
            if err is not None:
                fail(err)
                return
            finish(None)

        def dropped() -> None:
            if whole:
                self._replica_drop(task, run)
                if req.reason == "teardown":
                    self._forget(task, run)
            rows = self._owed.get(task, {})
            runs = [r for r, bad in rows.items() if (r <= run if whole else (r == run and not bad))]
            for r in runs:
                del rows[r]
            if not rows:
                self._owed.pop(task, None)
            if not runs:
                finish(None)
                return
            self._cmd(
                lambda cid: JournalSettle(cmd_id=cid, task_id=task, runs=tuple(runs)), settled
            )

        def step(op: str, consumer: str, then: Callable[[], None]) -> Done:
            def after(err: CredentialFailure | None) -> None:
                if err is not None:
                    fail(err)
                else:
                    then()

            return after

        def removed() -> None:
            dropped()

        def quiesced() -> None:
            self._cmd(
                lambda cid: ConsumerWork(
                    cmd_id=cid, consumer="host", op="remove-paths", request=req
                ),
                step("remove-paths", "host", removed),
            )

        def consumers_closed() -> None:
            self._cmd(
                lambda cid: ConsumerWork(cmd_id=cid, consumer="host", op="quiesce", request=req),
                step("quiesce", "host", quiesced),
            )

        def drained() -> None:
            if self._files is None:
                consumers_closed()
                return
            self._cmd(
                lambda cid: ConsumerWork(
                    cmd_id=cid, consumer="files", op="close-consumers", request=req
                ),
                step("close-consumers", "files", consumers_closed),
            )

        def recorded(err: CredentialFailure | None) -> None:
            if err is not None:
                fail(err)
                return
            for _ in range(2):  # refuseNewWork, then closeGate: both the close fan-out
                gate = _first(self._close(task, run))
                if gate is not None:
                    fail(gate)
                    return
            self._drain_writers(req, step("drain", "writers", drained))

        self._cmd(
            lambda cid: JournalRecord(cmd_id=cid, task_id=task, run_epoch=run, reason=req.reason),
            recorded,
        )

    def _drain_writers(self, req: TaskCleanupRequest, done: Done) -> None:
        # RT-092: holds on runs up to N are aborted, newer ones kept; RT-093: the drain waits for
        # their release; RT-094: each consumer cleanup is called once; RT-095: all drain work
        # settles before the first failure is reported.
        task, run = req.task_id, req.run_epoch
        holds = [h for h in self._holds.get(task, {}).values() if h.run <= run]
        for h in holds:
            self._abort_hold(h, CredentialFailure(message=_CLU_CLEANING))
        parts = _Join(["setup", "holds", "engines", "person", "mcp"], done)
        # RT-096: a running recovered setup of a run <= the cleanup's run stops
        # and is joined by a whole-task cleanup. Beyond the reference, the
        # setups of recoveries replaced by a later ResumeRecovered (RT-103)
        # are joined too: the reference only looks at the current record, so
        # a replaced setup could still write while the cleanup removed paths
        # and a new grant opened the gates (monitor walk seed 12006).
        recs = [*self._replaced.get(task, ())]
        current = self._recovered.get(task)
        if current is not None:
            recs.append(current)
        setups = [
            r for r in recs if req.credential_ids is None and r.run <= run and r.running is not None
        ]
        if not setups:
            parts.fill("setup", None)
        else:
            left_setups = {r.id for r in setups}

            def one_settled(rid: int) -> None:
                left_setups.discard(rid)
                if not left_setups:
                    parts.fill("setup", None)

            for r in setups:
                self._abort_recovery(r)
                r.waiters.append(functools.partial(one_settled, r.id))
        pending = [h for h in holds if not h.released]
        if not pending:
            parts.fill("holds", None)
        else:
            left = {h.id for h in pending}

            def one_released(hid: int) -> None:
                left.discard(hid)
                if not left:
                    parts.fill("holds", None)

            for h in pending:
                h.waiters.append(functools.partial(one_released, h.id))
        consumer = consumer_cleanup_request(req)
        for name in ("engines", "person", "mcp"):
            self._cmd(
                lambda cid, n=name: ConsumerWork(
                    cmd_id=cid, consumer=n, op="cleanup", request=consumer
                ),  # type: ignore[misc]
                lambda err, n=name: parts.fill(n, err),  # type: ignore[misc]
            )

    def _replica_drop(self, task: str, run: int) -> None:
        keys = self._gen_keys.get(task, [])
        for key in list(keys):
            got = self._gens.get(key)
            if got is None or got[0].assignment.run_epoch <= run:
                self._gens.pop(key, None)
                keys.remove(key)
        self._rep(DropAssignment(now_ms=self._now, task_id=task, run_epoch=run))

    def _forget(self, task: str, run: int) -> None:
        try:
            self._engines.forget(Assignment(task, run))
        except Exception:  # noqa: BLE001
            self._emit(Log(message=self._prefix(Assignment(task, run)) + "forget failed"))
        try:
            rec = self._mcp.leased_run(task)
            if rec is not None and rec.run_epoch <= run:
                self._mcp.forget(rec)
        except Exception:  # noqa: BLE001
            self._emit(Log(message=self._prefix(Assignment(task, run)) + "forget failed"))

    def _recover(self, ev: Recover) -> None:
        if self._shut:
            self._emit(Failed(call_id=ev.call_id, error=CredentialFailure.interrupted("shutdown")))
            return
        admitted: dict[str, int] = {}
        pairs = ev.admitted if isinstance(ev.admitted, (tuple, list)) else ()
        for pair in pairs:
            if (
                isinstance(pair, tuple)
                and len(pair) == 2
                and type(pair[0]) is str
                and _is_run(pair[1])
            ):
                admitted[pair[0]] = pair[1]
        tasks: dict[str, int] = {}
        rows = ev.owed if isinstance(ev.owed, (tuple, list)) else ()
        for row in rows:
            if (
                not isinstance(row, OwedCleanup)
                or type(row.task_id) is not str
                or not _is_run(row.run_epoch)
                or type(row.reason) is not str
            ):
                continue
            self._owed.setdefault(row.task_id, {})[row.run_epoch] = True
            tasks[row.task_id] = max(tasks.get(row.task_id, row.run_epoch), row.run_epoch)
        wid = self._track("recover")
        order = list(tasks)
        call_id = ev.call_id

        def done(err: CredentialFailure | None) -> None:
            self._untrack(wid)
            if err is None:
                self._emit(Answer(call_id=call_id))
            else:
                self._emit(Failed(call_id=call_id, error=err))

        if not order:
            done(None)
            return
        parts = _Join(order, done)
        for task in order:
            run = max(tasks[task], admitted.get(task, 0))
            req = TaskCleanupRequest(
                task_id=task,
                run_epoch=run,
                reason="recovery",
                credential_ids=None,
                remove_files_session=self._kind == "task-machine",
            )
            self._cleanup(req, lambda err, t=task: parts.fill(t, err))  # type: ignore[misc]

    # ------------------------------------------------------------------
    # Recovered runs

    def _abort_recovery(self, rec: _Recovery) -> None:
        if rec.reason is None:
            rec.reason = CredentialFailure.interrupted("takeover")
            self._emit(Abort(kind="recovery", id=rec.id, reason=rec.reason))

    def _end_recovery(self, task: str, through: int) -> None:
        # RT-110: an ended recovery is aborted (first reason wins), its retry cleared, its setup
        # discarded.
        rec = self._recovered.get(task)
        if rec is None or rec.run > through:
            return
        self._abort_recovery(rec)
        self._clear_timer(rec.retry)
        rec.retry = None
        rec.has_setup = False
        if rec.running is None:
            del self._recovered[task]

    def _yield_recovery(self, task: str, run: int) -> None:
        # RT-109: an ordinary start of the recovery's run clears its retry; the recovery yields.
        rec = self._recovered.get(task)
        if rec is None or rec.run != run:
            return
        rec.yielded = True
        self._clear_timer(rec.retry)
        rec.retry = None

    def _recovering(self, task: str, rec: _Recovery) -> bool:
        return (
            not self._shut
            and rec.reason is None
            and not rec.yielded
            and self._recovered.get(task) is rec
        )

    def _resume(self, task: str, run: int, has_setup: bool) -> None:
        # RT-102: resumeRecovered registers a recovery with 0 attempts and begins its start.
        if self._shut:
            return
        prev = self._recovered.get(task)
        if prev is not None:
            self._end_recovery(task, prev.run)
            if prev.running is not None:
                self._replaced.setdefault(task, []).append(prev)
        rec = _Recovery(self._id(), run, has_setup)
        self._recovered[task] = rec
        self._attempt(task, run, rec)

    def _attempt(self, task: str, run: int, rec: _Recovery) -> None:
        # RT-104: a refused recovery start is logged, no retry; RT-105: it waits for launch-ready
        # and ends its token; RT-107: a startup failure after the recovery ended only ends the
        # token; RT-108: a retry timer makes a fresh attempt while current; RT-116: the recovery
        # outlives its wait's deadline.
        if not self._recovering(task, rec):
            return
        r = self._begin_start(task, run, True)
        if isinstance(r, CredentialFailure):
            self._emit(
                Log(
                    message=self._prefix(Assignment(task, run)) + "no recovered start: " + r.message
                )
            )
            return
        st = r
        wid = self._track("recovery-attempt")

        def on_startup() -> None:
            st.listeners.remove(on_startup)
            if st.startup is True:

                def waited(view: object, err: Any) -> None:
                    self._end_start(st)
                    self._untrack(wid)

                if self._live(st):
                    self._wait(st, waited)
                else:
                    waited(None, None)
                return
            self._end_start(st)
            self._untrack(wid)
            if st.reason is not None or not self._recovering(task, rec):
                return
            delay = min(RECOVERY_RETRY_MAX_MS, self._retry_base * 2**rec.attempts)
            rec.attempts += 1

            def fire() -> None:
                rec.retry = None
                self._attempt(task, run, rec)

            rec.retry = self._set_timer(delay, fire)

        st.listeners.append(on_startup)
        if st.startup is not None:
            on_startup()

    def _run_recovered_setup(self, a: Assignment) -> None:
        # RT-113: a recovery without setup is done at its gate open; RT-114: another run's open, an
        # ended recovery or a setup already run runs nothing; RT-115: a failing setup is logged and
        # nothing propagates.
        rec = self._recovered.get(a.task_id)
        if (
            rec is None
            or rec.run != a.run_epoch
            or rec.running is not None
            or rec.reason is not None
        ):
            return
        self._clear_timer(rec.retry)
        rec.retry = None
        if not rec.has_setup:
            del self._recovered[a.task_id]
            return
        rec.has_setup = False
        wid = self._track("setup")

        def settled(err: CredentialFailure | None) -> None:
            if err is not None:
                self._emit(
                    Log(message=self._prefix(a) + "recovered runtime setup failed: " + err.message)
                )
            rec.running = None
            if self._recovered.get(a.task_id) is rec:
                del self._recovered[a.task_id]
            replaced = self._replaced.get(a.task_id)
            if replaced is not None and rec in replaced:
                replaced.remove(rec)
                if not replaced:
                    del self._replaced[a.task_id]
            self._untrack(wid)
            for fn in rec.waiters:
                fn()

        cid = self._id()
        rec.running = cid
        self._cont[cid] = settled
        self._emit(
            RunSetup(cmd_id=cid, task_id=a.task_id, run_epoch=a.run_epoch, recovery_id=rec.id)
        )

    # ------------------------------------------------------------------
    # Shutdown

    def _shutdown(self, call_id: int) -> None:
        # RT-129: the runtime is shut down when the call returns; RT-130: its synchronous steps in
        # order; RT-132: a hold fenced by a close keeps its first reason.
        self._shutdown_calls.append(call_id)
        if self._shutdown_done:
            self._emit(Answer(call_id=call_id))
            return
        if self._shut:
            return
        self._shut = True

        def ended(cmd: Command) -> None:
            self._reg_ended = True

        self._reg_call(lambda cid: Shutdown(now_ms=self._now, call_id=cid), ended)
        for task, run in list(self._assignments.items()):
            self._close(task, run)
        self._assignments.clear()
        reason = CredentialFailure.interrupted("shutdown")
        for w in list(self._waits.values()):
            self._wait_end(w, None, reason)
        for entries in list(self._starts.values()):
            for st in list(entries.values()):
                self._abort_start(st, reason)
        for holds in list(self._holds.values()):
            for h in list(holds.values()):
                self._abort_hold(h, reason)
        self._scrub()
        self._bound = self._set_timer(self._drain_ms, self._finish_shutdown)

    def _scrub(self) -> None:
        for task, rec in list(self._recovered.items()):
            self._end_recovery(task, rec.run)
        self._rep(DropAll(now_ms=self._now))
        for inst in list(self._env_waits.values()):
            self._env_eval(inst)
        self._emit(DetachConsumers())

    def _drain_check(self) -> None:
        # RT-133: the drain awaits the registry's shutdown, then repeats rounds until none is left;
        # RT-134: work registered during the drain is joined by a later round.
        if not self._shut or self._shutdown_done or not self._reg_ended:
            return
        if self._round is None:
            self._round = {}
            self._round_work = list(self._work)
            for name in ("engines", "person", "mcp"):
                self._round[name] = False
                self._cmd(
                    lambda cid, n=name: ConsumerWork(cmd_id=cid, consumer=n, op="drain"),  # type: ignore[misc]
                    lambda err, n=name: self._round_done(n),  # type: ignore[misc]
                )
            return
        if not all(self._round.values()) or any(w in self._work for w in self._round_work):
            return
        if self._cleanups:
            return
        if self._work:
            self._round = None
            self._drain_check()
            return
        self._finish_shutdown()

    def _round_done(self, name: str) -> None:
        if self._round is not None:
            self._round[name] = True

    def _finish_shutdown(self) -> None:
        if self._shutdown_done:
            return
        self._shutdown_done = True
        if self._bound is not None:
            self._clear_timer(self._bound)
            self._bound = None
        self._scrub()
        for call_id in self._shutdown_calls:
            self._emit(Answer(call_id=call_id))
