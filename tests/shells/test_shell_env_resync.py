"""After a stalled bridge is dropped, the reconnect resynchronizes env delivery (WS-008).

The reference cloud serves over WebSocket (``CloudWebSocketServer``) behind
:class:`StallingProxy`, a TCP proxy on 127.0.0.1 that can stop reading from
the runner on its current connection while it keeps forwarding the cloud's
frames and floods the runner with env frames for another task (each one
costs an ack). The shell's outbound queue overflows (or, on the thread
client, a send stalls past ``send_timeout_s``, WS-009), the connection is
dropped and the client reconnects. Acks sent on the stalled connection never
reach the cloud (among them the ack of a live ``apply``); on the new
connection the cloud sends its unacked frame again from the delivery cursor,
the replica answers it (from its receipt when it had consumed it), and every
later apply follows: the cloud ends with nothing in flight and the runner's
env view equals the cloud's values. On the async shell (asyncio and trio,
``AnyioWebSocketTransport``) and the thread shell (``ThreadWebSocketClient``).
Real time, every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import queue
import select
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
import shell_kit
import wait_kit

from leasegate.core import Secret
from leasegate.core.registry import OpenReader, SsmParameter
from leasegate.core.replica import ReplicaManager
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.ssm import ReadOk
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import AnyioWebSocketTransport, Backoff, ThreadWebSocketClient
from leasegate.testing import CloudWebSocketServer, MemoryParameterStore, ReferenceCloud

BOOT = "boot-resync"
TASK = "task-resync"
PROJECT = "web"
#: Env changes made while the bridge does not read (each a live apply).
CHANGES = 6
WAIT_S = 20.0


def _flood_frame(i: int) -> bytes:
    """An unmasked server text frame: an env begin for a task this runner does not hold."""
    payload = (
        f'{{"kind":"env.replica.v1.begin","opId":"op-flood-{i}","taskId":"task-other",'
        f'"runEpoch":1,"runnerBootId":"{BOOT}","streamId":"s1","attemptId":"a-{i}",'
        '"projectIds":["p"]}'
    ).encode()
    n = len(payload)
    head = bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + n.to_bytes(2, "big")
    return head + payload


def _split_frame(buf: bytearray) -> bytes | None:
    """Take one whole unmasked frame off the front of ``buf`` (``None``: not complete yet)."""
    if len(buf) < 2:
        return None
    n, at = buf[1] & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = int.from_bytes(buf[2:4], "big"), 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, at = int.from_bytes(buf[2:10], "big"), 10
    if len(buf) < at + n:
        return None
    frame = bytes(buf[: at + n])
    del buf[: at + n]
    return frame


def _kind(frame: bytes) -> str | None:
    at = {126: 4, 127: 10}.get(frame[1] & 0x7F, 2)
    if frame[0] & 0x0F != 0x1:
        return None
    with contextlib.suppress(ValueError):
        value = json.loads(frame[at:])
        if isinstance(value, dict):
            return str(value.get("kind"))
    return None


class _Link:
    """One runner connection through the proxy, and its upstream connection."""

    def __init__(self, runner: socket.socket, upstream: socket.socket) -> None:
        self.runner = runner
        self.upstream = upstream
        self.stalled = threading.Event()
        self.done = threading.Event()
        self.frames: queue.Queue[bytes] = queue.Queue()
        #: Kinds of the cloud's frames forwarded to the runner while stalled.
        self.forwarded_stalled: list[str | None] = []
        self.flooded = 0

    def end(self) -> None:
        self.done.set()
        for s in (self.runner, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def runner_to_cloud(self) -> None:
        # The socket stays blocking (a timeout on it would also fail the
        # other thread's sendall to a runner that is not reading): poll.
        with contextlib.suppress(OSError):
            while not self.done.is_set():
                if self.stalled.is_set():
                    # Never read again: what the runner sends now is lost.
                    self.done.wait(0.05)
                    continue
                readable, _, _ = select.select([self.runner], [], [], 0.02)
                if not readable:
                    continue
                data = self.runner.recv(65536)
                if not data:
                    break
                self.upstream.sendall(data)
        self.end()

    def cloud_reader(self) -> None:
        buf = bytearray()
        head_done = False
        with contextlib.suppress(OSError):
            while not self.done.is_set():
                data = self.upstream.recv(65536)
                if not data:
                    break
                buf += data
                if not head_done:
                    at = buf.find(b"\r\n\r\n")
                    if at < 0:
                        continue
                    self.frames.put(bytes(buf[: at + 4]))  # the handshake answer
                    del buf[: at + 4]
                    head_done = True
                while (frame := _split_frame(buf)) is not None:
                    self.frames.put(frame)
        self.end()

    def cloud_to_runner(self) -> None:
        with contextlib.suppress(OSError):
            while not self.done.is_set():
                stalled = self.stalled.is_set()
                flood = stalled and "env.replica.v1.apply" in self.forwarded_stalled
                try:
                    frame = self.frames.get(timeout=0 if flood else 0.05)
                except queue.Empty:
                    if flood:
                        self.runner.sendall(_flood_frame(self.flooded))
                        self.flooded += 1
                    continue
                if stalled:
                    self.forwarded_stalled.append(_kind(frame))
                self.runner.sendall(frame)
        self.end()


class StallingProxy:
    """A TCP proxy on 127.0.0.1 in front of a WebSocket server.

    Each runner connection gets its own upstream connection (opened once the
    previous one is closed: the cloud serves one runner at a time).
    :meth:`stall` makes the current connection stop reading from the runner
    for good while it still forwards the cloud's frames and, once it has
    forwarded a live apply (whose ack is then lost), floods env frames of
    another task; later connections are served normally.
    """

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        # A small receive buffer from the handshake on (accepted sockets
        # inherit it): a stalled connection backs up into the runner after
        # a few KiB instead of the megabytes loopback would otherwise hold.
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}"
        self.links: list[_Link] = []
        self._stop = threading.Event()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                runner, _ = self._listener.accept()
                if self.links:
                    self.links[-1].end()
                    time.sleep(0.05)  # the cloud notices the old connection's end
                upstream = socket.create_connection(("127.0.0.1", self._upstream_port), 5)
                upstream.settimeout(None)
                link = _Link(runner, upstream)
                self.links.append(link)
                for target in (link.runner_to_cloud, link.cloud_reader, link.cloud_to_runner):
                    threading.Thread(target=target, daemon=True).start()

    def stall(self) -> _Link:
        """Stall the current connection; return it."""
        link = self.links[-1]
        link.stalled.set()
        return link

    def __enter__(self) -> StallingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        for link in self.links:
            link.end()


class MemoryReader:
    """A lease session's reader over the cloud's :class:`MemoryParameterStore`."""

    def __init__(self, store: MemoryParameterStore) -> None:
        self._store = store

    def read_blocking(self, names: Sequence[str]) -> ReadOk:
        out = self._store.get_parameters(Names=list(names), WithDecryption=True)
        params = tuple(
            SsmParameter(
                name=p["Name"], type=p["Type"], value=Secret(p["Value"]), version=p["Version"]
            )
            for p in out["Parameters"]
        )
        return ReadOk(parameters=params, invalid=tuple(out["InvalidParameters"]))

    async def read(self, names: Sequence[str], **_: Any) -> ReadOk:
        return self.read_blocking(names)

    def seal(self) -> None:
        return None


class Setup:
    """The cloud (in memory, wall clock) with one run whose project holds env values."""

    def __init__(self) -> None:
        self.store = MemoryParameterStore()
        self.cloud = ReferenceCloud(
            ssm=self.store, clock=lambda: time.time_ns() // 1_000_000, retry_delay_ms=20
        )
        self.cloud.add_org("acme")
        self.cloud.add_user("acme", "alice")
        self.cloud.add_project("acme", PROJECT)
        self.cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "CANARY-k"})
        self.cloud.set_env_value(PROJECT, "BASE", "CANARY-base")
        self.cloud.assign(TASK, 1, "acme", "alice", [PROJECT], runner_boot_id=BOOT)
        self.expected = {"BASE": "CANARY-base"}
        self.runtime = shell_kit.port_runtime("resync", replica=ReplicaManager(boot_id=BOOT))

    def reader(self, cmd: OpenReader) -> Any:
        return MemoryReader(self.store)

    def change_env(self) -> None:
        """Live changes: new keys, a change and a delete (each one apply)."""
        for i in range(CHANGES - 2):
            self.cloud.set_env_value(PROJECT, f"K{i}", f"CANARY-v{i}")
            self.expected[f"K{i}"] = f"CANARY-v{i}"
        self.cloud.set_env_value(PROJECT, "BASE", "CANARY-base-2")
        self.expected["BASE"] = "CANARY-base-2"
        self.cloud.delete_env_value(PROJECT, "K0")
        del self.expected["K0"]

    def view(self) -> dict[str, str] | None:
        snap: Any = self.runtime.env_snapshot(TASK, 1, (PROJECT,))
        if snap is None:
            return None
        (project,) = snap.projects
        return {e.state.key: e.value.reveal() for e in project.entries if e.value is not None}

    def stall(self, proxy: StallingProxy, answer: str) -> _Link:
        """Stall the bridge, then change env values; ``answer``: what the
        reconnect's ``lease.request`` (LR-010) gets."""
        if answer == "unavailable":
            self.cloud.make_unavailable(TASK, 1, prompt=False)
        state = self.cloud.delivery_state(TASK, 1)
        assert state is not None
        self.stream = state["stream_id"]
        link = proxy.stall()
        self.change_env()
        return link

    def caught_up(self) -> bool:
        """Nothing of the run's delivery is queued, in flight or to be resent."""
        state = self.cloud.delivery_state(TASK, 1)
        assert state is not None
        assert not state["failed"]
        return bool(
            state["live"]
            and state["queued"] == 0
            and state["inflight_kind"] is None
            and state["retry_at"] is None
        )

    def check_delivery(self, answer: str) -> None:
        state = self.cloud.delivery_state(TASK, 1)
        assert state is not None
        if answer == "unavailable":
            # No new grant: the same stream, every apply acked in order from
            # the cursor (the one whose ack was lost was sent again).
            assert state["stream_id"] == self.stream
            assert state["next_sequence"] == CHANGES + 1
            assert self.cloud.transcript.count(("out", "lease.grant.v1")) == 1
        else:
            # A new grant: a fresh snapshot on a new stream carried every change.
            assert state["stream_id"] != self.stream
            assert self.cloud.transcript.count(("out", "lease.grant.v1")) == 2

    def check_resynced(self, proxy: StallingProxy, stalled: _Link) -> None:
        # An apply went out on the stalled connection: its ack was lost there.
        assert "env.replica.v1.apply" in stalled.forwarded_stalled
        assert stalled.flooded > 0
        assert len(proxy.links) >= 2
        assert not self.cloud.delivery_errors


def _port(server: CloudWebSocketServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.fixture
def setup() -> Setup:
    return Setup()


#: What the reconnect's lease request is answered with: a new grant (a fresh
#: snapshot), or ``lease.unavailable`` (the run keeps its stream and cursor).
ANSWERS = ["grant", "unavailable"]


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ANSWERS)
async def test_WS_008_async_shell_resyncs_env_delivery_after_a_stalled_bridge_is_dropped(
    anyio_backend: str, answer: str, setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    with CloudWebSocketServer(setup.cloud) as server, StallingProxy(_port(server)) as proxy:
        async with AnyioWebSocketTransport(
            proxy.url, backoff=Backoff(base_ms=20, max_ms=100), close_timeout_s=0.5
        ) as transport:
            await transport.wait_connected()
            shell = AsyncRunnerShell(
                setup.runtime, transport, reader_factory=setup.reader, max_outbound_frames=64
            )
            async with shell:
                with anyio.fail_after(WAIT_S):
                    start_id = await shell.begin_start(TASK, 1)
                    await shell.wait_launch_ready(start_id)
                    await wait_kit.await_until(lambda: setup.view() is not None, WAIT_S)
                    await wait_kit.await_until(setup.caught_up, WAIT_S)
                    stalled = setup.stall(proxy, answer)
                    await wait_kit.await_until(lambda: len(proxy.links) >= 2, WAIT_S)
                    await wait_kit.await_until(setup.caught_up, WAIT_S)
                    await wait_kit.await_until(lambda: setup.view() == setup.expected, WAIT_S)
                assert shell.outbound_overflows >= 1
                assert shell.reauthentications >= 1
                setup.check_resynced(proxy, stalled)
                setup.check_delivery(answer)
                await shell.close(TASK, 1, "stop")
    assert "CANARY" not in caplog.text


@pytest.mark.parametrize("answer", ANSWERS)
def test_WS_008_thread_shell_resyncs_env_delivery_after_a_stalled_bridge_is_dropped(
    answer: str, setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    with CloudWebSocketServer(setup.cloud) as server, StallingProxy(_port(server)) as proxy:
        client = ThreadWebSocketClient(
            proxy.url,
            backoff=Backoff(base_ms=20, max_ms=100),
            close_timeout_s=0.5,
            send_timeout_s=0.5,
        )
        client.start()
        try:
            assert client.wait_connected(10)
            shell = ThreadRunnerShell(setup.runtime, client, reader_factory=setup.reader)
            with shell:
                start_id = shell.begin_start(TASK, 1)
                shell.wait_launch_ready(start_id, timeout_s=WAIT_S)
                query = lambda fn: shell.query(lambda _rt: fn())  # noqa: E731
                wait_kit.wait_until(lambda: query(setup.view) is not None, WAIT_S)
                wait_kit.wait_until(setup.caught_up, WAIT_S)
                stalled = setup.stall(proxy, answer)
                wait_kit.wait_until(lambda: len(proxy.links) >= 2, WAIT_S)
                wait_kit.wait_until(setup.caught_up, WAIT_S)
                wait_kit.wait_until(lambda: query(setup.view) == setup.expected, WAIT_S)
                assert client.send_timeouts >= 1 or shell.outbound_overflows >= 1
                assert shell.reauthentications >= 1
                setup.check_resynced(proxy, stalled)
                setup.check_delivery(answer)
                shell.close(TASK, 1, "stop", timeout_s=WAIT_S)
        finally:
            client.close(timeout_s=2)
    assert "CANARY" not in caplog.text
