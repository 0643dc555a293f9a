"""The async runner shell: ``CredentialRuntime`` driven on anyio (asyncio or trio).

:class:`AsyncRunnerShell` owns one :class:`~leasegate.core.runtime.CredentialRuntime`,
one task group, one :class:`~leasegate.shells.timers.AsyncTimerHeap`, a frame
transport, one :class:`~leasegate.shells.ssm.SsmReader` per ``OpenReader`` and
(optionally) a durable :class:`~leasegate.shells.store.RuntimeJournal`. It
implements the shell side of ``docs/runtime.md`` ("Commands") and
``docs/events-and-commands.md`` (the registry's pass-through commands).

Ordering guarantees (see ``docs/shells.md``, "Async shell"):

* Every event reaches ``runtime.handle`` through :meth:`AsyncRunnerShell._feed`
  only, on the event loop's thread, one at a time, in the order it was fed.
  ``_feed`` never calls ``handle`` re-entrantly: events produced while a
  batch of commands is executed are queued and handled after it.
* The commands of one ``handle`` call are executed in emission order.
  Synchronous ones (answers, aborts, timers, notifications, logs, the
  in-memory journal) are carried out inline; I/O ones (frame sends, reads,
  consumer work, setups, a durable journal) are started as tasks and their
  completions are fed back through ``_feed``.
* Frames are sent by one sender task in the order their commands were
  emitted (``SendFrame`` and ``SendAck`` share the queue).
* Frames received are fed in arrival order as ``HandleFrame`` events.

Consumers: the caller builds the runtime with its ports and passes a
``work`` coroutine that serves ``ConsumerWork``; the reference consumers come
adapted as :class:`leasegate.shells.ports.ConsumerSet` (``ports()`` for the
runtime, ``work`` for this shell). Without ``work`` every ``ConsumerWork``
succeeds at once (in-memory ports: nothing is written to disk).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from leasegate.core._base import Event
from leasegate.core.registry import (
    ReadParameters,
    RefreshRequested,
    SendFailed,
    TaskView,
    TimerFired,
)
from leasegate.core.runtime import (
    AbandonStart,
    AcquireHold,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    CredentialRuntime,
    EndStart,
    HoldInfo,
    JournalRecord,
    JournalSettle,
    Notify,
    OwedCleanup,
    Recover,
    ReleaseHold,
    RunSetup,
    RuntimeShutdown,
)
from leasegate.core.wire import encode_frame
from leasegate.core.wire.lease import CredentialRefreshResult

from ._dispatch import (
    DEFAULT_MAX_OUTBOUND_FRAMES,
    REFRESH_TIMEOUT_S,
    SETUP_FAILED,
    WORK_FAILED,
    CallFailed,
    CommandDispatch,
    ReaderFactory,
    ReaderSlot,
    ShellClosedError,
)
from ._groups import exit_task_group, ki_protected
from ._recording import CoreRecorder
from .diagnostics import (
    ABANDON_START_TIMEOUT_S,
    ACQUIRE_HOLD_TIMEOUT_S,
    BEGIN_START_TIMEOUT_S,
    CLOSE_TIMEOUT_S,
    LAUNCH_READY_TIMEOUT_S,
    RECOVER_TIMEOUT_S,
    SHUTDOWN_TIMEOUT_S,
    LaunchTimeout,
    WaitTimeout,
)
from .launch import LaunchReady, launch_ready
from .ssm import ReadResult
from .store.runtime_journal import RuntimeJournal
from .timers import AsyncTimerHeap, wall_clock_ms

__all__ = [
    "AsyncRunnerShell",
    "CallFailed",
    "FrameTransport",
    "LaunchTimeout",
    "ShellClosedError",
    "WaitTimeout",
]

#: How much longer than its own ``timeout_s`` a second ``shutdown`` waits for the
#: first one to finish (the first's transport close is bounded by 2 s), seconds.
_STOP_GRACE_S = 3.0

#: The consumer-work coroutine: returns ``None`` on success or a failure.
WorkFn = Callable[[ConsumerWork], Awaitable[CredentialFailure | None]]
#: The recovered-setup coroutine: returns ``None`` or a failure (RunSetup).
SetupFn = Callable[[RunSetup], Awaitable[CredentialFailure | None]]


class FrameTransport(Protocol):
    """What the shell needs of a transport (``MemoryFrameEnd``, ``AnyioWebSocketClient``-like).

    ``send(value)`` sends one JSON value (raises when it cannot);
    ``receive()`` returns the next valid frame's JSON value, or a
    :class:`~leasegate.shells.transport.Reauthenticated` marker after a
    (re)connect (fed as ``TransportConnected``, LR-010), and raises
    ``anyio.EndOfStream`` when the peer closed; ``aclose()`` closes it.
    Optional: ``send_many(values)`` sends several values in order with one
    write (the sender then hands it every frame queued, WS-008), and
    ``drop_connection()`` drops a connection the bridge stopped reading.
    :class:`~leasegate.shells.transport.AnyioWebSocketTransport` adapts the
    reconnecting WebSocket client to this.
    """

    async def send(self, value: Any) -> None:
        """Send one JSON value as a text frame."""

    async def receive(self) -> Any:
        """The next valid frame's JSON value."""

    async def aclose(self) -> None:
        """Close the transport."""


class _Pending:
    __slots__ = ("call_id", "closed", "done", "error", "value")

    def __init__(self, call_id: int) -> None:
        self.call_id = call_id
        self.done = anyio.Event()
        self.value: object = None
        self.error: CredentialFailure | None = None
        self.closed = False


def _read_on_slot(slot: ReaderSlot, selectors: tuple[str, ...]) -> ReadResult | None:
    """On a worker thread: the slot's reader (built on first use) reads ``selectors``.

    Returns ``None`` when the slot has no reader (sealed or unbuildable).

    Raises:
        TooManyNames, TypeError: as :meth:`~leasegate.shells.ssm.SsmReader.read_blocking`.
    """
    reader = slot.get()
    return None if reader is None else reader.read_blocking(selectors)


class AsyncRunnerShell(CommandDispatch):
    """The runtime core on anyio: events in, commands carried out (issue #6 item 1).

    Args:
        runtime: the runtime core (its ports are the caller's).
        transport: the frame transport to the cloud (see :class:`FrameTransport`).
        region_endpoint_url: the SSM endpoint URL for every lease reader
            (``None``: AWS's regional endpoint); ignored with ``reader_factory``.
        reader_factory: builds the reader of an ``OpenReader`` (default:
            ``SsmReader(SessionCredentials.from_lease(session, region))``).
        work: serves ``ConsumerWork`` (default: succeed at once).
        setup: runs a recovered run's setup for ``RunSetup`` (default: succeed).
        journal: a durable :class:`RuntimeJournal` (its calls run in a worker
            thread); ``None`` keeps the journal in memory (:class:`MemoryJournal`).
        notify: called with each ``Notify`` command; errors are logged, swallowed.
        max_threads: worker threads for blocking boto3 and journal calls.
        clock_ms: the clock (milliseconds since the epoch) stamping events.
        recorder: called as ``recorder.record(event, commands)`` after every
            ``runtime.handle`` (traces, the invariant monitor); it must not
            raise and must not call back into the shell.
        max_outbound_frames: the outbound queue's bound, frames (default
            1024; at least 1, else ``ValueError``). A frame that finds it
            full (the bridge stopped reading) empties it, every frame in it
            is counted in :attr:`outbound_dropped` (a ``SendFrame`` is fed
            back as ``SendFailed``), and the transport's ``drop_connection()``
            is called when it has one, so that the reconnect resynchronizes
            (WS-008, ``docs/transport.md``). The core is never blocked. A
            transport with ``send_many`` gets every frame queued so far in
            one call (at most this many more frames are in that write).

        exit_timeout_s: the bound, in seconds, on what leaving the ``async
            with`` block by an exception or a cancellation does (close and
            clean up every open run, then ``RuntimeShutdown``).

    Use as ``async with AsyncRunnerShell(...) as shell:``; leaving the block
    normally shuts the runtime down (bounded, :meth:`shutdown`); leaving it
    by an exception, a cancellation or ``KeyboardInterrupt`` first closes
    every run still registered (``close(reason="stop")``: its cleanup
    removes the run's files) in a shielded scope, then shuts down, all
    within ``exit_timeout_s`` (``docs/shells.md``, "Cancellation"); a
    cleanup that does not finish in time keeps its row in the journal for
    the next boot's :meth:`recover`. Either way every task of the shell is
    cancelled and joined; the exception propagates. The shell's tasks run
    in a task group of their own, shielded from the host's cancel scopes,
    so that this cleanup can still run when the host's scope is cancelled.
    All methods must be called from the event loop that entered the shell.
    Implements the shell side of ``docs/runtime.md`` (reference
    ``host/lib/cloud-credential-runtime.ts`` as wired by its host).
    """

    def __init__(
        self,
        runtime: CredentialRuntime,
        transport: FrameTransport,
        *,
        region_endpoint_url: str | None = None,
        reader_factory: ReaderFactory | None = None,
        work: WorkFn | None = None,
        setup: SetupFn | None = None,
        journal: RuntimeJournal | None = None,
        notify: Callable[[Notify], None] | None = None,
        max_threads: int = 4,
        clock_ms: Callable[[], int] = wall_clock_ms,
        recorder: CoreRecorder | None = None,
        exit_timeout_s: float = 15.0,
        max_outbound_frames: int = DEFAULT_MAX_OUTBOUND_FRAMES,
    ) -> None:
        self.runtime = runtime
        self._transport = transport
        self._exit_timeout_s = exit_timeout_s
        self._work = work
        self._setup = setup
        self._recorder = recorder
        self._limiter = anyio.CapacityLimiter(max_threads)
        self._heap = AsyncTimerHeap(self._on_timer, clock_ms=clock_ms)
        self._init_dispatch(
            timers=self._heap,
            clock_ms=clock_ms,
            region_endpoint_url=region_endpoint_url,
            reader_factory=reader_factory,
            journal=journal,
            notify=notify,
        )
        self._queue: collections.deque[Event] = collections.deque()
        self._draining = False
        self._pending: dict[int, _Pending] = {}
        self._next_call = 0
        self._tg: anyio.abc.TaskGroup | None = None
        #: The shielded task group the shell's own tasks run in (inside ``_tg``).
        self._tasks: anyio.abc.TaskGroup | None = None
        if max_outbound_frames < 1:
            raise ValueError("max_outbound_frames must be at least 1")
        self._out_tx, self._out_rx = anyio.create_memory_object_stream[tuple[int | None, Any]](
            max_outbound_frames
        )
        #: Tasks of this shell still running (sender, receiver, timers, I/O).
        self.running_tasks = 0
        self._closed = False
        self._stopped: anyio.Event | None = None  # made by the first shutdown (in the loop)

    # ------------------------------------------------------------------ life

    async def __aenter__(self) -> AsyncRunnerShell:
        """Start the task group, the timer heap, the sender and the receiver."""
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tasks = await self._tg.start(self._shielded_tasks)
        self._spawn(self._heap.run)
        self._spawn(self._sender)
        self._spawn(self._receiver)
        return self

    async def _shielded_tasks(
        self, *, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold the task group of the shell's own tasks, shielded from outer cancel scopes.

        Ends when that group's own scope is cancelled (:meth:`__aexit__`).
        """
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tasks:
                task_status.started(tasks)
                await anyio.sleep_forever()

    async def __aexit__(self, *exc: object) -> bool | None:
        """Shut down (bounded, if not done yet), then cancel every remaining task.

        Left by an exception, a cancellation or ``KeyboardInterrupt``: clean
        up every open run first (:meth:`_exit_cleanup`). The exception
        propagates.
        """
        tg = self._tg
        if tg is None:
            return None
        try:
            if not self._closed:
                if exc[0] is None:
                    await self.shutdown()
                else:
                    await self._exit_cleanup()
        finally:
            self._closed = True
            self._wake_waiters()  # e.g. after an exception: no call waits on a dead shell
            tasks, self._tasks = self._tasks, None
            if tasks is not None:
                tasks.cancel_scope.cancel()
            self._tg = None
        return await exit_task_group(tg, exc)

    async def _exit_cleanup(self) -> None:
        """Close and clean up every open run, then ``RuntimeShutdown``, in a shielded scope.

        Bounded as a whole by ``exit_timeout_s``: the closes run at once
        (``close(reason="stop")`` per run the registry still has); what
        is left of the bound goes to :meth:`shutdown`. A close that does not
        settle in time leaves its cleanup's journal row (recorded before
        anything is removed) for the next boot's :meth:`recover`. Never
        raises (a failed close is left to the journal too).
        """
        with anyio.CancelScope(shield=True):
            deadline = anyio.current_time() + self._exit_timeout_s
            runs = self._runs_to_close(lambda task: self.runtime.registry.status(task))
            with anyio.move_on_after(self._exit_timeout_s):
                async with anyio.create_task_group() as closes:
                    for task, run in runs:
                        closes.start_soon(self._close_for_exit, task, run)
            await self.shutdown(max(0.0, deadline - anyio.current_time()))

    async def _close_for_exit(self, task_id: str, run_epoch: int) -> None:
        with contextlib.suppress(CallFailed, ShellClosedError):
            await self.close(task_id, run_epoch, "stop")

    def _wake_waiters(self) -> None:
        """Wake every host call still waiting: it raises :class:`ShellClosedError`."""
        unanswered = list(self._pending.values())
        self._pending.clear()
        for p in unanswered:
            p.closed = True
            p.done.set()

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        tg = self._tasks
        if tg is None:
            return

        @ki_protected
        async def run() -> None:
            self.running_tasks += 1
            try:
                await fn(*args)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as e:  # noqa: BLE001 - recorded by type only (no secret in text)
                self.task_errors.append(type(e).__name__)
            finally:
                self.running_tasks -= 1

        tg.start_soon(run)

    # ----------------------------------------------------------------- feed

    @ki_protected
    def _feed(self, event: Event) -> None:
        """Queue ``event``; if not already draining, handle the queue in order.

        The one place that calls ``runtime.handle``; never re-entrant.
        """
        self._queue.append(event)
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                event = self._in_order(self._queue.popleft())
                commands: list[Any] = []
                try:
                    commands = list(self.runtime.handle(event))
                    if self._recorder is not None:
                        self._recorder.record(event, commands)
                except Exception as e:  # noqa: BLE001 - the drain (and its feeder task) go on
                    self.task_errors.append(type(e).__name__)
                for cmd in commands:
                    try:
                        self._execute(cmd)
                    except Exception as e:  # noqa: BLE001 - the drain must go on
                        self.task_errors.append(type(e).__name__)
        finally:
            self._draining = False

    def _on_timer(self, timer_id: int) -> None:
        self._feed(TimerFired(now_ms=self._now(), timer_id=timer_id))

    def _resolve(self, call_id: int, value: object, error: CredentialFailure | None) -> None:
        p = self._pending.pop(call_id, None)
        if p is not None:
            p.value = value
            p.error = error
            p.done.set()

    def _start_io(
        self, cmd: ReadParameters | ConsumerWork | RunSetup | JournalRecord | JournalSettle
    ) -> None:
        if isinstance(cmd, ReadParameters):
            self._spawn(self._read, cmd)
        elif isinstance(cmd, ConsumerWork):
            self._spawn(self._serve, cmd.cmd_id, self._work, cmd, WORK_FAILED)
        elif isinstance(cmd, RunSetup):
            self._spawn(self._serve, cmd.cmd_id, self._setup, cmd, SETUP_FAILED)
        else:
            self._spawn(self._journal_io, cmd)

    # ------------------------------------------------------------------- I/O

    def _enqueue_frame(self, cmd_id: int | None, frame: Any) -> bool:
        try:
            self._out_tx.send_nowait((cmd_id, frame))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        except anyio.WouldBlock:  # full: the bridge is not reading (WS-008)
            discarded: list[tuple[int | None, Any]] = []
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                while True:
                    discarded.append(self._out_rx.receive_nowait())
            discarded.append((None, frame))  # its SendFailed comes from the caller
            self._outbound_overflow(discarded)
            return False
        return True

    def _drop_connection(self) -> None:
        drop = getattr(self._transport, "drop_connection", None)
        if callable(drop):
            self._spawn(drop)

    @property
    def outbound_queued(self) -> int:
        """Frames in the outbound queue now (at most ``max_outbound_frames``)."""
        return self._out_rx.statistics().current_buffer_used

    async def _read(self, cmd: ReadParameters) -> None:
        # One worker-thread hop per read: the reader's first use builds its
        # client (``slot.get``) and reads on the same thread.
        slot = self.readers.get(cmd.reader_id)
        result = None
        if slot is not None:
            try:
                result = await anyio.to_thread.run_sync(
                    _read_on_slot, slot, cmd.selectors, limiter=self._limiter
                )
            except Exception:  # noqa: BLE001 - TooManyNames/TypeError: a failed read
                result = None
        self._feed(self._read_failed(cmd) if result is None else self._read_done(cmd, result))

    async def _serve(
        self,
        cmd_id: int,
        fn: Callable[[Any], Awaitable[CredentialFailure | None]] | None,
        cmd: Any,
        failure: CredentialFailure,
    ) -> None:
        """Run the host's ``work``/``setup`` coroutine; a raise becomes ``failure`` (no text)."""
        error: CredentialFailure | None = None
        if fn is not None:
            try:
                error = await fn(cmd)
            except Exception:  # noqa: BLE001 - an exception's text never reaches an error
                error = failure
        self._feed(self._work_done(cmd_id, error))

    async def _journal_io(self, cmd: JournalRecord | JournalSettle) -> None:
        journal = self._journal
        assert journal is not None
        now = self._now()
        done = await anyio.to_thread.run_sync(
            lambda: journal.complete(cmd, now_ms=now), limiter=self._limiter
        )
        self._feed(done)

    async def _sender(self) -> None:
        """Send the queued frames in order (WS-008).

        The receiving side hands the core a whole inbox of frames per turn of
        the event loop, each answered by an ack; sending one frame per turn
        (each send yields at least once) would let the queue fill against a
        bridge that reads everything, and the overflow would drop it. So a
        transport with ``send_many`` gets every frame queued so far in one
        call (one write; at most ``max_outbound_frames`` frames are then in
        that write besides the queue); any other gets them one by one.
        """
        send_many = getattr(self._transport, "send_many", None)
        async for first in self._out_rx:
            if not callable(send_many):
                await self._send_one(*first)
                continue
            batch = [first]
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                while True:
                    batch.append(self._out_rx.receive_nowait())
            encoded: list[tuple[int | None, Any]] = []
            for cmd_id, frame in batch:
                try:
                    encoded.append((cmd_id, encode_frame(frame)))
                except Exception:  # noqa: BLE001 - a frame that cannot be encoded fails alone
                    self._frame_failed(cmd_id, None)
            if not encoded:
                continue
            try:
                await send_many([value for _, value in encoded])
            except Exception:  # noqa: BLE001 - the write failed: every frame of it failed
                for cmd_id, value in encoded:
                    self._frame_failed(cmd_id, value)
            else:
                for _ in encoded:
                    self._sent()

    async def _send_one(self, cmd_id: int | None, frame: Any) -> None:
        encoded: Any = None
        try:
            encoded = encode_frame(frame)
            await self._transport.send(encoded)
        except Exception:  # noqa: BLE001 - a failed send is SendFailed (acks: ignored)
            self._frame_failed(cmd_id, encoded)
        else:
            self._sent()

    def _frame_failed(self, cmd_id: int | None, encoded: Any) -> None:
        """Count a frame the transport did not take.

        A ``SendFrame`` (it has a ``cmd_id``) is fed back as ``SendFailed``.
        """
        self._send_failed(self._transport, encoded)
        if cmd_id is not None:
            self._feed(SendFailed(now_ms=self._now(), cmd_id=cmd_id))

    async def _receiver(self) -> None:
        while True:
            try:
                value = await self._transport.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            self._on_received(value, self._next_id)

    def _next_id(self) -> int:
        self._next_call += 1
        return self._next_call

    @property
    def dropped(self) -> int:
        """Frames the transport dropped as invalid JSON or non-text (0 if it does not count)."""
        return int(getattr(self._transport, "dropped", 0))

    # ------------------------------------------------------------ host calls

    def _start_call(self, make: Callable[[int], Event]) -> _Pending:
        if self._tg is None or self._closed:
            raise ShellClosedError("the shell is not running")
        self._next_call += 1
        call_id = self._next_call
        event = make(call_id)  # built first: a bad argument leaves no waiter behind
        p = _Pending(call_id)
        self._pending[call_id] = p
        self._feed(event)
        return p

    async def _call(
        self,
        make: Callable[[int], Event],
        wait: str,
        timeout_s: float,
        start_id: int | None = None,
    ) -> object:
        """Start host call ``make``; wait at most ``timeout_s`` seconds for its answer.

        Raises:
            WaitTimeout: the deadline elapsed (:class:`LaunchTimeout` with
                ``start_id``); the shell keeps no waiter for the call.
        """
        p = self._start_call(make)
        try:
            with anyio.move_on_after(timeout_s):
                await p.done.wait()
        finally:
            if not p.done.is_set():  # cancelled or timed out: forget the waiter
                self._pending.pop(p.call_id, None)
        if not p.done.is_set():
            raise self._timeout_error(wait, timeout_s, start_id)
        if p.closed:
            raise ShellClosedError("the shell shut down before the call was answered")
        if p.error is not None:
            raise CallFailed(p.error)
        return p.value

    async def begin_start(
        self,
        task_id: str,
        run_epoch: int,
        *,
        recovery: bool = False,
        timeout_s: float = BEGIN_START_TIMEOUT_S,
    ) -> int:
        """``BeginStart`` (reference ``beginStart``): the start id (a negative ``int``).

        Args:
            timeout_s: how long to wait for the answer, seconds (default
                :data:`~leasegate.shells.diagnostics.BEGIN_START_TIMEOUT_S`).

        Raises:
            CallFailed: the runtime refused the start.
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed.
        """
        value = await self._call(
            self._host_call(BeginStart, task_id=task_id, run_epoch=run_epoch, recovery=recovery),
            "begin_start",
            timeout_s,
        )
        assert isinstance(value, int)
        return value

    async def wait_launch_ready(
        self, start_id: int, timeout_s: float = LAUNCH_READY_TIMEOUT_S
    ) -> LaunchReady:
        """``AwaitLaunchReady`` (``waitForLaunchReady``): the run as plain values once ready.

        Returns:
            A :class:`~leasegate.shells.LaunchReady`: env as ``Secret`` values,
            the consumers' file paths, lease id, manifest revision, revision
            floor and expiry (ms); the raw ``TaskView`` is its ``view``.

        Args:
            timeout_s: how long to wait, seconds (default
                :data:`~leasegate.shells.diagnostics.LAUNCH_READY_TIMEOUT_S`,
                60 s; the runtime's own launch deadline, 3 min, fails the
                start with ``CallFailed`` if it comes first).

        Raises:
            CallFailed: the startup failed or was aborted (also when the run
                was closed right after the answer).
            ShellClosedError: the shell is not running.
            LaunchTimeout: ``timeout_s`` elapsed; the message says why (no
                grant: transport never started or connected, the cloud
                answered ``lease.unavailable``, silence; granted but no env
                snapshot: boot id mismatch, no env frame; consumers still
                installing). The runtime's wait stays registered.
        """
        view = await self._call(
            self._host_call(AwaitLaunchReady, start_id=start_id),
            "wait_launch_ready",
            timeout_s,
            start_id,
        )
        assert isinstance(view, TaskView)
        return launch_ready(self.runtime, view, start_id)

    async def acquire_hold(
        self, start_id: int, timeout_s: float = ACQUIRE_HOLD_TIMEOUT_S
    ) -> HoldInfo | None:
        """``AcquireHold`` (``tryAcquireTaskUpHold``): a ``HoldInfo`` or ``None``.

        Args:
            timeout_s: how long to wait, seconds (default
                :data:`~leasegate.shells.diagnostics.ACQUIRE_HOLD_TIMEOUT_S`).

        Returns:
            The hold (its ``git`` is the person port's hold, e.g. a
            :class:`~leasegate.shells.ports.PersonGitHold`), or ``None`` when
            the start is not live or the run is not usable.

        Raises:
            CallFailed: Git credentials unreadable (RT-040).
            WaitTimeout: ``timeout_s`` elapsed.
        """
        hold = await self._call(
            self._host_call(AcquireHold, start_id=start_id), "acquire_hold", timeout_s
        )
        assert hold is None or isinstance(hold, HoldInfo)
        return hold

    def release_hold(self, hold_id: int) -> None:
        """``ReleaseHold`` (``TaskUpHold.release``); idempotent."""
        self._feed(ReleaseHold(now_ms=self._now(), hold_id=hold_id))

    async def refresh_credential(
        self,
        task_id: str,
        run_epoch: int,
        credential_id: str,
        revision: str | None,
        *,
        timeout_s: float = REFRESH_TIMEOUT_S,
    ) -> CredentialRefreshResult:
        """``RefreshRequested`` (``requestCredentialRefresh``): ask the cloud to
        refresh one credential of the run; the result once it ends.

        Coalesced: concurrent refreshes of the same credential and revision
        share one ``credential.refresh`` frame, and each caller gets the one
        result (LR-103, LR-104). The registry answers ``unavailable`` itself
        when the cloud does not answer within its request timeout (20 s) or
        the frame cannot be sent.

        Args:
            task_id: the task.
            run_epoch: the run the refresh is for (the task's usable run).
            credential_id: the manifest's ``credentialId``.
            revision: the credential's revision in the active manifest.
            timeout_s: how long to wait for the answer, seconds.

        Returns:
            The :class:`~leasegate.core.wire.lease.CredentialRefreshResult`:
            ``outcome`` (``refreshed``, ``fresh``, ``needs_sign_in``,
            ``unavailable``, ``failed``), ``version`` (the SSM version to
            read; never ``None`` for ``refreshed``/``fresh``), ``expires_at``
            (ms since the epoch or ``None``). No secret.

        Raises:
            CallFailed: refused: the task's credentials are not usable for
                that run, or the credential is not in the active manifest
                (fixed texts).
            ShellClosedError: the shell is not running, or shut down
                before the answer came.
            WaitTimeout: ``timeout_s`` elapsed (a ``TimeoutError``; the shell forgets this
                caller; the refresh itself still ends in the registry).
        """
        value = await self._call(
            self._host_call(
                RefreshRequested,
                task_id=task_id,
                run_epoch=run_epoch,
                credential_id=credential_id,
                revision=revision,
            ),
            "refresh_credential",
            timeout_s,
        )
        assert isinstance(value, CredentialRefreshResult)
        return value

    def end_start(self, start_id: int) -> None:
        """``EndStart`` (``endStart``)."""
        self._feed(EndStart(now_ms=self._now(), start_id=start_id))

    async def abandon_start(
        self,
        start_id: int,
        hold_id: int | None = None,
        timeout_s: float = ABANDON_START_TIMEOUT_S,
    ) -> None:
        """``AbandonStart`` (``abandonStart``); returns when its close settled.

        Args:
            timeout_s: how long to wait, seconds (default
                :data:`~leasegate.shells.diagnostics.ABANDON_START_TIMEOUT_S`).

        Raises:
            CallFailed: the close failed.
            WaitTimeout: ``timeout_s`` elapsed (the close goes on).
        """
        await self._call(
            self._host_call(AbandonStart, start_id=start_id, hold_id=hold_id),
            "abandon_start",
            timeout_s,
        )

    async def close(
        self,
        task_id: str,
        run_epoch: int,
        reason: str = "stop",
        timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        """``CloseAssignment`` (``closeAssignment``); returns when the close (and cleanup) settled.

        Args:
            reason: ``stop``, ``park``, ``teardown`` or ``superseded``.
            timeout_s: how long to wait, seconds (default
                :data:`~leasegate.shells.diagnostics.CLOSE_TIMEOUT_S`).

        Raises:
            CallFailed: the close or its cleanup failed.
            WaitTimeout: ``timeout_s`` elapsed (the close goes on).
        """
        await self._call(
            self._host_call(CloseAssignment, task_id=task_id, run_epoch=run_epoch, reason=reason),
            "close",
            timeout_s,
        )

    async def recover(
        self,
        owed: tuple[OwedCleanup, ...] | None = None,
        admitted: tuple[tuple[str, int], ...] = (),
        timeout_s: float = RECOVER_TIMEOUT_S,
    ) -> None:
        """``Recover`` (``recover``): whole-task cleanups of the owed rows.

        Args:
            owed: the rows; ``None`` reads them from the durable journal
                (or the in-memory one).
            timeout_s: how long to wait for the cleanups, seconds (default
                :data:`~leasegate.shells.diagnostics.RECOVER_TIMEOUT_S`;
                reading a durable journal is not counted).

        Raises:
            CallFailed: a recovery cleanup failed (the first failure).
            WaitTimeout: ``timeout_s`` elapsed (the cleanups go on).
        """
        if owed is None:
            if self._journal is not None:
                journal = self._journal
                owed = await anyio.to_thread.run_sync(journal.owed, limiter=self._limiter)
            else:
                owed = self.memory_journal.owed()
        rows = owed
        await self._call(
            self._host_call(Recover, owed=rows, admitted=admitted), "recover", timeout_s
        )

    async def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S, *, drain: bool = True) -> None:
        """``RuntimeShutdown`` (``shutdown``), bounded by ``timeout_s`` seconds.

        Then seals every reader and closes the transport; leaving the ``async
        with`` block cancels the remaining tasks (timers, receiver).
        Idempotent; never raises for a runtime failure or the bound elapsing
        (default :data:`~leasegate.shells.diagnostics.SHUTDOWN_TIMEOUT_S`,
        15 s); when the bound elapses a WARNING names the runtime's
        outstanding work. A second or concurrent call returns once the first
        one has finished (waiting at most ``timeout_s`` + 3 s).

        Args:
            drain: feed ``RuntimeShutdown`` and wait for its answer first
                (``False``: skip it and every cleanup, as a killed process
                would; leaving the block afterwards cleans up nothing).
        """
        if self._tg is None:
            return
        if self._stopped is not None:  # a second or concurrent call: wait for the first
            with anyio.move_on_after(timeout_s + _STOP_GRACE_S):
                await self._stopped.wait()
            return
        stopped = self._stopped = anyio.Event()
        try:
            await self._stop(timeout_s if drain else None)
        finally:
            stopped.set()

    async def _stop(self, timeout_s: float | None) -> None:
        """``RuntimeShutdown`` bounded by ``timeout_s`` (``None``: skipped); wake
        waiters, seal, close the transport."""
        if timeout_s is not None:
            try:
                with contextlib.suppress(CallFailed, ShellClosedError):
                    await self._call(self._host_call(RuntimeShutdown), "shutdown", timeout_s)
            except WaitTimeout as e:
                self._warn(f"{e}; stopping the shell anyway")
        self._closed = True
        self._wake_waiters()  # nobody waits forever on a shut-down shell
        self._seal_readers()
        self._out_tx.close()
        with anyio.move_on_after(2.0):
            with contextlib.suppress(Exception):  # closing is best effort
                await self._transport.aclose()
