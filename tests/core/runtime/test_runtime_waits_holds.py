"""RT-027 … RT-049: the launch-ready wait, task-up holds, end and abandon."""

from __future__ import annotations

from runtime_kit import TASK, RtDriver, of

from leasegate.core.registry import CancelTimer, StartTimer, TaskView, WaitCancelled
from leasegate.core.runtime import (
    LAUNCH_READY_DEADLINE_MS,
    AbandonStart,
    CredentialFailure,
    EndStart,
    Failed,
    HoldInfo,
    Interrupt,
    InterruptStarts,
    ReleaseHold,
    RuntimeShutdown,
)

TAKEOVER = CredentialFailure.interrupted("takeover")
SHUTDOWN = CredentialFailure.interrupted("shutdown")
INTERRUPTED = CredentialFailure(message="this start was interrupted")
DEADLINE = CredentialFailure(message="the task's credentials did not arrive in time")
WITHDRAWN = CredentialFailure(message="the task's credentials were withdrawn")


def test_RT_027_wait_on_a_dead_token_rejects_without_timer_or_registry() -> None:
    d = RtDriver()
    s = d.begin()
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    n = len(d.out)
    w = d.wait(s)
    assert d.error(w) == INTERRUPTED
    assert of(d.out[n:], StartTimer) == []
    assert d.rt.registry.status(TASK).waiters == 0


def test_RT_028_one_deadline_timer_covers_both_phases() -> None:
    d = RtDriver()
    s = d.begin()
    n = len(d.out)
    d.wait(s)
    timers = [t for t in of(d.out[n:], StartTimer) if t.timer_id < 0]
    assert [t.delay_ms for t in timers] == [LAUNCH_READY_DEADLINE_MS] == [180_000]


def test_RT_029_deadline_rejects_and_cancels_the_registry_wait() -> None:
    d = RtDriver()
    s = d.begin()
    w = d.wait(s)
    d.advance(LAUNCH_READY_DEADLINE_MS - 1)
    assert d.result(w) is None
    d.advance(1)
    assert d.error(w) == DEADLINE
    assert d.rt.registry.status(TASK).waiters == 0  # type: ignore[union-attr]


def test_RT_030_deadline_or_interrupt_before_startup_settles_rejects_at_once() -> None:
    d = RtDriver()
    d.usable(run=1)
    d.hold_work = lambda c: c.op == "cleanup"  # run 2's startup cleanup never settles
    s = d.begin(run=2)
    w = d.wait(s)
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    assert d.error(w) == TAKEOVER
    s3 = d.begin(run=3)
    w3 = d.wait(s3)
    d.advance(LAUNCH_READY_DEADLINE_MS)
    assert d.error(w3) == DEADLINE


def test_RT_031_startup_failure_rejects_the_wait_unwrapped() -> None:
    d = RtDriver()
    d.usable(run=1)
    d.hold_work = lambda c: c.op == "cleanup"
    s = d.begin(run=2)
    w = d.wait(s)
    assert d.result(w) is None
    d.finish_work(ok=False)
    while d.pending_work:
        d.finish_work()
    err = d.error(w)
    assert err == CredentialFailure(message="credential lease operation failed")
    assert d.rt.registry.status(TASK).waiters == 0  # type: ignore[union-attr]


def test_RT_032_usable_phase_resolves_with_the_registrys_view() -> None:
    d = RtDriver()
    s = d.begin()
    w = d.wait(s)
    d.grant()
    view = d.value(w)
    assert isinstance(view, TaskView)
    assert view is d.rt.registry.current_view(TASK, 1, d.now)


def test_RT_033_interrupt_rejects_the_wait_with_the_tokens_reason() -> None:
    for phase in ("startup", "usable"):
        d = RtDriver()
        if phase == "startup":
            d.usable(run=1)
            d.hold_work = lambda c: c.op == "cleanup"
        s = d.begin(run=2)
        w = d.wait(s)
        d.begin(run=3)
        assert d.error(w) is TAKEOVER or d.error(w) == TAKEOVER
        assert d.rt.start_reason(s) == d.error(w)


def test_RT_034_ended_token_wait_rejects_when_the_view_comes() -> None:
    d = RtDriver()
    s = d.begin()
    w = d.wait(s)
    d.feed(EndStart(now_ms=d.now, start_id=s))
    assert d.result(w) is None  # endStart does not wake the wait
    d.grant()
    assert d.error(w) == INTERRUPTED


def test_RT_035_a_settled_wait_clears_its_timer_and_leaves_the_set() -> None:
    d = RtDriver()
    s = d.begin()
    n = len(d.out)
    w = d.wait(s)
    timer = next(t for t in of(d.out[n:], StartTimer) if t.timer_id < 0)
    d.grant()
    assert d.value(w) is not None
    assert any(isinstance(c, CancelTimer) and c.timer_id == timer.timer_id for c in d.out)
    assert d.rt.status(TASK).launch_waits == 0  # type: ignore[union-attr]


def test_RT_036_shutdown_rejects_pending_waits_and_never_joins_them() -> None:
    d = RtDriver()
    d.usable(run=1)
    d.hold_work = lambda c: c.op == "cleanup"
    s = d.begin(run=2)
    w_start = d.wait(s)  # startup phase
    d2 = RtDriver()
    s2 = d2.begin()
    w_use = d2.wait(s2)  # usable phase
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    d2.feed(RuntimeShutdown(now_ms=d2.now, call_id=1))
    assert d.error(w_start) == SHUTDOWN
    assert d2.error(w_use) == CredentialFailure(message="task assignment ended")
    assert "wait" not in d2.rt.tracked()


def test_RT_037_no_hold_for_a_dead_token_and_no_git_touched() -> None:
    d = RtDriver()
    s = d.usable()
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    assert d.hold(s).value is None  # type: ignore[union-attr]
    assert d.person.holds == []


def test_RT_038_no_hold_unless_the_exact_run_is_open() -> None:
    d = RtDriver()
    s = d.begin()
    assert d.hold(s).value is None  # type: ignore[union-attr]
    d.grant()
    assert isinstance(d.hold(s).value, HoldInfo)  # type: ignore[union-attr]
    # the registry still has a usable view, but the runtime's open run is gone
    assert d.rt.registry.current_view(TASK, 1, d.now) is not None
    # Fault injection: the runtime's open record is cleared only by its close hook, which the
    # registry sends as it withdraws that view; the two are made to disagree to test the check.
    d.rt._tasks[TASK].open_run = None
    n = len(d.person.holds)
    assert d.hold(s).value is None  # type: ignore[union-attr]
    assert len(d.person.holds) == n


def test_RT_039_no_hold_when_the_registry_has_no_view() -> None:
    d = RtDriver()
    s = d.usable()
    d.now += 3 * 3_600_000  # past expiry, without firing the registry's timers
    assert d.hold(s).value is None  # type: ignore[union-attr]
    assert d.person.holds == []


def test_RT_040_unreadable_git_credentials_refuse_the_hold() -> None:
    d = RtDriver()
    s = d.usable()
    d.person.unreadable = True
    r = d.hold(s)
    assert isinstance(r, Failed)
    assert r.error == CredentialFailure(message="the task's GitHub sign-in could not be read")
    assert d.rt.status(TASK).holds == ()  # type: ignore[union-attr]


def test_RT_041_hold_carries_assignment_view_git_and_a_combined_signal() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    assert h.assignment.task_id == TASK
    assert h.assignment.run_epoch == 1
    assert h.view is d.rt.registry.current_view(TASK, 1, d.now)
    assert h.git is d.person.holds[0]
    d.feed(Interrupt(now_ms=d.now, start_id=s))  # the start's signal aborts the hold
    assert d.aborts("hold", h.hold_id) == [TAKEOVER]


def test_RT_041_a_released_hold_is_aborted_when_its_start_is_aborted_afterwards() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    assert d.aborts("hold", h.hold_id) == []
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    # As AbortSignal.any([fence, git, start]): the hold's signal follows its start's.
    assert d.aborts("start", s) == [TAKEOVER]
    assert d.aborts("hold", h.hold_id) == [TAKEOVER]
    assert d.person.holds[0].released == 1  # released once, never again


def test_RT_041_a_released_hold_of_an_ended_start_is_not_aborted_by_shutdown() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    d.feed(EndStart(now_ms=d.now, start_id=s))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=99))
    assert d.aborts("start", s) == []  # an ended start has no signal left to abort
    assert d.aborts("hold", h.hold_id) == []


def test_RT_042_two_holds_are_independent() -> None:
    d = RtDriver()
    s = d.usable()
    a = d.hold(s).value  # type: ignore[union-attr]
    b = d.hold(s).value  # type: ignore[union-attr]
    d.feed(ReleaseHold(now_ms=d.now, hold_id=a.hold_id))
    assert [h for h, _ in d.rt.status(TASK).holds] == [b.hold_id]  # type: ignore[union-attr]
    d.close()
    assert d.rt.hold_reason(b.hold_id) == WITHDRAWN
    assert d.aborts("hold", a.hold_id) == []


def test_RT_043_release_is_idempotent_and_releases_git_once() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    for _ in range(3):
        d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    assert d.person.holds[0].released == 1
    assert d.rt.status(TASK).holds == ()  # type: ignore[union-attr]
    assert "hold" not in d.rt.tracked()


def test_RT_044_unreleased_hold_is_tracked_and_aborting_never_releases() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    assert "hold" in d.rt.tracked()
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    assert "hold" in d.rt.tracked()
    assert d.person.holds[0].released == 0
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    assert "hold" not in d.rt.tracked()


def test_RT_045_end_start_removes_the_token_without_aborting() -> None:
    d = RtDriver()
    s = d.begin()
    d.feed(EndStart(now_ms=d.now, start_id=s))
    assert d.rt.current_start(TASK) is None
    assert d.aborts("start", s) == []
    d.feed(EndStart(now_ms=d.now, start_id=s))
    d.feed(EndStart(now_ms=d.now, start_id=-77_777))
    assert d.rt.status(TASK).starts == ()  # type: ignore[union-attr]


def test_RT_046_ending_a_superseded_token_keeps_the_newest() -> None:
    d = RtDriver()
    t1 = d.begin()
    t2 = d.begin()
    d.feed(EndStart(now_ms=d.now, start_id=t1))
    assert d.rt.current_start(TASK) == t2


def test_RT_047_abandon_releases_the_hold_before_the_close() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    d.feed(AbandonStart(now_ms=d.now, call_id=9, start_id=s, hold_id=h.hold_id))
    assert d.person.holds[0].released == 1
    # released before the close: the hold was never fenced by the close
    assert d.aborts("hold", h.hold_id) == []
    assert d.person.holds[0].released == 1
    assert d.value(9) is None
    assert d.rt.current_start(TASK) is None


def test_RT_048_abandon_of_the_newest_closes_with_stop() -> None:
    d = RtDriver()
    s = d.usable()
    d.feed(InterruptStarts(now_ms=d.now, task_id=TASK))  # interrupted, still newest
    d.feed(AbandonStart(now_ms=d.now, call_id=9, start_id=s))
    assert d.rt.registry.status(TASK) is None or d.rt.registry.status(TASK).phase == "ended"  # type: ignore[union-attr]
    assert d.value(9) is None
    cleanups = [c for c in d.out if type(c).__name__ == "JournalRecord"]
    assert cleanups[-1].reason == "stop"


def test_RT_049_abandon_of_a_superseded_or_ended_token_closes_nothing() -> None:
    d = RtDriver()
    t1 = d.usable()
    h = d.hold(t1).value  # type: ignore[union-attr]
    t2 = d.begin()
    n = len(d.out)
    d.feed(AbandonStart(now_ms=d.now, call_id=9, start_id=t1, hold_id=h.hold_id))
    assert d.value(9) is None
    assert d.person.holds[0].released == 1
    assert [c for c in d.out[n:] if type(c).__name__ == "JournalRecord"] == []
    d.feed(EndStart(now_ms=d.now, start_id=t2))
    d.feed(AbandonStart(now_ms=d.now, call_id=10, start_id=t2))
    assert [c for c in d.out[n:] if type(c).__name__ == "JournalRecord"] == []
    assert WaitCancelled  # imported vocabulary
