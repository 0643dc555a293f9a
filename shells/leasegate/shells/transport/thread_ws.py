"""A reconnecting WebSocket client for threads (``websockets.sync``), a blocking transport.

:class:`ThreadWebSocketClient` is the blocking counterpart of
:class:`~leasegate.shells.transport.WebSocketClient`: one daemon thread
connects to the cloud bridge, reconnects after every loss with the same
bounded, jittered exponential :class:`~leasegate.shells.transport.Backoff`,
and puts every valid JSON text frame into an inbox that :meth:`receive`
reads. A frame that is not text or not valid JSON is dropped and counted in
:attr:`dropped`, never fatal. After each successful handshake ("the bridge
is (re-)authenticated": the handshake carries the host's credentials in
``headers``) the inbox receives a
:class:`~leasegate.shells.transport.Reauthenticated` marker before the
connection's first frame, and ``on_authenticated(n)`` is called.

The inbox is bounded (``max_inbox_frames``): while it is full the client's
thread stops reading (``websockets`` then stops reading the socket once its own
small buffer is full, and TCP pushes back on the bridge). Frames are never
dropped or reordered; the end-of-stream is never lost.

It satisfies the threading shell's transport contract
(:class:`~leasegate.shells.thread_shell.BlockingFrameTransport`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI, ProxyError
from websockets.sync.client import ClientConnection, connect

from leasegate.core import Secret

from ..diagnostics import CONNECT_TIMEOUT_S, diagnose_connect
from ._frames import (
    WIRE_LOGGER,
    InboxStats,
    Reauthenticated,
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
    DEFAULT_MAX_INBOX_FRAMES,
    DEFAULT_SEND_TIMEOUT_S,
    Backoff,
    NotConnected,
)

__all__ = ["ThreadWebSocketClient"]

_log = logging.getLogger(__name__)

#: Frames ``websockets.sync`` buffers (high-water mark) before it stops reading
#: the socket, while the client's thread waits for room in the inbox.
LIBRARY_QUEUE_FRAMES: Final = 4


class _Inbox:
    """A bounded FIFO of frames and markers, plus an end-of-stream flag.

    :meth:`put` waits while ``capacity`` items are queued, until ``stop`` is
    set (the client is closing): then a frame finds no room and is discarded
    (counted in :attr:`discarded_at_close`), while a control item (a
    ``Reauthenticated`` marker) is queued anyway. :meth:`finish` marks the end
    of the stream, which :meth:`get` reports once the queue is drained; it
    never waits for room, so it is never lost.
    """

    def __init__(self, capacity: int, stop: threading.Event) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = capacity
        self._stop = stop
        self._cond = threading.Condition()
        self._finished = False
        self.peak = 0
        self.discarded_at_close = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: Any, *, control: bool = False) -> bool:
        """Queue ``item``, waiting for room; ``False`` if discarded at close."""
        with self._cond:
            while len(self._items) >= self._capacity and not self._stop.is_set():
                self._cond.wait()
            if len(self._items) >= self._capacity and not control:
                self.discarded_at_close += 1
                return False
            self._items.append(item)
            self.peak = max(self.peak, len(self._items))
            self._cond.notify_all()
            return True

    def wake(self) -> None:
        """Wake a waiting :meth:`put` (after ``stop`` was set)."""
        with self._cond:
            self._cond.notify_all()

    def finish(self) -> None:
        """Mark the end of the stream (after the items already queued)."""
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def get(self, timeout_s: float | None) -> Any:
        """The oldest item.

        Raises:
            queue.Empty: nothing came within ``timeout_s`` seconds.
            EOFError: the stream ended and every item was taken.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._finished, timeout_s):
                raise queue.Empty
            if self._items:
                item = self._items.popleft()
                self._cond.notify_all()
                return item
            raise EOFError("the WebSocket client is closed")


class _ClosingBoundedConnection(ClientConnection):
    """``websockets.sync``' connection whose closing is bounded by ``close_timeout``.

    Once the connection is expected to close (the client failed it, e.g. 1009
    for an oversized message, or it answered the bridge's close frame) the
    bridge must close TCP; ``websockets.sync`` sets a deadline for that but
    its reading thread never looks at it (only the next write does: the
    keepalive ping, 20 s later), so a bridge that keeps TCP open held a
    failed connection that long. Here the socket is closed ``close_timeout``
    seconds after the close became expected (WS-004), which ends the
    reading thread and with it :meth:`recv`.
    """

    _abort_timer: threading.Timer | None = None

    def send_data(self) -> None:
        super().send_data()
        if (
            self._abort_timer is None
            and self.close_timeout is not None
            and self.protocol.close_expected()
        ):
            timer = threading.Timer(self.close_timeout, self.close_socket)
            timer.daemon = True
            self._abort_timer = timer
            timer.start()

    def close_socket(self) -> None:
        timer = self._abort_timer
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        super().close_socket()


def _shutdown(conn: ClientConnection) -> None:
    """Shut the connection's socket down (ends a blocked read or write)."""
    with contextlib.suppress(OSError):
        conn.socket.shutdown(socket.SHUT_RDWR)


class ThreadWebSocketClient(InboxStats):
    """A reconnecting WebSocket client carrying JSON text frames, on one thread.

    Args:
        url: ``ws://`` or ``wss://`` URL of the cloud bridge.
        headers: handshake headers; values may be :class:`Secret` (revealed
            only into the handshake, never into a repr or error).
        backoff: the reconnect policy (its ``rng`` is the injected randomness).
        max_frame_bytes: largest accepted message, bytes (default 4 MiB,
            all fragments together); a larger one fails the connection with
            close code 1009 (the frames before it are delivered), then the
            client reconnects after the backoff, as after any connection loss.
        max_inbox_frames: the inbox bound, frames and ``Reauthenticated``
            markers (default :data:`~leasegate.shells.transport.DEFAULT_MAX_INBOX_FRAMES`,
            32). While it is full the client stops reading; the bridge is
            slowed by TCP, and nothing is dropped or reordered. Worst-case
            memory held for one client: about ``max_inbox_frames`` parsed
            frames plus ``websockets``' buffer of a few frames
            (:data:`LIBRARY_QUEUE_FRAMES`) and one partial message, each at
            most ``max_frame_bytes``.
        open_timeout_s: bound on each step of opening a connection (TCP
            connect, the proxy's answer, the WebSocket handshake), seconds.
        close_timeout_s: how long a closing connection waits for the bridge
            to complete the closing handshake and close TCP, seconds (default
            10, ``websockets``' own): after the bridge's close frame or a
            failure (1009, 1007, too many fragments); then the connection is
            dropped and reconnected. (:meth:`close` has its own budget.)
        send_timeout_s: longest one :meth:`send` may block, seconds (default
            :data:`~leasegate.shells.transport.DEFAULT_SEND_TIMEOUT_S`, 5).
            ``websockets.sync`` blocks a send while the bridge does not read
            (and stops reading itself meanwhile); past this bound the
            connection is dropped (counted in :attr:`send_timeouts`), the
            send raises ``NotConnected`` and the client reconnects after the
            backoff (WS-009). Checked every tenth of it (at most 100 ms).
        proxy: ``None`` (default): connect directly, whatever proxy
            environment variables say (they are never read); or the URL of an
            ``http://`` proxy to tunnel through (HTTP ``CONNECT``, with
            ``Proxy-Authorization`` from its user info). A proxy that refuses
            is a failed connect, retried after the backoff.
        on_authenticated: called on the client's thread with the connection
            number (1, 2, …) after each successful handshake.
        on_disconnected: called on the client's thread after a connection is lost.

    Call :meth:`start` (or use ``with``), then :meth:`send` / :meth:`receive`
    from any threads; :meth:`close` stops reconnecting, closes the
    connection and joins the thread (bounded). :attr:`dropped`,
    :attr:`connections` and :attr:`delays_ms` as on ``WebSocketClient``;
    :attr:`inbox_size` and :attr:`inbox_peak` report the inbox's fill.

    It opens the TCP connection itself (directly, or to the explicit
    ``proxy``), so :meth:`close` also aborts a connect or handshake in
    progress; the repr never shows the proxy.

    Reference behavior: the runner host's bridge connection (re-authentication
    after a reconnect, LR-010, through the ``Reauthenticated`` markers).

    Raises (constructor):
        InvalidURI: ``url`` is not a WebSocket URL.
        ValueError: ``max_inbox_frames`` or ``max_frame_bytes`` below 1,
            ``send_timeout_s`` not positive; or a handshake header
            whose name or value is not valid HTTP (CR, LF, NUL; the message
            names the header, never the value).
        websockets.exceptions.InvalidProxy: ``proxy`` is not an ``http://``
            proxy URL (the message never holds its user info).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str | Secret] | None = None,
        backoff: Backoff | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inbox_frames: int = DEFAULT_MAX_INBOX_FRAMES,
        open_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
        send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        proxy: str | None = None,
        on_authenticated: Callable[[int], None] | None = None,
        on_disconnected: Callable[[], None] | None = None,
    ) -> None:
        self._uri = check_url(url)  # raises InvalidURI early (no secret in it)
        self._proxy = parse_http_proxy(proxy)
        if max_inbox_frames < 1:
            raise ValueError("max_inbox_frames must be at least 1")
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be at least 1")
        if not send_timeout_s > 0:
            raise ValueError("send_timeout_s must be positive")
        self._send_timeout = send_timeout_s
        #: Start times (monotonic seconds) of the sends in progress, by token.
        self._sending: dict[int, float] = {}
        self._send_tokens = 0
        #: Sends that blocked past ``send_timeout_s`` (each dropped its connection).
        self.send_timeouts = 0
        self._url = url
        self._headers = check_headers(headers)
        self.backoff = backoff or Backoff()
        self._max_frame = max_frame_bytes
        self._open_timeout = open_timeout_s
        self._close_timeout = close_timeout_s
        self._on_auth = on_authenticated
        self._on_disc = on_disconnected
        self._conn: ClientConnection | None = None
        #: The TCP socket of a handshake in progress (``close`` shuts it down).
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._inbox = _Inbox(max_inbox_frames, self._closing)
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasegate-ws", daemon=True)
        self.dropped = 0
        self.connections = 0
        self.delays_ms: list[int] = []
        #: Type names of unexpected errors on the client's thread (never texts).
        self.errors: list[str] = []

    def __repr__(self) -> str:
        return f"ThreadWebSocketClient(url={safe_url(self._url)!r}, connections={self.connections})"

    def __enter__(self) -> ThreadWebSocketClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._conn is not None

    @property
    def alive(self) -> bool:
        """Whether the client's thread is running."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the connection thread.

        Raises:
            RuntimeError: started twice.
        """
        self._thread.start()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called (the connection thread was started)."""
        return self._thread.ident is not None

    def wait_connected(self, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
        """Block until a connection is open (``True``), at most ``timeout_s`` seconds.

        Args:
            timeout_s: the deadline, seconds (default
                :data:`~leasegate.shells.diagnostics.CONNECT_TIMEOUT_S`, 30 s).

        Raises:
            WaitTimeout: the deadline elapsed; the message says whether the
                client was never started or how many attempts failed.
        """
        if self._connected.wait(timeout_s):
            return True
        raise diagnose_connect(
            timeout_s,
            started=self.started,
            connections=self.connections,
            attempts=len(self.delays_ms),
        )

    def send(self, value: Any) -> None:
        """Send ``value`` as one JSON text frame on the open connection.

        Raises:
            NotConnected: no connection is open, it closed while sending, or
                the send blocked past ``send_timeout_s`` (the connection was
                dropped).
            ValueError: not JSON-serializable.
        """
        conn = self._conn
        if conn is None:
            raise NotConnected("no connection to the cloud bridge")
        text = dumps_frame(value)
        with self._lock:
            self._send_tokens += 1
            token = self._send_tokens
            self._sending[token] = time.monotonic()
        try:
            conn.send(text)
        except (ConnectionClosed, OSError, RuntimeError):
            raise NotConnected("the connection to the cloud bridge closed") from None
        finally:
            with self._lock:
                self._sending.pop(token, None)

    def _watch_sends(self, conn: ClientConnection, done: threading.Event) -> None:
        """Drop ``conn`` when a send on it blocks past ``send_timeout_s`` (WS-009)."""
        poll = min(0.1, self._send_timeout / 10)
        while not done.wait(poll):
            with self._lock:
                oldest = min(self._sending.values(), default=None)
            if oldest is not None and time.monotonic() - oldest > self._send_timeout:
                self.send_timeouts += 1
                _log.warning("[transport] a send stalled; dropping the connection")
                _shutdown(conn)
                return

    def drop_connection(self) -> None:
        """Drop the open connection at once, without a closing handshake (WS-008).

        For a bridge that stopped reading: the socket is shut down, so a
        send blocked on it fails (``NotConnected``) and the client's thread
        reconnects after the backoff as after any loss (a new
        ``Reauthenticated`` marker). Never blocks; nothing happens when no
        connection is open.
        """
        with self._lock:
            conn = self._conn
        if conn is not None:
            _shutdown(conn)

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next valid frame's JSON value, or a :class:`Reauthenticated` marker.

        Taking an item makes room in the inbox, so the client resumes reading.

        Raises:
            queue.Empty: nothing came within ``timeout_s`` seconds.
            EOFError: the client was closed (after the frames already received).
        """
        return self._inbox.get(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reconnecting, close the open connection, join the thread (idempotent).

        Frames already in the inbox are still received, then ``EOFError``.
        A frame that was waiting for room, or arrives during the closing
        handshake while the inbox is full, is not delivered (counted in
        :attr:`discarded_at_close`).

        ``timeout_s`` (seconds) bounds the whole call: the closing handshake
        (a bridge that never answers the close frame, or never reads, has
        its connection dropped after three quarters of it) and the join.
        """
        deadline = time.monotonic() + timeout_s
        self._closing.set()
        self._inbox.wake()
        with self._lock:
            conn = self._conn
            sock = self._sock
        if sock is not None:  # a handshake in progress: abort it now
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if conn is not None:
            # websockets waits its close_timeout (10 s) for a bridge that never
            # answers the close frame; the caller's budget bounds it instead
            # (three quarters of it: the thread still has to wind down).
            conn.close_timeout = 0.75 * timeout_s
            # A bridge that never reads blocks websockets' writes (pongs, the
            # close frame) and with them conn.close(): past the same budget,
            # the socket is shut down under it, which ends every blocked call.
            watchdog = threading.Timer(0.75 * timeout_s, _shutdown, args=(conn,))
            watchdog.daemon = True
            watchdog.start()
            try:
                conn.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort
                self.errors.append(type(e).__name__)
            finally:
                watchdog.cancel()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        headers = {
            k: (v.reveal() if isinstance(v, Secret) else v) for k, v in self._headers.items()
        }
        try:
            while not self._closing.is_set():
                sock = self._open_socket()
                if sock is None:
                    self._wait()
                    continue
                try:
                    conn = connect(
                        self._url,
                        sock=sock,
                        additional_headers=headers,
                        max_size=self._max_frame,
                        max_queue=LIBRARY_QUEUE_FRAMES,
                        proxy=None,
                        open_timeout=self._open_timeout,
                        close_timeout=self._close_timeout,
                        compression=None,
                        logger=WIRE_LOGGER,
                        create_connection=_ClosingBoundedConnection,
                    )
                except InvalidURI:
                    sock.close()
                    self.errors.append("InvalidURI")
                    return
                except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed, ValueError):
                    # ValueError: websockets refuses to follow a redirect on our
                    # own socket (never followed: a failed handshake, retried)
                    sock.close()
                    self._wait()
                    continue
                finally:
                    with self._lock:
                        self._sock = None
                with conn:
                    self._serve(conn)
                if self._on_disc is not None:
                    self._on_disc()
                if not self._closing.is_set():
                    self._wait()
        except Exception as e:  # noqa: BLE001 - a callback failed: stop, recorded by type
            self.errors.append(type(e).__name__)
        finally:
            self._inbox.finish()

    def _open_socket(self) -> socket.socket | None:
        """The TCP connection for the next handshake (``None``: failed, or closing).

        Opened here rather than by ``websockets`` so that :meth:`close` can
        shut it down and end a handshake the bridge never answers at once;
        with a proxy, the ``CONNECT`` tunnel is set up here too.
        """
        proxy = self._proxy
        target = (proxy.host, proxy.port) if proxy else (self._uri.host, self._uri.port)
        sock = self._connect_tcp(*target)
        if sock is None:
            return None
        if proxy is not None:
            # The proxy's whole answer is one step, bounded by open_timeout_s
            # (not each read: a proxy trickling bytes must not hold it longer).
            deadline = time.monotonic() + self._open_timeout
            try:
                sock.sendall(connect_request(proxy, self._uri))
                response = ConnectResponse()
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError
                    sock.settimeout(remaining)
                    if response.feed(sock.recv(4096)):
                        break
                sock.settimeout(self._open_timeout)
            except (OSError, ProxyError):  # TimeoutError is an OSError
                with self._lock:
                    self._sock = None
                sock.close()
                return None
        return sock

    def _connect_tcp(self, host: str, port: int) -> socket.socket | None:
        """A TCP connection to ``host:port`` (``None``: failed, timed out, or closing).

        Connects without blocking and watches :meth:`close` meanwhile, so a
        host that never answers (SYNs dropped) cannot hold a close: a
        blocking ``connect`` is not interrupted by closing its socket. The
        socket is registered in ``_sock`` from the start.
        """
        deadline = time.monotonic() + self._open_timeout
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return None
        for family, kind, proto, _, address in infos:
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue
            with self._lock:
                if self._closing.is_set():
                    sock.close()
                    return None
                self._sock = sock
            limit_unsent(sock)  # a send waits once the bridge stops taking bytes (WS-009)
            try:
                sock.setblocking(False)
                err = sock.connect_ex(address)
                if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                    raise OSError(err, "connect failed")
                with selectors.DefaultSelector() as selector:
                    selector.register(sock, selectors.EVENT_WRITE)
                    while err != 0:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or self._closing.is_set():
                            raise TimeoutError
                        if selector.select(min(0.05, remaining)):
                            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                            if err:
                                raise OSError(err, "connect failed")
                            break
                sock.settimeout(self._open_timeout)
                return sock
            except OSError:  # TimeoutError is an OSError: try the next address
                with self._lock:
                    self._sock = None
                sock.close()
                if self._closing.is_set() or time.monotonic() >= deadline:
                    return None
        return None

    def _serve(self, conn: ClientConnection) -> None:
        with self._lock:
            if self._closing.is_set():
                conn.close()
                return
            self._conn = conn
        self.connections += 1
        _log.info("connected (connection %d)", self.connections)
        opened, frames = time.monotonic(), 0
        self._connected.set()
        served = threading.Event()
        threading.Thread(
            target=self._watch_sends, args=(conn, served), name="leasegate-ws-send", daemon=True
        ).start()
        self._inbox.put(Reauthenticated(self.connections), control=True)
        try:
            if self._on_auth is not None:
                self._on_auth(self.connections)
            while True:
                message = conn.recv()
                ok, value = parse_frame(message)
                if ok:
                    frames += 1
                    self._inbox.put(value)  # waits while the inbox is full
                else:
                    self.dropped += 1
        except (ConnectionClosed, OSError):
            pass
        finally:
            served.set()
            self._connected.clear()
            with self._lock:
                self._conn = None
            up_ms = (time.monotonic() - opened) * 1000
            conn.close()
            self.backoff.connection_ended(up_ms=up_ms, frames=frames)

    def _wait(self) -> None:
        delay = self.backoff.next_ms()
        self.delays_ms.append(delay)
        _log.info("connection lost or refused; reconnecting in %d ms", delay)
        self._closing.wait(delay / 1000)
