"""Keeping a committed bundle fresh: renewal and expiry, rotations, credential refreshes.

* Bundle timers (LR-114–LR-116): a renewal (a short lease's on two thirds
  of its lifetime less a jitter, decision R1) and the expiry's full cleanup.
* Rotations (LR-091–LR-101): a ``credential.changed`` for a usable run reads
  the announced version through the committed bundle's reader, checks the
  read fence, installs and commits it; a refused credential closes the gate
  and cleans selectively first. One announced while the run is not usable is
  remembered and read once it is (decision R2).
* Credential refreshes (LR-102–LR-109): ``credential.refresh`` ops, joined per
  credential and revision, answered by a result frame, a timeout or a failed
  send.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Final

from .._json import sha256_hex
from .._sched import Co
from ..wire.lease import (
    MAX_MANIFEST_ENTRIES,
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    TaskLease,
)
from ._bundles import assert_read_fence, files_access, freeze_view, read_batch
from ._cleanup import full_cleanup, run_cleanup, run_install
from ._phases import USABLE
from ._records import (
    LEASE_RENEW_LEAD_MS,
    LEASE_REQUEST_TIMEOUT_MS,
    Bundle,
    Hold,
    LeaseError,
    Refresh,
    Run,
    Unavailable,
    unavailable_refresh,
)
from ._requests import new_op_id, request_lease
from ._vocab import (
    CallDone,
    CleanupRequest,
    InstallRequest,
    RefreshDone,
    RefreshRequested,
    SendFrame,
)

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = [
    "apply_announced",
    "arm_bundle_timers",
    "handle_changed",
    "handle_refresh_result",
    "request_refresh",
    "settle_refresh",
]


#: A lease with less than this left at a commit is *short*: the reference's
#: delay (remaining − lead) would be under a quarter of its lifetime, down to
#: the 1 s floor, so it is renewed on :func:`_renew_delay`'s fraction instead
#: (4/3 × :data:`LEASE_RENEW_LEAD_MS`, 13 min 20 s, so that a 15-minute lease
#: committed after up to 100 s of latency keeps the reference's schedule;
#: docs/registry.md, R1).
_SHORT_LEASE_MS: Final = 800_000
#: The largest jitter taken off a short lease's renewal delay, in permille.
_SHORT_RENEW_JITTER_PERMILLE: Final = 100


def _renew_delay(lease: TaskLease, expires_at: int, now: int) -> int:
    """Milliseconds from ``now`` until the renewal of ``lease``, effective expiry ``expires_at``.

    An ordinary lease (at least 13 min 20 s, :data:`_SHORT_LEASE_MS`, left)
    keeps the reference's delay, ``max(1 000, expires_at − 600 000 − now)``
    (LR-114). A short lease is renewed after two thirds of its remaining
    lifetime less a jitter of 0–10 % of that, never before 1 000 ms: at most
    one renewal per lease lifetime, instead of one a second (docs/registry.md,
    decision R1). The jitter is deterministic, drawn from the SHA-256 of the
    task id, run epoch, lease id and expiry, so that runners renewing leases
    of one length spread out while the same events still give the same
    commands. Never raises.
    """
    remaining = expires_at - now
    if remaining >= _SHORT_LEASE_MS:
        return max(1_000, remaining - LEASE_RENEW_LEAD_MS)
    seed = f"{lease.task_id}\x00{lease.run_epoch}\x00{lease.lease_id}\x00{expires_at}"
    permille = int(sha256_hex(seed)[:8], 16) % (_SHORT_RENEW_JITTER_PERMILLE + 1)
    return max(1_000, remaining * 2 * (1_000 - permille) // 3_000)


class _BundleTimer:
    """A bundle timer's callback: stale once the run's timer or its generation moved on.

    One small object per armed timer (a run holds two while open), not a
    closure with its cells.
    """

    __slots__ = ("generation", "m", "st", "timer_id")

    def __init__(self, m: LeaseRegistry, st: Run) -> None:
        self.m = m
        self.st = st
        self.generation = st.generation
        self.timer_id = 0


class _Renewal(_BundleTimer):
    __slots__ = ()

    def __call__(self) -> Co[None]:
        # LR-115: the renewal attempts a lease.request (nothing if one is pending), gate open
        # meanwhile.
        st = self.st
        if st.renewal_timer != self.timer_id or st.generation != self.generation:
            return
        st.renewal_timer = None
        request_lease(self.m, st)
        yield from ()


class _Expiry(_BundleTimer):
    __slots__ = ()

    def __call__(self) -> Co[None]:
        m, st = self.m, self.st
        if st.expiry_timer != self.timer_id or st.generation != self.generation:
            return
        st.expiry_timer = None
        yield from m._close_gate(st, "expired")
        fut = yield from full_cleanup(m, st, "expired")
        m._background(fut, st.assignment)


def arm_bundle_timers(m: LeaseRegistry, st: Run) -> None:
    """``#armBundleTimers`` (LR-114–LR-116; a short lease's renewal: decision R1)."""
    b = st.bundle
    if b is None:
        return
    m._clear_timer(st.renewal_timer)
    m._clear_timer(st.expiry_timer)
    renew = _Renewal(m, st)
    expire = _Expiry(m, st)
    renew.timer_id = st.renewal_timer = m._start_timer(
        _renew_delay(b.lease, b.expires_at, m._now), renew
    )
    expire.timer_id = st.expiry_timer = m._start_timer(max(0, b.expires_at - m._now), expire)


def handle_changed(m: LeaseRegistry, frame: CredentialChanged) -> Co[None]:
    """``handleCredentialChanged`` (LR-091–LR-101)."""
    st = m._tasks.get(frame.task_id)
    if st is None or st.assignment.run_epoch != frame.run_epoch:
        return
    if m._is_active(st) and not m._usable(st):
        _announce(st, frame.credential_id, frame.revision, frame.version)
        return
    yield from _changed(m, st, frame.credential_id, frame.revision, frame.version)


def _changed(
    m: LeaseRegistry, st: Run, credential_id: str, revision: str, version: int
) -> Co[None]:
    """Apply one announced version; its failure is reported, then a request (LR-091)."""
    try:
        yield from _apply_version(m, st, credential_id, revision, version)
    except Exception as error:  # noqa: BLE001
        m._report(error, st.assignment)
        if m._is_active(st):
            request_lease(m, st)


def _announce(st: Run, credential_id: str, revision: str, version: int) -> None:
    """Remember a rotation announced while the run is not usable (decision R2).

    LR-091 ignores it; the port keeps the highest version per credential
    id (a later revision replaces an earlier one) and re-reads it once a
    grant is usable (:func:`apply_announced`), through every check of
    :func:`_apply_version`. At most ``MAX_MANIFEST_ENTRIES`` credential
    ids are kept: a manifest cannot name more; further ones are ignored.
    """
    known = st.announced.get(credential_id)
    if known is not None and known[0] == revision and known[1] >= version:
        return
    if known is None and len(st.announced) >= MAX_MANIFEST_ENTRIES:
        return
    st.announced[credential_id] = (revision, version)


def apply_announced(m: LeaseRegistry, st: Run) -> None:
    """Once the run is usable, re-read the rotations announced before (decision R2)."""
    if not st.announced or not m._usable(st):
        return
    announced, st.announced = st.announced, {}
    for credential_id, (revision, version) in announced.items():
        m._sched.spawn(_changed(m, st, credential_id, revision, version))


def _assert_refusal_fence(m: LeaseRegistry, st: Run, bundle: Bundle, generation: int) -> None:
    """``#assertRefusalFence`` (LR-096)."""
    if (
        not m._is_active(st)
        or st.phase is not USABLE
        or st.gate_close_failed
        or st.full_cleanup is not None
        or st.bundle is not bundle
        or st.generation != generation
        or bundle.expires_at <= m._now
        or bundle.lease.manifest_revision < st.min_revision
    ):
        raise Unavailable("a refused credential's cleanup crossed an assignment fence")


def _apply_version(
    m: LeaseRegistry, st: Run, credential_id: str, revision: str, version: int
) -> Co[None]:
    """``#applyCredentialVersion`` (LR-091–LR-101)."""
    # LR-094: a change that is no refusal installs with reason "credential-change", gate open;
    # LR-095: a refusal closes the gate, holds and cleans selectively; LR-097: a failed refusal
    # close runs the full cleanup in background; LR-098: a failure after a hold, an install or
    # while quarantined runs the full cleanup; LR-099: an access-denied credential is read
    # again on a newer version, no refusal.
    if not m._usable(st):
        return
    bundle = st.bundle
    assert bundle is not None
    generation = st.generation
    current = bundle.records.get(credential_id)
    current_desc = bundle.descs[credential_id] if current is not None else None
    if (
        current is None
        or current_desc is None
        or current_desc.revision != revision
        or current_desc.auth_kind == "none"
        or not current_desc.parameter
        or not current_desc.session_id
        or current_desc.location is None
        or version <= max(current_desc.version or 0, current.observed_version or 0)
    ):
        return
    reader = bundle.readers.get(current_desc.session_id)
    if reader is None:
        raise LeaseError("credential session is missing")
    selector = f"{current_desc.parameter}:{version}"
    replacement = dict(bundle.records)
    desc = dataclasses.replace(current_desc, version=version)
    yield from read_batch(m, reader, [desc], (selector,), replacement)
    assert_read_fence(m, st, bundle, generation)
    nxt = Bundle(
        lease=bundle.lease,
        expires_at=bundle.expires_at,
        readers=bundle.readers,
        records=replacement,
        # The record was read with the new version: its descriptor says so.
        descs={**bundle.descs, credential_id: desc},
        project_sessions=bundle.project_sessions,
        view=freeze_view(bundle.lease, bundle.expires_at, replacement),
        grant_id=bundle.grant_id,
    )
    new_rec = replacement.get(credential_id)
    refused = (
        current.availability == "available"
        and new_rec is not None
        and new_rec.availability == "access-denied"
    )
    hold = Hold()
    if refused:
        if not (yield from m._close_gate(st, "manifest-narrowed")):
            fut = yield from full_cleanup(m, st, "manifest-narrowed")
            m._background(fut, st.assignment)
            return
        st.gate_holds += 1
        hold.holding = True
    attempted = False

    def fence() -> None:
        # LR-136: a change fails its fence when a grant commits, a floor rises, the bundle
        # expires or the run ends.
        if refused:
            _assert_refusal_fence(m, st, bundle, generation)
        else:
            assert_read_fence(m, st, bundle, generation)

    def is_current() -> bool:
        try:
            fence()
        except LeaseError:
            return False
        return True

    try:
        if refused:
            yield run_cleanup(
                m,
                st,
                CleanupRequest(
                    assignment=st.assignment,
                    mode="selective",
                    reason="lease-replaced",
                    removed=(current_desc.identity,),
                    remove_files_session=False,
                ),
            )
            _assert_refusal_fence(m, st, bundle, generation)
        request = InstallRequest(
            assignment=st.assignment,
            owner_org_id=bundle.lease.org_id,
            owner_user_id=bundle.lease.user_id,
            previous=bundle.view,
            next=nxt.view,
            files=files_access(m, nxt),
            reason="credential-change",
            project_set_changed=False,
        )
        attempted = m._install_external
        yield run_install(m, st, request, is_current, bundle, lambda: False)
        fence()
        st.bundle = nxt
        st.generation += 1
        arm_bundle_timers(m, st)
        yield from m._release(st, hold)
    except Exception:
        if (hold.holding or attempted or st.gate_close_failed) and m._is_active(st):
            escalation = yield from full_cleanup(m, st, "manifest-narrowed")
            yield from m._release(st, hold)
            with contextlib.suppress(Exception):  # the cleanup owns its retry
                yield escalation
        yield from m._release(st, hold)
        raise


def request_refresh(m: LeaseRegistry, ev: RefreshRequested) -> None:
    """``requestCredentialRefresh`` (LR-102–LR-105)."""
    st = m._tasks.get(ev.task_id)
    if st is None or st.assignment.run_epoch != ev.run_epoch or not m._usable(st):
        m._emit(CallDone(call_id=ev.call_id, error="task credentials are not usable"))
        return
    assert st.bundle is not None
    rec = st.bundle.records.get(ev.credential_id)
    if (
        rec is None
        or ev.revision is None
        or st.bundle.descs[ev.credential_id].revision != ev.revision
    ):
        m._emit(CallDone(call_id=ev.call_id, error="credential is not in the active manifest"))
        return
    key = (ev.credential_id, ev.revision)
    existing = st.refresh_by_key.get(key)
    if existing is not None:
        existing.call_ids.append(ev.call_id)
        return
    op_id = new_op_id(m, "refresh", st)
    holder: list[Refresh] = []

    def timeout() -> Co[None]:
        ref = holder[0]
        if st.refresh_by_op.get(ref.op_id) is ref:
            del st.refresh_by_op[ref.op_id]
            st.refresh_by_key.pop(ref.key, None)
            for call_id in ref.call_ids:
                m._emit(RefreshDone(call_id=call_id, result=unavailable_refresh(op_id)))
        yield from ()

    tid = m._start_timer(LEASE_REQUEST_TIMEOUT_MS, timeout)
    cid = m._id()
    ref = Refresh(
        op_id=op_id,
        key=key,
        assignment=st.assignment,
        credential_id=ev.credential_id,
        revision=ev.revision,
        generation=st.generation,
        timer_id=tid,
        send_cmd=cid,
        call_ids=[ev.call_id],
    )
    holder.append(ref)
    st.refresh_by_op[op_id] = ref
    st.refresh_by_key[key] = ref
    m._emit(
        SendFrame(
            cmd_id=cid,
            frame=CredentialRefresh(
                op_id=op_id,
                task_id=ev.task_id,
                run_epoch=ev.run_epoch,
                credential_id=ev.credential_id,
                revision=ev.revision,
            ),
        )
    )


def settle_refresh(
    m: LeaseRegistry, st: Run, ref: Refresh, result: CredentialRefreshResult
) -> None:
    """Answer every call waiting on refresh ``ref`` with ``result``, once (LR-109)."""
    if st.refresh_by_op.get(ref.op_id) is not ref:
        return
    m._clear_timer(ref.timer_id)
    del st.refresh_by_op[ref.op_id]
    st.refresh_by_key.pop(ref.key, None)
    for call_id in ref.call_ids:
        m._emit(RefreshDone(call_id=call_id, result=result))


def handle_refresh_result(m: LeaseRegistry, frame: CredentialRefreshResult) -> Co[None]:
    """``handleRefreshResult`` (LR-106–LR-108)."""
    # LR-107: refreshed or fresh with an unchanged generation is applied as a
    # credential.changed.
    st: Run | None = None
    ref: Refresh | None = None
    for cand in m._tasks.values():
        found = cand.refresh_by_op.get(frame.op_id)
        if found is not None:
            st, ref = cand, found
            break
    if st is None or ref is None:
        return
    if not m._is_active(st) or st.assignment != ref.assignment or st.generation != ref.generation:
        settle_refresh(m, st, ref, unavailable_refresh(frame.op_id))
        return
    if frame.outcome in ("refreshed", "fresh") and frame.version is not None:
        try:
            yield from _apply_version(m, st, ref.credential_id, ref.revision, frame.version)
        except Exception as error:  # noqa: BLE001
            m._report(error, st.assignment)
            request_lease(m, st)
    elif frame.outcome == "needs_sign_in":
        request_lease(m, st)
    settle_refresh(m, st, ref, frame)
