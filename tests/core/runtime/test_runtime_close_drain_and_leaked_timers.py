"""Attacks on the Q15 close drain (docs/registry.md), the
replaced recovery's setup (docs/runtime.md) and the monitor's timer owner.

Liveness: an ended run that stays registered while another close of it
drains must never make the task unstartable for good, and every host call
made meanwhile is answered. Safety: no gate opens while a cleanup of the run
is outstanding (checked by the invariant monitor on every step). Monitor: a
timer leaked by an older run's step after a newer run began is still caught.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitor"))

from monitor_kit import MonitoredDriver
from runtime_kit import TASK, grant

from leasegate.core._base import Command, Event
from leasegate.core.registry import SendFrame, StartTimer
from leasegate.core.runtime import (
    Answer,
    ConsumerWork,
    CredentialRuntime,
    Failed,
    RuntimeShutdown,
)


def _requests(d: MonitoredDriver, since: int, run: int) -> list[Any]:
    return [
        c
        for c in d.out[since:]
        if isinstance(c, SendFrame)
        and c.frame.__class__.__name__ == "LeaseRequest"
        and c.frame.run_epoch == run
    ]


def _stop_settled_superseded_draining() -> tuple[MonitoredDriver, int, int]:
    """Run 1 usable; ``stop`` then ``superseded`` closes; the stop close
    answered, the superseded close's three consumer cleanups held."""
    d = MonitoredDriver()
    d.usable(TASK, 1)
    d.hold_work = lambda c: c.op != "install"
    stop = d.close(TASK, 1, "stop")
    sup = d.close(TASK, 1, "superseded")
    while d.result(stop) is None:
        assert d.pending_work, "the stop close never settled"
        d.finish_work()
    assert isinstance(d.result(stop), Answer)
    assert d.result(sup) is None
    assert sorted(w.consumer for w in d.pending_work) == ["engines", "mcp", "person"]
    return d, stop, sup


def test_LR_123_a_failed_last_close_leaves_the_run_ended_until_a_close_retry() -> None:
    """The stop close was answered, then the draining superseded close
    failed: the ended run stays registered (the port keeps a run whose last
    close failed quarantined, as after a single failed close, LR-124), so a
    same-epoch start is answered but requests nothing; a retried close frees
    the task, and a newer epoch starts at once either way."""
    d, _stop, sup = _stop_settled_superseded_draining()
    d.finish_work(d.pending_work[0], ok=False)
    while d.result(sup) is None:
        assert d.pending_work, "the superseded close never settled"
        d.finish_work()
    assert isinstance(d.result(sup), Failed)
    st = d.rt.registry.status(TASK)
    assert st is not None
    assert st.phase == "ended"
    # a same-epoch start is answered (never dropped) and requests nothing
    mark = len(d.out)
    start = d.begin(TASK, 1)
    assert _requests(d, mark, 1) == []
    assert d.error(d.wait(start)).message == "task assignment is not active"
    # no timer retries on its own: the host's close retry frees the task
    assert d.rt.registry.status(TASK).timers == ()  # type: ignore[union-attr]
    again = d.close(TASK, 1, "stop")
    while d.result(again) is None:
        assert d.pending_work, "the retried close never settled"
        d.finish_work()
    assert isinstance(d.result(again), Answer)
    assert d.rt.registry.status(TASK) is None
    mark = len(d.out)
    d.begin(TASK, 1)
    assert len(_requests(d, mark, 1)) == 1
    assert d.monitor.violations == []


def test_LR_123_a_newer_epoch_starts_while_the_close_drains_and_opens_only_after() -> None:
    """A newer epoch begun while the superseded close of run 1 drains is
    answered at once; its startup cleanup queues behind run 1's cleanups
    (LR-004), so it requests and opens its gates only after they ended."""
    d, _stop, sup = _stop_settled_superseded_draining()
    mark = len(d.out)
    d.begin(TASK, 2)
    assert _requests(d, mark, 2) == []
    while d.result(sup) is None:
        assert d.pending_work
        d.finish_work()
    while d.pending_work:
        d.finish_work()
    reqs = _requests(d, mark, 2)
    assert len(reqs) == 1
    d.frame(grant(reqs[0].frame.op_id, task=TASK, epoch=2))
    assert d.rt.open_run(TASK) == 2
    assert d.monitor.violations == []


def test_LR_126_shutdown_while_a_close_drains_answers_every_call() -> None:
    """Shutdown in between: the start made while the close drains, its launch
    wait, the draining close and the shutdown are all answered; no gate opens."""
    d, _stop, sup = _stop_settled_superseded_draining()
    mark = len(d.out)
    start = d.begin(TASK, 1)
    wait = d.wait(start)
    shut = d.call(lambda c: RuntimeShutdown(now_ms=d.now, call_id=c))
    late = d.begin_result(TASK, 1)
    assert isinstance(late, Failed)
    while d.pending_work:
        d.finish_work()
    d.advance(10 * 60_000)
    for call in (sup, wait, shut):
        assert d.result(call) is not None, call
    assert isinstance(d.result(shut), Answer)
    assert d.rt.open_run(TASK) is None
    assert not any(isinstance(c, ConsumerWork) and c.op == "install" for c in d.out[mark:])
    assert _requests(d, mark, 1) == []
    assert d.monitor.violations == []


def _leak_a_timer_when_a_close_of_run_1_settles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A deliberately broken runtime: the step that answers a close of run 1
    also arms a timer nobody cancels (a leak of run 1)."""
    real = CredentialRuntime.handle
    close_calls: set[int] = set()
    leaked: list[int] = []

    def handle(self: CredentialRuntime, event: Event) -> list[Command]:
        name = event.__class__.__name__
        if name == "CloseAssignment" and getattr(event, "run_epoch", None) == 1:
            close_calls.add(event.call_id)  # type: ignore[attr-defined]
        out = real(self, event)
        at = [
            i
            for i, c in enumerate(out)
            if isinstance(c, (Answer, Failed)) and c.call_id in close_calls
        ]
        if at:
            # armed before the close's answer in the same step
            leaked.append(990_000 + len(leaked))
            timer = StartTimer(timer_id=leaked[-1], delay_ms=3_600_000)
            out = [*out[: at[0]], timer, *out[at[0] :]]
        return out

    monkeypatch.setattr(CredentialRuntime, "handle", handle)
    return leaked


def test_RT_106_a_leaked_timer_of_an_older_run_is_still_caught_by_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_timer_owner`` gives timers armed in a step about run 1 to run 2
    once run 2 began; a timer leaked by run 1's close is then not flagged at
    that close, but it is still flagged when shutdown is answered."""
    leaked = _leak_a_timer_when_a_close_of_run_1_settles(monkeypatch)
    d = MonitoredDriver()
    d.usable(TASK, 1)
    d.hold_work = lambda c: c.op != "install"
    close = d.close(TASK, 1, "stop")
    d.begin(TASK, 2)
    while d.result(close) is None:
        assert d.pending_work
        d.finish_work()
    assert leaked
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=d.cid()))
    while d.pending_work:
        d.finish_work()
    flagged = [v for v in d.monitor.violations if v.property == "timer-armed-after-end"]
    assert flagged
    assert str(leaked[0]) in str(flagged[0])


def test_RT_106_a_leaked_timer_of_an_older_run_is_flagged_at_its_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leaked = _leak_a_timer_when_a_close_of_run_1_settles(monkeypatch)
    d = MonitoredDriver()
    d.usable(TASK, 1)
    d.hold_work = lambda c: c.op != "install"
    close = d.close(TASK, 1, "stop")
    d.begin(TASK, 2)
    while d.result(close) is None:
        assert d.pending_work
        d.finish_work()
    assert leaked
    flagged = [v for v in d.monitor.violations if str(leaked[0]) in v.message]
    assert [v.property for v in flagged] == ["timer-armed-after-end"]


def test_RT_135_the_shutdown_drain_bound_timer_is_not_a_run_timer() -> None:
    d = MonitoredDriver(replica=True)
    d.begin(TASK, 1)
    d.grant(TASK, 1)  # the install awaits env values (no commit yet)
    d.hold_work = lambda c: True  # the shutdown's consumer drains stay pending
    shut = d.call(lambda c: RuntimeShutdown(now_ms=d.now, call_id=c))
    bound = [c for c in d.out if isinstance(c, StartTimer)][-1].timer_id
    assert bound in d.timers
    assert d.result(shut) is None
    close = d.close(TASK, 1, "stop")
    assert isinstance(d.result(close), Answer)
    assert d.monitor.violations == []


def test_LR_123_a_start_during_the_drain_does_not_blind_the_monitor_to_the_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leaked = _leak_a_timer_when_a_close_of_run_1_settles(monkeypatch)
    d, _stop, sup = _stop_settled_superseded_draining()
    leaked.clear()
    before = len(d.monitor.violations)
    d.begin(TASK, 1)  # a no-op in the registry (LR-123, Q15)
    while d.result(sup) is None:
        assert d.pending_work
        d.finish_work()
    assert leaked
    new = [v for v in d.monitor.violations[before:] if str(leaked[0]) in v.message]
    assert [v.property for v in new] == ["timer-armed-after-end"]
