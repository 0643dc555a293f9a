"""The cleanup procedure: one coroutine per request, serialized per task.

The reference's coordinator (catalog "Undefined": ``TaskCredentialCleanupCoordinator``)
is not in the reference; ``docs/runtime.md`` ("The cleanup procedure") gives
its design from its uses, in numbered steps. :func:`procedure` is those steps
top-down, each under its number. :func:`cleanup` queues a request behind the
task's running one (cleanups of one task never overlap); a request's
continuation gets the procedure's first failure, or ``None``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .._sched import Co
from ..registry import Assignment, CleanupRequest, Identity
from ..replica import DropAssignment
from ._common import CLU_CLEANING, Done, Parts, first, prefix
from ._vocab import (
    CLEANUP_CLASSES,
    ConsumerWork,
    CredentialFailure,
    JournalRecord,
    JournalSettle,
    Log,
    TaskCleanupRequest,
)

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = [
    "adapt_cleanup_request",
    "cleanup",
    "consumer_cleanup_request",
    "drain_writers",
    "procedure",
]


def adapt_cleanup_request(request: CleanupRequest, runner_kind: str) -> TaskCleanupRequest:
    """The registry's cleanup request as the procedure's (the reference's adapter).

    Reference: ``adaptLeaseCredentialCleanupRequest`` (catalog "Undefined"):
    ``stopped``/``parked``/``teardown`` map to ``stop``/``park``/``teardown``,
    every other lease reason is kept; a selective request names the unique
    credential ids of ``removed`` in order; ``lease`` is the request itself
    (RT-008). ``runner_kind`` is accepted for the Files-session decision,
    which the lease's ``remove_files_session`` already carries.
    """
    reason = {"stopped": "stop", "parked": "park", "teardown": "teardown"}.get(
        request.reason, request.reason
    )
    ids: tuple[str, ...] | None = None
    if request.mode == "selective":
        ids = tuple(dict.fromkeys(i.credential_id for i in request.removed))
    return TaskCleanupRequest(
        task_id=request.assignment.task_id,
        run_epoch=request.assignment.run_epoch,
        reason=reason,
        credential_ids=ids,
        lease=request,
        remove_files_session=request.remove_files_session,
    )


def consumer_cleanup_request(request: TaskCleanupRequest) -> CleanupRequest:
    """What the consumers' cleanups receive (RT-097; reference ``consumerCleanupRequest``).

    The lease's own request when present; else a selective request expanding
    each id across :data:`CLEANUP_CLASSES` with revision ``None``; else a full
    request with reason ``teardown``/``stopped``/``parked``/``recovery``.
    """
    if request.lease is not None:
        return request.lease
    a = Assignment(request.task_id, request.run_epoch)
    if request.credential_ids is not None:
        removed = tuple(
            Identity(cls, cid, None) for cid in request.credential_ids for cls in CLEANUP_CLASSES
        )
        return CleanupRequest(
            assignment=a,
            mode="selective",
            reason="lease-replaced",
            removed=removed,
            remove_files_session=False,
        )
    reason = {"teardown": "teardown", "stop": "stopped", "park": "parked"}.get(
        request.reason, "recovery"
    )
    return CleanupRequest(
        assignment=a,
        mode="full",
        reason=reason,  # type: ignore[arg-type]
        removed=(),
        remove_files_session=False,
    )


def cleanup(rt: CredentialRuntime, req: TaskCleanupRequest, done: Done) -> None:
    """Queue ``req`` behind the task's running cleanup; ``done`` gets its outcome."""
    queue = rt._rec(req.task_id).cleanups
    queue.append((req, done))
    if len(queue) == 1:
        rt._spawn(procedure(rt, req))


def procedure(rt: CredentialRuntime, req: TaskCleanupRequest) -> Co[None]:
    """Run one cleanup request, then start the task's next one and report this one's outcome."""
    task, run = req.task_id, req.run_epoch
    wid = rt._track("cleanup")
    rec = rt._rec(task)
    rec.owed.setdefault(run, False)
    err = yield from _steps(rt, req)
    if err is not None:
        # Any failure leaves the journal row, marked as owing a whole-task cleanup.
        rec.owed[run] = True
    rt._untrack(wid)
    queue = rec.cleanups or [(req, lambda e: None)]
    done = queue[0][1]
    if queue is rec.cleanups:
        queue.pop(0)
        if queue:
            rt._spawn(procedure(rt, queue[0][0]))
    done(err)


def _steps(rt: CredentialRuntime, req: TaskCleanupRequest) -> Co[CredentialFailure | None]:
    # RT-098: closeConsumers waits for Files with the request unchanged.
    task, run = req.task_id, req.run_epoch
    whole = req.credential_ids is None
    err: CredentialFailure | None

    # 1. JournalRecord: durable before anything destructive.
    err = yield rt._await(
        lambda cid: JournalRecord(cmd_id=cid, task_id=task, run_epoch=run, reason=req.reason)
    )
    if err is not None:
        return err

    # 2. Refuse new work and close the gate: the close fan-out, twice (the reference's
    #    refuseNewWork and closeGate hooks are both #close). A failure stops the cleanup.
    for _ in range(2):
        gate = first(rt._close(task, run))
        if gate is not None:
            return gate

    # 3. Drain writers: holds aborted and joined, a running recovered setup aborted and
    #    joined, the consumers' cleanups; then the first failure in the fixed order.
    err = yield from rt._until(functools.partial(drain_writers, rt, req))
    if err is not None:
        return err

    # 4. Files close-consumers (when Files is configured).
    if rt._files is not None:
        err = yield rt._await(
            lambda cid: ConsumerWork(
                cmd_id=cid, consumer="files", op="close-consumers", request=req
            )
        )
        if err is not None:
            return err

    # 5. Host quiesce.
    err = yield rt._await(
        lambda cid: ConsumerWork(cmd_id=cid, consumer="host", op="quiesce", request=req)
    )
    if err is not None:
        return err

    # 6. Host remove-paths.
    err = yield rt._await(
        lambda cid: ConsumerWork(cmd_id=cid, consumer="host", op="remove-paths", request=req)
    )
    if err is not None:
        return err

    # 7. Drop memory: nothing for a selective cleanup; else the replica's DropAssignment,
    #    and on teardown engines.forget and mcp.forget.
    if whole:
        _replica_drop(rt, task, run)
        if req.reason == "teardown":
            _forget(rt, task, run)

    # 8. JournalSettle for the rows this success covers: a whole-task cleanup every owed row
    #    at runs <= its run; a selective one its own run's row, if no cleanup of it failed.
    rows = rt._rec(task).owed
    runs = [r for r, bad in rows.items() if (r <= run if whole else (r == run and not bad))]
    for r in runs:
        del rows[r]
    if not runs:
        return None
    err = yield rt._await(lambda cid: JournalSettle(cmd_id=cid, task_id=task, runs=tuple(runs)))
    return err


def drain_writers(rt: CredentialRuntime, req: TaskCleanupRequest, done: Done) -> None:
    """Step 3: abort and join the writers of ``req``'s run; ``done`` gets the first failure."""
    # RT-092: holds on runs up to N are aborted, newer ones kept; RT-093: the drain waits for
    # their release; RT-094: each consumer cleanup is called once; RT-095: all drain work
    # settles before the first failure is reported.
    from . import _recovery, _starts

    task, run = req.task_id, req.run_epoch
    t = rt._rec(task)
    holds = [h for h in t.holds.values() if h.run <= run]
    for h in holds:
        _starts.abort_hold(rt, h, CredentialFailure(message=CLU_CLEANING))
    parts = Parts(["setup", "holds", "engines", "person", "mcp"], done)
    # RT-096: a running recovered setup of a run <= the cleanup's run stops
    # and is joined by a whole-task cleanup. Beyond the reference, the
    # setups of recoveries replaced by a later ResumeRecovered (RT-103)
    # are joined too: the reference only looks at the current record, so
    # a replaced setup could still write while the cleanup removed paths
    # and a new grant opened the gates (monitor walk seed 12006).
    recs = [*t.replaced]
    if t.recovery is not None:
        recs.append(t.recovery)
    setups = [
        r for r in recs if req.credential_ids is None and r.run <= run and r.running is not None
    ]
    if not setups:
        parts.fill("setup", None)
    else:
        left_setups = {r.id for r in setups}

        def one_settled(rid: int) -> None:
            left_setups.discard(rid)
            if not left_setups:
                parts.fill("setup", None)

        for r in setups:
            _recovery.abort_recovery(rt, r)
            r.waiters.append(functools.partial(one_settled, r.id))
    pending = [h for h in holds if not h.released]
    if not pending:
        parts.fill("holds", None)
    else:
        left = {h.id for h in pending}

        def one_released(hid: int) -> None:
            left.discard(hid)
            if not left:
                parts.fill("holds", None)

        for h in pending:
            h.waiters.append(functools.partial(one_released, h.id))
    consumer = consumer_cleanup_request(req)
    for name in ("engines", "person", "mcp"):
        cid = rt._id()
        rt._cont[cid] = functools.partial(parts.fill, name)
        rt._emit(ConsumerWork(cmd_id=cid, consumer=name, op="cleanup", request=consumer))


def _replica_drop(rt: CredentialRuntime, task: str, run: int) -> None:
    keys = rt._rec(task).gen_keys
    for key in list(keys):
        got = rt._gens.get(key)
        if got is None or got[0].assignment.run_epoch <= run:
            rt._gens.pop(key, None)
            keys.remove(key)
    rt._rep(DropAssignment(now_ms=rt._now, task_id=task, run_epoch=run))


def _forget(rt: CredentialRuntime, task: str, run: int) -> None:
    a = Assignment(task, run)
    try:
        rt._engines.forget(a)
    except Exception:  # noqa: BLE001
        rt._emit(Log(message=prefix(a) + "forget failed"))
    try:
        rec = rt._mcp.leased_run(task)
        if rec is not None and rec.run_epoch <= run:
            rt._mcp.forget(rec)
    except Exception:  # noqa: BLE001
        rt._emit(Log(message=prefix(a) + "forget failed"))
