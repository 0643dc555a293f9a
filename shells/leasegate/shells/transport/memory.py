"""In-memory connected pairs of frame ends (async and thread-safe)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._frames import dumps_frame, parse_frame

__all__ = ["MemoryFrameEnd", "ThreadFrameEnd", "memory_pair", "thread_memory_pair"]


class MemoryFrameEnd:
    """One end of an anyio in-memory pair carrying JSON text frames.

    :meth:`send` serializes a value, :meth:`send_text` sends raw text (tests use
    it to inject malformed frames), :meth:`receive` returns the next *valid*
    frame's value, dropping and counting malformed ones in :attr:`dropped`.
    Works under asyncio and trio.
    """

    def __init__(
        self, tx: MemoryObjectSendStream[object], rx: MemoryObjectReceiveStream[object]
    ) -> None:
        self._tx = tx
        self._rx = rx
        self.dropped = 0

    async def send(self, value: Any) -> None:
        """Send ``value`` as one JSON text frame (waits while the buffer is full).

        Raises:
            ValueError: not JSON-serializable.
            anyio.BrokenResourceError: the other end was closed.
            anyio.ClosedResourceError: this end was closed.
        """
        await self._tx.send(dumps_frame(value))

    async def send_text(self, text: object) -> None:
        """Send ``text`` as is (any object: a non-``str`` is a non-text frame)."""
        await self._tx.send(text)

    async def receive(self) -> Any:
        """The next valid frame's JSON value.

        Raises:
            anyio.EndOfStream: the other end closed and the buffer is empty.
        """
        while True:
            ok, value = parse_frame(await self._rx.receive())
            if ok:
                return value
            self.dropped += 1

    async def aclose(self) -> None:
        """Close both directions of this end."""
        await self._tx.aclose()
        await self._rx.aclose()


def memory_pair(max_buffer: int = 64) -> tuple[MemoryFrameEnd, MemoryFrameEnd]:
    """Two connected :class:`MemoryFrameEnd`; each direction buffers ``max_buffer`` frames."""
    a_tx, b_rx = anyio.create_memory_object_stream[object](max_buffer)
    b_tx, a_rx = anyio.create_memory_object_stream[object](max_buffer)
    return MemoryFrameEnd(a_tx, a_rx), MemoryFrameEnd(b_tx, b_rx)


_CLOSED: Any = object()
#: How often a send blocked on a full buffer looks whether its end was closed, seconds.
_BLOCKED_SEND_POLL_S: Final = 0.05


class ThreadFrameEnd:
    """One end of a thread-safe in-memory pair carrying JSON text frames.

    Bounded: ``send`` blocks while the peer's buffer holds ``max_buffer``
    frames. :meth:`close` never blocks; after it the peer's :meth:`receive`
    raises :class:`EOFError` once the frames already sent are drained.
    """

    def __init__(
        self,
        tx: queue.Queue[object],
        rx: queue.Queue[object],
        tx_slots: threading.Semaphore,
        rx_slots: threading.Semaphore,
    ) -> None:
        self._tx = tx
        self._rx = rx
        self._tx_slots = tx_slots
        self._rx_slots = rx_slots
        self._lock = threading.Lock()
        self._closed = False
        self._eof = False
        self.dropped = 0

    def send(self, value: Any, timeout_s: float | None = None) -> None:
        """Send ``value`` as one JSON text frame.

        Raises:
            ValueError: not JSON-serializable.
            EOFError: this end was closed.
            queue.Full: the buffer stayed full for ``timeout_s`` seconds.
        """
        self.send_text(dumps_frame(value), timeout_s)

    def send_text(self, text: object, timeout_s: float | None = None) -> None:
        """Send ``text`` as is (tests use it to inject malformed frames).

        A send blocked on a full buffer is woken by :meth:`close` of this end
        (within 50 ms) and raises :class:`EOFError`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._closed:
                raise EOFError("this frame end is closed")
            wait = _BLOCKED_SEND_POLL_S
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            if self._tx_slots.acquire(timeout=wait):
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Full
        if self._closed:
            self._tx_slots.release()
            raise EOFError("this frame end is closed")
        self._tx.put(text)

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next valid frame's JSON value; malformed frames are dropped and counted.

        Raises:
            EOFError: the peer closed and the buffer is drained.
            queue.Empty: nothing came within ``timeout_s`` seconds.
        """
        while True:
            if self._eof:
                raise EOFError("the peer closed")
            item = self._rx.get(timeout=timeout_s)
            if item is _CLOSED:
                self._eof = True
                continue
            self._rx_slots.release()
            ok, value = parse_frame(item)
            if ok:
                return value
            with self._lock:
                self.dropped += 1

    def close(self) -> None:
        """Close this end: the peer sees end-of-stream after the frames already sent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._tx.put(_CLOSED)


def thread_memory_pair(max_buffer: int = 64) -> tuple[ThreadFrameEnd, ThreadFrameEnd]:
    """Two connected :class:`ThreadFrameEnd`; each direction buffers ``max_buffer`` frames.

    Raises:
        ValueError: ``max_buffer`` < 1.
    """
    if max_buffer < 1:
        raise ValueError("max_buffer must be at least 1")
    ab: queue.Queue[object] = queue.Queue()
    ba: queue.Queue[object] = queue.Queue()
    ab_slots = threading.Semaphore(max_buffer)
    ba_slots = threading.Semaphore(max_buffer)
    return ThreadFrameEnd(ab, ba, ab_slots, ba_slots), ThreadFrameEnd(ba, ab, ba_slots, ab_slots)
