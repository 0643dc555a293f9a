"""The status view of a live runner: typed, value-free snapshots from pure core queries.

Both shells' ``status()`` return a :class:`RunnerStatus` built by
:func:`runner_status` from the runtime's pure queries only — the registry's
``status`` and ``current_view`` (the lease expiry and manifest revision; the
view's values are never touched), the env replica's ``read_status`` (the
delivery cursor), the runtime's ``current_start``/``startup_status``/
``open_run``/``tracked`` — plus the journal's owed cleanups and the shell's
armed timers. Nothing in it is a secret: ids, counts, phases, revisions,
times (milliseconds since the epoch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from leasegate.core.runtime import OwedCleanup

__all__ = ["EnvCursor", "PendingOps", "RunnerStatus", "TaskStatus", "runner_status"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvCursor:
    """The env replica's delivery cursor of a run (ER-127): what it applied through.

    Attributes:
        stream_id: the delivery stream's id (an op id, not a secret).
        sequence: the last applied sequence number on that stream.
    """

    stream_id: str
    sequence: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PendingOps:
    """The registry's operations in flight for a run (``RunStatus`` counts).

    Attributes:
        lease_request: a lease request is outstanding (a pending op id).
        grants: grants being handled.
        installs: bundle installs queued or running.
        cleanups: cleanups queued or running.
        full_cleanup: a full cleanup is in flight.
        refreshes: credential refreshes waiting for the cloud.
        waiters: host calls waiting for the run to become usable.
        holds: gate holds taken (narrowings, refusals in progress).
    """

    lease_request: bool
    grants: int
    installs: int
    cleanups: int
    full_cleanup: bool
    refreshes: int
    waiters: int
    holds: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """One task's registered run, as the core sees it now.

    Attributes:
        task_id: the task.
        run_epoch: the run registered for it.
        phase: the registry's phase (``recovering``, ``waiting``, ``usable``,
            ``narrowing``, ``lost``, ``ended``).
        startup: the current start's state (``pending``, ``done``,
            ``failed``), or ``None`` without a start.
        gate_open: the registry considers the gate open.
        serving: the runtime's gate is open for this run (``open_run``).
        quarantined: a gate close failed and no full cleanup lifted it.
        lease_expires_at_ms: the committed lease's expiry (ms since the
            epoch), or ``None`` while the run is not usable.
        manifest_revision: the installed bundle's manifest revision, or ``None``.
        revision_floor: the minimum revision the cloud asked for.
        wanted_revision: the revision the cloud asked for.
        env_cursor: the env replica's delivery cursor, or ``None`` (no
            replica for the task, or no stream yet).
        pending: the registry's operations in flight.
        timers: names of the run's armed timers (``renewal``, ``retry``,
            ``expiry``, ``floor``, ``cleanup-retry``).
        owed_cleanups: ``(run_epoch, reason)`` of the task's journal rows owed.
    """

    task_id: str
    run_epoch: int
    phase: str
    startup: str | None
    gate_open: bool
    serving: bool
    quarantined: bool
    lease_expires_at_ms: int | None
    manifest_revision: int | None
    revision_floor: int
    wanted_revision: int
    env_cursor: EnvCursor | None
    pending: PendingOps
    timers: tuple[str, ...]
    owed_cleanups: tuple[tuple[int, str], ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunnerStatus:
    """What a live runner holds now (both shells' ``status()``).

    Attributes:
        now_ms: when the snapshot was taken (the shell's clock, ms since the epoch).
        tasks: every task with a registered run, in the order the host began them.
        owed_cleanups: every journal row still owed (also those of tasks
            without a registered run), oldest first; ``None`` when the
            durable journal could not be read.
        timers_armed: timers armed in the shell's timer heap (every core timer).
        tracked: the runtime's tracked work outstanding (labels, no values).
    """

    now_ms: int
    tasks: tuple[TaskStatus, ...]
    owed_cleanups: tuple[OwedCleanup, ...] | None
    timers_armed: int
    tracked: tuple[str, ...]


def runner_status(
    runtime: Any,
    *,
    now_ms: int,
    tasks: Iterable[str],
    owed: tuple[OwedCleanup, ...] | None,
    timers_armed: int,
) -> RunnerStatus:
    """A :class:`RunnerStatus` of ``runtime`` from its pure queries (never raises on them).

    Args:
        runtime: a :class:`~leasegate.core.runtime.CredentialRuntime`.
        now_ms: the time to ask the registry's committed view for, ms since the epoch.
        tasks: the task ids to look at (those the host began), in order;
            tasks with no registered run are left out (tasks of ``owed``
            rows are looked at too).
        owed: the journal's owed rows, or ``None`` when unreadable.
        timers_armed: the shell's armed timers.

    A query that raises (a runtime double without it) leaves its field at
    ``None``/empty. Calls no ``handle``; reveals no value.
    """
    order: dict[str, None] = dict.fromkeys(tasks)
    for row in owed or ():
        order.setdefault(row.task_id, None)
    rows = [_task_status(runtime, task, now_ms, owed or ()) for task in order]
    try:
        tracked = tuple(str(label) for label in runtime.tracked())
    except Exception:  # noqa: BLE001 - a runtime double without the query
        tracked = ()
    return RunnerStatus(
        now_ms=now_ms,
        tasks=tuple(r for r in rows if r is not None),
        owed_cleanups=owed,
        timers_armed=timers_armed,
        tracked=tracked,
    )


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a missing query leaves its field empty
        return None


def _task_status(
    runtime: Any, task: str, now_ms: int, owed: tuple[OwedCleanup, ...]
) -> TaskStatus | None:
    st = _try(runtime.registry.status, task)
    if st is None:
        return None
    run = int(st.assignment.run_epoch)
    view = _try(runtime.registry.current_view, task, run, now_ms)
    start = _try(runtime.current_start, task)
    startup = _try(runtime.startup_status, start) if type(start) is int else None
    replica = getattr(runtime, "_replica", None)
    rs = _try(replica.read_status, task) if replica is not None else None
    cursor = getattr(rs, "applied_through", None) if rs is not None else None
    if rs is not None and rs.run_epoch != run:
        cursor = None
    return TaskStatus(
        task_id=task,
        run_epoch=run,
        phase=str(st.phase),
        startup=None if startup is None else str(startup.startup),
        gate_open=bool(st.gate_open),
        serving=_try(runtime.open_run, task) == run,
        quarantined=bool(st.quarantined),
        lease_expires_at_ms=None if view is None else int(view.expires_at),
        manifest_revision=st.installed_revision,
        revision_floor=int(st.min_revision),
        wanted_revision=int(st.wanted_revision),
        env_cursor=None
        if cursor is None
        else EnvCursor(stream_id=str(cursor.stream_id), sequence=int(cursor.sequence)),
        pending=PendingOps(
            lease_request=st.pending_op is not None,
            grants=int(st.grants),
            installs=int(st.installs),
            cleanups=int(st.cleanups),
            full_cleanup=bool(st.full_cleanup),
            refreshes=len(st.refreshes),
            waiters=int(st.waiters),
            holds=int(st.holds),
        ),
        timers=tuple(st.timers),
        owed_cleanups=tuple((o.run_epoch, o.reason) for o in owed if o.task_id == task),
    )
