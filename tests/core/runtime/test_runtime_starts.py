"""RT-010 … RT-026: start admission and the authority of the newest start."""

from __future__ import annotations

from runtime_kit import TASK, RtDriver, of

from leasegate.core.registry import SendFrame, StartTimer
from leasegate.core.runtime import (
    AbandonStart,
    Abort,
    AcquireHold,
    AwaitLaunchReady,
    CredentialFailure,
    EndStart,
    Failed,
    Interrupt,
    InterruptStarts,
    ResumeRecovered,
    RuntimeShutdown,
)

TAKEOVER = CredentialFailure.interrupted("takeover")
SHUTDOWN = CredentialFailure.interrupted("shutdown")


def test_RT_010_begin_after_shutdown_fails_and_changes_nothing() -> None:
    d = RtDriver()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    n = len(d.out)
    r = d.begin_result()
    assert isinstance(r, Failed)
    assert r.error == SHUTDOWN
    assert of(d.out[n:], SendFrame) == []
    assert d.rt.current_start(TASK) is None
    assert d.rt.registry.status(TASK) is None


def test_RT_011_older_run_refused_without_side_effects() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=5))
    s5 = d.rt.current_start(TASK)
    assert s5 is not None
    n = len(d.out)
    r = d.begin_result(run=4)
    assert isinstance(r, Failed)
    assert r.error.message == "a newer run of this task has begun"
    assert d.rt.start_reason(s5) is None
    assert d.rt.has_recovery(TASK)
    assert of(d.out[n:], SendFrame) == []


def test_RT_012_same_or_newer_run_admitted_floor_never_lowers() -> None:
    d = RtDriver()
    d.begin(run=3)
    d.begin(run=3)
    d.begin(run=4)
    cid = d.close(run=4)
    assert d.result(cid) is not None
    r = d.begin_result(run=3)
    assert isinstance(r, Failed)


def test_RT_013_admitted_start_interrupts_every_older_token_first() -> None:
    d = RtDriver()
    a = d.begin(run=1)
    b = d.begin(run=1)
    n = len(d.out)
    c = d.begin(run=2)
    aborts = of(d.out[n:], Abort)
    assert [(x.id, x.reason) for x in aborts] == [(b, TAKEOVER)]  # a was already aborted by b
    assert d.rt.start_reason(a) == TAKEOVER
    # the aborts came before the registry's lease request
    first_send = next(i for i, x in enumerate(d.out[n:]) if isinstance(x, SendFrame))
    assert d.out[n:].index(aborts[0]) < first_send
    assert d.rt.current_start(TASK) == c


def test_RT_014_begin_returns_the_token_even_when_startup_fails() -> None:
    d = RtDriver()
    d.begin(run=1)
    d.usable(run=1)
    d.work_fail = lambda c: c.op == "cleanup"
    s = d.begin(run=2)  # the startup's cleanup of run 1 fails
    assert isinstance(s, int)
    w = d.wait(s)
    err = d.error(w)
    assert err.message == "credential lease operation failed"


def test_RT_015_token_is_live_current_and_the_begun_record() -> None:
    d = RtDriver()
    s = d.begin(run=2)
    assert d.rt.current_start(TASK) == s
    assert d.rt.start_reason(s) is None
    assert d.rt.status(TASK).run_epoch == 2  # type: ignore[union-attr]
    s2 = d.begin(run=3)
    assert d.rt.status(TASK).run_epoch == 3  # type: ignore[union-attr]
    assert s2 != s


def test_RT_016_recovery_outcome_depends_on_its_run_and_the_start_kind() -> None:
    d = RtDriver(recovery_retry_base_ms=10)
    d.work_fail = lambda c: c.op == "cleanup"
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=2))
    rec = d.rt.status(TASK)
    assert rec is not None
    assert rec.recovery_retry_timer is not None
    d.begin(run=2, recovery=True)  # untouched
    kept = d.rt.status(TASK)
    assert kept is not None
    assert kept.recovery_id == rec.recovery_id
    assert not kept.recovery_yielded
    d.begin(run=2)  # ordinary: yields
    assert d.rt.status(TASK).recovery_yielded  # type: ignore[union-attr]
    assert d.rt.status(TASK).recovery_retry_timer is None  # type: ignore[union-attr]
    d.begin(run=3)  # newer: ends
    assert not d.rt.has_recovery(TASK)
    assert d.aborts("recovery", rec.recovery_id) == [TAKEOVER]  # type: ignore[arg-type]


def test_RT_017_current_start_only_while_newest_is_live() -> None:
    d = RtDriver()
    assert d.rt.current_start(TASK) is None
    a = d.begin()
    assert d.rt.current_start(TASK) == a
    b = d.begin()
    assert d.rt.current_start(TASK) == b
    d.feed(Interrupt(now_ms=d.now, start_id=b))
    assert d.rt.current_start(TASK) is None
    c = d.begin()
    d.feed(EndStart(now_ms=d.now, start_id=c))
    assert d.rt.current_start(TASK) is None
    e = d.begin()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert d.rt.current_start(TASK) is None
    assert e is not None


def test_RT_018_assert_current_refuses_a_token_that_is_not_live() -> None:
    d = RtDriver()
    a = d.usable()
    assert d.rt.assert_current(a) is None
    b = d.begin()
    assert d.rt.assert_current(a) == CredentialFailure(message="this start was interrupted")
    d.feed(EndStart(now_ms=d.now, start_id=b))
    assert d.rt.assert_current(b) == CredentialFailure(message="this start was interrupted")


def test_RT_019_assert_current_needs_the_exact_run_open() -> None:
    d = RtDriver()
    s = d.begin()
    assert d.rt.assert_current(s) == CredentialFailure(
        message="the task's credentials are no longer open for this run"
    )
    d.grant()
    assert d.rt.assert_current(s) is None


def test_RT_020_look_alike_tokens_have_no_authority() -> None:
    d = RtDriver()
    s = d.usable()
    forged = s - 10_000  # an id the runtime never issued
    w = d.wait(forged)
    assert d.error(w) == CredentialFailure(message="this start was interrupted")
    assert d.hold(forged).value is None  # type: ignore[union-attr]
    d.feed(Interrupt(now_ms=d.now, start_id=forged))
    d.feed(EndStart(now_ms=d.now, start_id=forged))
    n = len(d.log)
    d.feed(AbandonStart(now_ms=d.now, call_id=5, start_id=forged))
    assert d.log[n:] == []
    assert d.rt.current_start(TASK) == s


def test_RT_021_interrupt_hits_exactly_that_token() -> None:
    d = RtDriver()
    t1 = d.begin()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    t2 = d.begin()
    n = len(d.out)
    d.feed(Interrupt(now_ms=d.now, start_id=t1))
    assert of(d.out[n:], Abort) == []  # t1 was already aborted; nothing else is hit
    assert d.rt.start_reason(t2) is None
    assert d.rt.current_start(TASK) == t2
    d2 = RtDriver()
    a = d2.begin()
    d2.feed(Interrupt(now_ms=d2.now, start_id=a))
    assert d2.aborts("start", a) == [TAKEOVER]


def test_RT_022_interrupting_an_ended_token_does_nothing() -> None:
    d = RtDriver()
    a = d.begin()
    d.feed(EndStart(now_ms=d.now, start_id=a))
    d.feed(Interrupt(now_ms=d.now, start_id=a))
    assert d.rt.start_reason(a) is None
    assert d.aborts("start", a) == []


def _tokens(d: RtDriver, runs: list[int]) -> dict[int, int]:
    """Unended, un-aborted tokens of several runs of TASK.

    Admission interrupts every older token, so this state is built by clearing
    the reasons the admissions set (white-box), to test the filters alone.
    """
    ids = {}
    for r in runs:
        ids[r] = d.begin(run=r)
    _unabort(d)
    return ids


def _unabort(d: RtDriver) -> None:
    # Fault injection: no event leaves several runs' tokens unaborted (see _tokens).
    for st in d.rt._tasks[TASK].starts.values():
        st.reason = None


def test_RT_023_interrupt_starts_without_filter_hits_all_and_ends_recovery() -> None:
    d = RtDriver()
    ids = _tokens(d, [3, 4, 5])
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=9))
    _unabort(d)
    d.feed(InterruptStarts(now_ms=d.now, task_id=TASK))
    assert all(d.rt.start_reason(i) == TAKEOVER for i in ids.values())
    assert not d.rt.has_recovery(TASK)


def test_RT_024_interrupt_starts_exact() -> None:
    for rec_run, ends in ((4, True), (5, False), (3, False)):
        d = RtDriver()
        ids = _tokens(d, [3, 4, 5])
        _recover(d, rec_run)
        d.feed(InterruptStarts(now_ms=d.now, task_id=TASK, exact=4))
        assert [d.rt.start_reason(ids[r]) is not None for r in (3, 4, 5)] == [False, True, False]
        assert d.rt.has_recovery(TASK) is not ends


def _recover(d: RtDriver, run: int) -> None:
    """Register a recovery of ``run`` (its start is refused below the floor, admitted at it)."""
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=run))
    assert d.rt.has_recovery(TASK)
    _unabort(d)


def test_RT_025_interrupt_starts_below_and_both_filters() -> None:
    for rec_run, ends in ((4, True), (5, False)):
        d = RtDriver()
        ids = _tokens(d, [3, 4, 5])
        _recover(d, rec_run)
        d.feed(InterruptStarts(now_ms=d.now, task_id=TASK, below=5))
        assert [d.rt.start_reason(ids[r]) is not None for r in (3, 4, 5)] == [True, True, False]
        assert d.rt.has_recovery(TASK) is not ends
    d = RtDriver()
    ids = _tokens(d, [3, 4, 5])
    d.feed(InterruptStarts(now_ms=d.now, task_id=TASK, exact=4, below=4))
    assert all(d.rt.start_reason(i) is None for i in ids.values())


def test_RT_026_first_interruption_reason_wins() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    w = d.wait(s)  # resolves at once (usable); use a fresh wait below
    d.feed(Interrupt(now_ms=d.now, start_id=s))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert d.aborts("start", s) == [TAKEOVER]
    assert d.rt.start_reason(s) == TAKEOVER
    assert d.rt.hold_reason(h.hold_id) == TAKEOVER
    assert d.result(w) is not None
    d2 = RtDriver()
    s2 = d2.begin()
    w2 = d2.wait(s2)
    d2.feed(Interrupt(now_ms=d2.now, start_id=s2))
    d2.feed(RuntimeShutdown(now_ms=d2.now, call_id=1))
    assert d2.error(w2) == TAKEOVER


def test_RT_014_startup_sync_part_runs_inside_begin() -> None:
    d = RtDriver()
    d.usable(run=1)
    n = len(d.log)
    d.begin(run=2)
    # the older run's gate was closed within the call (synchronous part)
    assert ("engines", "close", TASK, "1") in d.log[n:]
    assert of(d.out, StartTimer)
    assert AwaitLaunchReady
    assert AcquireHold
