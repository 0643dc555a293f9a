"""The threading runner shell driving the real runtime core, and its ordering guarantees.

Spine: begin start -> lease.request over a WebSocket (``ThreadWebSocketClient``
against the reference cloud's ``CloudWebSocketServer`` on 127.0.0.1) -> the
grant -> reads through the lease's own STS session against a moto server ->
env snapshot -> gate open -> launch-ready -> close(stop) -> cleanup (files
removed) -> shutdown with no thread, timer or client left. Then the ordering
guarantees on runtime doubles: one lock around the core, commands of one
``handle`` carried out outside it in emission order and before the next
event is handled, concurrent host calls, bounded shutdown, the recorder hook.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import shell_kit as kit

from leasegate.core.registry import (
    Assignment,
    CancelTimer,
    OpenReader,
    StartTimer,
    TaskView,
    TimerFired,
)
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import (
    Answer,
    ConsumerWork,
    CredentialFailure,
    JournalRecord,
    Notify,
    SendAck,
    WorkDone,
)
from leasegate.shells.thread_shell import (
    CallFailed,
    ShellClosedError,
    ThreadRunnerShell,
)
from leasegate.shells.transport import Backoff, ThreadWebSocketClient, thread_memory_pair
from leasegate.testing import CloudWebSocketServer, MotoServer

BOOT = "boot-thread-1"
TASK = "task-thread"


class ThreadEngines(kit.RecordingEngines):
    """:class:`shell_kit.RecordingEngines` that also notes whether each gate opened under the core
    lock; blocking work for threads."""

    def __init__(self, base: Path, log: list[kit.LogEntry]) -> None:
        super().__init__(base, log)
        self.lock: Any = None
        self.gate_locked: list[bool] = []

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.gate_locked.append(self.lock is not None and self.lock.locked())
        super().open(assignment, view)

    def blocking_work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """The adapter's work on the calling (worker) thread."""
        sync = getattr(self, "work_sync", None)
        if sync is not None:
            result: CredentialFailure | None = sync(cmd)
            return result
        return anyio.run(self.work, cmd)


@pytest.mark.integration
def test_RT_009_ER_018_thread_shell_spine_over_websocket_grant_reads_ready_close_shutdown(
    moto_server: MotoServer,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    before = set(kit.shell_threads())
    cloud = kit.reference_cloud(moto_server, task=TASK, boot=BOOT)
    log: list[kit.LogEntry] = []
    base = tmp_path / "tasks"
    engines = ThreadEngines(base, log)
    rt = kit.port_runtime("thread-e2e", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    opened: list[OpenReader] = []
    factory = kit.moto_reader_factory(moto_server, opened)
    with CloudWebSocketServer(cloud) as server:
        client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
        client.start()
        assert client.wait_connected(10)
        shell = ThreadRunnerShell(rt, client, reader_factory=factory, work=engines.blocking_work)
        engines.lock = shell.core_lock
        with shell:
            start_id = shell.begin_start(TASK, 1)
            ready = shell.wait_launch_ready(start_id, timeout_s=20)
            view = ready.view
            # What the task gets: its env as Secret values, revealed on purpose only.
            assert ready.reveal() == {"DATABASE_URL": "CANARY-db"}
            assert "CANARY" not in repr(ready)
            # The grant: every reader was built from the granted lease's own session.
            kit.assert_grant_read_through_the_lease(cloud, TASK, opened, view)
            # The env snapshot streamed by the cloud and read from moto.
            snap: Any = shell.query(lambda r: r.env_snapshot(TASK, 1, ("web",)))
            assert snap is not None
            assert kit.env_values(snap) == {"DATABASE_URL": "CANARY-db"}
            assert ("engines", "open") in log
            assert shell.query(lambda r: r.open_run(TASK)) == 1
            assert ("engines", "install") in shell.work_log
            # Gates run inside handle, under the core lock.
            assert engines.gate_locked
            assert all(engines.gate_locked)
            env_files = list(base.rglob("engine.env"))
            assert len(env_files) == 1
            assert stat.S_IMODE(os.stat(env_files[0]).st_mode) == 0o600
            assert "ANTHROPIC_API_KEY='CANARY-1'" in env_files[0].read_text()
            # One timer thread whatever the timers armed (renewal, expiry, ...).
            assert shell.timers_armed >= 1
            # Close: the gate closes and the cleanup procedure runs to the end.
            shell.close(TASK, 1, "stop", timeout_s=20)
            kit.assert_stop_cleaned_up(shell, log, base, TASK, cloud)
            assert shell.query(lambda r: r.open_run(TASK)) is None
        # Nothing left running: no thread of the shell, no timer, no client, no reader.
        assert shell.running_threads == 0
        assert shell.leaked_threads == 0
        assert not client.alive
        assert set(kit.shell_threads()) <= before
        kit.assert_readers_settled(shell)
        with pytest.raises(ShellClosedError):
            shell.begin_start(TASK, 2)
    kit.assert_spine_kept_its_secrets(cloud, shell, caplog)


# ---------------------------------------------------------------- doubles


class _Frame:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class ScriptRuntime:
    """A runtime double: ``script(event)`` gives the commands; checks non-re-entrance."""

    def __init__(self, script: Any, lock_of: Any = None) -> None:
        self.script = script
        self.events: list[Any] = []
        self.inside = False
        self.reentered = False
        self.overlap = False
        self._guard = threading.Lock()

    def handle(self, event: Any) -> list[Any]:
        if not self._guard.acquire(blocking=False):
            self.overlap = True  # two threads inside handle at once
            self._guard.acquire()
        try:
            if self.inside:
                self.reentered = True
            self.inside = True
            self.events.append(event)
            name = type(event).__name__
            if name == "RuntimeShutdown":
                return [Answer(call_id=event.call_id)]
            out: list[Any] = list(self.script(event))
            return out
        finally:
            self.inside = False
            self._guard.release()


def _shell(rt: Any, **kw: Any) -> tuple[ThreadRunnerShell, Any]:
    ours, theirs = thread_memory_pair()
    return ThreadRunnerShell(rt, ours, **kw), theirs


def _start_and_wait(shell: ThreadRunnerShell, seen: threading.Event) -> None:
    """In ``with shell``: begin run 1 of ``TASK``, then wait at most 5 s for ``seen``.

    Raises: ``AssertionError`` if ``seen`` was not set in time."""
    with shell:
        shell.begin_start(TASK, 1)
        assert seen.wait(5)


def test_thread_shell_commands_of_one_handle_run_in_emission_order_outside_the_core_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leasegate.shells import thread_shell

    monkeypatch.setattr(thread_shell, "encode_frame", lambda f: {"kind": f.kind})
    order: list[str] = []
    holder: list[ThreadRunnerShell] = []

    def notify(cmd: Notify) -> None:
        order.append(f"notify:{cmd.task_id}:locked={holder[0].core_lock.locked()}")

    def script(event: Any) -> list[Any]:
        name = type(event).__name__
        if name == "BeginStart":
            return [
                Notify(what="env-served", task_id="a"),
                JournalRecord(cmd_id=-1, task_id=TASK, run_epoch=1, reason="stop"),
                SendAck(frame=_Frame("first")),
                Notify(what="env-served", task_id="b"),
                Answer(call_id=event.call_id, value=-7),
                SendAck(frame=_Frame("second")),
                JournalRecord(cmd_id=-2, task_id=TASK, run_epoch=2, reason="stop"),
            ]
        if name == "WorkDone":
            order.append(f"done:{event.cmd_id}:owed={len(holder[0].memory_journal.owed())}")
        return []

    rt = ScriptRuntime(script)
    shell, peer = _shell(rt, notify=notify)
    holder.append(shell)
    with shell:
        assert shell.begin_start(TASK, 1) == -7
        assert [peer.receive(5)["kind"] for _ in range(2)] == ["first", "second"]
    # Emission order, outside the core lock; the batch's completions after the batch.
    assert order == [
        "notify:a:locked=False",
        "notify:b:locked=False",
        "done:-1:owed=2",
        "done:-2:owed=2",
    ]
    assert not rt.reentered
    assert not rt.overlap
    assert shell.running_threads == 0


def test_thread_shell_a_batch_is_carried_out_before_the_next_event_of_the_task_is_fed() -> None:
    """Another thread's event for the same task waits until the whole batch ran."""
    trace: list[str] = []
    holder: list[ThreadRunnerShell] = []
    other: list[threading.Thread] = []

    def notify(cmd: Notify) -> None:
        trace.append(f"cmd:{cmd.task_id}:start")
        if cmd.task_id == "gate-1":
            # Another host thread feeds the next event of the same task now.
            t = threading.Thread(target=holder[0].end_start, args=(-1,))
            other.append(t)
            t.start()
            t.join(0.2)  # it cannot get in while this batch runs
        trace.append(f"cmd:{cmd.task_id}:end")

    def script(event: Any) -> list[Any]:
        name = type(event).__name__
        trace.append(f"handle:{name}")
        if name == "BeginStart":
            return [
                Answer(call_id=event.call_id, value=-1),
                Notify(what="mcp-served", task_id="gate-1"),
                Notify(what="mcp-served", task_id="gate-2"),
            ]
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, notify=notify)
    holder.append(shell)
    with shell:
        shell.begin_start(TASK, 1)
        other[0].join(5)
    assert trace == [
        "handle:BeginStart",
        "cmd:gate-1:start",
        "cmd:gate-1:end",
        "cmd:gate-2:start",
        "cmd:gate-2:end",
        "handle:EndStart",
    ]


def test_thread_shell_concurrent_host_calls_from_many_threads_on_the_real_runtime() -> None:
    rt = kit.port_runtime("thread-many")
    inside = threading.Lock()
    overlap: list[bool] = []
    real_handle = rt.handle

    def guarded(event: Any) -> list[Any]:
        if not inside.acquire(blocking=False):
            overlap.append(True)
            inside.acquire()
        try:
            return real_handle(event)
        finally:
            inside.release()

    rt.handle = guarded  # type: ignore[method-assign]
    shell, peer = _shell(rt)
    n = 16
    ids: dict[int, int] = {}
    errors: list[BaseException] = []

    def host(i: int) -> None:
        try:
            ids[i] = shell.begin_start(f"task-{i}", 1)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with shell:
        threads = [threading.Thread(target=host, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert errors == []
        frames = [peer.receive(5) for _ in range(n)]
        # An older run of a started task is refused with the runtime's failure.
        with pytest.raises(CallFailed) as info:
            shell.begin_start("task-0", 0)
        assert info.value.error.message == "a newer run of this task has begun"
    assert len(set(ids.values())) == n
    assert all(v < 0 for v in ids.values())
    assert sorted(f["taskId"] for f in frames) == sorted(f"task-{i}" for i in range(n))
    assert all(f["kind"] == "lease.request" for f in frames)
    assert overlap == []
    assert shell.running_threads == 0


def test_thread_shell_recorder_is_called_per_handle_before_commands_run() -> None:
    trace: list[str] = []

    class Recorder:
        def record(self, event: Any, commands: Any) -> None:
            trace.append(f"record:{type(event).__name__}:{len(commands)}")

    def notify(cmd: Notify) -> None:
        trace.append("notify")

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "BeginStart":
            return [
                Notify(what="env-served", task_id=TASK),
                Answer(call_id=event.call_id, value=-1),
            ]
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, notify=notify, recorder=Recorder())
    with shell:
        shell.begin_start(TASK, 1)
        shell.release_hold(-5)
    assert trace == [
        "record:BeginStart:2",
        "notify",
        "record:ReleaseHold:0",
        "record:RuntimeShutdown:1",
    ]
    assert len(rt.events) == 3


def test_thread_shell_consumer_exception_becomes_fixed_failure_without_its_text() -> None:
    def work(cmd: ConsumerWork) -> None:
        raise RuntimeError("CANARY-consumer-secret")

    seen = threading.Event()

    def script(event: Any) -> list[Any]:
        name = type(event).__name__
        if name == "BeginStart":
            return [
                ConsumerWork(cmd_id=-3, consumer="engines", op="install"),
                Answer(call_id=event.call_id, value=-1),
            ]
        if name == "WorkDone":
            seen.set()
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, work=work)
    _start_and_wait(shell, seen)
    done = [e for e in rt.events if isinstance(e, WorkDone)]
    assert [(d.cmd_id, d.error.message if d.error else None) for d in done] == [
        (-3, "a credential consumer failed")
    ]
    assert "CANARY" not in repr(rt.events)


def test_thread_shell_shutdown_is_bounded_with_stuck_work_and_unblocks_waiters() -> None:
    release = threading.Event()

    def work(cmd: ConsumerWork) -> None:
        release.wait(30)  # stuck I/O

    def script(event: Any) -> list[Any]:
        name = type(event).__name__
        if name == "BeginStart":
            return [
                ConsumerWork(cmd_id=-3, consumer="engines", op="install"),
                Answer(call_id=event.call_id, value=-1),
            ]
        return []  # AwaitLaunchReady is never answered

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, work=work)
    waiter_error: list[BaseException] = []

    def waiter() -> None:
        try:
            shell.wait_launch_ready(-1)
        except BaseException as e:  # noqa: BLE001 - asserted below
            waiter_error.append(e)

    with shell:
        shell.begin_start(TASK, 1)
        w = threading.Thread(target=waiter)
        w.start()
        time.sleep(0.05)
        t0 = time.monotonic()
        shell.shutdown(timeout_s=0.3)
        elapsed = time.monotonic() - t0
    w.join(5)
    assert elapsed < 5.0
    assert [type(e) for e in waiter_error] == [ShellClosedError]
    assert shell.leaked_threads == 1  # the stuck worker, reported, not hidden
    release.set()
    deadline = time.monotonic() + 5
    while shell.running_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shell.running_threads == 0
    assert not any(n.startswith("leasegate-io") for n in kit.shell_threads())


def test_thread_shell_timers_one_sleeper_cancelled_never_fire() -> None:
    fired: list[int] = []
    got = threading.Event()

    def script(event: Any) -> list[Any]:
        name = type(event).__name__
        if name == "BeginStart":
            cmds: list[Any] = [StartTimer(timer_id=t, delay_ms=60_000) for t in range(10, 10_010)]
            # Due well after the batch ran, even on a loaded machine.
            cmds += [StartTimer(timer_id=1, delay_ms=800), CancelTimer(timer_id=1)]
            cmds += [StartTimer(timer_id=2, delay_ms=1000)]
            return [*cmds, Answer(call_id=event.call_id, value=-1)]
        if isinstance(event, TimerFired):
            fired.append(event.timer_id)
            got.set()
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt)
    with shell:
        threads_before = shell.running_threads
        shell.begin_start(TASK, 1)
        assert shell.timers_armed == 10_001
        assert got.wait(10)
        time.sleep(0.1)
        # 10,000 more timers, the same threads (one timer thread).
        assert shell.running_threads == threads_before
        assert sum(1 for n in kit.shell_threads() if n == "leasegate-timers") >= 1
    assert fired == [2]
    assert shell.running_threads == 0


def test_thread_shell_drops_invalid_json_frames_and_refuses_calls_after_shutdown() -> None:
    rt = kit.port_runtime("thread-unit")
    shell, peer = _shell(rt)
    with shell:
        peer.send_text("{not json")
        peer.send({"kind": "nothing.known"})
        start_id = shell.begin_start(TASK, 1)
        assert start_id < 0
        frame = peer.receive(5)
        assert frame["kind"] == "lease.request"
        deadline = time.monotonic() + 5
        while shell.dropped < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shell.dropped == 1
        shell.shutdown()
        with pytest.raises(ShellClosedError):
            shell.begin_start(TASK, 2)
    assert shell.running_threads == 0


def test_thread_shell_failed_send_feeds_SendFailed_and_ack_failures_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leasegate.core.registry import SendFailed, SendFrame
    from leasegate.shells import thread_shell

    monkeypatch.setattr(thread_shell, "encode_frame", lambda f: {"kind": "x"})
    seen = threading.Event()

    class Broken:
        def send(self, value: Any) -> None:
            raise OSError("down")

        def receive(self, timeout_s: float | None = None) -> Any:
            time.sleep(timeout_s or 0)
            raise TimeoutError

        def close(self) -> None:
            pass

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "BeginStart":
            return [
                SendAck(frame=object()),
                SendFrame(cmd_id=9, frame=object()),
                Answer(call_id=event.call_id, value=-1),
            ]
        if isinstance(event, SendFailed):
            seen.set()
        return []

    rt = ScriptRuntime(script)
    _start_and_wait(ThreadRunnerShell(rt, Broken()), seen)  # type: ignore[arg-type]
    assert [e.cmd_id for e in rt.events if isinstance(e, SendFailed)] == [9]


@pytest.mark.integration
def test_RT_100_thread_shell_recover_runs_owed_cleanups_before_any_grant(tmp_path: Path) -> None:
    from leasegate.core.runtime import OwedCleanup

    log: list[kit.LogEntry] = []
    base = tmp_path / "tasks"
    kit.leave_task_files(base, TASK)
    engines = ThreadEngines(base, log)
    rt = kit.port_runtime("thread-recover", log, engines=engines)
    shell, _peer = _shell(rt, work=engines.blocking_work)
    shell.memory_journal.apply(JournalRecord(cmd_id=-99, task_id=TASK, run_epoch=1, reason="stop"))
    assert shell.memory_journal.owed() == (OwedCleanup(TASK, 1, "stop"),)
    with shell:
        shell.recover()
        assert not (base / TASK).exists()
        assert ("host", "remove-paths") in shell.work_log
        assert shell.memory_journal.owed() == ()
    assert shell.running_threads == 0


def test_LR_026_thread_shell_builds_readers_on_a_worker_and_never_after_close() -> None:
    """``OpenReader`` does not build the client on the feeding thread; the first read does,
    on an I/O worker; a reader closed before any read is never built."""
    from leasegate.core.registry import CloseReader, ReadCompleted, ReadFailed, ReadParameters
    from leasegate.shells.ssm import ReadOk

    built: list[tuple[int, str]] = []
    done = threading.Event()

    class FakeReader:
        def __init__(self, rid: int) -> None:
            self.rid = rid
            self.closed = False

        def read_blocking(self, names: Any) -> ReadOk:
            return ReadOk(parameters=(), invalid=tuple(names))

        def seal(self) -> None:
            self.closed = True

    def factory(cmd: Any) -> Any:
        built.append((cmd.reader_id, threading.current_thread().name))
        return FakeReader(cmd.reader_id)

    def opener(rid: int) -> Any:
        return OpenReader(reader_id=rid, assignment=None, region="us-east-1", session=None)  # type: ignore[arg-type]

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "BeginStart":
            return [
                opener(1),
                ReadParameters(cmd_id=11, reader_id=1, selectors=("a", "b")),
                opener(2),
                CloseReader(reader_id=2),
                ReadParameters(cmd_id=12, reader_id=2, selectors=("c",)),
                Answer(call_id=event.call_id, value=-1),
            ]
        if sum(isinstance(e, (ReadCompleted, ReadFailed)) for e in rt.events) == 2:
            done.set()
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, reader_factory=factory)
    _start_and_wait(shell, done)
    assert [rid for rid, _ in built] == [1]  # reader 2 was closed before any read
    assert built[0][1].startswith("leasegate-io")
    completions = {e.cmd_id: type(e).__name__ for e in rt.events if hasattr(e, "cmd_id")}
    assert completions == {11: "ReadCompleted", 12: "ReadFailed"}
    assert all(r.closed for r in shell.all_readers)  # sealed at shutdown
    assert shell.readers == {}


def test_thread_shell_shutdown_from_a_callback_neither_deadlocks_nor_joins_itself() -> None:
    holder: list[ThreadRunnerShell] = []
    seen: list[str] = []

    def notify(cmd: Notify) -> None:
        with pytest.raises(RuntimeError):  # a blocking call from the drainer is refused
            holder[0].wait_launch_ready(-1)
        holder[0].shutdown(timeout_s=1)
        seen.append("shut")

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "BeginStart":
            return [
                Answer(call_id=event.call_id, value=-1),
                Notify(what="env-served", task_id=TASK),
            ]
        return []

    rt = ScriptRuntime(script)
    shell, _peer = _shell(rt, notify=notify)
    holder.append(shell)
    t0 = time.monotonic()
    with shell:
        assert shell.begin_start(TASK, 1) == -1
    assert time.monotonic() - t0 < 5
    assert seen == ["shut"]
    assert shell.running_threads == 0
    with pytest.raises(ShellClosedError):
        shell.begin_start(TASK, 2)
