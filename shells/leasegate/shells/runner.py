"""One obvious way to build a runner's runtime core: :func:`runner_runtime`.

The boot-id rule: the env replica's ``boot_id`` **must** be the runner boot
id the cloud was given when it assigned the task (``runnerBootId`` of the
assignment; :meth:`leasegate.testing.ReferenceCloud.assign`'s
``runner_boot_id``). Every env frame carries it, and the replica answers a
frame of another boot with ``runner_boot_mismatch`` (ER-027): the task's env
never becomes ready and launch-ready waits until its deadline. Choose the boot
id once per runner process, give the same value to the cloud and to
:func:`runner_runtime`. Guide: ``docs/shells.md`` ("Building a runner").
"""

from __future__ import annotations

import secrets
from typing import Literal

from leasegate.core.replica import ReplicaLimits, ReplicaManager
from leasegate.core.runtime import CredentialRuntime, FilesPort

from .ports import ConsumerSet

__all__ = ["new_boot_id", "runner_runtime"]


def new_boot_id() -> str:
    """A fresh runner boot id: 32 random hex digits (a valid ``OP_ID``).

    Make one per runner process and give it to the cloud and to
    :func:`runner_runtime`.
    """
    return secrets.token_hex(16)


def runner_runtime(
    *,
    boot_id: str,
    consumers: ConsumerSet,
    runner_kind: Literal["owned", "task-machine"] = "owned",
    op_id_seed: str | None = None,
    files: FilesPort | None = None,
    replica_limits: ReplicaLimits | None = None,
    launch_deadline_ms: int | None = None,
    env_ready_timeout_ms: int | None = None,
    shutdown_drain_ms: int | None = None,
    recovery_retry_base_ms: int | None = None,
) -> CredentialRuntime:
    """Build a :class:`~leasegate.core.runtime.CredentialRuntime` for a runner.

    Wires the env replica as ``ReplicaManager(boot_id=boot_id)`` and the
    consumers' ports (``consumers.ports()``), so the replica's boot id is the
    one the caller gives the cloud (the boot-id rule, see the module doc).
    Serve the consumers' work with ``work=consumers.work`` (async shell) or
    ``work=consumers.work_sync`` (threading shell).

    Args:
        boot_id: the runner boot id given to the cloud at assignment
            (``[A-Za-z0-9_-]{1,128}``; :func:`new_boot_id` makes one).
        consumers: the reference consumers (:class:`~leasegate.shells.ports.ConsumerSet`).
        runner_kind: ``"owned"`` or ``"task-machine"`` (RT-001).
        op_id_seed: the registry's op-id seed; ``None``: 32 random hex digits.
            Record it (a trace header does) to replay the run.
        files: the Files port (task machines), or ``None``.
        replica_limits: the replica's replay-ledger limits (``None``: defaults).
        launch_deadline_ms, env_ready_timeout_ms, shutdown_drain_ms,
        recovery_retry_base_ms: the runtime's options in milliseconds
            (``None``: the defaults; RT-140).

    Raises:
        ValueError: ``boot_id`` is not a valid ``OP_ID`` (from ``ReplicaManager``).
    """
    ports = consumers.ports()
    return CredentialRuntime(
        runner_kind=runner_kind,
        op_id_seed=secrets.token_hex(16) if op_id_seed is None else op_id_seed,
        engines=ports["engines"],
        mcp=ports["mcp"],
        person=ports["person"],
        files=files,
        replica=ReplicaManager(boot_id=boot_id, limits=replica_limits),
        launch_deadline_ms=launch_deadline_ms,
        env_ready_timeout_ms=env_ready_timeout_ms,
        shutdown_drain_ms=shutdown_drain_ms,
        recovery_retry_base_ms=recovery_retry_base_ms,
    )
