"""The runtime machine: the lease registry and the env replica composed (RT-001 … RT-141).

Theory of operation (h11-style)
-------------------------------

:class:`CredentialRuntime` owns a :class:`~leasegate.core.registry.LeaseRegistry`
and talks to the env replica through :class:`~.ReplicaPort` and to the
consumers' gates through synchronous ports. The shell feeds *one* machine:
``runtime.handle(event) -> list[Command]``.

* Host calls (``BeginStart``, ``AwaitLaunchReady``, ``CloseAssignment`` …) are
  events with a ``call_id``; each is answered once by ``Answer``/``Failed``.
  ``handle`` looks the event's type up in :data:`_HANDLERS` (the runtime's
  events) or :data:`_REGISTRY_HANDLERS` (registry events it looks at before
  passing them on); any other event goes to the registry.
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
  - ``RunInstall`` → the install sequence (:mod:`._install`);
  - ``RunCleanup`` → the cleanup procedure (:mod:`._cleanup`) with the lease's request;
  - ``GrantAccepted``/``GrantSettled`` → ``expect_activation`` and its undo.

* State is one :class:`~._task.TaskRecord` per task (``_tasks``), whose phase
  (:mod:`._phases`) changes only through ``enter``; :meth:`status` is its
  public, secret-free snapshot.
* Long operations (the cleanup procedure, the install sequence, ``Recover``,
  the launch-ready wait, recovery attempts, close joining, the shutdown
  drain) are generator coroutines on the shared scheduler
  (:mod:`leasegate.core._sched`). A coroutine waits on a command with
  ``yield rt._await(make)`` (a ``Sync(cmd_id)``) and on a callback-style
  operation with ``yield from rt._call(start)`` (suspended before ``start``
  runs) or ``yield from rt._until(start)``; it is resumed *directly* when the
  completion is fed (``WorkDone``) or the operation calls back, never through
  the microtask queue, so commands keep the order the reference's callbacks
  give them (the runtime never drains microtasks). Waits that are not
  commands use positive keys, commands negative ids.
* Starts, waits and holds are in :mod:`._starts`, recovery in
  :mod:`._recovery`, shutdown in :mod:`._shutdown`.

``handle`` never raises: an unexpected exception is counted in
:attr:`internal_errors` and reported as a sanitized ``Log``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal

from .._base import Command, Event
from .._sched import Co, Scheduler, Sync, Task
from ..registry import Assignment as Assignment
from ..registry import (
    BridgeAuthenticated,
    CallDone,
    CancelTimer,
    CleanupFailed,
    CleanupFinished,
    CloseGate,
    GateCallbackDone,
    GateCallbackFailed,
    GrantAccepted,
    GrantSettled,
    LeaseRegistry,
    OpenGate,
    ProjectValueDone,
    RunCleanup,
    RunInstall,
    SendFailed,
    StartTimer,
    TaskView,
    TimerFired,
    WaiterResolved,
)
from ..replica import (
    ActivationToken,
    ExpectActivation,
    ReplicaView,
    SettleActivation,
)
from . import _cleanup, _common, _frames, _gates, _install, _recovery, _shutdown, _starts
from ._cleanup import adapt_cleanup_request, consumer_cleanup_request
from ._common import (
    CLU_INTERRUPTED,
    CLU_NOT_OPEN,
    CONSUMER_FAILED,
    INVALID,
    Done,
    first,
    malformed,
)
from ._frames import REPLICA_FRAME_KINDS, is_replica_frame
from ._phases import Phase, enter
from ._task import TaskRecord, TaskStatus, task_status
from ._vocab import (
    ENV_READY_TIMEOUT_MS,
    LAUNCH_READY_DEADLINE_MS,
    RECOVERY_RETRY_BASE_MS,
    SHUTDOWN_DRAIN_MS,
    AbandonStart,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerPort,
    CredentialFailure,
    EndStart,
    EnginesPort,
    Failed,
    FilesPort,
    HandleFrame,
    Interrupt,
    InterruptRecovery,
    InterruptStarts,
    Log,
    McpPort,
    PersonPort,
    Recover,
    ReleaseHold,
    ReplicaPort,
    ResumeRecovered,
    RuntimeShutdown,
    StartupStatus,
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


# Kept importable here (tests and the monitor's checks use them).
_first = first
_failure = _common.failure


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settled(Event):
    """``settled()``: answered once the work tracked at this moment settled (RT-138)."""

    call_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DetachConsumers(Command):
    """Unset the engine and MCP refreshers and the launch-fence escalator (RT-131)."""


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
        # what the shutdown drain waits for, and its resumption (_shutdown.drain)
        self._drain_wait: tuple[Callable[[], bool], Callable[[object], None]] | None = None
        self._settled_waiters: list[tuple[int, list[int]]] = []
        # one record per task (docs/runtime.md, "State")
        self._tasks: dict[str, TaskRecord] = {}
        self._seq = 0
        self._sched = Scheduler()
        self._wait_key = 0
        self._starting: list[tuple[int, Callable[[Callable[[Any], None]], None]]] = []
        self._gens: dict[int, tuple[TaskView, int]] = {}
        self._all_starts: dict[int, _starts.Start] = {}
        self._all_holds: dict[int, _starts.Hold] = {}
        self._waits: dict[int, _starts.Wait] = {}
        self._closing: dict[tuple[str, int, str], list[Done]] = {}
        self._work: dict[int, str] = {}
        self._timers: dict[int, Callable[[], None]] = {}
        self._cont: dict[int, Done] = {}
        self._reg_calls: dict[int, Callable[[Command], None]] = {}
        self._grant_tokens: dict[int, tuple[str, int]] = {}
        self._env_waits: dict[int, _install.Install] = {}
        self._rep_timers: dict[int, int] = {}
        self._deferred: list[Callable[[], None]] = []
        self._gate_depth = 0
        self._internal_errors = 0
        # a SendFailed was handled: the first connection counts as a
        # re-authentication (TransportConnected; docs/runtime.md, decisions)
        self._send_failed = False
        self._reauthentications = 0

    # ------------------------------------------------------------------
    # Public surface

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
        rec = self._tasks.get(task_id)
        st = None if rec is None else rec.newest
        return st.id if st is not None and _starts.live(self, st) else None

    def assert_current(self, start_id: int) -> CredentialFailure | None:
        """``assertCurrent()``: the failure it would throw, or ``None`` (RT-018, RT-019)."""
        st = self._all_starts.get(start_id)
        if st is None or not _starts.live(self, st):
            return CredentialFailure(message=CLU_INTERRUPTED)
        if self.open_run(st.assignment.task_id) != st.assignment.run_epoch:
            return CredentialFailure(message=CLU_NOT_OPEN)
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
        rec = self._tasks.get(task_id)
        if self._shut or rec is None or rec.open_run != run_epoch:
            return None
        gen = rec.served_gen
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

    def replica_port(self) -> ReplicaPort | None:
        """The env replica port the runtime was built with, or ``None`` (no replica,
        RT-079); a pure query, for shells and recorders that feed or read the replica."""
        return self._replica

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
            live=_starts.live(self, st),
            aborted=st.reason,
            startup="pending"
            if st.startup is None
            else ("done" if st.startup is True else "failed"),
            launch_waits=sum(1 for w in self._waits.values() if w.start is st),
            env_waiting=any(
                i.request.assignment == a and i.cmd_id in self._env_waits
                for i in self._env_waits.values()
            ),
            gate_open=self.open_run(a.task_id) == a.run_epoch,
            registry=reg,
            replica_boot_id=boot if type(boot) is str else None,
        )

    def status(self, task_id: str) -> TaskStatus | None:
        """A pure, secret-free snapshot of task ``task_id`` (:class:`TaskStatus`), or ``None``.

        ``None`` for a task the runtime never saw. Read-only: no state
        changes, no command. No catalog entry (a diagnosis and test aid;
        docs/runtime.md, "Queries").
        """
        rec = self._tasks.get(task_id)
        if rec is None:
            return None
        return task_status(self, rec)

    def view_generation(self, view: TaskView) -> int | None:
        """The env reader generation bound to ``view`` (that instance), or ``None``.

        A grant's install binds its reader's generation to its next view before
        the env wait (RT-069); a credential change's next view inherits the
        previous view's (RT-078); without a replica nothing is bound (RT-079).
        An equal copy of a view has no binding (RT-063). A pure query.
        """
        got = self._gens.get(id(view))
        return got[1] if got is not None and got[0] is view else None

    def open_run(self, task_id: str) -> int | None:
        """The run the task's gate is open for (``#open``), or ``None``."""
        rec = self._tasks.get(task_id)
        return None if rec is None else rec.open_run

    def tracked(self) -> tuple[str, ...]:
        """Labels of the tracked work outstanding, in registration order."""
        return tuple(self._work.values())

    def has_recovery(self, task_id: str) -> bool:
        """Whether the task has a recovery record."""
        rec = self._tasks.get(task_id)
        return rec is not None and rec.recovery is not None

    # ------------------------------------------------------------------
    # Plumbing

    def _id(self) -> int:
        self._nid -= 1
        return self._nid

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _rec(self, task: str) -> TaskRecord:
        """The task's record, made on first use."""
        rec = self._tasks.get(task)
        if rec is None:
            rec = self._tasks[task] = TaskRecord(task)
            if self._shut:
                enter(rec, Phase.SHUT)
        return rec

    def _sync_phase(self, rec: TaskRecord) -> None:
        """Enter the phase the record's gate and begun run now give (:mod:`._phases`)."""
        if self._shut:
            target = Phase.SHUT
        elif rec.open_run is not None:
            target = Phase.OPEN
        elif rec.assigned is not None:
            target = Phase.BEGUN
        else:
            target = Phase.IDLE
        if target is not rec.phase:
            enter(rec, target)

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

    # Coroutines (module docstring): started with _spawn, waiting with
    # ``yield self._await(make)`` or ``yield from self._until(start)``.

    def _spawn(self, gen: Co[None]) -> Task:
        task = self._sched.spawn(gen)
        self._raise_failed(task)
        self._begin_waits()
        return task

    def _start(self, gen: Co[None]) -> None:
        self._spawn(gen)

    @staticmethod
    def _raise_failed(task: Task) -> None:
        # A coroutine's exception is a bug: let handle() contain and count it.
        if task.future.done and task.future.error is not None:
            raise task.future.error

    def _resume(self, key: int, value: object) -> bool:
        task = self._sched.sync.pop(key, None)
        if task is None:
            return False
        task.step(value)
        self._raise_failed(task)
        self._begin_waits()
        return True

    def _await(self, make: Callable[[int], Command]) -> Sync:
        """Emit the command ``make(cmd_id)``; yield the result to wait for its ``WorkDone``."""
        cid = self._id()
        self._emit(make(cid))
        return Sync(cid)

    def _until(self, start: Callable[[Done], None]) -> Co[CredentialFailure | None]:
        """Run ``start(done)``; return what ``done`` is called with (suspending until then)."""
        self._wait_key += 1
        key = self._wait_key
        got: list[CredentialFailure | None] = []
        waiting = [False]

        def done(err: CredentialFailure | None) -> None:
            if waiting[0]:
                waiting[0] = False
                self._resume(key, err)
            elif not got:
                got.append(err)

        start(done)
        if got:
            return got[0]
        waiting[0] = True
        err: CredentialFailure | None = yield Sync(key)
        return err

    def _call(self, start: Callable[[Callable[[Any], None]], None]) -> Co[Any]:
        """Suspend, then run ``start(resume)``; return what ``resume`` is called with.

        Unlike :meth:`_until`, the coroutine is already suspended when ``start``
        runs, so a ``resume`` called from inside ``start`` (a registry answer in
        the same ``handle``) continues the coroutine at that very point, exactly
        where a callback would have run.
        """
        self._wait_key += 1
        key = self._wait_key
        self._starting.append((key, start))
        value = yield Sync(key)
        return value

    def _begin_waits(self) -> None:
        # Run the ``start`` of the coroutine that just suspended in ``_call`` (one per step).
        while self._starting:
            key, start = self._starting.pop()
            start(functools.partial(self._resume_with, key))

    def _resume_with(self, key: int, value: object) -> None:
        self._resume(key, value)

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
            err = first(self._close(cmd.assignment.task_id, cmd.assignment.run_epoch))
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
            self._spawn(_install.install(self, cmd.cmd_id, cmd.request))
        elif isinstance(cmd, RunCleanup):
            cid = cmd.cmd_id

            def cleaned(err: CredentialFailure | None) -> None:
                ev = CleanupFinished if err is None else CleanupFailed
                self._reg(ev(now_ms=self._now, cmd_id=cid))

            _cleanup.cleanup(self, adapt_cleanup_request(cmd.request, self._kind), cleaned)
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
            _install.env_eval(self, inst)
        for call_id, snap in list(self._settled_waiters):
            if not any(w in self._work for w in snap):
                self._settled_waiters.remove((call_id, snap))
                self._emit(Answer(call_id=call_id))
        _shutdown.drain_check(self)

    # ------------------------------------------------------------------
    # Dispatch (the tables are below the class)

    def _dispatch(self, ev: Event) -> None:
        if malformed(ev):
            # A host call whose fields are not of their declared types: the
            # shell's bug. Answer it (if it expects an answer), change nothing.
            call_id = getattr(ev, "call_id", None)
            if call_id is not None:
                self._emit(Failed(call_id=call_id, error=CredentialFailure(message=INVALID)))
            return
        handler = _HANDLERS.get(type(ev)) or _REGISTRY_HANDLERS.get(type(ev))
        if handler is None:
            self._reg(ev)
        else:
            handler(self, ev)

    def _on_work_done(self, ev: WorkDone) -> None:
        cont = self._cont.pop(ev.cmd_id, None)
        err = ev.error
        if err is not None and not isinstance(err, CredentialFailure):
            err = CredentialFailure(message=CONSUMER_FAILED)
        if cont is not None:
            cont(err)
        elif ev.cmd_id < 0:
            self._resume(ev.cmd_id, err)

    def _on_timer(self, ev: TimerFired) -> None:
        if ev.timer_id < 0:
            cb = self._timers.pop(ev.timer_id, None)
            if cb is not None:
                cb()
        else:
            self._reg(ev)

    def _on_begin_start(self, ev: BeginStart) -> None:
        r = _starts.begin_start(self, ev.task_id, ev.run_epoch, ev.recovery)
        if isinstance(r, CredentialFailure):
            self._emit(Failed(call_id=ev.call_id, error=r))
        else:
            self._emit(Answer(call_id=ev.call_id, value=r.id))

    def _on_end_start(self, ev: EndStart) -> None:
        st = self._all_starts.get(ev.start_id)
        if st is not None:
            _starts.end_start(self, st)

    def _on_interrupt(self, ev: Interrupt) -> None:
        st = self._all_starts.get(ev.start_id)
        rec = None if st is None else self._tasks.get(st.assignment.task_id)
        if st is not None and rec is not None and st.id in rec.starts:
            _starts.abort_start(self, st, CredentialFailure.interrupted("takeover"))

    def _on_interrupt_starts(self, ev: InterruptStarts) -> None:
        _starts.interrupt_tokens(self, ev.task_id, ev.exact, ev.below)
        t = self._tasks.get(ev.task_id)
        rec = None if t is None else t.recovery
        if (
            rec is not None
            and (ev.exact is None or rec.run == ev.exact)
            and (ev.below is None or rec.run < ev.below)
        ):
            _recovery.end_recovery(self, ev.task_id, rec.run)

    def _on_interrupt_recovery(self, ev: InterruptRecovery) -> None:
        t = self._tasks.get(ev.task_id)
        if t is not None and t.recovery is not None:
            _recovery.end_recovery(self, ev.task_id, t.recovery.run)

    def _on_close_assignment(self, ev: CloseAssignment) -> Co[None]:
        err = yield from _starts.close_assignment(self, ev.task_id, ev.run_epoch, ev.reason)
        if err is None:
            self._emit(Answer(call_id=ev.call_id))
        else:
            self._emit(Failed(call_id=ev.call_id, error=err))

    def _on_settled(self, ev: Settled) -> None:
        self._settled_waiters.append((ev.call_id, list(self._work)))

    def _on_bridge_authenticated(self, ev: BridgeAuthenticated) -> None:
        # RT-127: bridgeAuthenticated reaches the registry once; after shutdown it does nothing.
        if not self._shut:
            self._reauthentications += 1
            self._reg(ev)

    def _on_transport_connected(self, ev: TransportConnected) -> None:
        n = ev.connection
        if type(n) is int and n > 0 and (n > 1 or self._send_failed) and not self._shut:
            self._reauthentications += 1
            self._reg(BridgeAuthenticated(now_ms=ev.now_ms))

    def _on_send_failed(self, ev: SendFailed) -> None:
        self._send_failed = True
        self._reg(ev)

    # ------------------------------------------------------------------
    # Gates

    # The close and open fan-outs (RT-080 … RT-091) are in _gates.
    _close = _gates.close
    _open_gate = _gates.open_gate

    def _handle_frame(self, call_id: int, frame: object) -> None:
        _frames.handle_frame(self, call_id, frame)

    def _rep(self, event: Event) -> list[Command]:
        """Feed the replica one event; route its commands; return them."""
        return _frames.rep(self, event)


_HANDLERS: dict[type[Event], Callable[[CredentialRuntime, Any], None]] = {
    WorkDone: CredentialRuntime._on_work_done,
    BeginStart: CredentialRuntime._on_begin_start,
    AwaitLaunchReady: lambda rt, ev: rt._start(_starts.await_launch(rt, ev.call_id, ev.start_id)),
    AcquireHold: lambda rt, ev: _starts.acquire_hold(rt, ev.call_id, ev.start_id),
    ReleaseHold: lambda rt, ev: _starts.release_hold(rt, ev.hold_id),
    EndStart: CredentialRuntime._on_end_start,
    AbandonStart: lambda rt, ev: rt._start(
        _starts.abandon(rt, ev.call_id, ev.start_id, ev.hold_id)
    ),
    Interrupt: CredentialRuntime._on_interrupt,
    InterruptStarts: CredentialRuntime._on_interrupt_starts,
    InterruptRecovery: CredentialRuntime._on_interrupt_recovery,
    CloseAssignment: lambda rt, ev: rt._start(rt._on_close_assignment(ev)),
    HandleFrame: lambda rt, ev: rt._handle_frame(ev.call_id, ev.frame),
    Recover: lambda rt, ev: rt._start(_recovery.recover(rt, ev)),
    ResumeRecovered: lambda rt, ev: _recovery.resume(rt, ev.task_id, ev.run_epoch, ev.has_setup),
    RuntimeShutdown: lambda rt, ev: _shutdown.shutdown(rt, ev.call_id),
    Settled: CredentialRuntime._on_settled,
    TransportConnected: CredentialRuntime._on_transport_connected,
}
"""The runtime's own events (those :mod:`leasegate.core.runtime` exports) → their handler."""

_REGISTRY_HANDLERS: dict[type[Event], Callable[[CredentialRuntime, Any], None]] = {
    TimerFired: CredentialRuntime._on_timer,
    BridgeAuthenticated: CredentialRuntime._on_bridge_authenticated,
    SendFailed: CredentialRuntime._on_send_failed,
}
"""Registry events the runtime looks at first (a runtime timer, re-authentication, a failed
send); every other event is passed to the registry as it is."""
