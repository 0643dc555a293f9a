"""RT-092 … RT-116: the cleanup procedure's hooks, boot recovery and recovered runs."""

from __future__ import annotations

from collections.abc import Callable

from runtime_kit import TASK, RtDriver, of

from leasegate.core.registry import Assignment, CancelTimer, CleanupRequest, Identity, StartTimer
from leasegate.core.runtime import (
    ConsumerWork,
    CredentialFailure,
    Failed,
    InterruptRecovery,
    JournalRecord,
    JournalSettle,
    Log,
    MemoryJournal,
    OwedCleanup,
    Recover,
    ReleaseHold,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    TaskCleanupRequest,
    TaskStatus,
    _cleanup,
    consumer_cleanup_request,
)

CLEANING = CredentialFailure(message="the task's credentials are being cleaned up")
TAKEOVER = CredentialFailure.interrupted("takeover")


def _whole(run: int = 1, reason: str = "stop") -> TaskCleanupRequest:
    return TaskCleanupRequest(task_id=TASK, run_epoch=run, reason=reason, credential_ids=None)


def _recovery(d: RtDriver) -> TaskStatus:
    """The task's status, which has a recovery record."""
    status = d.rt.status(TASK)
    assert status is not None
    assert status.recovery_id is not None
    return status


def _whole_cleanup(d: RtDriver, run: int = 1) -> Callable[[], list[CredentialFailure | None]]:
    """Run a whole-task cleanup of TASK at ``run`` through ``Recover`` (one owed row).

    Returns a function giving ``[]`` while it runs, then ``[its first failure or None]``
    (``Recover`` answers with it).
    """
    c = d.call(lambda c: Recover(now_ms=d.now, call_id=c, owed=(OwedCleanup(TASK, run, "stop"),)))

    def got() -> list[CredentialFailure | None]:
        r = d.result(c)
        if r is None:
            return []
        return [r.error if isinstance(r, Failed) else None]

    return got


def _run_cleanup(d: RtDriver, req: TaskCleanupRequest) -> list[CredentialFailure | None]:
    # The procedure fed one request directly: a selective request, a whole one of a given
    # reason (teardown) or one whose row was not owed before come from the registry's lease
    # cleanups only in longer scenarios; Recover (_whole_cleanup) covers the plain whole case.
    got: list[CredentialFailure | None] = []
    _cleanup.cleanup(d.rt, req, got.append)
    d.feed(ReleaseHold(now_ms=d.now, hold_id=0))  # flush the runtime's output through the kit
    return got


def test_RT_092_drain_aborts_holds_of_the_run_and_older_only() -> None:
    # The hook alone: in the full procedure the gate close before it fences the
    # holds first ("withdrawn"), and the first reason wins, so the drain's own
    # reason is observable only by calling step 3 directly.
    d = RtDriver()
    s = d.usable(run=2)
    h = d.hold(s).value  # type: ignore[union-attr]
    _cleanup.drain_writers(d.rt, _whole(run=1), lambda e: None)
    assert d.rt.hold_reason(h.hold_id) is None  # newer run untouched
    _cleanup.drain_writers(d.rt, _whole(run=2), lambda e: None)
    assert d.rt.hold_reason(h.hold_id) == CLEANING
    sel = TaskCleanupRequest(task_id=TASK, run_epoch=2, reason="x", credential_ids=("a",))
    h2 = d.hold(s).value  # type: ignore[union-attr]
    _cleanup.drain_writers(d.rt, sel, lambda e: None)
    assert d.rt.hold_reason(h2.hold_id) == CLEANING


def test_RT_093_drain_waits_for_every_aborted_hold_to_be_released() -> None:
    d = RtDriver()
    s = d.usable()
    h = d.hold(s).value  # type: ignore[union-attr]
    got = _whole_cleanup(d)
    assert got() == []
    assert not [c for c in of(d.out, ConsumerWork) if c.op == "remove-paths"]
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    assert got() == [None]
    assert [c for c in of(d.out, ConsumerWork) if c.op == "remove-paths"]


def test_RT_094_consumer_cleanups_each_once_with_the_same_request() -> None:
    d = RtDriver()
    d.usable()
    n = len(d.out)
    _whole_cleanup(d)
    cl = [c for c in of(d.out[n:], ConsumerWork) if c.op == "cleanup"]
    assert [c.consumer for c in cl] == ["engines", "person", "mcp"]
    assert cl[0].request is cl[1].request
    assert cl[1].request is cl[2].request


def test_RT_095_first_failure_in_fixed_order_after_all_settle() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "cleanup"
    got = _whole_cleanup(d)
    eng, per, mcp = d.pending_work
    d.finish_work(mcp, ok=False)
    d.finish_work(per, ok=False)
    assert got() == []
    d.finish_work(eng)
    assert got() == [CredentialFailure(message="person cleanup failed")]


def test_RT_096_whole_task_drain_stops_and_joins_a_running_setup() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    d.grant()
    assert len(d.pending_setups) == 1
    rec_id = _recovery(d).recovery_id
    got = _whole_cleanup(d)
    assert d.aborts("recovery", rec_id) == [TAKEOVER]
    assert got() == []
    d.finish_setup()
    assert got() == [None]
    # selective: neither aborted nor joined
    d2 = RtDriver()
    d2.feed(ResumeRecovered(now_ms=d2.now, task_id=TASK, run_epoch=1, has_setup=True))
    d2.grant()
    rec2_id = _recovery(d2).recovery_id
    sel = TaskCleanupRequest(task_id=TASK, run_epoch=1, reason="x", credential_ids=("a",))
    got2 = _run_cleanup(d2, sel)
    assert got2 == [None]
    assert d2.aborts("recovery", rec2_id) == []


def test_RT_097_consumer_request_shapes() -> None:
    lease = CleanupRequest(
        assignment=Assignment(TASK, 1),
        mode="full",
        reason="denied",
        removed=(),
        remove_files_session=True,
    )
    req = TaskCleanupRequest(
        task_id=TASK, run_epoch=1, reason="denied", credential_ids=None, lease=lease
    )
    assert consumer_cleanup_request(req) is lease
    sel = consumer_cleanup_request(
        TaskCleanupRequest(task_id=TASK, run_epoch=2, reason="x", credential_ids=("a", "b"))
    )
    assert sel.mode == "selective"
    assert sel.reason == "lease-replaced"
    assert sel.assignment == Assignment(TASK, 2)
    assert sel.removed == tuple(
        Identity(c, i, None)  # type: ignore[arg-type]
        for i in ("a", "b")
        for c in ("engine", "mcp", "github", "ssh")
    )
    assert sel.remove_files_session is False
    empty = consumer_cleanup_request(
        TaskCleanupRequest(task_id=TASK, run_epoch=2, reason="x", credential_ids=())
    )
    assert empty.mode == "selective"
    assert empty.removed == ()
    for reason, mapped in (
        ("teardown", "teardown"),
        ("stop", "stopped"),
        ("park", "parked"),
        ("recovery", "recovery"),
        ("superseded", "recovery"),
    ):
        full = consumer_cleanup_request(_whole(reason=reason))
        assert (full.mode, full.reason, full.removed, full.remove_files_session) == (
            "full",
            mapped,
            (),
            False,
        )


def test_RT_098_close_consumers_and_quiesce_get_the_request_unchanged() -> None:
    d = RtDriver(files=True)
    _whole_cleanup(d)
    req = TaskCleanupRequest(task_id=TASK, run_epoch=1, reason="recovery", credential_ids=None)
    ops = [
        (c.consumer, c.op, c.request) for c in of(d.out, ConsumerWork) if c.consumer != "engines"
    ]
    assert ("files", "close-consumers", req) in ops
    assert ("host", "quiesce", req) in ops
    [closing] = [c.request for c in of(d.out, ConsumerWork) if c.op == "close-consumers"]
    [quiesce] = [c.request for c in of(d.out, ConsumerWork) if c.op == "quiesce"]
    assert closing is quiesce  # the very request, unchanged
    d2 = RtDriver()
    got = _whole_cleanup(d2)
    assert got() == [None]
    assert [c for c in of(d2.out, ConsumerWork) if c.op == "close-consumers"] == []


def test_RT_099_drop_memory_by_request_shape() -> None:
    d = RtDriver(replica=True)
    d.mcp.records[TASK] = Assignment(TASK, 1)
    assert d.replica is not None
    sel = TaskCleanupRequest(task_id=TASK, run_epoch=1, reason="stop", credential_ids=())
    _run_cleanup(d, sel)
    assert [c for c in d.replica.calls if c[0] == "drop"] == []
    _run_cleanup(d, _whole(reason="stop"))
    assert [c for c in d.replica.calls if c[0] == "drop"] == [("drop", TASK, 1)]
    assert d.engines.forgot == []
    _run_cleanup(d, _whole(reason="teardown"))
    assert d.engines.forgot == [Assignment(TASK, 1)]
    assert d.mcp.forgot == [Assignment(TASK, 1)]


def test_RT_100_recover_runs_whole_task_cleanups_at_the_newer_run() -> None:
    j = MemoryJournal()
    d = RtDriver(journal=j)
    owed = (OwedCleanup(TASK, 3, "stop"), OwedCleanup("t2", 5, "stop"), OwedCleanup(TASK, 4, "x"))
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed, admitted=((TASK, 7),)))
    recs = [(c.task_id, c.run_epoch, c.reason) for c in of(d.out, JournalRecord)]
    assert recs == [(TASK, 7, "recovery"), ("t2", 5, "recovery")]
    settles = [(c.task_id, c.runs) for c in of(d.out, JournalSettle)]
    assert settles == [(TASK, (3, 4, 7)), ("t2", (5,))]
    assert d.value(1) is None
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=2))
    d.feed(Recover(now_ms=d.now, call_id=3, owed=owed))
    assert d.error(3) == CredentialFailure.interrupted("shutdown")


def test_RT_100_failed_cleanup_rows_are_settled_only_by_a_whole_task_cleanup() -> None:
    d = RtDriver()
    d.work_fail = lambda c: c.op == "quiesce"
    assert _run_cleanup(d, _whole(run=1)) == [CredentialFailure(message="host quiesce failed")]
    assert [(r.task_id, r.run_epoch) for r in d.journal.owed()] == [(TASK, 1)]
    d.work_fail = lambda c: False
    sel = TaskCleanupRequest(task_id=TASK, run_epoch=1, reason="x", credential_ids=("a",))
    assert _run_cleanup(d, sel) == [None]
    assert [(r.task_id, r.run_epoch) for r in d.journal.owed()] == [(TASK, 1)]  # still owed
    assert _run_cleanup(d, _whole(run=2)) == [None]
    assert d.journal.owed() == ()


def test_RT_100_recover_attempts_every_task_then_fails() -> None:
    d = RtDriver()
    d.work_fail = lambda c: c.op == "quiesce" and c.request.task_id == "a"
    owed = (OwedCleanup("a", 1, "stop"), OwedCleanup("b", 1, "stop"))
    d.feed(Recover(now_ms=d.now, call_id=1, owed=owed))
    assert [c.task_id for c in of(d.out, JournalSettle)] == ["b"]
    assert d.error(1) == CredentialFailure(message="host quiesce failed")
    assert [r.task_id for r in d.journal.owed()] == ["a"]


def test_RT_101_resume_after_shutdown_does_nothing() -> None:
    d = RtDriver()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    n = len(d.reg_events)
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    assert not d.rt.has_recovery(TASK)
    assert len(d.reg_events) == n + 0


def test_RT_102_resume_registers_and_begins_a_recovery_start() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    starts = [e for e in d.reg_events if type(e).__name__ == "StartRun"]
    assert [(e.task_id, e.run_epoch, e.recovery) for e in starts] == [(TASK, 1, True)]
    assert _recovery(d).recovery_attempts == 0


def test_RT_103_resume_replaces_an_earlier_recovery() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    d.grant()
    old = _recovery(d).recovery_id
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    new = _recovery(d).recovery_id
    assert new != old
    assert d.aborts("recovery", old) == [TAKEOVER]
    d.finish_setup()  # the old setup's completion does not remove the new record
    assert _recovery(d).recovery_id == new


def test_RT_104_a_refused_recovery_start_logs_and_stays_registered() -> None:
    d = RtDriver()
    d.begin(run=5)
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=4))
    logs = [c.message for c in of(d.out, Log)]
    assert logs == [
        "[credentials] task task-1 run 4: no recovered start: a newer run of this task has begun"
    ]
    assert d.rt.has_recovery(TASK)
    assert _recovery(d).recovery_retry_timer is None


def test_RT_105_recovery_waits_then_ends_its_token_never_closes() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    s = d.rt.current_start(TASK)
    assert s is not None
    d.grant()
    assert d.rt.current_start(TASK) is None  # ended after the wait
    d2 = RtDriver(launch_deadline_ms=10)
    d2.feed(ResumeRecovered(now_ms=d2.now, task_id=TASK, run_epoch=1))
    d2.advance(10)
    assert d2.rt.current_start(TASK) is None
    assert [e for e in d2.reg_events if type(e).__name__ == "CloseRun"] == []


def _failing_recovery(**kw: object) -> RtDriver:
    d = RtDriver(**kw)  # type: ignore[arg-type]
    d.usable(run=1)
    d.work_fail = lambda c: c.op == "cleanup"
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=2))
    return d


def _retry_delays(d: RtDriver) -> list[int]:
    rec_timers = []
    for c in of(d.out, StartTimer):
        if c.timer_id < 0 and c.delay_ms not in (180_000, 30_000 * 10):
            rec_timers.append(c.delay_ms)
    return rec_timers


def test_RT_106_startup_failure_retries_with_doubling_backoff() -> None:
    d = _failing_recovery()
    for _ in range(7):
        tid = _recovery(d).recovery_retry_timer
        assert tid is not None
        d.advance(d.timers[tid] - d.now)
    delays = [c.delay_ms for c in of(d.out, StartTimer) if c.timer_id < 0 and c.delay_ms != 180_000]
    assert delays[:8] == [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]


def test_RT_107_no_retry_after_abort_end_yield_or_shutdown() -> None:
    d = RtDriver()
    d.usable(run=1)
    d.work_fail = lambda c: c.op == "cleanup"
    d.hold_work = lambda c: c.op == "cleanup"
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=2))
    d.feed(InterruptRecovery(now_ms=d.now, task_id=TASK))
    while d.pending_work:
        d.finish_work(ok=False)
    assert [c for c in of(d.out, StartTimer) if c.delay_ms == 1_000] == []


def test_RT_108_retry_fires_a_fresh_recovery_start() -> None:
    d = _failing_recovery()
    n = len([e for e in d.reg_events if type(e).__name__ == "StartRun"])
    d.advance(1_000)
    starts = [e for e in d.reg_events if type(e).__name__ == "StartRun"]
    assert len(starts) == n + 1
    assert starts[-1].recovery is True
    assert _recovery(d).recovery_attempts == 2  # failed again, armed again


def test_RT_109_an_ordinary_start_of_the_run_yields_the_recovery() -> None:
    d = _failing_recovery()
    rec = _recovery(d)
    assert rec.recovery_retry_timer is not None
    d.work_fail = lambda c: False
    d.begin(run=2)
    after = _recovery(d)
    assert after.recovery_retry_timer is None
    assert rec.recovery_retry_timer not in d.timers  # the retry was cancelled
    assert after.recovery_yielded
    assert after.recovery_id == rec.recovery_id


def test_RT_110_ending_a_recovery() -> None:
    d = _failing_recovery()
    rec = _recovery(d)
    d.begin(run=3)
    assert rec.recovery_retry_timer not in d.timers  # the retry was cancelled
    assert not d.rt.has_recovery(TASK)
    assert d.aborts("recovery", rec.recovery_id) == [TAKEOVER]


def test_RT_111_interrupt_recovery_ends_it_and_interrupts_no_token() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    s = d.rt.current_start(TASK)
    d.feed(InterruptRecovery(now_ms=d.now, task_id=TASK))
    assert not d.rt.has_recovery(TASK)
    assert s is not None
    assert d.rt.start_reason(s) is None


def test_RT_112_setup_runs_once_after_the_open_with_the_recovery_signal() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    rec_id = _recovery(d).recovery_id
    n = len(d.out)
    d.grant()
    setups = of(d.out[n:], RunSetup)
    assert [(c.task_id, c.run_epoch, c.recovery_id) for c in setups] == [(TASK, 1, rec_id)]
    assert "setup" in d.rt.tracked()
    # strictly after the open step: the registry had the open's outcome and
    # answered the recovery's launch wait (its deadline cancelled) first
    tail = d.out[n:]
    wait_done = [i for i, c in enumerate(tail) if isinstance(c, CancelTimer) and c.timer_id < 0]
    assert wait_done
    assert tail.index(setups[0]) > wait_done[0]


def test_RT_113_recovery_without_setup_is_done_at_the_open() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.grant()
    assert not d.rt.has_recovery(TASK)
    assert of(d.out, RunSetup) == []


def test_RT_114_no_setup_for_another_run_ended_recovery_or_a_renewal() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    d.grant()
    d.begin()
    d.grant(lease_id="lease-2")  # renewal opens again
    assert len(of(d.out, RunSetup)) == 1
    d2 = RtDriver()
    d2.feed(ResumeRecovered(now_ms=d2.now, task_id=TASK, run_epoch=1, has_setup=True))
    d2.feed(InterruptRecovery(now_ms=d2.now, task_id=TASK))
    d2.begin()
    d2.grant()
    assert of(d2.out, RunSetup) == []


def test_RT_115_setup_failure_is_logged_and_the_record_removed() -> None:
    d = RtDriver()
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    d.grant()
    d.finish_setup("setup exploded")
    assert [c.message for c in of(d.out, Log)] == [
        "[credentials] task task-1 run 1: recovered runtime setup failed: setup exploded"
    ]
    assert not d.rt.has_recovery(TASK)
    assert "setup" not in d.rt.tracked()


def test_RT_116_setup_runs_even_after_the_recovery_wait_gave_up() -> None:
    d = RtDriver(launch_deadline_ms=10)
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    d.advance(10)
    assert d.rt.current_start(TASK) is None
    d.grant()
    assert len(of(d.out, RunSetup)) == 1
