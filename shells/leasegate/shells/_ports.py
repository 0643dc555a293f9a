"""Adapters from the reference consumers to the runtime's ports (partial: engines only).

:class:`EngineFilesPort` makes the reference :class:`EngineConsumer` (files
under a :class:`TaskRoot`) serve both halves of the runtime's engines
contract (``docs/runtime.md``, "Ports"): the synchronous ``EnginesPort``
gate (``open``/``close``/``forget``, no I/O) and the awaited
``ConsumerWork`` operations ``install``/``cleanup``/``drain`` (file I/O in a
worker thread). MCP and person (GitHub, SSH) are not adapted yet.
"""

from __future__ import annotations

import anyio

from leasegate.core.registry import Assignment, CleanupRequest, InstallRequest, TaskView
from leasegate.core.runtime import ConsumerWork, CredentialFailure

from .consumers import EngineConsumer, Material, material_from_value

__all__ = ["EngineFilesPort"]

_FAILED = "a credential consumer failed"


class EngineFilesPort:
    """The runtime's ``EnginesPort`` plus its engine ``ConsumerWork``, on :class:`EngineConsumer`.

    Args:
        consumer: the reference engine consumer (its files are ``0600`` in
            ``0700`` directories).
        limiter: bounds the worker threads of the file I/O (``None``: anyio's).

    ``open``/``close`` flip this adapter's own admission state, **not** the
    consumer's :class:`Gate`: the runtime closes a gate before every install
    and reopens it after (a pause), while the reference consumer's gate
    closes a run for good and then refuses its installs. ``forget`` keeps
    nothing. :meth:`work` serves
    ``ConsumerWork(consumer="engines")``: ``install`` writes the materials of
    the request's ``next`` view (identity revision: the observed SSM version,
    as a decimal string), ``cleanup`` removes the task's whole directory
    (``full``) or exactly the removed identities (``selective``), ``drain``
    does nothing. It returns ``None`` or ``CredentialFailure("a credential
    consumer failed")`` (an exception's text never reaches it). Reference:
    ``host/lib/credential-consumers/engines`` (``installEngineCredentials``,
    ``cleanupEngineCredentials``, ``openEngineGate``/``closeEngineGate``).
    """

    def __init__(
        self, consumer: EngineConsumer, *, limiter: anyio.CapacityLimiter | None = None
    ) -> None:
        self.consumer = consumer
        self._limiter = limiter
        #: task id -> the run admitted now (absent: nothing admitted).
        self.admitted: dict[str, int] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit work of ``assignment`` (RT-082)."""
        self.admitted[assignment.task_id] = assignment.run_epoch

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older (RT-087)."""
        run = self.admitted.get(assignment.task_id)
        if run is not None and run <= assignment.run_epoch:
            del self.admitted[assignment.task_id]

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment`` is admitted now."""
        return self.admitted.get(assignment.task_id) == assignment.run_epoch

    def forget(self, assignment: Assignment) -> None:
        """Drop in-memory state of the run on teardown (nothing is kept here)."""

    @staticmethod
    def materials(view: TaskView) -> list[Material]:
        """The engine materials of ``view`` (entries with a read value only)."""
        out = []
        for entry in view.engines:
            if entry.material is None:
                continue
            rev = None if entry.observed_version is None else str(entry.observed_version)
            out.append(material_from_value(entry.material, rev))
        return out

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve an engines ``ConsumerWork``; other consumers' work succeeds untouched."""
        if cmd.consumer != "engines":
            return None
        req = cmd.request
        try:
            if cmd.op == "install" and isinstance(req, InstallRequest):
                mats = self.materials(req.next)
                a = req.assignment
                await anyio.to_thread.run_sync(
                    lambda: self.consumer.install(a, mats), limiter=self._limiter
                )
            elif cmd.op == "cleanup" and isinstance(req, CleanupRequest):
                task_id = req.assignment.task_id
                removed = None if req.mode == "full" else req.removed
                await anyio.to_thread.run_sync(
                    lambda: self.consumer.cleanup(task_id, removed), limiter=self._limiter
                )
        except Exception:  # noqa: BLE001 - never an exception's text in an error
            return CredentialFailure(message=_FAILED)
        return None
