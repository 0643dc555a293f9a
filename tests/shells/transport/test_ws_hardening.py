"""WebSocket transport hardening (WS-001 to WS-006 in ``docs/transport.md``).

For each WebSocket client (asyncio ``WebSocketClient``, anyio
``AnyioWebSocketTransport`` on asyncio and trio, ``ThreadWebSocketClient``):
a fast sender against a slow consumer keeps the inbox at its bound, holds the
sender back and delivers every frame in order (WS-001); the end of the stream
and the re-authentication markers are never lost or overtaken by a full inbox
(WS-002); closing with a full inbox is prompt (WS-003); an oversized message
fails the connection with 1009 and the client reconnects (WS-004); proxy
environment variables are ignored (WS-005); an explicit proxy is used and its
credentials never shown (WS-006). Every server is on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
import wait_kit
from websockets.asyncio.client import connect as default_connect
from websockets.exceptions import ConnectionClosed, InvalidProxy
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as ws_serve

from leasegate.shells.transport import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_INBOX_FRAMES,
    AnyioWebSocketTransport,
    Backoff,
    Reauthenticated,
    ThreadWebSocketClient,
    WebSocketClient,
)

CANARY = "CANARY-ws-hardening"
FAST = {"base_ms": 10, "max_ms": 20}

#: The flood: N frames of about PAD bytes each (N * PAD far above what the
#: bounded buffers and the socket buffers together can hold).
N = 400
PAD = 16 * 1024
BOUND = 8


def _frame(i: int) -> dict[str, Any]:
    return {"i": i, "pad": "x" * PAD}


def _frame_text(i: int) -> str:
    return f'{{"i":{i},"pad":"{"x" * PAD}"}}'


class Bridge:
    """A websockets (sync) server on 127.0.0.1 in a thread.

    ``handler(ws, n)`` serves connection ``n`` (1, 2, …); :attr:`close_codes`
    holds the close code each connection received from the client (``None``:
    none received).
    """

    def __init__(self, handler: Callable[[ServerConnection, int], None]) -> None:
        self._handler = handler
        self.connections = 0
        self.close_codes: dict[int, int | None] = {}
        self._lock = threading.Lock()
        self._server = ws_serve(self._serve, "127.0.0.1", 0)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}"

    def _serve(self, ws: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
            n = self.connections
        try:
            self._handler(ws, n)
        except ConnectionClosed as e:
            self.close_codes[n] = e.rcvd.code if e.rcvd is not None else None
            return
        try:
            ws.recv(2)
        except ConnectionClosed as e:
            self.close_codes[n] = e.rcvd.code if e.rcvd is not None else None
        except TimeoutError:
            pass

    def __enter__(self) -> Bridge:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join(5)


class Flood:
    """Connection 1 sends N frames as fast as the socket takes them, counting."""

    def __init__(self, frames: int = N) -> None:
        self.frames = frames
        self.sent = 0
        self.done = threading.Event()

    def __call__(self, ws: ServerConnection, n: int) -> None:
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
        for i in range(self.frames):
            ws.send(_frame_text(i))
            self.sent += 1
        self.done.set()
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            ws.recv(5)


_wait_until = wait_kit.wait_until
_await_until = wait_kit.await_until


# ------------------------------------------------------------------ defaults


def test_WS_001_defaults_are_a_bounded_inbox_and_a_4_MiB_message_limit() -> None:
    assert DEFAULT_MAX_INBOX_FRAMES == 32
    assert DEFAULT_MAX_FRAME_BYTES == 4 * 1024 * 1024
    url = "ws://127.0.0.1:9"
    for make in (
        lambda: ThreadWebSocketClient(url, max_inbox_frames=0),
        lambda: AnyioWebSocketTransport(url, max_inbox_frames=0),
        lambda: WebSocketClient(url, on_frame=lambda v: None, max_queue=0),
        lambda: ThreadWebSocketClient(url, max_frame_bytes=0),
    ):
        with pytest.raises(ValueError, match="at least 1"):
            make()


# ------------------------------------------------ WS-001: bound + backpressure


def test_WS_001_thread_client_fast_sender_slow_consumer_inbox_stays_at_bound() -> None:
    flood = Flood()
    with (
        Bridge(flood) as bridge,
        ThreadWebSocketClient(
            bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST)
        ) as client,
    ):
        assert client.receive(5) == Reauthenticated(1)
        _wait_until(lambda: client.inbox_size == BOUND)
        time.sleep(0.1)  # the sender had time to run ahead: nothing more may pile up
        assert client.inbox_size == BOUND
        assert flood.sent < N  # the sender is held back: the client stopped reading
        got = [client.receive(5) for _ in range(N)]
        # The bridge marks itself done after its last send returns, which can
        # be just after the client took that frame: wait for it (bounded).
        assert flood.done.wait(5)
        assert got == [_frame(i) for i in range(N)]
        assert client.inbox_peak == BOUND
        assert client.dropped == 0
        with pytest.raises(queue.Empty):
            client.receive(0.01)


@pytest.mark.anyio
async def test_WS_001_anyio_transport_fast_sender_slow_consumer_inbox_stays_at_bound(
    anyio_backend: str,
) -> None:
    flood = Flood()
    with Bridge(flood) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST)
        ) as transport:
            with anyio.fail_after(5):
                assert await transport.receive() == Reauthenticated(1)
            await _await_until(lambda: transport.inbox_size == BOUND)
            await anyio.sleep(0.1)
            assert transport.inbox_size == BOUND
            assert flood.sent < N
            with anyio.fail_after(10):
                got = [await transport.receive() for _ in range(N)]
            assert got == [_frame(i) for i in range(N)]
            assert transport.inbox_peak == BOUND
            assert transport.dropped == 0


def test_WS_001_asyncio_client_fast_sender_slow_consumer_buffer_stays_at_bound() -> None:
    # The asyncio client's inbox is websockets' own receive buffer (max_queue);
    # a slow consumer is a coroutine on_frame, awaited before the next frame.
    flood = Flood()
    got: list[Any] = []
    peaks: list[int] = []

    async def main(url: str) -> None:
        gate = asyncio.Event()
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            peaks.append(client.buffered_frames)
            await gate.wait()
            got.append(value)
            if len(got) == N:
                await client.close()

        client = WebSocketClient(url, on_frame=on_frame, max_queue=BOUND, backoff=Backoff(**FAST))
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(5):
            while client.buffered_frames < BOUND:
                await asyncio.sleep(0.002)
        await asyncio.sleep(0.1)
        held = client.buffered_frames
        sent_while_held = flood.sent
        gate.set()
        with anyio.fail_after(10):
            await task
        # one socket read (256 KiB) may complete a few frames past the mark
        assert BOUND <= held <= BOUND + 1 + (256 * 1024) // PAD
        assert sent_while_held < N

    with Bridge(flood) as bridge:
        asyncio.run(main(bridge.url))
    assert got == [_frame(i) for i in range(N)]
    assert max(peaks) <= BOUND + 1 + (256 * 1024) // PAD


# ------------------------------- WS-002: control items survive a full inbox


class FloodThenReconnect:
    """Connection 1 sends 3 * BOUND frames and closes; connection 2 sends one."""

    def __call__(self, ws: ServerConnection, n: int) -> None:
        if n == 1:
            for i in range(3 * BOUND):
                ws.send(f'{{"c":1,"i":{i}}}')
            ws.close()
            return
        ws.send('{"c":2,"i":0}')


_EXPECTED_RECONNECT = [
    Reauthenticated(1),
    *[{"c": 1, "i": i} for i in range(3 * BOUND)],
    Reauthenticated(2),
    {"c": 2, "i": 0},
]


def test_WS_002_thread_client_markers_and_eof_never_lost_behind_a_full_inbox() -> None:
    with Bridge(FloodThenReconnect()) as bridge:
        client = ThreadWebSocketClient(bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST))
        with client:
            _wait_until(lambda: client.inbox_size == BOUND)
            got = [client.receive(5) for _ in range(len(_EXPECTED_RECONNECT))]
            assert got == _EXPECTED_RECONNECT
            _wait_until(lambda: bridge.connections == 2)
        # closed: the end of the stream is reported at once, and stays
        for _ in range(2):
            with pytest.raises(EOFError):
                client.receive(1)
        assert client.inbox_peak <= BOUND


class FillThenReconnect:
    """Connection 1 sends BOUND - 1 frames (with its marker the inbox is then
    full) and closes; connection 2 sends one frame."""

    def __call__(self, ws: ServerConnection, n: int) -> None:
        if n == 1:
            for i in range(BOUND - 1):
                ws.send(f'{{"c":1,"i":{i}}}')
            ws.close()
            return
        ws.send('{"c":2,"i":0}')


_EXPECTED_FILL = [
    Reauthenticated(1),
    *[{"c": 1, "i": i} for i in range(BOUND - 1)],
    Reauthenticated(2),
    {"c": 2, "i": 0},
]


def test_WS_002_thread_client_marker_of_a_reconnect_waits_for_room_in_a_full_inbox() -> None:
    with Bridge(FillThenReconnect()) as bridge:
        client = ThreadWebSocketClient(bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST))
        with client:
            _wait_until(lambda: bridge.connections == 2 and client.inbox_size == BOUND)
            time.sleep(0.05)  # connection 2's marker and frame have arrived; no room
            assert client.inbox_size == BOUND
            got = [client.receive(5) for _ in range(len(_EXPECTED_FILL))]
            assert got == _EXPECTED_FILL
            assert client.inbox_peak == BOUND


def test_WS_002_thread_client_frames_queued_before_close_are_received_then_eof() -> None:
    flood = Flood(frames=3 * BOUND)
    with Bridge(flood) as bridge:
        client = ThreadWebSocketClient(bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST))
        client.start()
        _wait_until(lambda: client.inbox_size == BOUND)
        client.close()
        got: list[Any] = []
        with contextlib.suppress(EOFError):
            while True:
                got.append(client.receive(1))
        with pytest.raises(EOFError):
            client.receive(1)
    assert got[0] == Reauthenticated(1)
    assert got[1:] == [_frame(i) for i in range(len(got) - 1)]  # in order, no gap
    assert len(got) >= BOUND


@pytest.mark.anyio
async def test_WS_002_anyio_transport_markers_and_eof_never_lost_behind_a_full_inbox(
    anyio_backend: str,
) -> None:
    with Bridge(FloodThenReconnect()) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST)
        ) as transport:
            await _await_until(lambda: transport.inbox_size == BOUND)
            with anyio.fail_after(5):
                got = [await transport.receive() for _ in range(len(_EXPECTED_RECONNECT))]
            assert got == _EXPECTED_RECONNECT
        for _ in range(2):
            with pytest.raises(anyio.EndOfStream):
                await transport.receive()
        assert transport.inbox_peak <= BOUND


@pytest.mark.anyio
async def test_WS_002_anyio_transport_marker_of_a_reconnect_waits_for_room_in_a_full_inbox(
    anyio_backend: str,
) -> None:
    with Bridge(FillThenReconnect()) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST)
        ) as transport:
            await _await_until(lambda: bridge.connections == 2 and transport.inbox_size == BOUND)
            await anyio.sleep(0.05)
            assert transport.inbox_size == BOUND
            with anyio.fail_after(5):
                got = [await transport.receive() for _ in range(len(_EXPECTED_FILL))]
            assert got == _EXPECTED_FILL
            assert transport.inbox_peak == BOUND


# ------------------------------------------ WS-003: close with a full inbox


def test_WS_003_thread_client_close_with_a_full_inbox_is_prompt() -> None:
    flood = Flood()
    with Bridge(flood) as bridge:
        client = ThreadWebSocketClient(bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST))
        client.start()
        _wait_until(lambda: client.inbox_size == BOUND)
        time.sleep(0.05)  # the client's thread waits for room; websockets' buffer is full
        started = time.monotonic()
        client.close(timeout_s=5)
        assert time.monotonic() - started < 1.5
        assert not client.alive
        assert client.errors == []
        _wait_until(lambda: 1 in bridge.close_codes)
        assert bridge.close_codes[1] == 1000  # a clean close handshake, not a timeout


@pytest.mark.anyio
async def test_WS_003_anyio_transport_close_with_a_full_inbox_is_prompt(
    anyio_backend: str,
) -> None:
    flood = Flood()
    with Bridge(flood) as bridge:
        with anyio.fail_after(5):
            async with AnyioWebSocketTransport(
                bridge.url, max_inbox_frames=BOUND, backoff=Backoff(**FAST)
            ) as transport:
                await _await_until(lambda: transport.inbox_size == BOUND)
                await anyio.sleep(0.05)
                started = time.monotonic()
        assert time.monotonic() - started < 1.5
        _wait_until(lambda: 1 in bridge.close_codes)
        assert bridge.close_codes[1] == 1000


# ------------------------------------------------- WS-004: oversized message

LIMIT = 1024


class Oversized:
    """Connection 1: a good frame, a message one byte over LIMIT, a frame that
    must never arrive; connection 2: a good frame."""

    def __call__(self, ws: ServerConnection, n: int) -> None:
        if n == 1:
            ws.send('{"c":1,"ok":true}')
            body = '{"pad":"' + "y" * LIMIT + '"}'
            ws.send(body[: LIMIT + 1])  # not JSON either way: it must never be parsed
            ws.send('{"c":1,"late":true}')
            return
        ws.send('{"c":2,"ok":true}')


_EXPECTED_OVERSIZED = [
    Reauthenticated(1),
    {"c": 1, "ok": True},
    Reauthenticated(2),
    {"c": 2, "ok": True},
]


def test_WS_004_thread_client_oversized_message_fails_the_connection_1009_and_reconnects() -> None:
    with (
        Bridge(Oversized()) as bridge,
        ThreadWebSocketClient(bridge.url, max_frame_bytes=LIMIT, backoff=Backoff(**FAST)) as client,
    ):
        got = [client.receive(5) for _ in range(len(_EXPECTED_OVERSIZED))]
        assert got == _EXPECTED_OVERSIZED
        assert client.dropped == 0
        assert bridge.close_codes[1] == 1009
        assert len(client.delays_ms) == 1  # one backoff, as after any connection loss


@pytest.mark.anyio
async def test_WS_004_anyio_transport_oversized_message_fails_the_connection_1009_and_reconnects(
    anyio_backend: str,
) -> None:
    with Bridge(Oversized()) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, max_frame_bytes=LIMIT, backoff=Backoff(**FAST)
        ) as transport:
            with anyio.fail_after(5):
                got = [await transport.receive() for _ in range(len(_EXPECTED_OVERSIZED))]
        assert got == _EXPECTED_OVERSIZED
        assert transport.dropped == 0
        assert bridge.close_codes[1] == 1009
        assert len(transport.client.delays_ms) == 1


def test_WS_004_asyncio_client_oversized_message_fails_the_connection_1009_and_reconnects() -> None:
    frames: list[Any] = []
    auths: list[int] = []

    async def main(url: str) -> WebSocketClient:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            frames.append(value)
            if value == {"c": 2, "ok": True}:
                await client.close()

        client = WebSocketClient(
            url,
            on_frame=on_frame,
            on_authenticated=auths.append,
            max_frame_bytes=LIMIT,
            backoff=Backoff(**FAST),
        )
        with anyio.fail_after(5):
            await client.run()
        return client

    with Bridge(Oversized()) as bridge:
        client = asyncio.run(main(bridge.url))
        _wait_until(lambda: 1 in bridge.close_codes)
        assert bridge.close_codes[1] == 1009
    assert auths == [1, 2]
    assert frames == [{"c": 1, "ok": True}, {"c": 2, "ok": True}]
    assert client.dropped == 0
    assert len(client.delays_ms) == 1


# ---------------------------------------------------- WS-005: no ambient proxy


class ProxyTrap:
    """A TCP listener on 127.0.0.1 standing in for a proxy: it records every
    connection it gets and answers none (a client that used it would hang)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.hits = 0
        self._accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.hits += 1
            self._accepted.append(conn)

    def __enter__(self) -> ProxyTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        for s in self._accepted:
            s.close()
        self._listener.close()


_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProxyTrap]:
    """Every proxy variable (both cases) points at a trap; no bypass list."""
    with ProxyTrap() as trap:
        for name in _PROXY_VARS:
            monkeypatch.setenv(name, trap.url)
            monkeypatch.setenv(name.lower(), trap.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        yield trap


def _hello(ws: ServerConnection, n: int) -> None:
    ws.send('{"kind":"hello"}')


def test_WS_005_the_proxy_env_really_diverts_websockets_default_connect(
    proxy_env: ProxyTrap,
) -> None:
    # The premise: with these variables, websockets' default (proxy=True) goes
    # to the trap, so the tests below would catch a client that honours them.
    async def main(url: str) -> None:
        with pytest.raises((TimeoutError, OSError, ConnectionError, Exception)):
            async with default_connect(url, open_timeout=0.3):
                pass

    with Bridge(_hello) as bridge:
        asyncio.run(main(bridge.url))
        assert bridge.connections == 0
    assert proxy_env.hits == 1


def test_WS_005_asyncio_client_ignores_proxy_env(proxy_env: ProxyTrap) -> None:
    frames: list[Any] = []

    async def main(url: str) -> None:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            frames.append(value)
            await client.close()

        client = WebSocketClient(url, on_frame=on_frame, backoff=Backoff(**FAST))
        with anyio.fail_after(2):
            await client.run()

    with Bridge(_hello) as bridge:
        asyncio.run(main(bridge.url))
        assert bridge.connections == 1
    assert frames == [{"kind": "hello"}]
    assert proxy_env.hits == 0


def test_WS_005_thread_client_ignores_proxy_env(proxy_env: ProxyTrap) -> None:
    with (
        Bridge(_hello) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST)) as client,
    ):
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"kind": "hello"}
        assert bridge.connections == 1
    assert proxy_env.hits == 0


@pytest.mark.anyio
async def test_WS_005_anyio_transport_ignores_proxy_env(
    anyio_backend: str, proxy_env: ProxyTrap
) -> None:
    with Bridge(_hello) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=Backoff(**FAST)) as transport:
            with anyio.fail_after(2):
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"kind": "hello"}
        assert bridge.connections == 1
    assert proxy_env.hits == 0


# --------------------------------------------------- WS-006: explicit proxy


class ConnectProxy:
    """A minimal HTTP CONNECT proxy on 127.0.0.1 (threads), recording targets."""

    def __init__(self, *, refuse: bool = False) -> None:
        self._refuse = refuse
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.targets: list[str] = []
        self.auth: list[str] = []
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self.port = self._listener.getsockname()[1]

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                self._socks.append(conn)
                t = threading.Thread(target=self._tunnel, args=(conn,), daemon=True)
                self._threads.append(t)
                t.start()

    def _tunnel(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        target = lines[0].split(" ")[1]
        self.targets.append(target)
        self.auth += [x for x in lines[1:] if x.lower().startswith("proxy-authorization")]
        if self._refuse:
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            conn.close()
            return
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        self._socks.append(upstream)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pump(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        t.start()
        pump(conn, upstream)
        t.join(2)

    def __enter__(self) -> ConnectProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()


def test_WS_006_asyncio_client_goes_through_an_explicit_proxy_only(
    proxy_env: ProxyTrap,
) -> None:
    frames: list[Any] = []

    async def main(url: str, proxy: str) -> WebSocketClient:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            frames.append(value)
            await client.close()

        client = WebSocketClient(url, on_frame=on_frame, proxy=proxy, backoff=Backoff(**FAST))
        assert CANARY not in repr(client)
        with anyio.fail_after(2):
            await client.run()
        return client

    with Bridge(_hello) as bridge, ConnectProxy() as proxy:
        asyncio.run(main(bridge.url, f"http://user:{CANARY}@127.0.0.1:{proxy.port}"))
        assert bridge.connections == 1
        port = bridge.url.rsplit(":", 1)[1]
    assert frames == [{"kind": "hello"}]
    assert proxy.targets == [f"127.0.0.1:{port}"]
    assert len(proxy.auth) == 1  # the proxy's credentials went to the proxy only
    assert proxy_env.hits == 0  # the environment's proxy was not consulted


def test_WS_006_thread_client_goes_through_an_explicit_http_proxy_only(
    proxy_env: ProxyTrap,
) -> None:
    with Bridge(_hello) as bridge, ConnectProxy() as proxy:
        client = ThreadWebSocketClient(
            bridge.url,
            proxy=f"http://user:{CANARY}@127.0.0.1:{proxy.port}",
            backoff=Backoff(**FAST),
        )
        assert CANARY not in repr(client)
        with client:
            assert client.receive(2) == Reauthenticated(1)
            assert client.receive(2) == {"kind": "hello"}
        assert bridge.connections == 1
        port = bridge.url.rsplit(":", 1)[1]
    assert proxy.targets == [f"127.0.0.1:{port}"]
    assert len(proxy.auth) == 1
    assert proxy_env.hits == 0
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_006_anyio_transport_goes_through_an_explicit_http_proxy_only(
    anyio_backend: str, proxy_env: ProxyTrap
) -> None:
    with Bridge(_hello) as bridge, ConnectProxy() as proxy:
        async with AnyioWebSocketTransport(
            bridge.url,
            proxy=f"http://user:{CANARY}@127.0.0.1:{proxy.port}",
            backoff=Backoff(**FAST),
        ) as transport:
            assert CANARY not in repr(transport)
            with anyio.fail_after(2):
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"kind": "hello"}
        assert bridge.connections == 1
        port = bridge.url.rsplit(":", 1)[1]
    assert proxy.targets == [f"127.0.0.1:{port}"]
    assert len(proxy.auth) == 1
    assert proxy_env.hits == 0


def _self_signed_localhost() -> tuple[bytes, bytes]:
    """A throwaway certificate and key (PEM) for 127.0.0.1."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leasegate-test-bridge")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.mark.anyio
@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "proxy"])
async def test_WS_006_anyio_transport_wss_directly_and_inside_the_proxy_tunnel(
    anyio_backend: str, through_proxy: bool, tmp_path: Any, proxy_env: ProxyTrap
) -> None:
    import ssl

    pytest.importorskip("cryptography")
    cert_pem, key_pem = _self_signed_localhost()
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    client_ctx = ssl.create_default_context(cadata=cert_pem.decode())

    def handler(ws: ServerConnection) -> None:
        ws.send('{"kind":"hello","tls":true}')
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            ws.recv(2)

    server = ws_serve(handler, "127.0.0.1", 0, ssl=server_ctx)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.socket.getsockname()[1]
    try:
        with ConnectProxy() as proxy:
            async with AnyioWebSocketTransport(
                f"wss://127.0.0.1:{port}",
                ssl_context=client_ctx,
                proxy=f"http://127.0.0.1:{proxy.port}" if through_proxy else None,
                backoff=Backoff(**FAST),
            ) as transport:
                with anyio.fail_after(3):
                    assert await transport.receive() == Reauthenticated(1)
                    assert await transport.receive() == {"kind": "hello", "tls": True}
            assert proxy.targets == ([f"127.0.0.1:{port}"] if through_proxy else [])
    finally:
        server.shutdown()
        thread.join(5)
    assert proxy_env.hits == 0


def test_WS_006_thread_client_retries_after_a_proxy_refusal() -> None:
    with Bridge(_hello) as bridge, ConnectProxy(refuse=True) as proxy:
        client = ThreadWebSocketClient(
            bridge.url,
            proxy=f"http://user:{CANARY}@127.0.0.1:{proxy.port}",
            backoff=Backoff(base_ms=5, max_ms=10),
        )
        with client:
            _wait_until(lambda: len(proxy.targets) >= 3)
            assert not client.connected
        assert bridge.connections == 0
    assert client.connections == 0
    assert len(client.delays_ms) >= 2
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_006_anyio_transport_retries_after_a_proxy_refusal(anyio_backend: str) -> None:
    with Bridge(_hello) as bridge, ConnectProxy(refuse=True) as proxy:
        async with AnyioWebSocketTransport(
            bridge.url,
            proxy=f"http://user:{CANARY}@127.0.0.1:{proxy.port}",
            backoff=Backoff(base_ms=5, max_ms=10),
        ) as transport:
            await _await_until(lambda: len(proxy.targets) >= 3)
        assert bridge.connections == 0
    assert transport.connections == 0
    assert len(transport.client.delays_ms) >= 2


def test_WS_006_the_connect_response_is_read_strictly() -> None:
    from websockets.exceptions import ProxyError

    from leasegate.shells.transport._proxy import ConnectResponse

    ok = ConnectResponse()
    assert ok.feed(b"HTTP/1.1 200 Connection") is False
    assert ok.feed(b" established\r\nVia: test\r\n\r\n") is True
    refusals = {
        b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n": "HTTP 407",
        b"HTTP/1.0 502 Bad Gateway\r\n\r\n": "HTTP 502",
        b"SSH-2.0-OpenSSH\r\n\r\n": "not HTTP",
        b"HTTP/1.1 200 OK\r\n\r\nearly bytes": "data before",
        b"": "closed",
        b"HTTP/1.1 200 " + b"x" * (17 * 1024): "too long",
    }
    for data, reason in refusals.items():
        with pytest.raises(ProxyError, match=reason):
            ConnectResponse().feed(data)


@pytest.mark.parametrize(
    "proxy",
    [
        f"https://user:{CANARY}@proxy.example:3128",
        f"socks5h://user:{CANARY}@proxy.example:1080",
        f"ftp://user:{CANARY}@proxy.example:21",
    ],
)
def test_WS_006_thread_and_anyio_clients_accept_only_http_proxies(proxy: str) -> None:
    for make in (
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", proxy=proxy),
        lambda: AnyioWebSocketTransport("ws://127.0.0.1:9", proxy=proxy),
    ):
        with pytest.raises(InvalidProxy) as info:
            make()
        assert CANARY not in str(info.value)
        assert CANARY not in repr(info.value)
        assert "proxy.example" in str(info.value)


@pytest.mark.parametrize(
    ("proxy", "shown"),
    [
        (f"ftp://user:{CANARY}@proxy.example:21", "proxy.example"),
        (f"http://user:{CANARY}@proxy.example:3128/path?x={CANARY}", "proxy.example"),
        (f"socks5h://user:{CANARY}@proxy.example:1080", "proxy.example"),  # no python-socks
        (f"http://user:{CANARY}@proxy.example:99999999", "<unparsable URL>"),
    ],
)
def test_WS_006_a_bad_proxy_is_refused_at_construction_without_its_credentials(
    proxy: str, shown: str
) -> None:
    if proxy.startswith("socks"):
        import importlib.util

        if importlib.util.find_spec("python_socks") is not None:
            pytest.skip("python-socks is installed: a SOCKS proxy is accepted")
    with pytest.raises(InvalidProxy) as info:
        WebSocketClient("ws://127.0.0.1:9", on_frame=lambda v: None, proxy=proxy)
    assert CANARY not in str(info.value)
    assert CANARY not in repr(info.value)
    assert shown in str(info.value)
