"""The WebSocket clients against a bridge that breaks the rules (``docs/transport.md``).

* WS-004: after a message over ``max_frame_bytes`` (the default 4 MiB) the
  client fails the connection with 1009; a bridge that then ignores the close
  frame and keeps TCP open is dropped ``close_timeout_s`` later and the
  client reconnects (all three clients).
* WS-007: a bridge that accepts the handshake and resets the connection at
  once gets reconnects with a growing backoff: the backoff is reset only by a
  connection that proved healthy (all three clients).

Every bridge is a thread on 127.0.0.1 (``raw_bridge.RawBridge``); every wait
is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import anyio
import pytest
import wait_kit
from raw_bridge import TEXT, RawBridge, RawConn, encode_frame

from leasegate.shells.transport import (
    DEFAULT_MAX_FRAME_BYTES,
    AnyioWebSocketTransport,
    Backoff,
    Reauthenticated,
    ThreadWebSocketClient,
    WebSocketClient,
)

FAST = {"base_ms": 10, "max_ms": 20}

# ------------------------------------------- WS-004: oversized, then TCP held

#: The client's close timeout in these tests, and the bound on the whole
#: reconnect (close timeout, one backoff delay, a handshake, slack).
CLOSE_TIMEOUT_S = 1.0
RECONNECT_BOUND_S = 3.0


def _oversized_then_hold(conn: RawConn, n: int) -> None:
    """Connection 1: a frame, then a whole message one byte over 4 MiB, then
    silence with TCP held open (the client's close frame is never answered)."""
    conn.text(f'{{"n":{n}}}')
    if n == 1:
        body = b'"' + b"z" * (DEFAULT_MAX_FRAME_BYTES - 1) + b'"'  # 4 MiB + 1
        conn.sock.sendall(encode_frame(TEXT, body))
        time.sleep(30)


_EXPECTED = [Reauthenticated(1), {"n": 1}, Reauthenticated(2), {"n": 2}]


def test_WS_004_thread_client_oversized_then_held_tcp_reconnects_within_close_timeout() -> None:
    with (
        RawBridge(_oversized_then_hold) as bridge,
        ThreadWebSocketClient(
            bridge.url, backoff=Backoff(**FAST), close_timeout_s=CLOSE_TIMEOUT_S
        ) as client,
    ):
        assert client.receive(2) == Reauthenticated(1)
        assert client.receive(2) == {"n": 1}
        started = time.monotonic()
        got = [client.receive(RECONNECT_BOUND_S + 1) for _ in range(2)]
        elapsed = time.monotonic() - started
    assert got == _EXPECTED[2:]
    assert elapsed < RECONNECT_BOUND_S


@pytest.mark.anyio
async def test_WS_004_anyio_transport_oversized_then_held_tcp_reconnects_within_close_timeout(
    anyio_backend: str,
) -> None:
    with RawBridge(_oversized_then_hold) as bridge:
        async with AnyioWebSocketTransport(
            bridge.url, backoff=Backoff(**FAST), close_timeout_s=CLOSE_TIMEOUT_S
        ) as transport:
            with anyio.fail_after(2):
                assert [await transport.receive() for _ in range(2)] == _EXPECTED[:2]
            started = time.monotonic()
            with anyio.fail_after(RECONNECT_BOUND_S + 1):
                got = [await transport.receive() for _ in range(2)]
            elapsed = time.monotonic() - started
    assert got == _EXPECTED[2:]
    assert elapsed < RECONNECT_BOUND_S


def test_WS_004_asyncio_client_oversized_then_held_tcp_reconnects_within_close_timeout() -> None:
    frames: list[Any] = []
    at: list[float] = []

    async def main(url: str) -> None:
        client: WebSocketClient

        async def on_frame(value: Any) -> None:
            frames.append(value)
            at.append(time.monotonic())
            if value == {"n": 2}:
                await client.close()

        client = WebSocketClient(
            url, on_frame=on_frame, backoff=Backoff(**FAST), close_timeout_s=CLOSE_TIMEOUT_S
        )
        with anyio.fail_after(RECONNECT_BOUND_S + 2):
            await client.run()

    with RawBridge(_oversized_then_hold) as bridge:
        asyncio.run(main(bridge.url))
    assert frames == [{"n": 1}, {"n": 2}]
    assert at[1] - at[0] < RECONNECT_BOUND_S


# ------------------------------------- WS-007: the backoff survives a reset storm

#: Deterministic delays: with ``rng`` at 1.0 a delay is its cap, base * 2**n.
STORM = {"base_ms": 20, "max_ms": 5_000, "jitter": 0.5, "rng": lambda: 1.0}
#: Connection 4 proves healthy (a frame, or it stays up past ``healthy_ms``);
#: every other connection is reset right after the handshake.
HEALTHY_CONNECTION = 4
HEALTHY_MS = 150
#: The delays taken after connections 1 to 5: growing, reset by connection 4 only.
EXPECTED_DELAYS_MS = [20, 40, 80, 20, 40]


def _reset(conn: RawConn) -> None:
    """Close with an RST (SO_LINGER 0): the connection is reset, not closed."""
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.sock.close()


def _storm(healthy_by: str) -> Any:
    def script(conn: RawConn, n: int) -> None:
        if n != HEALTHY_CONNECTION:
            _reset(conn)
        elif healthy_by == "frame":
            conn.text('{"healthy":true}')
            conn.sock.close()
        else:  # stays up, silent, past healthy_ms
            time.sleep(2 * HEALTHY_MS / 1000)
            _reset(conn)

    return script


HEALTHY_BY = pytest.mark.parametrize("healthy_by", ["frame", "uptime"])


@HEALTHY_BY
def test_WS_007_thread_client_backoff_grows_across_connections_the_bridge_resets(
    healthy_by: str,
) -> None:
    backoff = Backoff(**STORM, healthy_ms=HEALTHY_MS)
    with (
        RawBridge(_storm(healthy_by)) as bridge,
        ThreadWebSocketClient(bridge.url, backoff=backoff) as client,
    ):
        wait_kit.wait_until(lambda: len(client.delays_ms) >= len(EXPECTED_DELAYS_MS), 5)
    assert client.delays_ms[: len(EXPECTED_DELAYS_MS)] == EXPECTED_DELAYS_MS
    assert bridge.connections <= len(EXPECTED_DELAYS_MS) + 1


@pytest.mark.anyio
@HEALTHY_BY
async def test_WS_007_anyio_transport_backoff_grows_across_connections_the_bridge_resets(
    anyio_backend: str, healthy_by: str
) -> None:
    backoff = Backoff(**STORM, healthy_ms=HEALTHY_MS)
    with RawBridge(_storm(healthy_by)) as bridge:
        async with AnyioWebSocketTransport(bridge.url, backoff=backoff) as transport:
            delays = transport.client.delays_ms
            with anyio.fail_after(5):
                while len(delays) < len(EXPECTED_DELAYS_MS):
                    await transport.receive()  # markers and the frame: never a full inbox
    assert delays[: len(EXPECTED_DELAYS_MS)] == EXPECTED_DELAYS_MS
    assert bridge.connections <= len(EXPECTED_DELAYS_MS) + 1


@HEALTHY_BY
def test_WS_007_asyncio_client_backoff_grows_across_connections_the_bridge_resets(
    healthy_by: str,
) -> None:
    backoff = Backoff(**STORM, healthy_ms=HEALTHY_MS)

    async def main(url: str) -> WebSocketClient:
        client = WebSocketClient(url, on_frame=lambda v: None, backoff=backoff)
        task = asyncio.ensure_future(client.run())
        try:
            await wait_kit.await_until(lambda: len(client.delays_ms) >= len(EXPECTED_DELAYS_MS))
        finally:
            await client.close()
            await asyncio.wait_for(task, 3)
        return client

    with RawBridge(_storm(healthy_by)) as bridge:
        client = asyncio.run(main(bridge.url))
    assert client.delays_ms[: len(EXPECTED_DELAYS_MS)] == EXPECTED_DELAYS_MS
    assert bridge.connections <= len(EXPECTED_DELAYS_MS) + 1


def test_WS_007_backoff_resets_only_after_a_healthy_connection() -> None:
    backoff = Backoff(**STORM, healthy_ms=HEALTHY_MS)
    delays = [backoff.next_ms()]  # a failed connect
    backoff.connection_ended(up_ms=HEALTHY_MS - 1, frames=0)  # reset at once: not healthy
    delays.append(backoff.next_ms())
    backoff.connection_ended(up_ms=0, frames=1)  # carried a frame from the cloud: healthy
    delays.append(backoff.next_ms())
    backoff.connection_ended(up_ms=HEALTHY_MS, frames=0)  # stayed up long enough: healthy
    delays.append(backoff.next_ms())
    assert delays == [20, 40, 20, 20]
    assert Backoff().healthy_ms == 5_000
