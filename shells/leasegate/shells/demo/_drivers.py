"""The demo's shells behind one async interface: the async shell (asyncio, trio) and threads.

The walk (:mod:`._walk`) is written once, as anyio code; a driver runs one
runner "process" (a runtime, its consumers and journal) on a shell and
hands the walk a :class:`ShellHandle`:

* :class:`AsyncDriver`: :class:`~leasegate.shells.async_shell.AsyncRunnerShell`
  on the walk's own event loop (asyncio or trio), talking to the reference
  cloud over a :class:`~leasegate.testing.MemoryCloudLink`.
* :class:`ThreadDriver`: :class:`~leasegate.shells.thread_shell.ThreadRunnerShell`
  (its own threads) on the blocking end of a ``MemoryCloudLink``; the walk's
  loop (asyncio) makes the shell's blocking calls in worker threads.

A *crash* (:class:`SimulatedCrash` raised inside :meth:`Driver.running`)
leaves the shell the way a killed process would: no runtime shutdown, no
drain, no cleanup; only the shell's own tasks or threads are stopped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from leasegate.core.registry import OpenReader
from leasegate.core.runtime import ConsumerWork, CredentialFailure, CredentialRuntime
from leasegate.shells._recording import CoreRecorder
from leasegate.shells.ssm import SessionCredentials, SsmReader
from leasegate.shells.status import RunnerStatus
from leasegate.shells.store import RuntimeJournal
from leasegate.testing import MemoryCloudLink, ReferenceCloud

__all__ = [
    "AsyncDriver",
    "Driver",
    "RunnerParts",
    "ShellHandle",
    "SimulatedCrash",
    "ThreadDriver",
    "WorkTrap",
]

T = TypeVar("T")

#: Longest a single host call of the walk may take, in seconds.
CALL_TIMEOUT_S = 30.0


class SimulatedCrash(Exception):  # noqa: N818 - reads as the event it simulates
    """Raised inside :meth:`Driver.running` to kill the runner without a shutdown."""


class WorkTrap:
    """Holds every cleanup-phase ``ConsumerWork`` once armed (a crash point).

    While armed, each ``ConsumerWork`` that is not an ``install`` is held:
    :attr:`hit` is set (from any thread) and the work does nothing and never
    finishes until :meth:`release` (then it fails) — the runner "dies" with
    its cleanup owed and its files on disk.
    """

    def __init__(self) -> None:
        self.armed = False
        self.hit = threading.Event()
        #: ``(consumer, op)`` of every work held, in arrival order.
        self.held: list[tuple[str, str]] = []
        self._release = threading.Event()

    def catches(self, cmd: ConsumerWork) -> bool:
        """Whether ``cmd`` is to be held (and mark the trap hit if so)."""
        if not self.armed or cmd.op == "install":
            return False
        self.held.append((cmd.consumer, cmd.op))
        self.hit.set()
        return True

    def wait_released(self) -> None:
        """Block the calling worker thread until :meth:`release`."""
        self._release.wait()

    def release(self) -> None:
        """Let a held worker return (its completion reaches no live shell)."""
        self._release.set()


class RunnerParts(Protocol):
    """What a driver needs of one runner "process" (see ``_walk.Runner``)."""

    runtime: CredentialRuntime
    journal: RuntimeJournal
    recorder: CoreRecorder | None
    trap: WorkTrap
    opened: list[OpenReader]

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``ConsumerWork`` blocking."""

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``ConsumerWork`` (async shell)."""


class ShellHandle(Protocol):
    """The host calls the walk makes, as coroutines, on either shell."""

    async def begin_start(self, task_id: str, run_epoch: int) -> int:
        """``BeginStart``: the start id."""

    async def wait_launch_ready(self, start_id: int) -> Any:
        """``AwaitLaunchReady``: the ``TaskView``."""

    async def end_start(self, start_id: int) -> None:
        """``EndStart``."""

    async def close(self, task_id: str, run_epoch: int, reason: str) -> None:
        """``CloseAssignment``; returns once settled."""

    async def recover(self) -> None:
        """``Recover`` with the durable journal's rows."""

    async def shutdown(self) -> None:
        """``RuntimeShutdown`` then stop the shell."""

    def query(self, fn: Callable[[CredentialRuntime], T]) -> T:
        """``fn(runtime)`` where reading the runtime is safe."""

    def status(self) -> RunnerStatus:
        """The shell's ``status()`` (typed, value-free)."""

    def facts(self) -> dict[str, Any]:
        """Shell facts after it ended: tasks/threads left, errors, readers still open."""

    @property
    def work_log(self) -> list[tuple[str, str]]:
        """``(consumer, op)`` of every ``ConsumerWork`` served, in order."""


class Driver(Protocol):
    """Runs one runner on a shell for the duration of an ``async with``."""

    name: str

    def running(self, parts: RunnerParts) -> contextlib.AbstractAsyncContextManager[ShellHandle]:
        """Enter: a running shell; :class:`SimulatedCrash` inside kills it."""


def _reader_factory(
    endpoint_url: str, opened: list[OpenReader]
) -> Callable[[OpenReader], SsmReader]:
    def factory(cmd: OpenReader) -> SsmReader:
        opened.append(cmd)
        return SsmReader(
            SessionCredentials.from_lease(cmd.session, cmd.region),
            endpoint_url=endpoint_url,
            max_backoff_s=0.2,
        )

    return factory


# ---------------------------------------------------------------------- async


class _AsyncHandle:
    def __init__(self, shell: Any) -> None:
        self.shell = shell

    async def begin_start(self, task_id: str, run_epoch: int) -> int:
        with anyio.fail_after(CALL_TIMEOUT_S):
            return int(await self.shell.begin_start(task_id, run_epoch))

    async def wait_launch_ready(self, start_id: int) -> Any:
        with anyio.fail_after(CALL_TIMEOUT_S):
            return await self.shell.wait_launch_ready(start_id)

    async def end_start(self, start_id: int) -> None:
        self.shell.end_start(start_id)

    async def close(self, task_id: str, run_epoch: int, reason: str) -> None:
        with anyio.fail_after(CALL_TIMEOUT_S):
            await self.shell.close(task_id, run_epoch, reason)

    async def recover(self) -> None:
        with anyio.fail_after(CALL_TIMEOUT_S):
            await self.shell.recover()

    async def shutdown(self) -> None:
        await self.shell.shutdown()

    def query(self, fn: Callable[[CredentialRuntime], T]) -> T:
        return fn(self.shell.runtime)

    def status(self) -> RunnerStatus:
        result: RunnerStatus = self.shell.status()
        return result

    def facts(self) -> dict[str, Any]:
        return {
            "left": self.shell.running_tasks,
            "errors": list(self.shell.task_errors),
            "open_readers": sum(not r.closed for r in self.shell.all_readers),
            "readers": len(self.shell.all_readers),
        }

    @property
    def work_log(self) -> list[tuple[str, str]]:
        return list(self.shell.work_log)


class AsyncDriver:
    """:class:`~leasegate.shells.async_shell.AsyncRunnerShell` on the walk's loop.

    Args:
        backend: ``"asyncio"`` or ``"trio"`` (the loop the walk runs on).
        cloud: the reference cloud (reached over a ``MemoryCloudLink``).
        endpoint_url: the SSM endpoint of every lease reader.
    """

    def __init__(self, backend: str, cloud: ReferenceCloud, endpoint_url: str) -> None:
        self.name = backend
        self.backend = backend
        self._cloud = cloud
        self._url = endpoint_url

    @contextlib.asynccontextmanager
    async def running(self, parts: RunnerParts) -> AsyncIterator[ShellHandle]:
        """Run ``parts`` on an ``AsyncRunnerShell`` until the block ends.

        Leaving normally shuts the runtime down; :class:`SimulatedCrash`
        stops the shell's tasks without a shutdown and is swallowed; any
        other exception propagates.
        """
        from leasegate.shells.async_shell import AsyncRunnerShell

        link = MemoryCloudLink(self._cloud)
        transport = link.async_end()
        shell = AsyncRunnerShell(
            parts.runtime,
            transport,
            reader_factory=_reader_factory(self._url, parts.opened),
            work=parts.work,
            journal=parts.journal,
            recorder=parts.recorder,
        )
        async with anyio.create_task_group() as tg:
            try:
                async with shell:
                    try:
                        yield _AsyncHandle(shell)
                    except* SimulatedCrash:
                        # A killed process: no drain, no cleanup on the way out.
                        await shell.shutdown(drain=False)
            finally:
                parts.trap.release()
                link.close()
                tg.cancel_scope.cancel()


# ---------------------------------------------------------------------- threads


class _ThreadHandle:
    def __init__(self, shell: Any) -> None:
        self.shell = shell

    async def _run(self, fn: Callable[[], T]) -> T:
        with anyio.fail_after(CALL_TIMEOUT_S + 5):
            return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)

    async def begin_start(self, task_id: str, run_epoch: int) -> int:
        return int(await self._run(lambda: self.shell.begin_start(task_id, run_epoch)))

    async def wait_launch_ready(self, start_id: int) -> Any:
        return await self._run(lambda: self.shell.wait_launch_ready(start_id, CALL_TIMEOUT_S))

    async def end_start(self, start_id: int) -> None:
        await self._run(lambda: self.shell.end_start(start_id))

    async def close(self, task_id: str, run_epoch: int, reason: str) -> None:
        await self._run(lambda: self.shell.close(task_id, run_epoch, reason, CALL_TIMEOUT_S))

    async def recover(self) -> None:
        await self._run(self.shell.recover)

    async def shutdown(self) -> None:
        await self._run(self.shell.shutdown)

    def query(self, fn: Callable[[CredentialRuntime], T]) -> T:
        result: T = self.shell.query(fn)
        return result

    def status(self) -> RunnerStatus:
        result: RunnerStatus = self.shell.status()
        return result

    def facts(self) -> dict[str, Any]:
        return {
            "left": self.shell.running_threads,
            "errors": list(self.shell.task_errors),
            "open_readers": sum(not r.closed for r in self.shell.all_readers),
            "readers": len(self.shell.all_readers),
        }

    @property
    def work_log(self) -> list[tuple[str, str]]:
        return list(self.shell.work_log)


class ThreadDriver:
    """:class:`~leasegate.shells.thread_shell.ThreadRunnerShell` driven from the walk's loop.

    Args:
        cloud: the reference cloud (reached over a ``MemoryCloudLink``).
        endpoint_url: the SSM endpoint of every lease reader.
    """

    backend = "asyncio"

    def __init__(self, cloud: ReferenceCloud, endpoint_url: str) -> None:
        self.name = "threads"
        self._cloud = cloud
        self._url = endpoint_url

    @contextlib.asynccontextmanager
    async def running(self, parts: RunnerParts) -> AsyncIterator[ShellHandle]:
        """Run ``parts`` on a ``ThreadRunnerShell`` until the block ends.

        Leaving normally shuts the runtime down (in a worker thread);
        :class:`SimulatedCrash` stops the shell's threads without the
        runtime's drain (the held work is released only once the shell has
        closed its transport, so its completion reaches no cloud and no later
        runner; the abandoned runtime still handles it as a failed cleanup,
        which its metrics count) and is swallowed; any other exception
        propagates.
        """
        from leasegate.shells.thread_shell import ThreadRunnerShell

        link = MemoryCloudLink(self._cloud)
        transport = link.thread_end(on_close=parts.trap.release)
        shell = ThreadRunnerShell(
            parts.runtime,
            transport,
            reader_factory=_reader_factory(self._url, parts.opened),
            work=parts.work_sync,
            journal=parts.journal,
            recorder=parts.recorder,
        )
        async with anyio.create_task_group() as tg:
            shell.__enter__()
            crashed = False
            try:
                yield _ThreadHandle(shell)
            except* SimulatedCrash:
                crashed = True
            finally:
                drain = not crashed
                await anyio.to_thread.run_sync(
                    lambda: shell.shutdown(drain=drain), abandon_on_cancel=True
                )
                parts.trap.release()
                link.close()
                tg.cancel_scope.cancel()
