"""Every host wait is bounded, and each mis-setup is reported with its cause.

Three mis-setups, on both shells (async under asyncio and trio; threads):

* the WebSocket transport was never started: the ``lease.request`` cannot be
  sent (``NotConnected`` -> ``SendFailed``);
* the run is unknown to the cloud: the reference cloud answers
  ``lease.unavailable`` and the registry retries (LR-110);
* the replica's boot id differs from the ``runner_boot_id`` the cloud was
  given at assignment: the replica answers every env frame with
  ``runner_boot_mismatch`` (ER-027) and the env snapshot never commits.

Each gives a WARNING record as soon as the shell can tell, and
``wait_launch_ready`` raises :class:`LaunchTimeout` (a ``TimeoutError``)
naming the cause within its deadline (short explicit deadlines keep the
tests fast; one test checks the default deadlines exist and are finite).
No message or record holds a canary secret. The cloud is the reference
cloud in memory (``MemoryParameterStore``, no STS, no moto).
"""

from __future__ import annotations

import inspect
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import shell_kit as kit

from leasegate.core import Secret, loads
from leasegate.core.registry import OpenReader
from leasegate.core.replica import ReplicaManager
from leasegate.shells import diagnostics
from leasegate.shells.async_shell import AsyncRunnerShell, LaunchTimeout, WaitTimeout
from leasegate.shells.diagnostics import (
    BOOT_ID_MISMATCH,
    LEASE_UNAVAILABLE,
    TRANSPORT_NEVER_CONNECTED,
    TRANSPORT_NEVER_STARTED,
)
from leasegate.shells.ssm import SsmReader
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.timers import wall_clock_ms
from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    ThreadWebSocketClient,
)
from leasegate.testing import (
    AsyncCloudEnd,
    MemoryCloudLink,
    MemoryParameterStore,
    ReferenceCloud,
    dumps_frame,
)

pytestmark = pytest.mark.anyio

TASK = "task-waits"
RUNNER_BOOT = "boot-runner-1"
CLOUD_BOOT = "boot-cloud-2"
DEADLINE_S = 1.5
#: A URL nothing listens on (the clients under test are never started or never reach it).
NOWHERE = "ws://127.0.0.1:9/bridge"
CANARY_HEADER = "CANARY-bearer-token"


def _cloud(*, assign_boot: str | None) -> ReferenceCloud:
    """The reference cloud in memory: project ``web`` holds a canary env value.

    ``assign_boot``: the ``runner_boot_id`` run 1 of ``TASK`` is assigned with,
    or ``None`` for a run the cloud does not know.
    """
    cloud = ReferenceCloud(ssm=MemoryParameterStore(), clock=wall_clock_ms, retry_delay_ms=100)
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.set_env_value("web", "DATABASE_URL", "CANARY-db")
    if assign_boot is not None:
        cloud.assign(TASK, 1, "acme", "alice", ["web"], runner_boot_id=assign_boot)
    return cloud


def _no_reader(cmd: OpenReader) -> SsmReader:
    """No Parameter Store in these tests: a read fails (none is expected)."""
    raise RuntimeError("no parameter store here")


def _runtime() -> Any:
    return kit.port_runtime("waits", replica=ReplicaManager(boot_id=RUNNER_BOOT))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("leasegate.shells")
    ]


def _check_no_canary(err: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    assert "CANARY" not in str(err)
    assert "CANARY" not in repr(err)
    assert "CANARY" not in caplog.text


class DirectCloudEnd:
    """A blocking frame transport straight into an in-process :class:`ReferenceCloud`.

    ``send`` hands the frame's JSON text to the cloud; ``receive`` returns the
    cloud's frames (re-parsed from their JSON text) in order, waiting at most
    ``timeout_s`` seconds (then ``queue.Empty``); ``close`` makes both raise
    ``EOFError``.
    """

    def __init__(self, cloud: ReferenceCloud) -> None:
        self.cloud = cloud
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False

    def _pull(self) -> None:
        with self._lock:  # one taker at a time keeps the cloud's order
            for value in self.cloud.take_outgoing():
                self._inbox.put(loads(dumps_frame(value)))

    def send(self, value: Any) -> None:
        if self._closed:
            raise EOFError("closed")
        self.cloud.receive_text(dumps_frame(value))
        self._pull()

    def receive(self, timeout_s: float | None = None) -> Any:
        if self._closed:
            raise EOFError("closed")
        self._pull()
        return self._inbox.get(timeout=timeout_s)

    def close(self) -> None:
        self._closed = True


# ------------------------------------------------------------------- async


async def _async_launch_timeout(transport: Any) -> tuple[LaunchTimeout, AsyncRunnerShell]:
    """Begin run 1 of ``TASK`` on an async shell; the LaunchTimeout its wait raises."""
    shell = AsyncRunnerShell(_runtime(), transport, reader_factory=_no_reader)
    caught: LaunchTimeout | None = None
    with anyio.fail_after(10):
        async with shell:
            start_id = await shell.begin_start(TASK, 1)
            before = anyio.current_time()
            with pytest.raises(LaunchTimeout) as info:
                await shell.wait_launch_ready(start_id, timeout_s=DEADLINE_S)
            elapsed = anyio.current_time() - before
            assert DEADLINE_S - 0.1 <= elapsed < DEADLINE_S + 2.0
            caught = info.value
            assert shell._pending == {}  # the timed-out wait left no waiter behind
            await shell.shutdown(timeout_s=2.0)
    assert caught is not None
    return caught, shell


def _memory_end(cloud: ReferenceCloud) -> AsyncCloudEnd:
    return MemoryCloudLink(cloud).async_end()


async def test_async_launch_wait_names_a_websocket_transport_that_was_never_started(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    transport = AnyioWebSocketTransport(NOWHERE, headers={"Authorization": Secret(CANARY_HEADER)})
    err, shell = await _async_launch_timeout(transport)
    assert isinstance(err, TimeoutError)
    assert err.causes == (TRANSPORT_NEVER_STARTED,)
    assert "the transport was never started" in str(err)
    assert f"task {TASK!r} run 1" in str(err)
    warned = [w for w in _warnings(caplog) if "never started" in w]
    assert len(warned) == 1  # logged once, at the first failed send
    assert "lease.request" in warned[0]
    assert shell.wire.facts().send_failures >= 1
    _check_no_canary(err, caplog)


async def test_async_launch_wait_names_lease_unavailable_for_a_run_the_cloud_does_not_know(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cloud = _cloud(assign_boot=None)
    err, _ = await _async_launch_timeout(_memory_end(cloud))
    assert err.causes == (LEASE_UNAVAILABLE,)
    assert "the cloud has answered lease.unavailable 1 time" in str(err)
    assert "is the run assigned to this runner?" in str(err)
    warned = [w for w in _warnings(caplog) if "lease.unavailable" in w]
    assert len(warned) == 1
    assert f"task {TASK!r} run 1" in warned[0]
    assert ("out", "lease.unavailable") in cloud.transcript
    _check_no_canary(err, caplog)


async def test_async_launch_wait_names_both_boot_ids_when_the_replica_refuses_env_frames(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cloud = _cloud(assign_boot=CLOUD_BOOT)
    err, _ = await _async_launch_timeout(_memory_end(cloud))
    assert err.causes == (BOOT_ID_MISMATCH,)
    text = str(err)
    assert "granted" in text
    assert "env snapshot is not committed" in text
    assert f"env frames for boot id {CLOUD_BOOT!r} were refused" in text
    assert f"this runner's boot id is {RUNNER_BOOT!r}" in text
    warned = [w for w in _warnings(caplog) if "boot id" in w]
    assert len(warned) == 1  # the first refused frame, logged at once
    assert CLOUD_BOOT in warned[0]
    assert RUNNER_BOOT in warned[0]
    assert [e.code for e in cloud.delivery_errors] == ["runner_boot_mismatch"]
    _check_no_canary(err, caplog)


async def test_async_transport_wait_connected_is_bounded_and_names_a_client_never_entered(
    anyio_backend: str,
) -> None:
    transport = AnyioWebSocketTransport(NOWHERE)
    with anyio.fail_after(5), pytest.raises(WaitTimeout) as info:
        await transport.wait_connected(timeout_s=0.2)
    assert info.value.causes == (TRANSPORT_NEVER_STARTED,)
    assert "never started" in str(info.value)
    assert not transport.started


# ----------------------------------------------------------------- threads


def _thread_launch_timeout(transport: Any) -> tuple[LaunchTimeout, ThreadRunnerShell]:
    """Begin run 1 of ``TASK`` on a threading shell; the LaunchTimeout its wait raises."""
    shell = ThreadRunnerShell(_runtime(), transport, reader_factory=_no_reader)
    with shell:
        start_id = shell.begin_start(TASK, 1)
        before = time.monotonic()
        with pytest.raises(LaunchTimeout) as info:
            shell.wait_launch_ready(start_id, timeout_s=DEADLINE_S)
        elapsed = time.monotonic() - before
        assert DEADLINE_S - 0.1 <= elapsed < DEADLINE_S + 2.0
        assert shell._pending == {}  # the timed-out wait left no waiter behind
        shell.shutdown(timeout_s=2.0)
    return info.value, shell


def test_thread_launch_wait_names_a_websocket_client_that_was_never_started(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    client = ThreadWebSocketClient(NOWHERE, headers={"Authorization": Secret(CANARY_HEADER)})
    err, shell = _thread_launch_timeout(client)
    assert isinstance(err, TimeoutError)
    assert err.causes == (TRANSPORT_NEVER_STARTED,)
    assert "the transport was never started" in str(err)
    warned = [w for w in _warnings(caplog) if "never started" in w]
    assert len(warned) == 1
    assert shell.leaked_threads == 0
    _check_no_canary(err, caplog)


def test_thread_launch_wait_names_a_websocket_client_that_never_connected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    client = ThreadWebSocketClient(NOWHERE, open_timeout_s=0.5)
    client.start()
    try:
        err, _ = _thread_launch_timeout(client)
    finally:
        client.close()
    assert err.causes == (TRANSPORT_NEVER_CONNECTED,)
    assert "the transport has never connected" in str(err)
    assert [w for w in _warnings(caplog) if "never connected" in w]
    _check_no_canary(err, caplog)


def test_thread_launch_wait_names_lease_unavailable_for_a_run_the_cloud_does_not_know(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    cloud = _cloud(assign_boot=None)
    err, _ = _thread_launch_timeout(DirectCloudEnd(cloud))
    assert err.causes == (LEASE_UNAVAILABLE,)
    assert "the cloud has answered lease.unavailable 1 time" in str(err)
    assert len([w for w in _warnings(caplog) if "lease.unavailable" in w]) == 1
    _check_no_canary(err, caplog)


def test_thread_launch_wait_names_both_boot_ids_when_the_replica_refuses_env_frames(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    cloud = _cloud(assign_boot=CLOUD_BOOT)
    err, _ = _thread_launch_timeout(DirectCloudEnd(cloud))
    assert err.causes == (BOOT_ID_MISMATCH,)
    assert f"env frames for boot id {CLOUD_BOOT!r} were refused" in str(err)
    assert f"this runner's boot id is {RUNNER_BOOT!r}" in str(err)
    warned = [w for w in _warnings(caplog) if "boot id" in w]
    assert len(warned) == 1
    _check_no_canary(err, caplog)


def test_thread_transport_wait_connected_is_bounded_and_names_a_client_never_started() -> None:
    client = ThreadWebSocketClient(NOWHERE)
    with pytest.raises(WaitTimeout) as info:
        client.wait_connected(timeout_s=0.2)
    assert info.value.causes == (TRANSPORT_NEVER_STARTED,)
    assert not client.started


def test_thread_close_times_out_with_the_outstanding_work_named() -> None:
    """A close whose cleanup is stuck in consumer work: WaitTimeout, not a hang."""
    release = threading.Event()

    def stuck(cmd: Any) -> None:
        release.wait(10)

    rt = kit.port_runtime("waits-close")
    shell = ThreadRunnerShell(rt, DirectCloudEnd(_cloud(assign_boot=None)), work=stuck)
    try:
        with shell:
            shell.begin_start(TASK, 1)
            with pytest.raises(WaitTimeout) as info:
                shell.close(TASK, 1, "stop", timeout_s=0.5)
            assert info.value.wait == "close"
            assert "outstanding:" in str(info.value)
            assert shell._pending == {}
            release.set()
    finally:
        release.set()


# ----------------------------------------------------------- the defaults

_WAITS: list[tuple[Callable[..., Any], str, float]] = [
    (AsyncRunnerShell.begin_start, "timeout_s", diagnostics.BEGIN_START_TIMEOUT_S),
    (AsyncRunnerShell.wait_launch_ready, "timeout_s", diagnostics.LAUNCH_READY_TIMEOUT_S),
    (AsyncRunnerShell.acquire_hold, "timeout_s", diagnostics.ACQUIRE_HOLD_TIMEOUT_S),
    (AsyncRunnerShell.abandon_start, "timeout_s", diagnostics.ABANDON_START_TIMEOUT_S),
    (AsyncRunnerShell.close, "timeout_s", diagnostics.CLOSE_TIMEOUT_S),
    (AsyncRunnerShell.recover, "timeout_s", diagnostics.RECOVER_TIMEOUT_S),
    (AsyncRunnerShell.shutdown, "timeout_s", diagnostics.SHUTDOWN_TIMEOUT_S),
    (ThreadRunnerShell.begin_start, "timeout_s", diagnostics.BEGIN_START_TIMEOUT_S),
    (ThreadRunnerShell.wait_launch_ready, "timeout_s", diagnostics.LAUNCH_READY_TIMEOUT_S),
    (ThreadRunnerShell.acquire_hold, "timeout_s", diagnostics.ACQUIRE_HOLD_TIMEOUT_S),
    (ThreadRunnerShell.abandon_start, "timeout_s", diagnostics.ABANDON_START_TIMEOUT_S),
    (ThreadRunnerShell.close, "timeout_s", diagnostics.CLOSE_TIMEOUT_S),
    (ThreadRunnerShell.recover, "timeout_s", diagnostics.RECOVER_TIMEOUT_S),
    (ThreadRunnerShell.shutdown, "timeout_s", diagnostics.SHUTDOWN_TIMEOUT_S),
    (AnyioWebSocketTransport.wait_connected, "timeout_s", diagnostics.CONNECT_TIMEOUT_S),
    (ThreadWebSocketClient.wait_connected, "timeout_s", diagnostics.CONNECT_TIMEOUT_S),
]


@pytest.mark.parametrize(
    ("fn", "param", "expected"), _WAITS, ids=lambda v: getattr(v, "__qualname__", None)
)
def test_every_host_wait_has_a_finite_documented_default_deadline(
    fn: Callable[..., Any], param: str, expected: float
) -> None:
    default = inspect.signature(fn).parameters[param].default
    assert isinstance(default, float)
    assert math.isfinite(default)
    assert 0 < default <= 300
    assert default == expected
    assert "timeout_s" in (fn.__doc__ or "")


def test_launch_timeout_is_a_timeout_error_and_a_wait_timeout() -> None:
    assert issubclass(LaunchTimeout, WaitTimeout)
    assert issubclass(WaitTimeout, TimeoutError)
    for module in ("async_shell", "thread_shell"):
        mod = __import__(f"leasegate.shells.{module}", fromlist=["__all__"])
        assert {"LaunchTimeout", "WaitTimeout"} <= set(mod.__all__)
