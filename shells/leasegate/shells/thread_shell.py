"""The threading runner shell: ``CredentialRuntime`` driven by plain threads.

:class:`ThreadRunnerShell` is the blocking twin of
:class:`~leasegate.shells.async_shell.AsyncRunnerShell`: the same constructor
keywords, the same host calls (as blocking methods), the same commands
carried out (:class:`~leasegate.shells._dispatch.CommandDispatch`), for hosts
that have no event loop.

Threads (all named ``leasegate-*``, all joined by :meth:`ThreadRunnerShell.shutdown`):

* one timer thread (:class:`~leasegate.shells.timers.ThreadTimerHeap`: one
  heap, one sleeper for the earliest deadline, whatever the number of timers);
* one sender thread (frames leave in emission order);
* one receiver thread (frames are fed in arrival order);
* at most ``max_threads`` I/O workers (boto3 reads, consumer work, setups,
  a durable journal), started on demand.

Ordering guarantees (``docs/shells.md``, "Threading shell"):

* One lock (``core_lock``) around the core: ``runtime.handle`` and the
  recorder run under it, and so do :meth:`ThreadRunnerShell.query` calls.
  The gate ports the core calls inside ``handle`` therefore run under it too,
  in the core's order.
* Events are fed through one queue by one drainer at a time (whichever
  thread fed an event while nobody was draining): events are handled one at
  a time in the order they were queued, never re-entrantly.
* The commands of one ``handle`` call are carried out by the drainer
  **outside** the lock, in emission order, and **all** of them (answers,
  aborts, timers, notifications, readers, frames queued, I/O submitted)
  before the next event is handled — so before the next event of the same
  task is fed.
* Frames are sent by the one sender thread in the order their commands were
  emitted; received frames are fed in arrival order.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

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
    ShellClosedError,
)
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
from .store.runtime_journal import RuntimeJournal
from .timers import ThreadTimerHeap, wall_clock_ms

__all__ = [
    "BlockingFrameTransport",
    "CallFailed",
    "LaunchTimeout",
    "ShellClosedError",
    "ThreadRunnerShell",
    "WaitTimeout",
    "WorkerPool",
]

#: The blocking consumer-work callable: returns ``None`` on success or a failure.
WorkFn = Callable[[ConsumerWork], CredentialFailure | None]
#: The blocking recovered-setup callable: returns ``None`` or a failure (RunSetup).
SetupFn = Callable[[RunSetup], CredentialFailure | None]

T = TypeVar("T")

#: How long the receiver waits in one ``receive`` before looking at its stop
#: flag, in seconds (bounds how long shutdown waits for it).
_RECEIVE_POLL_S: Final = 0.1
_STOP: Final[Any] = object()
#: How much longer than its own ``timeout_s`` a second ``shutdown`` waits for the
#: first one to finish stopping, in seconds (the first's joins: sender twice,
#: receiver, timer thread, 2 s each, plus the pool's 2 s).
_STOP_GRACE_S: Final = 10.0


class BlockingFrameTransport(Protocol):
    """What the threading shell needs of a transport (``ThreadFrameEnd``, a WebSocket client).

    ``send(value)`` sends one JSON value (raises when it cannot);
    ``receive(timeout_s)`` returns the next valid frame's JSON value, or a
    :class:`~leasegate.shells.transport.Reauthenticated` marker, waiting at
    most ``timeout_s`` seconds (then raises :class:`queue.Empty` or
    :class:`TimeoutError`), and raises :class:`EOFError` once the peer closed;
    ``close()`` closes it (never blocks long).
    """

    def send(self, value: Any) -> None:
        """Send one JSON value as a text frame."""

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next valid frame's JSON value (or a ``Reauthenticated`` marker)."""

    def close(self) -> None:
        """Close the transport."""


class WorkerPool:
    """A bounded pool of daemon worker threads, started on demand.

    Args:
        max_workers: most threads at once (at least 1).
        name: the threads' name prefix.

    :meth:`submit` queues a callable (it must handle its own exceptions:
    one that escapes is counted in :attr:`errors` and dropped). :meth:`shutdown`
    refuses new work, lets the queued work finish and joins the threads,
    bounded by its timeout.
    """

    def __init__(self, max_workers: int, *, name: str = "leasegate-io") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max = max_workers
        self._name = name
        self._cond = threading.Condition()
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False
        #: Callables that raised (their exceptions are dropped).
        self.errors = 0

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job``; ``False`` (not queued) after :meth:`shutdown`."""
        with self._cond:
            if self._closed:
                return False
            self._jobs.append(job)
            if len(self._jobs) > self._idle and len(self._threads) < self._max:
                t = threading.Thread(
                    target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            else:
                self._cond.notify()
        return True

    def owns(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` is one of this pool's workers."""
        with self._cond:
            return thread in self._threads

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        with self._cond:
            return sum(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._idle += 1
                    try:
                        self._cond.wait()
                    finally:
                        self._idle -= 1
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            try:
                job()
            except Exception:  # noqa: BLE001 - counted; jobs report their own errors
                with self._cond:
                    self.errors += 1

    def shutdown(self, timeout_s: float) -> int:
        """Refuse new work, finish the queued work, join the threads.

        Args:
            timeout_s: the bound on the whole join, seconds.

        Returns:
            how many worker threads are still alive (blocked in I/O) when
            the bound elapsed; 0 when all ended.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + timeout_s
        me = threading.current_thread()
        for t in threads:
            if t is not me:
                t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() and t is not me for t in threads)


def _join(thread: threading.Thread, timeout_s: float) -> None:
    """Join ``thread`` (bounded) unless it is the calling thread or was never started."""
    if thread.ident is not None and thread is not threading.current_thread():
        thread.join(timeout_s)


class _LiveTimers:
    """The timer heap as the dispatch sees it, keeping the set of live timer ids.

    Only the drainer arms and cancels (it carries out the commands), and only
    the drainer reads the set, so a ``TimerFired`` the timer thread queued
    before its ``CancelTimer`` was carried out is recognised and dropped.
    """

    __slots__ = ("_heap", "_live")

    def __init__(self, heap: ThreadTimerHeap, live: set[int]) -> None:
        self._heap = heap
        self._live = live

    def arm(self, timer_id: int, deadline_ms: int) -> None:
        self._live.add(timer_id)
        self._heap.arm(timer_id, deadline_ms)

    def cancel(self, timer_id: int) -> bool:
        self._live.discard(timer_id)
        return self._heap.cancel(timer_id)

    @property
    def armed(self) -> int:
        """How many timers the heap has armed."""
        return self._heap.armed


class _Pending:
    __slots__ = ("call_id", "closed", "done", "error", "value")

    def __init__(self, call_id: int = 0) -> None:
        self.call_id = call_id
        self.done = threading.Event()
        self.value: object = None
        self.error: CredentialFailure | None = None
        self.closed = False


class ThreadRunnerShell(CommandDispatch):
    """The runtime core on threads: events in, commands carried out (issue #6).

    Args:
        runtime: the runtime core (its ports are the caller's; they are called
            under :attr:`core_lock`).
        transport: the blocking frame transport (:class:`BlockingFrameTransport`).
        region_endpoint_url: the SSM endpoint URL for every lease reader
            (``None``: AWS's regional endpoint); ignored with ``reader_factory``.
        reader_factory: builds the reader of an ``OpenReader``.
        work: serves ``ConsumerWork`` on a worker thread, blocking (default:
            succeed at once); an exception becomes "a credential consumer failed".
        setup: runs a recovered run's setup for ``RunSetup`` on a worker
            thread (default: succeed); an exception becomes "the recovered
            setup failed".
        journal: a durable :class:`RuntimeJournal` (its calls on worker
            threads); ``None`` keeps the journal in memory.
        notify: called with each ``Notify`` command on the draining thread;
            errors are logged and swallowed; it must not make a blocking call
            into the shell.
        max_threads: most I/O worker threads (boto3 reads, work, setups, journal).
        clock_ms: the clock (milliseconds since the epoch) stamping events.
        recorder: called as ``recorder.record(event, commands)`` after every
            ``runtime.handle`` under the core lock, before any of the commands
            is carried out; it must not raise nor call into the shell.
        max_outbound_frames: the outbound queue's bound, frames (default
            1024; at least 1, else ``ValueError``). A frame that finds it
            full (the bridge stopped reading) empties it, every frame in it
            is counted in :attr:`outbound_dropped` (a ``SendFrame`` is fed
            back as ``SendFailed``), and the transport's ``drop_connection()``
            is called when it has one (WS-008). The drainer never blocks on it.

        exit_timeout_s: the bound, in seconds, on what leaving the ``with``
            block by an exception does (close and clean up every open run,
            then ``RuntimeShutdown``).

    Use as ``with ThreadRunnerShell(...) as shell:``; leaving the block
    normally shuts the runtime down (:meth:`shutdown`, bounded); leaving it
    by an exception (``KeyboardInterrupt`` and ``SystemExit`` included)
    first closes every run still registered (``close(reason="stop")``: its
    cleanup removes the run's files), then shuts down, all within
    ``exit_timeout_s`` (``docs/shells.md``, "Cancellation"); a cleanup that
    does not finish in time keeps its row in the journal for the next
    boot's :meth:`recover`. Either way every thread is stopped and the
    exception propagates. :meth:`shutdown` with ``drain=False`` stops the
    threads with no drain and no cleanup (what a killed process leaves).
    Host calls may be made from any thread, concurrently, except from the
    shell's own callbacks (``notify``, the recorder, the ports), which run
    while the shell is draining (a blocking call there raises
    :class:`RuntimeError` rather than deadlock).
    Implements the shell side of ``docs/runtime.md`` (reference
    ``host/lib/cloud-credential-runtime.ts`` as wired by its host).
    """

    def __init__(
        self,
        runtime: CredentialRuntime,
        transport: BlockingFrameTransport,
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
        self._heap = ThreadTimerHeap(self._on_timer, clock_ms=clock_ms)
        #: Timer ids armed and neither cancelled nor fed yet (touched by the drainer only).
        self._live_timers: set[int] = set()
        self._init_dispatch(
            timers=_LiveTimers(self._heap, self._live_timers),
            clock_ms=clock_ms,
            region_endpoint_url=region_endpoint_url,
            reader_factory=reader_factory,
            journal=journal,
            notify=notify,
        )
        #: The one lock around the core (``handle``, the recorder, queries).
        self.core_lock = threading.Lock()
        #: The thread inside ``handle`` now (under :attr:`core_lock`), else ``None``.
        self._core_owner: int | None = None
        self._feed_lock = threading.Lock()
        self._queue: collections.deque[Event] = collections.deque()
        self._drainer: int | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._pool = WorkerPool(max_threads)
        if max_outbound_frames < 1:
            raise ValueError("max_outbound_frames must be at least 1")
        #: Frames waiting for the sender, bounded (WS-008); ``_STOP`` goes past the bound.
        self._out: collections.deque[Any] = collections.deque()
        self._out_max = max_outbound_frames
        self._out_cond = threading.Condition()
        self._sender = threading.Thread(target=self._send_loop, name="leasegate-send", daemon=True)
        self._receiver = threading.Thread(
            target=self._receive_loop, name="leasegate-receive", daemon=True
        )
        self._stop_receiving = threading.Event()
        #: Set once a shutdown has stopped everything it could (see :meth:`shutdown`).
        self._stopped = threading.Event()
        self._state_lock = threading.Lock()
        self._started = False
        self._closed = False
        #: Threads of the shell still alive after :meth:`shutdown` (0: none left).
        self.leaked_threads = 0
        #: I/O dropped because it came after shutdown (its completion never fed).
        self.dropped_after_close = 0

    # ------------------------------------------------------------------ life

    def __enter__(self) -> ThreadRunnerShell:
        """Start the timer, sender and receiver threads.

        Raises:
            RuntimeError: entered twice.
        """
        with self._state_lock:
            if self._started:
                raise RuntimeError("a ThreadRunnerShell is entered once")
            self._started = True
        self._heap.start()
        self._sender.start()
        self._receiver.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Shut down (bounded); after an exception, clean up every open run first.

        See :meth:`_exit_cleanup`. A second ``KeyboardInterrupt`` during that
        cleanup abandons it (the journal keeps what is owed) but every
        thread is still stopped.
        """
        if exc[0] is None:
            self.shutdown()
            return
        try:
            self._exit_cleanup()
        finally:
            self.shutdown(drain=False)  # stops the threads if the cleanup was interrupted

    def _exit_cleanup(self) -> None:
        """Close and clean up every open run, then ``RuntimeShutdown``, bounded.

        Bounded as a whole by ``exit_timeout_s``: the closes are fed at once
        (``close(reason="stop")`` per run the registry still has, the waits
        on this thread); what is left of the bound goes to :meth:`shutdown`.
        A close that does not settle in time leaves its cleanup's journal
        row (recorded before anything is removed) for the next boot's
        :meth:`recover`. Never raises for a failed close (left to the
        journal too); a call made from one of the shell's own callbacks
        skips the closes (they would wait on the drainer itself).
        """
        with self._state_lock:
            if not self._started or self._closed:
                return
        deadline = time.monotonic() + self._exit_timeout_s
        if self._drainer != threading.get_ident():
            runs = self._runs_to_close(lambda task: self.query(lambda rt: rt.registry.status(task)))
            pending: list[_Pending] = []
            for task, run in runs:
                with contextlib.suppress(ShellClosedError, RuntimeError):
                    pending.append(
                        self._start_call(
                            self._host_call(
                                CloseAssignment, task_id=task, run_epoch=run, reason="stop"
                            )
                        )
                    )
            for p in pending:
                p.done.wait(max(0.0, deadline - time.monotonic()))
        self.shutdown(max(0.0, deadline - time.monotonic()))

    @property
    def running_threads(self) -> int:
        """Threads of this shell alive now (timer, sender, receiver, workers)."""
        fixed = (self._heap_thread(), self._sender, self._receiver)
        return sum(t is not None and t.is_alive() for t in fixed) + self._pool.threads

    def _heap_thread(self) -> threading.Thread | None:
        t = getattr(self._heap, "_thread", None)
        return t if isinstance(t, threading.Thread) else None

    @property
    def timers_armed(self) -> int:
        """Timers armed now (all on the one timer thread)."""
        return self._heap.armed

    # ----------------------------------------------------------------- feed

    def _feed(self, event: Event) -> None:
        """Queue ``event``; if nobody is draining, drain the queue on this thread.

        The one place that calls ``runtime.handle``: under :attr:`core_lock`,
        one event at a time, in queue order; each event's commands are all
        carried out (outside the lock, in emission order) before the next
        event is handled.
        """
        with self._feed_lock:
            self._queue.append(event)
            if self._drainer is not None:
                return
            self._drainer = threading.get_ident()
        try:
            self._drain()
        except BaseException:
            # KeyboardInterrupt on the main thread while it drained: the next
            # feed drains what is queued (the interrupted event may be lost).
            with self._feed_lock:
                self._drainer = None
            raise

    def _drain(self) -> None:
        """Handle the queue until it is empty (the drainer only; see :meth:`_feed`)."""
        while True:
            with self._feed_lock:
                if not self._queue:
                    self._drainer = None
                    return
                event = self._queue.popleft()
            if isinstance(event, TimerFired):
                # Popped by the timer thread before a CancelTimer of this batch
                # was carried out: cancelled means never fed (docs/shells.md).
                if event.timer_id not in self._live_timers:
                    continue
                self._live_timers.discard(event.timer_id)
            commands: list[Any] = []
            event = self._in_order(event)
            with self.core_lock:
                self._core_owner = threading.get_ident()
                try:
                    commands = list(self.runtime.handle(event))
                    if self._recorder is not None:
                        self._recorder.record(event, commands)
                except Exception as e:  # noqa: BLE001 - the drain must go on
                    self.task_errors.append(type(e).__name__)
                finally:
                    self._core_owner = None
            for cmd in commands:
                try:
                    self._execute(cmd)
                except Exception as e:  # noqa: BLE001 - the drain must go on
                    self.task_errors.append(type(e).__name__)

    def query(self, fn: Callable[[CredentialRuntime], T]) -> T:
        """Run ``fn(runtime)`` under the core lock (for the runtime's pure queries).

        Example: ``shell.query(lambda rt: rt.env_snapshot(task, run, ("web",)))``.
        ``fn`` must not call into the shell. Raises whatever ``fn`` raises.

        Raises:
            RuntimeError: called from inside ``handle`` (a port or the
                recorder), where the core lock is already held: the lock is
                not re-entrant, so this is refused instead of deadlocking.
        """
        if self._core_owner == threading.get_ident():
            raise RuntimeError("shell.query from inside the core's handle (a port or the recorder)")
        with self.core_lock:
            return fn(self.runtime)

    def _next_id(self) -> int:
        return next(self._ids)

    def _on_timer(self, timer_id: int) -> None:
        self._feed(TimerFired(now_ms=self._now(), timer_id=timer_id))

    def _resolve(self, call_id: int, value: object, error: CredentialFailure | None) -> None:
        with self._feed_lock:
            p = self._pending.pop(call_id, None)
        if p is not None:
            p.value = value
            p.error = error
            p.done.set()

    # ------------------------------------------------------------------- I/O

    def _enqueue_frame(self, cmd_id: int | None, frame: Any) -> bool:
        if self._closed:
            return False
        with self._out_cond:
            if len(self._out) < self._out_max:
                self._out.append((cmd_id, frame))
                self._out_cond.notify()
                return True
            # full: the bridge is not reading (WS-008)
            discarded = [item for item in self._out if item is not _STOP]
            self._out.clear()
        discarded.append((None, frame))  # its SendFailed comes from the caller
        self._outbound_overflow(discarded)
        return False

    def _put_stop(self) -> None:
        with self._out_cond:
            self._out.append(_STOP)
            self._out_cond.notify()

    def _drop_connection(self) -> None:
        drop = getattr(self._transport, "drop_connection", None)
        if callable(drop):
            try:
                drop()
            except Exception as e:  # noqa: BLE001 - best effort, recorded by type
                self.task_errors.append(type(e).__name__)

    @property
    def outbound_queued(self) -> int:
        """Frames in the outbound queue now (at most ``max_outbound_frames``)."""
        with self._out_cond:
            return len(self._out)

    def _start_io(
        self, cmd: ReadParameters | ConsumerWork | RunSetup | JournalRecord | JournalSettle
    ) -> None:
        job: Callable[[], None]
        if isinstance(cmd, ReadParameters):
            job = lambda: self._read(cmd)  # noqa: E731
        elif isinstance(cmd, ConsumerWork):
            job = lambda: self._serve(cmd.cmd_id, self._work, cmd, WORK_FAILED)  # noqa: E731
        elif isinstance(cmd, RunSetup):
            job = lambda: self._serve(cmd.cmd_id, self._setup, cmd, SETUP_FAILED)  # noqa: E731
        else:
            job = lambda: self._journal_io(cmd)  # noqa: E731
        if not self._pool.submit(job):
            self.dropped_after_close += 1

    def _read(self, cmd: ReadParameters) -> None:
        slot = self.readers.get(cmd.reader_id)
        reader = None if slot is None else slot.get()
        if reader is None:
            self._feed(self._read_failed(cmd))
            return
        try:
            result = reader.read_blocking(cmd.selectors)
        except Exception:  # noqa: BLE001 - TooManyNames/TypeError: a failed read
            self._feed(self._read_failed(cmd))
            return
        self._feed(self._read_done(cmd, result))

    def _serve(
        self,
        cmd_id: int,
        fn: Callable[[Any], CredentialFailure | None] | None,
        cmd: Any,
        failure: CredentialFailure,
    ) -> None:
        error: CredentialFailure | None = None
        if fn is not None:
            try:
                error = fn(cmd)
            except Exception:  # noqa: BLE001 - an exception's text never reaches an error
                error = failure
        self._feed(self._work_done(cmd_id, error))

    def _journal_io(self, cmd: JournalRecord | JournalSettle) -> None:
        journal = self._journal
        assert journal is not None
        try:
            done = journal.complete(cmd, now_ms=self._now())
        except Exception as e:  # noqa: BLE001 - complete() reports failures as values
            self.task_errors.append(type(e).__name__)
            return
        self._feed(done)

    def _send_loop(self) -> None:
        while True:
            with self._out_cond:
                while not self._out:
                    self._out_cond.wait()
                item = self._out.popleft()
            if item is _STOP:
                return
            cmd_id, frame = item
            encoded: Any = None
            try:
                encoded = encode_frame(frame)
                self._transport.send(encoded)
            except Exception:  # noqa: BLE001 - a failed send is SendFailed (acks: ignored)
                self._send_failed(self._transport, encoded)
                if cmd_id is not None:
                    self._feed(SendFailed(now_ms=self._now(), cmd_id=cmd_id))
            else:
                self._sent()

    def _receive_loop(self) -> None:
        while not self._stop_receiving.is_set():
            try:
                value = self._transport.receive(_RECEIVE_POLL_S)
            except (queue.Empty, TimeoutError):
                continue
            except EOFError:
                return
            except Exception as e:  # noqa: BLE001 - a broken transport: stop, recorded by type
                if not self._stop_receiving.is_set():
                    self.task_errors.append(type(e).__name__)
                return
            self._on_received(value, self._next_id)

    @property
    def dropped(self) -> int:
        """Frames the transport dropped as invalid JSON or non-text (0 if it does not count)."""
        return int(getattr(self._transport, "dropped", 0))

    # ------------------------------------------------------------ host calls

    def _start_call(self, make: Callable[[int], Event]) -> _Pending:
        if not self._started or self._closed:
            raise ShellClosedError("the shell is not running")
        if self._drainer == threading.get_ident():
            raise RuntimeError("a blocking host call from the shell's own callback")
        call_id = next(self._ids)
        event = make(call_id)  # built first: a bad argument leaves no waiter behind
        p = _Pending(call_id)
        with self._feed_lock:
            # Checked again under the lock shutdown clears the waiters with: a call
            # that raced a shutdown is refused here or woken by it, never left hanging.
            if self._closed:
                raise ShellClosedError("the shell is not running")
            self._pending[call_id] = p
        self._feed(event)
        return p

    def _call(
        self,
        make: Callable[[int], Event],
        wait: str,
        timeout_s: float,
        start_id: int | None = None,
    ) -> object:
        """Start host call ``make``; block at most ``timeout_s`` seconds for its answer.

        Raises:
            WaitTimeout: the deadline elapsed (:class:`LaunchTimeout` with
                ``start_id``); the shell keeps no waiter for the call.
        """
        p = self._start_call(make)
        if not p.done.wait(min(timeout_s, threading.TIMEOUT_MAX)):
            with self._feed_lock:  # the shell forgets this waiter (the core's wait stays)
                self._pending.pop(p.call_id, None)
            if not p.done.is_set():
                raise self._timeout_error(wait, timeout_s, start_id)
        if p.closed:
            raise ShellClosedError("the shell shut down before the call was answered")
        if p.error is not None:
            raise CallFailed(p.error)
        return p.value

    def _read_core(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(runtime)`` under the core lock (a pure query for a diagnosis)."""
        with self.core_lock:
            return fn(self.runtime)

    def begin_start(
        self,
        task_id: str,
        run_epoch: int,
        *,
        recovery: bool = False,
        timeout_s: float = BEGIN_START_TIMEOUT_S,
    ) -> int:
        """``BeginStart`` (reference ``beginStart``): the start id (a negative ``int``).

        Args:
            timeout_s: how long to block, seconds (default
                :data:`~leasegate.shells.diagnostics.BEGIN_START_TIMEOUT_S`).

        Raises:
            CallFailed: the runtime refused the start.
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed.
        """
        value = self._call(
            self._host_call(BeginStart, task_id=task_id, run_epoch=run_epoch, recovery=recovery),
            "begin_start",
            timeout_s,
        )
        assert isinstance(value, int)
        return value

    def wait_launch_ready(
        self, start_id: int, timeout_s: float = LAUNCH_READY_TIMEOUT_S
    ) -> LaunchReady:
        """``AwaitLaunchReady`` (``waitForLaunchReady``): the run as plain values once ready.

        Returns:
            A :class:`~leasegate.shells.LaunchReady` (env as ``Secret`` values,
            the consumers' file paths, lease id, manifest revision, revision
            floor, expiry in ms; the raw ``TaskView`` as ``view``), built
            under the core lock.

        Args:
            timeout_s: how long to block, seconds (default
                :data:`~leasegate.shells.diagnostics.LAUNCH_READY_TIMEOUT_S`,
                60 s; the runtime's own launch deadline, 3 min, fails the
                start with ``CallFailed`` if it comes first).

        Raises:
            CallFailed: the startup failed or was aborted.
            ShellClosedError: the shell is not running, or shut down
                before the answer came.
            LaunchTimeout: ``timeout_s`` elapsed; the message says why (no
                grant: transport never started or connected, the cloud
                answered ``lease.unavailable``, silence; granted but no env
                snapshot: boot id mismatch, no env frame; consumers still
                installing). The runtime's wait stays registered; the shell
                keeps no waiter for this call.
        """
        view = self._call(
            self._host_call(AwaitLaunchReady, start_id=start_id),
            "wait_launch_ready",
            timeout_s,
            start_id,
        )
        assert isinstance(view, TaskView)
        return self.query(lambda rt: launch_ready(rt, view, start_id))

    def acquire_hold(
        self, start_id: int, timeout_s: float = ACQUIRE_HOLD_TIMEOUT_S
    ) -> HoldInfo | None:
        """``AcquireHold`` (``tryAcquireTaskUpHold``): a ``HoldInfo`` or ``None``.

        Args:
            timeout_s: how long to block, seconds (default
                :data:`~leasegate.shells.diagnostics.ACQUIRE_HOLD_TIMEOUT_S`).

        Returns:
            The hold (its ``git`` is the person port's hold, e.g. a
            :class:`~leasegate.shells.ports.PersonGitHold`), or ``None`` when
            the start is not live or the run is not usable.

        Raises:
            CallFailed: Git credentials unreadable (RT-040).
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed.
        """
        hold = self._call(
            self._host_call(AcquireHold, start_id=start_id), "acquire_hold", timeout_s
        )
        assert hold is None or isinstance(hold, HoldInfo)
        return hold

    def release_hold(self, hold_id: int) -> None:
        """``ReleaseHold`` (``TaskUpHold.release``); idempotent, does not block."""
        self._feed(ReleaseHold(now_ms=self._now(), hold_id=hold_id))

    def refresh_credential(
        self,
        task_id: str,
        run_epoch: int,
        credential_id: str,
        revision: str | None,
        *,
        timeout_s: float = REFRESH_TIMEOUT_S,
    ) -> CredentialRefreshResult:
        """``RefreshRequested`` (``requestCredentialRefresh``): ask the cloud to
        refresh one credential of the run; blocks until the result.

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
        value = self._call(
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
        """``EndStart`` (``endStart``); does not block."""
        self._feed(EndStart(now_ms=self._now(), start_id=start_id))

    def abandon_start(
        self,
        start_id: int,
        hold_id: int | None = None,
        timeout_s: float = ABANDON_START_TIMEOUT_S,
    ) -> None:
        """``AbandonStart`` (``abandonStart``); returns when its close settled.

        Args:
            timeout_s: how long to block, seconds (default
                :data:`~leasegate.shells.diagnostics.ABANDON_START_TIMEOUT_S`).

        Raises:
            CallFailed: the close failed.
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed (the close goes on).
        """
        self._call(
            self._host_call(AbandonStart, start_id=start_id, hold_id=hold_id),
            "abandon_start",
            timeout_s,
        )

    def close(
        self,
        task_id: str,
        run_epoch: int,
        reason: str = "stop",
        timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        """``CloseAssignment`` (``closeAssignment``); returns when the close (and cleanup) settled.

        Args:
            reason: ``stop``, ``park``, ``teardown`` or ``superseded``.
            timeout_s: how long to block, seconds (default
                :data:`~leasegate.shells.diagnostics.CLOSE_TIMEOUT_S`).

        Raises:
            CallFailed: the close or its cleanup failed.
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed (the close goes on).
        """
        self._call(
            self._host_call(CloseAssignment, task_id=task_id, run_epoch=run_epoch, reason=reason),
            "close",
            timeout_s,
        )

    def recover(
        self,
        owed: tuple[OwedCleanup, ...] | None = None,
        admitted: tuple[tuple[str, int], ...] = (),
        timeout_s: float = RECOVER_TIMEOUT_S,
    ) -> None:
        """``Recover`` (``recover``): whole-task cleanups of the owed rows.

        Args:
            owed: the rows; ``None`` reads them from the durable journal
                (in the calling thread) or the in-memory one.
            timeout_s: how long to block for the cleanups, seconds (default
                :data:`~leasegate.shells.diagnostics.RECOVER_TIMEOUT_S`;
                reading a durable journal is not counted).

        Raises:
            CallFailed: a recovery cleanup failed (the first failure).
            ShellClosedError: the shell is not running.
            WaitTimeout: ``timeout_s`` elapsed (the cleanups go on).
        """
        if owed is None:
            owed = self._journal.owed() if self._journal is not None else self.memory_journal.owed()
        rows = owed
        self._call(self._host_call(Recover, owed=rows, admitted=admitted), "recover", timeout_s)

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S, *, drain: bool = True) -> None:
        """``RuntimeShutdown`` (``shutdown``) bounded by ``timeout_s`` s, then stop everything.

        Seals every reader, stops the sender (frames already queued are sent
        first), closes the transport, stops the receiver and the timer
        thread, and joins the I/O workers (queued work finishes; the join is
        bounded by what is left of ``timeout_s`` plus 2 s). Threads still
        blocked after that are counted in :attr:`leaked_threads`.
        Idempotent; never raises for a runtime failure or the bound elapsing
        (default :data:`~leasegate.shells.diagnostics.SHUTDOWN_TIMEOUT_S`,
        15 s); when the bound elapses a WARNING names the runtime's
        outstanding work. A second or concurrent call returns once the first one has stopped
        the shell (it waits at most ``timeout_s`` + 10 s; at once when made
        from one of the shell's own threads).

        Args:
            drain: feed ``RuntimeShutdown`` and wait for its answer first
                (``False``: skip it, as after an exception).
        """
        with self._state_lock:
            if not self._started:
                return
            closed = self._closed
        if closed:
            self._wait_stopped(timeout_s)
            return
        deadline = time.monotonic() + timeout_s
        if drain and self._drainer != threading.get_ident():
            try:
                with contextlib.suppress(CallFailed, ShellClosedError):
                    self._call(self._host_call(RuntimeShutdown), "shutdown", timeout_s)
            except WaitTimeout as e:
                self._warn(f"{e}; stopping the shell anyway")
        with self._state_lock:
            closed = self._closed
            self._closed = True
        if closed:
            self._wait_stopped(timeout_s)
            return
        try:
            self._stop_everything(deadline)
        finally:
            self._stopped.set()

    def _wait_stopped(self, timeout_s: float) -> None:
        """Wait (bounded) for a shutdown another thread is carrying out.

        A second or concurrent ``shutdown`` returns only once the shell has
        stopped, so that "no thread left" holds when it returns; on one of
        the shell's own threads (a callback) it returns at once, since the
        first shutdown may be joining that very thread.
        """
        if self._on_own_thread():
            return
        self._stopped.wait(timeout_s + _STOP_GRACE_S)

    def _on_own_thread(self) -> bool:
        me = threading.current_thread()
        if self._drainer == me.ident or me in (self._sender, self._receiver, self._heap_thread()):
            return True
        return self._pool.owns(me)

    def _stop_everything(self, deadline: float) -> None:
        """Seal readers, stop the sender, transport, receiver, timers and pool; wake waiters."""
        self._seal_readers()
        self._put_stop()
        grace = max(0.0, deadline - time.monotonic()) + 2.0
        _join(self._sender, min(grace, 2.0))
        with contextlib.suppress(Exception):  # closing is best effort
            self._transport.close()
        _join(self._sender, 2.0)  # a send that blocked until the close ends now
        self._stop_receiving.set()
        _join(self._receiver, 2.0)
        self._heap.stop(2.0)
        self._pool.shutdown(grace)
        with self._feed_lock:
            unanswered = list(self._pending.values())
            self._pending.clear()
        for p in unanswered:  # nobody waits forever on a shut-down shell
            p.closed = True
            p.done.set()
        self.leaked_threads = self.running_threads
