"""Command dispatch shared by the async and the threading shell.

:class:`CommandDispatch` carries out the runtime core's commands
(``docs/runtime.md``, "Commands", and the registry's pass-through commands of
``docs/events-and-commands.md``) the same way in both shells. What differs
between the shells is left to four hooks:

* :meth:`CommandDispatch._feed` — hand an event back to the core;
* :meth:`CommandDispatch._resolve` — complete a host call (``Answer`` / ``Failed``);
* :meth:`CommandDispatch._enqueue_frame` — queue a frame for the one sender;
* :meth:`CommandDispatch._start_io` — start blocking or awaited I/O
  (``ReadParameters``, ``ConsumerWork``, ``RunSetup``, durable journal commands)
  whose completion is fed back later.

Everything else (timers, readers, aborts, notifications, logs, the in-memory
journal) is carried out inline by :meth:`CommandDispatch._execute`, in the order
the commands were emitted. Reference: the host wiring of
``host/lib/cloud-credential-runtime.ts`` (its ``send``, timer, reader and
consumer callbacks).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol

from leasegate.core._base import Command, Event
from leasegate.core.registry import (
    LEASE_REQUEST_TIMEOUT_MS,
    CallDone,
    CancelTimer,
    CloseReader,
    OpenReader,
    ProjectValueDone,
    ReadFailed,
    ReadParameters,
    RefreshDone,
    ReportError,
    SendFailed,
    StartTimer,
    WaiterResolved,
)
from leasegate.core.registry import SendFrame as _SendFrame
from leasegate.core.runtime import (
    Abort,
    Answer,
    BeginStart,
    ConsumerWork,
    CredentialFailure,
    DetachConsumers,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    Log,
    MemoryJournal,
    Notify,
    RunSetup,
    SendAck,
    TransportConnected,
    WorkDone,
)

from .diagnostics import WaitTimeout, WireLog, diagnose_call, diagnose_launch
from .ssm import ReadResult, SessionCredentials, SsmReader, completion_event
from .status import RunnerStatus, runner_status
from .store.runtime_journal import RuntimeJournal
from .transport import Reauthenticated

__all__ = [
    "DEFAULT_MAX_OUTBOUND_FRAMES",
    "REFRESH_TIMEOUT_S",
    "SETUP_FAILED",
    "WORK_FAILED",
    "CallFailed",
    "CommandDispatch",
    "ReaderFactory",
    "ReaderSlot",
    "ShellClosedError",
    "TimerSink",
]

_log = logging.getLogger("leasegate.shells.dispatch")

#: One ``(consumer, op)`` tuple per pair seen, shared by every entry of a
#: shell's ``work_log`` (the pairs come from a small fixed vocabulary; at most 64).
_WORK_KEYS: dict[tuple[str, str], tuple[str, str]] = {}

#: Default bound of a shell's outbound queue, in frames (``SendFrame`` and
#: ``SendAck`` waiting for the transport). Full means the bridge has not read
#: for that long: the connection is dropped (WS-008).
DEFAULT_MAX_OUTBOUND_FRAMES: Final = 1024

#: The fixed failure of a consumer operation that raised (its text never leaks).
WORK_FAILED: Final = CredentialFailure(message="a credential consumer failed")
#: The fixed failure of a recovered setup that raised.
SETUP_FAILED: Final = CredentialFailure(message="the recovered setup failed")

#: The default bound, seconds, of a shell's ``refresh_credential`` call: the
#: registry's own request timeout (it then answers ``unavailable``, LR-104)
#: plus 10 s, so a caller normally gets the registry's answer.
REFRESH_TIMEOUT_S: Final = LEASE_REQUEST_TIMEOUT_MS / 1000 + 10.0

#: A factory for a lease session's reader (tests point it at moto).
ReaderFactory = Callable[[OpenReader], SsmReader]


class CallFailed(Exception):  # noqa: N818 - reads as the outcome it reports
    """A host call the runtime answered with ``Failed``.

    Attributes:
        error: the runtime's :class:`CredentialFailure` (fixed texts, no secrets).
    """

    def __init__(self, error: CredentialFailure) -> None:
        super().__init__(error.message)
        self.error = error


class ShellClosedError(RuntimeError):
    """The shell is not running (not entered, or already shut down)."""


class ReaderSlot:
    """A lease session's reader, built on first use on an I/O thread.

    Building a botocore client costs tens to hundreds of milliseconds of CPU,
    so ``OpenReader`` only records the slot (on the feeding thread, at once)
    and the first read builds the client on its worker thread. Thread-safe:
    concurrent reads wait for the one build. After :meth:`seal` nothing is
    built any more and a built reader is sealed (LR-026: closed once its
    reads in flight finished). ``build`` is dropped once called, with what it
    holds (the ``OpenReader`` and its session credentials).
    """

    __slots__ = ("_build", "_lock", "_reader", "_sealed")

    def __init__(self, build: Callable[[], SsmReader | None]) -> None:
        self._build: Callable[[], SsmReader | None] | None = build
        self._lock = threading.Lock()
        self._reader: SsmReader | None = None
        self._sealed = False

    def get(self) -> SsmReader | None:
        """The reader (built now if needed, blocking); ``None`` once sealed or unbuildable."""
        with self._lock:
            if self._reader is None and not self._sealed and self._build is not None:
                self._reader = self._build()
                self._sealed = self._reader is None
                self._build = None
            return None if self._sealed else self._reader

    def seal(self) -> None:
        """Refuse new reads; seal the built reader (it closes after its reads in flight)."""
        with self._lock:
            self._sealed = True
            reader = self._reader
        if reader is not None:
            reader.seal()


class TimerSink(Protocol):
    """What the dispatch needs of a timer heap (``ThreadTimerHeap``, ``AsyncTimerHeap``)."""

    def arm(self, timer_id: int, deadline_ms: int) -> None:
        """Arm (or re-arm) ``timer_id`` for ``deadline_ms`` (epoch milliseconds)."""

    def cancel(self, timer_id: int) -> bool:
        """Cancel ``timer_id``; ``True`` when it was armed."""


class CommandDispatch:
    """The command side of a runner shell, shared by both shells.

    Subclasses call :meth:`_init_dispatch` from ``__init__`` and implement
    the hooks ``_feed``, ``_resolve``, ``_enqueue_frame`` and ``_start_io``.

    Public state (read by hosts and tests):

    Attributes:
        readers: open reader slots by the registry's reader id (:class:`ReaderSlot`).
        all_readers: every reader ever built (tests check all are closed).
        aborted: ``(kind, id) -> reason`` of every ``Abort`` the runtime emitted
            (the first reason wins, RT-026).
        work_log: ``(consumer, op)`` of every ``ConsumerWork``, in emission order.
        detached: ``True`` once ``DetachConsumers`` was emitted (RT-131).
        task_errors: type names of unexpected exceptions (never their texts).
        memory_journal: the in-memory journal used when no durable one is given.
        wire: the :class:`~leasegate.shells.diagnostics.WireLog` of what was
            sent and received (kinds, counts, times; no contents), read by
            the waits' diagnoses.
    """

    runtime: Any

    def _init_dispatch(
        self,
        *,
        timers: TimerSink,
        clock_ms: Callable[[], int],
        region_endpoint_url: str | None,
        reader_factory: ReaderFactory | None,
        journal: RuntimeJournal | None,
        notify: Callable[[Notify], None] | None,
    ) -> None:
        self._timers = timers
        self._clock = clock_ms
        self._endpoint = region_endpoint_url
        self._reader_factory = reader_factory
        self._journal = journal
        self._notify = notify
        self.memory_journal = MemoryJournal()
        self.readers: dict[int, ReaderSlot] = {}
        #: Guards :attr:`readers` against a shutdown sealing them from another thread.
        self._readers_lock = threading.Lock()
        #: Set by :meth:`_seal_readers`: an ``OpenReader`` after it gets no slot.
        self._readers_sealed = False
        self.all_readers: list[SsmReader] = []
        self.aborted: dict[tuple[str, int], CredentialFailure] = {}
        self.work_log: list[tuple[str, str]] = []
        self.detached = False
        self.task_errors: list[str] = []
        #: Sends the transport refused (counted for diagnostics).
        self._send_failures = 0
        self.wire = WireLog(clock_ms)
        #: Frames discarded because the outbound queue was full (WS-008).
        self.outbound_dropped = 0
        #: Times the outbound queue overflowed and the connection was dropped.
        self.outbound_overflows = 0
        #: The latest ``now_ms`` handed to the core (events never go back in time).
        self._last_now = 0
        #: task id -> the newest run epoch the host began (what an exit cleans up).
        self._begun: dict[str, int] = {}

    # ----------------------------------------------------------- the hooks

    def _feed(self, event: Event) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _resolve(self, call_id: int, value: object, error: CredentialFailure | None) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _enqueue_frame(self, cmd_id: int | None, frame: Any) -> bool:
        raise NotImplementedError  # pragma: no cover - abstract

    def _start_io(
        self, cmd: ReadParameters | ConsumerWork | RunSetup | JournalRecord | JournalSettle
    ) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    # ------------------------------------------------------------- shared

    def _now(self) -> int:
        return self._clock()

    def _in_order(self, event: Event) -> Event:
        """``event`` with ``now_ms`` raised to the latest time already handled.

        An event is stamped when it is made (a completion in a worker thread,
        a frame on arrival) and handled in queue order, so stamps can arrive
        out of order by a few milliseconds; the core only ever sees
        non-decreasing times (what a trace records, too). Called by both
        shells' feeding path, under the core's serialization.
        """
        now = event.now_ms
        if isinstance(now, int) and now < self._last_now:
            return dataclasses.replace(event, now_ms=self._last_now)
        if isinstance(now, int):
            self._last_now = now
        return event

    def _execute(self, cmd: Command) -> None:
        """Carry out one command (inline, or by starting its I/O).

        The handler is looked up by the command's type in :data:`COMMAND_HANDLERS`
        (the table docs/integrate.md's "Every command" describes); a command of no
        known type is logged at WARNING by its class name and otherwise ignored.
        """
        handler = COMMAND_HANDLERS.get(type(cmd))
        if handler is None:
            _log.warning("unhandled runtime command %s", type(cmd).__name__)
            return
        handler(self, cmd)

    # One method per command type; COMMAND_HANDLERS (below the class) maps them.

    def _do_answer(self, cmd: Answer) -> None:
        self._resolve(cmd.call_id, cmd.value, None)

    def _do_failed(self, cmd: Failed) -> None:
        self._resolve(cmd.call_id, None, cmd.error)

    def _do_refresh_done(self, cmd: RefreshDone) -> None:  # a refresh call's answer (LR-104)
        self._resolve(cmd.call_id, cmd.result, None)

    def _do_project_value_done(self, cmd: ProjectValueDone) -> None:  # LR-148
        self._resolve(cmd.call_id, cmd.result, None)

    def _do_waiter_resolved(self, cmd: WaiterResolved) -> None:  # a WaitUsable the host fed
        self._resolve(cmd.call_id, cmd.view, None)

    def _do_call_done(self, cmd: CallDone) -> None:  # the registry refused a passed-through call
        err = None if cmd.error is None else CredentialFailure(message=cmd.error)
        self._resolve(cmd.call_id, None, err)

    def _do_start_timer(self, cmd: StartTimer) -> None:
        self._timers.arm(cmd.timer_id, self._now() + cmd.delay_ms)

    def _do_cancel_timer(self, cmd: CancelTimer) -> None:
        self._timers.cancel(cmd.timer_id)

    def _do_send_frame(self, cmd: _SendFrame) -> None:
        self.wire.outgoing(cmd.frame)
        if not self._enqueue_frame(cmd.cmd_id, cmd.frame):
            self._feed(SendFailed(now_ms=self._now(), cmd_id=cmd.cmd_id))

    def _do_send_ack(self, cmd: SendAck) -> None:
        note = self.wire.ack(cmd.frame, self._runner_boot_id(cmd.frame))
        if note is not None:
            _log.log(note[0], "%s", note[1])
        self._enqueue_frame(None, cmd.frame)  # send's outcome is ignored (RT-123)

    def _do_close_reader(self, cmd: CloseReader) -> None:
        with self._readers_lock:
            reader = self.readers.pop(cmd.reader_id, None)
        if reader is not None:
            reader.seal()

    def _do_start_io(self, cmd: ReadParameters | RunSetup) -> None:
        self._start_io(cmd)  # the shell's own hook (an override): looked up on self

    def _do_consumer_work(self, cmd: ConsumerWork) -> None:
        key: tuple[str, str] = (cmd.consumer, cmd.op)
        if len(_WORK_KEYS) < 64:
            key = _WORK_KEYS.setdefault(key, key)
        self.work_log.append(key)
        self._start_io(cmd)

    def _do_journal(self, cmd: JournalRecord | JournalSettle) -> None:
        if self._journal is None:
            self.memory_journal.apply(cmd)
            self._feed(WorkDone(now_ms=self._now(), cmd_id=cmd.cmd_id))
        else:
            self._start_io(cmd)

    def _do_abort(self, cmd: Abort) -> None:
        self.aborted.setdefault((cmd.kind, cmd.id), cmd.reason)

    def _do_notify(self, cmd: Notify) -> None:
        if self._notify is not None:
            try:
                self._notify(cmd)
            except Exception:  # noqa: BLE001 - the runtime's contract: swallow, log
                _log.warning("[credentials] task %s: served-change callback failed", cmd.task_id)

    def _do_detach_consumers(self, cmd: DetachConsumers) -> None:
        self.detached = True

    def _do_log(self, cmd: Log) -> None:
        _log.warning("%s", cmd.message)

    def _do_report_error(self, cmd: ReportError) -> None:
        _log.warning(
            "[credentials] task %s run %d: %s",
            cmd.assignment.task_id,
            cmd.assignment.run_epoch,
            cmd.message,
        )

    def _open_reader(self, cmd: OpenReader) -> None:
        with self._readers_lock:
            old = self.readers.pop(cmd.reader_id, None)
            if not self._readers_sealed:  # after shutdown: no slot, its reads fail
                self.readers[cmd.reader_id] = ReaderSlot(lambda: self._build_reader(cmd))
        if old is not None:
            old.seal()

    def _build_reader(self, cmd: OpenReader) -> SsmReader | None:
        try:
            if self._reader_factory is not None:
                reader = self._reader_factory(cmd)
            else:
                reader = SsmReader(
                    SessionCredentials.from_lease(cmd.session, cmd.region),
                    endpoint_url=self._endpoint,
                )
        except Exception as e:  # noqa: BLE001 - reads on it fail instead
            self.task_errors.append(type(e).__name__)
            return None
        self.all_readers.append(reader)
        return reader

    def _outbound_overflow(self, discarded: list[tuple[int | None, Any]]) -> None:
        """Account for an outbound queue that overflowed (WS-008).

        ``discarded`` holds ``(cmd_id, frame)`` of every frame taken out of the
        queue (and the one that found it full); each is counted in
        :attr:`outbound_dropped`, and each ``SendFrame`` (a ``cmd_id``) is fed
        back as ``SendFailed``, as any failed send. Acks need nothing: after
        the reconnect the cloud re-sends from the delivery cursor and the
        replica's receipts ack again. The connection is dropped through the
        transport's ``drop_connection`` when it has one. Logs one warning
        (counts only, never a frame).
        """
        self.outbound_overflows += 1
        self.outbound_dropped += len(discarded)
        _log.warning(
            "[transport] the bridge is not reading: outbound queue full, "
            "%d frames discarded, dropping the connection to resynchronize",
            len(discarded),
        )
        for cmd_id, _frame in discarded:
            if cmd_id is not None:
                self._feed(SendFailed(now_ms=self._now(), cmd_id=cmd_id))
        self._drop_connection()

    def _drop_connection(self) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _on_received(self, value: Any, call_id: Callable[[], int]) -> None:
        """Feed what a transport's ``receive`` returned, in arrival order.

        Every :class:`~leasegate.shells.transport.Reauthenticated` marker is
        fed as ``TransportConnected``; the runtime decides whether it counts
        as a re-authentication (LR-010, ``docs/runtime.md``). Any other value
        is a frame, fed as ``HandleFrame`` with a fresh host ``call_id``.
        """
        if isinstance(value, Reauthenticated):
            self.wire.connected()
            self._feed(TransportConnected(now_ms=self._now(), connection=value.connection))
            return
        self._warn(self.wire.received(value))
        self._feed(HandleFrame(now_ms=self._now(), call_id=call_id(), frame=value))

    @property
    def reauthentications(self) -> int:
        """Re-authentications the runtime passed to the registry (LR-010); 0 without the query."""
        count = getattr(self.runtime, "reauthentications", 0)
        return count if type(count) is int else 0

    def _warn(self, text: str | None) -> None:
        """Log ``text`` at WARNING (a mis-setup the shell can tell; no secret in it)."""
        if text is not None:
            _log.warning("%s", text)

    def _sent(self) -> None:
        """The sender handed a frame to the transport."""
        self.wire.sent()

    def _send_failed(self, transport: object, frame: object) -> None:
        """The transport refused ``frame`` (encoded): count it; warn once if never connected."""
        self._send_failures += 1
        kind = frame.get("kind") if isinstance(frame, dict) else None
        self._warn(self.wire.send_failed(transport, kind if type(kind) is str else "runner"))

    def _read_core(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(runtime)`` for a pure query (the threading shell takes its core lock)."""
        return fn(self.runtime)

    def _timeout_error(self, wait: str, timeout_s: float, start_id: int | None) -> WaitTimeout:
        """The error of host call ``wait`` whose ``timeout_s`` elapsed, with its diagnosis.

        Built from the runtime's pure queries (``startup_status`` for a
        launch-ready wait on ``start_id``, ``tracked``) and :attr:`wire`.
        """
        facts = self.wire.facts()
        try:
            tracked = tuple(self._read_core(lambda rt: rt.tracked()))
        except Exception:  # noqa: BLE001 - a runtime double without the query
            tracked = ()
        if start_id is None:
            return diagnose_call(wait, timeout_s, tracked, facts)
        try:
            status = self._read_core(lambda rt: rt.startup_status(start_id))
        except Exception:  # noqa: BLE001 - a runtime double without the query
            status = None
        transport = getattr(self, "_transport", None)
        return diagnose_launch(start_id, timeout_s, status, facts, transport, tracked)

    def status(self) -> RunnerStatus:
        """What this runner holds now, as typed values (no secret among them).

        Every task the host began that still has a registered run: run
        epoch, phase, gate state, lease expiry (ms since the epoch), manifest
        revision and floor, env delivery cursor, pending operations, armed
        timers and owed cleanups; see :class:`~leasegate.shells.status.RunnerStatus`.
        Built from the runtime's pure queries (under the threading shell's
        core lock) and the journal's owed rows (a durable journal is read
        from disk; unreadable: ``owed_cleanups`` is ``None``). Never raises
        for a query; call it from the host, never from a port or a recorder
        (the threading shell's core lock is not re-entrant).
        """
        owed: Any
        if self._journal is None:
            owed = self.memory_journal.owed()
        else:
            try:
                owed = self._journal.owed()
            except Exception:  # noqa: BLE001 - unreadable journal: no rows to show
                owed = None
        now = self._now()
        tasks = list(self._begun)
        armed = getattr(self._timers, "armed", 0)
        timers = armed if type(armed) is int else 0
        return self._read_core(  # type: ignore[no-any-return]
            lambda rt: runner_status(rt, now_ms=now, tasks=tasks, owed=owed, timers_armed=timers)
        )

    def _runner_boot_id(self, ack: object) -> str | None:
        """This runner's replica boot id, from the runtime's pure ``startup_status``.

        Called by the feeding thread while it carries out commands (no
        ``handle`` runs then); ``None`` when unknown.
        """
        task = getattr(ack, "task_id", None)
        rt = self.runtime
        try:
            start = rt.current_start(task) if type(task) is str else None
            status = rt.startup_status(start) if start is not None else None
        except Exception:  # noqa: BLE001 - a runtime double without the queries
            return None
        boot = getattr(status, "replica_boot_id", None)
        return boot if type(boot) is str else None

    def _host_call(self, kind: Callable[..., Event], **fields: Any) -> Callable[[int], Event]:
        """The maker of host-call event ``kind`` for a fresh ``call_id``, stamped with the clock.

        A ``BeginStart``'s task and run are remembered (:meth:`_runs_to_close`).
        """
        if kind is BeginStart:
            task, run = fields.get("task_id"), fields.get("run_epoch")
            if type(task) is str and type(run) is int and run >= self._begun.get(task, run):
                self._begun[task] = run
        return lambda call_id: kind(now_ms=self._now(), call_id=call_id, **fields)

    def _runs_to_close(self, status: Callable[[str], Any]) -> list[tuple[str, int]]:
        """``(task_id, run_epoch)`` of every run an exit cleans up (shells doc, "Cancellation").

        For each task the host began a run of: the run the registry still
        has for it (``status(task_id)``: the registry's ``RunStatus`` or
        ``None`` once the task is forgotten, i.e. closed and cleaned up);
        when ``status`` raises (a runtime without a registry), the newest run
        begun. Never raises.
        """
        runs: list[tuple[str, int]] = []
        for task, run in list(self._begun.items()):
            try:
                st = status(task)
            except Exception:  # noqa: BLE001 - no registry to ask: the newest run begun
                runs.append((task, run))
                continue
            if st is not None:
                runs.append((task, int(st.assignment.run_epoch)))
        return runs

    def _seal_readers(self) -> None:
        """Seal every reader slot and refuse new ones (shutdown; LR-026)."""
        with self._readers_lock:
            self._readers_sealed = True
            slots = list(self.readers.values())
            self.readers.clear()
        for slot in slots:
            slot.seal()

    def _read_failed(self, cmd: ReadParameters) -> ReadFailed:
        return ReadFailed(now_ms=self._now(), cmd_id=cmd.cmd_id, access_denied=False)

    def _read_done(self, cmd: ReadParameters, result: ReadResult) -> Event:
        return completion_event(result, cmd_id=cmd.cmd_id, now_ms=self._now())

    def _work_done(self, cmd_id: int, error: CredentialFailure | None) -> WorkDone:
        return WorkDone(now_ms=self._now(), cmd_id=cmd_id, error=error)


#: Every command a shell carries out → its :class:`CommandDispatch` method: the
#: runtime's commands and the registry's pass-through commands (docs/integrate.md,
#: "Every command"). One entry per exported command class; ``ReadParameters`` and
#: ``RunSetup`` only start their I/O (the shell's ``_start_io``).
COMMAND_HANDLERS: Final[dict[type[Command], Callable[[Any, Any], None]]] = {
    Answer: CommandDispatch._do_answer,
    Failed: CommandDispatch._do_failed,
    RefreshDone: CommandDispatch._do_refresh_done,
    ProjectValueDone: CommandDispatch._do_project_value_done,
    WaiterResolved: CommandDispatch._do_waiter_resolved,
    CallDone: CommandDispatch._do_call_done,
    StartTimer: CommandDispatch._do_start_timer,
    CancelTimer: CommandDispatch._do_cancel_timer,
    _SendFrame: CommandDispatch._do_send_frame,
    SendAck: CommandDispatch._do_send_ack,
    OpenReader: CommandDispatch._open_reader,
    CloseReader: CommandDispatch._do_close_reader,
    ReadParameters: CommandDispatch._do_start_io,
    ConsumerWork: CommandDispatch._do_consumer_work,
    RunSetup: CommandDispatch._do_start_io,
    JournalRecord: CommandDispatch._do_journal,
    JournalSettle: CommandDispatch._do_journal,
    Abort: CommandDispatch._do_abort,
    Notify: CommandDispatch._do_notify,
    DetachConsumers: CommandDispatch._do_detach_consumers,
    Log: CommandDispatch._do_log,
    ReportError: CommandDispatch._do_report_error,
}

#: The registry's commands the runtime consumes itself: they never reach a shell
#: that drives the runtime (docs/runtime.md, "Interception").
CONSUMED_BY_THE_RUNTIME: Final[frozenset[str]] = frozenset(
    {"OpenGate", "CloseGate", "RunInstall", "RunCleanup", "GrantAccepted", "GrantSettled"}
)
