"""Grants: validating a lease.grant, then reading, narrowing, installing and committing it.

:func:`handle_grant` answers the pending op's grant (LR-018, LR-019): the
validation before any read (LR-020–LR-023), the materialization
(:mod:`._bundles`), the candidate fence after every step (LR-039), the
preservation of newer observed versions (LR-041–LR-045), the narrowing of
removed or refused identities (LR-046–LR-052), the install (LR-053–LR-057)
and the commit, bundle timers and gate opening (LR-058–LR-065); a failure
takes the reference's catch-all path (LR-024, LR-025, LR-068, LR-132).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING

from .._sched import Co, Future
from ..wire.lease import LeaseGrant, TaskLease, lease_expires_at
from ._bundles import destroy_bundle, files_access, freeze_view, materialize, read_batch, seal
from ._cleanup import GrantFence, clear_floor, full_cleanup, run_cleanup, run_install
from ._new import new_grant_accepted, new_grant_settled, new_install_request
from ._phases import ENDED, LOST, RECOVERING
from ._plans import ManifestPlan, identities_of, lease_of, plan_for
from ._records import Bundle, Hold, LeaseError, Run, Unavailable
from ._refresh import arm_bundle_timers
from ._requests import arm_retry, request_lease
from ._vocab import CleanupRequest, Identity

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = ["handle_grant"]


def _project_set_key(lease: TaskLease) -> tuple[str, ...]:
    return tuple(sorted(p.project_id for p in lease.manifest.projects))


def handle_grant(m: LeaseRegistry, frame: LeaseGrant) -> Co[None]:
    """``handleGrant`` (LR-018, LR-019)."""
    lease = frame.lease
    st = m._tasks.get(lease.task_id)
    if (
        st is None
        or st.assignment.run_epoch != lease.run_epoch
        or st.pending is None
        or st.pending.op_id != frame.op_id
        or st.pending.answering
    ):
        return
    st.pending.answering = True
    m._clear_timer(st.pending.timer_id)
    hook = m._id()
    m._hooks[hook] = st.assignment
    m._emit(new_grant_accepted(hook, st.assignment))
    st.grants_in_flight += 1
    try:
        yield from _answer_grant(m, st, frame)
    finally:
        st.grants_in_flight -= 1
        if m._hooks.pop(hook, None) is not None:
            m._settled_hooks[hook] = st.assignment
        m._emit(new_grant_settled(hook))


def _answer_grant(m: LeaseRegistry, st: Run, frame: LeaseGrant) -> Co[None]:
    """``#answerGrant`` (LR-020–LR-065, LR-129–LR-138)."""
    # LR-053: installExternal gets the assignment, owner, previous and next views; LR-058:
    # after the post-install fence the candidate is committed in one step; LR-062: every
    # committed grant opens the gate with its view; LR-068: a failing transition holding the
    # gate starts the full cleanup before it releases its hold.
    # LR-049: a non-empty narrowing list closes the gate "manifest-narrowed", seals, cleans
    # selectively; LR-050: an empty one makes no gate call; LR-051: a failed selective cleanup
    # or fence starts the full cleanup before the hold is released; LR-052: a failed close
    # still runs the queued cleanup, then the fence fails.
    # LR-017: the op stays pending while its grant is answered; LR-024: a failed validation
    # drops the op, reports, arms the retry; LR-025: while quarantined it joins the
    # "manifest-narrowed" full cleanup instead; LR-118: a renewal grant is handled like any
    # grant; LR-132: a dropped op before any install discards and reports the grant.
    base_generation = st.generation
    candidate: Bundle | None = None
    external_attempted = False
    fence = GrantFence(m, st, base_generation, frame.op_id)
    hold = Hold()
    try:
        lease, plan = _validate_grant(m, st, frame)
        candidate = yield from materialize(m, st, lease, plan)
        _assert_candidate(m, st, frame, base_generation, candidate)
        yield from _preserve(m, st, frame, base_generation, candidate)
        _assert_candidate(m, st, frame, base_generation, candidate)

        old = st.bundle
        if old is not None:
            narrowed = _removed_identities(old, candidate) + _refused_identities(old, candidate)
        else:
            narrowed = _removed_known(st, candidate) + _refused_known(st, candidate)
        if narrowed:
            yield from m._close_gate(st, "manifest-narrowed")
            if old is not None:
                seal(old)
            st.gate_holds += 1
            hold.holding = True
            yield run_cleanup(
                m,
                st,
                CleanupRequest(
                    assignment=st.assignment,
                    mode="selective",
                    reason="lease-replaced",
                    removed=tuple(narrowed),
                    remove_files_session=False,
                ),
            )
            _assert_candidate(m, st, frame, base_generation, candidate)

        _assert_candidate(m, st, frame, base_generation, candidate)
        granted = fence.granted = candidate

        request = new_install_request(
            st.assignment,
            candidate.lease.org_id,
            candidate.lease.user_id,
            old.view if old is not None else None,
            candidate.view,
            files_access(m, candidate),
            "grant",
            old is None or _project_set_key(old.lease) != _project_set_key(candidate.lease),
        )
        external_attempted = m._install_external
        fence.installing = True
        yield run_install(m, st, request, fence, granted, fence)
        _assert_candidate(m, st, frame, base_generation, candidate)

        st.pending = None
        st.bundle = candidate
        candidate = None
        st.generation += 1
        installed = st.bundle
        installed_generation = st.generation
        st.identities = identities_of(plan, installed.records, installed.descs)
        st.wanted_revision = max(st.wanted_revision, installed.lease.manifest_revision)
        if installed.lease.manifest_revision >= st.min_revision:
            clear_floor(m, st)
        arm_bundle_timers(m, st)
        if old is not None:
            yield destroy_bundle(m, old)
        try:
            if hold.holding:
                yield from m._release(st, hold)
            else:
                yield from m._open_gate(st, installed, installed_generation)
        finally:
            fence.installing = False
        if (
            m._is_active(st)
            and st.bundle is not None
            and st.bundle.lease.manifest_revision < st.wanted_revision
        ):
            request_lease(m, st)
    except Exception as error:  # noqa: BLE001 - the reference's catch-all
        fence.installing = False
        escalation: Future[None] | None = None
        if (hold.holding or external_attempted or st.gate_close_failed) and m._is_active(st):
            escalation = yield from full_cleanup(m, st, "manifest-narrowed")
        yield from m._release(st, hold)
        if st.pending is not None and st.pending.op_id == frame.op_id:
            st.pending = None
        if candidate is not None:
            yield destroy_bundle(m, candidate)
        m._report(error, st.assignment)
        if escalation is not None:
            with contextlib.suppress(Exception):  # the cleanup owns its retry
                yield escalation
        elif m._is_active(st):
            arm_retry(m, st)


def _validate_grant(m: LeaseRegistry, st: Run, frame: LeaseGrant) -> tuple[TaskLease, ManifestPlan]:
    """``#validateGrantBeforeRead`` (LR-020–LR-023).

    Returns the lease (sharing its manifest with earlier grants of an equal
    one, :func:`._plans.lease_of`) and its manifest's plan.
    """
    # LR-090: during a narrowing a grant at or above the floor is accepted and narrowed against
    # the sealed bundle.
    lease = frame.lease
    if st.phase in (RECOVERING, LOST, ENDED) or st.gate_close_failed or st.full_cleanup is not None:
        raise Unavailable("task cleanup is in progress")
    if (lease.task_id, lease.run_epoch) != (st.assignment.task_id, st.assignment.run_epoch):
        raise LeaseError("grant belongs to another task assignment")
    plan = plan_for(m, lease.manifest, lease.manifest_digest)
    if plan is None:
        raise LeaseError("grant manifest digest does not match")
    if lease.manifest_revision < st.min_revision:
        raise LeaseError("grant is below the task's minimum revision")
    b = st.bundle
    if b is not None and lease.manifest_revision < b.lease.manifest_revision:
        raise LeaseError("grant is older than the installed manifest")
    if (
        b is not None
        and lease.manifest_revision == b.lease.manifest_revision
        and lease.manifest_digest != b.lease.manifest_digest
    ):
        raise LeaseError("grant changed the manifest without advancing its revision")
    if lease_expires_at(lease) <= m._now:
        raise LeaseError("grant is expired")
    files_sessions = [s for s in lease.sessions if s.purpose == "files"]
    if m._runner_kind == "owned":
        if files_sessions or lease.files is not None:
            raise LeaseError("owned runner received a Files session")
    elif len(files_sessions) != 1 or lease.files is None:
        raise LeaseError("task machine did not receive exactly one Files session")
    if not plan.ids_unique:
        raise LeaseError("credential ids are not unique across the manifest")
    if not plan.params_unique:
        raise LeaseError("credential parameters are not unique across the manifest")
    return lease_of(lease, plan), plan


def _assert_candidate(
    m: LeaseRegistry, st: Run, frame: LeaseGrant, base_generation: int, candidate: Bundle
) -> None:
    """``#assertCandidateCurrent`` (LR-039)."""
    # LR-133: a floor raise above the candidate or its expiry fails it while reads, cleanup or
    # install are in flight; LR-134: a full cleanup does not stop the grant's candidate fence.
    if (
        not m._is_active(st)
        or st.gate_close_failed
        or st.pending is None
        or st.pending.op_id != frame.op_id
        or st.generation != base_generation
        or candidate.lease.manifest_revision < st.min_revision
        or candidate.expires_at <= m._now
    ):
        raise Unavailable("grant became stale while it was being read")


def _preserve(
    m: LeaseRegistry, st: Run, frame: LeaseGrant, base_generation: int, candidate: Bundle
) -> Co[None]:
    """``#preserveObservedVersions`` (LR-041–LR-045)."""
    # LR-042: no preservation for a new identity or a version not above the candidate's;
    # LR-043: a session without a candidate reader fails; LR-044: reads one at a time, the
    # fence after each, the view rebuilt.
    current = st.bundle
    if current is None:
        return
    changed = False
    for cid, old in list(current.records.items()):
        old_desc = current.descs[cid]
        nxt = candidate.records.get(cid)
        nxt_desc = candidate.descs[cid] if nxt is not None else None
        old_known = max(old_desc.version or 0, old.observed_version or 0)
        next_known = (
            max(nxt_desc.version or 0, nxt.observed_version or 0)
            if nxt is not None and nxt_desc is not None
            else 0
        )
        if (
            nxt is None
            or nxt_desc is None
            or old_known == 0
            or old_known <= next_known
            or old_desc.identity != nxt_desc.identity
            or not nxt_desc.parameter
            or not nxt_desc.session_id
        ):
            continue
        reader = candidate.readers.get(nxt_desc.session_id)
        if reader is None:
            raise LeaseError("candidate credential session is missing")
        desc = dataclasses.replace(nxt_desc, version=old_known)
        selector = f"{desc.parameter}:{desc.version}"
        yield from read_batch(m, reader, [desc], (selector,), candidate.records)
        # The record was read with the pinned version: its descriptor says so.
        candidate.descs = {**candidate.descs, cid: desc}
        _assert_candidate(m, st, frame, base_generation, candidate)
        changed = True
    if changed:
        candidate.view = freeze_view(candidate.lease, candidate.expires_at, candidate.records)


def _identities(bundle: Bundle) -> list[Identity]:
    """The identity of each of ``bundle``'s records, in their order."""
    descs = bundle.descs
    return [descs[cid].identity for cid in bundle.records]


def _removed_identities(old: Bundle, nxt: Bundle) -> list[Identity]:
    keys = set(_identities(nxt))
    return [i for i in _identities(old) if i not in keys]


def _removed_known(st: Run, nxt: Bundle) -> list[Identity]:
    # LR-048 (removed identities from the remembered ones); LR-089 (a dropped below-floor
    # bundle's removals resolved through them).
    if not st.identities:
        return []
    keys = set(_identities(nxt))
    return [i for i in st.identities.values() if i not in keys and i not in st.cleaned]


def _refused_identities(old: Bundle, nxt: Bundle) -> list[Identity]:
    # LR-047: refused = committed available records whose candidate is access-denied.
    out = []
    for cid, r in old.records.items():
        rep = nxt.records.get(cid)
        ident = old.descs[cid].identity
        if (
            r.availability == "available"
            and rep is not None
            and rep.availability == "access-denied"
            and nxt.descs[cid].identity == ident
        ):
            out.append(ident)
    return out


def _refused_known(st: Run, nxt: Bundle) -> list[Identity]:
    # LR-048: without a committed bundle, from the remembered identities (not the cleaned set).
    out = []
    for cid, r in nxt.records.items():
        if r.availability != "access-denied":
            continue
        ident = nxt.descs[cid].identity
        known = st.identities.get(cid)
        if known is not None and known == ident and known not in st.cleaned:
            out.append(ident)
    return out
