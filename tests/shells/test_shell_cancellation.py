"""Leaving a shell by an exception, a cancellation or Ctrl-C removes the run's credential files.

Real files on disk (the reference consumers, ``ConsumerSet`` under
``tmp_path``), the reference cloud granting through a moto server on
127.0.0.1 (``docs/shells.md``, "Cancellation"):

* async shell, asyncio and trio: an exception raised in the host's block
  after launch-ready, a cancel scope cancelled around the block, and a
  ``KeyboardInterrupt`` raised in the block each leave no file under the
  consumers' root once the ``async with`` has exited;
* threading shell: an exception and a ``KeyboardInterrupt`` in the ``with``
  block, the same;
* a thread-based runner script in a subprocess gets SIGINT at a random
  moment after its gate opened: exit 130, no file, no traceback;
* a consumer cleanup that hangs past ``exit_timeout_s``: the exit is
  bounded, the journal keeps the owed row, and a new shell's ``recover()``
  removes the files.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import shell_kit as kit

from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import ConsumerWork, CredentialFailure, CredentialRuntime
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.ports import ConsumerSet
from leasegate.shells.store import RuntimeJournal
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.transport import Backoff, ThreadWebSocketClient
from leasegate.testing import CloudWebSocketServer, MemoryCloudLink, MotoServer, ReferenceCloud

pytestmark = pytest.mark.integration

TASK = "task-cancel"
BOOT = "boot-cancel-1"
READY_S = 20.0


class Boom(Exception):
    """The host's own failure inside the block."""


def files_under(base: Path) -> list[Path]:
    """Every file under ``base`` (the consumers' root)."""
    return [p for p in base.rglob("*") if p.is_file()] if base.exists() else []


@contextmanager
def raises_through(kind: type[BaseException]) -> Iterator[None]:
    """Expect ``kind``, raised as is or inside an exception group (task groups wrap)."""
    try:
        yield
    except BaseException as e:
        if isinstance(e, kind):
            return
        if isinstance(e, BaseExceptionGroup) and e.split(kind)[0] is not None:
            return
        raise
    pytest.fail(f"{kind.__name__} was not raised")


class Runner:
    """One runner's parts: reference consumers on ``base``, a runtime, a durable journal."""

    def __init__(self, base: Path, agent: Path, seed: str) -> None:
        self.base = base
        self.consumers = ConsumerSet(base)
        self.journal = RuntimeJournal(agent, "runner-cancel")
        self.runtime = CredentialRuntime(
            runner_kind="owned",
            op_id_seed=seed,
            replica=ReplicaManager(boot_id=BOOT),
            **self.consumers.ports(),
        )
        #: Set to make every engines ``cleanup`` hang (async) until cancelled.
        self.hang_cleanup = False
        self.hung = threading.Event()
        self.release = threading.Event()

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        if self.hang_cleanup and cmd.op == "cleanup":
            self.hung.set()
            await anyio.sleep_forever()
        return await self.consumers.work(cmd)

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        if self.hang_cleanup and cmd.op == "cleanup":
            self.hung.set()
            self.release.wait(30)
        return self.consumers.work_sync(cmd)


@pytest.fixture
def cloud(moto_server: MotoServer) -> ReferenceCloud:
    return kit.reference_cloud(moto_server, task=TASK, boot=BOOT)


def _async_shell(
    runner: Runner, link: MemoryCloudLink, moto: MotoServer, **kw: Any
) -> AsyncRunnerShell:
    return AsyncRunnerShell(
        runner.runtime,
        link.async_end(),
        reader_factory=kit.moto_reader_factory(moto, []),
        work=runner.work,
        journal=runner.journal,
        **kw,
    )


async def _until_files(shell: AsyncRunnerShell, base: Path) -> None:
    start_id = await shell.begin_start(TASK, 1)
    with anyio.fail_after(READY_S):
        await shell.wait_launch_ready(start_id)
    shell.end_start(start_id)
    assert list(base.rglob("engine.env")), "the gate opened without the engine's file"


# ------------------------------------------------------------------ async shell


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["exception", "cancel-scope", "keyboard-interrupt"])
async def test_async_shell_exit_by_exception_cancel_or_interrupt_removes_the_run_files(
    how: str, cloud: ReferenceCloud, moto_server: MotoServer, tmp_path: Path
) -> None:
    runner = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-async")
    link = MemoryCloudLink(cloud)
    shell = _async_shell(runner, link, moto_server)
    async with anyio.create_task_group() as tg:
        if how == "cancel-scope":
            with anyio.CancelScope() as scope:
                async with shell:
                    await _until_files(shell, runner.base)
                    scope.cancel()
                    await anyio.sleep(30)  # cancelled here
            assert scope.cancelled_caught
        else:
            kind: type[BaseException] = Boom if how == "exception" else KeyboardInterrupt
            with raises_through(kind):
                async with shell:
                    await _until_files(shell, runner.base)
                    raise kind()
        # Checked before the link stops: the shell itself cleaned up on its way out.
        assert files_under(runner.base) == []
        assert runner.journal.owed() == ()
        assert ("host", "remove-paths") in shell.work_log
        assert shell.running_tasks == 0
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_async_shell_exit_cleanup_that_hangs_is_bounded_and_left_to_recover(
    cloud: ReferenceCloud, moto_server: MotoServer, tmp_path: Path
) -> None:
    runner = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-hang")
    link = MemoryCloudLink(cloud)
    shell = _async_shell(runner, link, moto_server, exit_timeout_s=1.0)
    async with anyio.create_task_group() as tg:
        began = time.monotonic()
        with raises_through(Boom):
            async with shell:
                await _until_files(shell, runner.base)
                runner.hang_cleanup = True
                began = time.monotonic()
                raise Boom
        assert time.monotonic() - began < 1.0 + 2.0 + 2.0  # the bound, the transport's close
        assert runner.hung.is_set()
        assert files_under(runner.base) != []
        owed = runner.journal.owed()
        assert [(o.task_id, o.run_epoch) for o in owed] == [(TASK, 1)]
        tg.cancel_scope.cancel()
    # The next boot: a new runner on the same journal removes the files first.
    nxt = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-hang-2")
    link2 = MemoryCloudLink(cloud)
    async with anyio.create_task_group() as tg:
        async with _async_shell(nxt, link2, moto_server) as shell2:
            with anyio.fail_after(READY_S):
                await shell2.recover()
        assert files_under(nxt.base) == []
        assert nxt.journal.owed() == ()
        tg.cancel_scope.cancel()


# ---------------------------------------------------------------- thread shell


@contextmanager
def _thread_shell(
    runner: Runner, cloud: ReferenceCloud, moto: MotoServer, **kw: Any
) -> Iterator[Callable[[], ThreadRunnerShell]]:
    with CloudWebSocketServer(cloud) as server:
        client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
        client.start()
        assert client.wait_connected(10)
        shell = ThreadRunnerShell(
            runner.runtime,
            client,
            reader_factory=kit.moto_reader_factory(moto, []),
            work=runner.work_sync,
            journal=runner.journal,
            **kw,
        )
        try:
            yield lambda: shell
        finally:
            runner.release.set()
            client.close()


def _thread_until_files(shell: ThreadRunnerShell, base: Path) -> None:
    start_id = shell.begin_start(TASK, 1)
    shell.wait_launch_ready(start_id, timeout_s=READY_S)
    shell.end_start(start_id)
    assert list(base.rglob("engine.env")), "the gate opened without the engine's file"


@pytest.mark.parametrize("kind", [Boom, KeyboardInterrupt])
def test_thread_shell_exit_by_exception_or_interrupt_removes_the_run_files(
    kind: type[BaseException],
    cloud: ReferenceCloud,
    moto_server: MotoServer,
    tmp_path: Path,
) -> None:
    runner = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-threads")
    with _thread_shell(runner, cloud, moto_server) as make:
        shell = make()
        with raises_through(kind), shell:
            _thread_until_files(shell, runner.base)
            raise kind()
        assert files_under(runner.base) == []
        assert runner.journal.owed() == ()
        assert ("host", "remove-paths") in shell.work_log
        assert shell.running_threads == 0


def test_thread_shell_exit_cleanup_that_hangs_is_bounded_and_left_to_recover(
    cloud: ReferenceCloud, moto_server: MotoServer, tmp_path: Path
) -> None:
    runner = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-threads-hang")
    with _thread_shell(runner, cloud, moto_server, exit_timeout_s=1.0) as make:
        shell = make()
        began = time.monotonic()
        with raises_through(Boom), shell:
            _thread_until_files(shell, runner.base)
            runner.hang_cleanup = True
            began = time.monotonic()
            raise Boom
        # The bound, then the pool's 2 s grace for the stuck worker (reported, not hidden).
        assert time.monotonic() - began < 1.0 + 2.0 + 5.0
        assert runner.hung.is_set()
        assert shell.leaked_threads >= 1
        assert files_under(runner.base) != []
        owed = runner.journal.owed()
        assert [(o.task_id, o.run_epoch) for o in owed] == [(TASK, 1)]
    nxt = Runner(tmp_path / "tasks", tmp_path / "agent", "cancel-threads-hang-2")
    with _thread_shell(nxt, cloud, moto_server) as make:
        with make() as shell2:
            shell2.recover()
        assert files_under(nxt.base) == []
        assert nxt.journal.owed() == ()


# ------------------------------------------------------------- SIGINT, for real

RUNNER_SCRIPT = textwrap.dedent(
    """
    import sys
    import time
    from pathlib import Path

    from leasegate.core.replica import ReplicaManager
    from leasegate.core.runtime import CredentialRuntime
    from leasegate.shells.ports import ConsumerSet
    from leasegate.shells.ssm import SessionCredentials, SsmReader
    from leasegate.shells.thread_shell import ThreadRunnerShell
    from leasegate.shells.timers import wall_clock_ms
    from leasegate.shells.transport import Backoff, ThreadWebSocketClient
    from leasegate.testing import CloudWebSocketServer, MotoServer, ReferenceCloud

    URL, BASE, TASK, BOOT = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]


    def main():
        moto = MotoServer(url=URL, region="us-east-1", iam_enforced=False, _stop=lambda: None)
        cloud = ReferenceCloud(
            ssm=moto.ssm_client(), sts=moto.sts_client(), region=moto.region,
            clock=wall_clock_ms, retry_delay_ms=150, seed=TASK,
        )
        cloud.add_org("acme")
        cloud.add_user("acme", "alice")
        cloud.add_project("acme", "web")
        cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "CANARY-1"})
        cloud.set_env_value("web", "DATABASE_URL", "CANARY-db")
        cloud.assign(TASK, 1, "acme", "alice", ["web"], runner_boot_id=BOOT)
        consumers = ConsumerSet(BASE)
        runtime = CredentialRuntime(
            runner_kind="owned", op_id_seed=TASK, replica=ReplicaManager(boot_id=BOOT),
            **consumers.ports(),
        )

        def reader(cmd):
            return SsmReader(
                SessionCredentials.from_lease(cmd.session, cmd.region),
                endpoint_url=URL, max_backoff_s=0.1,
            )

        with CloudWebSocketServer(cloud) as server:
            client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
            client.start()
            client.wait_connected(10)
            try:
                with ThreadRunnerShell(
                    runtime, client, reader_factory=reader, work=consumers.work_sync
                ) as shell:
                    start_id = shell.begin_start(TASK, 1)
                    shell.wait_launch_ready(start_id, timeout_s=30)
                    shell.end_start(start_id)
                    print("READY", flush=True)
                    while True:  # the host's own work
                        time.sleep(0.01)
            finally:
                client.close()


    if __name__ == "__main__":
        try:
            main()
        except KeyboardInterrupt:
            sys.exit(130)
    """
)


def _wait_ready(proc: subprocess.Popen[str], timeout_s: float) -> bool:
    """Whether the script printed READY within ``timeout_s`` (read on a helper thread)."""
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "READY":
                ready.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return ready.wait(timeout_s)


@pytest.mark.slow
def test_thread_runner_script_interrupted_by_sigint_after_its_gate_opened_leaves_no_file(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER_SCRIPT)
    tries = int(os.environ.get("LEASEGATE_SIGINT_TRIES", "3"))
    rng = random.Random()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(tries):
        base = tmp_path / f"tasks-{i}"
        task = f"task-sigint-{i}-{rng.randrange(1 << 30)}"
        proc = subprocess.Popen(
            [sys.executable, str(script), moto_server.url, str(base), task, f"boot-{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert _wait_ready(proc, 60), "the runner's gate did not open"
            assert list(base.rglob("engine.env"))
            time.sleep(rng.uniform(0.0, 0.5))
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        assert files_under(base) == []
