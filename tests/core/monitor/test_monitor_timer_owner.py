"""timer-armed-after-end: which run a timer belongs to (session 2, helper R).

False positive found by the fuzzer (fuzz/corpus/runtime_harness/
bug-monitor-timer-attributed-to-context-run): a step about run 2 (the
``WorkDone`` of run 2's journal record, the predecessor cleanup of run 3's
recovered start) arms run 3's recovery retry timer (RT-106); the monitor
attributed the timer to run 2 and flagged it when run 2's close settled.
A step about a run older than the newest run begun for its task now
attributes its timers to that newest run: an older run is ended by then
(LR-005), and what such a step completes is the newer run's startup
(LR-006; RT-106's retry, RT-005's launch deadline).
"""

from __future__ import annotations

from typing import Any

from test_monitor_properties import T, props, run_trace

from leasegate.core.registry import StartTimer
from leasegate.core.runtime import (
    Answer,
    CloseAssignment,
    CredentialFailure,
    JournalRecord,
    ResumeRecovered,
    WorkDone,
)

T0 = 1_800_000_000_000


def _steps(newer_run_begun: bool) -> list[Any]:
    steps: list[Any] = [
        (
            ResumeRecovered(now_ms=T0, task_id=T, run_epoch=2, has_setup=True),
            [],
            [JournalRecord(cmd_id=-22, task_id=T, run_epoch=2, reason="superseded")],
        ),
    ]
    if newer_run_begun:
        steps.append((ResumeRecovered(now_ms=T0, task_id=T, run_epoch=3, has_setup=False), [], []))
    steps += [
        (
            WorkDone(now_ms=T0, cmd_id=-22, error=CredentialFailure(message="journal failed")),
            [],
            [StartTimer(timer_id=-30, delay_ms=1000)],
        ),
        (
            CloseAssignment(now_ms=T0, call_id=7, task_id=T, run_epoch=2, reason="park"),
            [],
            [Answer(call_id=7)],
        ),
    ]
    return steps


def test_RT_106_near_miss_a_newer_runs_recovery_retry_armed_in_an_older_runs_step() -> None:
    assert props(run_trace(_steps(newer_run_begun=True))) == []


def test_RT_106_a_timer_of_the_closed_run_itself_is_still_flagged() -> None:
    assert props(run_trace(_steps(newer_run_begun=False))) == ["timer-armed-after-end"]


def test_RT_106_the_newer_runs_timer_is_flagged_at_the_newer_runs_close() -> None:
    steps = _steps(newer_run_begun=True)
    steps.append(
        (
            CloseAssignment(now_ms=T0, call_id=8, task_id=T, run_epoch=3, reason="stop"),
            [],
            [Answer(call_id=8)],
        )
    )
    mon = run_trace(steps)
    assert props(mon) == ["timer-armed-after-end"]
    assert (mon.violations[0].task_id, mon.violations[0].run_epoch) == (T, 3)
