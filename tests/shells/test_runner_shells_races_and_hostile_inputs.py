"""Attacks on the async and the threading shell.

Each test names the guarantee of ``docs/shells.md`` it attacks; each fails
if that guarantee breaks. Core-free doubles (:class:`ScriptRuntime`) are used
where a runtime that never answers is the attack; the real
``CredentialRuntime`` elsewhere. No AWS, no internet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from shell_kit import port_runtime, shell_threads
from websockets.exceptions import InvalidURI
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as ws_serve

from leasegate.core import Secret
from leasegate.core.registry import (
    CancelTimer,
    OpenReader,
    ReadParameters,
    StartTimer,
)
from leasegate.core.runtime import (
    AbandonStart,
    Answer,
    ConsumerWork,
    CredentialFailure,
    CredentialRuntime,
    Failed,
    Notify,
    RunSetup,
)
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.ssm import SessionCredentials, SsmReader
from leasegate.shells.thread_shell import CallFailed, ShellClosedError, ThreadRunnerShell
from leasegate.shells.transport import (
    AnyioWebSocketClient,
    AnyioWebSocketTransport,
    Backoff,
    Reauthenticated,
    ThreadWebSocketClient,
    WebSocketClient,
    thread_memory_pair,
)
from leasegate.shells.transport.memory import memory_pair

CANARY = "CANARY-b2-secret-value"


def _runtime(seed: str = "breaker") -> CredentialRuntime:
    return port_runtime(seed)


class Spy:
    """Wraps a runtime's ``handle`` to keep every event it was fed."""

    def __init__(self, rt: CredentialRuntime) -> None:
        self.events: list[Any] = []
        real = rt.handle

        def handle(event: Any) -> Any:
            self.events.append(event)
            return real(event)

        rt.handle = handle  # type: ignore[method-assign]


class ScriptRuntime:
    """A runtime double: ``script(event)`` gives the commands (``RuntimeShutdown`` not answered
    unless ``answer_shutdown``)."""

    def __init__(self, script: Callable[[Any], list[Any]], *, answer_shutdown: bool = True) -> None:
        self.script = script
        self.answer_shutdown = answer_shutdown
        self.events: list[Any] = []

    def handle(self, event: Any) -> list[Any]:
        self.events.append(event)
        if type(event).__name__ == "RuntimeShutdown":
            return [Answer(call_id=event.call_id)] if self.answer_shutdown else []
        return list(self.script(event))


def _never(event: Any) -> list[Any]:
    return []


def _poll(done: Callable[[], bool], *, step_s: float = 0.01) -> None:
    """Sleep ``step_s`` at a time until ``done()``. Raises: ``AssertionError`` after 5 s."""
    deadline = time.monotonic() + 5
    while not done():
        assert time.monotonic() < deadline
        time.sleep(step_s)


async def _apoll(done: Callable[[], bool]) -> None:
    """Sleep 10 ms at a time until ``done()``. Raises: ``TimeoutError`` after 5 s."""
    with anyio.fail_after(5):
        while not done():
            await anyio.sleep(0.01)


def _run_thread(rt: ScriptRuntime, done: Callable[[], bool], **kw: Any) -> ThreadRunnerShell:
    """A threading shell over a memory pair on ``rt`` (``kw``: its callbacks): feed
    ``EndStart(-1)``, :func:`_poll` until ``done()``, shut down; the stopped shell."""
    ours, _peer = thread_memory_pair()
    with ThreadRunnerShell(rt, ours, **kw) as shell:
        shell.end_start(-1)
        _poll(done)
    return shell


async def _run_async(rt: ScriptRuntime, done: Callable[[], bool], **kw: Any) -> AsyncRunnerShell:
    """The async twin of :func:`_run_thread` (waits with :func:`_apoll`)."""
    ours, _peer = memory_pair()
    async with AsyncRunnerShell(rt, ours, **kw) as shell:
        shell.end_start(-1)
        await _apoll(done)
    return shell


def _assert_quiet(caplog: pytest.LogCaptureFixture, events: list[Any]) -> None:
    """No canary in a log line or in the ``repr`` of the events the runtime was fed."""
    assert CANARY not in caplog.text
    assert CANARY not in repr(events)


async def _wait_for_launch(shell: AsyncRunnerShell, outcome: list[str]) -> None:
    """Wait for launch-ready of start ``-1``; note ``"answered"`` or ``"closed"``
    (``ShellClosedError``) in ``outcome``."""
    try:
        await shell.wait_launch_ready(-1)
        outcome.append("answered")
    except ShellClosedError:
        outcome.append("closed")


# ------------------------------------------------------------ abandon_start


def test_RT_047_thread_shell_abandon_start_feeds_its_start_and_hold_and_returns() -> None:
    rt = _runtime()
    spy = Spy(rt)
    ours, peer = thread_memory_pair()
    with ThreadRunnerShell(rt, ours) as shell:
        start_id = shell.begin_start("task-ab", 1)
        assert peer.receive(5)["kind"] == "lease.request"
        shell.abandon_start(start_id, None)
        abandons = [e for e in spy.events if isinstance(e, AbandonStart)]
        assert [(e.start_id, e.hold_id) for e in abandons] == [(start_id, None)]
        # The abandoned start no longer waits: launch-ready fails at once (RT-047).
        with pytest.raises(CallFailed):
            shell.wait_launch_ready(start_id, timeout_s=5)
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_RT_047_async_shell_abandon_start_feeds_its_start_and_hold_and_returns(
    anyio_backend: str,
) -> None:
    rt = _runtime()
    spy = Spy(rt)
    ours, peer = memory_pair()
    async with AsyncRunnerShell(rt, ours) as shell:
        start_id = await shell.begin_start("task-ab", 1)
        assert (await peer.receive())["kind"] == "lease.request"
        with anyio.fail_after(5):
            await shell.abandon_start(start_id, None)
        abandons = [e for e in spy.events if isinstance(e, AbandonStart)]
        assert [(e.start_id, e.hold_id) for e in abandons] == [(start_id, None)]
        with anyio.fail_after(5), pytest.raises(CallFailed):
            await shell.wait_launch_ready(start_id)
    assert shell.running_tasks == 0


# ------------------------------------------------------ calls racing shutdown


class _ShutdownOnNextId:
    """An id source that, once armed, runs a whole shutdown in between a call's check and its
    registration (the window a host call racing ``shutdown`` from another thread hits)."""

    def __init__(self, shell: ThreadRunnerShell) -> None:
        self.shell = shell
        self.n = 1000
        self.armed = False

    def __iter__(self) -> _ShutdownOnNextId:
        return self

    def __next__(self) -> int:
        self.n += 1
        if self.armed:
            self.armed = False
            t = threading.Thread(target=self.shell.shutdown, kwargs={"timeout_s": 2.0})
            t.start()
            t.join(10)
        return self.n


def test_thread_shell_host_call_racing_shutdown_is_refused_never_left_hanging() -> None:
    rt = ScriptRuntime(_never)  # never answers a launch wait: only the shell can end it
    ours, _peer = thread_memory_pair()
    shell = ThreadRunnerShell(rt, ours)
    ids = _ShutdownOnNextId(shell)
    shell._ids = ids  # type: ignore[assignment]
    outcome: list[str] = []

    def host() -> None:
        try:
            shell.wait_launch_ready(-1)
            outcome.append("answered")
        except ShellClosedError:
            outcome.append("closed")
        except BaseException as e:  # noqa: BLE001 - reported by the assertion
            outcome.append(type(e).__name__)

    with shell:
        ids.armed = True
        t = threading.Thread(target=host, daemon=True)
        t.start()
        t.join(5)
        assert not t.is_alive(), "a host call racing shutdown hangs forever"
    assert outcome == ["closed"]
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_async_shell_shutdown_wakes_a_waiting_call_with_ShellClosedError(
    anyio_backend: str,
) -> None:
    # A runtime that answers neither the launch wait nor RuntimeShutdown: the
    # bound elapses; the waiting host call must not hang for good (as in the thread shell).
    rt = ScriptRuntime(_never, answer_shutdown=False)
    ours, _peer = memory_pair()
    outcome: list[str] = []

    async with AsyncRunnerShell(rt, ours) as shell:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_wait_for_launch, shell, outcome)
                await anyio.wait_all_tasks_blocked()
                await shell.shutdown(timeout_s=0.2)
        assert outcome == ["closed"]
        with pytest.raises(ShellClosedError):
            await shell.begin_start("task-late", 1)
    assert shell.running_tasks == 0


class _RaisingRecorder:
    """A recorder that raises on its first frame step (a host bug), then records."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.raised = False

    def record(self, event: Any, commands: Any) -> None:
        name = type(event).__name__
        if name == "HandleFrame" and not self.raised:
            self.raised = True
            raise ValueError(CANARY)
        self.steps.append(name)


@pytest.mark.anyio
async def test_async_shell_a_raising_recorder_neither_stops_the_receiver_nor_leaks_text(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    rt = ScriptRuntime(_never)
    ours, peer = memory_pair()
    rec = _RaisingRecorder()
    caplog.set_level(logging.DEBUG)
    async with AsyncRunnerShell(rt, ours, recorder=rec) as shell:
        await peer.send({"kind": "first"})
        await peer.send({"kind": "second"})
        await _apoll(lambda: sum(type(e).__name__ == "HandleFrame" for e in rt.events) >= 2)
    assert [e.frame["kind"] for e in rt.events if type(e).__name__ == "HandleFrame"] == [
        "first",
        "second",
    ]
    assert rec.steps.count("HandleFrame") == 1
    assert shell.task_errors == ["ValueError"]
    assert CANARY not in caplog.text
    assert shell.running_tasks == 0


def test_thread_shell_a_raising_recorder_neither_stops_the_receiver_nor_leaks_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = ScriptRuntime(_never)
    ours, peer = thread_memory_pair()
    rec = _RaisingRecorder()
    caplog.set_level(logging.DEBUG)
    with ThreadRunnerShell(rt, ours, recorder=rec) as shell:
        peer.send({"kind": "first"})
        peer.send({"kind": "second"})
        deadline = time.monotonic() + 5
        while (
            sum(type(e).__name__ == "HandleFrame" for e in rt.events) < 2
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
    assert [e.frame["kind"] for e in rt.events if type(e).__name__ == "HandleFrame"] == [
        "first",
        "second",
    ]
    assert shell.task_errors == ["ValueError"]
    assert CANARY not in caplog.text
    assert shell.running_threads == 0


# ------------------------------------------------------------------- timers


def test_thread_shell_a_timer_cancelled_while_its_fire_is_queued_is_never_fed() -> None:
    """Race: the timer thread pops a due timer and queues ``TimerFired`` while the drainer is
    still carrying out a batch whose later ``CancelTimer`` cancels it. Once that
    ``CancelTimer`` was carried out the core must never see the fire (docs/shells.md)."""
    holder: dict[str, ThreadRunnerShell] = {}

    def wait_for_queued_fire(cmd: Notify) -> None:
        shell = holder["shell"]
        deadline = time.monotonic() + 5
        while not shell._queue and time.monotonic() < deadline:
            time.sleep(0.001)

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "EndStart":
            return [
                StartTimer(timer_id=7, delay_ms=0),
                Notify(what="env-served", task_id="t"),  # blocks until the fire is queued
                CancelTimer(timer_id=7),
            ]
        return []

    rt = ScriptRuntime(script)
    ours, _peer = thread_memory_pair()
    shell = ThreadRunnerShell(rt, ours, notify=wait_for_queued_fire)
    holder["shell"] = shell
    with shell:
        shell.end_start(-1)
        time.sleep(0.2)
    fired = [e.timer_id for e in rt.events if type(e).__name__ == "TimerFired"]
    assert fired == []
    assert shell.running_threads == 0


def test_thread_shell_an_uncancelled_timer_is_fed_exactly_once() -> None:
    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "EndStart":
            return [StartTimer(timer_id=9, delay_ms=0)]
        return []

    rt = ScriptRuntime(script)
    ours, _peer = thread_memory_pair()
    with ThreadRunnerShell(rt, ours) as shell:
        shell.end_start(-1)
        _poll(lambda: any(type(e).__name__ == "TimerFired" for e in rt.events), step_s=0.005)
        time.sleep(0.1)
    assert [e.timer_id for e in rt.events if type(e).__name__ == "TimerFired"] == [9]


# ----------------------------------------------------------------- shutdown


class SlowTransport:
    """A blocking transport whose ``close`` takes ``close_s`` and whose ``send`` may block
    until closed (``block_send``) or forever (``stuck_send``)."""

    def __init__(
        self, *, close_s: float = 0.0, block_send: bool = False, stuck_send: bool = False
    ) -> None:
        self.close_s = close_s
        self.block_send = block_send
        self.stuck_send = stuck_send
        self.closing = threading.Event()
        self.closed = threading.Event()
        self.release = threading.Event()  # set by the test's teardown only
        self.sent: list[Any] = []

    def send(self, value: Any) -> None:
        if self.stuck_send:
            self.release.wait()
        elif self.block_send:
            self.closed.wait()
        self.sent.append(value)

    def receive(self, timeout_s: float | None = None) -> Any:
        if self.closed.wait(timeout_s):
            raise EOFError
        raise TimeoutError

    def close(self) -> None:
        self.closing.set()
        time.sleep(self.close_s)
        self.closed.set()


def test_thread_shell_concurrent_shutdowns_all_return_only_once_the_shell_stopped() -> None:
    rt = ScriptRuntime(_never)
    transport = SlowTransport(close_s=0.5)
    shell = ThreadRunnerShell(rt, transport)
    shell.__enter__()
    first = threading.Thread(target=shell.shutdown, kwargs={"timeout_s": 2.0})
    first.start()
    assert transport.closing.wait(5)
    # A second shutdown (another host thread, or ``__exit__``) while the first is stopping:
    # when it returns, the shell must really be stopped (no thread of it left).
    shell.shutdown(timeout_s=2.0)
    assert shell.running_threads == 0
    first.join(5)
    assert not first.is_alive()
    assert shell.running_threads == 0
    with pytest.raises(ShellClosedError):
        shell.begin_start("task-late", 1)


def test_thread_shell_shutdown_is_bounded_when_a_send_blocks_until_close() -> None:
    transport = SlowTransport(block_send=True)
    started = time.monotonic()
    with ThreadRunnerShell(_runtime(), transport) as shell:
        shell.begin_start("task-send", 1)  # its lease.request blocks in send
        time.sleep(0.05)
        shell.shutdown(timeout_s=0.5)
    assert time.monotonic() - started < 0.5 + 2.0 + 2.0 + 1.0
    assert shell.running_threads == 0
    assert shell.leaked_threads == 0


def test_thread_shell_shutdown_is_bounded_and_reports_a_send_stuck_forever() -> None:
    transport = SlowTransport(stuck_send=True)
    started = time.monotonic()
    try:
        with ThreadRunnerShell(_runtime(), transport) as shell:
            shell.begin_start("task-send", 1)  # its lease.request is stuck in send
            time.sleep(0.05)
            shell.shutdown(timeout_s=0.5)
        elapsed = time.monotonic() - started
        assert elapsed < 0.5 + 2.0 + 2.0 + 2.0 + 1.0
        # The stuck sender is reported, not hidden; nothing else is left.
        assert shell.leaked_threads == 1
        assert shell_threads().count("leasegate-send") >= 1
        with pytest.raises(ShellClosedError):
            shell.begin_start("task-late", 1)
    finally:
        transport.release.set()
    deadline = time.monotonic() + 5
    while shell.running_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shell.running_threads == 0


# ------------------------------------------------------------ I/O callbacks


def _reads_through_a_new_reader(event: Any) -> list[Any]:
    if type(event).__name__ == "EndStart":
        return [
            OpenReader(reader_id=1, assignment=None, region="eu-west-1", session=None),  # type: ignore[arg-type]
            ReadParameters(cmd_id=2, reader_id=1, selectors=("/p/a",)),
        ]
    return []


def _raising_factory(cmd: OpenReader) -> Any:
    raise RuntimeError(f"cannot build a client for {CANARY}")


def test_LR_026_thread_shell_a_raising_reader_factory_fails_the_read_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    rt = ScriptRuntime(_reads_through_a_new_reader)
    shell = _run_thread(
        rt,
        lambda: any(type(e).__name__ == "ReadFailed" for e in rt.events),
        reader_factory=_raising_factory,
    )
    failed = [e for e in rt.events if type(e).__name__ == "ReadFailed"]
    assert [(e.cmd_id, e.access_denied) for e in failed] == [(2, False)]
    assert shell.task_errors == ["RuntimeError"]
    assert shell.all_readers == []
    _assert_quiet(caplog, rt.events)
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_LR_026_async_shell_a_raising_reader_factory_fails_the_read_without_its_text(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rt = ScriptRuntime(_reads_through_a_new_reader)
    shell = await _run_async(
        rt,
        lambda: any(type(e).__name__ == "ReadFailed" for e in rt.events),
        reader_factory=_raising_factory,
    )
    failed = [e for e in rt.events if type(e).__name__ == "ReadFailed"]
    assert [(e.cmd_id, e.access_denied) for e in failed] == [(2, False)]
    assert shell.task_errors == ["RuntimeError"]
    _assert_quiet(caplog, rt.events)
    assert shell.running_tasks == 0


def _cleanup_on_close(event: Any) -> list[Any]:
    if type(event).__name__ == "CloseAssignment":
        return [ConsumerWork(cmd_id=5, consumer="engines", op="cleanup")]
    return []


@pytest.mark.anyio
async def test_async_shell_shutdown_is_bounded_with_stuck_work_and_wakes_the_close(
    anyio_backend: str,
) -> None:
    rt = ScriptRuntime(_cleanup_on_close, answer_shutdown=False)
    ours, _peer = memory_pair()
    stuck = anyio.Event()

    async def work(cmd: ConsumerWork) -> None:
        stuck.set()
        await anyio.sleep_forever()

    outcome: list[str] = []

    async def closer(shell: AsyncRunnerShell) -> None:
        try:
            await shell.close("task-stuck", 1)
            outcome.append("settled")
        except ShellClosedError:
            outcome.append("closed")

    started = time.monotonic()
    async with AsyncRunnerShell(rt, ours, work=work) as shell:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(closer, shell)
                await stuck.wait()
                await shell.shutdown(timeout_s=0.3)
    assert time.monotonic() - started < 4
    assert outcome == ["closed"]
    assert shell.running_tasks == 0


def test_thread_shell_notify_and_work_that_raise_leave_no_text_and_the_shell_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "EndStart" and event.start_id == -1:
            return [
                Notify(what="mcp-served", task_id="t"),
                ConsumerWork(cmd_id=11, consumer="engines", op="install"),
            ]
        return []

    def notify(cmd: Notify) -> None:
        raise RuntimeError(CANARY)

    def work(cmd: ConsumerWork) -> None:
        raise RuntimeError(CANARY)

    rt = ScriptRuntime(script)
    ours, _peer = thread_memory_pair()
    with ThreadRunnerShell(rt, ours, notify=notify, work=work) as shell:
        shell.end_start(-1)
        _poll(lambda: any(type(e).__name__ == "WorkDone" for e in rt.events))
        shell.end_start(-2)  # the shell still feeds events
    done = [e for e in rt.events if type(e).__name__ == "WorkDone"]
    assert [(e.cmd_id, e.error.message if e.error else None) for e in done] == [
        (11, "a credential consumer failed")
    ]
    assert [type(e).__name__ for e in rt.events].count("EndStart") == 2
    _assert_quiet(caplog, rt.events)
    assert "served-change callback failed" in caplog.text
    assert shell.running_threads == 0


# ------------------------------------------------------------------ readers


class FakeReader:
    """A reader double: counts builds, records ``seal``; its reads fail."""

    def __init__(self) -> None:
        self.sealed = False

    def read_blocking(self, names: Any) -> Any:
        raise RuntimeError("no reads in this test")

    def seal(self) -> None:
        self.sealed = True


class FeedOnCloseTransport(SlowTransport):
    """Feeds the shell an event while the shutdown is closing the transport (after the readers
    were sealed, before the I/O pool stops): a grant landing mid-shutdown."""

    def __init__(self) -> None:
        super().__init__()
        self.shell: ThreadRunnerShell | None = None

    def close(self) -> None:
        assert self.shell is not None
        self.shell.end_start(-1)
        time.sleep(0.2)  # let a submitted read build its reader
        super().close()


def test_LR_026_thread_shell_a_reader_opened_during_shutdown_is_never_built_or_left_open() -> None:
    built: list[FakeReader] = []

    def factory(cmd: OpenReader) -> Any:
        reader = FakeReader()
        built.append(reader)
        return reader

    rt = ScriptRuntime(_reads_through_a_new_reader)
    transport = FeedOnCloseTransport()
    shell = ThreadRunnerShell(rt, transport, reader_factory=factory)
    transport.shell = shell
    with shell:
        pass
    assert [type(e).__name__ for e in rt.events].count("EndStart") == 1
    assert all(r.sealed for r in built), "a reader built during shutdown was never sealed"
    assert shell.readers == {}
    assert shell.running_threads == 0


class ClosingEnd:
    """An async frame end whose ``aclose`` takes a while and records that it finished."""

    def __init__(self, end: Any) -> None:
        self.end = end
        self.closed = False

    async def send(self, value: Any) -> None:
        await self.end.send(value)

    async def receive(self) -> Any:
        return await self.end.receive()

    async def aclose(self) -> None:
        await anyio.sleep(0.2)
        await self.end.aclose()
        self.closed = True


@pytest.mark.anyio
async def test_async_shell_concurrent_shutdowns_never_raise_and_return_once_stopped(
    anyio_backend: str,
) -> None:
    rt = ScriptRuntime(_never, answer_shutdown=False)  # each shutdown's bound elapses
    ours, _peer = memory_pair()
    errors: list[str] = []
    returned_open: list[bool] = []

    async def shut(shell: AsyncRunnerShell, timeout_s: float) -> None:
        try:
            await shell.shutdown(timeout_s=timeout_s)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(type(e).__name__)
        returned_open.append(not transport.closed)

    transport = ClosingEnd(ours)
    async with AsyncRunnerShell(rt, transport) as shell:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(shut, shell, 0.2)
                tg.start_soon(shut, shell, 0.5)
                tg.start_soon(shut, shell, 0.5)
    assert errors == []
    assert returned_open == [False, False, False]
    assert shell.running_tasks == 0


class _QueryingRecorder:
    """A recorder that (wrongly) queries the runtime through the shell."""

    def __init__(self) -> None:
        self.shell: ThreadRunnerShell | None = None
        self.outcomes: list[str] = []

    def record(self, event: Any, commands: Any) -> None:
        assert self.shell is not None
        try:
            self.shell.query(lambda rt: len(rt.events))
            self.outcomes.append("ran")
        except RuntimeError:
            self.outcomes.append("refused")


def test_thread_shell_query_from_inside_handle_is_refused_not_a_deadlock() -> None:
    rt = ScriptRuntime(_never)
    ours, _peer = thread_memory_pair()
    rec = _QueryingRecorder()
    shell = ThreadRunnerShell(rt, ours, recorder=rec)
    rec.shell = shell
    with shell:
        t = threading.Thread(target=shell.end_start, args=(-1,), daemon=True)
        t.start()
        t.join(5)
        assert not t.is_alive(), "query from the recorder deadlocked the shell"
        # From a host thread, query still works.
        assert shell.query(lambda r: len(r.events)) == 1
    assert rec.outcomes[0] == "refused"
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_async_shell_left_by_an_exception_wakes_a_waiter_in_another_task_group(
    anyio_backend: str,
) -> None:
    rt = ScriptRuntime(_never)
    ours, _peer = memory_pair()
    outcome: list[str] = []

    with anyio.fail_after(5):
        async with anyio.create_task_group() as outer:
            try:
                async with AsyncRunnerShell(rt, ours) as shell:
                    outer.start_soon(_wait_for_launch, shell, outcome)
                    await anyio.wait_all_tasks_blocked()
                    raise ValueError("host failure")
            except* ValueError:
                pass
    assert outcome == ["closed"]
    assert shell.running_tasks == 0
    with pytest.raises(ShellClosedError):
        await shell.begin_start("task-late", 1)


# ------------------------------------------------------------------ setups


def _setups(event: Any) -> list[Any]:
    if type(event).__name__ == "EndStart" and event.start_id == -1:
        return [
            RunSetup(cmd_id=21, task_id="t-raise", run_epoch=1, recovery_id=-5),
            RunSetup(cmd_id=22, task_id="t-fail", run_epoch=1, recovery_id=-6),
            RunSetup(cmd_id=23, task_id="t-ok", run_epoch=1, recovery_id=-7),
        ]
    return []


_SETUP_OWN_FAILURE = CredentialFailure(message="setup refused")


def _setup_outcome(cmd: RunSetup) -> CredentialFailure | None:
    if cmd.task_id == "t-raise":
        raise RuntimeError(CANARY)
    return _SETUP_OWN_FAILURE if cmd.task_id == "t-fail" else None


def _done_by_cmd(events: list[Any]) -> dict[int, str | None]:
    return {
        e.cmd_id: (e.error.message if e.error else None)
        for e in events
        if type(e).__name__ == "WorkDone"
    }


_EXPECTED_SETUPS = {21: "the recovered setup failed", 22: "setup refused", 23: None}


def test_RT_112_thread_shell_setup_outcomes_become_WorkDone_without_exception_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    rt = ScriptRuntime(_setups)
    shell = _run_thread(rt, lambda: len(_done_by_cmd(rt.events)) >= 3, setup=_setup_outcome)
    assert _done_by_cmd(rt.events) == _EXPECTED_SETUPS
    _assert_quiet(caplog, rt.events)
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_RT_112_async_shell_setup_outcomes_become_WorkDone_without_exception_text(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rt = ScriptRuntime(_setups)

    async def setup(cmd: RunSetup) -> CredentialFailure | None:
        await anyio.sleep(0)
        return _setup_outcome(cmd)

    shell = await _run_async(rt, lambda: len(_done_by_cmd(rt.events)) >= 3, setup=setup)
    assert _done_by_cmd(rt.events) == _EXPECTED_SETUPS
    _assert_quiet(caplog, rt.events)
    assert shell.running_tasks == 0


# ------------------------------------------------------------ hostile frames

#: Not JSON text: dropped and counted by the transport.
_NOT_JSON: tuple[object, ...] = (
    b'{"kind":"lease.grant.v1"}',  # binary
    "{broken",
    "[" * 50_000 + "]" * 50_000,  # nesting deeper than any parser stack
    '{"a":1} trailing',
    "x" * (2 * 1024 * 1024),  # 2 MiB of garbage
)
#: Valid JSON of the wrong shape, or for other tasks/boots, holding a canary secret.
_WRONG_SHAPE: tuple[object, ...] = (
    [],
    None,
    "text",
    1e308,
    {"kind": "lease.grant.v1"},
    {"kind": "lease.grant.v1", "taskId": "other", "runEpoch": 1, "bootId": "not-ours"},
    {
        "kind": "lease.grant.v1",
        "taskId": "task-h",
        "runEpoch": 1,
        "sessions": [{"secretAccessKey": CANARY, "sessionToken": CANARY}],
    },
    {"kind": "credential.changed", "taskId": "task-h", "values": {"K": CANARY}},
    {"kind": "lease.deny", "taskId": "task-h", "runEpoch": "1"},
    {"kind": {"nested": [CANARY]}},
    {"kind": "x" * 100_000},
)


def test_thread_shell_hostile_frames_are_dropped_or_refused_never_fatal_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    ours, peer = thread_memory_pair(max_buffer=256)
    with ThreadRunnerShell(_runtime(), ours) as shell:
        start_id = shell.begin_start("task-h", 1)
        assert peer.receive(5)["kind"] == "lease.request"
        for text in _NOT_JSON:
            peer.send_text(text)
        for value in _WRONG_SHAPE:
            peer.send(value)
        deadline = time.monotonic() + 10
        while shell.dropped < len(_NOT_JSON):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # Still serving: the start waits for a real grant, a new start is answered.
        with pytest.raises(TimeoutError):
            shell.wait_launch_ready(start_id, timeout_s=0.2)
        assert shell._pending == {}  # a timed-out wait leaves no waiter behind
        assert shell.begin_start("task-h2", 1) < 0
    assert shell.dropped == len(_NOT_JSON)
    assert shell.task_errors == []
    assert CANARY not in caplog.text
    assert shell.running_threads == 0


@pytest.mark.anyio
async def test_async_shell_hostile_frames_are_dropped_or_refused_never_fatal_never_logged(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ours, peer = memory_pair(max_buffer=256)
    async with AsyncRunnerShell(_runtime(), ours) as shell:
        start_id = await shell.begin_start("task-h", 1)
        assert (await peer.receive())["kind"] == "lease.request"
        for text in _NOT_JSON:
            await peer.send_text(text)
        for value in _WRONG_SHAPE:
            await peer.send(value)
        with anyio.fail_after(10):
            while shell.dropped < len(_NOT_JSON):
                await anyio.sleep(0.01)
        with anyio.move_on_after(0.2) as scope:
            await shell.wait_launch_ready(start_id)
        assert scope.cancelled_caught
        assert shell._pending == {}  # a cancelled wait leaves no waiter behind
        assert await shell.begin_start("task-h2", 1) < 0
    assert shell.dropped == len(_NOT_JSON)
    assert shell.task_errors == []
    assert CANARY not in caplog.text
    assert shell.running_tasks == 0


# --------------------------------------------------------------- host races


def test_thread_shell_host_calls_racing_from_many_threads_and_a_shutdown_never_hang() -> None:
    rt = _runtime("breaker-race")
    inside = threading.Lock()
    overlap: list[bool] = []
    real = rt.handle

    def guarded(event: Any) -> Any:
        if not inside.acquire(blocking=False):
            overlap.append(True)
            inside.acquire()
        try:
            return real(event)
        finally:
            inside.release()

    rt.handle = guarded  # type: ignore[method-assign]
    ours, _peer = thread_memory_pair(max_buffer=1024)
    shell = ThreadRunnerShell(rt, ours)
    unexpected: list[str] = []
    outcomes: list[str] = []

    def host(i: int) -> None:
        for k in range(8):
            task = f"task-{i % 3}"
            try:
                if k == 5 and i == 3:
                    shell.shutdown(timeout_s=3)
                elif k % 4 == 0:
                    shell.begin_start(task, k + 1)
                elif k % 4 == 1:
                    shell.close(task, k, timeout_s=10)
                elif k % 4 == 2:
                    shell.abandon_start(shell.begin_start(task, 100 + k))
                else:
                    start = shell.begin_start(task, 200 + k)
                    with contextlib.suppress(TimeoutError):
                        shell.wait_launch_ready(start, timeout_s=0.02)
                outcomes.append("ok")
            except (CallFailed, ShellClosedError) as e:
                outcomes.append(type(e).__name__)
            except Exception as e:  # noqa: BLE001 - the assertion reports it
                unexpected.append(type(e).__name__)

    with shell:
        threads = [threading.Thread(target=host, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert not any(t.is_alive() for t in threads), "a host call hung"
    assert unexpected == []
    assert len(outcomes) == 64
    assert "ShellClosedError" in outcomes  # calls after the mid-run shutdown were refused
    assert overlap == []
    assert shell._pending == {}
    assert shell.running_threads == 0


# ------------------------------------------------------- WebSocket transports


@contextlib.contextmanager
def _serving(handler: Callable[[ServerConnection], None]) -> Iterator[int]:
    """A loopback WebSocket server running ``handler`` per connection on a daemon thread;
    yields its port, shuts it down (joining the thread for at most 5 s) on exit."""
    server = ws_serve(handler, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.socket.getsockname()[1]
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture
def hostile_bridge() -> Iterator[str]:
    """A loopback WebSocket bridge: connection 1 sends hostile messages (binary, broken,
    deep, a frame over the client's 64 KiB limit), connection 2 a good frame."""
    sessions: list[int] = []

    def handler(ws: ServerConnection) -> None:
        sessions.append(1)
        if len(sessions) == 1:
            ws.send(b"\x00\xff binary")
            ws.send("{broken")
            ws.send("[" * 20_000 + "]" * 20_000)
            ws.send('{"kind":"ok","n":1}')
            ws.send('{"pad":"' + "x" * 100_000 + '"}')  # over max_frame_bytes: 1009, reconnect
            with contextlib.suppress(Exception):
                ws.recv(2)
            return
        ws.send('{"kind":"ok","n":2}')
        with contextlib.suppress(Exception):
            ws.recv(5)

    with _serving(handler) as port:
        yield f"ws://127.0.0.1:{port}"


_GOOD = [Reauthenticated(1), {"kind": "ok", "n": 1}, Reauthenticated(2), {"kind": "ok", "n": 2}]


def test_thread_websocket_client_survives_hostile_messages_and_oversized_frames(
    hostile_bridge: str,
) -> None:
    client = ThreadWebSocketClient(
        hostile_bridge, backoff=Backoff(base_ms=10, max_ms=20), max_frame_bytes=65_536
    )
    got: list[Any] = []
    with client:
        deadline = time.monotonic() + 10
        while len(got) < len(_GOOD) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                got.append(client.receive(0.1))
    assert got == _GOOD
    assert client.dropped == 3
    assert client.errors == []
    assert not client.alive


@pytest.mark.anyio
async def test_anyio_websocket_transport_survives_hostile_messages_and_oversized_frames(
    anyio_backend: str, hostile_bridge: str
) -> None:
    got: list[Any] = []
    async with AnyioWebSocketTransport(
        hostile_bridge, backoff=Backoff(base_ms=10, max_ms=20), max_frame_bytes=65_536
    ) as transport:
        with anyio.fail_after(10):
            while len(got) < len(_GOOD):
                got.append(await transport.receive())
    assert got == _GOOD
    assert transport.dropped == 3


_SECRET_URLS = (
    f"ws://bridge:{CANARY}@127.0.0.1:9/path?token={CANARY}",
    f"wss://127.0.0.1/{'p'}?access_token={CANARY}",
)


@pytest.mark.parametrize("url", _SECRET_URLS)
def test_websocket_clients_never_show_a_url_credential_in_a_repr(url: str) -> None:
    clients = [
        ThreadWebSocketClient(url),
        AnyioWebSocketClient(url, on_frame=lambda v: None),
        WebSocketClient(url, on_frame=lambda v: None),
        AnyioWebSocketTransport(url),
    ]
    for client in clients:
        text = repr(client)
        assert CANARY not in text
        assert "127.0.0.1" in text


def test_websocket_clients_reject_a_bad_url_without_its_credential() -> None:
    bad = f"https://user:{CANARY}@bridge.example/?token={CANARY}"
    for make in (
        lambda: ThreadWebSocketClient(bad),
        lambda: AnyioWebSocketClient(bad, on_frame=lambda v: None),
        lambda: AnyioWebSocketTransport(bad),
    ):
        with pytest.raises(InvalidURI) as info:
            make()
        assert CANARY not in str(info.value)
        assert CANARY not in repr(info.value)
        assert "bridge.example" in str(info.value)


def test_websocket_client_run_with_a_bad_url_raises_without_its_credential() -> None:
    client = WebSocketClient(f"https://bridge.example/?token={CANARY}", on_frame=lambda v: None)
    with pytest.raises(InvalidURI) as info:
        anyio.run(client.run)
    assert CANARY not in str(info.value)
    assert CANARY not in repr(info.value)


@pytest.fixture
def echo_bridge() -> Iterator[str]:
    """A loopback WebSocket bridge that sends one frame to each connection."""

    def handler(ws: ServerConnection) -> None:
        ws.send('{"kind":"hello"}')
        with contextlib.suppress(Exception):
            ws.recv(2)

    with _serving(handler) as port:
        yield f"ws://user:{CANARY}@127.0.0.1:{port}/b?token={CANARY}"


_SECRET_HEADERS = {"Authorization": Secret(f"Bearer {CANARY}")}


def _client_log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    # The test bridge (websockets' server) logs the request it received; only the
    # client side (this process's leasegate code and the websockets client) counts.
    return [r.getMessage() for r in caplog.records if not r.name.startswith("websockets.server")]


def test_thread_websocket_client_handshake_never_logs_its_token_at_debug(
    echo_bridge: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with ThreadWebSocketClient(echo_bridge, headers=_SECRET_HEADERS) as client:
        assert client.receive(5) == Reauthenticated(1)
        assert client.receive(5) == {"kind": "hello"}
    lines = _client_log_lines(caplog)
    assert not [line for line in lines if CANARY in line]


@pytest.mark.anyio
async def test_anyio_websocket_client_handshake_never_logs_its_token_at_debug(
    anyio_backend: str, echo_bridge: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with AnyioWebSocketTransport(echo_bridge, headers=_SECRET_HEADERS) as transport:
        with anyio.fail_after(5):
            assert await transport.receive() == Reauthenticated(1)
            assert await transport.receive() == {"kind": "hello"}
    lines = _client_log_lines(caplog)
    assert not [line for line in lines if CANARY in line]


def test_asyncio_websocket_client_handshake_never_logs_its_token_at_debug(
    echo_bridge: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    frames: list[Any] = []
    client: WebSocketClient

    def on_frame(value: Any) -> None:
        frames.append(value)
        asyncio.get_running_loop().create_task(client.close())

    client = WebSocketClient(echo_bridge, on_frame=on_frame, headers=_SECRET_HEADERS)

    async def main() -> None:
        with anyio.fail_after(5):
            await client.run()

    anyio.run(main)
    assert frames == [{"kind": "hello"}]
    lines = _client_log_lines(caplog)
    assert not [line for line in lines if CANARY in line]


# ------------------------------------------------- reported to the lead (ssm.py)


@pytest.mark.integration
def test_LR_026_ssm_reader_never_logs_its_session_token_or_values_at_debug(
    moto_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With the host's root logger at DEBUG, botocore's own loggers
    (``botocore.auth`` canonical request, ``botocore.endpoint`` prepared request,
    ``botocore.parsers`` response body) write ``x-amz-security-token`` and the
    decrypted ``GetParameters`` values. Fixed in ``leasegate.shells.ssm``: the
    AWS stack's DEBUG records made inside a reader's calls are dropped."""
    name = "/b2/debug-leak"
    moto_server.put_secure(name, f"{CANARY}-value")
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    reader = SsmReader(
        SessionCredentials(
            access_key_id="AKIDB2TEST",
            secret_access_key=Secret(f"{CANARY}-secret"),
            session_token=Secret(f"{CANARY}-token"),
            region="us-east-1",
        ),
        endpoint_url=moto_server.url,
    )
    try:
        result = reader.read_blocking([name])
    finally:
        reader.seal()
    assert type(result).__name__ == "ReadOk"
    client_lines = [
        r.getMessage() for r in caplog.records if not r.name.startswith(("werkzeug", "moto"))
    ]
    assert not [line for line in client_lines if CANARY in line]


# ----------------------------------------------------------------- ordering


def _ordering_script(order: list[str]) -> Callable[[Any], list[Any]]:
    def script(event: Any) -> list[Any]:
        if type(event).__name__ == "EndStart":
            order.append(f"handle{event.start_id}")
            if event.start_id == -1:
                return [
                    Notify(what="mcp-served", task_id="t"),
                    Notify(what="env-served", task_id="t"),
                    Failed(call_id=999, error=CredentialFailure(message="late")),
                ]
        return []

    return script


def test_thread_shell_an_event_fed_by_a_callback_waits_for_the_whole_batch() -> None:
    order: list[str] = []
    holder: dict[str, ThreadRunnerShell] = {}

    def notify(cmd: Notify) -> None:
        order.append(f"notify-{cmd.what}")
        if cmd.what == "mcp-served":
            holder["shell"].end_start(-2)  # same task, fed mid-batch: must wait

    rt = ScriptRuntime(_ordering_script(order))
    ours, _peer = thread_memory_pair()
    shell = ThreadRunnerShell(rt, ours, notify=notify)
    holder["shell"] = shell
    with shell:
        shell.end_start(-1)
    assert order == ["handle-1", "notify-mcp-served", "notify-env-served", "handle-2"]
    assert shell.task_errors == []


@pytest.mark.anyio
async def test_async_shell_an_event_fed_by_a_callback_waits_for_the_whole_batch(
    anyio_backend: str,
) -> None:
    order: list[str] = []
    holder: dict[str, AsyncRunnerShell] = {}

    def notify(cmd: Notify) -> None:
        order.append(f"notify-{cmd.what}")
        if cmd.what == "mcp-served":
            holder["shell"].end_start(-2)

    rt = ScriptRuntime(_ordering_script(order))
    ours, _peer = memory_pair()
    async with AsyncRunnerShell(rt, ours, notify=notify) as shell:
        holder["shell"] = shell
        shell.end_start(-1)
    assert order == ["handle-1", "notify-mcp-served", "notify-env-served", "handle-2"]
    assert shell.task_errors == []


def test_thread_shell_shutdown_wakes_a_sender_blocked_on_a_full_memory_pair() -> None:
    # The peer never reads: with one slot, the second frame blocks the sender in send.
    ours, peer = thread_memory_pair(max_buffer=1)
    started = time.monotonic()
    with ThreadRunnerShell(_runtime(), ours) as shell:
        for i in range(3):
            shell.begin_start(f"task-full-{i}", 1)
        time.sleep(0.1)
        shell.shutdown(timeout_s=0.5)
    assert time.monotonic() - started < 0.5 + 2.0 + 2.0 + 1.0
    assert shell.leaked_threads == 0
    assert shell.running_threads == 0
    peer.close()


def test_thread_frame_end_close_wakes_a_blocked_send_with_EOFError() -> None:
    ours, _peer = thread_memory_pair(max_buffer=1)
    ours.send({"n": 1})
    outcome: list[str] = []

    def sender() -> None:
        try:
            ours.send({"n": 2})
            outcome.append("sent")
        except EOFError:
            outcome.append("EOFError")

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    time.sleep(0.05)
    ours.close()
    t.join(2)
    assert not t.is_alive()
    assert outcome == ["EOFError"]


@contextlib.contextmanager
def _silent_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """A loopback TCP listener that accepts one connection and then says nothing.

    Yields ``(port, accepted)``: ``accepted`` gets the accepted socket. On exit the
    accepted sockets and the listener are closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        for s in accepted:
            s.close()
        listener.close()


def test_thread_websocket_client_close_aborts_a_handshake_the_bridge_never_answers() -> None:
    # A bridge (or proxy) that accepts TCP and then says nothing: close() must not wait
    # for the 10 s handshake timeout, and the client's thread must be gone when it returns.
    with _silent_listener() as (port, accepted):
        client = ThreadWebSocketClient(f"ws://127.0.0.1:{port}", open_timeout_s=10)
        client.start()
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert accepted, "the client never connected"
        started = time.monotonic()
        client.close(timeout_s=5)
        assert time.monotonic() - started < 1.5
        assert not client.alive


@pytest.mark.anyio
async def test_anyio_websocket_transport_close_aborts_a_handshake_the_bridge_never_answers(
    anyio_backend: str,
) -> None:
    with _silent_listener() as (port, accepted):
        with anyio.fail_after(8):
            async with AnyioWebSocketTransport(
                f"ws://127.0.0.1:{port}", connect_timeout_s=10
            ) as transport:
                await _apoll(lambda: bool(accepted))
                started = time.monotonic()
            elapsed = time.monotonic() - started
        assert elapsed < 1.5
        assert transport.connections == 0


# --------------------------------------------------------------------- leaks


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_thread_shell_over_websocket_leaves_no_thread_or_socket_after_the_with_blocks(
    echo_bridge: str,
) -> None:
    # Warm-up run: lazily opened process-wide descriptors are not a leak.
    def one_run() -> ThreadRunnerShell:
        with (
            ThreadWebSocketClient(echo_bridge, backoff=Backoff(base_ms=10, max_ms=20)) as ws,
            ThreadRunnerShell(_runtime("leak"), ws) as shell,
        ):
            assert ws.wait_connected(5)
            shell.begin_start("task-leak", 1)
            time.sleep(0.05)
        assert not ws.alive
        return shell

    one_run()
    before = _open_fds()
    shells = [one_run() for _ in range(3)]
    time.sleep(0.1)
    assert _open_fds() <= before
    assert all(s.running_threads == 0 and s.leaked_threads == 0 for s in shells)


@pytest.mark.anyio
async def test_async_shell_over_websocket_leaves_no_task_or_socket_after_the_with_blocks(
    anyio_backend: str, echo_bridge: str
) -> None:
    async def one_run() -> AsyncRunnerShell:
        async with AnyioWebSocketTransport(
            echo_bridge, backoff=Backoff(base_ms=10, max_ms=20)
        ) as transport:
            with anyio.fail_after(5):
                await transport.wait_connected()
            async with AsyncRunnerShell(_runtime("leak"), transport) as shell:
                await shell.begin_start("task-leak", 1)
                await anyio.sleep(0.05)
        return shell

    await one_run()
    before = _open_fds()
    shells = [await one_run() for _ in range(3)]
    await anyio.sleep(0.1)
    assert _open_fds() <= before
    assert all(s.running_tasks == 0 for s in shells)


# ----------------------------------------------------------- clock order


def _backwards_clock() -> Callable[[], int]:
    """A clock that steps back by 5 ms on every other reading."""
    readings = iter(x for n in range(1000) for x in (1_000 + 10 * n, 995 + 10 * n))
    return lambda: next(readings)


def test_thread_shell_core_never_sees_time_go_back() -> None:
    # Events are stamped when made and handled in queue order; the shell
    # raises a late stamp to the latest time handled (seen in a trace).
    rt = ScriptRuntime(_never)
    ours, _peer = thread_memory_pair()
    with ThreadRunnerShell(rt, ours, clock_ms=_backwards_clock()) as shell:
        for i in range(6):
            shell.end_start(-1 - i)
    stamps = [e.now_ms for e in rt.events]
    assert len(stamps) >= 6
    assert stamps == sorted(stamps)


@pytest.mark.anyio
async def test_async_shell_core_never_sees_time_go_back(anyio_backend: str) -> None:
    rt = ScriptRuntime(_never)
    ours, _peer = memory_pair()
    async with AsyncRunnerShell(rt, ours, clock_ms=_backwards_clock()) as shell:
        for i in range(6):
            shell.end_start(-1 - i)
    stamps = [e.now_ms for e in rt.events]
    assert len(stamps) >= 6
    assert stamps == sorted(stamps)
