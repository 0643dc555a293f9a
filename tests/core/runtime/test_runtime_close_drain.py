"""Monitor findings on the runtime: a run is never begun
again, requested or opened while a cleanup of that same run still drains.

Seeds 286/338/425 of the monitored random walk: two closes of one run (for
example ``stop`` then ``superseded``) each run a full cleanup, serialized on
the task's queue (LR-006). The reference removes the ended run from the
registry when the *first* close's cleanup succeeds (LR-123), so a start of
the same epoch made while the second close's cleanup drains registers a
fresh run, requests, and opens its gates and installs while the second
cleanup may still remove what was installed. The port keeps the ended run
registered until the last close of it has settled (docs/registry.md Q15).
"""

from __future__ import annotations

from typing import Any

from runtime_kit import TASK, RtDriver, grant, of

from leasegate.core.registry import SendFrame
from leasegate.core.runtime import Answer, ConsumerWork


def _requests(cmds: list[Any], run: int) -> list[Any]:
    return [
        c
        for c in of(cmds, SendFrame)
        if c.frame.__class__.__name__ == "LeaseRequest" and c.frame.run_epoch == run
    ]


def _two_closes_first_settled() -> tuple[RtDriver, int, int]:
    """Run 1 usable; ``stop`` and ``superseded`` closes requested; the
    ``stop`` cleanup finished and answered; the ``superseded`` cleanup's
    consumer work all held."""
    d = RtDriver()
    d.usable(TASK, 1)
    d.hold_work = lambda c: c.op != "install"
    stop = d.close(TASK, 1, "stop")
    sup = d.close(TASK, 1, "superseded")
    while d.result(stop) is None:
        assert d.pending_work, "the stop close never settled"
        d.finish_work()
    assert isinstance(d.result(stop), Answer)
    assert d.result(sup) is None
    return d, stop, sup


def test_LR_123_an_ended_run_stays_registered_while_another_close_of_it_drains() -> None:
    d, _stop, sup = _two_closes_first_settled()
    st = d.rt.registry.status(TASK)
    assert st is not None
    assert st.phase == "ended"
    # the superseded close's engines/person/mcp cleanups are outstanding
    cleanups = [w for w in d.pending_work if w.op == "cleanup"]
    assert {w.consumer for w in cleanups} == {"engines", "person", "mcp"}
    d.finish_work(next(w for w in cleanups if w.consumer == "engines"))
    # the same run begun again while the person and mcp cleanups drain:
    # nothing is requested, no gate opens, nothing installs
    mark = len(d.out)
    start = d.begin(TASK, 1)
    assert _requests(d.out[mark:], 1) == []
    assert d.error(d.wait(start)).message == "task assignment is not active"
    assert d.rt.open_run(TASK) is None
    assert not any(isinstance(c, ConsumerWork) and c.op == "install" for c in d.out[mark:])
    # once the last close settled, the task is free again: a new start requests
    while d.result(sup) is None:
        d.finish_work()
    assert isinstance(d.result(sup), Answer)
    assert d.rt.registry.status(TASK) is None
    mark = len(d.out)
    d.begin(TASK, 1)
    assert len(_requests(d.out[mark:], 1)) == 1


def test_LR_121_a_close_after_the_run_was_begun_again_ends_the_new_run() -> None:
    """Seed 286: a close of run 1 joined the still-draining close of the same
    run and reason, so the registry never ended the run begun again in
    between; a grant for its request then opened the gates after the close."""
    d, _stop, sup = _two_closes_first_settled()
    d.begin(TASK, 1)
    again = d.close(TASK, 1, "superseded")
    closes = [e for e in d.reg_events if e.__class__.__name__ == "CloseRun" and e.run_epoch == 1]
    while d.result(sup) is None or d.result(again) is None:
        assert d.pending_work, "a close never settled"
        d.finish_work()
    assert isinstance(d.result(again), Answer)
    # every request made for run 1 after the first close is dropped: no grant opens
    mark = len(d.out)
    for req in _requests(d.out, 1)[1:]:
        d.frame(grant(req.frame.op_id, task=TASK, epoch=1))
    assert d.rt.open_run(TASK) is None
    assert not any(isinstance(c, ConsumerWork) and c.op == "install" for c in d.out[mark:])
    assert len(closes) >= 2
