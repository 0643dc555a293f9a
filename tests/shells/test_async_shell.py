"""The async runner shell (anyio) driving the real runtime core, end to end.

Spine: begin start -> lease.request -> the reference cloud's grant -> reads
through the lease's own STS session against a moto server on 127.0.0.1 ->
env snapshot -> gate open -> launch-ready -> close(stop) -> cleanup ->
shutdown with nothing left running. Parametrized over asyncio and trio.
Engines are the reference EngineConsumer through ``EngineFilesPort`` (files
0600 in 0700 directories); MCP and person are in-memory recording ports.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
import shell_kit as kit

from leasegate.core.registry import OpenReader
from leasegate.core.replica import ReplicaManager
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.testing import MemoryCloudLink, MotoServer

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

BOOT = "boot-async-1"
TASK = "task-async"


async def test_RT_009_ER_018_async_shell_spine_grant_reads_ready_close_shutdown(
    anyio_backend: str,
    moto_server: MotoServer,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    cloud = kit.reference_cloud(moto_server, task=TASK, boot=BOOT)
    transport = MemoryCloudLink(cloud).async_end()
    log: list[kit.LogEntry] = []
    base = tmp_path / "tasks"
    engines = kit.RecordingEngines(base, log)
    rt = kit.port_runtime("async-e2e", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    opened: list[OpenReader] = []
    factory = kit.moto_reader_factory(moto_server, opened)
    shell = AsyncRunnerShell(rt, transport, reader_factory=factory, work=engines.work)
    with anyio.fail_after(20):
        async with shell:
            start_id = await shell.begin_start(TASK, 1)
            ready = await shell.wait_launch_ready(start_id)
            view = ready.view
            # What the task gets: its env as Secret values, revealed on purpose only.
            assert ready.reveal() == {"DATABASE_URL": "CANARY-db"}
            assert "CANARY" not in repr(ready)
            # The grant: every reader was built from the granted lease's own session.
            kit.assert_grant_read_through_the_lease(cloud, TASK, opened, view)
            assert all("CANARY" not in o.session.access_key_id for o in opened)
            # The env snapshot streamed by the cloud and read from moto.
            snap: Any = rt.env_snapshot(TASK, 1, ("web",))
            assert snap is not None
            assert kit.env_values(snap) == {"DATABASE_URL": "CANARY-db"}
            assert ("engines", "open") in log
            assert rt.open_run(TASK) == 1
            assert ("engines", "install") in shell.work_log
            # The engine's env file: 0600 in 0700 directories, the leased value.
            env_files = list(base.rglob("engine.env"))
            assert len(env_files) == 1
            assert stat.S_IMODE(os.stat(env_files[0]).st_mode) == 0o600
            d = env_files[0].parent
            while d != base:
                assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
                d = d.parent
            assert "ANTHROPIC_API_KEY='CANARY-1'" in env_files[0].read_text()
            # Close: the gate closes and the cleanup procedure runs to the end.
            await shell.close(TASK, 1, "stop")
            kit.assert_stop_cleaned_up(shell, log, base, TASK, cloud)
            assert rt.open_run(TASK) is None
            await shell.shutdown()
    # Nothing left running: no task of the shell, no open reader.
    assert shell.running_tasks == 0
    kit.assert_readers_settled(shell)
    with pytest.raises(anyio.ClosedResourceError):  # the transport was closed
        await transport.send({"kind": "late"})
    # The first frame was the lease request; no secret reached a log line or a repr.
    kit.assert_spine_kept_its_secrets(cloud, shell, caplog)


async def test_async_shell_drops_invalid_json_frames_and_refuses_calls_after_shutdown(
    anyio_backend: str,
) -> None:
    from leasegate.shells.async_shell import ShellClosedError
    from leasegate.shells.transport.memory import memory_pair

    rt = kit.port_runtime("async-unit")
    ours, theirs = memory_pair()
    shell = AsyncRunnerShell(rt, ours)
    with anyio.fail_after(10):
        async with shell:
            await theirs.send_text("{not json")
            await theirs.send({"kind": "nothing.known"})
            start_id = await shell.begin_start(TASK, 1)
            assert start_id < 0
            # The runtime asked the cloud for a lease through the transport, in order.
            frame = await theirs.receive()
            assert frame["kind"] == "lease.request"
            assert shell.dropped == 1
            await shell.shutdown()
            with pytest.raises(ShellClosedError):
                await shell.begin_start(TASK, 2)
    assert shell.running_tasks == 0


class _FakeRuntime:
    """A runtime double: records what it handles and checks handle() is never re-entered."""

    def __init__(self) -> None:
        self.inside = False
        self.reentered = False
        self.handled: list[str] = []
        self.shell: AsyncRunnerShell | None = None
        self.owed_seen: list[int] = []

    def handle(self, event: Any) -> list[Any]:
        from leasegate.core.runtime import Answer, JournalRecord, SendAck

        if self.inside:
            self.reentered = True
        self.inside = True
        try:
            name = type(event).__name__
            self.handled.append(f"{name}:{getattr(event, 'cmd_id', getattr(event, 'call_id', ''))}")
            if name == "BeginStart":
                # Two synchronous journal commands: their WorkDone completions are
                # produced while this batch executes and must be queued, not nested.
                return [
                    JournalRecord(cmd_id=-1, task_id=TASK, run_epoch=1, reason="stop"),
                    JournalRecord(cmd_id=-2, task_id=TASK, run_epoch=2, reason="stop"),
                    SendAck(frame=_Frame("first")),
                    Answer(call_id=event.call_id, value=-7),
                    SendAck(frame=_Frame("second")),
                ]
            if name == "WorkDone" and self.shell is not None:
                # How much of the batch had been carried out when this completion came in.
                self.owed_seen.append(len(self.shell.memory_journal.owed()))
            if name == "RuntimeShutdown":
                return [Answer(call_id=event.call_id, value=None)]
            return []
        finally:
            self.inside = False


class _Frame:
    def __init__(self, kind: str) -> None:
        self.kind = kind


async def test_async_shell_feeds_one_event_at_a_time_in_order_and_sends_in_emission_order(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from leasegate.shells import async_shell
    from leasegate.shells.transport.memory import memory_pair

    monkeypatch.setattr(async_shell, "encode_frame", lambda f: {"kind": f.kind})
    fake = _FakeRuntime()
    ours, theirs = memory_pair()
    shell = AsyncRunnerShell(fake, ours)  # type: ignore[arg-type]
    fake.shell = shell
    with anyio.fail_after(10):
        async with shell:
            assert await shell.begin_start(TASK, 1) == -7
            assert [(await theirs.receive())["kind"] for _ in range(2)] == ["first", "second"]
    assert not fake.reentered
    # Completions produced while a batch executes wait for the whole batch.
    assert fake.owed_seen == [2, 2]
    # The batch's completions were handled after it, in emission order.
    assert fake.handled[:3] == ["BeginStart:1", "WorkDone:-1", "WorkDone:-2"]
    assert [(o.task_id, o.run_epoch) for o in shell.memory_journal.owed()] == [(TASK, 1), (TASK, 2)]
    assert shell.running_tasks == 0


class _ScriptRuntime:
    """A runtime double answering BeginStart with scripted commands; records events."""

    def __init__(self, commands: list[Any]) -> None:
        self.commands = commands
        self.events: list[Any] = []
        self.seen = anyio.Event()

    def handle(self, event: Any) -> list[Any]:
        from leasegate.core.runtime import Answer

        self.events.append(event)
        name = type(event).__name__
        if name == "BeginStart":
            return [*self.commands, Answer(call_id=event.call_id, value=-1)]
        if name == "RuntimeShutdown":
            return [Answer(call_id=event.call_id)]
        self.seen.set()
        return []


class _BrokenTransport:
    """A transport whose sends fail and whose receive waits until closed."""

    def __init__(self) -> None:
        self.closed = anyio.Event()

    async def send(self, value: Any) -> None:
        raise anyio.BrokenResourceError

    async def receive(self) -> Any:
        await self.closed.wait()
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        self.closed.set()


async def test_async_shell_consumer_exception_becomes_fixed_failure_without_its_text(
    anyio_backend: str,
) -> None:
    from leasegate.core.runtime import ConsumerWork, WorkDone

    async def work(cmd: ConsumerWork) -> None:
        raise RuntimeError("CANARY-consumer-secret")

    fake = _ScriptRuntime([ConsumerWork(cmd_id=-3, consumer="engines", op="install")])
    shell = AsyncRunnerShell(fake, _BrokenTransport(), work=work)  # type: ignore[arg-type]
    with anyio.fail_after(10):
        async with shell:
            await shell.begin_start(TASK, 1)
            await fake.seen.wait()
    done = [e for e in fake.events if isinstance(e, WorkDone)]
    assert [(d.cmd_id, d.error.message if d.error else None) for d in done] == [
        (-3, "a credential consumer failed")
    ]
    assert "CANARY" not in repr(fake.events)
    assert shell.running_tasks == 0


async def test_async_shell_failed_send_feeds_SendFailed_and_ack_failures_are_ignored(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from leasegate.core.registry import SendFailed, SendFrame
    from leasegate.core.runtime import SendAck
    from leasegate.shells import async_shell

    monkeypatch.setattr(async_shell, "encode_frame", lambda f: {"kind": "x"})
    fake = _ScriptRuntime([SendAck(frame=object()), SendFrame(cmd_id=9, frame=object())])
    shell = AsyncRunnerShell(fake, _BrokenTransport())  # type: ignore[arg-type]
    with anyio.fail_after(10):
        async with shell:
            await shell.begin_start(TASK, 1)
            await fake.seen.wait()
    failed = [e.cmd_id for e in fake.events if isinstance(e, SendFailed)]
    assert failed == [9]


async def test_RT_100_async_shell_recover_runs_owed_cleanups_before_any_grant(
    anyio_backend: str, tmp_path: Path
) -> None:
    from leasegate.core.runtime import JournalRecord, OwedCleanup
    from leasegate.shells.transport.memory import memory_pair

    log: list[kit.LogEntry] = []
    base = tmp_path / "tasks"
    kit.leave_task_files(base, TASK)
    engines = kit.RecordingEngines(base, log)
    rt = kit.port_runtime("async-recover", log, engines=engines)
    ours, _theirs = memory_pair()
    shell = AsyncRunnerShell(rt, ours, work=engines.work)
    # The previous process's journal row (the shell reads it when owed=None).
    shell.memory_journal.apply(JournalRecord(cmd_id=-99, task_id=TASK, run_epoch=1, reason="stop"))
    assert shell.memory_journal.owed() == (OwedCleanup(TASK, 1, "stop"),)
    with anyio.fail_after(10):
        async with shell:
            await shell.recover()
            # The previous process's files are gone, the row is settled.
            assert not (base / TASK).exists()
            assert ("host", "remove-paths") in shell.work_log
            assert shell.memory_journal.owed() == ()
            await shell.shutdown()
    assert shell.running_tasks == 0
