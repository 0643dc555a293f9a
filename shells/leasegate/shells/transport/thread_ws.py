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

It satisfies the threading shell's transport contract
(:class:`~leasegate.shells.thread_shell.BlockingFrameTransport`).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect

from leasegate.core import Secret

from ._frames import WIRE_LOGGER, Reauthenticated, check_url, dumps_frame, parse_frame, safe_url
from .websocket import DEFAULT_MAX_FRAME_BYTES, Backoff, NotConnected

__all__ = ["ThreadWebSocketClient"]

_EOF: Final[Any] = object()


class ThreadWebSocketClient:
    """A reconnecting WebSocket client carrying JSON text frames, on one thread.

    Args:
        url: ``ws://`` or ``wss://`` URL of the cloud bridge.
        headers: handshake headers; values may be :class:`Secret` (revealed
            only into the handshake, never into a repr or error).
        backoff: the reconnect policy (its ``rng`` is the injected randomness).
        max_frame_bytes: largest accepted frame, bytes (a larger one closes
            the connection with 1009, then it reconnects).
        open_timeout_s: bound on TCP connect + handshake, seconds.
        on_authenticated: called on the client's thread with the connection
            number (1, 2, …) after each successful handshake.
        on_disconnected: called on the client's thread after a connection is lost.

    Call :meth:`start` (or use ``with``), then :meth:`send` / :meth:`receive`
    from any threads; :meth:`close` stops reconnecting, closes the
    connection and joins the thread (bounded). :attr:`dropped`,
    :attr:`connections` and :attr:`delays_ms` as on ``WebSocketClient``.

    Raises (constructor):
        InvalidURI: ``url`` is not a WebSocket URL.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str | Secret] | None = None,
        backoff: Backoff | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        open_timeout_s: float = 10.0,
        on_authenticated: Callable[[int], None] | None = None,
        on_disconnected: Callable[[], None] | None = None,
    ) -> None:
        self._uri = check_url(url)  # raises InvalidURI early (no secret in it)
        self._url = url
        self._headers = dict(headers or {})
        self.backoff = backoff or Backoff()
        self._max_frame = max_frame_bytes
        self._open_timeout = open_timeout_s
        self._on_auth = on_authenticated
        self._on_disc = on_disconnected
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._conn: ClientConnection | None = None
        #: The TCP socket of a handshake in progress (``close`` shuts it down).
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasegate-ws", daemon=True)
        self._eof = False
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

    def wait_connected(self, timeout_s: float | None = None) -> bool:
        """Block until a connection is open (``True``) or ``timeout_s`` seconds passed."""
        return self._connected.wait(timeout_s)

    def send(self, value: Any) -> None:
        """Send ``value`` as one JSON text frame on the open connection.

        Raises:
            NotConnected: no connection is open (or it closed while sending).
            ValueError: not JSON-serializable.
        """
        conn = self._conn
        if conn is None:
            raise NotConnected("no connection to the cloud bridge")
        text = dumps_frame(value)
        try:
            conn.send(text)
        except (ConnectionClosed, OSError, RuntimeError):
            raise NotConnected("the connection to the cloud bridge closed") from None

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next valid frame's JSON value, or a :class:`Reauthenticated` marker.

        Raises:
            queue.Empty: nothing came within ``timeout_s`` seconds.
            EOFError: the client was closed (after the frames already received).
        """
        if self._eof:
            raise EOFError("the WebSocket client is closed")
        item = self._inbox.get(timeout=timeout_s)
        if item is _EOF:
            self._eof = True
            raise EOFError("the WebSocket client is closed")
        return item

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reconnecting, close the open connection, join the thread (idempotent)."""
        self._closing.set()
        with self._lock:
            conn = self._conn
            sock = self._sock
        if sock is not None:  # a handshake in progress: abort it now
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if conn is not None:
            try:
                conn.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort
                self.errors.append(type(e).__name__)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

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
                        open_timeout=self._open_timeout,
                        compression=None,
                        logger=WIRE_LOGGER,
                    )
                except InvalidURI:
                    sock.close()
                    self.errors.append("InvalidURI")
                    return
                except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed):
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
            self._inbox.put(_EOF)

    def _open_socket(self) -> socket.socket | None:
        """The TCP connection for the next handshake (``None``: failed, or closing).

        Opened here rather than by ``websockets`` so that :meth:`close` can
        shut it down and end a handshake the bridge never answers at once.
        """
        try:
            sock = socket.create_connection(
                (self._uri.host, self._uri.port), timeout=self._open_timeout
            )
        except OSError:
            return None
        with self._lock:
            if self._closing.is_set():
                sock.close()
                return None
            self._sock = sock
        return sock

    def _serve(self, conn: ClientConnection) -> None:
        with self._lock:
            if self._closing.is_set():
                conn.close()
                return
            self._conn = conn
        self.backoff.reset()
        self.connections += 1
        self._inbox.put(Reauthenticated(self.connections))
        self._connected.set()
        try:
            if self._on_auth is not None:
                self._on_auth(self.connections)
            while True:
                message = conn.recv()
                ok, value = parse_frame(message)
                if ok:
                    self._inbox.put(value)
                else:
                    self.dropped += 1
        except (ConnectionClosed, OSError):
            pass
        finally:
            self._connected.clear()
            with self._lock:
                self._conn = None
            conn.close()

    def _wait(self) -> None:
        delay = self.backoff.next_ms()
        self.delays_ms.append(delay)
        self._closing.wait(delay / 1000)
