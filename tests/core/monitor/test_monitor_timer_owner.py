"""timer-armed-after-end: which run a timer belongs to.

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

from monitor_kit import MonitoredDriver
from test_monitor_properties import T, ev, props, run_trace

from leasegate.core.registry import CancelTimer, StartTimer
from leasegate.core.runtime import (
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    CredentialFailure,
    EndStart,
    Failed,
    JournalRecord,
    ResumeRecovered,
    RuntimeShutdown,
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


# ---------------------------------------------------------------------------
# RT-034: a launch wait outlives its ended start until its deadline.
# False positive found by walking seeds 60..6000 (seeds 776 and 4228): the
# host ends a start (``AbandonStart``/``EndStart``) while its launch wait is
# still in its startup phase; ``endStart`` does not wake the wait (RT-034),
# so its 180 s deadline (RT-028) is rightly armed when the run's close settles.


def _waiting_then_closed(end_start: bool) -> list[Any]:
    steps: list[Any] = [
        (
            BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=1),
            [],
            [Answer(call_id=1, value=-1)],
        ),
        (
            AwaitLaunchReady(now_ms=T0, call_id=2, start_id=-1),
            [],
            [StartTimer(timer_id=-5, delay_ms=180_000)],
        ),
    ]
    if end_start:
        steps.append((EndStart(now_ms=T0, start_id=-1), [], []))
    steps.append(
        (
            CloseAssignment(now_ms=T0, call_id=3, task_id=T, run_epoch=1, reason="stop"),
            [],
            [Answer(call_id=3)],
        )
    )
    return steps


def test_RT_034_near_miss_the_pending_launch_wait_of_an_ended_start_keeps_its_deadline() -> None:
    assert props(run_trace(_waiting_then_closed(end_start=True))) == []


def test_RT_034_the_launch_wait_deadline_of_a_start_not_ended_is_still_flagged() -> None:
    assert props(run_trace(_waiting_then_closed(end_start=False))) == ["timer-armed-after-end"]


def test_RT_035_a_settled_waits_deadline_left_armed_is_still_flagged() -> None:
    steps = _waiting_then_closed(end_start=True)
    steps.insert(3, (ev(), [], [Failed(call_id=2, error=CredentialFailure(message="x"))]))
    assert props(run_trace(steps)) == ["timer-armed-after-end"]


def test_RT_036_the_deadline_of_an_ended_starts_wait_is_flagged_at_shutdown() -> None:
    steps = _waiting_then_closed(end_start=True)
    steps += [
        (RuntimeShutdown(now_ms=T0, call_id=9), [], []),
        (ev(), [], [Answer(call_id=9)]),
    ]
    assert props(run_trace(steps)) == ["timer-armed-after-end"]


# ---------------------------------------------------------------------------
# A step about an older run while a host close's cleanup of it is in
# flight cannot complete the newest run's startup (that startup waits for
# ``superseded``/``recovery``/``cleanup-failed`` cleanups, which the runtime
# runs only after this one ended): its timers stay the older run's.


def _older_runs_close_settles(reason: str) -> list[Any]:
    return [
        (
            BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=1),
            [],
            [Answer(call_id=1, value=-1)],
        ),
        (
            CloseAssignment(now_ms=T0, call_id=7, task_id=T, run_epoch=1, reason="stop"),
            [],
            [JournalRecord(cmd_id=-22, task_id=T, run_epoch=1, reason=reason)],
        ),
        (
            BeginStart(now_ms=T0, call_id=2, task_id=T, run_epoch=2),
            [],
            [Answer(call_id=2, value=-2)],
        ),
        (
            WorkDone(now_ms=T0, cmd_id=-22, error=None),
            [],
            [StartTimer(timer_id=-30, delay_ms=3_600_000), Answer(call_id=7)],
        ),
    ]


def test_RT_106_a_timer_armed_by_a_host_close_cleanup_step_is_the_older_runs() -> None:
    for reason in ("stop", "park", "teardown"):
        mon = run_trace(_older_runs_close_settles(reason))
        assert props(mon) == ["timer-armed-after-end"], reason
        v = mon.violations[0]
        assert (v.task_id, v.run_epoch, v.step) == (T, 1, 3)
        assert "[-30]" in v.message


def test_RT_106_near_miss_a_startup_cleanup_step_arms_the_newest_runs_timer() -> None:
    """The newest run's startup waits for these cleanups: a step that ends
    one may arm its retry or launch deadline (RT-106, RT-005)."""
    for reason in ("superseded", "recovery", "cleanup-failed"):
        assert props(run_trace(_older_runs_close_settles(reason))) == [], reason


# ---------------------------------------------------------------------------
# RT-088, RT-028: a step's commands are applied together. A close of a run
# whose recovery cleanup is still running waits for it; when that cleanup
# fails, one step fails the close (RT-088), then cancels the launch wait's
# deadline and fails the wait. No event comes between a step's commands (the
# reference clears the deadline in the same turn), so the deadline cancelled
# after the close's answer was not left armed (a false positive before: fuzz
# corpus regress-wait-deadline-cancelled-after-failed-close).


def _failed_close_then(last: list[Any]) -> list[Any]:
    """Run 3's recovery start, its launch wait, a stop close waiting for the
    recovery cleanup; the cleanup's failure step ends with ``last``."""
    return [
        (
            BeginStart(now_ms=T0, call_id=3, task_id=T, run_epoch=3, recovery=True),
            [],
            [
                JournalRecord(cmd_id=-7, task_id=T, run_epoch=3, reason="recovery"),
                Answer(call_id=3, value=-3),
            ],
        ),
        (WorkDone(now_ms=T0, cmd_id=-7), [], []),
        (
            AwaitLaunchReady(now_ms=T0, call_id=6, start_id=-3),
            [],
            [StartTimer(timer_id=-15, delay_ms=180_000)],
        ),
        (CloseAssignment(now_ms=T0, call_id=7, task_id=T, run_epoch=3, reason="stop"), [], []),
        (
            WorkDone(now_ms=T0, cmd_id=-13, error=CredentialFailure(message="mcp failed")),
            [],
            [Failed(call_id=7, error=CredentialFailure(message="x")), *last],
        ),
    ]


def test_RT_088_near_miss_a_wait_deadline_cancelled_after_the_failed_close_in_its_step() -> None:
    failed_wait = Failed(call_id=6, error=CredentialFailure(message="x"))
    assert props(run_trace(_failed_close_then([CancelTimer(timer_id=-15), failed_wait]))) == []


def test_RT_088_a_wait_deadline_left_armed_past_the_failed_close_is_still_flagged() -> None:
    for last in ([], [CancelTimer(timer_id=-99)]):
        mon = run_trace(_failed_close_then(last))
        assert props(mon) == ["timer-armed-after-end"], last
        v = mon.violations[0]
        assert (v.task_id, v.run_epoch, v.step) == (T, 3, 4)
        assert "[-15]" in v.message


def test_RT_088_a_deadline_cancelled_only_in_a_later_step_is_still_flagged() -> None:
    steps = _failed_close_then([])
    steps.append((ev(), [], [CancelTimer(timer_id=-15)]))
    assert props(run_trace(steps)) == ["timer-armed-after-end"]


def test_RT_088_the_runtime_failing_a_close_on_its_recovery_cleanup_leaves_no_timer() -> None:
    """The runtime itself: the failing cleanup's step answers the close before
    it cancels the wait's deadline, and the monitor takes the step whole."""
    d = MonitoredDriver()
    d.hold_work = lambda c: c.op == "cleanup"
    start = d.begin(run=3, recovery=True)
    wait = d.wait(start)
    close = d.close(run=3, reason="stop")
    assert d.result(close) is None
    last = next(w for w in d.pending_work if w.consumer == "mcp")
    for w in [w for w in d.pending_work if w is not last]:
        d.finish_work(w)
    got = d.finish_work(last, ok=False)
    failed = [i for i, c in enumerate(got) if isinstance(c, Failed) and c.call_id == close]
    cancels = [i for i, c in enumerate(got) if isinstance(c, CancelTimer)]
    assert failed, got
    assert cancels, got
    assert min(cancels) > failed[0], got
    assert isinstance(d.result(wait), Failed)
    assert d.monitor.violations == []
    assert d.monitor.internal_errors == 0
