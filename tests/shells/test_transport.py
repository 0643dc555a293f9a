"""Transports (issue #6): memory pairs, the reconnecting WebSocket client."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection, serve

from leasegate.core import Secret
from leasegate.shells.transport import (
    Backoff,
    NotConnected,
    WebSocketClient,
    memory_pair,
    thread_memory_pair,
)


@pytest.mark.anyio
async def test_shell_memory_pair_carries_json_and_counts_malformed(anyio_backend: str) -> None:
    a, b = memory_pair(8)
    await a.send({"kind": "lease.request", "n": 1, "text": "é"})
    await a.send_text("{not json")
    await a.send_text("NaN")  # JSON.parse refuses it
    await a.send_text(b'{"bytes": true}')  # not a text frame
    await a.send_text('{"a":1} trailing')
    await a.send_text('{"kind":"ok"}')
    assert await b.receive() == {"kind": "lease.request", "n": 1, "text": "é"}
    assert await b.receive() == {"kind": "ok"}
    assert b.dropped == 4
    await b.send([1, 2])
    assert await a.receive() == [1, 2]
    await a.aclose()
    with pytest.raises(anyio.EndOfStream):
        await b.receive()


def test_shell_thread_pair_carries_json_across_threads_and_counts_malformed() -> None:
    a, b = thread_memory_pair(4)
    got: list[Any] = []

    def reader() -> None:
        try:
            while True:
                got.append(b.receive(timeout_s=5))
        except EOFError:
            pass

    t = threading.Thread(target=reader)
    t.start()
    for i in range(20):
        a.send({"i": i})
        if i % 5 == 0:
            a.send_text("{bad")
    a.close()
    t.join(5)
    assert not t.is_alive()
    assert got == [{"i": i} for i in range(20)]
    assert b.dropped == 4
    with pytest.raises(EOFError):
        a.send({"late": True})
    with pytest.raises(queue.Empty):
        a.receive(timeout_s=0.01)


def test_shell_thread_pair_is_bounded_and_close_never_blocks() -> None:
    a, b = thread_memory_pair(2)
    a.send(1)
    a.send_text("{bad")  # a malformed frame takes a slot too
    with pytest.raises(queue.Full):
        a.send(3, timeout_s=0.05)
    a.close()  # the buffer is full: close must not block
    assert b.receive(timeout_s=1) == 1
    with pytest.raises(EOFError):
        b.receive(timeout_s=1)
    assert b.dropped == 1


def test_shell_backoff_is_bounded_exponential_and_jittered_from_injected_rng() -> None:
    values = iter([0.0, 1.0, 0.5, 0.0, 1.0, 0.25, 0.0])
    b = Backoff(base_ms=100, max_ms=1_000, factor=2.0, jitter=0.5, rng=lambda: next(values))
    got = [b.next_ms() for _ in range(6)]
    # caps: 100, 200, 400, 800, 1000, 1000
    assert got == [50, 200, 300, 400, 1000, 625]
    b.reset()
    assert b.next_ms() == 50


async def _serve(handler: Any) -> Any:
    return await serve(handler, "127.0.0.1", 0)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_shell_websocket_reconnects_reauthenticates_and_drops_malformed(
    anyio_backend: str,
) -> None:
    seen_headers: list[str | None] = []
    received: list[Any] = []
    sessions = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal sessions
        sessions += 1
        seen_headers.append(ws.request.headers.get("Authorization") if ws.request else None)
        n = sessions
        await ws.send(f'{{"kind":"hello","n":{n}}}')
        await ws.send("{broken")
        await ws.send(b"\x00binary")
        if n == 1:
            await ws.close()  # the client must reconnect
            return
        received.append(await ws.recv())
        await ws.send('{"kind":"bye"}')
        await ws.wait_closed()

    server = await _serve(handler)
    port = server.sockets[0].getsockname()[1]
    frames: list[Any] = []
    auths: list[int] = []
    rng_calls = 0

    def rng() -> float:
        nonlocal rng_calls
        rng_calls += 1
        return 0.5

    client: WebSocketClient

    def on_auth(n: int) -> None:
        auths.append(n)

    def on_frame(value: Any) -> None:
        frames.append(value)
        if value == {"kind": "hello", "n": 2}:
            asyncio.get_running_loop().create_task(client.send({"kind": "resubscribe"}))
        if value == {"kind": "bye"}:
            asyncio.get_running_loop().create_task(client.close())

    client = WebSocketClient(
        f"ws://127.0.0.1:{port}",
        on_frame=on_frame,
        on_authenticated=on_auth,
        headers={"Authorization": Secret("Bearer CANARY-token")},
        backoff=Backoff(base_ms=20, max_ms=100, rng=rng),
    )
    assert "CANARY" not in repr(client)
    with pytest.raises(NotConnected):
        await client.send({"x": 1})
    with anyio.fail_after(10):
        await client.run()
    server.close()
    await server.wait_closed()
    assert auths == [1, 2]
    assert frames == [{"kind": "hello", "n": 1}, {"kind": "hello", "n": 2}, {"kind": "bye"}]
    assert client.dropped == 4
    assert received == ['{"kind":"resubscribe"}']
    assert seen_headers == ["Bearer CANARY-token", "Bearer CANARY-token"]
    assert client.delays_ms == [15]  # base 20, jitter 0.5 at rng 0.5
    assert rng_calls == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_shell_websocket_backs_off_while_the_server_is_down(anyio_backend: str) -> None:
    # A port with nothing listening: every connect fails; delays grow, capped.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    slept: list[float] = []
    client: WebSocketClient

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 6:
            await client.close()

    client = WebSocketClient(
        f"ws://127.0.0.1:{port}",
        on_frame=lambda v: None,
        backoff=Backoff(base_ms=10, max_ms=80, jitter=0.0, rng=lambda: 0.0),
        sleep=fake_sleep,
    )
    with anyio.fail_after(10):
        await client.run()
    assert client.delays_ms == [10, 20, 40, 80, 80, 80]
    assert slept == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    assert client.connections == 0


class _ThreadedServer:
    """A websockets server on 127.0.0.1 in its own thread and asyncio loop
    (so trio tests can connect to it)."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = self._loop.create_future()
        async with serve(self._handler, "127.0.0.1", 0) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop

    def __enter__(self) -> _ThreadedServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        def stop() -> None:
            assert self._stop is not None
            if not self._stop.done():
                self._stop.set_result(None)

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(10)


@pytest.mark.anyio
async def test_shell_anyio_websocket_reconnects_and_drops_malformed(anyio_backend: str) -> None:
    from leasegate.shells.transport import AnyioWebSocketClient

    sessions = 0
    seen_headers: list[str | None] = []
    received: list[Any] = []

    async def handler(ws: ServerConnection) -> None:
        nonlocal sessions
        sessions += 1
        n = sessions
        seen_headers.append(ws.request.headers.get("Authorization") if ws.request else None)
        await ws.send(f'{{"kind":"hello","n":{n}}}')
        await ws.send("{broken")
        await ws.send(b"\x00binary")
        await ws.send(['{"frag', 'mented":true}'])  # one text message in fragments
        if n == 1:
            await ws.close()
            return
        received.append(await ws.recv())
        await ws.send('{"kind":"bye"}')
        await ws.wait_closed()

    frames: list[Any] = []
    auths: list[int] = []
    with _ThreadedServer(handler) as server:
        async with anyio.create_task_group() as tg:
            client: AnyioWebSocketClient

            def on_frame(value: Any) -> None:
                frames.append(value)
                if value == {"kind": "hello", "n": 2}:
                    tg.start_soon(client.send, {"kind": "resubscribe"})
                if value == {"kind": "bye"}:
                    tg.start_soon(client.close)

            client = AnyioWebSocketClient(
                f"ws://127.0.0.1:{server.port}",
                on_frame=on_frame,
                on_authenticated=auths.append,
                headers={"Authorization": Secret("Bearer CANARY-token")},
                backoff=Backoff(base_ms=20, max_ms=100, rng=lambda: 0.5),
            )
            assert "CANARY" not in repr(client)
            with pytest.raises(NotConnected):
                await client.send({"x": 1})
            with anyio.fail_after(10):
                await client.run()
    assert auths == [1, 2]
    assert frames == [
        {"kind": "hello", "n": 1},
        {"fragmented": True},
        {"kind": "hello", "n": 2},
        {"fragmented": True},
        {"kind": "bye"},
    ]
    assert client.dropped == 4
    assert received == ['{"kind":"resubscribe"}']
    assert seen_headers == ["Bearer CANARY-token", "Bearer CANARY-token"]
    assert client.delays_ms == [15]


@pytest.mark.anyio
async def test_shell_anyio_websocket_backs_off_while_down_and_close_stops(
    anyio_backend: str,
) -> None:
    import socket

    from leasegate.shells.transport import AnyioWebSocketClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = AnyioWebSocketClient(
        f"ws://127.0.0.1:{port}",
        on_frame=lambda v: None,
        backoff=Backoff(base_ms=5, max_ms=20, jitter=0.0, rng=lambda: 0.0),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        with anyio.fail_after(10):
            while len(client.delays_ms) < 5:
                await anyio.sleep(0.005)
        await client.close()
    assert client.delays_ms[:5] == [5, 10, 20, 20, 20]
    assert client.connections == 0
