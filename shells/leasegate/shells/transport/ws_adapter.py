"""The reconnecting anyio WebSocket client as the async shell's frame transport.

:class:`AnyioWebSocketTransport` turns the callback interface of
:class:`~leasegate.shells.transport.AnyioWebSocketClient` (``on_frame``,
``on_authenticated``, ``run``/``close``) into the pull interface the
:class:`~leasegate.shells.async_shell.AsyncRunnerShell` reads
(``send``/``receive``/``aclose``, :class:`~leasegate.shells.async_shell.FrameTransport`).
Frames and re-authentication markers go through one bounded inbox, so the
shell sees a :class:`~leasegate.shells.transport.Reauthenticated` marker
before the first frame of each new connection, and frames in arrival order.
While the inbox is full the client waits before reading the socket again
(backpressure); nothing is dropped or reordered, and the end of the stream
never waits for room. Runs on asyncio and trio.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from leasegate.core import Secret

from .._groups import exit_task_group
from ..diagnostics import CONNECT_TIMEOUT_S, diagnose_connect
from ._frames import InboxStats, Reauthenticated
from .anyio_ws import AnyioWebSocketClient
from .websocket import DEFAULT_MAX_INBOX_FRAMES, Backoff

__all__ = ["AnyioWebSocketTransport"]


class _AsyncInbox:
    """A bounded FIFO of frames and markers for one anyio receiver side.

    :meth:`put` waits while ``capacity`` items are queued, until
    :meth:`close`; after it a frame that finds no room is discarded (counted
    in :attr:`discarded_at_close`) and a control item is queued anyway.
    :meth:`get` returns items in order, then raises ``anyio.EndOfStream``
    once closed and drained: the end never waits for room. The end is final:
    once :meth:`get` reported it, every later item is discarded (a frame
    counted in :attr:`discarded_at_close`), so nothing ever follows it.
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = capacity
        self._closed = False
        self._ended = False  # the end of the stream was reported
        self._changed = anyio.Event()
        self.peak = 0
        self.discarded_at_close = 0

    def __len__(self) -> int:
        return len(self._items)

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def put(self, item: Any, *, control: bool = False) -> bool:
        """Queue ``item``, waiting for room; ``False`` if discarded after close."""
        while len(self._items) >= self._capacity and not self._closed:
            await self._changed.wait()
        if self._ended or (len(self._items) >= self._capacity and not control):
            if not control:
                self.discarded_at_close += 1
            return False
        self._items.append(item)
        self.peak = max(self.peak, len(self._items))
        self._notify()
        return True

    async def get(self) -> Any:
        """The oldest item.

        Raises:
            anyio.EndOfStream: closed and every item was taken.
        """
        while not self._items:
            if self._closed:
                self._ended = True
                raise anyio.EndOfStream
            await self._changed.wait()
        item = self._items.popleft()
        self._notify()
        return item

    def close(self) -> None:
        """End the stream after the items queued; wake every waiter."""
        self._closed = True
        self._notify()


class AnyioWebSocketTransport(InboxStats):
    """An :class:`AnyioWebSocketClient` behind ``send`` / ``receive`` / ``aclose``.

    Args:
        url: ``ws://`` or ``wss://`` URL of the cloud bridge.
        headers: handshake headers (values may be :class:`Secret`).
        backoff: the reconnect policy.
        max_inbox_frames: the inbox bound, frames and ``Reauthenticated``
            markers (default
            :data:`~leasegate.shells.transport.DEFAULT_MAX_INBOX_FRAMES`, 32).
            While it is full the client does not read the socket (TCP slows
            the bridge); nothing is dropped or reordered. Worst-case memory
            held: about ``max_inbox_frames`` parsed frames plus one 64 KiB
            read and one partial message of at most ``max_frame_bytes``.
        client_kwargs: passed to :class:`AnyioWebSocketClient` as is
            (``max_frame_bytes``: default 4 MiB, a larger message fails the
            connection with 1009 and the client reconnects; ``ssl_context``,
            ``connect_timeout_s``, ``close_timeout_s``: default 10 s, bounds
            a closing handshake the bridge never completes, ``proxy``:
            default none, proxy environment variables are never read).

    Use as ``async with AnyioWebSocketTransport(url) as transport:`` (starts
    the client's ``run`` in its own task group; leaving closes the client and
    joins it). :meth:`send` raises
    :class:`~leasegate.shells.transport.NotConnected` while disconnected (the
    shell turns that into ``SendFailed``); :meth:`receive` returns the next
    valid frame's value or a ``Reauthenticated(n)`` marker, and raises
    ``anyio.EndOfStream`` after :meth:`aclose` (once the items already
    queued are taken). :attr:`dropped` counts frames that were not valid JSON
    text (never fatal); :attr:`inbox_size` and :attr:`inbox_peak` report the
    inbox's fill.

    Reference behavior: the runner host's bridge connection; the markers
    carry re-authentication to the shell (LR-010).

    Raises (constructor):
        InvalidURI: ``url`` is not a WebSocket URL.
        ValueError: ``max_inbox_frames`` below 1, or a handshake header
            whose name or value is not valid HTTP (the message never shows
            the value).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str | Secret] | None = None,
        backoff: Backoff | None = None,
        max_inbox_frames: int = DEFAULT_MAX_INBOX_FRAMES,
        **client_kwargs: Any,
    ) -> None:
        if max_inbox_frames < 1:
            raise ValueError("max_inbox_frames must be at least 1")
        self._inbox = _AsyncInbox(max_inbox_frames)
        self.client = AnyioWebSocketClient(
            url,
            on_frame=self._put,
            on_authenticated=self._put_marker,
            headers=headers,
            backoff=backoff,
            **client_kwargs,
        )
        self._tg: anyio.abc.TaskGroup | None = None
        self._connected = anyio.Event()
        self._closed = False

    def __repr__(self) -> str:
        return f"AnyioWebSocketTransport({self.client!r})"

    async def _put(self, item: Any) -> None:
        await self._inbox.put(item)  # waits while the inbox is full

    async def _put_marker(self, connection: int) -> None:
        self._connected.set()
        await self._inbox.put(Reauthenticated(connection), control=True)

    @property
    def dropped(self) -> int:
        """Frames dropped as invalid JSON or non-text."""
        return self.client.dropped

    @property
    def connections(self) -> int:
        """Successful handshakes so far."""
        return self.client.connections

    async def __aenter__(self) -> AnyioWebSocketTransport:
        """Start the client's connect/reconnect loop."""
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self.client.run)
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        """Close the client and join its loop."""
        await self.aclose()
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        return await exit_task_group(tg, exc)

    @property
    def started(self) -> bool:
        """Whether the client's connect loop runs (entered, not closed)."""
        return self._tg is not None and not self._closed

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self.client.connected

    async def wait_connected(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Wait until the first connection is authenticated, at most ``timeout_s`` seconds.

        Args:
            timeout_s: the deadline, seconds (default
                :data:`~leasegate.shells.diagnostics.CONNECT_TIMEOUT_S`, 30 s).

        Raises:
            WaitTimeout: the deadline elapsed; the message says whether the
                transport was never entered or how many attempts failed.
        """
        with anyio.move_on_after(timeout_s):
            await self._connected.wait()
        if not self._connected.is_set():
            raise diagnose_connect(
                timeout_s,
                started=self.started,
                connections=self.client.connections,
                attempts=len(self.client.delays_ms),
            )

    async def send(self, value: Any) -> None:
        """Send one JSON value as a text frame.

        Raises:
            NotConnected: no connection is open.
            ValueError: not JSON-serializable.
        """
        await self.client.send(value)

    async def send_many(self, values: Sequence[Any]) -> None:
        """Send each of ``values`` as one text frame, in order, with one write
        (:meth:`AnyioWebSocketClient.send_many`).

        Raises:
            NotConnected: no connection is open, it closed, or the write
                stalled past ``send_timeout_s``.
            ValueError: a value is not JSON-serializable (nothing was sent).
        """
        await self.client.send_many(values)

    async def drop_connection(self) -> None:
        """Drop the open connection at once and reconnect (the shell's outbound
        queue overflowed: the bridge is not reading; WS-008)."""
        await self.client.drop_connection()

    async def receive(self) -> Any:
        """The next valid frame's value, or a :class:`Reauthenticated` marker.

        Taking an item makes room in the inbox, so the client resumes reading.

        Raises:
            anyio.EndOfStream: the transport was closed (after the items
                already queued were taken).
        """
        return await self._inbox.get()

    async def aclose(self) -> None:
        """Stop reconnecting, close the connection, end :meth:`receive` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._inbox.close()  # wakes a put waiting for room: the client sees the close
        await self.client.close()
