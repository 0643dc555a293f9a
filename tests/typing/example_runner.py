"""A user-style runner written against the public surface only (checked by mypy --strict).

Not run as a test: ``test_example_runner_types.py`` type-checks it. One trio
runner and one thread runner, each starting a task, handing its env and
files to a child process, holding its Git credentials and stopping it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import trio

from leasegate.core import CredentialFailure, HoldInfo, ReplicaView, Secret, TaskView
from leasegate.shells import (
    AsyncRunnerShell,
    CallFailed,
    ConsumerSet,
    FrameTransport,
    LaunchReady,
    PersonGitHold,
    ThreadRunnerShell,
    new_boot_id,
    runner_runtime,
    thread_memory_pair,
)


def child_env(ready: LaunchReady, git: PersonGitHold | None) -> dict[str, str]:
    """The child's environment: the task's env, revealed on purpose, plus Git's."""
    env = ready.reveal()
    if git is not None:
        env.update(git.git_env())
    return env


def engine_files(ready: LaunchReady) -> tuple[Path, ...]:
    """The engine files the consumers wrote for this run."""
    return ready.files.get("engines", ())


def describe(ready: LaunchReady) -> str:
    """Identity only: never a value."""
    view: TaskView = ready.view
    secrets: Mapping[str, Secret] = ready.env
    return (
        f"{ready.task_id}/{ready.run_epoch} lease {ready.lease_id} rev "
        f"{ready.manifest_revision} (floor {ready.revision_floor}), expires "
        f"{ready.expires_at_ms} ms, {len(secrets)} env keys, {len(view.engines)} engines"
    )


async def run_trio(transport: FrameTransport, root: Path, task_id: str) -> int:
    """Start ``task_id`` run 1 on trio, run a child with its env, stop it."""
    boot = new_boot_id()  # the same id goes to the cloud's assignment
    consumers = ConsumerSet(root)
    runtime = runner_runtime(boot_id=boot, consumers=consumers)
    async with AsyncRunnerShell(runtime, transport, work=consumers.work) as shell:
        start_id: int = await shell.begin_start(task_id, 1)
        try:
            ready = await shell.wait_launch_ready(start_id)
        except CallFailed as e:
            failure: CredentialFailure = e.error
            print(failure.message)
            return 1
        hold: HoldInfo | None = await shell.acquire_hold(start_id)
        git = hold.git if hold is not None and isinstance(hold.git, PersonGitHold) else None
        snapshot: ReplicaView | None = runtime.env_snapshot(task_id, 1, ready.view.project_ids)
        print(describe(ready), engine_files(ready), snapshot is not None)
        code = await trio.to_thread.run_sync(
            lambda: subprocess.run(["true"], env=child_env(ready, git), check=False).returncode
        )
        if hold is not None:
            shell.release_hold(hold.hold_id)
        shell.end_start(start_id)
        await shell.close(task_id, 1, "stop")
        return code


def run_threads(root: Path, task_id: str) -> int:
    """The same on the threading shell."""
    runner_end, _cloud_end = thread_memory_pair()
    consumers = ConsumerSet(root)
    runtime = runner_runtime(boot_id=new_boot_id(), consumers=consumers, runner_kind="owned")
    with ThreadRunnerShell(runtime, runner_end, work=consumers.work_sync) as shell:
        start_id = shell.begin_start(task_id, 1)
        ready = shell.wait_launch_ready(start_id, timeout_s=30)
        hold = shell.acquire_hold(start_id)
        git = hold.git if hold is not None and isinstance(hold.git, PersonGitHold) else None
        snapshot = shell.query(lambda rt: rt.env_snapshot(task_id, 1, ready.view.project_ids))
        entries = 0 if snapshot is None else sum(len(p.entries) for p in snapshot.projects)
        print(describe(ready), entries)
        code = subprocess.run(["true"], env=child_env(ready, git), check=False).returncode
        if hold is not None:
            shell.release_hold(hold.hold_id)
        shell.end_start(start_id)
        shell.close(task_id, 1, "stop", timeout_s=30)
        return code
