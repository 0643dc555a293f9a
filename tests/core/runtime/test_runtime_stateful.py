"""Stateful property tests of the runtime (Hypothesis ``RuleBasedStateMachine``).

The machine drives a :class:`~leasegate.core.runtime.CredentialRuntime` (its
registry, the real env replica or none, fake consumer ports that can be
made to fail) through ``fuzz/runtime_harness.py``'s :class:`Harness`: each
rule is one of the harness's actions (host calls at any moment, lease and
env frames built from valid templates and mutated, consumer work, setups,
journal commands and reads completing or failing, timers, port failures,
shutdown), its choices drawn by Hypothesis; two guided rules take the valid
path (a grant for the newest request; every pending read and work item
answered successfully) so runs reach installs and open gates.

The harness checks every step (``handle`` contains no exception, answers at
most once and only to calls made, ids, timers, readers, no canary in an
error or log text or a ``repr``, aborts at most once (RT-026), Git holds
released at most once (RT-043), no consumer gate opened for a closed run or
after shutdown) and the invariant monitor (``leasegate.core.monitor``) sees
every step with its port calls; the ``@invariant`` asserts the monitor has
no decisive violation. The teardown shuts down, releases every hold,
completes everything and checks that every host call was answered.

Example counts are bounded for CI (``LEASEGATE_STATEFUL_EXAMPLES``, default
40, and 30 steps each). Driven by events only: no clock, no sleeps, no AWS.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from lease_kit import grant

from leasegate.core.runtime import BeginStart, HandleFrame

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fuzz"))

import _drive
import _harness
from _harness import HypothesisProvider

_H: Any = _harness.load_harness("runtime_harness")

_SETTINGS = settings(
    max_examples=int(os.environ.get("LEASEGATE_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class RuntimeMachine(RuleBasedStateMachine):
    """Rules are the harness's actions; the harness checks every step."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Any = None

    @initialize(data=st.data())
    def setup(self, data: Any) -> None:
        self.h = _H.Harness(HypothesisProvider(data))
        self._begin("task-1", 1)

    def _begin(self, task: str, run: int) -> None:
        self.h.began = True
        self.h.checks.started(task, run)
        call = self.h.call_id("begin")
        self.h.feed(BeginStart(now_ms=self.h.now, call_id=call, task_id=task, run_epoch=run))

    def _do(self, action: int, data: Any) -> None:
        self.h.do(action, HypothesisProvider(data))

    @rule(data=st.data())
    def begin_start(self, data: Any) -> None:
        self._do(0, data)

    @rule(data=st.data())
    def await_launch_ready(self, data: Any) -> None:
        self._do(2, data)

    @rule(data=st.data())
    def acquire_hold(self, data: Any) -> None:
        self._do(3, data)

    @rule(data=st.data())
    def release_hold(self, data: Any) -> None:
        self._do(4, data)

    @rule(data=st.data())
    def end_abandon_or_interrupt(self, data: Any) -> None:
        self._do(5, data)

    @rule(data=st.data())
    def interrupt_starts_or_recovery(self, data: Any) -> None:
        self._do(6, data)

    @rule(data=st.data())
    def close_assignment(self, data: Any) -> None:
        self._do(7, data)

    @rule(data=st.data())
    def lease_frame(self, data: Any) -> None:
        self._do(8, data)

    @rule(data=st.data())
    def env_frame(self, data: Any) -> None:
        self._do(12, data)

    @rule(data=st.data())
    def complete_read(self, data: Any) -> None:
        self._do(14, data)

    @rule(data=st.data())
    def complete_work(self, data: Any) -> None:
        self._do(16, data)

    @rule(data=st.data())
    def fire_timer(self, data: Any) -> None:
        self._do(19, data)

    @rule(data=st.data())
    def advance(self, data: Any) -> None:
        self._do(21, data)

    @rule(data=st.data())
    def toggle_port_failure(self, data: Any) -> None:
        self._do(22, data)

    @rule(data=st.data())
    def resume_recovered(self, data: Any) -> None:
        self._do(24, data)

    @rule(data=st.data())
    def registry_pass_through(self, data: Any) -> None:
        self._do(25, data)

    @rule(data=st.data())
    def shutdown(self, data: Any) -> None:
        self._do(26, data)

    @rule(data=st.data())
    def stray_completion(self, data: Any) -> None:
        self._do(27, data)

    # Guided rules: the valid paths.

    @rule()
    def grant_latest_request(self) -> None:
        """A valid grant answering the newest ``lease.request`` sent."""
        if not self.h.ops:
            return
        op_id, task, epoch = self.h.ops[-1]
        call = self.h.call_id("frame")
        frame = grant(op_id, task=task, epoch=epoch)
        self.h.feed(HandleFrame(now_ms=self.h.now, call_id=call, frame=frame))

    @rule()
    def answer_everything(self) -> None:
        """Every pending read answered by the fake store, every work item done."""
        for _ in range(40):
            if self.h.reads:
                cmd = self.h.reads.pop(0)
                self.h.feed(_drive._ssm_answer(self.h.ssm, cmd, self.h.now))
            elif self.h.work:
                self.h.complete(self.h.work.pop(0), True)
            else:
                return

    @invariant()
    def no_contained_exception_and_no_monitor_violation(self) -> None:
        if self.h is None:
            return
        assert self.h.rt.internal_errors == 0
        assert self.h.rt.registry.internal_errors == 0
        if self.h.monitor is not None:
            found = _drive.monitor_findings(list(self.h.monitor.violations), self.h.checks)
            assert found == [], found

    def teardown(self) -> None:
        if self.h is not None:
            self.h.drain()


RuntimeMachine.TestCase.settings = _SETTINGS
test_runtime_state_machine = RuntimeMachine.TestCase
