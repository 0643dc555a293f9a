"""A consumer's credential refresh through both shells (LR-102..LR-104).

``refresh_credential`` is the same call on the async shell (asyncio, trio)
and the threading shell: concurrent refreshes of one credential share one
``credential.refresh`` frame and every caller gets the result; a refresh of a
credential the run does not hold is refused with a fixed text. The frame's
send is held until all callers were handled by the core, so the coalescing
does not depend on how fast the reference cloud answers.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
import shell_kit as kit

from leasegate.core._base import Event
from leasegate.core.registry import OpenReader, RefreshRequested
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import CredentialRuntime
from leasegate.core.wire.lease import CredentialRefreshResult
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.thread_shell import CallFailed, ThreadRunnerShell
from leasegate.shells.transport import Backoff, ThreadWebSocketClient
from leasegate.testing import AsyncCloudEnd, CloudWebSocketServer, MemoryCloudLink, MotoServer

pytestmark = pytest.mark.integration

BOOT = "boot-refresh-1"
TASK = "task-refresh"
CALLERS = 16


class _CountRefreshes:
    """Counts the ``RefreshRequested`` events the runtime handled; wraps ``rt.handle``."""

    def __init__(self, rt: CredentialRuntime) -> None:
        self.handled = 0
        self.all_in = threading.Event()
        self._handle = rt.handle
        rt.handle = self._counting  # type: ignore[method-assign]

    def _counting(self, event: Event) -> Any:
        out = self._handle(event)
        if isinstance(event, RefreshRequested):
            self.handled += 1
            if self.handled == CALLERS:
                self.all_in.set()
        return out


def _is_refresh(value: Any) -> bool:
    return '"credential.refresh"' in str(value) or (
        isinstance(value, dict) and value.get("kind") == "credential.refresh"
    )


class _HeldAsync:
    """An async transport whose ``credential.refresh`` sends wait for every caller."""

    def __init__(self, inner: AsyncCloudEnd, count: _CountRefreshes) -> None:
        self._inner = inner
        self._count = count

    async def send(self, value: Any) -> None:
        if _is_refresh(value):
            with anyio.fail_after(10):
                while not self._count.all_in.is_set():
                    await anyio.sleep(0.005)
        await self._inner.send(value)

    async def receive(self) -> Any:
        return await self._inner.receive()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _HeldThread:
    """A blocking transport whose ``credential.refresh`` sends wait for every caller."""

    def __init__(self, inner: ThreadWebSocketClient, count: _CountRefreshes) -> None:
        self._inner = inner
        self._count = count

    def send(self, value: Any) -> None:
        if _is_refresh(value):
            assert self._count.all_in.wait(10)
        self._inner.send(value)

    def receive(self, timeout_s: float | None = None) -> Any:
        return self._inner.receive(timeout_s)

    def close(self) -> None:
        self._inner.close()


def _claude(view: Any) -> tuple[str, str | None]:
    (entry,) = view.engines
    return entry.manifest.credential_id, entry.manifest.revision


def _check_answers(
    cloud: Any, results: list[Any], caplog: pytest.LogCaptureFixture, count: _CountRefreshes
) -> None:
    assert count.handled == CALLERS + 1  # the 16 and the refused one
    assert len(results) == CALLERS
    assert all(isinstance(r, CredentialRefreshResult) for r in results)
    assert {(r.outcome, r.op_id) for r in results} == {(results[0].outcome, results[0].op_id)}
    assert results[0].outcome == "fresh"
    assert results[0].version is not None
    assert cloud.transcript.count(("in", "credential.refresh")) == 1
    assert "unhandled runtime command" not in caplog.text
    assert "CANARY" not in caplog.text


@pytest.mark.anyio
async def test_LR_103_LR_104_async_shell_coalesces_concurrent_refreshes_into_one_frame(
    anyio_backend: str,
    moto_server: MotoServer,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.INFO)
    cloud = kit.reference_cloud(moto_server, task=TASK, boot=BOOT)
    link = MemoryCloudLink(cloud)
    log: list[kit.LogEntry] = []
    engines = kit.RecordingEngines(tmp_path / "tasks", log)
    rt = kit.port_runtime("refresh-a", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    count = _CountRefreshes(rt)
    transport = _HeldAsync(link.async_end(), count)
    opened: list[OpenReader] = []
    factory = kit.moto_reader_factory(moto_server, opened)
    shell = AsyncRunnerShell(rt, transport, reader_factory=factory, work=engines.work)
    results: list[Any] = []
    with anyio.fail_after(30):
        async with shell:
            view = (await shell.wait_launch_ready(await shell.begin_start(TASK, 1))).view
            cid, rev = _claude(view)

            async def refresh() -> None:
                results.append(await shell.refresh_credential(TASK, 1, cid, rev, timeout_s=15))

            async with anyio.create_task_group() as tg:
                for _ in range(CALLERS - 1):
                    tg.start_soon(refresh)
                with pytest.raises(CallFailed) as refused:
                    await shell.refresh_credential(TASK, 1, "not-in-manifest", rev)
                assert refused.value.error.message == "credential is not in the active manifest"
                await refresh()
            await shell.close(TASK, 1, "stop")
            await shell.shutdown()
    _check_answers(cloud, results, caplog, count)


def test_LR_103_LR_104_thread_shell_coalesces_concurrent_refreshes_into_one_frame(
    moto_server: MotoServer,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.INFO)
    cloud = kit.reference_cloud(moto_server, task=TASK, boot=BOOT)
    log: list[kit.LogEntry] = []
    engines = kit.RecordingEngines(tmp_path / "tasks", log)
    rt = kit.port_runtime("refresh-t", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    count = _CountRefreshes(rt)
    opened: list[OpenReader] = []
    factory = kit.moto_reader_factory(moto_server, opened)
    results: list[Any] = []
    errors: list[BaseException] = []
    with CloudWebSocketServer(cloud) as server:
        client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
        client.start()
        assert client.wait_connected(10)
        shell = ThreadRunnerShell(
            rt, _HeldThread(client, count), reader_factory=factory, work=engines.work_sync
        )
        with shell:
            view = shell.wait_launch_ready(shell.begin_start(TASK, 1), timeout_s=20).view
            cid, rev = _claude(view)
            with pytest.raises(CallFailed) as refused:
                shell.refresh_credential(TASK, 1, "not-in-manifest", rev)
            assert refused.value.error.message == "credential is not in the active manifest"
            barrier = threading.Barrier(CALLERS)

            def refresh() -> None:
                try:
                    barrier.wait(10)
                    results.append(shell.refresh_credential(TASK, 1, cid, rev, timeout_s=15))
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=refresh) for _ in range(CALLERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            assert not any(t.is_alive() for t in threads)
            assert errors == []
            shell.close(TASK, 1, "stop", timeout_s=20)
    _check_answers(cloud, results, caplog, count)


def test_refresh_credential_has_one_contract_in_both_shells() -> None:
    import inspect

    a = inspect.signature(AsyncRunnerShell.refresh_credential)
    t = inspect.signature(ThreadRunnerShell.refresh_credential)
    assert a.parameters.keys() == t.parameters.keys()
    assert a.parameters["timeout_s"].default == t.parameters["timeout_s"].default
    assert 20.0 < t.parameters["timeout_s"].default < float("inf")
