"""The env replica machine: :class:`ReplicaManager`.

Theory of operation
===================

The manager keeps, for each task id, at most one *replica*: the in-memory
copy of the project environment values of exactly one run ``(task, run)``.
It is the sans-I/O port of ``ProjectEnvTaskReplicaManager``
(``host/lib/project-env-task-replica.ts``; catalog ``env-replica.md``,
ER-001–ER-130). Everything happens in :meth:`ReplicaManager.handle`: one
event in, a list of commands out. It never raises for any event.

Lifecycle events (:class:`ActivateAssignment`, :class:`ExpectActivation`,
:class:`SettleActivation`, :class:`DropAssignment`, :class:`DropAll`,
:class:`AwaitReady`, :class:`ReadinessDeadline`) take effect at once, even
while a frame of the same task waits on a value read.

Frames (:class:`EnvFrameReceived`) are decoded strictly; an invalid one is
answered with :class:`FrameRejected` only (ER-024). A valid frame joins its
task's FIFO *lane*. The head of an idle lane is dispatched inside the same
``handle`` call (ordering guarantee: events apply strictly in arrival order,
so a lifecycle event fed before a frame is seen by it, and one fed after is
not). Dispatch runs the identity checks (boot, pending activation, run,
restart-required: ER-027), then the kind's rules, in the reference's order.

A page or apply that must read a value emits :class:`ReadStagedValue` /
:class:`ReadLegacyValue` carrying the reader handle captured at dispatch,
and the lane stays busy. Its completion (:class:`ValueReadCompleted` /
:class:`ValueReadFailed`) resumes the operation; *before anything else*
the fence is re-run (same replica object registered, same run and boot,
same fence generation, same reader handle, same stream, same attempt
object). A failed fence scrubs what the frame read and answers
``reader_changed`` (the same replica's reader changed) or
``replica_state_changed`` (ER-103, ER-104). When the operation acks, the
lane's next frame is dispatched, so frames of one task are acked in arrival
order whatever the order of their reads' completions; different tasks'
lanes are independent.

State per replica: its *phase* (:mod:`._phases`: ``waiting`` for a first
snapshot, ``staging`` an attempt, ``live``, ``exhausted``, ``dropped``;
every change goes through :func:`~._phases.enter`), which is also its
*gate* (open exactly when ``live``), the live snapshot (``live``), the
attempt in progress, the delivery cursor, the replay ledger (retired streams, retired
attempts, apply receipts, completed attempts: each costs 1 entry and
``64 + len(canonical evidence)`` bytes per task and per process, ER-114) and
the readiness waiters. When a reservation fails the replica is *exhausted*:
restart-required, every value dropped, waiters rejected (ER-119).

Plaintext values are :class:`~leasegate.core.Secret` objects held only in
staged and live entries and by in-flight operations; *scrubbing* sets the
entry's reference to ``None`` (docs/security.md § Env replica plaintext says
what that can and cannot mean in Python).

Layout
======

:meth:`ReplicaManager.handle` looks the event's exact type up in
:data:`_HANDLERS`. The manager is built from one part per concern, each a
class deriving from the one below it: :mod:`._acks` (the shared state and
the acks), :mod:`._accounting` (the replay ledger), :mod:`._lifecycle`
(activation, drops, readiness, a replica's end), :mod:`._values`
(materialization), :mod:`._snapshots` (begin, page, commit) and
:mod:`._applies` (applies), :mod:`._lanes` (intake, lanes, dispatch, read
completions); this module adds the constructor, the queries and ``handle``.
The records are in :mod:`._state`, receipt packing and ledger costs in
:mod:`._receipts`, the phases in :mod:`._phases`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._base import Command, Event
from .._json import MAX_SAFE_INTEGER
from ..wire._common import is_op_id
from ..wire.env import DeliveryCursor
from ._events import (
    ActivateAssignment,
    AwaitReady,
    DropAll,
    DropAssignment,
    EnvFrameReceived,
    ExpectActivation,
    ReadinessDeadline,
    SettleActivation,
    ValueReadCompleted,
    ValueReadFailed,
)
from ._lanes import _Lanes
from ._order import locale_key
from ._phases import EXHAUSTED, LIVE
from ._state import (
    DEFAULT_POLICY_EPOCHS,
    MAX_POLICY_EPOCHS,
    ReplicaLimits,
    ReplicaStatus,
    ReplicaView,
    ViewEntry,
    ViewProject,
    _serves,
)

__all__ = ["ReplicaManager"]


def _safe_limit(v: object) -> bool:
    return type(v) is int and 1 <= v <= MAX_SAFE_INTEGER


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


#: The handler of each event type :meth:`ReplicaManager.handle` answers,
#: by the event's exact type (a subclass of an event, like any other event,
#: is ignored). Each is called with the manager and the event.
_HANDLERS: Final[dict[type[Event], Callable[[_Lanes, Any], None]]] = {
    EnvFrameReceived: _Lanes._on_frame,
    ValueReadCompleted: _Lanes._on_read,
    ValueReadFailed: _Lanes._on_read,
    ActivateAssignment: _Lanes._on_activate,
    ExpectActivation: _Lanes._on_expect,
    SettleActivation: _Lanes._on_settle,
    DropAssignment: _Lanes._on_drop,
    DropAll: _Lanes._on_drop_all,
    AwaitReady: _Lanes._on_await,
    ReadinessDeadline: _Lanes._on_deadline,
}


class ReplicaManager(_Lanes):
    """The per-task env replica manager (``ProjectEnvTaskReplicaManager``).

    Args:
        boot_id: this runner process's boot id (``OP_ID``); frames carrying
            another get ``runner_boot_mismatch``.
        policy_epochs: the policy epochs this runner understands: 1–64
            unique safe integers ≥ 1 (copied; default
            :data:`DEFAULT_POLICY_EPOCHS`).
        limits: replay-ledger limits (default :class:`ReplicaLimits`).

    Raises:
        ValueError: ``"invalid task replica manager identity"`` for an invalid
            boot id, policy epochs or limits (ER-002). Construction is the
            only call that raises; :meth:`handle` never does.

    Reference: ``ProjectEnvTaskReplicaManager`` constructor (ER-001–ER-004).
    """

    def __init__(
        self,
        *,
        boot_id: str,
        policy_epochs: tuple[int, ...] | list[int] | None = None,
        limits: ReplicaLimits | None = None,
    ) -> None:
        epochs = DEFAULT_POLICY_EPOCHS if policy_epochs is None else policy_epochs
        lim = ReplicaLimits() if limits is None else limits
        if (
            not is_op_id(boot_id)
            or not isinstance(epochs, tuple | list)
            or not 1 <= len(epochs) <= MAX_POLICY_EPOCHS
            or not all(type(e) is int and 1 <= e <= MAX_SAFE_INTEGER for e in epochs)
            or len(set(epochs)) != len(epochs)
            or not isinstance(lim, ReplicaLimits)
            or not all(
                _safe_limit(x)
                for x in (
                    lim.max_task_entries,
                    lim.max_task_bytes,
                    lim.max_total_entries,
                    lim.max_total_bytes,
                )
            )
            or lim.max_task_entries > lim.max_total_entries
            or lim.max_task_bytes > lim.max_total_bytes
        ):
            raise ValueError("invalid task replica manager identity")
        super().__init__(boot_id, tuple(epochs), lim)

    # ------------------------------------------------------------------
    # Read-only properties and queries

    @property
    def boot_id(self) -> str:
        """The runner boot id (``runnerBootId``)."""
        return self._boot_id

    @property
    def policy_epochs(self) -> tuple[int, ...]:
        """The manager's own copy of the policy epochs (ER-003)."""
        return self._epochs

    @property
    def ledger_totals(self) -> tuple[int, int]:
        """Process ledger totals ``(entries, bytes)`` (ER-114, ER-118)."""
        return (self._total_entries, self._total_bytes)

    def task_ledger(self, task_id: str) -> tuple[int, int] | None:
        """The task's ledger usage ``(entries, bytes)``, or ``None`` without a replica."""
        r = self._replicas.get(task_id)
        return None if r is None else (r.ledger_entries, r.ledger_bytes)

    def reader_generation(self, task_id: str, run_epoch: int) -> int | None:
        """``readerGeneration``: the run's reader generation, else ``None`` (ER-014)."""
        r = self._replicas.get(task_id)
        return r.reader_generation if r is not None and r.run_epoch == run_epoch else None

    def is_ready(self, task_id: str, run_epoch: int) -> bool:
        """``isReady`` (ER-121): exact run, gate open, no attempt, a stream."""
        r = self._replicas.get(task_id)
        return r is not None and r.run_epoch == run_epoch and _serves(r)

    def read_status(self, task_id: str) -> ReplicaStatus | None:
        """``readStatus`` (ER-127, ER-120): no values, live project ids sorted."""
        r = self._replicas.get(task_id)
        if r is None:
            return None
        return ReplicaStatus(
            task_id=task_id,
            run_epoch=r.run_epoch,
            runner_boot_id=self._boot_id,
            gate_open=r.phase is LIVE,
            restart_required=r.phase is EXHAUSTED,
            stream_id=r.stream_id,
            attempt_id=r.attempt.attempt_id if r.attempt is not None else None,
            applied_through=None
            if r.stream_id is None
            else DeliveryCursor(stream_id=r.stream_id, sequence=r.sequence),
            project_ids=tuple(sorted(r.live, key=_utf16)),
        )

    def read_view(
        self, task_id: str, run_epoch: int, project_ids: tuple[str, ...] | list[str]
    ) -> ReplicaView | None:
        """``readView`` (ER-124, ER-125): the committed snapshot, or ``None``.

        ``project_ids`` must list the live project set exactly, each once;
        projects come back in the caller's order, entries in
        :func:`~._order.locale_key` order. Never raises.
        """
        r = self._replicas.get(task_id)
        if (
            r is None
            or r.run_epoch != run_epoch
            or r.phase is not LIVE
            or r.attempt is not None
            or r.stream_id is None
        ):
            return None
        requested = list(project_ids)
        if not all(type(p) is str for p in requested):
            return None
        if len(set(requested)) != len(requested) or set(requested) != r.live.keys():
            return None
        projects = []
        for pid in requested:
            proj = r.live[pid]
            entries = sorted(proj.entries.values(), key=lambda e: locale_key(e.state.key))
            projects.append(
                ViewProject(
                    project_id=pid,
                    record_version=proj.record_version,
                    entries=tuple(
                        ViewEntry(state=e.state, materialization=e.mat, value=e.value)
                        for e in entries
                    ),
                )
            )
        return ReplicaView(
            task_id=task_id,
            run_epoch=run_epoch,
            runner_boot_id=self._boot_id,
            applied_through=DeliveryCursor(stream_id=r.stream_id, sequence=r.sequence),
            projects=tuple(projects),
        )

    def read_view_at(
        self,
        task_id: str,
        run_epoch: int,
        project_ids: tuple[str, ...] | list[str],
        generation: int,
    ) -> ReplicaView | None:
        """``readViewAt`` (ER-126): :meth:`read_view` if the snapshot was
        produced under reader generation ``generation``, else ``None``."""
        r = self._replicas.get(task_id)
        if r is None or r.snapshot_generation is None or r.snapshot_generation != generation:
            return None
        return self.read_view(task_id, run_epoch, project_ids)

    # ------------------------------------------------------------------
    # The entry point

    def handle(self, event: Event) -> list[Command]:
        """Apply one event; return the commands it produced, in order.

        Never raises. Events: :class:`EnvFrameReceived`,
        :class:`ValueReadCompleted`, :class:`ValueReadFailed`,
        :class:`ActivateAssignment`, :class:`ExpectActivation`,
        :class:`SettleActivation`, :class:`DropAssignment`, :class:`DropAll`,
        :class:`AwaitReady`, :class:`ReadinessDeadline`; any other event is
        ignored (no commands). Each event's handler is looked up by the
        event's exact type in :data:`_HANDLERS`.
        """
        out: list[Command] = []
        self._out = out
        on = _HANDLERS.get(type(event))
        if on is not None:
            on(self, event)
        self._out = []
        return out
