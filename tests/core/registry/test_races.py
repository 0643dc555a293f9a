"""LR-129 … LR-138: events arriving while a read, cleanup or install is in flight."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from registry_kit import T0, TASK, Driver, engine, grant, kinds, manifest, of, reports

from leasegate.core.registry import (
    BridgeAuthenticated,
    CleanupFinished,
    CloseRun,
    InstallFinished,
    LaunchFenceFailed,
    OpenGate,
    RunCleanup,
    RunInstall,
    StartRun,
)

OLD_EXPIRY = T0 + 100_000


def _settle(d: Driver) -> list[object]:
    """Complete every pending read, cleanup and install, FIFO, until none is left."""
    start = len(d.log)
    d.auto_reads = d.auto_cleanups = d.auto_installs = True
    while d.pending_reads or d.pending_cleanups or d.pending_installs:
        if d.pending_reads:
            d.finish_read()
        elif d.pending_cleanups:
            d.finish_cleanup()
        else:
            d.finish_install()
    return d.log[start:]


def _in_flight(kind: str) -> Driver:
    """A run with a grant ``lease-old`` (rev 5) stuck at ``kind``."""
    d = Driver()
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))  # committed: lease-1, rev 4
    d.auto_reads = kind != "read"
    d.auto_cleanups = kind != "cleanup"
    d.auto_installs = kind != "install"
    d.start()
    d.grant(
        m=manifest(engines=[engine(0)]), revision=5, lease_id="lease-old", expires_at=OLD_EXPIRY
    )
    pending = {
        "read": d.pending_reads,
        "cleanup": d.pending_cleanups,
        "install": d.pending_installs,
    }
    assert len(pending[kind]) == 1, kind
    return d


def _stop(d: Driver) -> None:
    d.feed(CloseRun(now_ms=d.now, call_id=70, task_id=TASK, run_epoch=1))


def _supersede(d: Driver) -> None:
    d.feed(StartRun(now_ms=d.now, call_id=71, task_id=TASK, run_epoch=2))


def _floor(d: Driver) -> None:
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 6,
            "minRevision": 6,
            "removed": [],
        }
    )


def _expire(d: Driver) -> None:
    d.now = OLD_EXPIRY  # the candidate's expiry; no timer of it was armed


def _newer(d: Driver) -> None:
    d.feed(BridgeAuthenticated(now_ms=d.now))
    d.frame(grant(d.op_id(), m=manifest(engines=[engine(0)]), revision=6, lease_id="lease-new"))


DISTURBANCES: dict[str, Callable[[Driver], None]] = {
    "stop": _stop,
    "supersede": _supersede,
    "floor": _floor,
    "expiry": _expire,
    "newer": _newer,
}


@pytest.mark.parametrize("kind", ["read", "cleanup", "install"])
@pytest.mark.parametrize("what", list(DISTURBANCES))
def test_LR_133_race_matrix_candidate_is_never_committed_or_opened(kind: str, what: str) -> None:
    d = _in_flight(kind)
    mark = len(d.log)
    DISTURBANCES[what](d)
    rest = d.log[mark:] + _settle(d)
    assert [o.view.lease_id for o in of(rest, OpenGate) if o.view.lease_id == "lease-old"] == []  # type: ignore[arg-type]
    st = d.reg.status(TASK)
    if st is not None and st.assignment.run_epoch == 1:
        view = d.reg.current_view(TASK, 1, d.now)
        assert view is None or view.lease_id != "lease-old"
    assert any(
        m in ("grant became stale while it was being read", "credential lease operation failed")
        for m in reports(rest)  # type: ignore[arg-type]
    )


def test_LR_129_stop_during_reads_abandons_without_cleanup_of_its_own() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=1))
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
    assert [c.request.reason for c in d.pending_cleanups] == ["stopped"]
    assert of(out, RunInstall) == []
    assert of(out, OpenGate) == []
    assert "StartTimer" not in kinds(out)


def test_LR_130_stop_during_install_queues_cleanup_behind_it_without_escalation() -> None:
    d = Driver(auto_installs=False, auto_cleanups=False)
    d.start()
    d.grant()
    out = d.feed(CloseRun(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=1))
    assert of(out, RunCleanup) == []
    out = d.finish_install()
    assert [c.request.reason for c in of(out, RunCleanup)] == ["stopped"]
    assert "cleanup:full:manifest-narrowed" not in kinds(out)
    assert reports(out) == ["grant became stale while it was being read"]


def test_LR_131_op_dropped_after_install_attempt_escalates() -> None:
    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 9,
            "minRevision": None,
            "removed": [],
        }
    )
    out = d.finish_install()
    assert "cleanup:full:manifest-narrowed" in kinds(out)


def test_LR_132_op_dropped_before_install_discards_without_retry() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.feed(BridgeAuthenticated(now_ms=d.now))
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
    st = d.reg.status(TASK)
    assert st is not None
    assert "retry" not in st.timers
    assert st.pending_op is not None


def test_LR_134_full_cleanup_during_reads_queues_install_behind_it() -> None:
    d = Driver(auto_reads=False, auto_cleanups=False, auto_installs=False)
    d.start()
    d.grant()
    d.finish_read()
    d.finish_install()
    d.start()
    d.grant(revision=5)
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_read()
    assert d.pending_installs == []  # behind the full cleanup
    out = d.feed(CleanupFinished(now_ms=d.now, cmd_id=d.pending_cleanups.pop(0).cmd_id))
    inst = of(out, RunInstall)
    assert len(inst) == 1
    out = d.feed(InstallFinished(now_ms=d.now, cmd_id=inst[0].cmd_id))
    d.pending_installs.clear()
    assert "report:grant became stale while it was being read" in kinds(out)
    assert "cleanup:full:manifest-narrowed" in kinds(out)


def test_LR_135_committed_grant_waiting_for_old_readers_skips_open_after_stop() -> None:
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
            "version": 7,
        }
    )
    change = d.pending_reads.pop(0)
    d.start()
    d.grant(revision=5)
    d.finish_read()  # commits, waits for the old reader
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=1))
    out = d.finish_read(change)
    assert of(out, OpenGate) == []


def test_LR_136_change_in_flight_fails_when_a_grant_commits() -> None:
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
            "version": 7,
        }
    )
    change = d.pending_reads.pop(0)
    d.start()
    d.grant(revision=5)
    d.finish_read()
    out = d.finish_read(change)
    assert "report:credential read crossed an assignment fence" in kinds(out)


def test_LR_138_newer_grant_serializes_installs_after_older() -> None:
    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    first = d.pending_installs[0]
    d.feed(BridgeAuthenticated(now_ms=d.now))
    d.grant(revision=5, lease_id="lease-new")
    assert d.pending_installs == [first]  # the newer install waits
    out = d.finish_install()
    # the newer install runs next; the older's escalation (close, then its
    # full cleanup) is queued behind it on the run's FIFO
    assert kinds(out)[:3] == ["close:manifest-narrowed", "CloseReader", "RunInstall"]
    assert of(out, RunInstall)[0].request.next.lease_id == "lease-new"
    out = d.finish_install()
    assert "cleanup:full:manifest-narrowed" in kinds(out)
    assert of(out, OpenGate) == []


def _change_in_flight(kind: str) -> Driver:
    """A usable run with a credential change of engine-0 to version 7 stuck at ``kind``."""
    d = Driver()
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]), expires_at=OLD_EXPIRY)
    d.auto_reads = kind != "read"
    d.auto_cleanups = kind != "cleanup"
    d.auto_installs = kind != "install"
    if kind == "cleanup":
        d.ssm.denied.add(engine(0)["parameter"])  # a refusal: hold + selective cleanup
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-0",
            "revision": "rev-0",
            "version": 7,
        }
    )
    pending = {
        "read": d.pending_reads,
        "cleanup": d.pending_cleanups,
        "install": d.pending_installs,
    }
    assert len(pending[kind]) == 1, kind
    d.ssm.denied.clear()
    return d


def _newer_for_change(d: Driver) -> None:
    held = list(d.pending_reads)  # the change's read, if that is what is in flight
    d.pending_reads.clear()
    d.start()  # a renewal request
    d.frame(
        grant(
            d.op_id(), m=manifest(engines=[engine(0), engine(1)]), revision=5, lease_id="lease-new"
        )
    )
    while d.pending_reads:  # the newer grant's own reads complete first
        d.finish_read()
    d.pending_reads.extend(held)


CHANGE_DISTURBANCES: dict[str, Callable[[Driver], None]] = {
    "stop": _stop,
    "supersede": _supersede,
    "floor": _floor,
    "expiry": _expire,
    "newer": _newer_for_change,
}


@pytest.mark.parametrize("kind", ["read", "cleanup", "install"])
@pytest.mark.parametrize("what", list(CHANGE_DISTURBANCES))
def test_LR_136_change_race_matrix_change_is_never_committed(kind: str, what: str) -> None:
    d = _change_in_flight(kind)
    mark = len(d.log)
    CHANGE_DISTURBANCES[what](d)
    rest = d.log[mark:] + _settle(d)
    if (kind, what) == ("install", "newer"):
        # The run's FIFO puts the newer grant's install behind the change's:
        # the change commits first, the newer grant then fails its post-install
        # fence and escalates to a full cleanup (LR-138, LR-057).
        names = kinds(rest)  # type: ignore[arg-type]
        assert "report:grant became stale while it was being read" in names
        assert "cleanup:full:manifest-narrowed" in names
        assert d.reg.current_view(TASK, 1, d.now) is None
        return
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is None or view.engines[0].observed_version != 7
    assert [o for o in of(rest, OpenGate) if o.view.engines[0].observed_version == 7] == []  # type: ignore[attr-defined]
    assert any(
        m
        in (
            "credential read crossed an assignment fence",
            "a refused credential's cleanup crossed an assignment fence",
            "credential reader is sealed",
        )
        for m in reports(rest)  # type: ignore[arg-type]
    ), reports(rest)  # type: ignore[arg-type]
