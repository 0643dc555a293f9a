"""Lease requests: the run's pending ``lease.request`` op, its timeout and the retry.

A request attempt (LR-011, LR-012) sends one ``lease.request`` with a fresh op
id (LR-013) unless the run is not active, quarantined, ``recovering`` or
``lost``, has a full cleanup in flight or already a pending op; its 20 s
timeout drops the op and arms the single 30 s retry (LR-015, LR-016). A
``lease.unavailable`` for the pending op does the same at once (LR-110).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from .._sched import Co
from ..wire._common import OP_ID_RE
from ..wire.lease import LeaseUnavailable
from ._new import new_lease_request, new_send_frame
from ._phases import LOST, RECOVERING
from ._records import LEASE_REQUEST_TIMEOUT_MS, LEASE_RETRY_MS, LeaseError, PendingLease, Run

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = [
    "arm_retry",
    "cancel_pending",
    "handle_unavailable",
    "new_op_id",
    "pending_run",
    "request_lease",
]

_UNSAFE_OP_CHARS: Final = re.compile(r"[^A-Za-z0-9_-]")


def request_lease(m: LeaseRegistry, st: Run) -> None:
    """``#request`` (LR-011, LR-012)."""
    # LR-014: a send that fails cancels the timeout and arms the retry, unreported.
    if (
        not m._is_active(st)
        or st.gate_close_failed
        or st.phase in (RECOVERING, LOST)
        or st.full_cleanup is not None
        or st.pending is not None
    ):
        return
    m._clear_timer(st.retry_timer)
    st.retry_timer = None
    m._clear_timer(st.renewal_timer)
    st.renewal_timer = None
    op_id = new_op_id(m, "lease", st)

    def timeout() -> Co[None]:
        # LR-015: the 20 000 ms timeout drops a still-pending op no grant began answering and
        # arms the retry; a late grant is ignored.
        if st.pending is None or st.pending.op_id != op_id or st.pending.answering:
            return
        st.pending = None
        arm_retry(m, st)
        yield from ()

    tid = m._start_timer(LEASE_REQUEST_TIMEOUT_MS, timeout)
    cid = m._id()
    st.pending = PendingLease(op_id=op_id, timer_id=tid, send_cmd=cid)
    a = st.assignment
    m._emit(new_send_frame(cid, new_lease_request(op_id, a.task_id, a.run_epoch)))


def arm_retry(m: LeaseRegistry, st: Run) -> None:
    """``#armRetry`` (LR-016)."""
    if not m._is_active(st) or st.retry_timer is not None or st.pending is not None:
        return
    holder: list[int] = []

    def fire() -> Co[None]:
        if st.retry_timer != holder[0]:
            return
        st.retry_timer = None
        request_lease(m, st)
        yield from ()

    holder.append(m._start_timer(LEASE_RETRY_MS, fire))
    st.retry_timer = holder[0]


def cancel_pending(m: LeaseRegistry, st: Run) -> None:
    """Drop ``st``'s pending lease op and cancel its timeout (LR-010, LR-121)."""
    if st.pending is None:
        return
    m._clear_timer(st.pending.timer_id)
    st.pending = None


def new_op_id(m: LeaseRegistry, prefix: str, st: Run) -> str:
    """A fresh op id ``<prefix>-<n>-<r>`` (LR-013); raises ``LeaseError`` if not safe."""
    random = _UNSAFE_OP_CHARS.sub("", m._ids.next())[:64]
    st.sequence += 1
    op = f"{prefix}-{st.sequence}-{random or 'op'}"
    if OP_ID_RE.fullmatch(op) is None:
        raise LeaseError("could not create a safe operation id")
    return op


def pending_run(m: LeaseRegistry, op_id: str) -> Run | None:
    """The run whose pending lease op is ``op_id``, or ``None``."""
    for st in m._tasks.values():
        if st.pending is not None and st.pending.op_id == op_id:
            return st
    return None


def handle_unavailable(m: LeaseRegistry, frame: LeaseUnavailable) -> None:
    """``handleUnavailable`` (LR-110)."""
    st = pending_run(m, frame.op_id)
    if st is None:
        return
    cancel_pending(m, st)
    arm_retry(m, st)
