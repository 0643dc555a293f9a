"""LR-119 … LR-128: close, park, teardown, supersede and shutdown."""

from __future__ import annotations

import pytest
from registry_kit import TASK, Driver, kinds, of, reports, sends

from leasegate.core.registry import (
    CallDone,
    CloseReader,
    CloseRun,
    RefreshRequested,
    RunCleanup,
    Shutdown,
    StartRun,
    WaitUsable,
)


def close(d: Driver, reason: str = "stop", epoch: int = 1, call_id: int = 90) -> list[object]:
    return d.feed(
        CloseRun(now_ms=d.now, call_id=call_id, task_id=TASK, run_epoch=epoch, reason=reason)
    )  # type: ignore[arg-type]


def test_LR_119_close_of_unknown_assignment_does_nothing() -> None:
    d = Driver()
    d.usable()
    assert kinds(close(d, epoch=2)) == ["done:None"]
    assert d.reg.status(TASK).gate_open  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("reason", "gate"),
    [
        ("stop", "stopped"),
        ("park", "parked"),
        ("teardown", "teardown"),
        ("superseded", "superseded"),
    ],
)
def test_LR_120_close_reasons(reason: str, gate: str) -> None:
    d = Driver()
    d.usable()
    out = close(d, reason)
    assert kinds(out)[0] == f"close:{gate}"
    assert of(out, RunCleanup)[0].request.reason == gate


def test_LR_121_ending_synchronously() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()  # op pending
    d.feed(WaitUsable(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=1))  # resolves at once
    d.feed(
        RefreshRequested(
            now_ms=d.now,
            call_id=6,
            task_id=TASK,
            run_epoch=1,
            credential_id="engine-0",
            revision="rev-0",
        )
    )
    out = close(d)
    names = kinds(out)
    assert names[0] == "close:stopped"
    # op timeout, renewal? (cancelled by the request), expiry timers cancelled
    assert names[1:4] == ["CancelTimer", "CancelTimer", "CancelTimer"]
    assert "RefreshDone" in names
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "ended"
    assert st.timers == ()
    assert st.pending_op is None


def test_LR_121_waiters_rejected_when_run_ends() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.feed(WaitUsable(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=1))
    out = close(d)
    assert [c.error for c in of(out, CallDone) if c.call_id == 5] == ["task assignment ended"]


def test_LR_122_ended_cleanup_full_then_drop_bundle() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    close(d)
    assert [c.request.mode for c in d.pending_cleanups] == ["full"]
    out = d.finish_cleanup()
    assert of(out, CloseReader)
    assert kinds(out)[-1] == "done:None"
    assert d.reg.status(TASK) is None


def test_LR_122_quarantined_ended_run_closes_again_and_cleans_twice() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "stopped"
    out = close(d)
    # the end's close failed; the cleanup's first close also fails (same reason)
    assert kinds(out) == [
        "close:stopped",
        "report:credential lease operation failed",
        "CancelTimer",  # renewal
        "CancelTimer",  # expiry
        "close:stopped",
        "report:credential lease operation failed",
        "cleanup:full:stopped",
    ]
    d.gate_fail = lambda c: False
    out = d.finish_cleanup()
    assert kinds(out)[-2:] == ["close:stopped", "cleanup:full:stopped"]
    out = d.finish_cleanup()
    assert kinds(out) == ["done:None"]


def test_LR_123_failed_ended_cleanup_keeps_run_registered() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    close(d)
    out = d.finish_cleanup(ok=False)
    assert kinds(out) == ["done:credential lease operation failed"]
    assert reports(out) == []
    assert d.reg.status(TASK) is not None
    assert kinds(d.start()) == ["done:None"]  # same epoch: no-op
    out = close(d)
    assert kinds(out)[0] == "close:stopped"
    out = d.finish_cleanup(ok=False)
    assert d.reg.status(TASK) is not None
    # a higher-epoch start runs its cleanup again as the predecessor cleanup
    out = d.feed(StartRun(now_ms=d.now, call_id=91, task_id=TASK, run_epoch=2))
    assert kinds(out)[:2] == ["close:superseded", "close:starting"]
    assert [c.request.reason for c in d.pending_cleanups] == ["superseded"]
    out = d.finish_cleanup()
    assert [f.run_epoch for f in sends(out)] == [2]


def test_LR_124_close_during_startup_cleanup_waits_for_it() -> None:
    d = Driver(auto_cleanups=False)
    d.start(recovery=True)
    close(d)
    assert [c.request.reason for c in d.pending_cleanups] == ["recovery"]
    out = d.finish_cleanup()
    assert sends(out) == []
    assert [c.request.reason for c in d.pending_cleanups] == ["stopped"]


def test_LR_124_the_close_that_started_a_startup_cleanup_queues_its_cleanup_after_the_joiners() -> (
    None
):
    """Decision R4: the close that started the startup cleanup resumes after its joiners."""
    d = Driver(auto_cleanups=False)

    def inner(cmd: object) -> None:
        # The first close is made from inside the start's close callback, so
        # it is the one that starts the startup cleanup.
        assert getattr(cmd, "reason", None) == "recovery"
        close(d, "park", call_id=91)

    d.on_gate = inner
    d.start(recovery=True)
    assert [c.request.reason for c in d.pending_cleanups] == ["recovery"]
    close(d, "teardown", call_id=92)
    assert [c.request.reason for c in d.pending_cleanups] == ["recovery"]
    out = d.finish_cleanup()
    assert [c.request.reason for c in of(out, RunCleanup)] == ["teardown"]
    out = d.finish_cleanup()
    assert [c.request.reason for c in of(out, RunCleanup)] == ["parked"]
    out = d.finish_cleanup()
    done = [(c.call_id, c.error) for c in d.log if isinstance(c, CallDone) and c.call_id > 90]
    assert done == [(92, None), (91, None)]
    assert d.reg.status(TASK) is None


def test_LR_125_ended_registered_run_ignores_frames() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()
    op = d.op_id()
    close(d)
    assert d.grant() == []
    assert (
        d.frame(
            {
                "kind": "lease.stale",
                "taskId": TASK,
                "runEpoch": 1,
                "wantedRevision": 9,
                "minRevision": 9,
                "removed": [],
            }
        )
        == []
    )
    assert (
        d.frame(
            {
                "kind": "credential.changed",
                "taskId": TASK,
                "runEpoch": 1,
                "credentialId": "engine-0",
                "revision": "rev-0",
                "version": 9,
            }
        )
        == []
    )
    assert op


def test_LR_126_shutdown_ends_everything_without_cleanup() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.feed(Shutdown(now_ms=d.now, call_id=7))
    names = kinds(out)
    assert names[0] == "close:shutdown"
    assert not any(n.startswith("cleanup:") for n in names)
    assert d.reg.status(TASK) is None


def test_LR_127_shutdown_completes_after_readers_drain() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 9,
        }
    )
    out = d.feed(Shutdown(now_ms=d.now, call_id=7))
    assert of(out, CallDone) == []
    assert of(out, CloseReader) == []
    out = d.finish_read()
    assert of(out, CloseReader)
    assert [c.call_id for c in of(out, CallDone)] == [7]


def test_LR_128_registry_after_shutdown_accepts_new_starts() -> None:
    d = Driver()
    d.usable()
    d.feed(Shutdown(now_ms=d.now, call_id=7))
    assert d.grant() == []
    assert d.reg.current_view(TASK, 1, d.now) is None
    out = d.feed(StartRun(now_ms=d.now, call_id=8, task_id=TASK, run_epoch=1))
    assert "send:lease.request" in kinds(out)


def test_LR_128_in_flight_grant_fails_its_fence_after_shutdown() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.feed(Shutdown(now_ms=d.now, call_id=7))
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
    assert [c for c in out if type(c).__name__ == "OpenGate"] == []
    assert of(out, CloseReader)  # the candidate's reader is destroyed
