"""Races across the composition: each is a sequence of events, no threads, no sleeps."""

from __future__ import annotations

from runtime_kit import TASK, Boom, RtDriver, all_texts, commit_frame, of

from leasegate.core.registry import ReportError
from leasegate.core.runtime import (
    ConsumerWork,
    CredentialFailure,
    InterruptStarts,
    Log,
    ReleaseHold,
    RuntimeShutdown,
)

TAKEOVER = CredentialFailure.interrupted("takeover")


def test_race_stop_during_launch_wait() -> None:
    d = RtDriver(replica=True)
    s = d.begin()
    w = d.wait(s)
    d.grant()  # installing: waiting for env
    d.feed(InterruptStarts(now_ms=d.now, task_id=TASK, exact=1))  # Stop interrupts first
    assert d.error(w) == TAKEOVER
    c = d.close()
    assert d.value(c) is None
    d.frame(commit_frame(TASK, 1, ("proj-0",)))  # too late: nothing opens
    assert d.rt.open_run(TASK) is None
    assert d.hold(s).value is None  # type: ignore[union-attr]
    assert ("engines", "open", TASK, "1") not in d.log


def test_race_newer_runs_start_during_install() -> None:
    d = RtDriver()
    s1 = d.begin(run=1)
    d.hold_work = lambda c: c.op == "install"
    d.grant(run=1)
    eng1 = next(c for c in d.pending_work if c.op == "install")
    s2 = d.begin(run=2)
    assert d.rt.start_reason(s1) == TAKEOVER
    d.finish_work(eng1)  # run 1's install resumes at its fence and stops
    assert ("mcp", "install", TASK) not in d.log
    assert ("engines", "open", TASK, "1") not in d.log
    msgs = [c.message for c in of(d.out, Log)]
    assert any("the grant was withdrawn while it was being installed" in m for m in msgs)
    d.hold_work = lambda c: False
    w2 = d.wait(s2)
    d.grant(run=2)
    assert d.value(w2).assignment.run_epoch == 2
    assert d.rt.open_run(TASK) == 2


def test_race_shutdown_during_cleanup() -> None:
    d = RtDriver()
    d.usable()
    d.hold_work = lambda c: c.op == "quiesce"
    c = d.close()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    assert d.result(1) is None  # the cleanup under way is joined
    n_records = len([x for x in d.out if type(x).__name__ == "JournalRecord"])
    d.close(reason="park")  # no new cleanup after shutdown
    assert len([x for x in d.out if type(x).__name__ == "JournalRecord"]) == n_records
    d.finish_work(next(w for w in d.pending_work if w.op == "quiesce"))
    assert d.value(c) is None
    assert d.value(1) is None
    assert d.journal.owed() == ()


def test_race_credential_change_during_a_hold() -> None:
    d = RtDriver(replica=True)
    s = d.usable()
    d.frame(commit_frame(TASK, 1, ("proj-0",)))
    h = d.hold(s).value  # type: ignore[union-attr]
    v1 = h.view
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
    v2 = d.rt.registry.current_view(TASK, 1, d.now)
    assert v2 is not None
    assert v2 is not v1
    assert d.rt.hold_reason(h.hold_id) is None  # a change does not withdraw the hold
    assert d.rt.env_snapshot(TASK, 1, ("proj-0",)) is not None  # same reader generation
    h2 = d.hold(s).value  # type: ignore[union-attr]
    assert h2.view is v2
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h.hold_id))
    d.feed(ReleaseHold(now_ms=d.now, hold_id=h2.hold_id))
    assert "hold" not in d.rt.tracked()


def test_race_gate_close_failing_during_fan_out() -> None:
    d = RtDriver(files=True, runner_kind="task-machine")
    s = d.usable(files=True)
    h = d.hold(s).value  # type: ignore[union-attr]
    d.engines.fail_close = Boom("CANARY-close")
    d.mcp.fail_close = Boom("CANARY-close-2")
    ln = len(d.log)
    n = len(d.out)
    d.begin(run=2)
    closes1 = [x[0] for x in d.log[ln:] if x[1] == "close" and x[3] == "1"]
    assert closes1[:4] == ["engines", "mcp", "person", "files"]  # every fence attempted
    assert d.rt.hold_reason(h.hold_id) == TAKEOVER
    st = d.rt.registry.status(TASK)
    assert st is not None
    assert of(d.out[n:], ReportError)  # the registry reported the failed close
    assert "CANARY" not in all_texts(d.out)
    assert [c for c in of(d.out[n:], ConsumerWork) if c.op == "install"] == []
