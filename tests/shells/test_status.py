"""Both shells' ``status()``: the same typed, value-free view for the same scripted run.

The same run (start → grant → env snapshot → gate open, then stop) on the
async shell (asyncio) and on the threading shell, against the reference
cloud and a moto server on 127.0.0.1; ``status()`` is taken with the gate
open and after the stop. Times (``now_ms``, the lease expiry) differ
between the two runs and are compared as present/absent; everything else
must be equal. Canary values appear in no status.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import shell_kit as kit

from leasegate.core.registry import OpenReader
from leasegate.core.replica import ReplicaManager
from leasegate.shells import EnvCursor, PendingOps, RunnerStatus, TaskStatus
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import thread_memory_pair
from leasegate.testing import MemoryCloudLink, MotoServer

pytestmark = pytest.mark.integration

TASK = "task-status"
BOOT = "boot-status-1"


def _comparable(st: RunnerStatus) -> RunnerStatus:
    """``st`` with its times replaced by whether they were there."""
    tasks = tuple(
        dataclasses.replace(t, lease_expires_at_ms=None if t.lease_expires_at_ms is None else 1)
        for t in st.tasks
    )
    return dataclasses.replace(st, now_ms=0, tasks=tasks)


def _check_open(st: RunnerStatus) -> None:
    assert isinstance(st, RunnerStatus)
    assert len(st.tasks) == 1
    t = st.tasks[0]
    assert isinstance(t, TaskStatus)
    assert isinstance(t.pending, PendingOps)
    assert (t.task_id, t.run_epoch, t.phase, t.gate_open, t.serving) == (
        TASK,
        1,
        "usable",
        True,
        True,
    )
    assert t.startup is None
    assert not t.quarantined
    assert t.manifest_revision == 1
    assert t.revision_floor == 0
    assert t.lease_expires_at_ms is not None
    assert t.lease_expires_at_ms > st.now_ms
    assert isinstance(t.env_cursor, EnvCursor)
    assert "renewal" in t.timers
    assert "expiry" in t.timers
    assert st.timers_armed >= len(t.timers)
    assert t.owed_cleanups == ()
    assert st.owed_cleanups == ()
    text = repr(st) + str(st)
    assert "CANARY" not in text


async def _async_run(moto: MotoServer, base: Path) -> tuple[RunnerStatus, RunnerStatus]:
    cloud = kit.reference_cloud(moto, task=TASK, boot=BOOT)
    log: list[kit.LogEntry] = []
    engines = kit.RecordingEngines(base, log)
    rt = kit.port_runtime("status", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    opened: list[OpenReader] = []
    shell = AsyncRunnerShell(
        rt,
        MemoryCloudLink(cloud).async_end(),
        reader_factory=kit.moto_reader_factory(moto, opened),
        work=engines.work,
    )
    with anyio.fail_after(30):
        async with shell:
            start_id = await shell.begin_start(TASK, 1)
            await shell.wait_launch_ready(start_id)
            shell.end_start(start_id)
            opened_st = shell.status()
            await shell.close(TASK, 1, "stop")
            closed_st = shell.status()
            await shell.shutdown()
    return opened_st, closed_st


def _thread_run(moto: MotoServer, base: Path) -> tuple[RunnerStatus, RunnerStatus]:
    cloud = kit.reference_cloud(moto, task=TASK, boot=BOOT)
    log: list[kit.LogEntry] = []
    engines = kit.RecordingEngines(base, log)
    rt = kit.port_runtime("status", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    opened: list[OpenReader] = []
    with ThreadRunnerShell(
        rt,
        MemoryCloudLink(cloud).thread_end(),
        reader_factory=kit.moto_reader_factory(moto, opened),
        work=engines.work_sync,
    ) as shell:
        start_id = shell.begin_start(TASK, 1)
        shell.wait_launch_ready(start_id, timeout_s=30)
        shell.end_start(start_id)
        opened_st = shell.status()
        shell.close(TASK, 1, "stop")
        closed_st = shell.status()
        shell.shutdown()
    return opened_st, closed_st


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_both_shells_show_the_same_status_for_the_same_run(
    anyio_backend: str, moto_server: MotoServer, tmp_path: Path
) -> None:
    a_open, a_closed = await _async_run(moto_server, tmp_path / "a")
    t_open, t_closed = await anyio.to_thread.run_sync(_thread_run, moto_server, tmp_path / "t")
    for st in (a_open, t_open):
        _check_open(st)
    assert _comparable(a_open) == _comparable(t_open)
    # After the stop the task has no registered run left: nothing to show, nothing owed.
    for st in (a_closed, t_closed):
        assert st.tasks == ()
        assert st.owed_cleanups == ()
    assert _comparable(a_closed) == _comparable(t_closed)


def test_status_of_a_shell_that_began_nothing_is_empty() -> None:
    rt: Any = kit.port_runtime("empty")
    ours, _theirs = thread_memory_pair()
    with ThreadRunnerShell(rt, ours) as shell:
        st = shell.status()
        shell.shutdown()
    assert st.tasks == ()
    assert st.owed_cleanups == ()
    assert st.timers_armed == 0
