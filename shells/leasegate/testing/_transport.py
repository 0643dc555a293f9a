"""Transports for the reference cloud: an in-memory link and a WebSocket server.

Both carry JSON **text** frames, one frame per message, and decide nothing:
text from the runner goes to :meth:`ReferenceCloud.receive_text`; whatever
the cloud queues (answers, scripted frames, env resends whose time came) is
sent to the runner in queue order.

* :class:`MemoryCloudLink`: in memory, no server task or thread; its
  :meth:`~MemoryCloudLink.async_end` plugs into the async shell (asyncio or
  trio), its :meth:`~MemoryCloudLink.thread_end` into the threading shell.
* :class:`CloudWebSocketServer`: a ``websockets`` server on 127.0.0.1 in a
  background thread with its own asyncio loop, so a test of any flavour
  (sync, asyncio, trio) can connect to :attr:`CloudWebSocketServer.url`. One
  runner connection at a time; a second is refused with close code 1013.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from leasegate.shells.transport import dumps_frame, parse_frame

from ._cloud import ReferenceCloud

__all__ = [
    "AsyncCloudEnd",
    "CloudWebSocketServer",
    "MemoryCloudLink",
    "ThreadCloudEnd",
    "dumps_frame",
]

#: Longest a pump or a waiting ``receive`` sleeps before looking at the
#: outbox again, in seconds (a safety net: listeners normally wake it at once).
_IDLE_POLL_S: Final = 0.02


def _wait_s(cloud: ReferenceCloud, clock_ms: int) -> float:
    deadline = cloud.next_deadline_ms()
    if deadline is None:
        return _IDLE_POLL_S
    return max(0.0, min(_IDLE_POLL_S, (deadline - clock_ms) / 1000))


class MemoryCloudLink:
    """The cloud at the other end of an in-memory frame transport, for either shell.

    Args:
        cloud: the cloud to serve.

    :meth:`async_end` gives a transport for
    :class:`~leasegate.shells.async_shell.AsyncRunnerShell` (asyncio or trio),
    :meth:`thread_end` one for
    :class:`~leasegate.shells.thread_shell.ThreadRunnerShell`. Neither needs
    a server task or thread: a frame the runner sends is handed to
    :meth:`ReferenceCloud.receive_text` at once (in the sender's task or
    thread), and whatever the cloud queues (answers, scripted frames, resends
    whose time came) is taken by the end's ``receive`` in queue order, as the
    runner would read it from the wire (encoded to JSON text and parsed back).
    The cloud serves one runner at a time, so a link has at most one open end.
    """

    def __init__(self, cloud: ReferenceCloud) -> None:
        self.cloud: Final = cloud
        self._lock = threading.Lock()
        self._end: _CloudEnd | None = None

    def async_end(self) -> AsyncCloudEnd:
        """A new async end (``send``/``receive``/``aclose``, the async shell's ``FrameTransport``).

        Raises:
            RuntimeError: an end of this link is still open.
        """
        end = AsyncCloudEnd(self)
        self._attach(end)
        return end

    def thread_end(self, *, on_close: Callable[[], None] | None = None) -> ThreadCloudEnd:
        """A new blocking end (``send``/``receive(timeout_s)``/``close``, the threading
        shell's ``BlockingFrameTransport``).

        Args:
            on_close: called once, in the closing thread, when the end is closed.

        Raises:
            RuntimeError: an end of this link is still open.
        """
        end = ThreadCloudEnd(self, on_close=on_close)
        self._attach(end)
        return end

    def close(self) -> None:
        """Close the open end, if any (its ``receive`` ends; idempotent)."""
        with self._lock:
            end = self._end
        if end is not None:
            end._shut()

    def _attach(self, end: _CloudEnd) -> None:
        with self._lock:
            if self._end is not None and not self._end.closed:
                raise RuntimeError("this link already has an open end")
            self._end = end
        self.cloud.add_listener(end._wake)


class _CloudEnd:
    """What both ends share: the cloud's outbox as frames, and the close."""

    def __init__(self, link: MemoryCloudLink) -> None:
        self._cloud: Final = link.cloud
        self._lock = threading.Lock()
        self._queued: deque[Any] = deque()
        self._closed = False
        self._wakeup = threading.Event()
        #: Frames sent that were not text (not handed to the cloud).
        self.dropped = 0

    @property
    def closed(self) -> bool:
        """Whether this end was closed."""
        return self._closed

    def _wake(self) -> None:
        # The cloud's listener: any thread, never blocks.
        self._wakeup.set()

    def _shut(self) -> bool:
        """Close; ``True`` the first time."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        self._cloud.remove_listener(self._wake)
        self._wakeup.set()
        return True

    def _deliver(self, text: object) -> None:
        if isinstance(text, str):
            self._cloud.receive_text(text)
        else:
            self.dropped += 1

    def _take(self) -> tuple[bool, Any]:
        """``(True, value)``: the next frame, parsed from its text; ``(False, None)``: none."""
        with self._lock:
            self._wakeup.clear()
            if not self._queued:
                self._queued.extend(self._cloud.take_outgoing())
            if not self._queued:
                return False, None
            value = self._queued.popleft()
        ok, parsed = parse_frame(dumps_frame(value))
        return ok, parsed

    def _idle_s(self) -> float:
        return _wait_s(self._cloud, self._cloud.now_ms())


class AsyncCloudEnd(_CloudEnd):
    """The runner's end of a :class:`MemoryCloudLink` for the async shell (asyncio or trio).

    Made by :meth:`MemoryCloudLink.async_end`; used from one event loop.
    :attr:`dropped` counts frames sent that were not text.
    """

    def __init__(self, link: MemoryCloudLink) -> None:
        super().__init__(link)
        self._closed_here = False
        self._loop_wake: tuple[int, anyio.Event | None] = (0, None)

    async def send(self, value: Any) -> None:
        """Send one JSON value to the cloud (handled before this returns).

        Raises:
            ValueError: not JSON-serializable.
            anyio.ClosedResourceError: this end was closed.
        """
        await self.send_text(dumps_frame(value))

    async def send_text(self, text: object) -> None:
        """Send ``text`` as is (a non-``str`` is a non-text frame: dropped and counted).

        Raises:
            anyio.ClosedResourceError: this end was closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        self._deliver(text)
        await anyio.lowlevel.checkpoint()

    async def receive(self) -> Any:
        """The next frame's JSON value from the cloud, waiting as long as it takes.

        Frames the cloud queues from this event loop's thread (answers to
        :meth:`send`) wake it at once; frames queued from other threads (a
        test scripting the cloud from a worker thread) within 20 ms.

        Raises:
            anyio.ClosedResourceError: this end was closed by :meth:`aclose`.
            anyio.EndOfStream: the link was closed (:meth:`MemoryCloudLink.close`).
        """
        while True:
            if self._closed:
                raise anyio.ClosedResourceError if self._closed_here else anyio.EndOfStream
            ok, value = self._take()
            if ok:
                return value
            event = anyio.Event()
            self._loop_wake = (threading.get_ident(), event)
            if self._wakeup.is_set() or self._closed:
                continue
            with anyio.move_on_after(self._idle_s()):
                await event.wait()

    def _wake(self) -> None:
        self._wakeup.set()
        thread, event = self._loop_wake
        if event is not None and thread == threading.get_ident():
            event.set()

    async def aclose(self) -> None:
        """Close this end (idempotent); a waiting :meth:`receive` raises ``ClosedResourceError``."""
        self._closed_here = True
        if self._shut():
            _thread, event = self._loop_wake
            if event is not None:
                event.set()
        await anyio.lowlevel.checkpoint()


class ThreadCloudEnd(_CloudEnd):
    """The runner's end of a :class:`MemoryCloudLink` for the threading shell.

    Made by :meth:`MemoryCloudLink.thread_end`; thread-safe. :attr:`dropped`
    counts frames sent that were not text.
    """

    def __init__(self, link: MemoryCloudLink, *, on_close: Callable[[], None] | None) -> None:
        super().__init__(link)
        self._on_close = on_close

    def send(self, value: Any) -> None:
        """Send one JSON value to the cloud (handled before this returns).

        Raises:
            ValueError: not JSON-serializable.
            EOFError: this end was closed.
        """
        self.send_text(dumps_frame(value))

    def send_text(self, text: object) -> None:
        """Send ``text`` as is (a non-``str`` is a non-text frame: dropped and counted).

        Raises:
            EOFError: this end was closed.
        """
        if self._closed:
            raise EOFError("the cloud link end is closed")
        self._deliver(text)

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next frame's JSON value from the cloud, waiting at most ``timeout_s`` seconds.

        Raises:
            queue.Empty: nothing came within ``timeout_s`` seconds.
            EOFError: this end (or the link) was closed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._closed:
                raise EOFError("the cloud link end is closed")
            ok, value = self._take()
            if ok:
                return value
            wait = self._idle_s()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise queue.Empty
                wait = min(wait, left)
            self._wakeup.wait(wait)

    def close(self) -> None:
        """Close this end (idempotent); calls ``on_close`` the first time."""
        if self._shut() and self._on_close is not None:
            self._on_close()


class CloudWebSocketServer:
    """The cloud as a WebSocket server on 127.0.0.1 (text frames, one JSON each).

    Args:
        cloud: the cloud to serve.
        host: the address to bind; loopback only by default.
        port: 0 picks a free port (read :attr:`url` after :meth:`start`).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. The
    server runs in a daemon thread with its own asyncio loop; :meth:`stop`
    closes the connection and joins the thread (bounded by ``timeout_s``).
    """

    def __init__(self, cloud: ReferenceCloud, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cloud: Final = cloud
        self._host: Final = host
        self._port = port
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._busy = False
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """``ws://127.0.0.1:<port>`` (valid after :meth:`start`)."""
        return f"ws://{self._host}:{self._port}"

    def start(self, timeout_s: float = 10.0) -> str:
        """Start serving; return :attr:`url`.

        Raises:
            RuntimeError: the server did not come up within ``timeout_s``
                seconds, or failed to bind.
        """
        self._thread = threading.Thread(target=self._run, name="reference-cloud-ws", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise RuntimeError("the reference cloud's WebSocket server did not start")
        return self.url

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and join the server thread (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> CloudWebSocketServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported through start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(self._handler, self._host, self._port) as server:
            sockets = list(server.sockets)
            self._port = sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    async def _handler(self, ws: ServerConnection) -> None:
        if self._busy:
            await ws.close(1013, "one runner at a time")
            return
        self._busy = True
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def listener() -> None:
            loop.call_soon_threadsafe(wake.set)

        self.cloud.add_listener(listener)
        self.cloud.runner_connected()  # an ack lost with the last connection

        async def pump() -> None:
            try:
                while True:
                    for value in self.cloud.take_outgoing():
                        await ws.send(dumps_frame(value))
                    timeout = _wait_s(self.cloud, self.cloud.now_ms())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), timeout)
                    wake.clear()
            except ConnectionClosed:
                return

        pump_task = asyncio.create_task(pump())
        stop_task = asyncio.create_task(self._stop.wait()) if self._stop else None
        try:
            async for message in ws:
                if isinstance(message, str):
                    self.cloud.receive_text(message)
                    wake.set()
                if stop_task is not None and stop_task.done():
                    break
        except ConnectionClosed:
            pass
        finally:
            pump_task.cancel()
            if stop_task is not None:
                stop_task.cancel()
            self.cloud.remove_listener(listener)
            self._busy = False
