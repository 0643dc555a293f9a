"""Stateful property tests of the lease registry (Hypothesis ``RuleBasedStateMachine``).

The machine drives a :class:`~leasegate.core.registry.LeaseRegistry` through
``fuzz/registry_harness.py``'s :class:`Harness`: each rule is one of the
harness's actions (host calls, frames built from valid templates and
mutated, read / cleanup / install completions, timers, shutdown), its own
choices drawn by Hypothesis instead of fuzzer bytes. Every step is checked
by the harness (``handle`` contains no exception, answers at most once, ids,
timers, readers, no canary in an error text or a ``repr``, no gate opened
for a closed or ended run, on an expired view, during a full cleanup or
after shutdown) and, as an ``@invariant``, by the invariant monitor when it
is installed; the teardown shuts down, completes everything and checks
that every host call was answered and every reader closed.

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
from registry_kit import Driver, grant

from leasegate.core.registry import (
    CleanupFinished,
    CloseRun,
    FrameReceived,
    InstallFinished,
    OpenGate,
    ReadFailed,
    ReadParameters,
    RunCleanup,
    StartRun,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fuzz"))

import _harness
from _harness import HypothesisProvider

_H: Any = _harness.load_harness("registry_harness")
import _drive  # noqa: E402  (on the path once the harness is loaded)

_SETTINGS = settings(
    max_examples=int(os.environ.get("LEASEGATE_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_registry_completion_of_another_kind_is_ignored() -> None:
    """Found by fuzz/registry_harness.py (corpus ``bug-completion-of-another-kind-
    resolves-read``): a ``CleanupFinished`` carrying a pending *read*'s id
    resolved the read with nothing and the registry contained an
    ``AttributeError``. A completion matches only the command kind it answers
    (``docs/events-and-commands.md``: an unmatched completion returns ``[]``);
    the read stays pending and its real completion still opens the gate."""
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    (read,) = d.pending_reads
    assert isinstance(read, ReadParameters)
    assert d.feed(CleanupFinished(now_ms=d.now, cmd_id=read.cmd_id)) == []
    assert d.feed(InstallFinished(now_ms=d.now, cmd_id=read.cmd_id)) == []
    assert d.reg.internal_errors == 0
    out = d.finish_read()
    assert any(isinstance(c, OpenGate) for c in out)
    assert d.reg.internal_errors == 0


def test_registry_cleanup_completion_with_a_read_id_leaves_the_cleanup_pending() -> None:
    """The converse: a ``ReadFailed`` carrying a pending cleanup's id is
    ignored; the cleanup still completes with its own event."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant()
    d.feed(CloseRun(now_ms=d.now, call_id=d.call_id(), task_id="task-1", run_epoch=1))
    (cleanup,) = d.pending_cleanups
    assert isinstance(cleanup, RunCleanup)
    assert d.feed(ReadFailed(now_ms=d.now, cmd_id=cleanup.cmd_id, access_denied=True)) == []
    assert d.pending_cleanups == [cleanup]
    done = d.finish_cleanup()
    assert d.reg.internal_errors == 0
    assert d.reg.status("task-1") is None, done


class RegistryMachine(RuleBasedStateMachine):
    """Rules are the harness's actions; the harness checks every step."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Any = None

    @initialize(kind=st.sampled_from(["owned", "task-machine"]), data=st.data())
    def setup(self, kind: str, data: Any) -> None:
        self.h = _H.Harness(kind)
        self._use(data)
        # Every run starts with task-1 run 1 started (the rules go on from there).
        self.h.checks.started("task-1", 1)
        call = self.h.call_id("start")
        self.h.feed(StartRun(now_ms=self.h.now, call_id=call, task_id="task-1", run_epoch=1))

    def _use(self, data: Any) -> HypothesisProvider:
        p = HypothesisProvider(data)
        self.h.gate_fail = lambda: p.int_in_range(0, 7) == 7
        return p

    def _do(self, action: int, data: Any) -> None:
        self.h.do(action, self._use(data))

    @rule(data=st.data())
    def start_run(self, data: Any) -> None:
        self._do(0, data)

    @rule(data=st.data())
    def close_run(self, data: Any) -> None:
        self._do(2, data)

    @rule(data=st.data())
    def frame(self, data: Any) -> None:
        self._do(3, data)

    @rule(data=st.data())
    def complete_read(self, data: Any) -> None:
        self._do(7, data)

    @rule(data=st.data())
    def complete_cleanup(self, data: Any) -> None:
        self._do(9, data)

    @rule(data=st.data())
    def complete_install(self, data: Any) -> None:
        self._do(10, data)

    @rule(data=st.data())
    def fire_timer(self, data: Any) -> None:
        self._do(11, data)

    @rule(data=st.data())
    def advance(self, data: Any) -> None:
        self._do(13, data)

    @rule(data=st.data())
    def wait_or_cancel(self, data: Any) -> None:
        self._do(14, data)

    @rule(data=st.data())
    def refresh(self, data: Any) -> None:
        self._do(15, data)

    @rule(data=st.data())
    def project_read(self, data: Any) -> None:
        self._do(16, data)

    @rule(data=st.data())
    def fence_reconnect_send_hook(self, data: Any) -> None:
        self._do(17, data)

    @rule(data=st.data())
    def shutdown(self, data: Any) -> None:
        self._do(18, data)

    @rule(data=st.data())
    def stray_completion(self, data: Any) -> None:
        self._do(19, data)

    # Guided rules: the valid paths, so runs reach grants, reads, installs
    # and open gates (random choices alone rarely line them up).

    @rule(data=st.data())
    def grant_latest_request(self, data: Any) -> None:
        """A valid grant answering the newest ``lease.request`` sent."""
        if not self.h.ops:
            return
        self._use(data)
        op_id, task, epoch = self.h.ops[-1]
        self.h.feed(FrameReceived(now_ms=self.h.now, frame=grant(op_id, task=task, epoch=epoch)))

    @rule(data=st.data())
    def answer_reads_and_installs(self, data: Any) -> None:
        """Every pending read answered by the fake store, every install finished."""
        self._use(data)
        for _ in range(20):
            if self.h.reads:
                cmd = self.h.reads.pop(0)
                self.h.feed(self.h.ssm.answer(cmd, self.h.now))
            elif self.h.installs:
                cmd = self.h.installs.pop(0)
                self.h.feed(InstallFinished(now_ms=self.h.now, cmd_id=cmd.cmd_id))
            else:
                return

    @invariant()
    def no_contained_exception_and_no_monitor_violation(self) -> None:
        if self.h is None:
            return
        assert self.h.reg.internal_errors == 0
        if self.h.monitor is not None:
            found = _drive.monitor_findings(list(self.h.monitor.violations), self.h.checks)
            assert found == [], found

    def teardown(self) -> None:
        if self.h is not None:
            self.h.drain()


RegistryMachine.TestCase.settings = _SETTINGS
test_registry_state_machine = RegistryMachine.TestCase
