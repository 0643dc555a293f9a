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
import time
from typing import Any

import anyio
import pytest
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
