"""The reference cloud's transports: the in-memory link and the WebSocket server."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from leasegate.core import loads
from leasegate.core.wire import decode_frame, encode_frame
from leasegate.core.wire.env import DeliveryCursor, EnvAck, EnvBegin, EnvCommit, EnvPage
from leasegate.core.wire.lease import CredentialChanged, LeaseGrant, LeaseRequest
from leasegate.testing import (
    CloudWebSocketServer,
    MemoryCloudLink,
    MemoryParameterStore,
    ReferenceCloud,
    dumps_frame,
)

TASK = "task-t"
BOOT = "boot-t"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def make_cloud(**kwargs: Any) -> ReferenceCloud:
    cloud = ReferenceCloud(ssm=MemoryParameterStore(), clock=wall_clock_ms, **kwargs)
    populate(cloud)
    return cloud


def populate(cloud: ReferenceCloud) -> None:
    cloud.add_org("org1")
    cloud.add_user("org1", "alice")
    cloud.add_project("org1", "proj-a")
    cloud.add_engine_credential("alice", "eng", env={"K": "v"})
    cloud.set_env_value("proj-a", "K", "v")
    cloud.assign(TASK, 1, "org1", "alice", ["proj-a"], runner_boot_id=BOOT)


def request_text(op: str = "lease-1-t") -> str:
    return dumps_frame(encode_frame(LeaseRequest(op_id=op, task_id=TASK, run_epoch=1)))


def error_ack(frame: Any, code: str) -> str:
    phase = {EnvBegin: "begun", EnvPage: "page", EnvCommit: "complete"}[type(frame)]
    ack = EnvAck(
        op_id=frame.op_id,
        task_id=frame.task_id,
        run_epoch=frame.run_epoch,
        runner_boot_id=frame.runner_boot_id,
        stream_id=frame.stream_id,
        attempt_id=frame.attempt_id,
        policy_epochs=(1,),
        applied_through=DeliveryCursor(stream_id=frame.stream_id, sequence=0),
        ok=False,
        phase=phase,  # type: ignore[arg-type]
        code=code,  # type: ignore[arg-type]
        error=code,  # type: ignore[arg-type]
        project_id=None,
        after=None,
        record_version=None,
        results=None,
        complete=None,
        result=None,
        high_water=None,
    )
    return dumps_frame(encode_frame(ack))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ER_018_memory_link_carries_grants_scripted_frames_and_resends(backend: str) -> None:
    anyio.run(_memory_link_story, backend=backend)


async def _memory_link_story() -> None:
    cloud = make_cloud(retry_delay_ms=30)
    link = MemoryCloudLink(cloud)
    end = link.async_end()
    with anyio.fail_after(10):
        await end.send_text(request_text())
        grant = decode_frame(await end.receive())
        assert isinstance(grant, LeaseGrant)
        begin = decode_frame(await end.receive())
        assert isinstance(begin, EnvBegin)
        # The runner is not activated yet: the cloud resends the same begin.
        started = time.monotonic()
        await end.send_text(error_ack(begin, "activation_pending"))
        again = decode_frame(await end.receive())
        assert again == begin
        assert time.monotonic() - started >= 0.025
        # A scripted rotation reaches the runner without any runner frame.
        version = cloud.rotate("eng")
        changed = decode_frame(await end.receive())
        assert changed == CredentialChanged(
            task_id=TASK, run_epoch=1, credential_id="eng", revision="r1", version=version
        )
        # A scripted rotation from another thread reaches a waiting receive too.
        later = await anyio.to_thread.run_sync(cloud.rotate, "eng")
        changed = decode_frame(await end.receive())
        assert isinstance(changed, CredentialChanged)
        assert changed.version == later
        # A non-text frame never reaches the cloud; it is counted.
        await end.send_text(b"binary")
        assert end.dropped == 1
    await end.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await end.send({"kind": "late"})
    with pytest.raises(anyio.ClosedResourceError):
        await end.receive()
    assert cloud.transcript.count(("out", "env.replica.v1.begin")) == 2
    assert ("in", "env.replica.v1.ack") in cloud.transcript


def test_ER_018_memory_link_thread_end_carries_grants_scripted_frames_and_resends() -> None:
    cloud = make_cloud(retry_delay_ms=30)
    closed: list[str] = []
    link = MemoryCloudLink(cloud)
    end = link.thread_end(on_close=lambda: closed.append("closed"))
    with pytest.raises(RuntimeError):  # one runner per cloud: one open end per link
        link.async_end()
    end.send_text(request_text())
    assert isinstance(decode_frame(end.receive(5)), LeaseGrant)
    begin = decode_frame(end.receive(5))
    assert isinstance(begin, EnvBegin)
    started = time.monotonic()
    end.send_text(error_ack(begin, "activation_pending"))
    assert decode_frame(end.receive(5)) == begin
    assert time.monotonic() - started >= 0.025
    # Nothing queued: a bounded receive gives up.
    with pytest.raises(queue.Empty):
        end.receive(0.05)
    # A rotation scripted from another thread wakes a waiting receive.
    timer = threading.Timer(0.05, cloud.rotate, args=("eng",))
    timer.start()
    try:
        assert isinstance(decode_frame(end.receive(5)), CredentialChanged)
    finally:
        timer.join(5)
    end.close()
    end.close()
    assert closed == ["closed"]
    with pytest.raises(EOFError):
        end.send({"kind": "late"})
    with pytest.raises(EOFError):
        end.receive(1)
    # The end was closed: the link gives a new one.
    fresh = link.thread_end()
    link.close()
    with pytest.raises(EOFError):
        fresh.receive(1)


def test_websocket_server_round_trips_frames_on_loopback() -> None:
    cloud = make_cloud()
    with CloudWebSocketServer(cloud) as server:
        assert server.url.startswith("ws://127.0.0.1:")
        with connect(server.url, open_timeout=5) as ws:
            ws.send(request_text())
            grant = decode_frame(loads(ws.recv(timeout=5)))
            assert isinstance(grant, LeaseGrant)
            assert grant.op_id == "lease-1-t"
            begin = decode_frame(loads(ws.recv(timeout=5)))
            assert isinstance(begin, EnvBegin)
            assert begin.project_ids == ("proj-a",)
            # Scripted from this thread while the server runs in its own.
            version = cloud.rotate("eng")
            changed = decode_frame(loads(ws.recv(timeout=5)))
            assert isinstance(changed, CredentialChanged)
            assert changed.version == version
            # A second runner is refused while one is connected.
            with connect(server.url, open_timeout=5) as other:
                with pytest.raises(ConnectionClosed) as info:
                    other.recv(timeout=5)
                assert info.value.rcvd is not None
                assert info.value.rcvd.code == 1013


@pytest.mark.integration
def test_websocket_fixture_serves_the_moto_backed_cloud(
    reference_cloud_ws: CloudWebSocketServer,
) -> None:
    populate(reference_cloud_ws.cloud)
    with connect(reference_cloud_ws.url, open_timeout=5) as ws:
        ws.send(request_text("lease-1-ws"))
        grant = decode_frame(loads(ws.recv(timeout=10)))
        assert isinstance(grant, LeaseGrant)
        assert grant.lease.sessions[0].access_key_id.startswith("ASIA")
