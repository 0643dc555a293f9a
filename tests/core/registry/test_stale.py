"""LR-078 … LR-090: lease.stale, revision floors, grace timer, accumulated removals."""

from __future__ import annotations

from registry_kit import TASK, Driver, engine, kinds, manifest, of, sends

from leasegate.core.registry import (
    LEASE_MIN_REVISION_GRACE_MS,
    LEASE_RETRY_MS,
    CloseReader,
    CloseRun,
    Identity,
    OpenGate,
    RunCleanup,
    StartTimer,
)


def stale(
    wanted: int, minimum: int | None = None, removed: tuple[str, ...] = (), epoch: int = 1
) -> dict[str, object]:
    return {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": epoch,
        "wantedRevision": wanted,
        "minRevision": minimum,
        "removed": list(removed),
    }


def test_LR_078_ignored_stale_frames() -> None:
    d = Driver()
    d.usable()
    assert d.frame({"kind": "lease.stale", "taskId": TASK}) == []
    assert d.frame(stale(9, epoch=2)) == []
    other = stale(9)
    other["taskId"] = "other"
    assert d.frame(other) == []
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=1, task_id=TASK, run_epoch=1))
    assert d.frame(stale(9, 9)) == []


def test_LR_079_already_handled_notice_is_ignored_entirely() -> None:
    d = Driver()
    d.usable()
    assert d.frame(stale(4, 4, ("engine-0",))) == []
    assert d.frame(stale(3, None, ("engine-0",))) == []


def test_LR_080_wanted_raise_only_replaces_the_request() -> None:
    d = Driver()
    d.usable()
    out = d.frame(stale(9))
    assert kinds(out) == ["CancelTimer", "StartTimer", "send:lease.request"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.gate_open
    assert st.wanted_revision == 9
    assert st.phase == "usable"
    d.start()
    op = d.op_id()
    out = d.frame(stale(10))  # drops the pending op and sends a new one
    assert kinds(out)[0] == "CancelTimer"
    assert d.op_id() != op


def test_LR_081_floor_resolves_removals_through_bundle_then_memory() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    out = d.frame(stale(5, 5, ("engine-1", "unknown", "engine-1")))
    cleanups = of(out, RunCleanup)
    assert [c.request.removed for c in cleanups] == [(Identity("engine", "engine-1", "rev-1"),)]
    assert cleanups[0].request.reason == "minimum-revision"
    assert cleanups[0].request.mode == "selective"


def test_LR_082_handled_floor_with_higher_wanted_ignores_removals() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.frame(stale(9, 3, ("engine-0",)))
    assert of(out, RunCleanup) == []
    assert not any(k.startswith("close:") for k in kinds(out))
    st = d.reg.status(TASK)
    assert st is not None
    assert st.min_revision == 3
    assert st.wanted_revision == 9


def test_LR_083_floor_raise_narrows_then_requests() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.frame(stale(5, 5))
    names = kinds(out)
    assert names[0] == "close:minimum-revision"
    assert names[-1] == "send:lease.request"
    assert d.reg.status(TASK).phase == "narrowing"  # type: ignore[union-attr]


def test_LR_084_narrowing_close_failure_runs_full_cleanup_in_background() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "minimum-revision"
    out = d.frame(stale(5, 5, ("engine-0",)))
    names = kinds(out)
    assert names[:2] == ["close:minimum-revision", "report:credential lease operation failed"]
    assert "cleanup:selective:minimum-revision" not in names
    assert all(t.delay_ms != LEASE_MIN_REVISION_GRACE_MS for t in of(out, StartTimer))
    d.gate_fail = lambda c: False
    st = d.reg.status(TASK)
    assert st is not None
    assert st.full_cleanup


def test_LR_085_grace_timer_escalates_once_and_is_not_moved() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.frame(stale(5, 5))
    grace = [t for t in of(out, StartTimer) if t.delay_ms == LEASE_MIN_REVISION_GRACE_MS]
    assert len(grace) == 1
    d.advance(30_000)
    out = d.frame(stale(6, 6))
    assert [t for t in of(out, StartTimer) if t.delay_ms == LEASE_MIN_REVISION_GRACE_MS] == []
    out = d.advance(30_000)
    assert "cleanup:full:minimum-revision" in kinds(out)


def test_LR_086_selective_cleanup_then_drop_below_floor_bundle() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(stale(5, 5, ("engine-0",)))
    out = d.finish_cleanup()
    assert of(out, CloseReader)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision is None
    assert st.generation == 2


def test_LR_087_below_floor_without_removals_keeps_sealed_bundle() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.frame(stale(5, 5))
    assert of(out, RunCleanup) == []
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision == 4
    assert not st.gate_open


def test_LR_088_failed_floor_cleanup_reports_and_retries() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(stale(5, 5, ("engine-0",)))
    out = d.finish_cleanup(ok=False)
    assert kinds(out)[0] == "report:credential lease operation failed"
    assert [t.delay_ms for t in of(out, StartTimer)] == [LEASE_RETRY_MS]
    out = d.advance(LEASE_RETRY_MS)
    assert "close:minimum-revision" in kinds(out)
    assert [c.request.removed for c in of(out, RunCleanup)] == [
        (Identity("engine", "engine-0", "rev-0"),)
    ]


def test_LR_089_later_removals_resolve_through_remembered_identities() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.frame(stale(5, 5, ("engine-0",)))
    d.finish_cleanup()  # bundle dropped
    out = d.frame(stale(6, 6, ("engine-1",)))
    assert [c.request.removed for c in of(out, RunCleanup)] == [
        (Identity("engine", "engine-1", "rev-1"),)
    ]
    d.finish_cleanup()
    # The next grant names engine-0 (new revision): nothing left to narrow (both cleaned).
    out = d.grant(revision=6, m=manifest(engines=[engine(0, rev="r9")]))
    assert of(out, RunCleanup) == []


def test_LR_090_grant_at_floor_during_narrowing_restores_usable() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(stale(5, 5))
    out = d.grant(revision=5)
    assert of(out, OpenGate)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "usable"
    assert st.timers == ("renewal", "expiry")
    assert sends(out) == []


def test_LR_085_status_shows_the_grace_deadline() -> None:
    d = Driver(auto_cleanups=False)
    d.usable()
    assert d.reg.status(TASK).floor_deadline_ms is None  # type: ignore[union-attr]
    d.frame(stale(5, 5))
    assert d.reg.status(TASK).floor_deadline_ms == d.now + LEASE_MIN_REVISION_GRACE_MS  # type: ignore[union-attr]
    d.grant(revision=5)
    assert d.reg.status(TASK).floor_deadline_ms is None  # type: ignore[union-attr]
