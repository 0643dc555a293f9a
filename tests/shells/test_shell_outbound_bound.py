"""A bridge that floods env frames and never reads costs the shells bounded memory (WS-008).

Every env frame makes the core emit an ack (here: ``env.replica.v1.begin``
frames for a task this runner does not hold, each answered by an error ack).
A bridge that sends them as fast as it can and never reads stalls the
shell's sender; the shell's outbound queue must stay at its bound, the frames
it cannot hold are counted, and the connection is dropped so that the
reconnect resynchronizes. Checked on each shell over its transports: the
async shell over the in-memory pair and ``AnyioWebSocketTransport`` (asyncio
and trio), the threading shell over the in-memory pair and
``ThreadWebSocketClient``. Memory is measured with ``tracemalloc`` after a
flood of a few seconds (``FLOOD_S``; the 60 s figures are in
``docs/transport.md``). The other side of the bound: a bridge that reads
everything is never dropped, however many acked frames it sends at once (the
async shell's sender keeps up with what its receiving hands the core).
Bridges on 127.0.0.1, every wait bounded.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import wait_kit
from raw_bridge import TEXT, RawBridge, RawConn

from leasegate.core import loads
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import CredentialRuntime
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    Backoff,
    ThreadWebSocketClient,
    memory_pair,
    thread_memory_pair,
)

BOOT = "boot-flood"
#: How long each flood runs, seconds, and the memory it may add, bytes
#: (the bound of the issue, 32 MB per 60 s, taken proportionally, with a
#: floor for the transports' fixed buffers).
FLOOD_S = 4.0
MAX_GROWTH = 8 * 1024 * 1024
#: The stalled bridge's receive buffer, bytes: the shell's sends back up after a few KiB.
STALLED_RECEIVE_BUFFER = 4096
#: A send bound (seconds) past every wait of these tests.
NO_SEND_BOUND_S = 60.0


def _env_frame(i: int) -> str:
    return (
        f'{{"kind":"env.replica.v1.begin","opId":"op-{i}","taskId":"task-other",'
        f'"runEpoch":1,"runnerBootId":"{BOOT}","streamId":"s1","attemptId":"a-{i}",'
        '"projectIds":["p"]}'
    )


class _Port:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None

    def leased_run(self, task_id: str) -> None:
        return None


def _runtime() -> CredentialRuntime:
    return CredentialRuntime(
        runner_kind="owned",
        op_id_seed="flood",
        engines=_Port(),
        mcp=_Port(),
        person=_Port(),
        replica=ReplicaManager(boot_id=BOOT),
    )


class Growth:
    """Traced memory now minus at the start (``tracemalloc``), bytes."""

    def __init__(self) -> None:
        gc.collect()
        tracemalloc.start()
        self.start = tracemalloc.get_traced_memory()[0]

    def now(self) -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - self.start


@pytest.fixture
def growth() -> Iterator[Callable[[], Growth]]:
    yield Growth
    tracemalloc.stop()


class StalledReader:
    """A bridge that floods env frames on every connection and never reads.

    Run it as ``RawBridge(script, receive_buffer=STALLED_RECEIVE_BUFFER)``:
    its small receive buffer is in place from the handshake on.
    """

    def __init__(self) -> None:
        self.sent = 0
        self.stop = threading.Event()

    def __call__(self, conn: RawConn, n: int) -> None:
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                conn.text(_env_frame(self.sent))
                self.sent += 1


def _peak(read: Callable[[], int], peaks: list[int]) -> None:
    peaks.append(read())


class BurstingReader:
    """An in-process transport whose bridge reads everything and sends env frames in bursts.

    Each burst of ``burst`` frames is handed over within one turn of the
    event loop, as ``AnyioWebSocketTransport``'s inbox hands the shell what
    it holds, the next one after a checkpoint; every write (``send``, or
    ``send_many`` for several frames) is taken at once after one checkpoint,
    as by a socket with room.
    """

    def __init__(self, bursts: int, burst: int) -> None:
        self.frames = [loads(_env_frame(i)) for i in range(bursts * burst)]
        self._burst = burst
        self._taken = 0
        self._ready: collections.deque[Any] = collections.deque()
        self.acked = 0

    async def receive(self) -> Any:
        if not self._ready:
            if self._taken == len(self.frames):
                await anyio.sleep_forever()
            await anyio.lowlevel.checkpoint()
            self._ready.extend(self.frames[self._taken : self._taken + self._burst])
            self._taken += self._burst
        return self._ready.popleft()

    async def send(self, value: Any) -> None:
        await self.send_many([value])

    async def send_many(self, values: Sequence[Any]) -> None:
        await anyio.lowlevel.checkpoint()
        self.acked += len(values)

    async def aclose(self) -> None:
        return None


def _text_frames(buf: bytearray) -> int:
    """Count the whole client (masked) text frames at the front of ``buf`` and
    take them off it; what is left is the start of the next frame."""
    count = at = 0
    while len(buf) - at >= 2:
        n, head = buf[at + 1] & 0x7F, 2
        if n == 126:
            if len(buf) - at < 4:
                break
            n, head = int.from_bytes(buf[at + 2 : at + 4], "big"), 4
        elif n == 127:
            if len(buf) - at < 10:
                break
            n, head = int.from_bytes(buf[at + 2 : at + 10], "big"), 10
        head += 4 if buf[at + 1] & 0x80 else 0
        if len(buf) - at < head + n:
            break
        count += buf[at] & 0x0F == TEXT
        at += head + n
    del buf[:at]
    return count


class ReadingFlood:
    """A bridge that reads everything and, on its first connection, sends
    ``count`` env frames as fast as TCP takes them.

    It reads whole socket buffers and counts the text frames in them without
    unmasking them, so its reading keeps up with the acks.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.acked = 0

    def _read(self, conn: RawConn) -> None:
        buf = bytearray()
        with contextlib.suppress(OSError):
            while data := conn.sock.recv(1 << 20):
                buf += data
                self.acked += _text_frames(buf)

    def __call__(self, conn: RawConn, n: int) -> None:
        threading.Thread(target=self._read, args=(conn,), daemon=True).start()
        if n == 1:
            with contextlib.suppress(OSError):
                for i in range(self.count):
                    conn.text(_env_frame(i))


# ------------------------------------------------------------ async shell


@pytest.mark.anyio
async def test_WS_008_async_shell_outbound_queue_stays_bounded_under_a_stalled_memory_peer(
    anyio_backend: str, growth: Callable[[], Growth]
) -> None:
    shell_end, peer = memory_pair(64)
    measured = growth()
    peaks: list[int] = []
    async with AsyncRunnerShell(_runtime(), shell_end) as shell:
        with anyio.move_on_after(FLOOD_S):
            for i in range(10**9):
                await peer.send_text(_env_frame(i))  # the peer never receives
                if i % 256 == 0:
                    _peak(lambda: shell.outbound_queued, peaks)
        grown = measured.now()
        assert max(peaks) <= 1024
        assert grown < MAX_GROWTH, f"grew {grown} bytes"
        assert shell.outbound_dropped > 0
        assert shell.outbound_overflows > 0
        shell._closed = True  # skip the runtime's drain: the peer never reads


@pytest.mark.anyio
async def test_WS_008_async_shell_over_websocket_drops_a_stalled_bridge_and_reconnects(
    anyio_backend: str, growth: Callable[[], Growth]
) -> None:
    bridge_script = StalledReader()
    with RawBridge(bridge_script, receive_buffer=STALLED_RECEIVE_BUFFER) as bridge:
        # The overflow drops the connection here: while the stalled send waits,
        # the client keeps reading and the acks fill the queue. The send bound
        # (WS-009, tested on its own) would drop it too, first on a slow
        # machine: out of reach here.
        async with AnyioWebSocketTransport(
            bridge.url,
            backoff=Backoff(base_ms=20, max_ms=100),
            close_timeout_s=0.5,
            send_timeout_s=NO_SEND_BOUND_S,
        ) as transport:
            measured = growth()
            peaks: list[int] = []
            async with AsyncRunnerShell(_runtime(), transport) as shell:
                deadline = anyio.current_time() + FLOOD_S
                while anyio.current_time() < deadline:
                    _peak(lambda: shell.outbound_queued, peaks)
                    await anyio.sleep(0.01)
                grown = measured.now()
                assert max(peaks) <= 1024
                assert grown < MAX_GROWTH, f"grew {grown} bytes"
                # dropped, then reconnected, and the reconnect reached the core
                # the drop, the backoff and the handshake: bounded, with room for a loaded machine
                await wait_kit.await_until(lambda: shell.reauthentications >= 1, timeout_s=15)
                assert shell.outbound_overflows > 0
                assert shell.outbound_dropped >= 1024
                assert bridge.connections >= 2
                bridge_script.stop.set()
                shell._closed = True


@pytest.mark.anyio
async def test_WS_008_async_shell_sender_keeps_up_with_bursts_from_a_bridge_that_reads(
    anyio_backend: str,
) -> None:
    # 100 bursts of an inbox's worth (32) of acked frames: the sender must
    # send what each burst queued before the queue (1024) fills.
    bridge = BurstingReader(bursts=100, burst=32)
    async with AsyncRunnerShell(_runtime(), bridge) as shell:
        total = len(bridge.frames)
        # every ack was sent, or dropped by an overflow
        await wait_kit.await_until(lambda: bridge.acked + shell.outbound_dropped >= total, 10)
        assert shell.outbound_overflows == 0
        assert shell.outbound_dropped == 0
        assert bridge.acked == total


@pytest.mark.anyio
async def test_WS_008_async_shell_over_websocket_keeps_a_bridge_that_reads_a_burst(
    anyio_backend: str,
) -> None:
    flood = ReadingFlood(5000)
    with RawBridge(flood) as bridge:
        async with (
            AnyioWebSocketTransport(
                bridge.url, backoff=Backoff(base_ms=20, max_ms=100), close_timeout_s=0.5
            ) as transport,
            AsyncRunnerShell(_runtime(), transport) as shell,
        ):
            # every ack arrives, unless an overflow dropped acks and the connection
            await wait_kit.await_until(
                lambda: shell.outbound_overflows > 0 or flood.acked == flood.count, 30
            )
            assert shell.outbound_overflows == 0
            assert shell.outbound_dropped == 0
            assert bridge.connections == 1
            assert flood.acked == flood.count


# ----------------------------------------------------------- thread shell


def test_WS_008_thread_shell_outbound_queue_stays_bounded_under_a_stalled_memory_peer(
    growth: Callable[[], Growth],
) -> None:
    shell_end, peer = thread_memory_pair(64)
    measured = growth()
    peaks: list[int] = []
    with ThreadRunnerShell(_runtime(), shell_end) as shell:
        deadline = time.monotonic() + FLOOD_S
        i = 0
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                peer.send_text(_env_frame(i), timeout_s=0.05)
            i += 1
            if i % 256 == 0:
                _peak(lambda: shell.outbound_queued, peaks)
        grown = measured.now()
        assert max(peaks) <= 1024
        assert grown < MAX_GROWTH, f"grew {grown} bytes"
        assert shell.outbound_dropped > 0
        peer.close()
        shell_end.close()  # the sender's blocked send ends
        shell.shutdown(timeout_s=1, drain=False)
    assert max(peaks) <= 1024
    assert grown < MAX_GROWTH, f"grew {grown} bytes"


def test_WS_008_thread_shell_over_websocket_stays_bounded_under_a_stalled_bridge(
    growth: Callable[[], Growth],
) -> None:
    bridge_script = StalledReader()
    with RawBridge(bridge_script, receive_buffer=STALLED_RECEIVE_BUFFER) as bridge:
        client = ThreadWebSocketClient(
            bridge.url, backoff=Backoff(base_ms=20, max_ms=100), close_timeout_s=0.5
        )
        client.start()
        assert client.wait_connected(5)
        measured = growth()
        peaks: list[int] = []
        with ThreadRunnerShell(_runtime(), client) as shell:
            deadline = time.monotonic() + FLOOD_S
            while time.monotonic() < deadline:
                _peak(lambda: shell.outbound_queued, peaks)
                time.sleep(0.01)
            grown = measured.now()
            # The overflow or, as websockets.sync stops reading while a send
            # is blocked, the send bound (WS-009) drops the connection.
            assert bridge_script.sent > 0
            bridge_script.stop.set()
            shell.shutdown(timeout_s=1, drain=False)
        client.close(timeout_s=2)
    assert max(peaks) <= 1024
    assert grown < MAX_GROWTH, f"grew {grown} bytes"
