"""The monitor's precision rules, attacked with hand-built traces.

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
from leasegate.core.runtime._phases import Phase

T0 = 1_800_000_000_000
U = "task-2"


def _begin(call: int, run: int, start: int, task: str = T) -> Any:
    return (
        BeginStart(now_ms=T0, call_id=call, task_id=task, run_epoch=run),
        [],
        [Answer(call_id=call, value=start)],
    )


def _open(task: str, run: int) -> PortCall:
    return PortCall(port="mcp", method="open", task_id=task, run_epoch=run, raised=False)


# ---------------------------------------------------------------------------
# Finding 1: a timer armed after shutdown was answered was never flagged.


def test_RT_136_a_timer_armed_after_the_shutdown_answer_in_its_step_is_flagged() -> None:
    """The shutdown step answers the shutdown, then arms a timer: nothing can
    cancel it any more (RT-136: the shutdown resolves only after the drain and
    the second scrub). Before this rule the monitor checked the timers at the answer
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


def test_RT_136_a_timer_armed_in_a_step_after_the_shutdown_answer_is_flagged() -> None:
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


def test_RT_135_near_miss_the_drain_bound_armed_before_the_answer_and_cancelled() -> None:
    """A correct shutdown: its drain bound is armed in its step and cleared
    when the drain finishes, before the answer (RT-135)."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        (RuntimeShutdown(now_ms=T0, call_id=2), [], [StartTimer(timer_id=-7, delay_ms=30_000)]),
        (WorkDone(now_ms=T0 + 5, cmd_id=-40), [], [CancelTimer(timer_id=-7), Answer(call_id=2)]),
        (WorkDone(now_ms=T0 + 6, cmd_id=-41), [], []),
    ]
    assert props(run_trace(steps)) == []


def test_RT_136_a_runtime_arming_a_timer_after_its_shutdown_resolved_is_flagged(
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


# ---------------------------------------------------------------------------
# Rule (1): which closes keep a same-epoch start from being a new run.


def _closed_then_restarted(abandon_answered_first: bool) -> list[Any]:
    """Run 1 begun; the host closes it (call 2, draining) and abandons its
    start (call 3, joining the close: not answered in its step, RT-048); the
    close is answered; then a same-epoch start and a gate opening for run 1."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        (CloseAssignment(now_ms=T0, call_id=2, task_id=T, run_epoch=1, reason="stop"), [], []),
        (AbandonStart(now_ms=T0, call_id=3, start_id=-1, hold_id=None), [], []),
    ]
    if abandon_answered_first:
        steps.append((WorkDone(now_ms=T0, cmd_id=-50), [], [Answer(call_id=3)]))
    steps += [
        (WorkDone(now_ms=T0, cmd_id=-51), [], [Answer(call_id=2)]),
        _begin(4, 1, -2),
        (WorkDone(now_ms=T0, cmd_id=-52), [_open(T, 1)], []),
    ]
    return steps


def test_LR_123_a_start_while_only_the_abandon_close_drains_is_no_new_run() -> None:
    """The host's close settled, but the ``AbandonStart`` close of the same run
    still drains: the registry still holds the ended run (Q15), so the start
    is a no-op and a gate opening for run 1 is an open after its close."""
    mon = run_trace(_closed_then_restarted(abandon_answered_first=False))
    assert props(mon) == ["open-after-close"]
    assert (mon.violations[0].task_id, mon.violations[0].run_epoch) == (T, 1)


def test_LR_123_near_miss_a_start_after_every_close_settled_is_a_new_run() -> None:
    assert props(run_trace(_closed_then_restarted(abandon_answered_first=True))) == []


def test_LR_123_a_close_draining_for_one_task_does_not_hold_another_tasks_start() -> None:
    """Rule (1) is per task and run: task-2 run 1, closed and settled, begins
    again while task-1 run 1's close drains; task-2's gate may open."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        _begin(2, 1, -2, task=U),
        (
            CloseAssignment(now_ms=T0, call_id=3, task_id=U, run_epoch=1, reason="stop"),
            [],
            [Answer(call_id=3)],
        ),
        (CloseAssignment(now_ms=T0, call_id=4, task_id=T, run_epoch=1, reason="stop"), [], []),
        _begin(5, 1, -3, task=U),
        (WorkDone(now_ms=T0, cmd_id=-52), [_open(U, 1)], []),
        (WorkDone(now_ms=T0, cmd_id=-53), [_open(T, 1)], []),
    ]
    mon = run_trace(steps)
    assert [(v.property, v.task_id, v.step) for v in mon.violations] == [("open-after-close", T, 6)]


def test_LR_123_a_recovered_resume_while_the_close_drains_is_no_new_run() -> None:
    steps: list[Any] = [
        _begin(1, 1, -1),
        (CloseAssignment(now_ms=T0, call_id=2, task_id=T, run_epoch=1, reason="park"), [], []),
        (ResumeRecovered(now_ms=T0, task_id=T, run_epoch=1, has_setup=False), [], []),
        (WorkDone(now_ms=T0, cmd_id=-52), [_open(T, 1)], []),
    ]
    assert props(run_trace(steps)) == ["open-after-close"]


# ---------------------------------------------------------------------------
# Rule (2): a host close's cleanup in flight keeps an older run's timers.


def _older_run_step_arms_a_timer(other_task_closing: bool) -> list[Any]:
    """Task-1 run 2 supersedes run 1 (run 1's ``superseded`` cleanup, -23);
    the step completing that cleanup's journal record (about run 1) arms
    timer -30, which a newer startup may own (RT-106). With
    ``other_task_closing``, task-2's host close (stop) is in flight meanwhile:
    it must not change whose timer -30 is."""
    steps: list[Any] = [_begin(1, 1, -1), _begin(9, 1, -9, task=U)]
    if other_task_closing:
        steps.append(
            (
                CloseAssignment(now_ms=T0, call_id=10, task_id=U, run_epoch=1, reason="stop"),
                [],
                [JournalRecord(cmd_id=-22, task_id=U, run_epoch=1, reason="stop")],
            )
        )
    steps += [
        (
            BeginStart(now_ms=T0, call_id=3, task_id=T, run_epoch=2),
            [],
            [
                JournalRecord(cmd_id=-23, task_id=T, run_epoch=1, reason="superseded"),
                Answer(call_id=3, value=-2),
            ],
        ),
        (
            WorkDone(now_ms=T0, cmd_id=-23, error=CredentialFailure(message="journal failed")),
            [],
            [StartTimer(timer_id=-30, delay_ms=1_000)],
        ),
        (
            CloseAssignment(now_ms=T0, call_id=4, task_id=T, run_epoch=1, reason="stop"),
            [],
            [Answer(call_id=4)],
        ),
        (
            CloseAssignment(now_ms=T0, call_id=5, task_id=T, run_epoch=2, reason="stop"),
            [],
            [Answer(call_id=5)],
        ),
    ]
    return steps


@pytest.mark.parametrize("other_task_closing", [False, True])
def test_RT_106_another_tasks_host_close_does_not_move_a_newer_runs_timer(
    other_task_closing: bool,
) -> None:
    """Rule (2) looks at the step's own task only: the timer stays run 2's
    (no alarm at run 1's close) and is flagged when run 2's close settles."""
    mon = run_trace(_older_run_step_arms_a_timer(other_task_closing))
    assert [(v.property, v.task_id, v.run_epoch) for v in mon.violations] == [
        ("timer-armed-after-end", T, 2)
    ]


def test_RT_106_a_host_close_cleanup_of_the_older_run_keeps_its_timer() -> None:
    """The same step while task-1 run 1's own stop cleanup is in flight
    (recorded before run 2 began): no cleanup run 2's startup waits for can
    end in it, so timer -30 is run 1's, flagged when run 1's close settles."""
    steps: list[Any] = [
        _begin(1, 1, -1),
        (
            CloseAssignment(now_ms=T0, call_id=2, task_id=T, run_epoch=1, reason="stop"),
            [],
            [JournalRecord(cmd_id=-22, task_id=T, run_epoch=1, reason="stop")],
        ),
        _begin(3, 2, -2),
        (
            WorkDone(now_ms=T0, cmd_id=-22),
            [],
            [
                JournalRecord(cmd_id=-24, task_id=T, run_epoch=1, reason="superseded"),
                StartTimer(timer_id=-30, delay_ms=1_000),
            ],
        ),
        (WorkDone(now_ms=T0, cmd_id=-24), [], [Answer(call_id=2)]),
    ]
    mon = run_trace(steps)
    assert [(v.property, v.task_id, v.run_epoch, v.step) for v in mon.violations] == [
        ("timer-armed-after-end", T, 1, 4)
    ]


def test_LR_123_a_registry_restarting_a_draining_run_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real runtime with the pre-Q15 registry bug put back: a same-epoch
    start while the run's close drains forgets the ended run and registers a
    fresh one, which requests a lease and opens its gates before the close's
    cleanup ended. Rule (1) keeps the run closed, so the opening is flagged."""
    from leasegate.core.registry import LeaseRegistry

    real = LeaseRegistry._start_assignment

    def forgetful(self: Any, task_id: object, run_epoch: object, recovery: bool) -> Any:
        cur = self.status(task_id) if isinstance(task_id, str) else None
        if cur is not None and cur.phase == "ended" and cur.assignment.run_epoch == run_epoch:
            del self._tasks[task_id]
        return real(self, task_id, run_epoch, recovery)

    monkeypatch.setattr(LeaseRegistry, "_start_assignment", forgetful)
    d = MonitoredDriver()
    d.usable(T, 1)
    d.hold_work = lambda c: c.op != "install"
    close = d.close(T, 1, "stop")
    assert d.result(close) is None  # draining
    d.begin(T, 1)
    d.grant(T, 1)
    assert d.rt.open_run(T) == 1  # the bug: opened while the close drains
    assert "open-after-close" in [v.property for v in d.monitor.violations]


# ---------------------------------------------------------------------------
# Finding 2: an AbandonStart's close kept a closed run closed (rule 1) but
# never closed it: an opening after it was flagged nowhere.


def _abandoned_then_opened(answered_in_its_step: bool) -> list[Any]:
    abandon_cmds: list[Any] = [Answer(call_id=2)] if answered_in_its_step else []
    steps: list[Any] = [
        _begin(1, 1, -1),
        (AbandonStart(now_ms=T0, call_id=2, start_id=-1, hold_id=None), [], abandon_cmds),
    ]
    if not answered_in_its_step:
        steps.append((WorkDone(now_ms=T0, cmd_id=-51), [], [Answer(call_id=2)]))
    steps.append((WorkDone(now_ms=T0, cmd_id=-52), [_open(T, 1)], []))
    return steps


def test_RT_048_an_open_after_the_abandon_close_of_the_run_is_flagged() -> None:
    """``AbandonStart`` of the task's newest live start closes its run with
    ``stop`` (RT-048); not answered in its own step, it is that close. A gate
    of the run opening afterwards is an open after its close (and no start
    of the run came in between)."""
    mon = run_trace(_abandoned_then_opened(answered_in_its_step=False))
    assert [(v.property, v.task_id, v.run_epoch, v.step) for v in mon.violations] == [
        ("open-after-close", T, 1, 3)
    ]


def test_RT_049_near_miss_an_abandon_answered_in_its_step_closed_nothing() -> None:
    """Answered in its own step, the start was superseded or already ended
    (RT-049): no close happened, the run's gate may open."""
    assert props(run_trace(_abandoned_then_opened(answered_in_its_step=True))) == []


def test_RT_048_a_runtime_reopening_a_run_after_its_abandon_close_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real runtime, broken on purpose: once the host's ``AbandonStart``
    closed the run (RT-048), the next step opens the run's gates again with
    its last view (a stray reopen)."""
    real_open = CredentialRuntime._open_gate
    real_handle = CredentialRuntime.handle
    last: dict[str, Any] = {}
    state: dict[str, Any] = {"abandon": None, "closed": False, "reopened": False}

    def open_gate(self: CredentialRuntime, a: Any, view: Any) -> Any:
        last["args"] = (a, view)
        return real_open(self, a, view)

    def handle(self: CredentialRuntime, event: Event) -> list[Command]:
        if state["closed"] and not state["reopened"]:
            state["reopened"] = True
            # The broken runtime skips its own phase check too (the real one
            # refuses to open a closed run's gate: test_runtime_phases.py).
            self._tasks[T].phase = Phase.BEGUN
            real_open(self, *last["args"])
        out = list(real_handle(self, event))
        if isinstance(event, AbandonStart):
            state["abandon"] = event.call_id
            assert not any(getattr(c, "call_id", None) == event.call_id for c in out)
        if any(isinstance(c, Answer) and c.call_id == state["abandon"] for c in out):
            state["closed"] = True
        return out

    monkeypatch.setattr(CredentialRuntime, "_open_gate", open_gate)
    monkeypatch.setattr(CredentialRuntime, "handle", handle)
    d = MonitoredDriver()
    start = d.usable(T, 1)
    d.hold_work = lambda c: True
    abandon = d.call(lambda c: AbandonStart(now_ms=d.now, call_id=c, start_id=start, hold_id=None))
    d.hold_work = lambda c: False
    while d.result(abandon) is None:
        assert d.pending_work, "the abandon close never settled"
        d.finish_work()
    assert isinstance(d.result(abandon), Answer)
    d.feed(WorkDone(now_ms=d.now, cmd_id=424_242))  # the next step: the stray reopen
    assert state["reopened"]
    assert d.rt.open_run(T) == 1
    flagged = [(v.property, v.task_id, v.run_epoch) for v in d.monitor.violations]
    assert ("open-after-close", T, 1) in flagged


def _abandon_close_leaves_a_timer(cancelled: bool) -> list[Any]:
    settle: list[Any] = [CancelTimer(timer_id=-31)] if cancelled else []
    return [
        _begin(1, 1, -1),
        (
            CloseAssignment(now_ms=T0, call_id=5, task_id=T, run_epoch=1, reason="park"),
            [],
            [Answer(call_id=5)],
        ),
        _begin(6, 1, -2),  # run 1 again, after its close settled: a new incarnation
        (WorkDone(now_ms=T0, cmd_id=-60), [_open(T, 1)], [StartTimer(timer_id=-31, delay_ms=9)]),
        (AbandonStart(now_ms=T0, call_id=2, start_id=-2, hold_id=None), [], []),
        (WorkDone(now_ms=T0, cmd_id=-51), [], [*settle, Answer(call_id=2)]),
    ]


def test_RT_048_a_timer_of_the_run_left_when_its_abandon_close_settles_is_flagged() -> None:
    """The abandon close is the run's end as a ``CloseAssignment`` is: a timer
    of the run still armed when it settles is flagged there, not only at
    shutdown."""
    mon = run_trace(_abandon_close_leaves_a_timer(cancelled=False))
    assert [(v.property, v.task_id, v.run_epoch, v.step) for v in mon.violations] == [
        ("timer-armed-after-end", T, 1, 5)
    ]


def test_RT_048_near_miss_the_abandon_close_cancels_the_runs_timer() -> None:
    assert props(run_trace(_abandon_close_leaves_a_timer(cancelled=True))) == []


# ---------------------------------------------------------------------------
# No false alarm from these checks on the real runtime: random walks whose
# host abandons starts that close their run, and that go on after the
# shutdown was answered (seeds picked for having both).


@pytest.mark.parametrize("seed", [104, 127, 139, 164, 178, 206, 215, 231, 255])
def test_RT_048_RT_136_walks_with_abandon_closes_and_steps_after_shutdown_are_clean(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    import importlib

    from monitor_kit import BUILT, violations_of

    from leasegate.core.monitor import InvariantMonitor
    from leasegate.core.runtime import Recover

    walk = importlib.import_module("test_runtime_walk")
    monkeypatch.setattr(walk, "RtDriver", MonitoredDriver)
    monkeypatch.setattr(walk, "Recover", lambda **kw: Recover(**{**kw, "owed": ()}))
    seen = {"abandon_closes": 0, "after_shutdown": 0}
    real_step = InvariantMonitor._step

    def counting(self: InvariantMonitor, *args: Any) -> None:
        if self._shut_answered:
            seen["after_shutdown"] += 1
        before = len(self._abandon_closes)
        real_step(self, *args)
        seen["abandon_closes"] += max(0, len(self._abandon_closes) - before)

    monkeypatch.setattr(InvariantMonitor, "_step", counting)
    BUILT.clear()
    try:
        walk._walk(seed, replica=seed % 2 == 0)
        assert seen["abandon_closes"] > 0, seen
        assert seen["after_shutdown"] > 0, seen
        assert violations_of(BUILT) == []
    finally:
        BUILT.clear()


def test_LR_123_a_timer_leaked_by_a_start_during_the_drain_is_flagged_at_the_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real runtime, broken on purpose: the same-epoch start made while
    run 1's close drains (a no-op, LR-123) arms a timer nobody cancels. It is
    run 1's, and flagged when that close settles, not only at shutdown."""
    real = CredentialRuntime.handle

    def handle(self: CredentialRuntime, event: Event) -> list[Command]:
        out = list(real(self, event))
        if isinstance(event, BeginStart) and event.call_id == 777:
            out.append(StartTimer(timer_id=-555_555, delay_ms=60_000))
        return out

    monkeypatch.setattr(CredentialRuntime, "handle", handle)
    d = MonitoredDriver()
    d.usable(T, 1)
    d.hold_work = lambda c: True
    close = d.close(T, 1, "stop")
    assert d.result(close) is None
    d.feed(BeginStart(now_ms=d.now, call_id=777, task_id=T, run_epoch=1))
    assert isinstance(d.result(777), Answer)
    d.hold_work = lambda c: False
    while d.result(close) is None:
        assert d.pending_work, "the close never settled"
        d.finish_work()
    flagged = [v for v in d.monitor.violations if "-555555" in v.message]
    assert [(v.property, v.task_id, v.run_epoch) for v in flagged] == [
        ("timer-armed-after-end", T, 1)
    ]
