"""A task's phases in the runtime (``_phases.py``): the table and the moves real runs make."""

from __future__ import annotations

import pytest
from runtime_kit import TASK, RtDriver

from leasegate.core.runtime import RuntimeShutdown
from leasegate.core.runtime._phases import (
    INITIAL,
    TRANSITIONS,
    IllegalPhaseChange,
    Phase,
    enter,
)
from leasegate.core.runtime._task import TaskRecord


def _phase(d: RtDriver) -> str:
    status = d.rt.status(TASK)
    assert status is not None
    return status.phase


def test_the_table_names_every_phase_and_shut_is_terminal() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert INITIAL is Phase.IDLE
    assert TRANSITIONS[Phase.SHUT] == frozenset()
    assert Phase.OPEN not in TRANSITIONS[Phase.IDLE]
    assert all(p.value == p.value.lower() for p in Phase)


def test_a_run_goes_idle_begun_open_and_back_then_shut() -> None:
    d = RtDriver()
    assert d.rt.status(TASK) is None
    s = d.begin()
    assert _phase(d) == "begun"
    d.wait(s)
    d.grant()
    assert _phase(d) == "open"
    d.close()
    assert _phase(d) == "idle"
    d.begin(run=2)
    assert _phase(d) == "begun"
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=9))
    assert _phase(d) == "shut"


def test_enter_refuses_a_move_the_table_does_not_allow() -> None:
    rec = TaskRecord(TASK)
    with pytest.raises(IllegalPhaseChange):
        enter(rec, Phase.OPEN)
    assert rec.phase is Phase.IDLE
    enter(rec, Phase.BEGUN)
    enter(rec, Phase.SHUT)
    with pytest.raises(IllegalPhaseChange):
        enter(rec, Phase.IDLE)


def test_reopening_a_closed_runs_gate_is_refused_by_the_phase_check() -> None:
    d = RtDriver()
    d.usable()
    view = d.rt.registry.current_view(TASK, 1, d.now)
    assert view is not None
    d.close()
    assert _phase(d) == "idle"
    # The registry never opens a closed run's gate, so no event gets here: the open hook is
    # called directly to show the phase check refuses the move.
    with pytest.raises(IllegalPhaseChange):
        d.rt._open_gate(view.assignment, view)
