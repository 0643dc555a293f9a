"""A reconnecting WebSocket client on anyio streams (asyncio **and** trio).

The same contract as :class:`~leasegate.shells.transport.WebSocketClient`,
built on the ``websockets`` sans-I/O protocol (``websockets.client.ClientProtocol``)
over ``anyio.connect_tcp`` (TLS for ``wss://``), so it runs under any anyio
backend. Text frames are JSON (parsed with :func:`leasegate.core.loads`);
anything else is dropped and counted; pings are answered by the protocol.

Backpressure: ``on_frame`` and ``on_authenticated`` may be coroutine
functions; the client awaits each before it handles the next frame or reads
the socket again, so a consumer that waits for room in a bounded inbox
(:class:`~leasegate.shells.transport.AnyioWebSocketTransport`) stops the
reading and TCP slows the bridge. At most one read (64 KiB) of frames is held
while the consumer waits. It connects directly (``anyio.connect_tcp``),
never through a proxy; proxy environment variables are not read.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream
from websockets.client import ClientProtocol
from websockets.exceptions import ProxyError
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State

from leasegate.core import Secret

from ._frames import (
    WIRE_LOGGER,
    check_headers,
    check_url,
    dumps_frame,
    limit_unsent,
    parse_frame,
    safe_url,
)
from ._proxy import ConnectResponse, connect_request, parse_http_proxy
from .websocket import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_SEND_TIMEOUT_S,
    Backoff,
    MaybeAsync,
    NotConnected,
    call_maybe_async,
)

__all__ = ["AnyioWebSocketClient"]

_log = logging.getLogger(__name__)

_READ_CHUNK = 65536

#: Most frames one message may come in (``websockets``' own default bound):
#: empty continuation frames count nothing towards ``max_frame_bytes``, so
#: only this bounds what a fragmented message holds. More fails the
#: connection with 1009, as an oversized message does.
MAX_FRAGMENTS = 4096


def _is_open(proto: ClientProtocol) -> bool:
    return proto.state is State.OPEN


def _is_closed(proto: ClientProtocol) -> bool:
    return proto.state is State.CLOSED


class _Conn:
    def __init__(self, stream: anyio.abc.ByteStream, proto: ClientProtocol) -> None:
        self.stream = stream
        self.proto = proto
        #: Held by the one task writing to the socket.
        self.lock = anyio.Lock()
        #: frames that arrived with the handshake response, delivered first
        self.pending: list[Frame] = []

    async def flush(self) -> None:
        """Write everything the protocol has to send, waiting for a write in progress.

        The writer writes until the protocol has nothing left, so bytes
        queued while it waits on the socket (another send, a pong) go out
        with it.
        """
        async with self.lock:
            while chunks := self.proto.data_to_send():
                await self._write(chunks)

    async def flush_unless_writing(self) -> None:
        """Write what the reading loop's events queued (pongs, close answers),
        unless a write is in progress: that writer writes them after its own.

        For the reading loop, which must not wait behind a send the bridge
        does not take. The bytes are taken before the lock (taking it yields),
        so the reading loop never writes a send's frames: a send writes them,
        under its ``send_timeout_s``.
        """
        if self.lock.locked():
            return
        chunks = self.proto.data_to_send()
        if chunks:
            async with self.lock:
                await self._write(chunks)

    async def _write(self, chunks: list[bytes]) -> None:
        # one write for every frame queued (the protocol gives one chunk per
        # frame); an empty chunk, the last one the protocol ever gives, asks
        # for the end of writing
        data = b"".join(chunks)
        if data:
            await self.stream.send(data)
        if not all(chunks):
            with contextlib.suppress(NotImplementedError, OSError, anyio.ClosedResourceError):
                await self.stream.send_eof()


class AnyioWebSocketClient:
    """A reconnecting WebSocket client carrying JSON text frames, on any anyio backend.

    Args: as :class:`~leasegate.shells.transport.WebSocketClient` (``url``,
    ``on_frame`` and ``on_authenticated``, each synchronous or a coroutine
    function that is awaited before the next frame is read, ``on_disconnected``,
    ``headers``, ``backoff``, ``max_frame_bytes``: a larger message fails the
    connection with close code 1009 and the client reconnects after the
    backoff), plus:
        ssl_context: for ``wss://`` (default: ``ssl.create_default_context()``).
        connect_timeout_s: bound on TCP connect + proxy tunnel + handshake, seconds.
        close_timeout_s: how long a closing connection waits for the bridge
            to complete the closing handshake and close TCP, seconds (default
            10, as ``websockets``), counted from :meth:`close`, from the
            bridge's close frame, or from a failure such as 1009; then the
            connection is dropped (and, unless closing, reconnected). A
            coroutine ``on_frame`` or ``on_authenticated`` still running then
            is cancelled.
        send_timeout_s: longest one :meth:`send` (or :meth:`send_many`)
            may wait for the socket to take its frames, seconds (default
            :data:`~leasegate.shells.transport.DEFAULT_SEND_TIMEOUT_S`, 5):
            past it the bridge is taken as not reading, the connection is
            dropped (counted in :attr:`send_timeouts`), the send raises
            ``NotConnected`` and the client reconnects after the backoff
            (WS-009).
        proxy: ``None`` (default): connect directly, whatever proxy
            environment variables say (they are never read); or the URL of an
            ``http://`` proxy to tunnel through (HTTP ``CONNECT``, with
            ``Proxy-Authorization`` from its user info; TLS for ``wss://``
            runs inside the tunnel). A proxy that refuses is a failed
            connect, retried after the backoff. The repr never shows it.

    :meth:`run` loops until :meth:`close` or cancellation; callbacks' exceptions
    propagate. :attr:`dropped`, :attr:`connections`, :attr:`delays_ms` as there.

    Reference behavior: the runner host's bridge connection (LR-010 through
    ``on_authenticated``).

    Raises (constructor):
        InvalidURI: ``url`` is not a WebSocket URL.
        ValueError: ``max_frame_bytes`` below 1; or a handshake header
            whose name or value is not valid HTTP (CR, LF, NUL; the message
            names the header, never the value).
        websockets.exceptions.InvalidProxy: ``proxy`` is not an ``http://``
            proxy URL (the message never holds its user info).
    """

    def __init__(
        self,
        url: str,
        *,
        on_frame: MaybeAsync,
        on_authenticated: Callable[[int], Awaitable[None] | None] | None = None,
        on_disconnected: Callable[[], None] | None = None,
        headers: Mapping[str, str | Secret] | None = None,
        backoff: Backoff | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
        send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        proxy: str | None = None,
    ) -> None:
        self._uri = check_url(url)  # raises InvalidURI early (no secret in it)
        self._proxy = parse_http_proxy(proxy)
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be at least 1")
        if not send_timeout_s > 0:
            raise ValueError("send_timeout_s must be positive")
        self._send_timeout = send_timeout_s
        #: Sends that stalled past ``send_timeout_s`` (each dropped its connection).
        self.send_timeouts = 0
        self._url = url
        self._on_frame = on_frame
        self._on_auth = on_authenticated
        self._on_disc = on_disconnected
        self._headers = check_headers(headers)
        self.backoff = backoff or Backoff()
        self._max_frame = max_frame_bytes
        self._ssl = ssl_context
        self._timeout = connect_timeout_s
        self._close_timeout = close_timeout_s
        self._conn: _Conn | None = None
        self._closing = False
        self._close_event: anyio.Event | None = None
        #: The scope of a connect + handshake in progress (``close`` cancels it).
        self._open_scope: anyio.CancelScope | None = None
        #: The scope serving an open connection (a closing handshake arms its deadline).
        self._serve_scope: anyio.CancelScope | None = None
        self.dropped = 0
        self.connections = 0
        self.delays_ms: list[int] = []
        #: Valid frames the current connection delivered (WS-007: healthy).
        self._frames = 0

    def __repr__(self) -> str:
        return f"AnyioWebSocketClient(url={safe_url(self._url)!r}, connections={self.connections})"

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._conn is not None

    async def send(self, value: Any) -> None:
        """Send ``value`` as one JSON text frame.

        Raises:
            NotConnected: no connection is open, it closed, or the send
                stalled past ``send_timeout_s`` (the connection is dropped).
            ValueError: not JSON-serializable.
        """
        await self.send_many((value,))

    async def send_many(self, values: Sequence[Any]) -> None:
        """Send each of ``values`` as one JSON text frame, in order, in one write.

        For a sender with several frames queued: one socket write (and one
        ``send_timeout_s`` bound) for all of them instead of one per frame.

        Raises:
            NotConnected: no connection is open, it closed, or the write
                stalled past ``send_timeout_s`` (the connection is dropped);
                any of the frames may then be lost.
            ValueError: a value is not JSON-serializable (nothing was sent).
        """
        conn = self._conn
        if conn is None or conn.proto.state is not State.OPEN:
            raise NotConnected("no connection to the cloud bridge")
        texts = [dumps_frame(value).encode("utf-8") for value in values]
        for text in texts:
            conn.proto.send_text(text)
        try:
            with anyio.move_on_after(self._send_timeout) as scope:
                await conn.flush()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise NotConnected("the connection to the cloud bridge closed") from None
        if scope.cancelled_caught:
            # The bridge is not reading (WS-009): waiting longer would hold
            # every later send (and the protocol's own writes) behind this one.
            self.send_timeouts += 1
            _log.warning("[transport] a send stalled; dropping the connection")
            if self._conn is conn:
                await self.drop_connection()
            raise NotConnected("a send to the cloud bridge stalled")

    async def close(self) -> None:
        """Stop reconnecting, close the open connection (close frame), and wake :meth:`run`."""
        self._closing = True
        if self._close_event is not None:
            self._close_event.set()
        if self._open_scope is not None:  # a handshake in progress: abandon it now
            self._open_scope.cancel()
        # armed first: the flush below may wait for a bridge that never reads
        self._arm_close_deadline()
        conn = self._conn
        if conn is not None and conn.proto.state is State.OPEN:
            conn.proto.send_close(CloseCode.NORMAL_CLOSURE)
            with (
                anyio.move_on_after(self._close_timeout),
                contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError),
            ):
                await conn.flush()

    async def drop_connection(self) -> None:
        """Drop the open connection at once, without a closing handshake (WS-008).

        For a bridge that stopped reading: a send blocked on it fails
        (``NotConnected``), and the client reconnects after the backoff as
        after any loss (``on_disconnected``, then ``on_authenticated(n + 1)``).
        Nothing happens when no connection is open.
        """
        conn = self._conn
        if conn is None:
            return
        scope = self._serve_scope
        if scope is not None:
            scope.cancel()
        with anyio.CancelScope(shield=True):
            await conn.stream.aclose()

    def _arm_close_deadline(self) -> None:
        """Bound the connection being closed by ``close_timeout_s`` from now:
        a bridge that never answers the close frame or never closes TCP
        cannot hold the client (RFC 6455 leaves closing TCP to the server)."""
        scope = self._serve_scope
        if scope is not None:
            scope.deadline = min(scope.deadline, anyio.current_time() + self._close_timeout)

    async def _connect_stream(self) -> anyio.abc.ByteStream:
        """TCP (and TLS for ``wss://``) to the bridge, directly or through the proxy.

        Raises:
            OSError, anyio.EndOfStream, anyio.BrokenResourceError: the
                connection or TLS failed.
            ProxyError: the proxy refused the tunnel or answered garbage.
        """
        uri = self._uri
        ctx = (self._ssl or ssl.create_default_context()) if uri.secure else None
        proxy = self._proxy
        if proxy is None:
            if ctx is None:
                return await anyio.connect_tcp(uri.host, uri.port)
            return await anyio.connect_tcp(
                uri.host, uri.port, ssl_context=ctx, tls_standard_compatible=False
            )
        tcp = await anyio.connect_tcp(proxy.host, proxy.port)
        try:
            await tcp.send(connect_request(proxy, uri))
            response = ConnectResponse()
            while True:
                try:
                    data = await tcp.receive(4096)
                except anyio.EndOfStream:
                    data = b""
                if response.feed(data):
                    break
            if ctx is None:
                return tcp
            return await TLSStream.wrap(
                tcp, hostname=uri.host, ssl_context=ctx, standard_compatible=False
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await tcp.aclose()
            raise

    async def _open(self) -> _Conn | None:
        uri = self._uri
        opened_stream: anyio.abc.ByteStream | None = None
        try:
            with anyio.move_on_after(self._timeout):
                try:
                    stream = await self._connect_stream()
                except (OSError, ProxyError, anyio.EndOfStream, anyio.BrokenResourceError):
                    return None
                opened_stream = stream
                # a send waits once the bridge stops taking bytes (WS-009)
                raw = anyio.abc.SocketAttribute.raw_socket
                limit_unsent(stream.extra(raw, None))  # noqa: S610 - anyio's typed attributes
                proto = ClientProtocol(uri, max_size=self._max_frame, logger=WIRE_LOGGER)
                request = proto.connect()
                for k, v in self._headers.items():
                    request.headers[k] = v.reveal() if isinstance(v, Secret) else v
                proto.send_request(request)
                conn = _Conn(stream, proto)
                try:
                    await conn.flush()
                    opened = False
                    while not opened:
                        data = await stream.receive(_READ_CHUNK)
                        proto.receive_data(data)
                        for ev in proto.events_received():
                            if isinstance(ev, Response):
                                if proto.handshake_exc is not None:
                                    await stream.aclose()
                                    return None
                                opened = True
                            elif isinstance(ev, Frame):
                                # frames (even a close) that came with the response
                                conn.pending.append(ev)
                except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                    await stream.aclose()
                    return None
                return conn
            if opened_stream is not None:  # the handshake timed out
                with anyio.CancelScope(shield=True):
                    await opened_stream.aclose()
            return None
        except BaseException:  # cancelled (close(), the host): never leave the socket open
            if opened_stream is not None:
                with anyio.CancelScope(shield=True):
                    await opened_stream.aclose()
            raise

    async def run(self) -> None:
        """Connect, deliver frames, reconnect with backoff; until :meth:`close`.

        Raises:
            whatever a callback raises.
        """
        self._close_event = anyio.Event()
        while not self._closing:
            conn = None
            with anyio.CancelScope() as scope:
                self._open_scope = scope
                if not self._closing:
                    conn = await self._open()
            self._open_scope = None
            if conn is None:
                await self._wait()
                continue
            self._conn = conn
            self.connections += 1
            _log.info("connected (connection %d)", self.connections)
            opened, self._frames = anyio.current_time(), 0
            try:
                with anyio.CancelScope() as scope:
                    self._serve_scope = scope
                    if self._closing:
                        self._arm_close_deadline()
                    if self._on_auth is not None:
                        await call_maybe_async(self._on_auth, self.connections)
                    await self._pump(conn)
            finally:
                self._serve_scope = None
                self._conn = None
                up_ms = (anyio.current_time() - opened) * 1000
                with anyio.CancelScope(shield=True):
                    await conn.stream.aclose()
                self.backoff.connection_ended(up_ms=up_ms, frames=self._frames)
            if self._on_disc is not None:
                self._on_disc()
            if not self._closing:
                await self._wait()

    async def _pump(self, conn: _Conn) -> None:
        proto = conn.proto
        parts: list[bytes] = []
        text = False
        events: list[Any] = list(conn.pending)
        conn.pending.clear()
        while True:
            for event in events:
                if not isinstance(event, Frame):
                    continue
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    parts, text = [bytes(event.data)], event.opcode is Opcode.TEXT
                elif event.opcode is Opcode.CONT:
                    parts.append(bytes(event.data))
                    if len(parts) > MAX_FRAGMENTS:
                        proto.fail(CloseCode.MESSAGE_TOO_BIG, "too many fragments")
                        parts = []
                        break  # nothing after it on this connection is delivered
                else:
                    continue
                if event.fin:
                    await self._deliver(b"".join(parts), text)
                    parts = []
            try:
                # pongs, close answers; a send in progress writes them, so a
                # bridge that does not take that send does not stop the reading
                await conn.flush_unless_writing()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            if _is_closed(proto):
                return
            if proto.state is State.CLOSING:  # the bridge closed, or the client failed it
                self._arm_close_deadline()
            try:
                data = await conn.stream.receive(_READ_CHUNK)
            except (
                anyio.EndOfStream,
                OSError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ):
                proto.receive_eof()
                return
            proto.receive_data(data)
            events = list(proto.events_received())

    async def _deliver(self, payload: bytes, text: bool) -> None:
        ok, value = False, None
        if text:
            try:
                ok, value = parse_frame(payload.decode("utf-8"))
            except UnicodeDecodeError:
                ok = False
        if ok:
            self._frames += 1
            await call_maybe_async(self._on_frame, value)
        else:
            self.dropped += 1

    async def _wait(self) -> None:
        delay = self.backoff.next_ms()
        self.delays_ms.append(delay)
        _log.info("connection lost or refused; reconnecting in %d ms", delay)
        assert self._close_event is not None
        with anyio.move_on_after(delay / 1000):
            await self._close_event.wait()
