"""``gate-open-during-cleanup``: no gate opens for a run while a cleanup of it is in flight."""

from __future__ import annotations

from ...runtime import Notify
from .._mirror import Cleanup, Mirror
from .._stream import Called, Emitted, Fed, Returned
from ._base import Checker, Flag

__all__ = ["GateOpenDuringCleanup"]


class GateOpenDuringCleanup(Checker):
    """Property ``gate-open-during-cleanup`` (``docs/monitor.md``, its section).

    No gate opens for a run while a cleanup procedure covering that run is in
    flight: an open happens only when no full cleanup is in flight (LR-060);
    a close's fences and its ended-run cleanup run before the run may open
    again (RT-085, RT-086, LR-122, LR-123).

    The cleanups, the holds and setups they join, and when they settled are
    the mirror's (:class:`~leasegate.core.monitor._mirror.Cleanup`). An open
    is a fan-out of ``open`` port calls for one run, starting at an
    ``engines.open`` (it failed when one of its calls raised). The k-th
    successful fan-out of a task in a step is placed at its k-th
    ``Notify(what="mcp-served")`` (RT-081): after a ``JournalRecord`` of the
    step that starts a covering cleanup it is flagged there; otherwise, when a
    cleanup was in flight as the step began, it is flagged at the step's end
    if that same cleanup is still in flight and covers the run. A failed
    (partial) fan-out is judged only that second way.
    """

    PROPERTY = "gate-open-during-cleanup"
    COMMANDS = (Notify,)

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        super().__init__(mirror, flag)
        self._opens: list[tuple[str, int, bool]] = []
        self._cur: list[object] | None = None
        self._ok: dict[str, list[int]] | None = None
        self._deferred: list[tuple[str, int, Cleanup]] = []

    def fed(self, item: Fed) -> None:
        """A new step: no fan-out yet."""
        self._opens = []
        self._cur = None
        self._ok = None
        self._deferred = []

    def called(self, item: Called) -> None:
        """Fold the step's ``open`` calls into fan-outs ``(task, run, succeeded)``."""
        c = item.call
        if c.method != "open" or type(c.task_id) is not str or type(c.run_epoch) is not int:
            return
        cur = self._cur
        if (
            c.port == "engines"
            or cur is None
            or (cur[0], cur[1]) != (c.task_id, c.run_epoch)
            or not cur[2]
        ):
            cur = self._cur = [c.task_id, c.run_epoch, True]
            self._opens.append((c.task_id, c.run_epoch, True))
        if c.raised:
            cur[2] = False
            self._opens[-1] = (c.task_id, c.run_epoch, False)

    def emitted(self, item: Emitted) -> None:
        """Place a successful fan-out at its ``mcp-served`` notify."""
        cmd = item.command
        if not isinstance(cmd, Notify) or cmd.what != "mcp-served" or type(cmd.task_id) is not str:
            return
        if self._ok is None:
            self._ok = {}
            for task, run, ok in self._opens:
                if ok:
                    self._ok.setdefault(task, []).append(run)
        runs = self._ok.get(cmd.task_id)
        if not runs:
            return
        run = runs.pop(0)
        started = self.mirror.started.get(cmd.task_id)
        if started is not None and started.covers(run):
            self._flag_open(item.step, cmd.task_id, run)
            return
        before = self.mirror.cleanups_before.get(cmd.task_id)
        if before is not None:
            self._deferred.append((cmd.task_id, run, before))

    def returned(self, item: Returned) -> None:
        """Judge the opens whose order is unknown: flagged when the cleanup in
        flight as the step began still is (the mirror has settled the step's
        cleanups)."""
        for task, run, ok in self._opens:
            if not ok:
                before = self.mirror.cleanups_before.get(task)
                if before is not None:
                    self._deferred.append((task, run, before))
        for task, run, c in self._deferred:
            if self.mirror.cleanups.get(task) is c and c.covers(run):
                self._flag_open(item.step, task, run)

    def _flag_open(self, step: int, task: str, run: int) -> None:
        self.flag(
            step,
            task,
            run,
            f"the gate of task {task} run {run} opened while a cleanup of it was in flight",
        )
