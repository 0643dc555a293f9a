"""The run phases as data: ``Phase``, ``INITIAL``, ``TRANSITIONS`` and ``enter``.

The table is checked for its shape, ``enter`` for refusing what the table
does not allow, and the moves that only interleavings reach (a predecessor's
startup cleanup ending after the run already requested, committed and opened
a grant) are driven through the registry, so that every move the table
allows that way is one the registry makes.
"""

from __future__ import annotations

from typing import Any

import pytest
from registry_kit import TASK, Driver, kinds

from leasegate.core.registry import CleanupFinished, LaunchFenceFailed, RunCleanup
from leasegate.core.registry._phases import (
    ENDED,
    INITIAL,
    LOST,
    NARROWING,
    RECOVERING,
    TRANSITIONS,
    USABLE,
    WAITING,
    Phase,
    PhaseError,
    enter,
    initial_phase,
)


class _Record:
    def __init__(self, phase: Phase) -> None:
        self.phase = phase


def test_every_phase_has_its_allowed_moves_and_ended_is_final() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert all(targets <= set(Phase) for targets in TRANSITIONS.values())
    assert TRANSITIONS[ENDED] == frozenset({ENDED})
    assert all(ENDED in targets for targets in TRANSITIONS.values())
    assert [p.value for p in Phase] == [
        "recovering",
        "waiting",
        "usable",
        "narrowing",
        "lost",
        "ended",
    ]


def test_a_run_starts_waiting_or_recovering_and_no_move_leads_back_to_recovering() -> None:
    assert INITIAL is WAITING
    assert initial_phase(needs_startup=False) is INITIAL
    assert initial_phase(needs_startup=True) is RECOVERING
    assert all(RECOVERING not in targets for targets in TRANSITIONS.values())


@pytest.mark.parametrize(
    ("start", "new"),
    [
        (ENDED, WAITING),
        (ENDED, USABLE),
        (RECOVERING, USABLE),
        (RECOVERING, NARROWING),
        (LOST, USABLE),
        (LOST, NARROWING),
        (USABLE, RECOVERING),
    ],
)
def test_enter_refuses_a_move_the_table_does_not_allow(start: Phase, new: Phase) -> None:
    record = _Record(start)
    with pytest.raises(PhaseError):
        enter(record, new)
    assert record.phase is start


def test_enter_makes_every_move_the_table_allows() -> None:
    for start, targets in TRANSITIONS.items():
        for new in targets:
            record = _Record(start)
            enter(record, new)
            assert record.phase is new


def _usable_while_the_predecessor_cleanup_drains() -> tuple[Driver, RunCleanup]:
    """Epoch 2 supersedes a usable epoch 1; a launch-fence full cleanup of epoch 2
    succeeds while epoch 1's ended cleanup (epoch 2's startup) is still pending,
    so epoch 2 requests, commits and opens a grant before its startup ends."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start(epoch=2)
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=2))
    predecessor, fence = d.pending_cleanups
    assert (predecessor.request.assignment.run_epoch, predecessor.request.reason) == (
        1,
        "superseded",
    )
    assert (fence.request.assignment.run_epoch, fence.request.reason) == (2, "fence-failed")
    d.pending_cleanups.remove(fence)
    assert "send:lease.request" in kinds(d.feed(CleanupFinished(now_ms=d.now, cmd_id=fence.cmd_id)))
    assert "OpenGate" in kinds(d.grant(epoch=2))
    assert d.reg.status(TASK).phase == "usable"  # type: ignore[union-attr]
    return d, predecessor


def _stale_floor(minimum: int) -> dict[str, Any]:
    return {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": 2,
        "wantedRevision": minimum,
        "minRevision": minimum,
        "removed": [],
    }


@pytest.mark.parametrize("narrowed", [False, True], ids=["usable", "narrowing"])
def test_a_predecessor_cleanup_ending_after_a_grant_opened_moves_the_run_to_waiting(
    narrowed: bool,
) -> None:
    d, predecessor = _usable_while_the_predecessor_cleanup_drains()
    if narrowed:
        d.frame(_stale_floor(9))
        assert d.reg.status(TASK).phase == "narrowing"  # type: ignore[union-attr]
    d.pending_cleanups.remove(predecessor)
    out = d.feed(CleanupFinished(now_ms=d.now, cmd_id=predecessor.cmd_id))
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "waiting"
    assert st.pending_op is not None
    assert "done:None" in kinds(out)  # the epoch-2 start completes with its startup
