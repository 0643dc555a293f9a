"""WebSocket transports behind the shells: the async shell over ``AnyioWebSocketTransport``
(asyncio and trio) and the threading shell over ``ThreadWebSocketClient``.

* Both shells reach launch-ready against the reference cloud's
  ``CloudWebSocketServer`` on 127.0.0.1 (reads from moto through the lease's
  own session).
* LR-010: a bridge that drops the connection makes the client reconnect with
  backoff; the re-authenticated bridge reaches the core as
  ``BridgeAuthenticated`` and the registry asks for its lease again with a
  fresh opId on the new connection. Frames that are not valid JSON text are
  dropped and counted, never fatal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import shell_kit
from websockets.sync.server import ServerConnection, serve

from leasegate.core.registry import Assignment, OpenReader, TaskView
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import CredentialRuntime
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.ssm import SessionCredentials, SsmReader
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    Backoff,
    Reauthenticated,
    ThreadWebSocketClient,
)
from leasegate.testing import CloudWebSocketServer, MotoServer, ReferenceCloud

BOOT = "boot-ws-1"
TASK = "task-ws"


class Port:
    """An in-memory consumer port."""

    def __init__(self) -> None:
        self.leased: dict[str, Assignment] = {}
        self.calls: list[str] = []

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.calls.append("open")
        self.leased[assignment.task_id] = assignment

    def close(self, assignment: Assignment) -> None:
        self.calls.append("close")

    def forget(self, what: Any) -> None:
        self.calls.append("forget")

    def install(self, request: Any) -> None:
        self.calls.append("install")

    def leased_run(self, task_id: str) -> Assignment | None:
        return self.leased.get(task_id)

    def hold_git(self, assignment: Assignment) -> Any:
        raise AssertionError("not used")


def _runtime(seed: str, *, replica: bool = False) -> tuple[CredentialRuntime, Port]:
    engines = Port()
    rt = CredentialRuntime(
        runner_kind="owned",
        op_id_seed=seed,
        engines=engines,
        mcp=Port(),
        person=Port(),
        replica=ReplicaManager(boot_id=BOOT) if replica else None,
    )
    return rt, engines


def _cloud(moto: MotoServer) -> ReferenceCloud:
    return shell_kit.reference_cloud(
        moto, task=TASK, boot=BOOT, api_key="CANARY-ws", database_url="CANARY-ws-db"
    )


def _factory(moto: MotoServer) -> Any:
    def factory(cmd: OpenReader) -> SsmReader:
        return SsmReader(
            SessionCredentials.from_lease(cmd.session, cmd.region),
            endpoint_url=moto.url,
            max_backoff_s=0.1,
        )

    return factory


class FlakyBridge:
    """A WebSocket server on 127.0.0.1: it drops the first connection after its first frame.

    Before dropping it sends a text frame that is not JSON and a binary
    frame. Every connection's received frames are kept in :attr:`received`.
    """

    def __init__(self) -> None:
        self.received: list[list[Any]] = []
        self.auth: list[str | None] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def _handler(self, ws: ServerConnection) -> None:
        n = len(self.received)
        self.received.append([])
        assert ws.request is not None
        self.auth.append(ws.request.headers.get("Authorization"))
        for message in ws:
            self.received[n].append(json.loads(message))
            if n == 0:
                ws.send("{not json")
                ws.send(b"\x00binary")
                ws.close()
                return

    def __enter__(self) -> FlakyBridge:
        self._server = serve(self._handler, "127.0.0.1", 0)
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(5)

    def wait_for(self, connection: int, timeout_s: float = 10.0) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.received) > connection and self.received[connection]:
                return self.received[connection]
            time.sleep(0.01)
        raise AssertionError(f"nothing on connection {connection + 1}")


@pytest.fixture
def flaky_bridge() -> Iterator[FlakyBridge]:
    with FlakyBridge() as bridge:
        yield bridge


# ------------------------------------------------------------ async shell


@pytest.mark.integration
@pytest.mark.anyio
async def test_async_shell_over_anyio_websocket_transport_reaches_launch_ready(
    anyio_backend: str, moto_server: MotoServer, caplog: pytest.LogCaptureFixture
) -> None:
    cloud = _cloud(moto_server)
    rt, engines = _runtime("ws-async", replica=True)
    with CloudWebSocketServer(cloud) as server:
        with anyio.fail_after(20):
            async with AnyioWebSocketTransport(
                server.url, backoff=Backoff(base_ms=20, max_ms=200)
            ) as transport:
                await transport.wait_connected()
                shell = AsyncRunnerShell(rt, transport, reader_factory=_factory(moto_server))
                async with shell:
                    start_id = await shell.begin_start(TASK, 1)
                    view = (await shell.wait_launch_ready(start_id)).view
                    assert [e.manifest.credential_id for e in view.engines] == ["claude"]
                    assert "open" in engines.calls
                    snap: Any = rt.env_snapshot(TASK, 1, ("web",))
                    assert snap is not None
                    await shell.close(TASK, 1, "stop")
                    assert rt.open_run(TASK) is None
                # First connection, no failed send before it: nothing to re-request.
                assert shell.reauthentications == 0
                assert shell.running_tasks == 0
                assert shell.task_errors == []
    assert not transport.client.connected
    sent = [k for d, k in cloud.transcript if d == "in"]
    assert sent[0] == "lease.request"
    assert "CANARY" not in caplog.text


@pytest.mark.anyio
async def test_LR_010_async_shell_reconnect_feeds_bridge_authenticated_and_requests_again(
    anyio_backend: str, flaky_bridge: FlakyBridge
) -> None:
    rt, _ = _runtime("ws-async-reauth")
    with anyio.fail_after(15):
        async with AnyioWebSocketTransport(
            flaky_bridge.url, backoff=Backoff(base_ms=20, max_ms=100)
        ) as transport:
            await transport.wait_connected()
            async with AsyncRunnerShell(rt, transport) as shell:
                await shell.begin_start(TASK, 1)
                first = await anyio.to_thread.run_sync(flaky_bridge.wait_for, 0)
                second = await anyio.to_thread.run_sync(flaky_bridge.wait_for, 1)
                assert shell.reauthentications == 1
                assert transport.connections == 2
                # Not valid JSON text (a bad text frame, a binary frame): dropped, counted.
                assert shell.dropped == 2
    assert [f["kind"] for f in first] == ["lease.request"]
    assert second[0]["kind"] == "lease.request"
    assert second[0]["taskId"] == TASK
    assert second[0]["opId"] != first[0]["opId"]  # a fresh opId (LR-010)
    assert transport.client.delays_ms  # it waited (backoff) before reconnecting


# ---------------------------------------------------------- thread shell


@pytest.mark.integration
def test_thread_shell_over_thread_websocket_client_reaches_launch_ready(
    moto_server: MotoServer,
) -> None:
    cloud = _cloud(moto_server)
    rt, engines = _runtime("ws-thread", replica=True)
    with CloudWebSocketServer(cloud) as server:
        client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
        client.start()
        assert client.wait_connected(10)
        with ThreadRunnerShell(rt, client, reader_factory=_factory(moto_server)) as shell:
            start_id = shell.begin_start(TASK, 1)
            view = shell.wait_launch_ready(start_id, timeout_s=20).view
            assert [e.manifest.credential_id for e in view.engines] == ["claude"]
            assert "open" in engines.calls
            shell.close(TASK, 1, "stop", timeout_s=20)
        assert shell.reauthentications == 0
        assert shell.running_threads == 0
        assert not client.alive


def test_LR_010_thread_shell_reconnect_feeds_bridge_authenticated_and_requests_again(
    flaky_bridge: FlakyBridge,
) -> None:
    rt, _ = _runtime("ws-thread-reauth")
    client = ThreadWebSocketClient(flaky_bridge.url, backoff=Backoff(base_ms=20, max_ms=100))
    client.start()
    assert client.wait_connected(10)
    with ThreadRunnerShell(rt, client) as shell:
        shell.begin_start(TASK, 1)
        first = flaky_bridge.wait_for(0)
        second = flaky_bridge.wait_for(1)
        assert shell.reauthentications == 1
        assert client.connections == 2
        assert shell.dropped == 2
    assert [f["kind"] for f in first] == ["lease.request"]
    assert second[0]["kind"] == "lease.request"
    assert second[0]["opId"] != first[0]["opId"]
    assert client.delays_ms
    assert not client.alive


def test_thread_shell_first_connect_after_a_failed_send_asks_again_at_once(
    flaky_bridge: FlakyBridge,
) -> None:
    """A start made before the bridge is up: its send fails; the first connect re-requests."""
    rt, _ = _runtime("ws-thread-late")
    client = ThreadWebSocketClient(flaky_bridge.url, backoff=Backoff(base_ms=20, max_ms=100))
    with ThreadRunnerShell(rt, client) as shell:
        shell.begin_start(TASK, 1)  # not connected: SendFailed, a retry timer
        deadline = time.monotonic() + 5
        while not shell._send_failures and time.monotonic() < deadline:
            time.sleep(0.01)
        client.start()
        first = flaky_bridge.wait_for(0)  # well before the registry's retry timer
        assert first[0]["kind"] == "lease.request"
        assert shell.reauthentications >= 1


def test_thread_websocket_client_backs_off_while_the_bridge_is_down_and_closes_bounded() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    values = iter([0.0, 0.5, 1.0, 0.25, 0.75] * 10)
    backoff = Backoff(base_ms=10, max_ms=40, factor=2.0, jitter=0.5, rng=lambda: next(values))
    client = ThreadWebSocketClient(f"ws://127.0.0.1:{port}", backoff=backoff, open_timeout_s=1)
    client.start()
    deadline = time.monotonic() + 5
    while len(client.delays_ms) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    client.close()
    assert time.monotonic() - t0 < 2.0
    assert not client.alive
    # min(max, base * 2^n) scaled into [(1 - jitter) * cap, cap] by the injected rng.
    assert client.delays_ms[:4] == [5, 15, 40, 25]
    with pytest.raises(EOFError):
        client.receive(1)


def test_thread_websocket_client_marks_each_connection_before_its_frames(
    flaky_bridge: FlakyBridge,
) -> None:
    client = ThreadWebSocketClient(flaky_bridge.url, backoff=Backoff(base_ms=20, max_ms=100))
    with client:
        assert client.wait_connected(10)
        assert client.receive(5) == Reauthenticated(1)
        client.send({"kind": "hello", "n": 1})
        assert client.receive(5) == Reauthenticated(2)  # the bad frames were dropped
        assert client.dropped == 2
        client.send({"kind": "hello", "n": 2})
        assert flaky_bridge.wait_for(1) == [{"kind": "hello", "n": 2}]
    assert not client.alive


def test_thread_websocket_client_reveals_secret_headers_only_into_the_handshake(
    flaky_bridge: FlakyBridge,
) -> None:
    from leasegate.core import Secret

    token = Secret("Bearer CANARY-bridge-token")
    client = ThreadWebSocketClient(
        flaky_bridge.url, headers={"Authorization": token}, backoff=Backoff(base_ms=20)
    )
    with client:
        assert client.wait_connected(10)
        client.send({"kind": "hello"})
        flaky_bridge.wait_for(0)
        assert client.receive(5) == Reauthenticated(1)
        assert client.receive(5) == Reauthenticated(2)  # re-authenticated with the same header
        # The bridge records a connection's header in its handler, which may
        # run after the client saw the handshake: wait for it before closing
        # (a close right after the handshake can skip the handler).
        deadline = time.monotonic() + 10
        while len(flaky_bridge.auth) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert flaky_bridge.auth[:2] == ["Bearer CANARY-bridge-token"] * 2
    assert "CANARY" not in repr(client)
    assert client.errors == []
