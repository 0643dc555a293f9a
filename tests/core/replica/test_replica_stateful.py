"""Stateful property tests of the env replica (Hypothesis ``RuleBasedStateMachine``).

The machine drives a :class:`~leasegate.core.replica.ReplicaManager` through
``fuzz/replica_harness.py``'s :class:`Harness`: each rule is one of the
harness's actions (frames built from the replica kit's valid builders and
mutated, read completions in every outcome, activation, expectation and
settlement, drops, readiness waits and deadlines), its own choices drawn by
Hypothesis. The harness checks every step: ``handle`` never raises, no value
in any command, status or view ``repr``, a refused frame causes nothing else
(ER-024), acks never outnumber frames, ids and timers, waiters settled at
most once, ``is_ready`` implies the live snapshot is served (ER-121,
ER-124). The ``@invariant`` re-checks the views; the teardown answers every
read, drops everything and checks that every frame got exactly one ack or
refusal (ER-026), every waiter was settled (ER-016), no plaintext is
reachable (ER-128) and the ledger totals are zero.

Example counts are bounded for CI (``LEASEGATE_STATEFUL_EXAMPLES``, default
25, and 30 steps each). Driven by events only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fuzz"))

import _harness
from _harness import HypothesisProvider

_H: Any = _harness.load_harness("replica_harness")

_SETTINGS = settings(
    max_examples=int(os.environ.get("LEASEGATE_STATEFUL_EXAMPLES", "25")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class ReplicaMachine(RuleBasedStateMachine):
    """Rules are the harness's actions; the harness checks every step."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Any = None

    @initialize(limits=st.integers(0, 2))
    def setup(self, limits: int) -> None:
        self.h = _H.Harness(_H._LIMITS[limits])

    def _do(self, action: int, data: Any) -> None:
        self.h.do(action, HypothesisProvider(data))

    @rule(data=st.data())
    def frame(self, data: Any) -> None:
        self._do(0, data)

    @rule(data=st.data())
    def complete_read(self, data: Any) -> None:
        self._do(6, data)

    @rule(data=st.data())
    def activate(self, data: Any) -> None:
        self._do(9, data)

    @rule(data=st.data())
    def expect_activation(self, data: Any) -> None:
        self._do(10, data)

    @rule(data=st.data())
    def settle_activation(self, data: Any) -> None:
        self._do(11, data)

    @rule(data=st.data())
    def drop(self, data: Any) -> None:
        self._do(12, data)

    @rule(data=st.data())
    def await_ready(self, data: Any) -> None:
        self._do(13, data)

    @rule(data=st.data())
    def readiness_deadline(self, data: Any) -> None:
        self._do(14, data)

    @rule(data=st.data())
    def stray_read_completion(self, data: Any) -> None:
        self._do(15, data)

    @invariant()
    def views_served_when_ready(self) -> None:
        if self.h is not None:
            self.h._check_views()
            assert self.h.replies <= self.h.frames

    def teardown(self) -> None:
        if self.h is not None:
            self.h.drain()


ReplicaMachine.TestCase.settings = _SETTINGS
test_replica_state_machine = ReplicaMachine.TestCase
