"""A runner's tests written as a user of the kit writes them: the plugin's fixtures only.

No ``conftest.py`` line and no ``pytest_plugins``: the fixtures come from the
``pytest11`` entry point. A task runs through ``AsyncRunnerShell`` (asyncio
and trio) and ``ThreadRunnerShell``, over the in-memory link and over
WebSocket, to launch-ready (the gate opened, the engine's env file written
under ``consumers_root`` with the leased value read from moto through the
lease's own STS session), then is closed (the file removed).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from leasegate.core.registry import Assignment, OpenReader, TaskView
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import CredentialRuntime
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.consumers import EngineConsumer, TaskRoot
from leasegate.shells.ports import EngineFilesPort
from leasegate.shells.ssm import SessionCredentials, SsmReader
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import AnyioWebSocketTransport, Backoff, ThreadWebSocketClient
from leasegate.testing import CloudWebSocketServer, MemoryCloudLink, MotoServer, ReferenceCloud

pytestmark = pytest.mark.integration

TASK = "task-kit"
BOOT = "boot-kit"
API_KEY = "CANARY-kit-key"


class Port:
    """An in-memory consumer port (MCP, person): remembers the leased runs."""

    def __init__(self) -> None:
        self.leased: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.leased[assignment.task_id] = assignment

    def close(self, assignment: Assignment) -> None:
        self.leased.pop(assignment.task_id, None)

    def forget(self, what: Any) -> None:
        return None

    def install(self, request: Any) -> None:
        return None

    def leased_run(self, task_id: str) -> Assignment | None:
        return self.leased.get(task_id)

    def hold_git(self, assignment: Assignment) -> Any:
        raise AssertionError("not used")


def _populate(cloud: ReferenceCloud) -> None:
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": API_KEY})
    cloud.set_env_value("web", "DATABASE_URL", "CANARY-kit-db")
    cloud.assign(TASK, 1, "acme", "alice", ["web"], runner_boot_id=BOOT)


def _runner(root: TaskRoot) -> tuple[CredentialRuntime, EngineFilesPort]:
    engines = EngineFilesPort(EngineConsumer(root))
    rt = CredentialRuntime(
        runner_kind="owned",
        op_id_seed="kit",
        engines=engines,
        mcp=Port(),
        person=Port(),
        replica=ReplicaManager(boot_id=BOOT),
    )
    return rt, engines


def _readers(moto: MotoServer) -> Any:
    def factory(cmd: OpenReader) -> SsmReader:
        return SsmReader(
            SessionCredentials.from_lease(cmd.session, cmd.region),
            endpoint_url=moto.url,
            max_backoff_s=0.1,
        )

    return factory


def _assert_launched(root: TaskRoot) -> None:
    env_files = list(root.base.rglob("engine.env"))
    assert len(env_files) == 1
    assert f"ANTHROPIC_API_KEY='{API_KEY}'" in env_files[0].read_text()


async def _async_run(shell: AsyncRunnerShell, root: TaskRoot) -> None:
    async with shell:
        start_id = await shell.begin_start(TASK, 1)
        await shell.wait_launch_ready(start_id)
        assert shell.runtime.open_run(TASK) == 1
        _assert_launched(root)
        shell.end_start(start_id)
        await shell.close(TASK, 1, "stop")
        assert shell.runtime.open_run(TASK) is None
        assert not list(root.base.rglob("engine.env"))  # the close cleaned up
    assert shell.running_tasks == 0
    assert shell.task_errors == []


def _thread_run(shell: ThreadRunnerShell, root: TaskRoot) -> None:
    with shell:
        start_id = shell.begin_start(TASK, 1)
        shell.wait_launch_ready(start_id, timeout_s=20)
        assert shell.query(lambda r: r.open_run(TASK)) == 1
        _assert_launched(root)
        shell.end_start(start_id)
        shell.close(TASK, 1, "stop", timeout_s=20)
        assert shell.query(lambda r: r.open_run(TASK)) is None
        assert not list(root.base.rglob("engine.env"))  # the close cleaned up
    assert shell.running_threads == 0
    assert shell.task_errors == []


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_async_shell_reaches_launch_ready_over_the_memory_link(
    anyio_backend: str,
    cloud_link: MemoryCloudLink,
    moto_server: MotoServer,
    consumers_root: TaskRoot,
) -> None:
    _populate(cloud_link.cloud)
    rt, engines = _runner(consumers_root)
    shell = AsyncRunnerShell(
        rt, cloud_link.async_end(), reader_factory=_readers(moto_server), work=engines.work
    )
    with anyio.fail_after(30):
        await _async_run(shell, consumers_root)
    assert next(k for d, k in cloud_link.cloud.transcript if d == "in") == "lease.request"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_async_shell_reaches_launch_ready_over_websocket(
    anyio_backend: str,
    reference_cloud_ws: CloudWebSocketServer,
    moto_server: MotoServer,
    consumers_root: TaskRoot,
) -> None:
    _populate(reference_cloud_ws.cloud)
    rt, engines = _runner(consumers_root)
    with anyio.fail_after(30):
        async with AnyioWebSocketTransport(
            reference_cloud_ws.url, backoff=Backoff(base_ms=20, max_ms=200)
        ) as transport:
            await transport.wait_connected()
            shell = AsyncRunnerShell(
                rt, transport, reader_factory=_readers(moto_server), work=engines.work
            )
            await _async_run(shell, consumers_root)


def test_thread_shell_reaches_launch_ready_over_the_memory_link(
    cloud_link: MemoryCloudLink, moto_server: MotoServer, consumers_root: TaskRoot
) -> None:
    _populate(cloud_link.cloud)
    rt, engines = _runner(consumers_root)
    end = cloud_link.thread_end()
    shell = ThreadRunnerShell(rt, end, reader_factory=_readers(moto_server), work=engines.work_sync)
    _thread_run(shell, consumers_root)
    assert end.closed  # the shell closed its transport


def test_thread_shell_reaches_launch_ready_over_websocket(
    reference_cloud_ws: CloudWebSocketServer, moto_server: MotoServer, consumers_root: TaskRoot
) -> None:
    _populate(reference_cloud_ws.cloud)
    rt, engines = _runner(consumers_root)
    client = ThreadWebSocketClient(reference_cloud_ws.url, backoff=Backoff(base_ms=20, max_ms=200))
    client.start()
    try:
        assert client.wait_connected(10)
        shell = ThreadRunnerShell(
            rt, client, reader_factory=_readers(moto_server), work=engines.work_sync
        )
        _thread_run(shell, consumers_root)
    finally:
        client.close()
    assert not client.alive


def test_consumers_root_is_a_fresh_private_directory(consumers_root: TaskRoot) -> None:
    assert consumers_root.base.is_dir()
    assert list(consumers_root.base.iterdir()) == []
    assert consumers_root.base.stat().st_mode & 0o777 == 0o700
