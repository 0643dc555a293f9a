"""Each property of the invariant monitor on hand-built traces.

For every property: a violating trace the monitor flags with exactly that
property, and a near miss (the same trace with the one fact that makes it
correct) it must not flag. A trace is a list of steps ``(event, port calls,
commands)``, exactly what a recorded trace holds. No runtime is involved.
"""

from __future__ import annotations

from typing import Any

from leasegate.core import Secret
from leasegate.core.monitor import PROPERTIES, InvariantMonitor, PortCall, ViewStamp, Violation
from leasegate.core.registry import (
    Assignment,
    CancelTimer,
    CleanupRequest,
    CloseReader,
    InstallRequest,
    OpenReader,
    ReadCompleted,
    ReadParameters,
    ReportError,
    SsmParameter,
    StartTimer,
    TaskView,
    TimerFired,
)
from leasegate.core.runtime import (
    AbandonStart,
    Abort,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    Log,
    Notify,
    RuntimeShutdown,
    TaskCleanupRequest,
    WorkDone,
)
from leasegate.core.wire import encode_frame
from leasegate.core.wire.lease import LeaseSession, LeaseStale

T0 = 1_800_000_000_000
T = "task-1"
A1 = Assignment(T, 1)
Step = tuple[Any, list[Any], list[Any]]


def run_trace(steps: list[Step]) -> InvariantMonitor:
    mon = InvariantMonitor()
    for ev, calls, cmds in steps:
        mon.observe(ev, cmds, calls)
    assert mon.internal_errors == 0
    return mon


def props(mon: InvariantMonitor) -> list[str]:
    return [v.property for v in mon.violations]


def view(
    task: str = T, run: int = 1, *, lease: str = "L1", rev: int = 4, exp: int = T0 + 3_600_000
) -> TaskView:
    return TaskView(
        assignment=Assignment(task, run),
        lease_id=lease,
        manifest_revision=rev,
        manifest_digest="d" * 64,
        expires_at=exp,
        project_ids=("proj-0",),
        engines=(),
        mcp=(),
        github=None,
        ssh=None,
    )


def opens(v: TaskView, task: str = T, run: int = 1, *, files: bool = False) -> list[PortCall]:
    """The port calls of a successful open fan-out of ``v`` for ``(task, run)``."""
    ports = ["engines", "mcp", "person"] + (["files"] if files else [])
    return [PortCall(p, "open", task, run, False, ViewStamp.of(v)) for p in ports]


def opened(task: str = T) -> list[Any]:
    """The commands a successful open fan-out emits (RT-081)."""
    return [Notify(what="mcp-served", task_id=task), Notify(what="env-served", task_id=task)]


def ev(now: int = T0) -> WorkDone:
    """A neutral event (a completion nobody waits for)."""
    return WorkDone(now_ms=now, cmd_id=99_999)


def begin(call: int, task: str = T, run: int = 1, start: int = -1) -> Step:
    return (
        BeginStart(now_ms=T0, call_id=call, task_id=task, run_epoch=run),
        [],
        [Answer(call_id=call, value=start)],
    )


def session(sid: str = "s1") -> LeaseSession:
    return LeaseSession(
        id=sid,
        purpose="credentials",
        access_key_id="ASIAEXAMPLEEXAMPLE01",
        secret_access_key=Secret("CANARY-sak-" + sid),
        session_token=Secret("CANARY-tok-" + sid),
        expires_at=T0 + 7_200_000,
    )


def grant_frame(op: str, lease: str, task: str = T, run: int = 1) -> dict[str, Any]:
    """Enough of a grant frame for the monitor's reader bookkeeping (not decoded)."""
    return {
        "kind": "lease.grant.v1",
        "opId": op,
        "lease": {"leaseId": lease, "taskId": task, "runEpoch": run},
    }


def env_frame(task: str = T, run: int = 1) -> dict[str, Any]:
    return {"kind": "env.replica.v1.page", "taskId": task, "runEpoch": run}


ENV_SEL = ("/uai/projects/proj-0/env-values/" + "a" * 64 + "/00000001-0000-4000-8000-000000000000",)


# ---------------------------------------------------------------------------
# gate-open-during-cleanup


def _cleanup_started(task: str = T, run: int = 1, mode: str = "full") -> list[Step]:
    req = CleanupRequest(
        assignment=Assignment(task, run),
        mode=mode,  # type: ignore[arg-type]
        reason="stopped",
        removed=(),
        remove_files_session=False,
    )
    return [
        (ev(), [], [JournalRecord(cmd_id=-2, task_id=task, run_epoch=run, reason="stop")]),
        (
            WorkDone(now_ms=T0, cmd_id=-2),
            [PortCall("engines", "close", task, run, False)],
            [
                ConsumerWork(cmd_id=-3, consumer="engines", op="cleanup", request=req),
                ConsumerWork(cmd_id=-4, consumer="person", op="cleanup", request=req),
                ConsumerWork(cmd_id=-5, consumer="mcp", op="cleanup", request=req),
            ],
        ),
    ]


def _cleanup_finished(task: str = T, run: int = 1) -> list[Step]:
    treq = TaskCleanupRequest(task_id=task, run_epoch=run, reason="stop", credential_ids=None)
    return [
        (WorkDone(now_ms=T0, cmd_id=-3), [], []),
        (WorkDone(now_ms=T0, cmd_id=-4), [], []),
        (
            WorkDone(now_ms=T0, cmd_id=-5),
            [],
            [ConsumerWork(cmd_id=-6, consumer="host", op="quiesce", request=treq)],
        ),
        (
            WorkDone(now_ms=T0, cmd_id=-6),
            [],
            [ConsumerWork(cmd_id=-7, consumer="host", op="remove-paths", request=treq)],
        ),
        (
            WorkDone(now_ms=T0, cmd_id=-7),
            [],
            [JournalSettle(cmd_id=-8, task_id=task, runs=(run,))],
        ),
        (WorkDone(now_ms=T0, cmd_id=-8), [], []),
    ]


def test_gate_open_during_cleanup_flags_an_open_while_the_cleanup_drains() -> None:
    mon = run_trace([*_cleanup_started(), (ev(), opens(view()), opened())])
    assert props(mon) == ["gate-open-during-cleanup"]
    assert mon.violations[0].task_id == T
    assert mon.violations[0].run_epoch == 1
    assert mon.violations[0].step == 2


def test_gate_open_during_cleanup_flags_an_open_after_the_journal_record_of_the_same_step() -> None:
    steps: list[Step] = [
        (
            ev(),
            opens(view()),
            [JournalRecord(cmd_id=-2, task_id=T, run_epoch=1, reason="stop"), *opened()],
        ),
    ]
    assert props(run_trace(steps)) == ["gate-open-during-cleanup"]


def test_gate_open_during_cleanup_near_miss_open_after_the_cleanup_settled() -> None:
    mon = run_trace(_cleanup_started() + _cleanup_finished() + [(ev(), opens(view()), opened())])
    assert props(mon) == []


def test_gate_open_during_cleanup_near_miss_open_before_the_journal_record_of_the_step() -> None:
    steps: list[Step] = [
        (
            ev(),
            opens(view()),
            [*opened(), JournalRecord(cmd_id=-2, task_id=T, run_epoch=1, reason="stop")],
        ),
    ]
    assert props(run_trace(steps)) == []


def test_gate_open_during_cleanup_near_miss_newer_run_or_selective_cleanup_of_another_run() -> None:
    # A whole-task cleanup of run 1 does not cover run 2; a selective one of
    # run 2 does not cover run 1.
    a = run_trace([*_cleanup_started(run=1), (ev(), opens(view(run=2), run=2), opened())])
    b = run_trace(
        [*_cleanup_started(run=2, mode="selective"), (ev(), opens(view(run=1)), opened())]
    )
    assert props(a) == []
    assert props(b) == []


def test_gate_open_during_cleanup_a_whole_task_cleanup_covers_older_runs() -> None:
    mon = run_trace([*_cleanup_started(run=2), (ev(), opens(view(run=1)), opened())])
    assert props(mon) == ["gate-open-during-cleanup"]


def test_gate_open_during_cleanup_a_failed_step_ends_the_cleanup() -> None:
    fail = CredentialFailure(message="engines cleanup failed")
    steps = [
        *_cleanup_started(),
        (WorkDone(now_ms=T0, cmd_id=-3, error=fail), [], []),
        (WorkDone(now_ms=T0, cmd_id=-4), [], []),
        (WorkDone(now_ms=T0, cmd_id=-5), [], []),  # joined: failed, nothing next
        (ev(), opens(view()), opened()),
    ]
    assert props(run_trace(steps)) == []


def test_gate_open_during_cleanup_a_hold_joined_by_the_drain_keeps_it_in_flight() -> None:
    hold_view = view()
    steps: list[Step] = [
        begin(1, start=-10),
        (
            AwaitLaunchReady(now_ms=T0, call_id=2, start_id=-10),
            [],
            [],
        ),
    ]
    # An AcquireHold answered with a HoldInfo registers the hold.
    from leasegate.core.runtime import AcquireHold, HoldInfo

    steps.append(
        (
            AcquireHold(now_ms=T0, call_id=3, start_id=-10),
            [PortCall("person", "hold_git", T, 1, False)],
            [
                Answer(
                    call_id=3, value=HoldInfo(hold_id=-11, assignment=A1, view=hold_view, git=None)
                )
            ],  # type: ignore[arg-type]
        )
    )
    steps += _cleanup_started()
    steps += [
        (WorkDone(now_ms=T0, cmd_id=-3), [], []),
        (WorkDone(now_ms=T0, cmd_id=-4), [], []),
        (WorkDone(now_ms=T0, cmd_id=-5), [], []),  # works done, the hold is not released
        (ev(), opens(view()), opened()),
    ]
    assert props(run_trace(steps)) == ["gate-open-during-cleanup"]


# ---------------------------------------------------------------------------
# read-on-closed-reader


def _reader(rid: int = 7, a: Assignment = A1) -> Any:
    return OpenReader(reader_id=rid, assignment=a, region="us-east-1", session=session())


def test_read_on_closed_reader_flags_a_read_after_close_reader() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(7)]),
        (ev(), [], [CloseReader(reader_id=7)]),
        (ev(), [], [ReadParameters(cmd_id=9, reader_id=7, selectors=("/uai/orgs/o/x:1",))]),
    ]
    mon = run_trace(steps)
    assert props(mon) == ["read-on-closed-reader"]
    assert (mon.violations[0].task_id, mon.violations[0].run_epoch) == (T, 1)


def test_read_on_closed_reader_flags_a_close_then_read_in_one_step() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(7)]),
        (
            ev(),
            [],
            [CloseReader(reader_id=7), ReadParameters(cmd_id=9, reader_id=7, selectors=("x",))],
        ),
    ]
    assert props(run_trace(steps)) == ["read-on-closed-reader"]


def test_read_on_closed_reader_near_miss_read_before_close_and_through_another_reader() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(7), _reader(8)]),
        (
            ev(),
            [],
            [ReadParameters(cmd_id=9, reader_id=7, selectors=("x",)), CloseReader(reader_id=7)],
        ),
        (ev(), [], [ReadParameters(cmd_id=10, reader_id=8, selectors=("x",))]),
    ]
    assert props(run_trace(steps)) == []


# ---------------------------------------------------------------------------
# foreign-env-snapshot


def test_foreign_env_snapshot_flags_an_env_read_through_another_runs_reader() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(5, A1), _reader(6, Assignment("task-2", 1))]),
        (
            HandleFrame(now_ms=T0, call_id=1, frame=env_frame()),
            [],
            [ReadParameters(cmd_id=10, reader_id=6, selectors=ENV_SEL)],
        ),
    ]
    mon = run_trace(steps)
    assert props(mon) == ["foreign-env-snapshot"]
    assert mon.violations[0].task_id == T


def test_foreign_env_snapshot_near_miss_env_read_through_the_runs_reader() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(5, A1), _reader(6, Assignment("task-2", 1))]),
        (
            HandleFrame(now_ms=T0, call_id=1, frame=env_frame()),
            [],
            [ReadParameters(cmd_id=10, reader_id=5, selectors=ENV_SEL)],
        ),
        # the next read is caused by the completion of the first: same run
        (
            ReadCompleted(now_ms=T0, cmd_id=10, parameters=()),
            [],
            [ReadParameters(cmd_id=11, reader_id=5, selectors=ENV_SEL)],
        ),
    ]
    assert props(run_trace(steps)) == []


def test_foreign_env_snapshot_follows_the_read_chain() -> None:
    steps: list[Step] = [
        (ev(), [], [_reader(5, A1), _reader(6, Assignment("task-2", 1))]),
        (
            HandleFrame(now_ms=T0, call_id=1, frame=env_frame()),
            [],
            [ReadParameters(cmd_id=10, reader_id=5, selectors=ENV_SEL)],
        ),
        (
            ReadCompleted(now_ms=T0, cmd_id=10, parameters=()),
            [],
            [ReadParameters(cmd_id=11, reader_id=6, selectors=ENV_SEL)],
        ),
    ]
    assert props(run_trace(steps)) == ["foreign-env-snapshot"]


def _install(lease: str, cmd_id: int) -> ConsumerWork:
    req = InstallRequest(
        assignment=A1,
        owner_org_id="o",
        owner_user_id="u",
        previous=None,
        next=view(lease=lease),
        files=None,
        reason="grant",
        project_set_changed=True,
    )
    return ConsumerWork(cmd_id=cmd_id, consumer="engines", op="install", request=req)


def _two_grants(read_through: int) -> list[Step]:
    return [
        (HandleFrame(now_ms=T0, call_id=1, frame=grant_frame("op1", "L1")), [], [_reader(5)]),
        (ev(), [], [_install("L1", -20)]),
        (HandleFrame(now_ms=T0, call_id=2, frame=grant_frame("op2", "L2")), [], [_reader(6)]),
        (ev(), [], [_install("L2", -21)]),
        (
            HandleFrame(now_ms=T0, call_id=3, frame=env_frame()),
            [],
            [ReadParameters(cmd_id=12, reader_id=read_through, selectors=ENV_SEL)],
        ),
    ]


def test_foreign_env_snapshot_flags_a_read_through_a_superseded_grants_reader() -> None:
    assert props(run_trace(_two_grants(read_through=5))) == ["foreign-env-snapshot"]


def test_foreign_env_snapshot_near_miss_read_through_the_installed_grants_reader() -> None:
    assert props(run_trace(_two_grants(read_through=6))) == []


def test_foreign_env_snapshot_flags_a_gate_opened_or_a_view_served_for_another_run() -> None:
    other = view(run=2)
    a = run_trace([(ev(), opens(other, T, 1), opened())])
    b = run_trace(
        [
            begin(1, start=-10),
            (
                AwaitLaunchReady(now_ms=T0, call_id=2, start_id=-10),
                [],
                [Answer(call_id=2, value=other)],
            ),
        ]
    )
    ok = run_trace(
        [
            begin(1, start=-10),
            (
                AwaitLaunchReady(now_ms=T0, call_id=2, start_id=-10),
                [],
                [Answer(call_id=2, value=view())],
            ),
            (ev(), opens(view()), opened()),
        ]
    )
    assert props(a) == ["foreign-env-snapshot"]
    assert props(b) == ["foreign-env-snapshot"]
    assert props(ok) == []


# ---------------------------------------------------------------------------
# open-after-close


def _close(call: int = 5, run: int = 1) -> Step:
    return (CloseAssignment(now_ms=T0, call_id=call, task_id=T, run_epoch=run), [], [])


def test_open_after_close_flags_an_open_after_the_runs_close() -> None:
    mon = run_trace([begin(1), _close(), (ev(), opens(view()), opened())])
    assert props(mon) == ["open-after-close"]
    assert mon.violations[0].run_epoch == 1


def test_open_after_close_flags_an_install_after_close_or_shutdown() -> None:
    inst = run_trace([begin(1), _close(), (ev(), [], [_install("L1", -20)])])
    port = run_trace([begin(1), _close(), (ev(), [PortCall("mcp", "install", T, 1, False)], [])])
    shut = run_trace(
        [begin(1), (RuntimeShutdown(now_ms=T0, call_id=9), [], []), (ev(), opens(view()), opened())]
    )
    assert props(inst) == ["open-after-close"]
    assert props(port) == ["open-after-close"]
    assert props(shut) == ["open-after-close"]


def test_open_after_close_near_miss_run_begun_again_or_close_of_another_run() -> None:
    settled = (ev(), [], [Answer(call_id=5)])
    again = run_trace(
        [begin(1), _close(), settled, begin(2, start=-3), (ev(), opens(view()), opened())]
    )
    other = run_trace([begin(1), _close(run=3), (ev(), opens(view()), opened())])
    newer = run_trace(
        [begin(1), _close(), begin(2, run=2, start=-3), (ev(), opens(view(run=2), run=2), opened())]
    )
    assert props(again) == []
    assert props(other) == []
    assert props(newer) == []


def test_LR_123_open_after_close_flags_an_open_after_a_start_made_while_the_close_drained() -> None:
    """Since Q15 (docs/registry.md) a same-epoch start made while a close of
    the run is unanswered is a no-op in the registry (LR-123); the run stays
    closed (the monitor once took it for a new run). An ``AbandonStart`` not
    answered in its own step is such a close (RT-048): here the visible close
    settled first, the abandon's close still drains."""
    draining = run_trace([begin(1), _close(), begin(2, start=-3), (ev(), opens(view()), opened())])
    abandon = (AbandonStart(now_ms=T0, call_id=4, start_id=-1), [], [])
    settled = (ev(), [], [Answer(call_id=5)])
    abandoning = run_trace(
        [begin(1), abandon, _close(), settled, begin(2, start=-3), (ev(), opens(view()), opened())]
    )
    assert props(draining) == ["open-after-close"]
    assert props(abandoning) == ["open-after-close"]


def test_LR_123_near_miss_an_abandon_answered_at_once_closed_nothing() -> None:
    """RT-049: an ``AbandonStart`` answered in its own step closed nothing;
    once the visible close settled, a same-epoch start is a new run."""
    abandon = (AbandonStart(now_ms=T0, call_id=4, start_id=-1), [], [Answer(call_id=4)])
    settled = (ev(), [], [Answer(call_id=5)])
    mon = run_trace(
        [begin(1), abandon, _close(), settled, begin(2, start=-3), (ev(), opens(view()), opened())]
    )
    assert props(mon) == []


# ---------------------------------------------------------------------------
# view-below-floor-or-expired


def _stale(run: int = 1, floor: int = 5) -> Step:
    frame = encode_frame(
        LeaseStale(task_id=T, run_epoch=run, wanted_revision=floor, min_revision=floor, removed=())
    )
    return (HandleFrame(now_ms=T0, call_id=7, frame=frame), [], [Answer(call_id=7, value=True)])


def test_view_below_floor_flags_an_open_below_the_stale_frames_floor() -> None:
    mon = run_trace([begin(1), _stale(floor=5), (ev(), opens(view(rev=4)), opened())])
    assert props(mon) == ["view-below-floor-or-expired"]


def test_view_below_floor_near_miss_at_the_floor_or_a_floor_for_another_run() -> None:
    at = run_trace([begin(1), _stale(floor=5), (ev(), opens(view(rev=5)), opened())])
    other = run_trace([begin(1), _stale(run=2, floor=9), (ev(), opens(view(rev=4)), opened())])
    assert props(at) == []
    assert props(other) == []


def test_view_expired_flags_an_open_at_or_after_expiry() -> None:
    exp = T0 + 1_000
    mon = run_trace([(ev(now=exp), opens(view(exp=exp)), opened())])
    assert props(mon) == ["view-below-floor-or-expired"]


def test_view_expired_near_miss_one_millisecond_before_expiry() -> None:
    exp = T0 + 1_000
    assert props(run_trace([(ev(now=exp - 1), opens(view(exp=exp)), opened())])) == []


# ---------------------------------------------------------------------------
# secret-in-error


def _read_secret(value: str) -> Step:
    p = SsmParameter(name="/uai/orgs/o/x", type="SecureString", value=Secret(value), version=1)
    return (ReadCompleted(now_ms=T0, cmd_id=3, parameters=(p,)), [], [])


def test_secret_in_error_flags_a_parameter_value_in_a_log() -> None:
    mon = run_trace(
        [_read_secret("CANARY-param-1"), (ev(), [], [Log(message="oops CANARY-param-1")])]
    )
    assert props(mon) == ["secret-in-error"]
    assert "CANARY" not in repr(mon.violations)


def test_secret_in_error_flags_an_envelope_value_in_a_failure_and_an_abort() -> None:
    env = '{"v":2,"kind":"project-env","key":"API_KEY","value":"CANARY-inner-22"}'
    fail = CredentialFailure(
        message="outer", causes=(CredentialFailure(message="x CANARY-inner-22 y"),)
    )
    a = run_trace([_read_secret(env), (ev(), [], [Failed(call_id=1, error=fail)])])
    b = run_trace([_read_secret(env), (ev(), [], [Abort(kind="start", id=-1, reason=fail)])])
    assert props(a) == ["secret-in-error"]
    assert props(b) == ["secret-in-error"]


def test_secret_in_error_flags_a_session_key_of_a_grant_frame_in_a_report() -> None:
    frame = {
        "kind": "lease.grant.v1",
        "lease": {"sessions": [{"secretAccessKey": "CANARY-sak-99", "sessionToken": "CANARY-t"}]},
    }
    mon = run_trace(
        [
            (HandleFrame(now_ms=T0, call_id=1, frame=frame), [], []),
            (ev(), [], [ReportError(assignment=A1, message="bad CANARY-sak-99")]),
        ]
    )
    assert props(mon) == ["secret-in-error"]


def test_secret_in_error_near_miss_texts_without_a_secret_seen_so_far() -> None:
    # The text contains a value that only becomes a secret later, and a
    # fixed error text; a secret's envelope key name is not a secret.
    env = '{"v":2,"kind":"project-env","key":"API_KEY_NAME","value":"CANARY-inner-22"}'
    mon = run_trace(
        [
            (ev(), [], [Log(message="early CANARY-late-1")]),
            _read_secret("CANARY-late-1"),
            _read_secret(env),
            (ev(), [], [Log(message="[credentials] task t run 1: API_KEY_NAME failed")]),
        ]
    )
    assert props(mon) == []


# ---------------------------------------------------------------------------
# timer-armed-after-end


def _timer_run() -> list[Step]:
    return [
        (
            BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=1),
            [],
            [StartTimer(timer_id=5, delay_ms=20_000), Answer(call_id=1, value=-1)],
        ),
        _close(call=2),
    ]


def test_timer_armed_after_end_flags_a_runs_timer_armed_when_its_close_settled() -> None:
    mon = run_trace([*_timer_run(), (ev(), [], [Answer(call_id=2)])])
    assert props(mon) == ["timer-armed-after-end"]
    assert (mon.violations[0].task_id, mon.violations[0].run_epoch) == (T, 1)


def test_timer_armed_after_end_flags_any_timer_armed_when_shutdown_was_answered() -> None:
    mon = run_trace(
        [
            (ev(), [], [StartTimer(timer_id=-9, delay_ms=5)]),
            (RuntimeShutdown(now_ms=T0, call_id=3), [], []),
            (ev(), [], [Answer(call_id=3)]),
        ]
    )
    assert props(mon) == ["timer-armed-after-end"]


def test_timer_armed_after_end_near_misses() -> None:
    cancelled = run_trace([*_timer_run(), (ev(), [], [CancelTimer(timer_id=5), Answer(call_id=2)])])
    fired = run_trace(
        [
            *_timer_run(),
            (TimerFired(now_ms=T0, timer_id=5), [], []),
            (ev(), [], [Answer(call_id=2)]),
        ]
    )
    other_run = run_trace(
        [
            (
                BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=2),
                [],
                [StartTimer(timer_id=5, delay_ms=20_000), Answer(call_id=1, value=-1)],
            ),
            _close(call=2),
            (ev(), [], [Answer(call_id=2)]),
        ]
    )
    ambiguous = run_trace(
        [
            (
                ev(),
                [
                    PortCall("engines", "open", T, 1, False, ViewStamp.of(view())),
                    PortCall("engines", "open", "task-2", 1, False, ViewStamp.of(view("task-2"))),
                ],
                [StartTimer(timer_id=5, delay_ms=1)],
            ),
            begin(1),
            _close(call=2),
            (ev(), [], [Answer(call_id=2)]),
        ]
    )
    assert props(cancelled) == []
    assert props(fired) == []
    assert props(other_run) == []
    assert props(ambiguous) == []


# ---------------------------------------------------------------------------


def test_properties_tuple_is_the_agreed_one() -> None:
    assert PROPERTIES == (
        "gate-open-during-cleanup",
        "read-on-closed-reader",
        "foreign-env-snapshot",
        "open-after-close",
        "view-below-floor-or-expired",
        "secret-in-error",
        "timer-armed-after-end",
    )


def test_observe_returns_only_the_steps_new_violations() -> None:
    mon = InvariantMonitor()
    for e, c, k in [begin(1), _close()]:
        assert mon.observe(e, k, c) == []
    first = mon.observe(ev(), opened(), opens(view()))
    second = mon.observe(ev(), [], [])
    assert first
    assert all(isinstance(v, Violation) for v in first)
    assert second == []
    assert mon.violations == first
    assert mon.steps == 4
