"""``timer-armed-after-end``: a run's timers are disarmed by its end, every timer by shutdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ...registry import (
    CancelTimer,
    FrameReceived,
    OpenReader,
    ReadCompleted,
    ReadFailed,
    ReportError,
    SendFrame,
    StartTimer,
    TimerFired,
)
from ...runtime import (
    AbandonStart,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    ConsumerWork,
    EndStart,
    Failed,
    HandleFrame,
    JournalRecord,
    RunSetup,
    RuntimeShutdown,
    WorkDone,
)
from .._mirror import Mirror
from .._stream import Emitted, Fed, Run, frame_fields, is_run, request_run
from ._base import Checker, Flag

__all__ = ["TimerArmedAfterEnd"]

#: Cleanup reasons (``JournalRecord.reason``) only a host close of the run
#: starts (LR-119..LR-122): a newer run's startup never waits for such a
#: cleanup (it waits for its predecessor's ``superseded`` one, its own
#: ``recovery`` one or a full cleanup of its own run, LR-004..LR-007).
_HOST_CLOSE_CLEANUPS: Final = ("stop", "park", "teardown")


class TimerArmedAfterEnd(Checker):
    """Property ``timer-armed-after-end`` (``docs/monitor.md``, its section).

    A run's timers are cancelled or fired by the time the run ended; every
    timer is, by the time shutdown is answered, and none is armed after
    (RT-135, RT-136: the shutdown resolves after its drain and second scrub).

    A ``StartTimer`` belongs to the one run its step names (:meth:`_context`),
    or to the newest run of that task when the step may complete the newer
    run's startup (:meth:`_owner`; RT-106, RT-005, LR-005, LR-006). A run
    ends when the answer (or failure, RT-088) to its ``CloseAssignment``, or
    to an ``AbandonStart`` not answered in its own step (RT-048), settles it
    (the mirror's :attr:`~leasegate.core.monitor._mirror.Mirror.settled`);
    a timer a ``CancelTimer`` later in that step disarms was not left armed
    (a step's commands are applied together, RT-088, RT-028).
    The deadline (RT-028) of a launch wait still pending whose start has
    ended outlives the close (``endStart`` does not wake the wait, RT-034);
    shutdown still ends it (RT-036). ``CancelTimer`` and ``TimerFired``
    disarm a timer; a denied run's retry timer outlives the end of a cleanup
    on purpose (LR-042).
    """

    PROPERTY = "timer-armed-after-end"
    COMMANDS = (SendFrame, StartTimer, CancelTimer, Answer, Failed)

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        super().__init__(mirror, flag)
        # timer id -> the run it belongs to (or None)
        self._timers: dict[int, Run | None] = {}
        # launch waits (RT-034): deadline timer -> wait call; wait call -> start
        self._wait_timers: dict[int, int] = {}
        self._wait_starts: dict[int, int] = {}
        self._ended_starts: set[int] = set()
        self._shutdown_calls: set[int] = set()
        #: the shutdown was answered: no timer may be armed any more
        self.shut_answered = False
        # lease.request op id -> its run
        self._requests: dict[str, Run] = {}
        # this step: the run its timers belong to; the launch wait it is
        self._step_owner: Run | None = None
        self._wait_call: int | None = None
        # this step: its commands (look-ahead) and how far they have been seen
        self._step_commands: Sequence[object] = ()
        self._seen = 0

    def fed(self, item: Fed) -> None:
        """Learn the event's waits, ends and disarms; find who owns the step's timers."""
        ev = item.event
        if isinstance(ev, RuntimeShutdown):
            if type(ev.call_id) is int:
                self._shutdown_calls.add(ev.call_id)
        elif isinstance(ev, AwaitLaunchReady):
            run = self.mirror.starts.get(ev.start_id) if type(ev.start_id) is int else None
            if run is not None and type(ev.call_id) is int:
                self._wait_starts[ev.call_id] = ev.start_id
        elif isinstance(ev, (AbandonStart, EndStart)):
            if type(ev.start_id) is int:
                self._ended_starts.add(ev.start_id)
        elif isinstance(ev, TimerFired) and type(ev.timer_id) is int:
            self._timers.pop(ev.timer_id, None)
            self._wait_timers.pop(ev.timer_id, None)
        # The shutdown step's timer is the runtime's drain bound (RT-135), no
        # run's: it is checked when the shutdown is answered. (False positive
        # before: walk seed 41280.)
        self._step_owner = (
            None if isinstance(ev, RuntimeShutdown) else self._owner(self._context(item))
        )
        self._wait_call = None
        self._step_commands = item.commands
        self._seen = 0
        if isinstance(ev, AwaitLaunchReady) and type(ev.call_id) is int:
            self._wait_call = ev.call_id

    def emitted(self, item: Emitted) -> None:
        """Arm, disarm; at a run's end or the shutdown's answer, flag what is still armed."""
        cmd = item.command
        if isinstance(cmd, SendFrame):
            op = getattr(cmd.frame, "op_id", None)
            t = getattr(cmd.frame, "task_id", None)
            r = getattr(cmd.frame, "run_epoch", None)
            if isinstance(op, str) and type(t) is str and is_run(r):
                self._requests[op] = (t, r)
        elif isinstance(cmd, StartTimer):
            if type(cmd.timer_id) is int:
                if self.shut_answered:
                    # Checked at the StartTimer itself: the answer's own check
                    # has passed by then (such a timer was once flagged nowhere).
                    self.flag(
                        item.step,
                        None,
                        None,
                        f"timer {cmd.timer_id} armed after shutdown was answered",
                    )
                self._timers[cmd.timer_id] = self._step_owner
                if self._wait_call is not None:
                    self._wait_timers[cmd.timer_id] = self._wait_call
        elif isinstance(cmd, CancelTimer):
            if type(cmd.timer_id) is int:
                self._timers.pop(cmd.timer_id, None)
                self._wait_timers.pop(cmd.timer_id, None)
        elif isinstance(cmd, (Answer, Failed)):
            self._answer(item.step, cmd)

    def _answer(self, step: int, cmd: Answer | Failed) -> None:
        """A host call settled (a close or shutdown that failed still ended its run)."""
        call = cmd.call_id
        if type(call) is not int:
            return
        self._wait_starts.pop(call, None)
        closed = self.mirror.settled
        if closed is not None:
            later = self._cancelled_after(cmd)
            left = sorted(
                t
                for t, r in self._timers.items()
                if r == closed and not self._waits_on(t) and t not in later
            )
            if left:
                self.flag(
                    step,
                    closed[0],
                    closed[1],
                    f"timer(s) {left} of task {closed[0]} run {closed[1]} still armed"
                    " when its close settled",
                )
        if call in self._shutdown_calls:
            self._shutdown_calls.discard(call)
            self.shut_answered = True
            left = sorted(self._timers)
            if left:
                self.flag(
                    step, None, None, f"timer(s) {left} still armed when shutdown was answered"
                )

    def _cancelled_after(self, cmd: object) -> set[int]:
        """The timers a ``CancelTimer`` later in this step disarms, after ``cmd``.

        A step's commands are applied together: no event (a timer's firing
        included) comes between them, as the reference clears a settled
        wait's deadline (RT-028) in the turn its startup failed. So a timer
        cancelled after the close's answer in the same step is not left armed
        (RT-088: a failed startup cleanup fails the close, then the waits;
        fuzz corpus ``regress-wait-deadline-cancelled-after-failed-close``).
        """
        cmds = self._step_commands
        for i in range(self._seen, len(cmds)):
            if cmds[i] is cmd:
                self._seen = i + 1
                return {
                    c.timer_id
                    for c in cmds[i + 1 :]
                    if isinstance(c, CancelTimer) and type(c.timer_id) is int
                }
        return set()

    def _waits_on(self, timer_id: int) -> bool:
        """Whether ``timer_id`` is the deadline of a launch wait still pending
        whose start has ended: ``endStart`` does not wake the wait (RT-034), so
        its deadline (RT-028) outlives the run's close; shutdown still ends it
        (RT-036). False positive before: walk seeds 776 and 4228."""
        call = self._wait_timers.get(timer_id)
        if call is None or call not in self.mirror.view_calls:
            return False
        return self._wait_starts.get(call) in self._ended_starts

    def _context(self, item: Fed) -> Run | None:
        """The one run this step names, or ``None`` when none or several.

        Named by the event (its task and run; a frame's run or lease, the run
        of the ``lease.request`` a lease answer's ``opId`` answers; the start
        of a launch wait or hold; the run of the command a completion
        answers), by the ``open`` and ``install`` port calls and by the
        commands that carry a run. A fired timer names no run: it is disarmed
        before the step's run is sought.
        """
        ev = item.event
        runs: set[Run] = set()

        def add(task: object, run: object) -> None:
            if type(task) is str and is_run(run):
                runs.add((task, run))

        if isinstance(ev, (AwaitLaunchReady, AcquireHold)) and type(ev.start_id) is int:
            got = self.mirror.starts.get(ev.start_id)
            if got is not None:
                runs.add(got)
        elif isinstance(ev, TimerFired):
            pass
        elif isinstance(ev, (HandleFrame, FrameReceived)):
            frame = ev.frame
            _kind, task, run = frame_fields(frame)
            add(task, run)
            op = frame.get("opId") if isinstance(frame, dict) else getattr(frame, "op_id", None)
            if isinstance(op, str) and op in self._requests:
                runs.add(self._requests[op])
            lease = frame.get("lease") if isinstance(frame, dict) else None
            if isinstance(lease, dict):
                add(lease.get("taskId"), lease.get("runEpoch"))
        elif isinstance(ev, (WorkDone, ReadCompleted, ReadFailed)) and type(ev.cmd_id) is int:
            if self.mirror.completed is not None:
                runs.add(self.mirror.completed)
        else:
            add(getattr(ev, "task_id", None), getattr(ev, "run_epoch", None))
        for c in item.calls:
            if c.method in ("open", "install"):
                add(c.task_id, c.run_epoch)
        for cmd in item.commands:
            if isinstance(cmd, SendFrame):
                add(getattr(cmd.frame, "task_id", None), getattr(cmd.frame, "run_epoch", None))
            elif isinstance(cmd, (OpenReader, ReportError)):
                a = cmd.assignment
                add(getattr(a, "task_id", None), getattr(a, "run_epoch", None))
            elif isinstance(cmd, (JournalRecord, RunSetup)):
                add(cmd.task_id, cmd.run_epoch)
            elif isinstance(cmd, ConsumerWork):
                add(*request_run(cmd.request))
        return next(iter(runs)) if len(runs) == 1 else None

    def _owner(self, ctx: Run | None) -> Run | None:
        """The run the timers armed in a step about ``ctx`` belong to.

        A step about a run older than the newest run begun for its task can
        complete the newer run's startup (LR-006): when a cleanup that
        startup waits for ends (its predecessor's ``superseded`` cleanup, its
        own ``recovery`` one or a full cleanup of its own run; the answer to
        its journal record or cleanup work), the timers it arms are the newer
        run's (its recovery retry, RT-106; its launch deadline, RT-005), so
        they belong to the newest run. False positive before: fuzz corpus
        ``bug-monitor-timer-attributed-to-context-run``.

        Not when the task's cleanup in flight at the step's start is a host
        close's (``stop``, ``park``, ``teardown``; no startup waits for one):
        the runtime runs a task's cleanups one at a time and each needs its
        journal record answered in a later step, so no cleanup the newer
        startup waits for can end in this step; its timers stay the older
        run's, flagged when that run's close settles (
        ``test_RT_106_a_leaked_timer_of_an_older_run_is_flagged_at_its_close``).
        """
        if ctx is None:
            return None
        newest = self.mirror.newest.get(ctx[0])
        if newest is None or newest <= ctx[1]:
            return ctx
        c = self.mirror.cleanups_before.get(ctx[0])
        if c is not None and c.reason in _HOST_CLOSE_CLEANUPS:
            return ctx
        return (ctx[0], newest)
