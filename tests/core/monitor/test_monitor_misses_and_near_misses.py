"""Misses of the invariant monitor found by attacking it, and their near misses.

Each test is a sequence the monitor got wrong before its fix: hand-built
steps (as a trace holds them) or the real runtime, deliberately broken for
one test (monkeypatched), driven by events only.
"""

from __future__ import annotations

from typing import Any

import pytest
from monitor_kit import MonitoredDriver
from test_monitor_properties import T, ev, props, run_trace

from leasegate.core.monitor import PortCall, ViewStamp
from leasegate.core.registry import CancelTimer, StartTimer
from leasegate.core.runtime import (
    Answer,
    BeginStart,
    CloseAssignment,
    CredentialFailure,
    CredentialRuntime,
    Failed,
    RuntimeShutdown,
)

T0 = 1_800_000_000_000


def _armed_then_closed() -> list[Any]:
    return [
        (
            BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=1),
            [],
            [StartTimer(timer_id=5, delay_ms=20_000), Answer(call_id=1, value=-1)],
        ),
        (CloseAssignment(now_ms=T0, call_id=2, task_id=T, run_epoch=1, reason="stop"), [], []),
    ]


def test_timer_armed_after_end_flags_a_close_that_settled_with_a_failure() -> None:
    """A close whose consumers failed is answered ``Failed`` (RT-088): the run
    ended all the same, and a timer still armed for it is a leak."""
    failed = Failed(call_id=2, error=CredentialFailure(message="a credential consumer failed"))
    mon = run_trace([*_armed_then_closed(), (ev(), [], [failed])])
    assert props(mon) == ["timer-armed-after-end"]


def test_timer_armed_after_end_flags_a_shutdown_that_settled_with_a_failure() -> None:
    failed = Failed(call_id=3, error=CredentialFailure(message="a credential consumer failed"))
    mon = run_trace(
        [
            (ev(), [], [StartTimer(timer_id=-9, delay_ms=5)]),
            (RuntimeShutdown(now_ms=T0, call_id=3), [], []),
            (ev(), [], [failed]),
        ]
    )
    assert props(mon) == ["timer-armed-after-end"]


def test_a_runtime_that_forgets_timers_is_caught_at_a_failed_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real runtime, broken to never cancel a timer; the close fails
    (an engine's close raises): before the fix the monitor stayed silent."""
    monkeypatch.setattr(CredentialRuntime, "_clear_timer", lambda self, tid: None)
    d = MonitoredDriver()
    s = d.usable()
    d.wait(s)  # a launch wait: its deadline timer is never cancelled now
    d.engines.fail_close = RuntimeError("close failed")
    d.close()
    got = [v for v in d.monitor.violations if v.property == "timer-armed-after-end"]
    assert got
    assert (got[0].task_id, got[0].run_epoch) == (T, 1)


def test_a_failed_close_of_a_correct_runtime_is_clean() -> None:
    d = MonitoredDriver()
    s = d.usable()
    d.wait(s)
    d.engines.fail_close = RuntimeError("close failed")
    d.close()
    assert d.monitor.violations == []
    assert d.monitor.internal_errors == 0


# ---------------------------------------------------------------------------
# view-below-floor-or-expired: a view *served* to the host, not only a gate


def _served(view_exp: int, rev: int, now: int, floor: int | None = None) -> list[Any]:
    from test_monitor_properties import view

    from leasegate.core.runtime import AwaitLaunchReady, HandleFrame

    steps: list[Any] = [
        (
            BeginStart(now_ms=T0, call_id=1, task_id=T, run_epoch=1),
            [],
            [Answer(call_id=1, value=-1)],
        ),
    ]
    if floor is not None:
        stale = {
            "kind": "lease.stale",
            "taskId": T,
            "runEpoch": 1,
            "wantedRevision": floor,
            "minRevision": floor,
            "removed": [],
        }
        steps.append((HandleFrame(now_ms=T0, call_id=7, frame=stale), [], []))
    steps.append(
        (
            AwaitLaunchReady(now_ms=now, call_id=2, start_id=-1),
            [],
            [Answer(call_id=2, value=view(rev=rev, exp=view_exp))],
        )
    )
    return steps


def test_view_expired_flags_an_expired_view_served_to_the_host() -> None:
    """A launch wait answered with a view already expired: the host would
    launch with dead credentials. Before the fix only gate opens were checked."""
    assert props(run_trace(_served(view_exp=T0 + 10, rev=4, now=T0 + 10))) == [
        "view-below-floor-or-expired"
    ]
    assert props(run_trace(_served(view_exp=T0 + 11, rev=4, now=T0 + 10))) == []


def test_view_below_floor_flags_a_view_below_the_floor_served_to_the_host() -> None:
    assert props(run_trace(_served(view_exp=T0 + 60_000, rev=4, now=T0, floor=5))) == [
        "view-below-floor-or-expired"
    ]
    assert props(run_trace(_served(view_exp=T0 + 60_000, rev=5, now=T0, floor=5))) == []


# ---------------------------------------------------------------------------
# secret-in-error: a secret that equals a task id is not "in" every log prefix


def _secret_equal_to_the_task_id() -> list[Any]:
    from test_monitor_properties import _read_secret

    return [
        (
            BeginStart(now_ms=T0, call_id=1, task_id="task-env-1", run_epoch=1),
            [],
            [Answer(call_id=1, value=-1)],
        ),
        _read_secret("task-env-1"),  # a project env value that happens to equal the task id
    ]


def test_secret_in_error_near_miss_a_secret_equal_to_the_task_id_in_the_log_prefix() -> None:
    """False positive before the fix: every correct log of the task
    (``[credentials] task task-env-1 run 1: forget failed``) was flagged."""
    from leasegate.core.runtime import Log

    ok = Log(message="[credentials] task task-env-1 run 1: install failed: a consumer failed")
    assert props(run_trace([*_secret_equal_to_the_task_id(), (ev(), [], [ok])])) == []


def test_secret_in_error_still_flags_that_secret_after_the_prefix() -> None:
    from leasegate.core.runtime import Log

    bad = Log(message="[credentials] task task-env-1 run 1: install failed: task-env-1")
    odd = Log(message="install of task-env-1 failed")
    assert props(run_trace([*_secret_equal_to_the_task_id(), (ev(), [], [bad])])) == [
        "secret-in-error"
    ]
    assert props(run_trace([*_secret_equal_to_the_task_id(), (ev(), [], [odd])])) == [
        "secret-in-error"
    ]


# ---------------------------------------------------------------------------
# timer-armed-after-end: a run begun again before an earlier close settled


def test_LR_123_a_same_epoch_start_while_a_close_drains_is_no_new_run() -> None:
    """Random walk seed 136 made the monitor forget a close requested
    before its run was begun again. Since Q15 (docs/registry.md) the ended
    run stays registered until its last close settled, so a same-epoch
    ``BeginStart`` made meanwhile is a no-op (LR-123): a timer armed in its
    step and still armed when the close settles is a leak of that run."""
    steps = [
        *_armed_then_closed(),  # close call 2 pending
        (
            BeginStart(now_ms=T0, call_id=3, task_id=T, run_epoch=1),
            [],
            [StartTimer(timer_id=7, delay_ms=20_000), Answer(call_id=3, value=-2)],
        ),
        (ev(), [], [CancelTimer(timer_id=5), Answer(call_id=2)]),
    ]
    mon = run_trace(steps)
    assert props(mon) == ["timer-armed-after-end"]
    assert "[7]" in mon.violations[0].message
    # the same close settling with every timer cancelled
    clean = [
        *steps[:-1],
        (ev(), [], [CancelTimer(timer_id=5), CancelTimer(timer_id=7), Answer(call_id=2)]),
    ]
    assert props(run_trace(clean)) == []


def test_LR_123_near_miss_a_run_begun_again_after_its_close_settled_is_a_new_run() -> None:
    """Once the last close of a run settled the registry forgot it: a
    same-epoch start is a new run whose timers a later close of the old run
    does not own, and whose gates may open."""
    stamp = ViewStamp(
        task_id=T,
        run_epoch=1,
        lease_id="l-1",
        manifest_revision=1,
        manifest_digest="d",
        expires_at=T0 + 3_600_000,
    )
    steps = [
        *_armed_then_closed(),
        (ev(), [], [CancelTimer(timer_id=5), Answer(call_id=2)]),
        (
            BeginStart(now_ms=T0, call_id=3, task_id=T, run_epoch=1),
            [],
            [StartTimer(timer_id=7, delay_ms=20_000), Answer(call_id=3, value=-2)],
        ),
        (ev(), [PortCall("engines", "open", T, 1, False, stamp)], []),
    ]
    assert props(run_trace(steps)) == []
    # the same open while the close still drained (the start was a no-op)
    draining = [*_armed_then_closed(), steps[3], steps[4]]
    assert props(run_trace(draining)) == ["open-after-close"]


def test_random_walk_seed_136_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from monitor_kit import BUILT, violations_of
    from test_monitor_runtime import _boot_only_recover

    BUILT.clear()
    walk = importlib.import_module("test_runtime_walk")
    monkeypatch.setattr(walk, "RtDriver", MonitoredDriver)
    monkeypatch.setattr(walk, "Recover", _boot_only_recover)
    walk._walk(136, replica=True)
    try:
        assert violations_of(BUILT) == []
    finally:
        BUILT.clear()


# ---------------------------------------------------------------------------
# Findings on the real runtime, fixed: seeds beyond the
# 60 the monitor tests walk.


@pytest.mark.parametrize("seed", [286, 338, 425])
def test_LR_123_random_walk_never_opens_a_gate_while_a_superseded_cleanup_drains(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Seed 425, step 24-30: a ``stop`` and a ``superseded`` close of task-a
    run 3; when the ``stop`` cleanup finished the registry removed the run
    although the ``superseded`` cleanup (engines, person, mcp) still drained,
    so ``BeginStart(task-a, 3)`` registered a fresh run 3 whose grant opened
    every gate and installed mcp/person while that cleanup was outstanding
    (``gate-open-during-cleanup``; seed 286 also ``open-after-close``: a close
    of the fresh run joined the draining close and never reached the
    registry). The ended run now stays registered until its last close
    settled (docs/registry.md Q15): the walks are clean."""
    import importlib

    from monitor_kit import BUILT, violations_of
    from test_monitor_runtime import _boot_only_recover

    BUILT.clear()
    walk = importlib.import_module("test_runtime_walk")
    monkeypatch.setattr(walk, "RtDriver", MonitoredDriver)
    monkeypatch.setattr(walk, "Recover", _boot_only_recover)
    walk._walk(seed, replica=seed % 2 == 0)
    try:
        assert violations_of(BUILT) == []
    finally:
        BUILT.clear()


# ---------------------------------------------------------------------------
# Mutation testing: a check no test exercised


def test_open_after_close_flags_an_install_work_started_after_shutdown() -> None:
    """Found by disabling each ``_flag`` call in turn: the ``ConsumerWork``
    install after shutdown (no port call, no close) was checked by no test."""
    from test_monitor_properties import _install, begin

    shut = run_trace(
        [
            begin(1),
            (RuntimeShutdown(now_ms=T0, call_id=9), [], []),
            (ev(), [], [_install("L1", -20)]),
        ]
    )
    assert props(shut) == ["open-after-close"]
    assert "shutdown" in shut.violations[0].message
    before = run_trace([begin(1), (ev(), [], [_install("L1", -20)])])
    assert props(before) == []
