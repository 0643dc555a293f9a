"""What a task gets once launch-ready: plain values built from the runtime's state.

:class:`LaunchReady` is what both shells' ``wait_launch_ready`` return: the
task's env as ``Secret`` values, the files the consumers wrote, and the view's
identity (lease id, manifest revision, revision floor, expiry). It is built by
:func:`launch_ready` from pure queries of the runtime core
(:meth:`~leasegate.core.runtime.CredentialRuntime.env_snapshot`, the registry's
:meth:`~leasegate.core.registry.LeaseRegistry.status`, and each consumer port
that implements :class:`~leasegate.shells.ports.MaterializedPaths`). Nothing
here does I/O. Guide: ``docs/runtime.md`` ("What a task gets").
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from leasegate.core import Secret
from leasegate.core.registry import TaskView
from leasegate.core.replica import ReplicaView
from leasegate.core.runtime import CredentialRuntime
from leasegate.core.wire.env import Installed

from ._dispatch import CallFailed
from .ports import MaterializedPaths

__all__ = ["CONSUMER_NAMES", "LaunchReady", "launch_env", "launch_ready"]

#: The consumer ports asked for their files, in this order (the keys of :attr:`LaunchReady.files`).
CONSUMER_NAMES: tuple[Literal["engines", "mcp", "person", "files"], ...] = (
    "engines",
    "mcp",
    "person",
    "files",
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class LaunchReady:
    """A launch-ready task run as plain values (reference ``waitForLaunchReady``'s view, RT-028).

    Attributes:
        view: the raw :class:`~leasegate.core.registry.TaskView` the runtime answered.
        env: the task's project env, key → :class:`~leasegate.core.Secret`
            (a read-only mapping), from the runtime's committed env snapshot
            of the view's projects (RT-057..063): only entries whose value was
            read and installed. When two projects define the same key, the
            first project in :attr:`TaskView.project_ids` order wins and the
            key is listed in :attr:`shadowed_env_keys`. Empty without projects
            or without an env replica.
        shadowed_env_keys: keys a later project also defined (its value is not
            in :attr:`env`), in the order met; names only.
        files: consumer name (``"engines"``, ``"mcp"``, ``"person"``,
            ``"files"``) → the paths its port wrote for this view, for each
            port implementing :class:`~leasegate.shells.ports.MaterializedPaths`
            (the reference adapters of :class:`~leasegate.shells.ports.ConsumerSet`);
            in-memory ports give no entry.
        revision_floor: the registry's minimum manifest revision for the run
            (``lease.stale``'s ``minRevision``, LR-082; ``0`` when none).

    The view's identity is also given as :attr:`task_id`, :attr:`run_epoch`,
    :attr:`lease_id`, :attr:`manifest_revision` and :attr:`expires_at_ms`
    (milliseconds since the epoch). ``repr`` shows identity, env keys and
    file counts, never a value. :meth:`reveal` gives the env as plain
    strings, on purpose, for a child process.
    """

    view: TaskView
    env: Mapping[str, Secret]
    shadowed_env_keys: tuple[str, ...] = ()
    files: Mapping[str, tuple[Path, ...]]
    revision_floor: int = 0

    @property
    def task_id(self) -> str:
        """The task id of the run."""
        return self.view.assignment.task_id

    @property
    def run_epoch(self) -> int:
        """The run's epoch."""
        return self.view.assignment.run_epoch

    @property
    def lease_id(self) -> str:
        """The lease id of the granted view."""
        return self.view.lease_id

    @property
    def manifest_revision(self) -> int:
        """The granted manifest's revision."""
        return self.view.manifest_revision

    @property
    def expires_at_ms(self) -> int:
        """When the lease expires, milliseconds since the epoch (``TaskView.expires_at``)."""
        return self.view.expires_at

    def reveal(self) -> dict[str, str]:
        """The env as plain ``str`` values (a new ``dict``), e.g. for ``subprocess.run(env=...)``.

        The only way this object gives a value away; the caller owns what it
        does with the result.
        """
        return {key: value.reveal() for key, value in self.env.items()}

    def __repr__(self) -> str:
        files = {name: len(paths) for name, paths in self.files.items()}
        return (
            f"LaunchReady(task_id={self.task_id!r}, run_epoch={self.run_epoch}, "
            f"lease_id={self.lease_id!r}, manifest_revision={self.manifest_revision}, "
            f"revision_floor={self.revision_floor}, expires_at_ms={self.expires_at_ms}, "
            f"env_keys={sorted(self.env)!r}, files={files!r})"
        )


def launch_env(
    snapshot: ReplicaView | None, project_ids: tuple[str, ...]
) -> tuple[Mapping[str, Secret], tuple[str, ...]]:
    """The task env of ``snapshot``: (key → value, shadowed keys).

    Args:
        snapshot: the committed env snapshot (``None``: no env).
        project_ids: the projects in precedence order (the view's order);
            a project of the snapshot not listed comes after them.

    Returns:
        A read-only mapping of the installed entries' values (entries withheld,
        unavailable or without a value are left out) and the keys a later
        project also defined, in the order met. First project wins.
    """
    env: dict[str, Secret] = {}
    shadowed: list[str] = []
    if snapshot is not None:
        rank = {pid: i for i, pid in enumerate(project_ids)}
        projects = sorted(snapshot.projects, key=lambda p: rank.get(p.project_id, len(rank)))
        for project in projects:
            for entry in project.entries:
                if entry.value is None or not isinstance(entry.materialization, Installed):
                    continue
                key = entry.state.key
                if key in env:
                    if key not in shadowed:
                        shadowed.append(key)
                    continue
                env[key] = entry.value
    return types.MappingProxyType(env), tuple(shadowed)


def launch_ready(runtime: CredentialRuntime, view: TaskView, start_id: int) -> LaunchReady:
    """Build the :class:`LaunchReady` of ``view`` from pure queries of ``runtime``.

    Call it in the runtime's own step context (the async shell's loop; the
    threading shell's core lock, e.g. ``shell.query``), right after the
    launch-ready answer.

    Args:
        runtime: the runtime core that answered ``AwaitLaunchReady``.
        view: the answered :class:`~leasegate.core.registry.TaskView`.
        start_id: the start the view was awaited for.

    Raises:
        CallFailed: the start is no longer current (``assertCurrent``,
            RT-018/RT-019): the run was closed or superseded after the answer,
            so its env and files are not the task's any more.
    """
    failure = runtime.assert_current(start_id)
    if failure is not None:
        raise CallFailed(failure)
    a = view.assignment
    env, shadowed = launch_env(
        runtime.env_snapshot(a.task_id, a.run_epoch, view.project_ids), view.project_ids
    )
    files: dict[str, tuple[Path, ...]] = {}
    for name in CONSUMER_NAMES:
        port = runtime.consumer_port(name)
        if isinstance(port, MaterializedPaths):
            files[name] = port.materialized_paths(view)
    status = runtime.registry.status(a.task_id)
    floor = status.min_revision if status is not None and status.assignment == a else 0
    return LaunchReady(
        view=view,
        env=env,
        shadowed_env_keys=shadowed,
        files=types.MappingProxyType(files),
        revision_floor=floor,
    )
