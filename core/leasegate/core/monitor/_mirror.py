"""The mirror: what the stream revealed so far, shared by the checkers.

:class:`Mirror` sees every item of the stream before the checkers do (its
:meth:`~Mirror.fed`, :meth:`~Mirror.emitted` and :meth:`~Mirror.returned`) and
keeps the facts more than one property needs: the runs begun and closed, the
host calls in flight (starts, closes, launch waits and holds), the cleanups
in flight with what they join (holds, recovered setups), the readers, the
grants in arrival order and the run each outstanding command is about. It
flags nothing; each checker (``_checks``) judges one property from it and
from state of its own.

Besides the lasting facts, it exposes what the current step and item settled:
:attr:`Mirror.answers`, :attr:`Mirror.cleanups_before`,
:attr:`Mirror.started`, :attr:`Mirror.grant_lease`, :attr:`Mirror.completed`
(per step) and :attr:`Mirror.served_view`, :attr:`Mirror.settled` (per
answer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from ..registry import (
    CloseReader,
    FrameReceived,
    OpenReader,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
)
from ..runtime import (
    AbandonStart,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    Failed,
    HandleFrame,
    HoldInfo,
    JournalRecord,
    JournalSettle,
    ReleaseHold,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    WorkDone,
)
from ._ports import ViewStamp
from ._stream import Emitted, Fed, Returned, Run, is_run, request_run

__all__ = ["CLEANUP_OPS", "Cleanup", "Mirror", "Reader"]

_CLOSE_REASONS: Final = ("stop", "park", "teardown", "superseded")
#: The ``ConsumerWork`` ops of a cleanup procedure.
CLEANUP_OPS: Final = ("cleanup", "close-consumers", "quiesce", "remove-paths")


@dataclasses.dataclass(slots=True)
class Cleanup:
    """A cleanup procedure in flight (from its ``JournalRecord`` until it settled).

    Attributes:
        task, run: the run it cleans up (``whole``: that run and every older one).
        reason: the ``JournalRecord`` reason (``stop``, ``superseded`` ...).
        whole: whether its consumer cleanup is ``full`` (``None`` until issued).
        pending: its commands not completed yet (ids).
        holds, setups: the holds and recovered setups its drain joins (ids).
    """

    task: str
    run: int
    reason: str | None = None
    whole: bool | None = None
    pending: set[int] = dataclasses.field(default_factory=set)
    holds: set[int] = dataclasses.field(default_factory=set)
    setups: set[int] = dataclasses.field(default_factory=set)

    def covers(self, run: int) -> bool:
        """Whether this cleanup covers ``run`` (its own; every older one when whole-task)."""
        return run == self.run or (self.whole is True and run <= self.run)


@dataclasses.dataclass(slots=True)
class Reader:
    """A parameter reader from its ``OpenReader`` (``lease``: the step's grant, if any)."""

    task: str | None
    run: int | None
    lease: str | None
    closed: bool = False


class Mirror:
    """The facts of the stream the checkers share (see the module docstring).

    Attributes (lasting):
        now: the latest event's ``now_ms`` (milliseconds since the epoch).
        shut: a ``RuntimeShutdown`` was fed.
        newest: task → the newest run begun (``BeginStart`` answered with a
            start id, ``ResumeRecovered``).
        closed: task → its newest run once a close of it was made.
        starts: start id → its run; close_calls, abandon_closes: the call ids
            of closes (``CloseAssignment``; an ``AbandonStart`` not answered in
            its own step) not answered yet → their run.
        view_calls: call ids of launch waits and holds in flight → the run.
        holds, setups: hold ids / ``RunSetup`` ids still held or running → run.
        cleanups: task → its cleanup in flight.
        readers: reader id → :class:`Reader`.
        grants: ``(task, run, lease id)`` of each grant frame → arrival number.
        command_runs: command id → the run the command is about.

    Attributes (this step / this item):
        answers: call id → the ``Answer``/``Failed`` the step returned for it.
        cleanups_before: the cleanups in flight when the step began.
        started: task → the cleanup a ``JournalRecord`` of this step started
            (up to the current item).
        grant_lease: the lease id of the grant frame the step was fed, if any.
        completed: the run of the command the step's completion event answers.
        served_view: ``(run, stamp)`` when the current answer settles a
            launch wait or hold of ``run`` by serving a view.
        settled: the run whose close the current answer settles.
    """

    def __init__(self) -> None:
        self.now = 0
        self.shut = False
        self.newest: dict[str, int] = {}
        self.closed: dict[str, int] = {}
        self.starts: dict[int, Run] = {}
        self.close_calls: dict[int, Run] = {}
        self.abandon_closes: dict[int, Run] = {}
        self.view_calls: dict[int, Run] = {}
        self.holds: dict[int, Run] = {}
        self.setups: dict[int, Run] = {}
        self.cleanups: dict[str, Cleanup] = {}
        self._cleanup_cmds: dict[int, str] = {}
        self.readers: dict[int, Reader] = {}
        self.grants: dict[tuple[str, int, str], int] = {}
        self.command_runs: dict[int, Run] = {}
        self._event: object = None
        self.answers: dict[int, object] = {}
        self.cleanups_before: dict[str, Cleanup] = {}
        self.started: dict[str, Cleanup] = {}
        self.grant_lease: str | None = None
        self.completed: Run | None = None
        self.served_view: tuple[Run, ViewStamp] | None = None
        self.settled: Run | None = None

    # -- the event
    def fed(self, item: Fed) -> None:
        """Learn from the step's event (and its answers, from the look-ahead)."""
        ev = item.event
        self._event = ev
        now = getattr(ev, "now_ms", None)
        if type(now) is int:
            self.now = now
        self.answers = _answers(item.commands)
        self.cleanups_before = dict(self.cleanups)
        self.started = {}
        self.completed = None
        if isinstance(ev, BeginStart):
            got = self.answers.get(ev.call_id) if type(ev.call_id) is int else None
            if (
                isinstance(got, Answer)
                and type(ev.task_id) is str
                and is_run(ev.run_epoch)
                and type(got.value) is int
            ):
                self.starts[got.value] = (ev.task_id, ev.run_epoch)
                self._begun(ev.task_id, ev.run_epoch)
        elif isinstance(ev, ResumeRecovered):
            if type(ev.task_id) is str and is_run(ev.run_epoch) and not self.shut:
                self._begun(ev.task_id, ev.run_epoch)
        elif isinstance(ev, CloseAssignment):
            if (
                type(ev.task_id) is str
                and is_run(ev.run_epoch)
                and isinstance(ev.reason, str)
                and ev.reason in _CLOSE_REASONS
                and type(ev.call_id) is int
            ):
                self.close_calls[ev.call_id] = (ev.task_id, ev.run_epoch)
                if self.newest.get(ev.task_id) == ev.run_epoch:
                    self.closed[ev.task_id] = ev.run_epoch
        elif isinstance(ev, RuntimeShutdown):
            self.shut = True
        elif isinstance(ev, (AwaitLaunchReady, AcquireHold)):
            run = self.starts.get(ev.start_id) if type(ev.start_id) is int else None
            if run is not None and type(ev.call_id) is int:
                self.view_calls[ev.call_id] = run
        elif isinstance(ev, (ReleaseHold, AbandonStart)):
            if type(ev.hold_id) is int:
                self.holds.pop(ev.hold_id, None)
        elif isinstance(ev, WorkDone) and type(ev.cmd_id) is int:
            self.setups.pop(ev.cmd_id, None)
            task = self._cleanup_cmds.pop(ev.cmd_id, None)
            c = self.cleanups.get(task) if task is not None else None
            if c is not None:
                c.pending.discard(ev.cmd_id)
        if isinstance(ev, (WorkDone, ReadCompleted, ReadFailed)) and type(ev.cmd_id) is int:
            self.completed = self.command_runs.pop(ev.cmd_id, None)  # answered once
        self.grant_lease = self._grant(ev)

    def _begun(self, task: str, run: int) -> None:
        if run == self.newest.get(task) and self._still_ended(task, run):
            return  # a no-op in the registry (LR-123, Q15): not a new incarnation
        if run >= self.newest.get(task, -1):
            self.newest[task] = run
        if self.closed.get(task) == run:
            del self.closed[task]

    def _still_ended(self, task: str, run: int) -> bool:
        """Whether the registry still holds ``run`` of ``task`` as an ended run.

        Since Q15 (docs/registry.md) an ended run stays registered until the
        last close of it has settled; a same-epoch start meanwhile is a no-op
        (LR-123), not a new incarnation. A close still unanswered after its
        own step was taken by the registry (a close the registry ignores is
        answered in the step it is made; the runtime answers a close exactly
        when the registry's close settled, RT-088). An ``AbandonStart`` not
        answered in its own step is such a close too (its start was the
        task's newest live one: it closes with ``stop`` and is answered when
        that close settled, RT-048). A start answered with a start id is
        never older than a run begun before it, so it cannot follow a newer
        run that replaced this one. Before, the monitor took such a
        start for a new run and forgot the draining close (its timers and
        ``open-after-close``).

        Not tracked: a run whose last close *failed* stays ended too (the
        registry keeps it quarantined until a close of it succeeds), but a
        close the monitor never saw (made before it was attached) may have
        settled after it and freed the run, so such a start is still taken
        for a new run (a possible miss, never a false violation).
        """
        return any(r == (task, run) for r in self.close_calls.values()) or any(
            r == (task, run) for r in self.abandon_closes.values()
        )

    def _grant(self, ev: object) -> str | None:
        """The lease id of the grant this step's event carries, if any (numbered on arrival)."""
        if not isinstance(ev, (HandleFrame, FrameReceived)):
            return None
        frame = ev.frame
        if isinstance(frame, dict):
            lease = frame.get("lease") if frame.get("kind") == "lease.grant.v1" else None
            lid = lease.get("leaseId") if isinstance(lease, dict) else None
            task = lease.get("taskId") if isinstance(lease, dict) else None
            run = lease.get("runEpoch") if isinstance(lease, dict) else None
        else:
            lease = getattr(frame, "lease", None)
            lid = getattr(lease, "lease_id", None)
            task = getattr(lease, "task_id", None)
            run = getattr(lease, "run_epoch", None)
        if type(lid) is not str or type(task) is not str or not is_run(run):
            return None
        key = (task, run, lid)
        if key not in self.grants:
            self.grants[key] = len(self.grants)
        return lid

    # -- the commands
    def emitted(self, item: Emitted) -> None:
        """Learn from one command, in command order."""
        cmd = item.command
        self.settled = None
        self.served_view = None
        if isinstance(cmd, JournalRecord):
            if type(cmd.task_id) is str and is_run(cmd.run_epoch):
                reason = cmd.reason if type(cmd.reason) is str else None
                c = Cleanup(task=cmd.task_id, run=cmd.run_epoch, reason=reason)
                self.cleanups[cmd.task_id] = c
                self.started[cmd.task_id] = c
                self._track(c, cmd.cmd_id)
        elif isinstance(cmd, JournalSettle):
            c2 = self.cleanups.get(cmd.task_id) if type(cmd.task_id) is str else None
            if c2 is not None:
                self._track(c2, cmd.cmd_id)
        elif isinstance(cmd, ConsumerWork):
            self._work(cmd)
        elif isinstance(cmd, RunSetup):
            if type(cmd.task_id) is str and is_run(cmd.run_epoch) and type(cmd.cmd_id) is int:
                self.setups[cmd.cmd_id] = (cmd.task_id, cmd.run_epoch)
                self.command_runs[cmd.cmd_id] = (cmd.task_id, cmd.run_epoch)
        elif isinstance(cmd, OpenReader) and type(cmd.reader_id) is int:
            a = cmd.assignment
            t = getattr(a, "task_id", None)
            r = getattr(a, "run_epoch", None)
            self.readers[cmd.reader_id] = Reader(
                task=t if type(t) is str else None,
                run=r if type(r) is int else None,
                lease=self.grant_lease,
            )
        elif isinstance(cmd, CloseReader) and type(cmd.reader_id) is int:
            rd = self.readers.get(cmd.reader_id)
            if rd is not None:
                rd.closed = True
        elif isinstance(cmd, ReadParameters):
            rd = self.readers.get(cmd.reader_id) if type(cmd.reader_id) is int else None
            if (
                rd is not None
                and type(cmd.cmd_id) is int
                and rd.task is not None
                and rd.run is not None
            ):
                self.command_runs[cmd.cmd_id] = (rd.task, rd.run)
        elif isinstance(cmd, (Answer, Failed)):
            self._answer(cmd)

    def _track(self, c: Cleanup, cmd_id: object) -> None:
        if type(cmd_id) is int:
            c.pending.add(cmd_id)
            self._cleanup_cmds[cmd_id] = c.task
            self.command_runs[cmd_id] = (c.task, c.run)

    def _work(self, cmd: ConsumerWork) -> None:
        task, run = request_run(cmd.request)
        if type(task) is not str or not is_run(run):
            return
        if type(cmd.cmd_id) is int:
            self.command_runs[cmd.cmd_id] = (task, run)
        if cmd.op == "install" or cmd.op not in CLEANUP_OPS:
            return
        c = self.cleanups.get(task)
        if c is None:
            return
        self._track(c, cmd.cmd_id)
        if cmd.op == "cleanup":
            mode = getattr(cmd.request, "mode", None)
            if mode in ("full", "selective"):
                c.whole = mode == "full"
            c.holds = {h for h, (t, r) in self.holds.items() if t == task and r <= c.run}
            if c.whole:
                c.setups = {s for s, (t, r) in self.setups.items() if t == task and r <= c.run}

    def _answer(self, cmd: Answer | Failed) -> None:
        """A host call settled: answered, or failed (a close or shutdown that
        failed still ended its run)."""
        call = cmd.call_id
        if type(call) is not int:
            return
        run = self.view_calls.pop(call, None)
        if run is not None and isinstance(cmd, Answer):
            view = cmd.value.view if isinstance(cmd.value, HoldInfo) else cmd.value
            if isinstance(cmd.value, HoldInfo):
                self.holds[cmd.value.hold_id] = run
            if view is not None:
                self.served_view = (run, ViewStamp.of(view))
        abandoned = self.abandon_closes.pop(call, None)
        closed = self.close_calls.pop(call, None)
        self.settled = abandoned if closed is None else closed  # an AbandonStart's (RT-048)

    # -- the end of the step
    def returned(self, item: Returned) -> None:
        """The step ended: settle the cleanups; an unanswered ``AbandonStart`` closes its run."""
        self.settled = None
        self.served_view = None
        self._settle_cleanups()
        ev = self._event
        if (
            isinstance(ev, AbandonStart)
            and type(ev.call_id) is int
            and ev.call_id not in self.answers
            and type(ev.start_id) is int
            and ev.start_id in self.starts
        ):
            closing = self.starts[ev.start_id]
            self.abandon_closes[ev.call_id] = closing
            # That close ends the run as a CloseAssignment(stop) would (RT-048);
            # effective from the next step (an open after it was once flagged
            # nowhere).
            if self.newest.get(closing[0]) == closing[1]:
                self.closed[closing[0]] = closing[1]

    def _settle_cleanups(self) -> None:
        """Forget the cleanups that settled: nothing outstanding, nothing joined."""
        for task, c in list(self.cleanups.items()):
            c.holds &= set(self.holds)
            c.setups &= set(self.setups)
            if not c.pending and not c.holds and not c.setups:
                del self.cleanups[task]


def _answers(cmds: Sequence[object]) -> dict[int, object]:
    """The step's answers of host calls: call id → its first ``Answer``/``Failed``."""
    out: dict[int, object] = {}
    for c in cmds:
        if isinstance(c, (Answer, Failed)) and type(c.call_id) is int:
            out.setdefault(c.call_id, c)
    return out
