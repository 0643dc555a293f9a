"""A bridge that accepts the WebSocket and then never reads (WS-009 in ``docs/transport.md``).

A flood of sends fills the socket buffers; the send that then cannot complete
fails with ``NotConnected`` about ``send_timeout_s`` later, the stall is
counted once (``send_timeouts``), the connection is dropped and the client
reconnects (the thread client; the anyio transport under asyncio and trio).
With the bound out of reach (a huge ``send_timeout_s``) the flood blocks past
the test's deadline, so these tests fail without the bound.

Every bridge is a thread on 127.0.0.1 (``raw_bridge.RawBridge``); every wait
is bounded.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable

import anyio
import pytest
import wait_kit
from raw_bridge import RawBridge, RawConn

from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    Backoff,
    NotConnected,
    Reauthenticated,
    ThreadWebSocketClient,
    WebSocketClient,
)
from leasegate.shells.transport._frames import UNSENT_LOW_WATER_BYTES

FAST = {"base_ms": 10, "max_ms": 20}
#: The clients' send bound in these tests, seconds.
SEND_TIMEOUT_S = 1.0
#: How late after the flood starts the stalled send may fail: the bound plus
#: the time to fill the loopback buffers and the watchdog's poll.
FAIL_BOUND_S = SEND_TIMEOUT_S + 1.0
#: One frame of the flood (64 KiB of padding: the buffers fill in a few dozen).
PAD = {"pad": "x" * 65_536}


def _never_read(stop: threading.Event) -> Callable[[RawConn, int], None]:
    def script(conn: RawConn, n: int) -> None:
        stop.wait(30)  # holds TCP open and never reads a byte

    return script


def test_WS_009_thread_client_send_to_a_non_reading_bridge_fails_in_time_and_reconnects() -> None:
    stop = threading.Event()
    failed_after: list[float] = []
    with (
        RawBridge(_never_read(stop)) as bridge,
        ThreadWebSocketClient(
            bridge.url,
            backoff=Backoff(**FAST),
            send_timeout_s=SEND_TIMEOUT_S,
            close_timeout_s=1.0,
        ) as client,
    ):
        try:
            assert client.receive(2) == Reauthenticated(1)

            def flood() -> None:
                started = time.monotonic()
                try:
                    while time.monotonic() - started < FAIL_BOUND_S + 1:
                        client.send(PAD)
                except NotConnected:
                    failed_after.append(time.monotonic() - started)

            sender = threading.Thread(target=flood, daemon=True)
            sender.start()
            sender.join(FAIL_BOUND_S + 1)
            assert failed_after, "the flood's stalled send never failed"
            assert failed_after[0] < FAIL_BOUND_S
            assert client.send_timeouts == 1
            assert client.receive(3) == Reauthenticated(2)
            assert bridge.connections == 2
        finally:
            stop.set()


@pytest.mark.anyio
async def test_WS_009_anyio_transport_send_to_a_non_reading_bridge_fails_in_time_and_reconnects(
    anyio_backend: str,
) -> None:
    stop = threading.Event()
    failed_after: float | None = None
    try:
        with RawBridge(_never_read(stop)) as bridge:
            async with AnyioWebSocketTransport(
                bridge.url,
                backoff=Backoff(**FAST),
                send_timeout_s=SEND_TIMEOUT_S,
                close_timeout_s=1.0,
            ) as transport:
                with anyio.fail_after(2):
                    assert await transport.receive() == Reauthenticated(1)
                started = anyio.current_time()
                with anyio.move_on_after(FAIL_BOUND_S + 1):
                    try:
                        while True:
                            await transport.send(PAD)
                    except NotConnected:
                        failed_after = anyio.current_time() - started
                assert failed_after is not None, "the flood's stalled send never failed"
                assert failed_after < FAIL_BOUND_S
                assert transport.client.send_timeouts == 1
                with anyio.fail_after(3):
                    assert await transport.receive() == Reauthenticated(2)
                assert bridge.connections == 2
    finally:
        stop.set()


def test_WS_009_asyncio_client_send_to_a_non_reading_bridge_fails_and_reconnects() -> None:
    import asyncio

    asyncio.run(_asyncio_client_stall())


@contextlib.asynccontextmanager
async def _asyncio_client(
    url: str, send_timeout_s: float
) -> AsyncIterator[tuple[WebSocketClient, list[int]]]:
    """A running asyncio ``WebSocketClient`` once connected, and its
    ``on_authenticated`` calls; closed and joined on leaving."""
    import asyncio

    authenticated: list[int] = []
    client = WebSocketClient(
        url,
        on_frame=lambda value: None,
        on_authenticated=authenticated.append,
        backoff=Backoff(**FAST),
        send_timeout_s=send_timeout_s,
        close_timeout_s=1.0,
    )
    runner = asyncio.ensure_future(client.run())
    try:
        async with asyncio.timeout(2):
            while not authenticated:
                await asyncio.sleep(0.01)
        yield client, authenticated
    finally:
        await client.close()
        async with asyncio.timeout(5):
            await runner


async def _asyncio_client_stall() -> None:
    import asyncio

    stop = threading.Event()
    failed_after: float | None = None
    try:
        with RawBridge(_never_read(stop)) as bridge:
            async with _asyncio_client(bridge.url, SEND_TIMEOUT_S) as (client, authenticated):
                loop = asyncio.get_running_loop()
                started = loop.time()
                try:
                    async with asyncio.timeout(FAIL_BOUND_S + 1):
                        while True:
                            await client.send(PAD)
                except NotConnected:
                    failed_after = loop.time() - started
                assert failed_after is not None, "the flood's stalled send never failed"
                assert failed_after < FAIL_BOUND_S
                assert client.send_timeouts == 1
                async with asyncio.timeout(3):
                    while len(authenticated) < 2:
                        await asyncio.sleep(0.01)
                assert bridge.connections == 2
    finally:
        stop.set()


def _never_read_but_send_on_cue(
    stop: threading.Event, cues: list[threading.Event]
) -> Callable[[RawConn, int], None]:
    """Send ``{"n": 1}``, then ``{"n": k}`` as cue ``k - 2`` is set; never read."""

    def script(conn: RawConn, n: int) -> None:
        conn.text('{"n":1}')
        for k, cue in enumerate(cues, start=2):
            if not cue.wait(10):
                return
            conn.text(f'{{"n":{k}}}')
        stop.wait(30)

    return script


@pytest.mark.anyio
async def test_WS_009_anyio_transport_keeps_reading_while_a_send_waits_for_the_bridge(
    anyio_backend: str,
) -> None:
    # A send the bridge does not take holds the socket's writing; the
    # reading goes on (its pongs wait for that send), so frames still arrive
    # while the send waits (WS-008's overflow needs them).
    stop = threading.Event()
    cues = [threading.Event(), threading.Event()]
    last_sent = [0.0]

    async def flood() -> None:
        with contextlib.suppress(NotConnected):
            while True:
                await transport.send(PAD)
                last_sent[0] = anyio.current_time()

    def waiting() -> bool:
        return anyio.current_time() - last_sent[0] > 0.5

    try:
        with RawBridge(_never_read_but_send_on_cue(stop, cues), receive_buffer=4096) as bridge:
            async with AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), send_timeout_s=30, close_timeout_s=1.0
            ) as transport:
                with anyio.fail_after(2):
                    assert await transport.receive() == Reauthenticated(1)
                    assert await transport.receive() == {"n": 1}
                async with anyio.create_task_group() as tg:
                    last_sent[0] = anyio.current_time()
                    tg.start_soon(flood)
                    await wait_kit.await_until(waiting, 5)  # a send waits for the bridge
                    for k, cue in enumerate(cues, start=2):
                        cue.set()
                        with anyio.fail_after(2):
                            assert await transport.receive() == {"n": k}
                    assert waiting()  # the send still waits
                    assert transport.client.send_timeouts == 0
                    tg.cancel_scope.cancel()
    finally:
        stop.set()
        for cue in cues:
            cue.set()


#: One small frame (1 KiB of padding), as the shells' acks are small.
SMALL = {"pad": "x" * 1024}
#: At most this many bytes of sends go out to a bridge that never reads before
#: one waits: its small receive buffer, what is in flight and the untransmitted
#: bound. Without the bound the kernel's send buffer (megabytes on Linux
#: loopback) takes them all first and the send bound starts that much later.
TAKEN_BOUND = 4 * UNSENT_LOW_WATER_BYTES

needs_notsent_lowat = pytest.mark.skipif(
    not hasattr(socket, "TCP_NOTSENT_LOWAT"), reason="the platform has no TCP_NOTSENT_LOWAT"
)


@needs_notsent_lowat
def test_WS_009_thread_client_send_waits_once_a_non_reading_bridge_took_a_few_kib() -> None:
    stop = threading.Event()
    taken = 0
    try:
        with (
            RawBridge(_never_read(stop), receive_buffer=4096) as bridge,
            ThreadWebSocketClient(
                bridge.url, backoff=Backoff(**FAST), send_timeout_s=0.5, close_timeout_s=1.0
            ) as client,
        ):
            assert client.receive(2) == Reauthenticated(1)
            with contextlib.suppress(NotConnected):
                while taken < 2 * TAKEN_BOUND:
                    client.send(SMALL)
                    taken += len(SMALL["pad"])
            assert client.send_timeouts == 1
    finally:
        stop.set()
    assert taken < TAKEN_BOUND


@needs_notsent_lowat
@pytest.mark.anyio
async def test_WS_009_anyio_transport_send_waits_once_a_non_reading_bridge_took_a_few_kib(
    anyio_backend: str,
) -> None:
    stop = threading.Event()
    taken = 0
    try:
        with RawBridge(_never_read(stop), receive_buffer=4096) as bridge:
            async with AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(**FAST), send_timeout_s=0.5, close_timeout_s=1.0
            ) as transport:
                with anyio.fail_after(2):
                    assert await transport.receive() == Reauthenticated(1)
                with anyio.fail_after(10), contextlib.suppress(NotConnected):
                    while taken < 2 * TAKEN_BOUND:
                        await transport.send(SMALL)
                        taken += len(SMALL["pad"])
                assert transport.client.send_timeouts == 1
    finally:
        stop.set()
    assert taken < TAKEN_BOUND


@needs_notsent_lowat
def test_WS_009_asyncio_client_send_waits_once_a_non_reading_bridge_took_a_few_kib() -> None:
    import asyncio

    async def flood() -> int:
        stop = threading.Event()
        taken = 0
        try:
            with RawBridge(_never_read(stop), receive_buffer=4096) as bridge:
                async with _asyncio_client(bridge.url, 0.5) as (client, _):
                    async with asyncio.timeout(10):
                        with contextlib.suppress(NotConnected):
                            while taken < 2 * TAKEN_BOUND:
                                await client.send(SMALL)
                                taken += len(SMALL["pad"])
                    assert client.send_timeouts == 1
        finally:
            stop.set()
        return taken

    assert asyncio.run(flood()) < TAKEN_BOUND
