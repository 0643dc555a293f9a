"""A recovered setup still running after its recovery was replaced is drained
by the run's whole-task cleanup (RT-096, RT-103).

Found by the monitored random walk (seed 12006): ``ResumeRecovered`` for a
task whose recovered setup is running ends that recovery (its setup is told
to stop, RT-103) and registers a new record; the reference's drain (RT-096)
only looks at the task's current record, so a later whole-task cleanup
(a denial, a close) went ahead, removed paths and let a new grant open its
gates while the old setup (root writes in the task's runtime) still ran.
The port's drain joins every running setup of the task's runs <= the
cleanup's run, the replaced ones included (docs/runtime.md).
"""

from __future__ import annotations

from runtime_kit import TASK, RtDriver, of

from leasegate.core.runtime import Abort, Answer, ConsumerWork, ResumeRecovered, RunSetup


def _resume(d: RtDriver, has_setup: bool) -> None:
    d.feed(ResumeRecovered(now_ms=d.now, task_id=TASK, run_epoch=1, has_setup=has_setup))


def _replaced_recovery_with_its_setup_running() -> RtDriver:
    d = RtDriver()
    _resume(d, True)
    d.grant(TASK, 1)
    assert len(of(d.out, RunSetup)) == 1  # the setup runs (held by the driver)
    assert d.pending_setups
    mark = len(d.out)
    _resume(d, False)  # the recovery is replaced: its setup is told to stop
    assert [a.kind for a in of(d.out[mark:], Abort)] == ["recovery"]
    assert d.pending_setups
    return d


def test_RT_096_a_close_drains_the_setup_of_a_replaced_recovery() -> None:
    d = _replaced_recovery_with_its_setup_running()
    mark = len(d.out)
    call = d.close(TASK, 1, "stop")
    issued = [w.op for w in of(d.out[mark:], ConsumerWork)]
    assert "cleanup" in issued  # the consumers' cleanups ran
    assert "quiesce" not in issued  # but the drain waits for the old setup
    assert "remove-paths" not in issued
    assert d.result(call) is None
    mark = len(d.out)
    d.finish_setup()
    issued = [w.op for w in of(d.out[mark:], ConsumerWork)]
    assert "quiesce" in issued
    assert "remove-paths" in issued
    assert isinstance(d.result(call), Answer)


def test_RT_096_a_settled_replaced_setup_is_not_waited_for() -> None:
    d = _replaced_recovery_with_its_setup_running()
    d.finish_setup()
    call = d.close(TASK, 1, "stop")
    assert isinstance(d.result(call), Answer)
