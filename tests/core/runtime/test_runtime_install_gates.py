"""RT-065 … RT-091: install sequencing with fences, and the gate fan-out."""

from __future__ import annotations

from runtime_kit import TASK, Boom, RtDriver, commit_frame, of

from leasegate.core.registry import CancelTimer, StartTimer
from leasegate.core.runtime import (
    ENV_READY_TIMEOUT_MS,
    ConsumerWork,
    CredentialFailure,
    CredentialUnavailable,
    EndStart,
    Log,
    Notify,
    ReaderRef,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
)

P0 = ("proj-0",)
WITHDRAWN = CredentialFailure(message="the task's credentials were withdrawn")


def _install_logs(d: RtDriver) -> list[str]:
    return [c.message.split(": ", 1)[1] for c in of(d.out, Log) if "install failed" in c.message]


def _installs(d: RtDriver, consumer: str = "engines") -> list[ConsumerWork]:
    return [c for c in of(d.out, ConsumerWork) if c.op == "install" and c.consumer == consumer]


def test_RT_065_shutdown_fails_the_install_at_its_next_fence() -> None:
    d = RtDriver()
    d.begin()
    d.hold_work = lambda c: c.op == "install"
    d.grant()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert "install" in d.rt.tracked()
    d.finish_work()
    assert _install_logs(d) == ["install failed: the runner is shutting down"]
    assert ("mcp", "install", TASK) not in d.log


def test_RT_066_a_withdrawn_grant_installs_nothing_more() -> None:
    d = RtDriver()
    d.begin()
    d.hold_work = lambda c: c.op == "install"
    d.grant()
    d.begin(run=2)  # supersedes: the grant can no longer commit
    d.finish_work(_installs(d)[0])
    assert "install failed: the grant was withdrawn while it was being installed" in _install_logs(
        d
    )
    assert ("mcp", "install", TASK) not in d.log


def test_RT_067_grant_activates_the_replica_before_any_consumer() -> None:
    d = RtDriver(replica=True)
    d.usable()
    assert d.replica is not None
    act = [c for c in d.replica.calls if c[0] == "activate"]
    assert len(act) == 1
    assert act[0][1:4] == (TASK, 1, "org-1")
    assert isinstance(act[0][4], ReaderRef)
    assert _installs(d) == []  # waiting for env
    d2 = RtDriver(replica=True)
    assert d2.replica is not None
    d2.replica.refuse_activation = True
    d2.usable()
    assert _install_logs(d2) == ["install failed: task assignment run epoch is stale"]
    assert _installs(d2) == []


def test_RT_068_no_reader_generation_fails_the_install() -> None:
    d = RtDriver(replica=True)
    assert d.replica is not None
    d.replica.reader_generation = lambda t, r: None  # type: ignore[method-assign]
    d.usable()
    assert _install_logs(d) == ["install failed: the task's env replica is not active"]


def test_RT_069_generation_recorded_for_the_next_view_before_waiting() -> None:
    d = RtDriver(replica=True)
    d.usable()
    status = d.rt.status(TASK)
    assert status is not None
    assert status.env_waits == (1,)  # still waiting for the env snapshot
    assert status.env_generations == (1,)  # and the generation is already bound
    d.frame(commit_frame(TASK, 1, P0))
    nxt = d.rt.registry.current_view(TASK, 1, d.now)  # the install's next view, now open
    assert nxt is not None
    assert d.rt.view_generation(nxt) == 1
    assert d.rt.status(TASK).served_generation == 1  # type: ignore[union-attr]


def test_RT_070_no_consumer_installs_before_the_exact_snapshot() -> None:
    d = RtDriver(replica=True)
    assert d.replica is not None
    d.begin()
    d.grant(m=None)
    d.replica.commit(TASK, 1, ("proj-0", "proj-9"))  # another project set
    d.frame({"kind": "env.replica.v1.page", "taskId": TASK, "runEpoch": 1})
    assert _installs(d) == []
    d.frame(commit_frame(TASK, 1, P0))
    assert len(_installs(d)) == 1


def test_RT_071_snapshot_already_there_means_no_wait() -> None:
    d = RtDriver(replica=True)
    assert d.replica is not None
    d.begin()
    real = d.replica.handle

    def activate_and_commit(event: object) -> list[object]:
        out = real(event)
        if type(event).__name__ == "ActivateAssignment":
            d.replica.commit(TASK, 1, P0)  # type: ignore[union-attr]
        return out

    d.replica.handle = activate_and_commit  # type: ignore[method-assign]
    n = len(d.out)
    d.grant()
    env_timers = [c for c in of(d.out[n:], StartTimer) if c.delay_ms == ENV_READY_TIMEOUT_MS]
    assert len(env_timers) == 1
    cancelled = [c.timer_id for c in of(d.out[n:], CancelTimer)]
    assert env_timers[0].timer_id in cancelled
    assert len(_installs(d)) == 1
    assert [c for c in of(d.out[n:], StartTimer) if c.delay_ms == 50] == []


def test_RT_072_withdrawal_during_the_env_wait() -> None:
    for how in ("newer-run", "shutdown"):
        d = RtDriver(replica=True)
        d.usable()
        if how == "newer-run":
            d.begin(run=2)
        else:
            d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
        msg = "install failed: the grant was withdrawn while its env values were awaited"
        assert _install_logs(d) == [msg], how
        assert _installs(d) == []


def test_RT_073_env_deadline() -> None:
    d = RtDriver(replica=True, env_ready_timeout_ms=5_000)
    d.usable()
    d.advance(4_999)
    assert _install_logs(d) == []
    d.advance(1)
    assert _install_logs(d) == ["install failed: the task's env values did not arrive in time"]
    assert d.rt.status(TASK).env_waits == ()  # type: ignore[union-attr]


def test_RT_074_evaluation_order_snapshot_then_withdrawal_then_deadline() -> None:
    d = RtDriver(replica=True, env_ready_timeout_ms=0)
    d.usable()  # deadline 0: fires on the next advance
    d.begin(run=2)  # withdrawn before the deadline event: withdrawal wins
    msg = "install failed: the grant was withdrawn while its env values were awaited"
    assert _install_logs(d) == [msg]
    # both apply at one evaluation: the withdrawal's message wins
    d1 = RtDriver(replica=True)
    d1.usable()
    # Fault injection: an expired deadline ends the wait in the same evaluation, so "expired
    # and still waiting" has no public path; the flag is set to order the two checks alone.
    next(iter(d1.rt._env_waits.values())).expired = True
    d1.begin(run=2)
    assert _install_logs(d1) == [msg]
    d2 = RtDriver(replica=True, env_ready_timeout_ms=0)
    d2.usable()
    assert d2.rt.status(TASK).env_waits == (1,)  # type: ignore[union-attr]
    assert d2.replica is not None
    d2.replica.commit(TASK, 1, P0)  # committed without an event: no evaluation yet
    d2.advance(1)  # the deadline fires: present and expired at one evaluation
    assert _install_logs(d2) == []  # the snapshot wins
    assert d2.rt.status(TASK).env_waits == ()  # type: ignore[union-attr]
    assert len(_installs(d2)) == 1


def test_RT_075_fence_rechecked_after_the_snapshot() -> None:
    d = RtDriver(replica=True)
    d.usable()
    assert d.replica is not None
    d.replica.commit(TASK, 1, P0)  # committed without an event: no evaluation yet
    d.hold_work = lambda c: True  # the superseded run's cleanup keeps its snapshot meanwhile
    d.begin(run=2)  # withdrawn; the evaluation at its end finds the snapshot, then the fence
    assert [c for c in d.out if isinstance(c, ConsumerWork) and c.op == "install"] == []
    assert _install_logs(d) == [
        "install failed: the grant was withdrawn while it was being installed"
    ]


def test_RT_076_consumer_install_order_and_final_fence() -> None:
    d = RtDriver(files=True, runner_kind="task-machine")
    d.begin()
    d.hold_work = lambda c: c.op == "install"
    d.grant(files=True)
    eng = _installs(d)
    assert len(eng) == 1
    assert ("mcp", "install", TASK) not in d.log
    d.finish_work(eng[0])
    i_m = d.log.index(("mcp", "install", TASK))
    assert d.log[i_m + 1] == ("person", "install", TASK)
    files = _installs(d, "files")
    assert len(files) == 1
    assert files[0].request is eng[0].request
    assert d.rt.open_run(TASK) is None  # resolves only after Files and the final fence
    d.finish_work(files[0])
    assert d.rt.open_run(TASK) == 1
    # the final fence: withdrawn while Files installed -> the install fails
    d2 = RtDriver(files=True, runner_kind="task-machine")
    d2.begin()
    d2.hold_work = lambda c: c.op == "install" and c.consumer == "files"
    d2.grant(files=True)
    files2 = _installs(d2, "files")
    assert len(files2) == 1
    d2.hold_work = lambda c: False
    d2.begin(run=2)
    d2.finish_work(files2[0])
    msg = "install failed: the grant was withdrawn while it was being installed"
    assert msg in _install_logs(d2)


def test_RT_077_a_failing_step_stops_the_install() -> None:
    d = RtDriver()
    d.work_fail = lambda c: c.op == "install" and c.consumer == "engines"
    d.usable()
    assert _install_logs(d) == ["install failed: engines install failed"]
    assert ("mcp", "install", TASK) not in d.log
    d2 = RtDriver()

    def boom(req: object) -> None:
        raise CredentialUnavailable("mcp could not install")

    d2.mcp.install = boom  # type: ignore[method-assign]
    d2.usable()
    assert _install_logs(d2) == ["install failed: mcp could not install"]
    assert ("person", "install", TASK) not in d2.log


def test_RT_078_credential_change_has_no_activation_and_inherits() -> None:
    d = RtDriver(replica=True)
    d.usable()
    d.frame(commit_frame(TASK, 1, P0))
    assert d.replica is not None
    acts = len([c for c in d.replica.calls if c[0] == "activate"])
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 4,
        }
    )
    assert len([c for c in d.replica.calls if c[0] == "activate"]) == acts
    assert _installs(d)[-1].request.reason == "credential-change"
    v2 = d.rt.registry.current_view(TASK, 1, d.now)
    assert v2 is not None
    assert d.rt.view_generation(v2) == 1


def test_RT_079_no_replica_means_no_activation_and_no_generation() -> None:
    d = RtDriver()
    d.usable()
    v = d.rt.registry.current_view(TASK, 1, d.now)
    assert v is not None
    assert d.rt.view_generation(v) is None
    assert len(_installs(d)) == 1


def test_RT_080_open_after_shutdown_fails_before_any_consumer() -> None:
    d = RtDriver()
    d.usable()
    v = d.rt.registry.current_view(TASK, 1, d.now)
    assert v is not None
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    n = len(d.log)
    # The registry sends no OpenGate once shut down, so the open hook is called directly: the
    # refusal guards a registry that would.
    err = d.rt._open_gate(v.assignment, v)
    assert err == CredentialFailure(message="the runner is shutting down")
    assert d.log[n:] == []


def test_RT_081_open_order() -> None:
    d = RtDriver(files=True, runner_kind="task-machine")
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=True))
    n = len(d.out)
    ln = len(d.log)
    d.grant(files=True)
    opens = [x for x in d.log[ln:] if x[1] == "open"]
    assert [x[0] for x in opens] == ["engines", "mcp", "person", "files"]
    tail = [c for c in d.out[n:] if isinstance(c, (Notify, RunSetup))]
    assert [type(c).__name__ + getattr(c, "what", "") for c in tail] == [
        "Notifymcp-served",
        "Notifyenv-served",
        "RunSetup",
    ]
    assert d.rt.open_run(TASK) == 1


def test_RT_082_a_failing_open_stops_later_opens_and_records_nothing() -> None:
    d = RtDriver()
    d.mcp.fail_open = True
    d.begin()
    ln = len(d.log)
    d.grant()
    opens = [x[0] for x in d.log[ln:] if x[1] == "open"]
    assert opens[:2] == ["engines", "mcp"]
    assert "person" not in opens[:3]
    assert d.rt.open_run(TASK) is None
    # the registry's compensating close ("cleanup-failed") closes all of them
    after = d.log[ln + opens.index("mcp") + 1 :]
    assert ("person", "close", TASK, "1") in after
    # the open itself records nothing and notifies no one
    v = d.rt.registry.current_view(TASK, 1, d.now)
    d2 = RtDriver()
    d2.usable()
    d2.begin(run=2)  # run 1's gate closed (its env-served notification is before n)
    d2.mcp.fail_open = True
    n = len(d2.out)
    ln2 = len(d2.log)
    d2.grant(run=2)
    assert [x[0] for x in d2.log[ln2:] if x[1] == "open"][:2] == ["engines", "mcp"]
    assert d2.rt.open_run(TASK) is None
    assert of(d2.out[n:], Notify) == []
    assert v is None


def test_RT_083_env_served_changed_is_a_notification_that_cannot_fail_the_gate() -> None:
    d = RtDriver()
    d.usable()
    assert d.rt.open_run(TASK) == 1
    assert [c.what for c in of(d.out, Notify)] == ["mcp-served", "env-served"]


def test_RT_084_mcp_served_changed_is_emitted_after_the_open_is_recorded() -> None:
    # Port decision: mcpServedChanged is a deferred notification (docs/runtime.md),
    # emitted after the open run is recorded; it cannot fail the open.
    d = RtDriver()
    d.begin()
    n = len(d.out)
    d.grant()
    notes = of(d.out[n:], Notify)
    assert notes[0].what == "mcp-served"
    assert d.rt.open_run(TASK) == 1


def test_RT_085_close_aborts_holds_of_its_run_and_older_only() -> None:
    d = RtDriver()
    s = d.usable(run=1)
    h1 = d.hold(s).value  # type: ignore[union-attr]
    d.close_hook(0)
    assert d.rt.hold_reason(h1.hold_id) is None
    d.close_hook(1)
    assert d.rt.hold_reason(h1.hold_id) == WITHDRAWN


def test_RT_086_close_fence_order_and_mcp_own_assignment() -> None:
    d = RtDriver(files=True, runner_kind="task-machine")
    d.usable(files=True)
    d.mcp.records[TASK] = type(d.mcp.records[TASK])(TASK, 1)
    ln = len(d.log)
    d.close_hook(2)
    assert d.log[ln:] == [
        ("engines", "close", TASK, "2"),
        ("mcp", "close", TASK, "1"),
        ("person", "close", TASK, "2"),
        ("files", "close", TASK, "2"),
    ]
    d.mcp.records[TASK] = type(d.mcp.records[TASK])(TASK, 5)
    ln = len(d.log)
    d.close_hook(2)
    assert [x[0] for x in d.log[ln:]] == ["engines", "person", "files"]


def test_RT_087_every_fence_is_attempted() -> None:
    d = RtDriver(files=True, runner_kind="task-machine")
    d.usable(files=True)
    d.engines.fail_close = Boom("CANARY-engines")
    d.person.fail_close = Boom("CANARY-person")
    ln = len(d.log)
    failures, _ = d.close_hook(1)
    assert [x[0] for x in d.log[ln:]] == ["engines", "mcp", "person", "files"]
    assert len(failures) == 2


def test_RT_088_one_failure_as_is_several_aggregated() -> None:
    from leasegate.core.runtime._machine import _first

    d = RtDriver()
    d.usable()
    d.engines.fail_close = CredentialUnavailable("engines could not close")
    one = _first(d.close_hook(1)[0])
    assert one == CredentialFailure(message="engines could not close")
    d.person.fail_close = Boom("CANARY-person")
    many = _first(d.close_hook(1)[0])
    assert many is not None
    assert many.message == "the task's credentials could not all be closed"
    assert [c.message for c in many.causes] == [
        "engines could not close",
        "a credential consumer failed",
    ]
    assert "CANARY" not in repr(many)
    assert _first([]) is None


def test_RT_089_closing_with_nothing_open_still_calls_the_fences() -> None:
    d = RtDriver(files=True)
    for _ in range(2):
        ln = len(d.log)
        _, cmds = d.close_hook(1)
        assert [x[0] for x in d.log[ln:]] == ["engines", "person", "files"]
        assert of(cmds, Notify) == []


def test_RT_090_registry_close_runs_the_same_fan_out_for_the_run_only() -> None:
    d = RtDriver()
    d.usable(run=1)
    d.engines.fail_close = Boom("CANARY")
    ln = len(d.log)
    d.begin(run=2)  # the registry closes run 1 (superseded) and run 2 (starting)
    closes = [x for x in d.log[ln:] if x[1] == "close" and x[0] == "engines"]
    assert ("engines", "close", TASK, "1") in closes
    assert ("engines", "close", TASK, "2") in closes
    # the failure reached the registry: run quarantined (reported)
    assert d.rt.registry.status(TASK) is not None


def test_RT_091_a_newer_runs_begin_closes_everything_synchronously() -> None:
    d = RtDriver(replica=True)
    s = d.usable(run=1)
    d.frame(commit_frame(TASK, 1, P0))
    h = d.hold(s).value  # type: ignore[union-attr]
    ln = len(d.log)
    d.begin(run=2)
    assert d.rt.env_snapshot(TASK, 1, P0) is None
    assert d.rt.hold_reason(h.hold_id) == CredentialFailure.interrupted("takeover")
    closed = {(x[0], x[3]) for x in d.log[ln:] if x[1] == "close"}
    assert {("engines", "1"), ("mcp", "1"), ("person", "1")} <= closed
    assert {("engines", "2"), ("person", "2")} <= closed
    d2 = RtDriver()
    s2 = d2.usable(run=1)
    h2 = d2.hold(s2).value  # type: ignore[union-attr]
    d2.feed(EndStart(now_ms=d2.now, start_id=s2))  # ended, not aborted
    d2.begin(run=2)
    assert d2.rt.hold_reason(h2.hold_id) == WITHDRAWN
