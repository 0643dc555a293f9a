"""The replica's phases as data (``replica/_phases.py``).

Every phase change of a replica goes through ``enter``; these tests check
the table itself, that ``enter`` refuses every move outside it, and that
events drive a replica through every move the table allows (ER-008,
ER-012, ER-015, ER-016, ER-033, ER-092, ER-119).
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from replica_kit import TASK, Driver, apply, begin, commit, page, staged_ref, state

from leasegate.core import replica
from leasegate.core.replica import ReplicaLimits, _phases
from leasegate.core.replica._phases import INITIAL, TRANSITIONS, Phase, PhaseError, enter

Move = tuple[Phase, Phase]


class _Record:
    def __init__(self, phase: Phase) -> None:
        self.phase = phase


def test_every_phase_has_its_moves_and_a_short_lower_case_value() -> None:
    assert set(TRANSITIONS) == set(Phase)
    for p in Phase:
        assert p.value == p.name.lower()
        assert TRANSITIONS[p] <= set(Phase)
    assert INITIAL is Phase.WAITING
    assert TRANSITIONS[Phase.DROPPED] == frozenset()


def test_a_fresh_replica_starts_in_the_initial_phase() -> None:
    d = Driver()
    d.activate()
    assert d.m._replicas[TASK].phase is INITIAL


@pytest.mark.parametrize(
    ("old", "new"),
    [(o, n) for o in Phase for n in Phase if n not in TRANSITIONS[o]],
    ids=lambda p: p.value,
)
def test_enter_refuses_a_move_outside_the_table_and_changes_nothing(old: Phase, new: Phase) -> None:
    rec = _Record(old)
    with pytest.raises(PhaseError, match=f"{old.value} cannot move to {new.value}"):
        enter(rec, new)
    assert rec.phase is old
    assert issubclass(PhaseError, AssertionError)


@pytest.mark.parametrize(
    ("old", "new"),
    [(o, n) for o in Phase for n in TRANSITIONS[o]],
    ids=lambda p: p.value,
)
def test_enter_makes_a_move_in_the_table(old: Phase, new: Phase) -> None:
    rec = _Record(old)
    enter(rec, new)
    assert rec.phase is new


@contextlib.contextmanager
def recorded_moves() -> Iterator[list[Move]]:
    """Record every ``enter`` the replica's modules make."""
    moves: list[Move] = []

    def rec(record: Any, new: Phase) -> None:
        moves.append((record.phase, new))
        enter(record, new)

    users = []
    for info in pkgutil.iter_modules(replica.__path__):
        mod = importlib.import_module(f"{replica.__name__}.{info.name}")
        if mod is not _phases and getattr(mod, "enter", None) is enter:
            users.append(mod)
    assert users, "no module of the replica calls enter"
    with contextlib.ExitStack() as stack:
        for mod in users:
            stack.enter_context(mock.patch.object(mod, "enter", rec))
        yield moves


def _live(d: Driver) -> None:
    d.activate()
    d.ready_snapshot()


def _begin(d: Driver) -> None:
    d.activate()
    assert d.one(begin("A1"))["ok"]


def _begin_again(d: Driver) -> None:
    _begin(d)
    assert d.one(begin("A2"))["ok"]


def _live_then_begin(d: Driver) -> None:
    _live(d)
    assert d.one(begin("A2"))["ok"]


def _commit_refused_by_the_ledger(d: Driver) -> None:
    d.activate()
    d.one(begin())
    d.one(page([state("A")]))
    assert d.one(commit())["code"] == "replica_restart_required"


def _live_apply_refused_by_the_ledger(d: Driver) -> None:
    _live(d)
    ack = d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    assert ack["code"] == "replica_restart_required"


def _exhausted_then_dropped(d: Driver) -> None:
    _live_apply_refused_by_the_ledger(d)
    d.drop()


def _waiting_then_dropped(d: Driver) -> None:
    d.activate()
    d.drop()


def _staging_then_all_dropped(d: Driver) -> None:
    _begin(d)
    d.drop_all()


def _live_then_replaced(d: Driver) -> None:
    _live(d)
    d.activate(run=2)


_SCENARIOS: list[tuple[Callable[[Driver], None], ReplicaLimits | None, Move]] = [
    (_begin, None, (Phase.WAITING, Phase.STAGING)),
    (_begin_again, None, (Phase.STAGING, Phase.STAGING)),
    (_live, None, (Phase.STAGING, Phase.LIVE)),
    (_live_then_begin, None, (Phase.LIVE, Phase.STAGING)),
    (
        _commit_refused_by_the_ledger,
        ReplicaLimits(max_task_entries=1),
        (Phase.STAGING, Phase.EXHAUSTED),
    ),
    (
        _live_apply_refused_by_the_ledger,
        ReplicaLimits(max_task_entries=2),
        (Phase.LIVE, Phase.EXHAUSTED),
    ),
    (_exhausted_then_dropped, ReplicaLimits(max_task_entries=2), (Phase.EXHAUSTED, Phase.DROPPED)),
    (_waiting_then_dropped, None, (Phase.WAITING, Phase.DROPPED)),
    (_staging_then_all_dropped, None, (Phase.STAGING, Phase.DROPPED)),
    (_live_then_replaced, None, (Phase.LIVE, Phase.DROPPED)),
]


@pytest.mark.parametrize(
    ("scenario", "limits", "move"), _SCENARIOS, ids=[s[0].__name__.strip("_") for s in _SCENARIOS]
)
def test_events_make_each_move(
    scenario: Callable[[Driver], None], limits: ReplicaLimits | None, move: Move
) -> None:
    d = Driver(limits=limits)
    with recorded_moves() as moves:
        scenario(d)
    assert moves[-1] == move, moves


def test_the_scenarios_cover_every_move_the_table_allows() -> None:
    allowed = {(o, n) for o in Phase for n in TRANSITIONS[o]}
    assert {move for _, _, move in _SCENARIOS} == allowed


def test_the_phase_is_the_gate_and_the_restart_mark() -> None:
    d = Driver()
    d.activate()
    r = d.m._replicas[TASK]
    status = d.m.read_status(TASK)
    assert status is not None
    assert (r.phase, status.gate_open, status.restart_required) == (Phase.WAITING, False, False)
    d.ready_snapshot()
    status = d.m.read_status(TASK)
    assert status is not None
    assert (r.phase, status.gate_open, d.m.is_ready(TASK, 1)) == (Phase.LIVE, True, True)
    d.one(begin("A2"))
    status = d.m.read_status(TASK)
    assert status is not None
    assert (r.phase, status.gate_open, d.m.is_ready(TASK, 1)) == (Phase.STAGING, False, False)
