"""The runtime's construction, as a trace header records it."""

from __future__ import annotations

import dataclasses
from typing import Literal

from leasegate.core.replica import ReplicaLimits, ReplicaManager
from leasegate.core.runtime import (
    CredentialRuntime,
    EnginesPort,
    FilesPort,
    McpPort,
    PersonPort,
)

__all__ = ["RuntimeConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeConfig:
    """Everything a :class:`~leasegate.core.runtime.CredentialRuntime` is built from,
    except its ports: enough to build the same core again for a replay.

    A cattrs-able frozen dataclass (plain fields only); the trace header holds
    it under ``"config"``.

    Attributes:
        runner_kind: ``"owned"`` or ``"task-machine"`` (RT-001).
        op_id_seed: the seed of the registry's op ids (any text; the shells
            draw random hex).
        replica: build an env replica (:class:`~leasegate.core.replica.ReplicaManager`).
        boot_id: the replica's runner boot id (required when ``replica``).
        policy_epochs: the replica's policy epochs; ``None``: its default.
        max_task_entries, max_task_bytes, max_total_entries, max_total_bytes:
            replay-ledger limits (entries, bytes); ``None``: the default
            (:class:`~leasegate.core.replica.ReplicaLimits`).
        launch_deadline_ms, env_ready_timeout_ms, shutdown_drain_ms,
            recovery_retry_base_ms: runtime timing options in milliseconds;
            ``None``: the runtime's default (RT-140).
    """

    runner_kind: Literal["owned", "task-machine"] = "owned"
    op_id_seed: str = ""
    replica: bool = False
    boot_id: str | None = None
    policy_epochs: tuple[int, ...] | None = None
    max_task_entries: int | None = None
    max_task_bytes: int | None = None
    max_total_entries: int | None = None
    max_total_bytes: int | None = None
    launch_deadline_ms: int | None = None
    env_ready_timeout_ms: int | None = None
    shutdown_drain_ms: int | None = None
    recovery_retry_base_ms: int | None = None

    def limits(self) -> ReplicaLimits:
        """The replica limits, defaults filled in."""
        d = ReplicaLimits()
        return ReplicaLimits(
            max_task_entries=d.max_task_entries
            if self.max_task_entries is None
            else self.max_task_entries,
            max_task_bytes=d.max_task_bytes if self.max_task_bytes is None else self.max_task_bytes,
            max_total_entries=d.max_total_entries
            if self.max_total_entries is None
            else self.max_total_entries,
            max_total_bytes=d.max_total_bytes
            if self.max_total_bytes is None
            else self.max_total_bytes,
        )

    def build(
        self,
        *,
        engines: EnginesPort,
        mcp: McpPort,
        person: PersonPort,
        files: FilesPort | None = None,
    ) -> CredentialRuntime:
        """Build the runtime (and its replica when ``replica``) with these ports.

        Raises:
            ValueError: ``replica`` without a ``boot_id``, or replica options
                the :class:`~leasegate.core.replica.ReplicaManager` refuses
                (its ``ValueError``, ER-002).
        """
        rep = None
        if self.replica:
            if self.boot_id is None:
                raise ValueError("a replica needs a boot_id")
            rep = ReplicaManager(
                boot_id=self.boot_id, policy_epochs=self.policy_epochs, limits=self.limits()
            )
        return CredentialRuntime(
            runner_kind=self.runner_kind,
            op_id_seed=self.op_id_seed,
            engines=engines,
            mcp=mcp,
            person=person,
            files=files,
            replica=rep,
            launch_deadline_ms=self.launch_deadline_ms,
            env_ready_timeout_ms=self.env_ready_timeout_ms,
            shutdown_drain_ms=self.shutdown_drain_ms,
            recovery_retry_base_ms=self.recovery_retry_base_ms,
        )
