"""Transports for the reference cloud: an in-memory link and a WebSocket server.

Both carry JSON **text** frames, one frame per message, and decide nothing:
text from the runner goes to :meth:`ReferenceCloud.receive_text`; whatever
the cloud queues (answers, scripted frames, env resends whose time came) is
sent to the runner in queue order.

* :class:`MemoryCloudLink`: anyio memory object streams of ``str`` in the
  caller's event loop (asyncio or trio). The project's own in-memory
  transport pair (``leasegate.shells.transport``) had not landed when this
  was written, so this is a minimal adapter of its own.
* :class:`CloudWebSocketServer`: a ``websockets`` server on 127.0.0.1 in a
  background thread with its own asyncio loop, so a test of any flavour
  (sync, asyncio, trio) can connect to :attr:`CloudWebSocketServer.url`. One
  runner connection at a time; a second is refused with close code 1013.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from ._cloud import ReferenceCloud

__all__ = ["CloudWebSocketServer", "MemoryCloudLink", "dumps_frame"]

#: Longest a pump sleeps before looking at the outbox again, in seconds (a
#: safety net: listeners normally wake it at once).
_IDLE_POLL_S: Final = 0.02


def dumps_frame(value: Any) -> str:
    """One frame's JSON text: compact, non-ASCII as itself, no NaN.

    Args:
        value: a JSON value (as :meth:`ReferenceCloud.take_outgoing` returns).

    Raises:
        ValueError: ``value`` holds a non-finite float.
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _wait_s(cloud: ReferenceCloud, clock_ms: int) -> float:
    deadline = cloud.next_deadline_ms()
    if deadline is None:
        return _IDLE_POLL_S
    return max(0.0, min(_IDLE_POLL_S, (deadline - clock_ms) / 1000))


class MemoryCloudLink:
    """The cloud at the end of two anyio memory object streams of JSON text.

    Args:
        cloud: the cloud to serve.
        buffer: each stream's buffer, in frames (default 1024).

    Attributes:
        to_cloud: the runner sends frame texts here.
        from_cloud: the runner receives frame texts here.

    Run :meth:`serve` in a task group; it returns when ``to_cloud`` is closed
    (then it closes ``from_cloud``), or is cancelled with its group.
    """

    def __init__(self, cloud: ReferenceCloud, *, buffer: int = 1024) -> None:
        self.cloud: Final = cloud
        send_in, recv_in = anyio.create_memory_object_stream[str](buffer)
        send_out, recv_out = anyio.create_memory_object_stream[str](buffer)
        self.to_cloud: Final[MemoryObjectSendStream[str]] = send_in
        self.from_cloud: Final[MemoryObjectReceiveStream[str]] = recv_out
        self._in: Final = recv_in
        self._out: Final = send_out

    async def serve(self) -> None:
        """Carry frames both ways until ``to_cloud`` is closed.

        Cancellation: cancelling the enclosing scope stops both directions;
        frames still in the cloud's outbox stay there.
        """
        wake = anyio.Event()
        loop_thread = threading.get_ident()

        def listener() -> None:
            if threading.get_ident() == loop_thread:
                wake.set()
            # from another thread: the pump's idle poll picks the frames up

        self.cloud.add_listener(listener)
        try:
            async with self._out, self._in, anyio.create_task_group() as tg:

                async def pump() -> None:
                    nonlocal wake
                    while True:
                        for value in self.cloud.take_outgoing():
                            await self._out.send(dumps_frame(value))
                        with anyio.move_on_after(_wait_s(self.cloud, self.cloud.now_ms())):
                            await wake.wait()
                        wake = anyio.Event()

                tg.start_soon(pump)
                async for text in self._in:
                    self.cloud.receive_text(text)
                    wake.set()  # only the pump sends, so frames keep their order
                tg.cancel_scope.cancel()
        finally:
            self.cloud.remove_listener(listener)

    def _now_ms(self) -> int:
        return self.cloud.now_ms()


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
