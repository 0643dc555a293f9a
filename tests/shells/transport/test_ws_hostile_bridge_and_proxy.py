"""A hostile bridge and a malicious proxy against the WebSocket clients.

Each test pins one rule of ``docs/transport.md`` (WS-001 to WS-006) under an
adversarial peer: a bridge that floods, fragments, sends binary or invalid
UTF-8, ignores the closing handshake or holds the TCP connection after a
close; a proxy that answers ``CONNECT`` with garbage, slowly, with early
tunnel bytes, with a redirect, or with a 407 carrying secrets. Every peer is
a thread on 127.0.0.1 (``RawBridge`` speaks the WebSocket framing by hand, so
it can misbehave where ``websockets``' server would not). Every test stays
under 3 s.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import queue
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
import wait_kit
from raw_bridge import BINARY, CLOSE, CONT, PING, TEXT, RawBridge, RawConn, encode_frame
from websockets.exceptions import InvalidProxy, InvalidURI, ProxyError

from leasegate.core import Secret
from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    Backoff,
    Reauthenticated,
    ThreadWebSocketClient,
    WebSocketClient,
)
from leasegate.shells.transport._proxy import MAX_CONNECT_RESPONSE_BYTES, ConnectResponse

CANARY = "CANARY-b6"
FAST = {"base_ms": 10, "max_ms": 20}


# --------------------------------------------------------------- raw peers


class RawProxy:
    """A TCP listener on 127.0.0.1 that reads a ``CONNECT`` request and runs
    ``answer(sock, head)`` (which writes whatever it likes); records the requests."""

    def __init__(self, answer: Callable[[socket.socket, bytes], None]) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.requests: list[bytes] = []
        self._socks: list[socket.socket] = []

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                sock, _ = self._listener.accept()
                self._socks.append(sock)
                threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError, EOFError):
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(head)
            self._answer(sock, head)

    def url(self, password: str | None = CANARY) -> str:
        auth = f"user:{password}@" if password is not None else ""
        return f"http://{auth}127.0.0.1:{self.port}"

    def __enter__(self) -> RawProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()


_wait_until = functools.partial(wait_kit.wait_until, timeout_s=3.0)
_await_until = functools.partial(wait_kit.await_until, timeout_s=3.0)


def _hold(conn: RawConn, n: int) -> None:
    """Send one frame, then ignore everything (never answer a close, never close)."""
    conn.text(f'{{"n":{n}}}')
    time.sleep(5)


def _drain_thread(client: ThreadWebSocketClient) -> list[Any]:
    got: list[Any] = []
    with contextlib.suppress(EOFError):
        while True:
            got.append(client.receive(2))
    return got


# ----------------------------------- WS-003: close against a bridge that stalls


def test_WS_003_thread_client_close_is_bounded_when_the_bridge_ignores_the_close_frame() -> None:
    with RawBridge(_hold) as bridge:
        client = ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST))
        client.start()
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"n": 1}
        started = time.monotonic()
        client.close(timeout_s=1.0)
        elapsed = time.monotonic() - started
        assert elapsed < 1.5, f"close took {elapsed:.1f} s"
        assert not client.alive
        with pytest.raises(EOFError):
            client.receive(0.5)


@pytest.mark.anyio
async def test_WS_003_anyio_transport_close_is_bounded_when_the_bridge_ignores_the_close_frame(
    anyio_backend: str,
) -> None:
    with RawBridge(_hold) as bridge:
        started = time.monotonic()
        with anyio.fail_after(2.5):
            async with AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5
            ) as transport:
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"n": 1}
                started = time.monotonic()
        assert time.monotonic() - started < 1.5
        with pytest.raises(anyio.EndOfStream):
            await transport.receive()


def _close_then_hold(conn: RawConn, n: int) -> None:
    """Connection 1: a frame, then a close frame, then hold the TCP connection
    open forever (never closing it as RFC 6455 asks the server to)."""
    conn.text(f'{{"n":{n}}}')
    if n == 1:
        conn.send(CLOSE, (1001).to_bytes(2, "big"))
        time.sleep(5)


@pytest.mark.anyio
async def test_WS_004_anyio_transport_reconnects_when_the_bridge_closes_but_holds_tcp(
    anyio_backend: str,
) -> None:
    # The bridge sends a close frame and never closes TCP: the client must not
    # wait for it forever; it gives up after its close timeout and reconnects.
    with RawBridge(_close_then_hold) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.3
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(4)]
        assert got == [Reauthenticated(1), {"n": 1}, Reauthenticated(2), {"n": 2}]


def _oversized_then_hold(conn: RawConn, n: int) -> None:
    conn.text(f'{{"n":{n}}}')
    if n == 1:
        conn.text(b'"' + b"z" * 2000 + b'"')  # over the 1 KiB limit: 1009
        time.sleep(5)


@pytest.mark.anyio
async def test_WS_004_anyio_transport_reconnects_after_1009_even_if_the_bridge_holds_tcp(
    anyio_backend: str,
) -> None:
    with RawBridge(_oversized_then_hold) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, backoff=Backoff(**FAST), max_frame_bytes=1024, close_timeout_s=0.3
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(4)]
        assert got == [Reauthenticated(1), {"n": 1}, Reauthenticated(2), {"n": 2}]


# --------------------------------- WS-002: the end of the stream is final


def _frames_after_close(conn: RawConn, n: int) -> None:
    """One frame; when the client's close frame comes, three more frames, then
    the close answer and the end of TCP (a bridge whose frames were in flight)."""
    conn.text('{"i":0}')
    code = conn.read_close()
    for i in range(1, 4):
        conn.text(f'{{"i":{i}}}')
    conn.send(CLOSE, (code or 1000).to_bytes(2, "big"))
    conn.sock.close()


@pytest.mark.anyio
async def test_WS_002_anyio_transport_end_of_stream_is_final_never_followed_by_frames(
    anyio_backend: str,
) -> None:
    seen: list[Any] = []
    with RawBridge(_frames_after_close) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=Backoff(**FAST)) as transport:
            with anyio.fail_after(2):
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"i": 0}
            await transport.aclose()
            for _ in range(6):
                try:
                    seen.append(await transport.receive())
                except anyio.EndOfStream:
                    seen.append("EOF")
                await anyio.sleep(0.05)  # the frames in flight arrive meanwhile
    # once the end of the stream was reported, nothing follows it
    first_eof = seen.index("EOF")
    assert all(item == "EOF" for item in seen[first_eof:]), seen


# ------------------------------------------------ WS-006: a malicious proxy


def _tunnel(sock: socket.socket, head: bytes) -> None:
    """An honest proxy: open the tunnel to the requested target and pump."""
    host, port = head.split(b" ")[1].decode().rsplit(":", 1)
    upstream = socket.create_connection((host, int(port)))
    sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    threading.Thread(target=pump, args=(upstream, sock), daemon=True).start()
    pump(sock, upstream)


def _silent(sock: socket.socket, head: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.recv(1)  # until the client goes away


def _slowloris(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(200):  # one header byte every 20 ms, never the end of the head
        sock.sendall(b"X")
        time.sleep(0.02)


def _endless_headers(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 1000 + b"\r\n" * 1)
    for _ in range(300):  # past every bound: 16 KiB here, 128 headers in websockets
        sock.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")


def _early_tunnel_bytes(sock: socket.socket, head: bytes) -> None:
    # a forged handshake answer in the same packet as the 200
    sock.sendall(
        b"HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n"
        b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    _silent(sock, head)


def _refuse_407_with_secret_body(sock: socket.socket, head: bytes) -> None:
    body = f"denied, the password was {CANARY}".encode()
    sock.sendall(
        b"HTTP/1.1 407 Proxy Authentication Required (" + CANARY.encode() + b")\r\n"
        b"Proxy-Authenticate: Basic realm=" + CANARY.encode() + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    sock.close()


def _redirect(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/\r\n\r\n")
    sock.close()


def _lf_only(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\n\n")
    _silent(sock, head)


def _not_http(sock: socket.socket, head: bytes) -> None:
    sock.sendall(b"SSH-2.0-OpenSSH_9.0\r\n\r\n")
    sock.close()


_BAD_PROXIES: dict[str, Callable[[socket.socket, bytes], None]] = {
    "407-with-secret-body": _refuse_407_with_secret_body,
    "redirect": _redirect,
    "200-then-tunnel-bytes-in-one-packet": _early_tunnel_bytes,
    "endless-headers": _endless_headers,
    "not-http": _not_http,
    "slowloris": _slowloris,
    "lf-only": _lf_only,
    "silent": _silent,
}
#: The answers a 0.3 s open timeout must end (the others are refused at once).
_STALLING = {"slowloris", "lf-only", "silent"}
#: websockets (the asyncio client's proxy code) reads the 200 and drops the
#: bytes after it in the same packet, then waits for the bridge's answer
#: that the silent proxy never sends: its open timeout ends it.


def _no_canary_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    formatter = logging.Formatter()
    for record in caplog.records:
        text = formatter.format(record)
        assert CANARY not in text, (record.name, text)
        assert CANARY not in repr(record.args)


@pytest.mark.parametrize("answer", list(_BAD_PROXIES), ids=list(_BAD_PROXIES))
def test_WS_006_thread_client_refuses_a_malicious_proxy_and_retries(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with RawBridge(_hold) as bridge, RawProxy(_BAD_PROXIES[answer]) as proxy:
        client = ThreadWebSocketClient(
            bridge.url, proxy=proxy.url(), open_timeout_s=0.3, backoff=Backoff(**FAST)
        )
        with client:
            _wait_until(lambda: len(proxy.requests) >= 2, timeout_s=2.0)
            assert not client.connected
            with pytest.raises(queue.Empty):
                client.receive(0)
        assert bridge.connections == 0
    assert client.connections == 0
    assert client.errors == []
    assert CANARY not in repr(client)
    _no_canary_in_logs(caplog)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", list(_BAD_PROXIES), ids=list(_BAD_PROXIES))
async def test_WS_006_anyio_transport_refuses_a_malicious_proxy_and_retries(
    anyio_backend: str, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with RawBridge(_hold) as bridge, RawProxy(_BAD_PROXIES[answer]) as proxy:
        async with AnyioWebSocketTransport(
            bridge.url, proxy=proxy.url(), connect_timeout_s=0.3, backoff=Backoff(**FAST)
        ) as transport:
            await _await_until(lambda: len(proxy.requests) >= 2, timeout_s=2.0)
            assert not transport.client.connected
            assert transport.inbox_size == 0
        assert bridge.connections == 0
    assert transport.connections == 0
    assert CANARY not in repr(transport)
    _no_canary_in_logs(caplog)


@pytest.mark.parametrize("answer", list(_BAD_PROXIES), ids=list(_BAD_PROXIES))
def test_WS_006_asyncio_client_refuses_a_malicious_proxy_and_retries(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def main(url: str, proxy_url: str, proxy: RawProxy) -> WebSocketClient:
        client = WebSocketClient(
            url,
            on_frame=lambda v: None,
            proxy=proxy_url,
            backoff=Backoff(**FAST),
            open_timeout_s=0.3,
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while len(proxy.requests) < 2:
                await asyncio.sleep(0.005)
        assert not client.connected
        await client.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return client

    with RawBridge(_hold) as bridge, RawProxy(_BAD_PROXIES[answer]) as proxy:
        client = asyncio.run(main(bridge.url, proxy.url(), proxy))
        assert bridge.connections == 0
    assert client.connections == 0
    assert CANARY not in repr(client)
    _no_canary_in_logs(caplog)


def test_WS_006_connect_response_parser_edges() -> None:
    # A head over the bound is refused even when it arrives whole, its end included.
    big = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * MAX_CONNECT_RESPONSE_BYTES + b"\r\n\r\n"
    with pytest.raises(ProxyError, match="too long"):
        ConnectResponse().feed(big)
    # ... also when it grows past the bound in pieces and ends in the last one
    parts = ConnectResponse()
    assert (
        parts.feed(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * (MAX_CONNECT_RESPONSE_BYTES - 100))
        is False
    )
    with pytest.raises(ProxyError, match="too long"):
        parts.feed(b"b" * 1000 + b"\r\n\r\n")
    # a head of exactly the bound is fine
    line = b"HTTP/1.1 200 OK\r\n"
    pad = MAX_CONNECT_RESPONSE_BYTES - len(line) - len(b"X: \r\n\r\n")
    exact = line + b"X: " + b"a" * pad + b"\r\n\r\n"
    assert len(exact) == MAX_CONNECT_RESPONSE_BYTES
    assert ConnectResponse().feed(exact) is True
    # LF-only line ends are never a complete head; past the bound they are refused
    lf = ConnectResponse()
    assert lf.feed(b"HTTP/1.1 200 OK\n\n") is False
    with pytest.raises(ProxyError, match="too long"):
        lf.feed(b"\n" * MAX_CONNECT_RESPONSE_BYTES)
    # a 200 with garbage header lines or reason is accepted: headers are not used
    assert ConnectResponse().feed(b"HTTP/1.1 200 \x00\xff\r\n\x01garbage\r\n\r\n") is True
    assert ConnectResponse().feed(b"HTTP/1.0 204\r\n\r\n") is True
    refusals = {
        b"HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:9/\r\n\r\n": "HTTP 301",
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /\r\n\r\n": "HTTP 307",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n": "HTTP 100",
        b"http/1.1 200 OK\r\n\r\n": "not HTTP",
        b"HTTP/2 200\r\n\r\n": "not HTTP",
        b"HTTP/1.1 2000 OK\r\n\r\n": "not HTTP",
        b"HTTP/1.1 200OK\r\n\r\n": "not HTTP",
        b"\r\nHTTP/1.1 200 OK\r\n\r\n": "not HTTP",
        b" HTTP/1.1 200 OK\r\n\r\n": "not HTTP",
        b"HTTP/1.1 407 " + CANARY.encode() + b"\r\n\r\n" + CANARY.encode(): "HTTP 407",
    }
    for data, reason in refusals.items():
        with pytest.raises(ProxyError, match=reason) as info:
            ConnectResponse().feed(data)
        assert CANARY not in str(info.value)
        assert info.value.__context__ is None


def _exception_chain_text(exc: BaseException) -> str:
    texts = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        texts += [str(e), repr(e), "".join(traceback.format_exception(e))]
        todo += [e.__context__, e.__cause__]
    return "\n".join(texts)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", proxy=f"ftp://u:{CANARY}@h:1"),
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", proxy=f"http://{CANARY}@h:1"),
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", proxy=f"http://u:{CANARY}@h:99999999"),
        lambda: AnyioWebSocketTransport("ws://127.0.0.1:9", proxy=f"http://u:{CANARY}@h:1/p"),
        lambda: WebSocketClient(
            "ws://127.0.0.1:9", on_frame=lambda v: None, proxy=f"gopher://u:{CANARY}@h:1"
        ),
        lambda: ThreadWebSocketClient(f"http://u:{CANARY}@h/?token={CANARY}"),
        lambda: AnyioWebSocketTransport(f"ftp://h/?token={CANARY}"),
    ],
    ids=[
        "thread-ftp-proxy",
        "thread-user-only-proxy",
        "thread-bad-port-proxy",
        "anyio-proxy-path",
        "asyncio-gopher-proxy",
        "thread-http-url",
        "anyio-ftp-url",
    ],
)
def test_WS_006_a_refused_url_keeps_its_secrets_out_of_the_whole_exception_chain(
    make: Callable[[], object],
) -> None:
    # Not only the message: the exception's context (what the library raised
    # first, with the full URL) must not carry the password or token either.
    with pytest.raises((InvalidProxy, InvalidURI)) as info:
        make()
    assert CANARY not in _exception_chain_text(info.value)


def test_WS_006_asyncio_client_refused_url_keeps_its_token_out_of_the_exception_chain() -> None:
    client = WebSocketClient(f"http://u:{CANARY}@h/?token={CANARY}", on_frame=lambda v: None)
    with pytest.raises(InvalidURI) as info:
        asyncio.run(client.run())
    assert "http://h/" in str(info.value)
    assert CANARY not in _exception_chain_text(info.value)


# ------------------------------- WS-001 / WS-004: what a hostile bridge sends

LIMIT = 256 * 1024
DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON, nested far past any recursion limit


class Zoo:
    """Connection 1: a frame; a binary frame; a deeply nested array; a text
    message of exactly LIMIT bytes in three fragments with a ping between
    them; a frame; then fragments adding up to LIMIT + 1 (1009); a frame
    that must never arrive. Connection 2: one frame. Records close codes."""

    def __init__(self) -> None:
        self.close_codes: dict[int, int | None] = {}

    def __call__(self, conn: RawConn, n: int) -> None:
        if n == 1:
            conn.text('{"i":1}')
            conn.send(BINARY, b'{"i":"binary"}')
            conn.text(DEEP)
            exact = b'"' + b"a" * (LIMIT - 2) + b'"'
            conn.send(TEXT, exact[:1000], fin=False)
            conn.send(PING, b"p")
            conn.send(CONT, exact[1000:5000], fin=False)
            conn.send(CONT, exact[5000:], fin=True)
            conn.text('{"i":2}')
            over = b'"' + b"b" * (LIMIT - 1) + b'"'
            conn.send(TEXT, over[: LIMIT // 2], fin=False)
            conn.send(CONT, over[LIMIT // 2 :], fin=True)
            conn.text('{"i":"late"}')
        else:
            conn.text(f'{{"c":{n}}}')
        self.close_codes[n] = conn.read_close()
        conn.sock.close()


_ZOO_EXPECTED = [Reauthenticated(1), {"i": 1}, "a" * (LIMIT - 2), {"i": 2}]
_ZOO_EXPECTED += [Reauthenticated(2), {"c": 2}]


def test_WS_004_thread_client_bridge_zoo_binary_deep_exact_and_fragmented_oversize() -> None:
    zoo = Zoo()
    with (
        RawBridge(zoo) as bridge,
        ThreadWebSocketClient(bridge.url, max_frame_bytes=LIMIT, backoff=Backoff(**FAST)) as client,
    ):
        got = [client.receive(2) for _ in range(len(_ZOO_EXPECTED))]
        assert got == _ZOO_EXPECTED
        _wait_until(lambda: 1 in zoo.close_codes)
    assert zoo.close_codes[1] == 1009
    assert client.dropped == 2  # the binary frame and the nested array
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_004_anyio_transport_bridge_zoo_binary_deep_exact_and_fragmented_oversize(
    anyio_backend: str,
) -> None:
    zoo = Zoo()
    with RawBridge(zoo) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, max_frame_bytes=LIMIT, backoff=Backoff(**FAST), close_timeout_s=1
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(len(_ZOO_EXPECTED))]
        assert got == _ZOO_EXPECTED
        await _await_until(lambda: 1 in zoo.close_codes)
    assert zoo.close_codes[1] == 1009
    assert transport.dropped == 2


def test_WS_004_asyncio_client_bridge_zoo_binary_deep_exact_and_fragmented_oversize() -> None:
    zoo = Zoo()
    got: list[Any] = []

    async def main(url: str) -> WebSocketClient:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            got.append(value)
            if value == {"c": 2}:
                await client.close()

        client = WebSocketClient(
            url,
            on_frame=on_frame,
            on_authenticated=lambda n: got.append(Reauthenticated(n)),
            max_frame_bytes=LIMIT,
            backoff=Backoff(**FAST),
        )
        with anyio.fail_after(2.5):
            await client.run()
        return client

    with RawBridge(zoo) as bridge:
        client = asyncio.run(main(bridge.url))
    assert got == _ZOO_EXPECTED
    assert zoo.close_codes[1] == 1009
    assert client.dropped == 2


class InvalidUtf8:
    """Connection 1: a frame, a text frame that is not UTF-8, a frame; then
    waits for a close. Connection 2: one frame."""

    def __init__(self) -> None:
        self.close_codes: dict[int, int | None] = {}

    def __call__(self, conn: RawConn, n: int) -> None:
        if n == 1:
            conn.text('{"i":1}')
            conn.text(b'"\xff\xfe"')
            conn.text('{"i":2}')
        else:
            conn.text(f'{{"c":{n}}}')
        self.close_codes[n] = conn.read_close(timeout_s=1.0)
        conn.sock.close()


def test_WS_004_thread_client_invalid_utf8_fails_the_connection_1007_and_reconnects() -> None:
    # websockets.sync fails a connection carrying a text frame that is not
    # UTF-8 (RFC 6455: 1007); the thread client reconnects, nothing is lost
    # to a crash, the frame after it on that connection is not delivered.
    bridge_script = InvalidUtf8()
    with (
        RawBridge(bridge_script) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST)) as client,
    ):
        got = [client.receive(2) for _ in range(4)]
        assert got == [Reauthenticated(1), {"i": 1}, Reauthenticated(2), {"c": 2}]
    assert bridge_script.close_codes[1] == 1007
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_004_anyio_transport_invalid_utf8_is_dropped_and_the_connection_kept(
    anyio_backend: str,
) -> None:
    # The anyio client decodes text itself: a frame that is not UTF-8 is
    # dropped and counted, the connection stays (unlike the two others).
    with RawBridge(InvalidUtf8()) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=Backoff(**FAST)) as transport:
            with anyio.fail_after(2):
                got = [await transport.receive() for _ in range(3)]
            assert got == [Reauthenticated(1), {"i": 1}, {"i": 2}]
            assert transport.dropped == 1
            assert transport.connections == 1


BIG = 512 * 1024
BIG_FRAMES = 48


class BigFlood:
    """Connection 1 sends BIG_FRAMES text frames of BIG bytes as fast as TCP takes them."""

    def __init__(self) -> None:
        self.sent = 0

    def __call__(self, conn: RawConn, n: int) -> None:
        for i in range(BIG_FRAMES):
            conn.text(_big(i))
            self.sent += 1
        code = conn.read_close(timeout_s=3.0)
        if code is not None:
            conn.send(CLOSE, code.to_bytes(2, "big"))
        conn.sock.close()


def _big(i: int) -> str:
    head = f'{{"i":{i},"pad":"'
    return head + "x" * (BIG - len(head) - 2) + '"}'


def test_WS_001_thread_client_huge_frames_to_a_stopped_consumer_stay_bounded() -> None:
    flood = BigFlood()
    with (
        RawBridge(flood) as bridge,
        ThreadWebSocketClient(
            bridge.url, max_inbox_frames=2, max_frame_bytes=BIG, backoff=Backoff(**FAST)
        ) as client,
    ):
        _wait_until(lambda: client.inbox_size == 2)
        time.sleep(0.3)  # the consumer stopped; the bridge pushes what TCP takes
        held = flood.sent
        # inbox (2, the marker among them) + websockets' buffer (a few) + one
        # partial + the kernel's socket buffers (typically 10 to 16 frames
        # in all here; the kernel's share can grow to tcp_rmem's maximum, so
        # only "not all of them" is asserted)
        assert held < BIG_FRAMES, held
        assert client.inbox_size == 2
        got = [client.receive(2) for _ in range(BIG_FRAMES + 1)]
    assert got[0] == Reauthenticated(1)
    assert [g["i"] for g in got[1:]] == list(range(BIG_FRAMES))
    assert client.inbox_peak == 2


@pytest.mark.anyio
async def test_WS_001_anyio_transport_huge_frames_to_a_stopped_consumer_stay_bounded(
    anyio_backend: str,
) -> None:
    flood = BigFlood()
    with RawBridge(flood) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url,
            max_inbox_frames=2,
            max_frame_bytes=BIG,
            backoff=Backoff(**FAST),
            close_timeout_s=0.5,
        ) as transport:
            await _await_until(lambda: transport.inbox_size == 2)
            await anyio.sleep(0.3)
            held = flood.sent
            assert held < BIG_FRAMES, held
            assert transport.inbox_size == 2
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(BIG_FRAMES + 1)]
    assert got[0] == Reauthenticated(1)
    assert [g["i"] for g in got[1:]] == list(range(BIG_FRAMES))
    assert transport.inbox_peak == 2


def test_WS_001_asyncio_client_huge_frames_to_a_stopped_consumer_stay_bounded() -> None:
    flood = BigFlood()
    got: list[Any] = []

    async def main(url: str) -> int:
        gate = asyncio.Event()
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            await gate.wait()
            got.append(value["i"])
            if len(got) == BIG_FRAMES:
                await client.close()

        client = WebSocketClient(
            url, on_frame=on_frame, max_queue=2, max_frame_bytes=BIG, backoff=Backoff(**FAST)
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while client.buffered_frames < 2:
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        held = flood.sent
        gate.set()
        with anyio.fail_after(2.5):
            await task
        return held

    with RawBridge(flood) as bridge:
        held = asyncio.run(main(bridge.url))
    assert held < BIG_FRAMES, held
    assert got == list(range(BIG_FRAMES))


# ------------------------------- secrets at DEBUG, through an honest proxy

_TOKEN = f"{CANARY}-url-token"
_HEADER = f"Bearer {CANARY}-header"
_PROXY_PASSWORD = f"{CANARY}-proxy"


class SecretsRun:
    """Connection 1: a frame, then an oversized message (1009); connection 2:
    a frame. Answers the client's close, then closes TCP."""

    def __call__(self, conn: RawConn, n: int) -> None:
        conn.text(f'{{"n":{n}}}')
        if n == 1:
            conn.text('"' + "z" * 2000 + '"')
        code = conn.read_close(timeout_s=3.0)
        if code is not None:
            with contextlib.suppress(OSError):
                conn.send(CLOSE, code.to_bytes(2, "big"))
        conn.sock.close()


def _check_secret_routing(bridge: RawBridge, proxy: RawProxy) -> None:
    """The header reached the bridge only; the proxy password the proxy only."""
    basic = base64.b64encode(f"user:{_PROXY_PASSWORD}".encode())
    assert len(proxy.requests) == 2
    for head in proxy.requests:
        assert head.startswith(b"CONNECT 127.0.0.1:")
        assert b"\r\nProxy-Authorization: Basic " + basic + b"\r\n" in head
        assert CANARY.encode() not in head  # neither the header nor the URL token
    assert len(bridge.requests) == 2
    for head in bridge.requests:
        assert f"Authorization: {_HEADER}".encode() in head
        assert f"token={_TOKEN}".encode() in head.split(b"\r\n")[0]
        assert b"proxy-authorization" not in head.lower()
        assert _PROXY_PASSWORD.encode() not in head
        assert basic not in head


def _all_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("websockets", "websockets.client", "leasegate", "anyio", "trio", "asyncio"):
        logging.getLogger(name).setLevel(logging.DEBUG)


_EXPECTED_SECRETS_RUN = [Reauthenticated(1), {"n": 1}, Reauthenticated(2), {"n": 2}]


def test_WS_006_thread_client_no_secret_in_any_debug_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _all_debug(caplog)
    with RawBridge(SecretsRun()) as bridge, RawProxy(_tunnel) as proxy:
        client = ThreadWebSocketClient(
            f"{bridge.url}/b?token={_TOKEN}",
            headers={"Authorization": Secret(_HEADER)},
            proxy=proxy.url(_PROXY_PASSWORD),
            max_frame_bytes=1024,
            backoff=Backoff(**FAST),
        )
        with client:
            got = [client.receive(2) for _ in range(4)]
        _check_secret_routing(bridge, proxy)
    assert got == _EXPECTED_SECRETS_RUN
    assert CANARY not in repr(client) + repr(client.errors)
    _no_canary_in_logs(caplog)


@pytest.mark.anyio
async def test_WS_006_anyio_transport_no_secret_in_any_debug_record(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    _all_debug(caplog)
    with RawBridge(SecretsRun()) as bridge, RawProxy(_tunnel) as proxy:
        async with AnyioWebSocketTransport(
            f"{bridge.url}/b?token={_TOKEN}",
            headers={"Authorization": Secret(_HEADER)},
            proxy=proxy.url(_PROXY_PASSWORD),
            max_frame_bytes=1024,
            backoff=Backoff(**FAST),
            close_timeout_s=1,
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(4)]
            assert CANARY not in repr(transport)
        _check_secret_routing(bridge, proxy)
    assert got == _EXPECTED_SECRETS_RUN
    _no_canary_in_logs(caplog)


def test_WS_006_asyncio_client_no_secret_in_any_debug_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _all_debug(caplog)
    got: list[Any] = []

    async def main(url: str, proxy_url: str) -> WebSocketClient:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            got.append(value)
            if value == {"n": 2}:
                await client.close()

        client = WebSocketClient(
            url,
            on_frame=on_frame,
            on_authenticated=lambda n: got.append(Reauthenticated(n)),
            headers={"Authorization": Secret(_HEADER)},
            proxy=proxy_url,
            max_frame_bytes=1024,
            backoff=Backoff(**FAST),
        )
        assert CANARY not in repr(client)
        with anyio.fail_after(2.5):
            await client.run()
        return client

    with RawBridge(SecretsRun()) as bridge, RawProxy(_tunnel) as proxy:
        asyncio.run(main(f"{bridge.url}/b?token={_TOKEN}", proxy.url(_PROXY_PASSWORD)))
        # websockets adds its User-Agent to CONNECT; the rest as for the others
        _check_secret_routing(bridge, proxy)
    assert got == _EXPECTED_SECRETS_RUN
    _no_canary_in_logs(caplog)


# ---------------------------------------------------------------- races


@pytest.mark.parametrize("stage", ["connect", "handshake"])
def test_WS_003_thread_client_close_during_connect_or_handshake_is_prompt(stage: str) -> None:
    # "connect": a proxy that never answers CONNECT; "handshake": a bridge
    # that accepts TCP and never answers the WebSocket handshake.
    with RawProxy(_silent) as silent:
        url, proxy = f"ws://127.0.0.1:{silent.port}", None
        if stage == "connect":
            url, proxy = "ws://127.0.0.1:9", silent.url()
        client = ThreadWebSocketClient(url, proxy=proxy, backoff=Backoff(**FAST))
        client.start()
        _wait_until(lambda: len(silent.requests) == 1)
        started = time.monotonic()
        client.close(timeout_s=2)
        assert time.monotonic() - started < 0.5
        assert not client.alive
        with pytest.raises(EOFError):
            client.receive(0.1)
    assert client.connections == 0
    assert client.errors == []


@pytest.mark.anyio
@pytest.mark.parametrize("stage", ["connect", "handshake"])
async def test_WS_003_anyio_transport_close_during_connect_or_handshake_is_prompt(
    anyio_backend: str, stage: str
) -> None:
    with RawProxy(_silent) as silent:
        url, proxy = f"ws://127.0.0.1:{silent.port}", None
        if stage == "connect":
            url, proxy = "ws://127.0.0.1:9", silent.url()
        async with AnyioWebSocketTransport(url, proxy=proxy, backoff=Backoff(**FAST)) as transport:
            await _await_until(lambda: len(silent.requests) == 1)
            started = time.monotonic()
            with anyio.fail_after(1):
                await transport.aclose()
                with pytest.raises(anyio.EndOfStream):
                    await transport.receive()
        assert time.monotonic() - started < 0.5
    assert transport.connections == 0


def test_WS_003_asyncio_client_close_during_the_handshake_is_prompt_and_final() -> None:
    # The bridge answers the handshake 0.5 s late, then sends frames: a close
    # during the handshake must end run() at once; no connection is served.
    events: list[Any] = []

    async def main(url: str) -> float:
        client = WebSocketClient(
            url,
            on_frame=events.append,
            on_authenticated=lambda n: events.append(Reauthenticated(n)),
            backoff=Backoff(**FAST),
        )
        task = asyncio.get_running_loop().create_task(client.run())
        await asyncio.sleep(0.1)  # the handshake is under way
        started = time.monotonic()
        await client.close()
        with anyio.fail_after(2):
            await task
        return time.monotonic() - started

    with RawBridge(_hold, handshake_delay_s=0.5) as bridge:
        elapsed = asyncio.run(main(bridge.url))
        assert bridge.connections == 1
    assert elapsed < 0.3, elapsed
    assert events == []


def test_WS_003_thread_client_consumer_blocked_in_receive_is_woken_by_close() -> None:
    with RawBridge(_hold) as bridge:
        client = ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST), open_timeout_s=1)
        client.start()
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"n": 1}
        outcome: queue.Queue[str] = queue.Queue()

        def consumer() -> None:
            try:
                client.receive(None)  # blocks: nothing more comes
                outcome.put("item")
            except EOFError:
                outcome.put("EOF")

        t = threading.Thread(target=consumer, daemon=True)
        t.start()
        time.sleep(0.05)
        client.close(timeout_s=1)
        assert outcome.get(timeout=1.5) == "EOF"


@pytest.mark.anyio
async def test_WS_003_anyio_transport_consumer_blocked_in_receive_is_woken_by_aclose(
    anyio_backend: str,
) -> None:
    outcome: list[str] = []
    with RawBridge(_hold) as bridge:
        async with (
            anyio.create_task_group() as tg,
            AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5
            ) as transport,
        ):
            with anyio.fail_after(2):
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"n": 1}

            async def consumer() -> None:
                try:
                    await transport.receive()
                    outcome.append("item")
                except anyio.EndOfStream:
                    outcome.append("EOF")

            tg.start_soon(consumer)
            await anyio.sleep(0.05)
            with anyio.fail_after(1.5):
                await transport.aclose()
            await _await_until(lambda: bool(outcome), timeout_s=1)
    assert outcome == ["EOF"]


def _accept_and_drop(conn: RawConn, n: int) -> None:
    conn.sock.close()  # a handshake, then nothing: the client reconnects at once


def test_WS_002_thread_client_reconnect_storm_cannot_grow_the_inbox() -> None:
    bound = 4
    with RawBridge(_accept_and_drop) as bridge:
        client = ThreadWebSocketClient(
            bridge.url, max_inbox_frames=bound, backoff=Backoff(base_ms=1, max_ms=2)
        )
        with client:
            _wait_until(lambda: client.inbox_size == bound)
            time.sleep(0.2)  # the storm goes on; the consumer does not read
            assert client.inbox_size == bound
            held = bridge.connections
            assert held <= bound + 1  # the next marker waits for room: no new connection
            got = [client.receive(2) for _ in range(3 * bound)]
    assert got == [Reauthenticated(n) for n in range(1, 3 * bound + 1)]
    assert client.inbox_peak == bound


@pytest.mark.anyio
async def test_WS_002_anyio_transport_reconnect_storm_cannot_grow_the_inbox(
    anyio_backend: str,
) -> None:
    bound = 4
    with RawBridge(_accept_and_drop) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url,
            max_inbox_frames=bound,
            backoff=Backoff(base_ms=1, max_ms=2),
            close_timeout_s=0.5,
        ) as transport:
            await _await_until(lambda: transport.inbox_size == bound)
            await anyio.sleep(0.2)
            assert transport.inbox_size == bound
            assert bridge.connections <= bound + 1
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(3 * bound)]
    assert got == [Reauthenticated(n) for n in range(1, 3 * bound + 1)]
    assert transport.inbox_peak == bound


def _ping_flood_never_read(conn: RawConn, n: int) -> None:
    """A frame, then pings as fast as TCP takes them, never reading a pong:
    the client's pongs fill both socket buffers and its writes block."""
    conn.text(f'{{"n":{n}}}')
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ping = encode_frame(PING, b"p" * 125)
    with contextlib.suppress(OSError):
        for _ in range(200_000):
            conn.sock.sendall(ping)


def test_WS_003_thread_client_close_is_bounded_when_the_bridge_never_reads() -> None:
    with RawBridge(_ping_flood_never_read) as bridge:
        client = ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST))
        client.start()
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"n": 1}
        time.sleep(0.5)  # the pongs pile up in the socket buffers
        done = threading.Event()
        threading.Thread(
            target=lambda: (client.close(timeout_s=1), done.set()), daemon=True
        ).start()
        assert done.wait(2.0), "close() is stuck"
        assert not client.alive


@pytest.mark.anyio
async def test_WS_003_anyio_transport_close_is_bounded_when_the_bridge_never_reads(
    anyio_backend: str,
) -> None:
    with RawBridge(_ping_flood_never_read) as bridge:
        with anyio.fail_after(2.5):
            async with AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5
            ) as transport:
                assert await transport.receive() == Reauthenticated(1)
                assert await transport.receive() == {"n": 1}
                await anyio.sleep(0.5)
                started = time.monotonic()
        assert time.monotonic() - started < 1.5


def _answer_close_then_end(conn: RawConn, n: int) -> None:
    if n > 1:
        conn.text(f'{{"c":{n}}}')
    code = conn.read_close(timeout_s=1.0)
    if code is not None:
        with contextlib.suppress(OSError):
            conn.send(CLOSE, code.to_bytes(2, "big"))
    conn.sock.close()


#: Connection 1's frames and its close frame ride in the 101 response's packet.
_WITH_101 = encode_frame(TEXT, b'{"c":1,"i":0}') + encode_frame(TEXT, b'{"c":1,"i":1}')
_WITH_101 += encode_frame(CLOSE, (1001).to_bytes(2, "big"))
_EXPECTED_WITH_101 = [Reauthenticated(1), {"c": 1, "i": 0}, {"c": 1, "i": 1}]
_EXPECTED_WITH_101 += [Reauthenticated(2), {"c": 2}]


def test_WS_002_thread_client_frames_in_the_handshake_packet_follow_the_marker() -> None:
    with (
        RawBridge(_answer_close_then_end, with_101=_WITH_101) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST)) as client,
    ):
        got = [client.receive(2) for _ in range(len(_EXPECTED_WITH_101))]
    assert got == _EXPECTED_WITH_101


@pytest.mark.anyio
async def test_WS_002_anyio_transport_frames_in_the_handshake_packet_follow_the_marker(
    anyio_backend: str,
) -> None:
    with RawBridge(_answer_close_then_end, with_101=_WITH_101) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(len(_EXPECTED_WITH_101))]
    assert got == _EXPECTED_WITH_101


def _exactly_default_limit(conn: RawConn, n: int) -> None:
    from leasegate.shells.transport import DEFAULT_MAX_FRAME_BYTES

    conn.text(b'"' + b"m" * (DEFAULT_MAX_FRAME_BYTES - 2) + b'"')
    conn.text('{"after":true}')
    _answer_close_then_end(conn, 1)


def test_WS_004_thread_client_a_message_of_exactly_4_MiB_is_delivered() -> None:
    with (
        RawBridge(_exactly_default_limit) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST)) as client,
    ):
        assert client.receive(2) == Reauthenticated(1)
        big = client.receive(2)
        assert client.receive(2) == {"after": True}
    assert len(big) == 4 * 1024 * 1024 - 2
    assert client.connections == 1


@pytest.mark.anyio
async def test_WS_004_anyio_transport_a_message_of_exactly_4_MiB_is_delivered(
    anyio_backend: str,
) -> None:
    with RawBridge(_exactly_default_limit) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=Backoff(**FAST)) as transport:
            with anyio.fail_after(2.5):
                assert await transport.receive() == Reauthenticated(1)
                big = await transport.receive()
                assert await transport.receive() == {"after": True}
    assert len(big) == 4 * 1024 * 1024 - 2
    assert transport.connections == 1


def _never_read(conn: RawConn, n: int) -> None:
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.text('{"ready":true}')
    time.sleep(5)


def test_WS_003_thread_client_close_unblocks_a_send_to_a_bridge_that_never_reads() -> None:
    from leasegate.shells.transport import NotConnected

    with RawBridge(_never_read) as bridge:
        client = ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST))
        client.start()
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"ready": True}
        outcome: queue.Queue[str] = queue.Queue()

        def sender() -> None:
            try:
                for _ in range(10_000):  # 640 MiB: TCP fills long before
                    client.send({"pad": "s" * 65536})
                outcome.put("all sent?")
            except NotConnected:
                outcome.put("NotConnected")

        threading.Thread(target=sender, daemon=True).start()
        time.sleep(0.3)
        assert outcome.empty()  # the send blocks: the bridge reads nothing
        client.close(timeout_s=1)
        assert outcome.get(timeout=1) == "NotConnected"
        assert not client.alive


class EmptyFragments:
    """Connection 1: a frame, then one message in 200 001 fragments, all but
    the first empty (2 bytes each on the wire, 0 towards max_frame_bytes: only
    a fragment count bounds what a client holds for it), then a frame that
    must never arrive. Connection 2: one frame."""

    def __init__(self) -> None:
        self.close_codes: dict[int, int | None] = {}

    def __call__(self, conn: RawConn, n: int) -> None:
        if n > 1:
            conn.text(f'{{"c":{n}}}')
            self._read_close_then_end(conn, n)
            return
        # the client's close is read while the fragments are still being sent
        reader = threading.Thread(target=self._read_close_then_end, args=(conn, n))
        reader.start()
        conn.text('{"i":1}')
        with contextlib.suppress(OSError):
            conn.send(TEXT, b'"', fin=False)
            conn.sock.sendall(encode_frame(CONT, b"", fin=False) * 200_000)
            conn.send(CONT, b'"', fin=True)
            conn.text('{"i":"late"}')
        reader.join()

    def _read_close_then_end(self, conn: RawConn, n: int) -> None:
        self.close_codes[n] = conn.read_close(timeout_s=2.0)
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)


_EXPECTED_FRAGMENTS = [Reauthenticated(1), {"i": 1}, Reauthenticated(2), {"c": 2}]


def test_WS_004_thread_client_a_message_in_too_many_fragments_fails_1009() -> None:
    script = EmptyFragments()
    with (
        RawBridge(script) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5) as client,
    ):
        got = [client.receive(2) for _ in range(len(_EXPECTED_FRAGMENTS))]
    assert got == _EXPECTED_FRAGMENTS
    assert script.close_codes[1] == 1009


@pytest.mark.anyio
async def test_WS_004_anyio_transport_a_message_in_too_many_fragments_fails_1009(
    anyio_backend: str,
) -> None:
    script = EmptyFragments()
    with RawBridge(script) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, backoff=Backoff(**FAST), close_timeout_s=1
        ) as transport:
            with anyio.fail_after(2.5):
                got = [await transport.receive() for _ in range(len(_EXPECTED_FRAGMENTS))]
    assert got == _EXPECTED_FRAGMENTS
    assert script.close_codes[1] == 1009


def _exactly_4096_fragments(conn: RawConn, n: int) -> None:
    # websockets' bound and the anyio client's: 4096 frames in all is fine
    conn.send(TEXT, b'"', fin=False)
    conn.sock.sendall(encode_frame(CONT, b"f", fin=False) * 4094)
    conn.send(CONT, b'"', fin=True)
    conn.text('{"after":true}')
    _answer_close_then_end(conn, 1)


def test_WS_004_thread_client_a_message_in_exactly_4096_fragments_is_delivered() -> None:
    with (
        RawBridge(_exactly_4096_fragments) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=Backoff(**FAST)) as client,
    ):
        got = [client.receive(2) for _ in range(3)]
    assert got == [Reauthenticated(1), "f" * 4094, {"after": True}]


@pytest.mark.anyio
async def test_WS_004_anyio_transport_a_message_in_exactly_4096_fragments_is_delivered(
    anyio_backend: str,
) -> None:
    with RawBridge(_exactly_4096_fragments) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=Backoff(**FAST)) as transport:
            with anyio.fail_after(2):
                got = [await transport.receive() for _ in range(3)]
    assert got == [Reauthenticated(1), "f" * 4094, {"after": True}]


def _closed_port() -> int:
    s = socket.create_server(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port  # nothing listens there: connects are refused at once


def test_WS_003_asyncio_client_close_during_the_backoff_wait_is_prompt() -> None:
    async def main(url: str) -> float:
        client = WebSocketClient(
            url, on_frame=lambda v: None, backoff=Backoff(base_ms=2000, max_ms=2000, jitter=0)
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(1):
            while not client.delays_ms:  # the first connect was refused: waiting 2 s
                await asyncio.sleep(0.005)
        started = time.monotonic()
        await client.close()
        with anyio.fail_after(1.5):
            await task
        return time.monotonic() - started

    elapsed = asyncio.run(main(f"ws://127.0.0.1:{_closed_port()}"))
    assert elapsed < 0.3, elapsed


def test_WS_003_thread_client_close_during_the_backoff_wait_is_prompt() -> None:
    client = ThreadWebSocketClient(
        f"ws://127.0.0.1:{_closed_port()}", backoff=Backoff(base_ms=2000, max_ms=2000, jitter=0)
    )
    client.start()
    _wait_until(lambda: bool(client.delays_ms), timeout_s=1)
    started = time.monotonic()
    client.close(timeout_s=1.5)
    assert time.monotonic() - started < 0.3
    assert not client.alive


@pytest.mark.anyio
async def test_WS_003_anyio_transport_close_during_the_backoff_wait_is_prompt(
    anyio_backend: str,
) -> None:
    async with AnyioWebSocketTransport(
        f"ws://127.0.0.1:{_closed_port()}", backoff=Backoff(base_ms=2000, max_ms=2000, jitter=0)
    ) as transport:
        await _await_until(lambda: bool(transport.client.delays_ms), timeout_s=1)
        started = time.monotonic()
    assert time.monotonic() - started < 0.3


@contextlib.contextmanager
def _unreachable() -> Iterator[int]:
    """A port on 127.0.0.1 whose accept queue is full: a TCP connect to it
    hangs (its SYNs are dropped) as to a host that is down."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    filler = socket.create_connection(("127.0.0.1", port))
    probe = socket.socket()
    probe.settimeout(0.2)
    try:
        with pytest.raises(TimeoutError):  # the premise: connects now hang
            probe.connect(("127.0.0.1", port))
        yield port
    finally:
        for s in (probe, filler, listener):
            s.close()


@pytest.mark.parametrize("via", ["direct", "proxy"])
def test_WS_003_thread_client_close_during_a_hanging_tcp_connect_is_prompt(via: str) -> None:
    with _unreachable() as port:
        url, proxy = f"ws://127.0.0.1:{port}", None
        if via == "proxy":
            url, proxy = "ws://127.0.0.1:9", f"http://user:{CANARY}@127.0.0.1:{port}"
        client = ThreadWebSocketClient(url, proxy=proxy, open_timeout_s=10)
        client.start()
        time.sleep(0.2)  # in connect()
        started = time.monotonic()
        client.close(timeout_s=1)
        assert time.monotonic() - started < 0.5
        assert not client.alive
        with pytest.raises(EOFError):
            client.receive(0.1)
    assert client.connections == 0
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_003_anyio_transport_close_during_a_hanging_tcp_connect_is_prompt(
    anyio_backend: str,
) -> None:
    with _unreachable() as port:
        async with AnyioWebSocketTransport(
            f"ws://127.0.0.1:{port}", connect_timeout_s=10
        ) as transport:
            await anyio.sleep(0.2)  # in connect
            started = time.monotonic()
        assert time.monotonic() - started < 0.5
    assert transport.connections == 0


def test_WS_003_asyncio_client_close_during_a_hanging_tcp_connect_is_prompt() -> None:
    async def main(url: str) -> float:
        client = WebSocketClient(url, on_frame=lambda v: None)
        task = asyncio.get_running_loop().create_task(client.run())
        await asyncio.sleep(0.2)  # in connect
        started = time.monotonic()
        await client.close()
        with anyio.fail_after(1.5):
            await task
        return time.monotonic() - started

    with _unreachable() as port:
        assert asyncio.run(main(f"ws://127.0.0.1:{port}")) < 0.5


_BAD_HEADER_VALUES = [
    Secret(f"Bearer {CANARY}\r\nX-Injected: 1"),
    Secret(f"Bearer {CANARY}\n"),  # a token read from a file, newline kept
    f"Bearer {CANARY}\x00",
]


@pytest.mark.parametrize("value", _BAD_HEADER_VALUES, ids=["crlf", "trailing-lf", "nul"])
@pytest.mark.parametrize("kind", ["thread", "anyio", "asyncio"])
def test_WS_006_a_header_value_that_is_not_http_is_refused_at_construction_without_it(
    kind: str, value: str | Secret
) -> None:
    # websockets refuses such a value with an exception quoting it; unchecked,
    # the anyio client's run() raised that (the secret in its message) into
    # the host's task group, and the two others retried silently forever.
    headers = {"Authorization": value}
    url = "ws://127.0.0.1:9"
    make: dict[str, Callable[[], object]] = {
        "thread": lambda: ThreadWebSocketClient(url, headers=headers),
        "anyio": lambda: AnyioWebSocketTransport(url, headers=headers),
        "asyncio": lambda: WebSocketClient(url, on_frame=lambda v: None, headers=headers),
    }
    with pytest.raises(ValueError, match="Authorization") as info:
        make[kind]()
    assert CANARY not in _exception_chain_text(info.value)


# ------------------------------- a hostile bridge's answer to the handshake


def _answer(data: bytes) -> Callable[[socket.socket, bytes], None]:
    def answer(sock: socket.socket, head: bytes) -> None:
        sock.sendall(data)
        sock.close()

    return answer


_BAD_HANDSHAKES: dict[str, bytes] = {
    "200-not-101": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "101-bad-accept": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + CANARY.encode() + b"\r\n\r\n",
    "101-no-upgrade": b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    "redirect": b"HTTP/1.1 302 Found\r\nLocation: ws://127.0.0.1:9/\r\nContent-Length: 0\r\n\r\n",
    "401-secret-body": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm="
    + CANARY.encode()
    + b"\r\nContent-Length: 9\r\n\r\n"
    + CANARY.encode(),
    "not-http": b"\x16\x03\x01garbage " + CANARY.encode() + b"\r\n\r\n",
    "non-ascii-header": b"HTTP/1.1 101 Switching Protocols\r\nX-\xff: \xfe\r\n\r\n",
    "huge-header": b"HTTP/1.1 101 Switching Protocols\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n",
}


@pytest.mark.parametrize("answer", list(_BAD_HANDSHAKES), ids=list(_BAD_HANDSHAKES))
def test_WS_004_thread_client_a_hostile_handshake_answer_is_retried_quietly(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    _all_debug(caplog)
    with RawProxy(_answer(_BAD_HANDSHAKES[answer])) as bridge:
        client = ThreadWebSocketClient(
            f"ws://127.0.0.1:{bridge.port}",
            headers={"Authorization": Secret(_HEADER)},
            backoff=Backoff(**FAST),
            open_timeout_s=1,
        )
        with client:
            _wait_until(lambda: len(bridge.requests) >= 2, timeout_s=2)
            assert not client.connected
        assert client.alive is False
    assert client.connections == 0
    assert client.errors == []
    _no_canary_in_logs(caplog)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", list(_BAD_HANDSHAKES), ids=list(_BAD_HANDSHAKES))
async def test_WS_004_anyio_transport_a_hostile_handshake_answer_is_retried_quietly(
    anyio_backend: str, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    _all_debug(caplog)
    with RawProxy(_answer(_BAD_HANDSHAKES[answer])) as bridge:
        async with AnyioWebSocketTransport(
            f"ws://127.0.0.1:{bridge.port}",
            headers={"Authorization": Secret(_HEADER)},
            backoff=Backoff(**FAST),
            connect_timeout_s=1,
        ) as transport:
            await _await_until(lambda: len(bridge.requests) >= 2, timeout_s=2)
            assert not transport.client.connected
    assert transport.connections == 0
    _no_canary_in_logs(caplog)


@pytest.mark.parametrize("answer", list(_BAD_HANDSHAKES), ids=list(_BAD_HANDSHAKES))
def test_WS_004_asyncio_client_a_hostile_handshake_answer_is_retried_quietly(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    _all_debug(caplog)

    async def main(url: str, bridge: RawProxy) -> WebSocketClient:
        client = WebSocketClient(
            url,
            on_frame=lambda v: None,
            headers={"Authorization": Secret(_HEADER)},
            backoff=Backoff(**FAST),
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while len(bridge.requests) < 2:
                await asyncio.sleep(0.005)
        assert not client.connected
        await client.close()
        with anyio.fail_after(1):
            await task
        return client

    with RawProxy(_answer(_BAD_HANDSHAKES[answer])) as bridge:
        client = asyncio.run(main(f"ws://127.0.0.1:{bridge.port}", bridge))
    assert client.connections == 0
    _no_canary_in_logs(caplog)


@pytest.mark.parametrize("location", ["cross-origin", "http"])
def test_WS_004_asyncio_client_never_follows_a_redirect_with_its_credentials(
    location: str,
) -> None:
    # websockets follows up to 10 redirects, cross-origin ones included, and
    # sends the same handshake headers there: the bridge's credentials would
    # go to whatever host the answer names. A Location that is not ws://
    # made run() raise InvalidURI (for the client's own, valid URL) and stop.
    async def main(url: str, bridge: RawProxy) -> WebSocketClient:
        client = WebSocketClient(
            url,
            on_frame=lambda v: None,
            headers={"Authorization": Secret(_HEADER)},
            backoff=Backoff(**FAST),
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while len(bridge.requests) < 3 and not task.done():
                await asyncio.sleep(0.005)
        assert not task.done()  # still retrying
        await client.close()
        with anyio.fail_after(1):
            await task
        return client

    with RawBridge(_hold) as elsewhere:
        target = elsewhere.url + "/" if location == "cross-origin" else "http://127.0.0.1:9/"
        redirect = f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n"
        with RawProxy(_answer(redirect.encode())) as bridge:
            client = asyncio.run(main(f"ws://127.0.0.1:{bridge.port}", bridge))
        assert elsewhere.connections == 0
        assert elsewhere.requests == []
    assert client.connections == 0


def test_WS_004_thread_client_never_follows_a_redirect_and_keeps_retrying() -> None:
    with RawBridge(_hold) as elsewhere:
        redirect = f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere.url}/\r\n\r\n"
        with RawProxy(_answer(redirect.encode())) as bridge:
            client = ThreadWebSocketClient(
                f"ws://127.0.0.1:{bridge.port}",
                headers={"Authorization": Secret(_HEADER)},
                backoff=Backoff(**FAST),
            )
            with client:
                _wait_until(lambda: len(bridge.requests) >= 3, timeout_s=2)
                assert client.alive  # not stopped by the redirect
        assert elsewhere.connections == 0
    assert client.errors == []


@pytest.mark.anyio
async def test_WS_004_anyio_transport_never_follows_a_redirect(anyio_backend: str) -> None:
    with RawBridge(_hold) as elsewhere:
        redirect = f"HTTP/1.1 301 Moved Permanently\r\nLocation: {elsewhere.url}/\r\n\r\n"
        with RawProxy(_answer(redirect.encode())) as bridge:
            async with AnyioWebSocketTransport(
                f"ws://127.0.0.1:{bridge.port}",
                headers={"Authorization": Secret(_HEADER)},
                backoff=Backoff(**FAST),
            ) as transport:
                await _await_until(lambda: len(bridge.requests) >= 3, timeout_s=2)
        assert elsewhere.connections == 0
    assert transport.connections == 0


@pytest.mark.anyio
async def test_WS_003_anyio_transport_aclose_unblocks_a_send_to_a_bridge_that_never_reads(
    anyio_backend: str,
) -> None:
    from leasegate.shells.transport import NotConnected

    outcome: list[str] = []
    with RawBridge(_never_read) as bridge:
        async with anyio.create_task_group() as tg:
            async with AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), close_timeout_s=0.5
            ) as transport:
                with anyio.fail_after(2):
                    assert await transport.receive() == Reauthenticated(1)
                    assert await transport.receive() == {"ready": True}

                async def sender() -> None:
                    try:
                        for _ in range(10_000):
                            await transport.send({"pad": "s" * 65536})
                        outcome.append("all sent?")
                    except NotConnected:
                        outcome.append("NotConnected")

                tg.start_soon(sender)
                await anyio.sleep(0.3)
                assert outcome == []  # the send waits: the bridge reads nothing
                started = time.monotonic()
                with anyio.fail_after(2):
                    await transport.aclose()
            await _await_until(lambda: bool(outcome), timeout_s=1.5)
    assert time.monotonic() - started < 1.5
    assert outcome == ["NotConnected"]


def test_WS_003_asyncio_client_close_is_bounded_when_the_bridge_ignores_the_close_frame() -> None:
    got: list[Any] = []

    async def main(url: str) -> float:
        client = WebSocketClient(
            url, on_frame=got.append, backoff=Backoff(**FAST), close_timeout_s=0.5
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while not got:
                await asyncio.sleep(0.005)
        started = time.monotonic()
        with anyio.fail_after(2):
            await client.close()
            await task
        return time.monotonic() - started

    with RawBridge(_hold) as bridge:
        elapsed = asyncio.run(main(bridge.url))
    assert got == [{"n": 1}]
    assert elapsed < 1.0, elapsed


def test_WS_003_asyncio_client_open_timeout_bounds_a_silent_bridge() -> None:
    async def main(url: str, silent: RawProxy) -> WebSocketClient:
        client = WebSocketClient(
            url, on_frame=lambda v: None, backoff=Backoff(**FAST), open_timeout_s=0.3
        )
        task = asyncio.get_running_loop().create_task(client.run())
        with anyio.fail_after(2):
            while len(silent.requests) < 2:  # gave up on the first, tried again
                await asyncio.sleep(0.005)
        await client.close()
        with anyio.fail_after(1):
            await task
        return client

    with RawProxy(_silent) as silent:
        client = asyncio.run(main(f"ws://127.0.0.1:{silent.port}", silent))
    assert client.connections == 0
    assert len(client.delays_ms) >= 1


@pytest.mark.parametrize(
    "name", ["X-Evil\r\nX-Injected", "Bad Name", "X:Y", ""], ids=["crlf", "space", "colon", "empty"]
)
def test_WS_006_a_header_name_that_is_not_an_http_token_is_refused(name: str) -> None:
    # websockets checks header values only: a name with CR LF would inject a
    # header line into the handshake request.
    for make in (
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", headers={name: "v"}),
        lambda: AnyioWebSocketTransport("ws://127.0.0.1:9", headers={name: "v"}),
        lambda: WebSocketClient("ws://127.0.0.1:9", on_frame=lambda v: None, headers={name: "v"}),
    ):
        with pytest.raises(ValueError, match="<invalid name>"):
            make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: ThreadWebSocketClient("ws://127.0.0.1:9", proxy=f"ftp://h:1/{CANARY}"),
        lambda: AnyioWebSocketTransport("ws://127.0.0.1:9", proxy=f"socks5://h:1/{CANARY}"),
        lambda: WebSocketClient(
            "ws://127.0.0.1:9", on_frame=lambda v: None, proxy=f"gopher://h:1/{CANARY}"
        ),
    ],
    ids=["thread", "anyio", "asyncio"],
)
def test_WS_006_a_refused_proxy_url_shows_its_address_only(make: Callable[[], object]) -> None:
    # A proxy's path means nothing to the client; whatever a host put there
    # stays out of the error (shown as "/…").
    with pytest.raises(InvalidProxy) as info:
        make()
    text = _exception_chain_text(info.value)
    assert CANARY not in text
    assert "h:1/…" in str(info.value)
