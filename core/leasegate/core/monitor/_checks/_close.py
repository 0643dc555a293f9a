"""``open-after-close``: nothing opens or installs for a run after its close or the shutdown."""

from __future__ import annotations

from ...runtime import ConsumerWork
from .._stream import Called, Emitted, is_run, request_run
from ._base import Checker

__all__ = ["OpenAfterClose"]


class OpenAfterClose(Checker):
    """Property ``open-after-close`` (``docs/monitor.md``, its section).

    Nothing is opened or installed for a run after its close, or after the
    shutdown began: no gate opens once shutdown has begun (RT-080); a close
    ends the run (LR-119..LR-123, RT-088, RT-090), and so does the close an
    ``AbandonStart`` not answered in its own step makes (RT-048).

    When a run is closed (the newest run begun for its task, closed by a
    well-formed ``CloseAssignment`` or such an ``AbandonStart``; a same-epoch
    start while a close of it drains is no new run, LR-123) is the mirror's
    (:attr:`~leasegate.core.monitor._mirror.Mirror.closed`). Judged: every
    ``open`` or ``install`` port call and every ``install`` ``ConsumerWork``
    for a run ≤ the task's closed run; from the ``RuntimeShutdown`` step on,
    every one.
    """

    PROPERTY = "open-after-close"
    COMMANDS = (ConsumerWork,)

    def called(self, item: Called) -> None:
        """Judge an ``open`` or ``install`` port call."""
        c = item.call
        if c.method not in ("open", "install"):
            return
        task, run = c.task_id, c.run_epoch
        what = "a gate opened" if c.method == "open" else "a consumer installed"
        if self.mirror.shut:
            self.flag(item.step, task, run, f"{what} ({c.port}) after the runtime's shutdown began")
        elif type(task) is str and type(run) is int and run <= self.mirror.closed.get(task, -1):
            self.flag(
                item.step, task, run, f"{what} ({c.port}) for task {task} run {run} after its close"
            )

    def emitted(self, item: Emitted) -> None:
        """Judge an ``install`` ``ConsumerWork``."""
        cmd = item.command
        if not isinstance(cmd, ConsumerWork) or cmd.op != "install":
            return
        task, run = request_run(cmd.request)
        if type(task) is not str or not is_run(run):
            return
        if self.mirror.shut:
            self.flag(
                item.step,
                task,
                run,
                f"a {cmd.consumer} install was started after the runtime's shutdown began",
            )
        elif run <= self.mirror.closed.get(task, -1):
            self.flag(
                item.step,
                task,
                run,
                f"a {cmd.consumer} install was started for task {task} run {run} after its close",
            )
