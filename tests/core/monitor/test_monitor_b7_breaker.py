"""Breaker B7: the monitor's precision rules of session 3 (helper M).

Rule (1): a same-epoch ``BeginStart``/``ResumeRecovered`` while a close of
that run is unanswered (a ``CloseAssignment`` not answered yet, an
``AbandonStart`` not answered in its own step) is no new run (LR-123).
Rule (2): ``_timer_owner`` leaves a timer armed in a step about an older run
with that run when the task's cleanup in flight at the step's start is a host
close's (``stop``/``park``/``teardown``, LR-119..LR-122).

Each rule gets hand-built traces where it must apply (a real violation is
still flagged) and where it must not (no false alarm), plus runtime
mutations. Findings are documented in ``docs/monitor.md``.
"""

from __future__ import annotations

from typing import Any

import pytest
from monitor_kit import MonitoredDriver
from test_monitor_properties import T, props, run_trace

from leasegate.core._base import Command, Event
from leasegate.core.monitor import PortCall
from leasegate.core.registry import CancelTimer, StartTimer
from leasegate.core.runtime import (
    AbandonStart,
    Answer,
    BeginStart,
    CloseAssignment,
    CredentialFailure,
    CredentialRuntime,
    Failed,
    JournalRecord,
    ResumeRecovered,
    RuntimeShutdown,
    WorkDone,
)

T0 = 1_800_000_000_000
U = "task-2"


def _begin(call: int, run: int, start: int, task: str = T) -> Any:
    return (
        BeginStart(now_ms=T0, call_id=call, task_id=task, run_epoch=run),
        [],
        [Answer(call_id=call, value=start)],
    )


def _open(task: str, run: int) -> PortCall:
    return PortCall(port="mcp", method="open", task_id=task, run_epoch=run)


# ---------------------------------------------------------------------------
# Finding 1: a timer armed after shutdown was answered was never flagged.


def test_RT_136_B7_a_timer_armed_after_the_shutdown_answer_in_its_step_is_flagged() -> None:
    """The shutdown step answers the shutdown, then arms a timer: nothing can
    cancel it any more (RT-136: the shutdown resolves only after the drain and
    the second scrub). Before B7 the monitor checked the timers at the answer
    only, so this leak was flagged nowhere."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        (
            RuntimeShutdown(now_ms=T0, call_id=2),
            [],
            [Answer(call_id=2), StartTimer(timer_id=-7, delay_ms=1_000)],
        ),
    ]
    assert props(run_trace(steps)) == ["timer-armed-after-end"]


def test_RT_136_B7_a_timer_armed_in_a_step_after_the_shutdown_answer_is_flagged() -> None:
    steps: list[Any] = [
        _begin(1, 1, -1),
        (RuntimeShutdown(now_ms=T0, call_id=2), [], [Answer(call_id=2)]),
        (
            WorkDone(now_ms=T0 + 5, cmd_id=-40),
            [],
            [StartTimer(timer_id=-8, delay_ms=30_000)],
        ),
    ]
    mon = run_trace(steps)
    assert props(mon) == ["timer-armed-after-end"]
    assert mon.violations[0].step == 2
    assert "-8" in mon.violations[0].message


def test_RT_135_B7_near_miss_the_drain_bound_armed_before_the_answer_and_cancelled() -> None:
    """A correct shutdown: its drain bound is armed in its step and cleared
    when the drain finishes, before the answer (RT-135)."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        (RuntimeShutdown(now_ms=T0, call_id=2), [], [StartTimer(timer_id=-7, delay_ms=30_000)]),
        (WorkDone(now_ms=T0 + 5, cmd_id=-40), [], [CancelTimer(timer_id=-7), Answer(call_id=2)]),
        (WorkDone(now_ms=T0 + 6, cmd_id=-41), [], []),
    ]
    assert props(run_trace(steps)) == []


def test_RT_136_B7_a_runtime_arming_a_timer_after_its_shutdown_resolved_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real runtime, broken on purpose: the first step after its shutdown
    was answered arms a timer (a leak nothing cancels)."""
    real = CredentialRuntime.handle
    state: dict[str, Any] = {"shut": None, "answered": False, "leaked": None}

    def handle(self: CredentialRuntime, event: Event) -> list[Command]:
        out = list(real(self, event))
        if isinstance(event, RuntimeShutdown):
            state["shut"] = event.call_id
        if state["answered"] and state["leaked"] is None:
            state["leaked"] = -987_654
            out.append(StartTimer(timer_id=-987_654, delay_ms=5_000))
        if any(isinstance(c, (Answer, Failed)) and c.call_id == state["shut"] for c in out):
            state["answered"] = True
        return out

    monkeypatch.setattr(CredentialRuntime, "handle", handle)
    d = MonitoredDriver()
    d.usable(T, 1)
    shut = d.call(lambda c: RuntimeShutdown(now_ms=d.now, call_id=c))
    while d.pending_work:
        d.finish_work()
    d.advance(60_000)
    assert d.result(shut) is not None
    d.close(T, 1, "stop")  # one more step after the answer
    assert state["leaked"] is not None
    flagged = [v for v in d.monitor.violations if "-987654" in v.message]
    assert [v.property for v in flagged] == ["timer-armed-after-end"]
