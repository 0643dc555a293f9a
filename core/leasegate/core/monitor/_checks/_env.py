"""``foreign-env-snapshot``: a run's env values and views are its own."""

from __future__ import annotations

from typing import Final

from ...registry import FrameReceived, ReadCompleted, ReadFailed, ReadParameters
from ...runtime import Answer, ConsumerWork, HandleFrame
from .._mirror import Mirror
from .._stream import Called, Emitted, Fed, Run, frame_fields, is_run, opened_stamp, request_run
from ._base import Checker, Flag

__all__ = ["ForeignEnvSnapshot"]

_ENV_PREFIX: Final = "/uai/projects/"
_ENV_KINDS: Final = (
    "env.replica.v1.begin",
    "env.replica.v1.page",
    "env.replica.v1.apply",
    "env.replica.v1.commit",
)


class ForeignEnvSnapshot(Checker):
    """Property ``foreign-env-snapshot`` (``docs/monitor.md``, its section).

    A run's env snapshot and views are its own (LR-154: a grant's reader
    reads through the run's bundle while it carries that grant; RT-064,
    RT-067: serving follows the run's current grant; LR-038: a view carries
    its lease's assignment). Judged:

    1. an env value read (``ReadParameters`` whose selectors are all
       ``/uai/projects/…``) in a step about a run (an ``env.replica.v1.*``
       frame's run, or the completion of a read attributed to it) goes
       through a reader opened for that run;
    2. not through the reader of a grant older (by arrival) than the lease
       the run's latest ``install`` ``ConsumerWork`` names;
    3. a gate opens with, and a launch wait or hold is served, a view of the
       run's own assignment.
    """

    PROPERTY = "foreign-env-snapshot"
    COMMANDS = (ConsumerWork, ReadParameters, Answer)

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        super().__init__(mirror, flag)
        self._reads: dict[int, Run] = {}
        self._installed: dict[Run, str] = {}
        self._env_run: Run | None = None

    def fed(self, item: Fed) -> None:
        """The run the step's env reads are attributed to, if any."""
        ev = item.event
        self._env_run = None
        if isinstance(ev, (ReadCompleted, ReadFailed)):
            if type(ev.cmd_id) is int:
                self._env_run = self._reads.pop(ev.cmd_id, None)
        elif isinstance(ev, (HandleFrame, FrameReceived)):
            kind, task, run = frame_fields(ev.frame)
            if kind in _ENV_KINDS and type(task) is str and is_run(run):
                self._env_run = (task, run)

    def called(self, item: Called) -> None:
        """Judge the view a gate opened with."""
        c = item.call
        stamp = opened_stamp(c)
        if stamp is not None and (stamp.task_id, stamp.run_epoch) != (c.task_id, c.run_epoch):
            self.flag(
                item.step,
                c.task_id,
                c.run_epoch,
                f"the {c.port} gate of task {c.task_id} run {c.run_epoch}"
                " opened with another run's view",
            )

    def emitted(self, item: Emitted) -> None:
        """Learn installs' leases; judge env reads and served views."""
        cmd = item.command
        if isinstance(cmd, ConsumerWork):
            if cmd.op != "install":
                return
            task, run = request_run(cmd.request)
            lease = getattr(getattr(cmd.request, "next", None), "lease_id", None)
            if type(task) is str and is_run(run) and type(lease) is str:
                self._installed[(task, run)] = lease
        elif isinstance(cmd, ReadParameters):
            self._read(item.step, cmd)
        elif isinstance(cmd, Answer) and self.mirror.served_view is not None:
            (task, run), stamp = self.mirror.served_view
            if (stamp.task_id, stamp.run_epoch) != (task, run):
                self.flag(
                    item.step, task, run, f"task {task} run {run} was served another run's view"
                )

    def _read(self, step: int, cmd: ReadParameters) -> None:
        rd = self.mirror.readers.get(cmd.reader_id) if type(cmd.reader_id) is int else None
        sels = cmd.selectors if isinstance(cmd.selectors, tuple) else ()
        is_env = bool(sels) and all(isinstance(s, str) and s.startswith(_ENV_PREFIX) for s in sels)
        env_run = self._env_run
        if not is_env or env_run is None or rd is None:
            return
        if type(cmd.cmd_id) is int:
            self._reads[cmd.cmd_id] = env_run
        task, run = env_run
        if (rd.task, rd.run) != (task, run):
            self.flag(
                step,
                task,
                run,
                f"an env value of task {task} run {run} was read through reader"
                f" {cmd.reader_id} of another run",
            )
            return
        cur = self._installed.get((task, run))
        if rd.lease is None or cur is None or rd.lease == cur:
            return
        mine = self.mirror.grants.get((task, run, rd.lease))
        theirs = self.mirror.grants.get((task, run, cur))
        if mine is not None and theirs is not None and mine < theirs:
            self.flag(
                step,
                task,
                run,
                f"an env value of task {task} run {run} was read through reader"
                f" {cmd.reader_id} of a superseded grant",
            )
