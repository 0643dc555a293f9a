"""The reconnecting anyio WebSocket client as the async shell's frame transport.

:class:`AnyioWebSocketTransport` turns the callback interface of
:class:`~leasegate.shells.transport.AnyioWebSocketClient` (``on_frame``,
``on_authenticated``, ``run``/``close``) into the pull interface the
:class:`~leasegate.shells.async_shell.AsyncRunnerShell` reads
(``send``/``receive``/``aclose``, :class:`~leasegate.shells.async_shell.FrameTransport`).
Frames and re-authentication markers go through one unbounded in-memory
stream, so the shell sees a
:class:`~leasegate.shells.transport.Reauthenticated` marker before the first
frame of each new connection, and frames in arrival order. Runs on asyncio
and trio.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc

from leasegate.core import Secret

from ._frames import Reauthenticated
from .anyio_ws import AnyioWebSocketClient
from .websocket import Backoff

__all__ = ["AnyioWebSocketTransport"]


class AnyioWebSocketTransport:
    """An :class:`AnyioWebSocketClient` behind ``send`` / ``receive`` / ``aclose``.

    Args:
        url: ``ws://`` or ``wss://`` URL of the cloud bridge.
        headers: handshake headers (values may be :class:`Secret`).
        backoff: the reconnect policy.
        client_kwargs: passed to :class:`AnyioWebSocketClient` as is
            (``max_frame_bytes``, ``ssl_context``, ``connect_timeout_s``).

    Use as ``async with AnyioWebSocketTransport(url) as transport:`` (starts
    the client's ``run`` in its own task group; leaving closes the client and
    joins it). :meth:`send` raises
    :class:`~leasegate.shells.transport.NotConnected` while disconnected (the
    shell turns that into ``SendFailed``); :meth:`receive` returns the next
    valid frame's value or a ``Reauthenticated(n)`` marker, and raises
    ``anyio.EndOfStream`` after :meth:`aclose`. :attr:`dropped` counts frames
    that were not valid JSON text (never fatal).

    Raises (constructor):
        InvalidURI: ``url`` is not a WebSocket URL.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str | Secret] | None = None,
        backoff: Backoff | None = None,
        **client_kwargs: Any,
    ) -> None:
        self._tx, self._rx = anyio.create_memory_object_stream[Any](math.inf)
        self.client = AnyioWebSocketClient(
            url,
            on_frame=self._put,
            on_authenticated=lambda n: self._put(Reauthenticated(n)),
            headers=headers,
            backoff=backoff,
            **client_kwargs,
        )
        self._tg: anyio.abc.TaskGroup | None = None
        self._connected = anyio.Event()
        self._closed = False

    def __repr__(self) -> str:
        return f"AnyioWebSocketTransport({self.client!r})"

    def _put(self, item: Any) -> None:
        if isinstance(item, Reauthenticated):
            self._connected.set()
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._tx.send_nowait(item)

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
        return await tg.__aexit__(*exc)  # type: ignore[arg-type]

    async def wait_connected(self) -> None:
        """Wait until the first connection is authenticated (bound it with a timeout)."""
        await self._connected.wait()

    async def send(self, value: Any) -> None:
        """Send one JSON value as a text frame.

        Raises:
            NotConnected: no connection is open.
            ValueError: not JSON-serializable.
        """
        await self.client.send(value)

    async def receive(self) -> Any:
        """The next valid frame's value, or a :class:`Reauthenticated` marker.

        Raises:
            anyio.EndOfStream: the transport was closed.
        """
        try:
            return await self._rx.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    async def aclose(self) -> None:
        """Stop reconnecting, close the connection, end :meth:`receive` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self.client.close()
        self._tx.close()
