"""One record per task: everything the runtime keeps about a task, in one place.

:class:`TaskRecord` holds what the runtime knows of one task id: the run its
gate is open for and the generation served, the begun run and the revision
floor, its unended starts and unreleased holds, its recovery (and replaced
recoveries whose setup still runs), the env frames waiting for their acks,
the serialized cleanup queue and the owed journal rows. The runtime keeps one
``dict[str, TaskRecord]``; a record is made on a task's first use and kept
for the runtime's life (its revision floor must outlive every run, RT-011).

Where the runtime walks *all* tasks (shutdown closes begun runs and aborts
starts and holds, the scrub ends recoveries), it walks them in the order the
old per-concern tables had: the order in which that concern last became
non-empty for the task. The ``*_seq`` fields carry that order.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from ._common import Done
from ._phases import INITIAL, Phase
from ._vocab import TaskCleanupRequest

if TYPE_CHECKING:
    from ._machine import CredentialRuntime
    from ._recovery import Recovery
    from ._starts import Hold, Start

__all__ = ["Done", "TaskRecord", "TaskStatus", "task_status"]


@dataclasses.dataclass(slots=True, eq=False)
class TaskRecord:
    """The runtime's state of one task (not a public value: see :class:`TaskStatus`).

    Attributes:
        task_id: the task.
        phase: the task's phase (:mod:`._phases`), changed only by ``enter``.
        open_run: the run the task's gate is open for (``#open``), or ``None``.
        served_gen: the reader generation served while open (RT-060), or ``None``.
        gen_keys: ``id()`` of the views bound to a generation, oldest first.
        assigned: the begun run (``#assignments``), or ``None`` once closed.
        floor: the newest run admitted (RT-011), or ``None`` before any.
        starts: unended starts by start id, in begin order.
        newest: the task's newest start while not ended.
        holds: unreleased holds by hold id, in acquire order.
        recovery: the task's recovery record, or ``None``.
        replaced: replaced recoveries whose setup still runs (RT-096, RT-103).
        frame_calls: ``(call_id, work id)`` of env frames awaiting their ack, in order.
        cleanups: the serialized cleanup queue; the head is running.
        owed: owed journal rows by run; ``True`` when a whole-task cleanup is owed.
    """

    task_id: str
    phase: Phase = INITIAL
    open_run: int | None = None
    served_gen: int | None = None
    gen_keys: list[int] = dataclasses.field(default_factory=list)
    assigned: int | None = None
    floor: int | None = None
    starts: dict[int, Start] = dataclasses.field(default_factory=dict)
    newest: Start | None = None
    holds: dict[int, Hold] = dataclasses.field(default_factory=dict)
    recovery: Recovery | None = None
    replaced: list[Recovery] = dataclasses.field(default_factory=list)
    frame_calls: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    cleanups: list[tuple[TaskCleanupRequest, Done]] = dataclasses.field(default_factory=list)
    owed: dict[int, bool] = dataclasses.field(default_factory=dict)
    assigned_seq: int = 0
    starts_seq: int = 0
    holds_seq: int = 0
    recovery_seq: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """A read-only, secret-free snapshot of one task in the runtime (:meth:`status`).

    Reading it changes nothing and emits nothing; it holds ids, runs, counts
    and phase names, never a credential value, view or request. No catalog
    entry (a diagnosis aid for hosts and tests; ``docs/runtime.md``, "Queries").

    Attributes:
        task_id: the task.
        phase: the task's phase, a :class:`~._phases.Phase` value: ``"idle"``
            (no run begun, gate closed), ``"begun"`` (a run begun, gate
            closed), ``"open"`` (the gate is open for ``open_run``) or
            ``"shut"`` (the runtime shut down).
        run_epoch: the begun run (``BeginStart`` admitted it and no close of it
            started), or ``None``.
        floor: the newest run ever admitted (RT-011; older runs are refused), or ``None``.
        open_run: the run the gate is open for, or ``None``.
        served_generation: the env reader generation served while open (RT-060), or ``None``.
        starts: ids of the task's unended start tokens, in begin order.
        current_start: the live newest start id (``current_start``), or ``None``.
        holds: ``(hold_id, run_epoch)`` of the task's unreleased task-up holds, in
            acquire order.
        launch_waits: launch-ready waits registered on the task's starts.
        env_waits: runs of the installs waiting for the env snapshot (RT-070).
        env_generations: reader generations bound to the task's views, oldest first.
        activations_expected: accepted grants of the task whose expected env
            activation (RT-006) is not settled yet.
        recovery_id: the recovery record's id (its ``Abort`` id), or ``None``.
        recovery_run: the recovered run, or ``None``.
        recovery_attempts: failed start attempts of the recovery (its backoff exponent).
        recovery_retry_timer: the timer id of the recovery's armed retry (RT-106), or ``None``.
        recovery_yielded: an ordinary start of the recovered run made the recovery yield (RT-109).
        recovery_setup: ``"pending"`` (runs at its gate open), ``"running"``
            (``RunSetup`` not settled) or ``"none"``.
        replaced_setups: replaced recoveries whose setup still runs (RT-096).
        frames_pending: env frames handed to the replica whose ack is awaited.
        cleanups_queued: cleanup requests queued, the running one included.
        cleanup_in_flight: a cleanup procedure of the task runs.
        cleanup_owed: runs with an owed journal row, ascending.
        whole_cleanup_owed: the owed runs that need a whole-task cleanup (a
            cleanup of them failed, or ``Recover`` loaded them), ascending.
    """

    task_id: str
    phase: str
    run_epoch: int | None
    floor: int | None
    open_run: int | None
    served_generation: int | None
    starts: tuple[int, ...]
    current_start: int | None
    holds: tuple[tuple[int, int], ...]
    launch_waits: int
    env_waits: tuple[int, ...]
    env_generations: tuple[int, ...]
    activations_expected: int
    recovery_id: int | None
    recovery_run: int | None
    recovery_attempts: int
    recovery_retry_timer: int | None
    recovery_yielded: bool
    recovery_setup: Literal["none", "pending", "running"]
    replaced_setups: int
    frames_pending: int
    cleanups_queued: int
    cleanup_in_flight: bool
    cleanup_owed: tuple[int, ...]
    whole_cleanup_owed: tuple[int, ...]


def task_status(rt: CredentialRuntime, rec: TaskRecord) -> TaskStatus:
    """The :class:`TaskStatus` of ``rec`` in runtime ``rt`` (reads only)."""
    recovery = rec.recovery
    installs = [i for i in rt._env_waits.values() if i.request.assignment.task_id == rec.task_id]
    return TaskStatus(
        task_id=rec.task_id,
        phase=rec.phase.value,
        run_epoch=rec.assigned,
        floor=rec.floor,
        open_run=rec.open_run,
        served_generation=rec.served_gen,
        starts=tuple(rec.starts),
        current_start=rt.current_start(rec.task_id),
        holds=tuple((h.id, h.run) for h in rec.holds.values()),
        launch_waits=sum(
            1 for w in rt._waits.values() if w.start.assignment.task_id == rec.task_id
        ),
        env_waits=tuple(i.request.assignment.run_epoch for i in installs),
        env_generations=tuple(rt._gens[k][1] for k in rec.gen_keys if k in rt._gens),
        activations_expected=sum(1 for t, _ in rt._grant_tokens.values() if t == rec.task_id),
        recovery_id=None if recovery is None else recovery.id,
        recovery_run=None if recovery is None else recovery.run,
        recovery_attempts=0 if recovery is None else recovery.attempts,
        recovery_retry_timer=None if recovery is None else recovery.retry,
        recovery_yielded=recovery is not None and recovery.yielded,
        recovery_setup="none"
        if recovery is None
        else (
            "running"
            if recovery.running is not None
            else ("pending" if recovery.has_setup else "none")
        ),
        replaced_setups=len(rec.replaced),
        frames_pending=len(rec.frame_calls),
        cleanups_queued=len(rec.cleanups),
        cleanup_in_flight=bool(rec.cleanups),
        cleanup_owed=tuple(sorted(rec.owed)),
        whole_cleanup_owed=tuple(sorted(r for r, bad in rec.owed.items() if bad)),
    )
