"""The cloud bridge's WebSocket client (asyncio; ``websockets``).

:class:`WebSocketClient.run` connects, signals "re-authenticated" through
``on_authenticated`` after each successful (re)connect (the connection's
handshake carries the host's credentials in ``headers``), delivers every
valid JSON text frame to ``on_frame``, drops and counts every other frame, and
on any connection loss reconnects after a bounded, jittered exponential
backoff (:class:`Backoff`, randomness from an injected RNG).

Limitation: this uses the ``websockets`` asyncio implementation, so it runs
under asyncio only (including anyio on the asyncio backend). A trio shell
must run it in an asyncio loop on a worker thread, or use its own trio
WebSocket library behind the same callbacks; this is documented in
``docs/shells.md``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from leasegate.core import Secret

from ._frames import (
    WIRE_LOGGER,
    check_headers,
    check_proxy,
    dumps_frame,
    limit_unsent,
    parse_frame,
    safe_url,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_INBOX_FRAMES",
    "DEFAULT_SEND_TIMEOUT_S",
    "Backoff",
    "NotConnected",
    "WebSocketClient",
]

_log = logging.getLogger(__name__)

#: Largest message accepted, in bytes (4 MiB; the payload of all its fragments
#: together). A larger one fails the connection (close code 1009, "message too
#: big") and the client reconnects after the backoff, as after any loss.
DEFAULT_MAX_FRAME_BYTES: Final = 4 * 1024 * 1024
#: Longest one send may take, seconds, before the connection is dropped as
#: stalled (a bridge that stopped reading) and reconnected (WS-009).
DEFAULT_SEND_TIMEOUT_S: Final = 5.0

#: Default bound of a client's inbox, in frames (messages received and not yet
#: taken by the consumer). While it is full the client stops reading from the
#: socket (TCP backpressure on the bridge); frames are never dropped or reordered.
DEFAULT_MAX_INBOX_FRAMES: Final = 32

#: A callback that may be synchronous or a coroutine function (awaited).
MaybeAsync = Callable[[Any], "Awaitable[None] | None"]


async def call_maybe_async(callback: Callable[[Any], Any], arg: Any) -> None:
    """Call ``callback(arg)`` and await the result when it is awaitable."""
    result = callback(arg)
    if inspect.isawaitable(result):
        await result


class _connect_no_redirect(connect):  # noqa: N801 - websockets' lower-case class
    """``websockets``' ``connect`` that never follows a redirect.

    ``websockets`` follows up to 10, cross-origin ones included, resending
    the handshake headers (the bridge's credentials) to whatever host the
    answer names; a ``Location`` that is not ``ws://`` raised ``InvalidURI``.
    Here a redirect is a failed handshake like any other status.
    """

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


class _ClosingBoundedConnection(ClientConnection):
    """``websockets``' asyncio connection whose closing is bounded by ``close_timeout``.

    Once the connection is expected to close (the client failed it, e.g. 1009
    for an oversized message, or it answered the bridge's close frame) the
    bridge must close TCP; ``websockets`` sets a deadline for that but only
    enforces it on the next write (the keepalive ping, 20 s later), so a
    bridge that keeps TCP open held a failed connection that long. Here the
    TCP connection is aborted ``close_timeout`` seconds after the close became
    expected (WS-004).
    """

    _abort_timer: asyncio.TimerHandle | None = None

    def send_data(self) -> None:
        super().send_data()
        if (
            self._abort_timer is None
            and self.close_timeout is not None
            and self.protocol.close_expected()
        ):
            self._abort_timer = self.loop.call_later(self.close_timeout, self.transport.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._abort_timer is not None:
            self._abort_timer.cancel()
        super().connection_lost(exc)


class NotConnected(RuntimeError):  # noqa: N818 - reads as the state it reports
    """A frame was sent while no connection is open."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Backoff:
    """Bounded exponential backoff with jitter from an injected RNG.

    Delay of attempt ``n`` (0-based): ``min(max_ms, base_ms * factor**n)``
    scaled by ``1 - jitter + jitter * rng()``, so it lies in
    ``[(1 - jitter) * cap_n, cap_n]`` milliseconds. A failed connect and a
    connection that ended before it proved healthy both advance ``n``; only
    a healthy connection (:meth:`connection_ended`: it carried a frame from
    the cloud, or stayed up ``healthy_ms``) resets it to 0 (WS-007), so a
    bridge that accepts the handshake and resets the connection at once
    gets reconnects at a growing delay, not at ``base_ms`` forever.

    Attributes:
        base_ms: first delay, milliseconds.
        max_ms: the cap, milliseconds.
        factor: growth per failed attempt.
        jitter: the fraction randomized (0: none, 1: "full jitter").
        rng: returns a float in ``[0, 1)``; inject a seeded one in tests.
        healthy_ms: how long a connection that carried no frame must stay
            up to count as healthy, milliseconds (default 5000).
    """

    base_ms: int = 250
    max_ms: int = 30_000
    factor: float = 2.0
    jitter: float = 0.5
    rng: Callable[[], float] = dataclasses.field(default=random.random)
    attempt: int = 0

    def next_ms(self) -> int:
        """The next delay in milliseconds; advances the attempt counter."""
        cap = min(float(self.max_ms), self.base_ms * self.factor ** min(self.attempt, 64))
        self.attempt += 1
        r = min(max(self.rng(), 0.0), 1.0)
        return int(cap * (1 - self.jitter + self.jitter * r))

    healthy_ms: int = 5_000

    def reset(self) -> None:
        """Back to the first delay."""
        self.attempt = 0

    def connection_ended(self, *, up_ms: float, frames: int) -> None:
        """Account for a connection that ended (WS-007).

        Args:
            up_ms: how long it was open (handshake done to loss), milliseconds.
            frames: valid frames it delivered from the cloud.

        Resets the backoff when the connection was healthy (``frames > 0``
        or ``up_ms >= healthy_ms``); otherwise the next delay keeps growing.
        """
        if frames > 0 or up_ms >= self.healthy_ms:
            self.reset()


class WebSocketClient:
    """A reconnecting WebSocket client carrying JSON text frames (asyncio).

    Args:
        url: ``ws://`` or ``wss://`` URL of the cloud bridge.
        on_frame: called with each valid frame's JSON value, in order. It may
            be a coroutine function: the client awaits it before taking the
            next frame, so a slow consumer slows the reading (backpressure,
            see ``max_queue``) instead of frames piling up somewhere.
        on_authenticated: called (or awaited) with the connection number
            (1, 2, …) after each successful handshake ("re-authenticated");
            send the re-subscription frames from here.
        on_disconnected: called after a connection is lost (before the backoff).
        headers: handshake headers; values may be :class:`Secret` (revealed
            only into the handshake).
        backoff: the reconnect policy (its ``rng`` is the injected randomness).
        max_frame_bytes: largest accepted message, bytes (default
            :data:`DEFAULT_MAX_FRAME_BYTES`, 4 MiB); a larger one fails the
            connection with close code 1009 and the client reconnects after
            the backoff, like after any connection loss.
        max_queue: the inbox bound, frames (default
            :data:`DEFAULT_MAX_INBOX_FRAMES`): ``websockets``' own receive
            buffer (its ``max_queue`` high-water mark). While it holds more
            than ``max_queue`` frames ``websockets`` stops reading from the
            socket, and resumes below ``max_queue // 4``; frames are never
            dropped or reordered. (A soft bound: one read from the socket, up
            to 256 KiB, may complete several small frames at once.)
        proxy: ``None`` (default): connect directly, whatever proxy
            environment variables (``HTTPS_PROXY``, ``ALL_PROXY``, …) say; or
            the URL of a proxy to go through (``http://``, ``https://``, and
            ``socks5h://`` etc. when ``python-socks`` is installed), passed to
            ``websockets``. The environment is never consulted.
        open_timeout_s: bound on connecting (proxy included) and the
            opening handshake, seconds (default 10).
        close_timeout_s: how long a closing connection waits for the bridge
            to complete the closing handshake, seconds (default 10), after
            :meth:`close`, the bridge's close frame or a failure (1009);
            then ``websockets`` drops the connection.
        send_timeout_s: longest one :meth:`send` may wait for the socket,
            seconds (default :data:`DEFAULT_SEND_TIMEOUT_S`); a stalled send
            drops the connection (WS-009). Positive, else ``ValueError``.
        sleep: the sleep function (seconds); tests may inject one.

    Raises (constructor):
        ValueError: ``max_queue`` or ``max_frame_bytes`` below 1; or a handshake header
            whose name or value is not valid HTTP (CR, LF, NUL; the message
            names the header, never the value).
        websockets.exceptions.InvalidProxy: ``proxy`` is not a supported
            proxy URL (the message never holds its user info).

    :meth:`run` loops until :meth:`close` or cancellation; exceptions raised by
    the callbacks propagate out of it. :attr:`dropped` counts frames that were
    not text or not valid JSON; :attr:`connections` counts successful
    handshakes; :attr:`delays_ms` records every backoff delay taken.

    Reference behavior: the bridge client of the runner host (LR-010:
    re-authentication after a reconnect re-asks pending lease requests).
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
        max_queue: int = DEFAULT_MAX_INBOX_FRAMES,
        proxy: str | None = None,
        open_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
        send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        if not send_timeout_s > 0:
            raise ValueError("send_timeout_s must be positive")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be at least 1")
        self._url = url
        self._on_frame = on_frame
        self._on_auth = on_authenticated
        self._on_disc = on_disconnected
        self._headers = check_headers(headers)
        self.backoff = backoff or Backoff()
        self._max_frame = max_frame_bytes
        self._max_queue = max_queue
        self._proxy = check_proxy(proxy)
        self._sleep = sleep
        self._open_timeout = open_timeout_s
        self._close_timeout = close_timeout_s
        self._send_timeout = send_timeout_s
        #: Sends that stalled past ``send_timeout_s`` (each dropped its connection, WS-009).
        self.send_timeouts = 0
        self._conn: ClientConnection | None = None
        #: The connect + handshake in progress (``close`` cancels it).
        self._attempt: asyncio.Future[ClientConnection] | None = None
        #: Set by ``close`` to end a backoff wait in progress.
        self._closed_event: asyncio.Event | None = None
        self._closing = False
        self.dropped = 0
        self.connections = 0
        self.delays_ms: list[int] = []

    def __repr__(self) -> str:
        return f"WebSocketClient(url={safe_url(self._url)!r}, connections={self.connections})"

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._conn is not None

    @property
    def buffered_frames(self) -> int:
        """Frames ``websockets`` holds for this client, received and not yet delivered.

        A diagnostic (it reads ``websockets``' receive buffer; 0 when no
        connection is open or the installed version keeps it elsewhere).
        """
        conn = self._conn
        frames = getattr(getattr(conn, "recv_messages", None), "frames", None)
        try:
            return len(frames) if frames is not None else 0
        except TypeError:
            return 0

    async def send(self, value: Any) -> None:
        """Send ``value`` as one JSON text frame on the open connection.

        A send that cannot finish within ``send_timeout_s`` seconds (the
        bridge stopped reading) drops the connection, is counted in
        :attr:`send_timeouts`, and raises ``NotConnected``; the client
        reconnects (WS-009).

        Raises:
            NotConnected: no connection is open, it closed, or the send
                stalled (the caller resends after the next ``on_authenticated``).
            ValueError: not JSON-serializable.
        """
        conn = self._conn
        if conn is None:
            raise NotConnected("no connection to the cloud bridge")
        text = dumps_frame(value)
        try:
            await asyncio.wait_for(conn.send(text), self._send_timeout)
        except ConnectionClosed:
            raise NotConnected("the connection to the cloud bridge closed") from None
        except TimeoutError:
            self.send_timeouts += 1
            _log.warning("a send stalled; dropping the connection")
            conn.transport.abort()  # the serve loop sees it closed and reconnects
            raise NotConnected("a send to the cloud bridge stalled") from None

    async def close(self) -> None:
        """Stop reconnecting and close the open connection; :meth:`run` returns.

        A connect or handshake in progress is abandoned at once (its socket
        closed), and so is a backoff wait; no connection is served after
        ``close``.
        """
        self._closing = True
        if self._attempt is not None:
            self._attempt.cancel()
        if self._closed_event is not None:
            self._closed_event.set()
        conn = self._conn
        if conn is not None:
            await conn.close()

    async def run(self) -> None:
        """Connect, deliver frames, reconnect with backoff; until :meth:`close`.

        Raises:
            InvalidURI: ``url`` is not a WebSocket URL (not retried).
            whatever a callback raises.
        """
        headers = {
            k: (v.reveal() if isinstance(v, Secret) else v) for k, v in self._headers.items()
        }
        while not self._closing:
            attempt = asyncio.ensure_future(self._open(headers))
            self._attempt = attempt
            try:
                await asyncio.wait({attempt})
            finally:
                self._attempt = None
                if not attempt.done():  # run() itself was cancelled
                    attempt.cancel()
            if attempt.cancelled():  # close() abandoned the connect or handshake
                break
            try:
                conn = attempt.result()
            except InvalidURI:
                conn = None
            except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed):
                await self._wait()
                continue
            if conn is None:  # raised outside the except block: no __context__ with the URL
                raise InvalidURI(safe_url(self._url), "not a WebSocket URL")
            if self._closing:  # close() came as the handshake completed
                await conn.close()
                break
            self._conn = conn
            self.connections += 1
            _log.info("connected (connection %d)", self.connections)
            # a send waits once the bridge stops taking bytes (WS-009)
            limit_unsent(conn.transport.get_extra_info("socket"))
            loop = asyncio.get_running_loop()
            opened, frames = loop.time(), 0
            try:
                if self._on_auth is not None:
                    await call_maybe_async(self._on_auth, self.connections)
                async for message in conn:
                    ok, value = parse_frame(message)
                    if ok:
                        frames += 1
                        await call_maybe_async(self._on_frame, value)
                    else:
                        self.dropped += 1
            except ConnectionClosed:
                pass
            finally:
                self._conn = None
                up_ms = (loop.time() - opened) * 1000
                await conn.close()
                self.backoff.connection_ended(up_ms=up_ms, frames=frames)
            if self._on_disc is not None:
                self._on_disc()
            if not self._closing:
                await self._wait()

    async def _open(self, headers: dict[str, str]) -> ClientConnection:
        return await _connect_no_redirect(
            self._url,
            additional_headers=headers,
            max_size=self._max_frame,
            max_queue=self._max_queue,
            proxy=self._proxy,
            open_timeout=self._open_timeout,
            close_timeout=self._close_timeout,
            compression=None,
            logger=WIRE_LOGGER,
            create_connection=_ClosingBoundedConnection,
        )

    async def _wait(self) -> None:
        delay = self.backoff.next_ms()
        self.delays_ms.append(delay)
        _log.info("connection lost or refused; reconnecting in %d ms", delay)
        if self._closing:
            return
        # close() ends the wait at once rather than after the backoff delay
        closed = self._closed_event = asyncio.Event()
        sleeper = asyncio.ensure_future(self._sleep(delay / 1000))
        waker = asyncio.ensure_future(closed.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._closed_event = None
            sleeper.cancel()
            waker.cancel()
