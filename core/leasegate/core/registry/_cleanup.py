"""Cleanups: the run's FIFO, the full cleanup, the floor's narrowing, startups, ended runs.

* The run's FIFO (LR-077): every cleanup and install of a run is queued
  behind the previous one (:func:`run_cleanup`, :func:`run_install`).
* The full cleanup (LR-070–LR-075): phase ``lost``, the gate closed, the
  bundle sealed, a full cleanup request; on success the bundle is dropped,
  identities forgotten, phase ``waiting`` and a request; on failure a report,
  ``lost`` and a 30 s retry. A denial runs it (LR-111–LR-113).
* The revision floor (LR-078–LR-090): a ``lease.stale`` raising the floor
  resolves removals and begins a narrowing: gate closed, bundle sealed, a
  selective cleanup, the 60 s grace before a full cleanup.
* The startup cleanup (LR-004, LR-007): a recovery's full cleanup, or the
  superseded predecessor's ended cleanup, joined by later starts; then phase
  ``waiting`` and a request, unless a full cleanup (a launch fence, LR-076)
  took the phase meanwhile (quirk Q11).
* An ended run's cleanup (LR-122), after its startup if one is under way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._base import Command
from .._sched import Co, Future, Join
from ..wire.lease import LeaseDeny, LeaseStale
from ._bundles import destroy_bundle, seal
from ._new import new_run_install
from ._phases import ENDED, LOST, NARROWING, WAITING, enter
from ._records import (
    LEASE_MIN_REVISION_GRACE_MS,
    LEASE_RETRY_MS,
    Bundle,
    FullReason,
    InstallRec,
    Run,
    Unavailable,
)
from ._requests import arm_retry, cancel_pending, pending_run, request_lease
from ._vocab import (
    CleanupReason,
    CleanupRequest,
    GateReason,
    Identity,
    InstallRequest,
    RunCleanup,
)

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = [
    "GrantFence",
    "clear_floor",
    "complete_ended_cleanup",
    "escalate_launch_fence",
    "finish_startup",
    "full_cleanup",
    "full_request",
    "handle_denied",
    "handle_stale",
    "run_cleanup",
    "run_install",
]


def full_request(m: LeaseRegistry, st: Run, reason: CleanupReason) -> CleanupRequest:
    """The full cleanup request for ``st`` (the Files session too on a task machine, LR-022)."""
    return CleanupRequest(
        assignment=st.assignment,
        mode="full",
        reason=reason,
        removed=(),
        remove_files_session=m._runner_kind == "task-machine",
    )


def run_cleanup(m: LeaseRegistry, st: Run, request: CleanupRequest) -> Future[None]:
    """``#runCleanup``: queue on the run's FIFO (LR-077)."""
    prev = st.tail
    st.cleanups_in_flight += 1

    def op() -> Co[None]:
        try:
            with contextlib.suppress(Exception):  # a cleanup runs after any outcome
                yield prev
            yield m._io_cmd(lambda cid: RunCleanup(cmd_id=cid, request=request))
        finally:
            st.cleanups_in_flight -= 1

    fut: Future[None] = m._sched.spawn(op()).future
    st.tail = fut
    return fut


class GrantFence:
    """A grant's install fence: the reference's ``isCurrent`` (and ``installing``) of it.

    Called with no argument, as :func:`run_install`'s ``is_current`` and
    ``installing`` (LR-055, LR-056): true while the grant is being installed
    (``installing``, set by the grant's handler), the run is active, not
    quarantined and not in a full cleanup, ``granted`` is unexpired and at or
    above the revision floor, and it is either the committed bundle or the
    run's pending op (``op_id``) is still the one at ``base_generation``.
    One object per grant; its install record keeps it while the grant is
    committed (the fence keeps the op id, not the frame).
    """

    __slots__ = ("base_generation", "granted", "installing", "m", "op_id", "st")

    def __init__(self, m: LeaseRegistry, st: Run, base_generation: int, op_id: str) -> None:
        self.m = m
        self.st = st
        self.base_generation = base_generation
        self.op_id = op_id
        self.granted: Bundle | None = None
        self.installing = False

    def __call__(self) -> bool:
        m, st, granted = self.m, self.st, self.granted
        return bool(
            self.installing
            and granted is not None
            and m._is_active(st)
            and not st.gate_close_failed
            and st.full_cleanup is None
            and granted.expires_at > m._now
            and granted.lease.manifest_revision >= st.min_revision
            and (
                st.bundle is granted
                or (
                    st.pending is not None
                    and st.pending.op_id == self.op_id
                    and st.generation == self.base_generation
                )
            )
        )


def run_install(
    m: LeaseRegistry,
    st: Run,
    request: InstallRequest,
    is_current: Callable[[], bool],
    granted: Bundle,
    installing: Callable[[], bool],
) -> Future[None]:
    """``#runInstall`` (LR-055)."""
    if st.gate_close_failed:
        return m._sched.rejected(Unavailable("task gate closure is quarantined"))
    if not m._install_external:
        return st.tail
    prev = st.tail
    st.installs_in_flight += 1

    def op() -> Co[None]:
        try:
            yield prev

            def make(cid: int) -> Command:
                m._prune_installs(st)
                m._installs[cid] = InstallRec(st, granted, is_current, installing)
                st.install_ids = (*st.install_ids, cid)
                return new_run_install(cid, request)

            yield m._io_cmd(make)
        finally:
            st.installs_in_flight -= 1

    fut: Future[None] = m._sched.spawn(op()).future
    st.tail = fut
    return fut


def full_cleanup(m: LeaseRegistry, st: Run, reason: FullReason) -> Co[Future[None]]:
    """``#fullCleanupAndContinue`` (LR-070–LR-075); never for an inactive run (quirk)."""
    # LR-071: a new full cleanup: phase lost first, in this step; LR-074: it cancels neither
    # the pending op nor the renewal, expiry or grace timers.
    if st.full_cleanup is not None:
        return st.full_cleanup
    if not m._is_active(st):
        # Reference quirk (docs/registry.md, Q2): the reference would
        # turn ``ended`` into ``lost`` here and could revive the run.
        return m._sched.resolved()
    enter(st, LOST)
    m._clear_timer(st.cleanup_retry_timer)
    st.cleanup_retry_timer = None
    task = m._sched.create(_full_cleanup_op(m, st, reason))
    op: Future[None] = task.future
    st.full_cleanup = op
    outer = m._sched.create(_full_cleanup_wrap(m, st, reason, op))
    task.step()
    yield Join(task)
    outer.step()
    return outer.future


def _full_cleanup_op(m: LeaseRegistry, st: Run, reason: FullReason) -> Co[None]:
    # LR-072: on success, with the run active, the committed bundle is dropped and destroyed
    # and the remembered identities forgotten.
    if (yield from m._close_gate(st, reason)):
        st.gate_close_failed = False
    if st.bundle is not None:
        seal(st.bundle)
    request = full_request(m, st, reason)
    yield run_cleanup(m, st, request)
    if not m._is_active(st):
        return
    yield from _drop_bundle(m, st)
    if not (yield from _retry_gate_close(m, st, reason, request, while_active=True)):
        return
    if not m._is_active(st):
        return
    enter(st, WAITING)
    clear_floor(m, st)


def _full_cleanup_wrap(m: LeaseRegistry, st: Run, reason: FullReason, op: Future[None]) -> Co[None]:
    # LR-160: a full cleanup failing in background is reported by the cleanup and by its
    # caller.
    completed = False
    try:
        yield op
        completed = True
    except Exception as error:
        m._report(error, st.assignment)
        if m._is_active(st):
            enter(st, LOST)
            yield from m._close_gate(st, "cleanup-failed")
            _arm_cleanup_retry(m, st, reason)
        raise
    finally:
        if st.full_cleanup is op:
            st.full_cleanup = None
        if completed:
            if reason == "denied":
                arm_retry(m, st)
            else:
                request_lease(m, st)


def _arm_cleanup_retry(m: LeaseRegistry, st: Run, reason: FullReason) -> None:
    """``#armCleanupRetry`` (LR-073)."""
    if not m._is_active(st) or st.cleanup_retry_timer is not None:
        return
    holder: list[int] = []

    def fire() -> Co[None]:
        if st.cleanup_retry_timer != holder[0]:
            return
        st.cleanup_retry_timer = None
        fut = yield from full_cleanup(m, st, reason)
        m._background(fut, st.assignment)

    holder.append(m._start_timer(LEASE_RETRY_MS, fire))
    st.cleanup_retry_timer = holder[0]


def clear_floor(m: LeaseRegistry, st: Run) -> None:
    """``#clearFloor``: cancel the grace, forget removals and the cleaned set (LR-058, LR-085)."""
    m._clear_timer(st.floor_timer)
    st.floor_timer = None
    st.floor_deadline = None
    st.removed.clear()
    st.cleaned.clear()
    st.floor_epoch += 1


def _has_uncleaned(st: Run) -> bool:
    return any(k not in st.cleaned for k in st.removed)


def _begin_narrowing(m: LeaseRegistry, st: Run) -> Co[None]:
    """``#beginNarrowing`` (LR-083–LR-088)."""
    # LR-085: a 60 000 ms grace deadline after a successful close; LR-087: below the floor
    # without uncleaned removals, no selective cleanup runs.
    if st.phase is LOST or st.full_cleanup is not None:
        return
    below = bool(st.bundle and st.bundle.lease.manifest_revision < st.min_revision)
    removed = [i for k, i in st.removed.items() if k not in st.cleaned]
    if not below and not removed:
        return
    enter(st, NARROWING)
    closed = yield from m._close_gate(st, "minimum-revision")
    if st.bundle is not None:
        seal(st.bundle)
    if not closed:
        fut = yield from full_cleanup(m, st, "minimum-revision")
        m._background(fut, st.assignment)
        return
    if st.floor_deadline is None:
        st.floor_deadline = m._now + LEASE_MIN_REVISION_GRACE_MS
        deadline = st.floor_deadline
        holder: list[int] = []

        def grace() -> Co[None]:
            if st.floor_timer != holder[0] or st.floor_deadline != deadline:
                return
            st.floor_timer = None
            if m._is_active(st) and (
                st.bundle is None or st.bundle.lease.manifest_revision < st.min_revision
            ):
                fut = yield from full_cleanup(m, st, "minimum-revision")
                m._background(fut, st.assignment)

        holder.append(m._start_timer(LEASE_MIN_REVISION_GRACE_MS, grace))
        st.floor_timer = holder[0]
    if removed:
        bundle = st.bundle
        cleanup = run_cleanup(
            m,
            st,
            CleanupRequest(
                assignment=st.assignment,
                mode="selective",
                reason="minimum-revision",
                removed=tuple(removed),
                remove_files_session=False,
            ),
        )
        m._sched.spawn(_after_floor_cleanup(m, st, cleanup, bundle, removed))


def _after_floor_cleanup(
    m: LeaseRegistry, st: Run, cleanup: Future[None], bundle: Bundle | None, removed: list[Identity]
) -> Co[None]:
    floor_epoch = st.floor_epoch
    try:
        yield cleanup
    except Exception as error:  # noqa: BLE001
        m._report(error, st.assignment)
        _arm_selective_retry(m, st)
        return
    try:
        if st.floor_epoch == floor_epoch:
            # Quirk Q12 (docs/registry.md): only into the cleaned set of
            # the floor it was started for, never a later one's.
            for i in removed:
                st.cleaned[i] = None
        if (
            bundle is not None
            and m._is_active(st)
            and st.bundle is bundle
            and bundle.lease.manifest_revision < st.min_revision
        ):
            st.bundle = None
            st.generation += 1
            yield destroy_bundle(m, bundle)
    except Exception as error:  # noqa: BLE001
        m._report(error, st.assignment)
        _arm_selective_retry(m, st)


def _arm_selective_retry(m: LeaseRegistry, st: Run) -> None:
    """``#armSelectiveCleanupRetry`` (LR-088)."""
    if not m._is_active(st) or st.cleanup_retry_timer is not None:
        return
    if st.phase is LOST or st.full_cleanup is not None:
        return
    holder: list[int] = []

    def fire() -> Co[None]:
        if st.cleanup_retry_timer != holder[0]:
            return
        st.cleanup_retry_timer = None
        if (
            st.bundle is not None and st.bundle.lease.manifest_revision < st.min_revision
        ) or _has_uncleaned(st):
            yield from _begin_narrowing(m, st)

    holder.append(m._start_timer(LEASE_RETRY_MS, fire))
    st.cleanup_retry_timer = holder[0]


def finish_startup(m: LeaseRegistry, st: Run) -> Co[Future[None]]:
    """``#finishStartup``: the startup cleanup, joined by later starts (LR-004, LR-007)."""
    if st.startup is None:
        if m._is_active(st):
            enter(st, WAITING)
            request_lease(m, st)
        return m._sched.resolved()
    if st.startup_future is not None:
        return st.startup_future
    task = m._sched.create(_startup_op(m, st))
    fut: Future[None] = task.future
    st.startup_future = fut
    # The caller that starts the startup gets a future settled only after
    # the startup is cleared, as the reference's ``.finally()`` chain: the
    # callers that joined it resume first (decision R4, docs/registry.md).
    first: Future[None] = Future(m._sched)

    def clear() -> None:
        if st.startup_future is fut:
            st.startup_future = None
        if fut.error is not None:
            first.reject(fut.error)
        else:
            first.resolve(None)

    fut.add(clear)
    task.step()
    yield Join(task)
    return first


def _startup_op(m: LeaseRegistry, st: Run) -> Co[None]:
    startup = st.startup
    assert startup is not None
    kind, pred = startup
    if kind == "predecessor" and pred is not None:
        yield from complete_ended_cleanup(m, pred, "superseded")
    else:
        yield run_cleanup(m, st, full_request(m, st, "recovery"))
    st.startup = None
    if not m._is_active(st):
        return
    if st.full_cleanup is not None:
        # Quirk Q11 (docs/registry.md): a full cleanup started during the
        # startup (a launch fence) owns the phase; it sets ``waiting`` and
        # requests when it succeeds.
        return
    enter(st, WAITING)
    request_lease(m, st)


def escalate_launch_fence(m: LeaseRegistry, task_id: str, run_epoch: int) -> Co[None]:
    """``escalateLaunchFence`` (LR-076)."""
    st = m._tasks.get(task_id)
    if st is None or st.assignment.run_epoch != run_epoch or not m._is_active(st):
        return
    fut = yield from full_cleanup(m, st, "fence-failed")
    m._background(fut, st.assignment)


def complete_ended_cleanup(m: LeaseRegistry, st: Run, reason: GateReason) -> Co[None]:
    """``#completeEndedCleanup`` (LR-122)."""
    if st.startup is not None:
        fut = yield from finish_startup(m, st)
        yield fut
    if st.gate_close_failed and (yield from m._close_gate(st, reason)):
        st.gate_close_failed = False
    request = full_request(m, st, reason)
    yield run_cleanup(m, st, request)
    yield from _drop_bundle(m, st)
    yield from _retry_gate_close(m, st, reason, request, while_active=False)


def _drop_bundle(m: LeaseRegistry, st: Run) -> Co[None]:
    """After a full cleanup: drop the run's bundle (a new generation), destroy
    it and forget the remembered identities (LR-072, LR-122)."""
    bundle = st.bundle
    st.bundle = None
    st.generation += 1
    if bundle is not None:
        yield destroy_bundle(m, bundle)
    st.identities = {}


def _retry_gate_close(
    m: LeaseRegistry, st: Run, reason: GateReason, request: CleanupRequest, *, while_active: bool
) -> Co[bool]:
    """While the gate's close failed: close it again and repeat the cleanup.

    Returns ``False`` when ``while_active`` and the run stopped being active
    after a repeated cleanup (the caller stops), else ``True``.

    Raises:
        Unavailable: the gate's close failed again (the run stays quarantined).
    """
    while st.gate_close_failed:
        if not (yield from m._close_gate(st, reason)):
            raise Unavailable("task gate closure failed; assignment remains quarantined")
        st.gate_close_failed = False
        yield run_cleanup(m, st, request)
        if while_active and not m._is_active(st):
            return False
    return True


def handle_denied(m: LeaseRegistry, frame: LeaseDeny) -> Co[None]:
    """``handleDenied`` (LR-111–LR-113); its rejection is not re-reported (docs/registry.md)."""
    st = pending_run(m, frame.op_id)
    if st is None:
        return
    cancel_pending(m, st)
    yield from m._close_gate(st, "denied")
    fut = yield from full_cleanup(m, st, "denied")
    with contextlib.suppress(Exception):  # already reported by the cleanup's path
        yield fut


def handle_stale(m: LeaseRegistry, frame: LeaseStale) -> Co[None]:
    """``handleStale`` (LR-078–LR-083)."""
    # LR-079: a stale frame at or below the handled floor is ignored; LR-081: a higher
    # minRevision raises the floor and resolves the removals; LR-089: removals resolved through
    # the remembered identities.
    st = m._tasks.get(frame.task_id)
    if st is None or st.assignment.run_epoch != frame.run_epoch or st.phase is ENDED:
        return
    installed = st.bundle.lease.manifest_revision if st.bundle is not None else 0
    handled = max(st.min_revision, installed)
    min_rev = frame.min_revision
    if frame.wanted_revision <= st.wanted_revision and (min_rev or 0) <= handled:
        return
    st.wanted_revision = max(st.wanted_revision, frame.wanted_revision)
    if min_rev is not None:
        already = min_rev <= handled
        st.min_revision = max(st.min_revision, min_rev)
        if not already:
            for cid in frame.removed:
                b = st.bundle
                ident = (
                    b.descs[cid].identity
                    if b is not None and cid in b.records
                    else st.identities.get(cid)
                )
                if ident is None:
                    continue
                st.removed[ident] = ident
            if (
                st.bundle is not None and st.bundle.lease.manifest_revision < st.min_revision
            ) or _has_uncleaned(st):
                yield from _begin_narrowing(m, st)
    cancel_pending(m, st)
    request_lease(m, st)
