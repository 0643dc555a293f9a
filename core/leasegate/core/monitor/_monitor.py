"""The invariant monitor: safety properties checked over the runtime's steps.

A *step* is what a trace holds for one ``CredentialRuntime.handle`` call:
the event consumed, the port calls made during it (:class:`PortCall`, in
call order) and the commands returned (in order). :class:`InvariantMonitor`
keeps a small mirror of what the steps revealed so far (runs begun and
closed, floors, readers, cleanups in flight, holds, timers, secrets) and
reports a :class:`Violation` for each property broken. It looks at nothing
else: no query of the runtime, no clock. What each property observes, and
its limits, is documented in ``docs/monitor.md``.

Within one step the port calls and the commands are two separate lists, so
their interleaving is known only where a command marks a port call: a
successful open fan-out is followed by ``Notify(what="mcp-served")`` (the
runtime emits it right after the ports opened, RT-081). Where the order
cannot be known the monitor does not flag (no false positive on a correct
run).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Final, TypeGuard

from .._base import Command, Event
from .._secret import Secret
from ..registry import (
    CallDone,
    CancelTimer,
    CloseReader,
    FrameReceived,
    OpenReader,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    ReportError,
    SendFrame,
    StartTimer,
    TimerFired,
)
from ..runtime import (
    AbandonStart,
    Abort,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    EndStart,
    Failed,
    HandleFrame,
    HoldInfo,
    JournalRecord,
    JournalSettle,
    Log,
    Notify,
    ReleaseHold,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    SendAck,
    WorkDone,
)
from ..wire import decode_frame
from ..wire.lease import LeaseStale
from ._ports import PortCall, ViewStamp

__all__ = ["PROPERTIES", "InvariantMonitor", "MonitorRecorder", "Violation"]

#: The properties the monitor checks, in the order of ``docs/monitor.md``.
PROPERTIES: Final[tuple[str, ...]] = (
    "gate-open-during-cleanup",
    "read-on-closed-reader",
    "foreign-env-snapshot",
    "open-after-close",
    "view-below-floor-or-expired",
    "secret-in-error",
    "timer-armed-after-end",
)

#: Secrets shorter than this are not searched for in error texts (a one- or
#: two-character "secret" would match ordinary words; real ones are long).
MIN_SECRET_CHARS: Final = 6
#: At most this many distinct secret texts are remembered (oldest dropped).
MAX_SECRETS: Final = 50_000

_CLOSE_REASONS: Final = ("stop", "park", "teardown", "superseded")
#: Cleanup reasons (``JournalRecord.reason``) only a host close of the run
#: starts (LR-119..LR-122): a newer run's startup never waits for such a
#: cleanup (it waits for its predecessor's ``superseded`` one, its own
#: ``recovery`` one or a full cleanup of its own run, LR-004..LR-007).
_HOST_CLOSE_CLEANUPS: Final = ("stop", "park", "teardown")
_CLEANUP_OPS: Final = ("cleanup", "close-consumers", "quiesce", "remove-paths")
_ENV_PREFIX: Final = "/uai/projects/"
_ENV_KINDS: Final = (
    "env.replica.v1.begin",
    "env.replica.v1.page",
    "env.replica.v1.apply",
    "env.replica.v1.commit",
)
#: JSON keys whose string values are secrets (frames and parameter envelopes).
_SECRET_KEYS: Final = frozenset(
    {
        "secretAccessKey",
        "sessionToken",
        "value",
        "token",
        "accessToken",
        "privateKey",
        "raw",
        "material",
    }
)
#: JSON keys whose object values map names to secrets (engine env and files).
_SECRET_MAPS: Final = frozenset({"env", "files"})
_WALK_DEPTH: Final = 12


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One broken property at one step.

    Attributes:
        property: one of :data:`PROPERTIES`.
        step: the index of the step (0 for the first ``observe`` call).
        task_id, run_epoch: the run concerned, when known.
        message: a fixed description plus ids (task ids, runs, reader and
            timer ids); never a secret or an input value's text.
    """

    property: str
    step: int
    task_id: str | None
    run_epoch: int | None
    message: str


@dataclasses.dataclass(slots=True)
class _Cleanup:
    """A cleanup procedure in flight (from its ``JournalRecord`` until it settled)."""

    task: str
    run: int
    reason: str | None = None
    whole: bool | None = None
    pending: set[int] = dataclasses.field(default_factory=set)
    holds: set[int] = dataclasses.field(default_factory=set)
    setups: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(slots=True)
class _Reader:
    task: str | None
    run: int | None
    lease: str | None
    closed: bool = False


def _is_run(x: object) -> TypeGuard[int]:
    return type(x) is int and x >= 0


def _frame_fields(frame: object) -> tuple[object, object, object]:
    """``(kind, taskId, runEpoch)`` of a JSON frame or a decoded frame model."""
    if isinstance(frame, dict):
        return frame.get("kind"), frame.get("taskId"), frame.get("runEpoch")
    tag = getattr(type(frame), "TAG", None)
    kind = tag[1] if isinstance(tag, tuple) and len(tag) == 2 else None
    return kind, getattr(frame, "task_id", None), getattr(frame, "run_epoch", None)


class InvariantMonitor:
    """Checks the safety properties of :data:`PROPERTIES` over a runtime's steps.

    Feed it every step, in order, with :meth:`observe` (the same event,
    port calls and commands a trace holds). It never raises and never
    changes what it is given.

    Attributes:
        violations: every violation found so far, in order.
        steps: how many steps were observed.
        internal_errors: how many unexpected exceptions ``observe`` contained
            (0 unless the monitor has a bug; tests assert it).

    Reference: issue #7 item 5; the properties restate the catalog's
    safety entries (RT-064, RT-080..090, RT-128..136, LR-060, LR-078..083,
    LR-154..157) as checks over the observable stream.
    """

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.steps = 0
        self.internal_errors = 0
        self._now = 0
        self._shut = False
        # runs
        self._newest: dict[str, int] = {}
        self._closed: dict[str, int] = {}
        self._floors: dict[tuple[str, int], int] = {}
        self._starts: dict[int, tuple[str, int]] = {}
        self._close_calls: dict[int, tuple[str, int]] = {}
        # AbandonStart calls that close their start's run (not answered in
        # their own step: the close is in flight, RT-048)
        self._abandon_closes: dict[int, tuple[str, int]] = {}
        self._shutdown_calls: set[int] = set()
        # the shutdown was answered: no timer may be armed any more
        self._shut_answered = False
        self._view_calls: dict[int, tuple[str, int]] = {}
        # readers and leases
        self._readers: dict[int, _Reader] = {}
        self._lease_order: dict[tuple[str, int, str], int] = {}
        self._installed: dict[tuple[str, int], str] = {}
        self._reads: dict[int, tuple[str, int]] = {}
        self._requests: dict[str, tuple[str, int]] = {}
        # cleanups, holds, setups
        self._cleanups: dict[str, _Cleanup] = {}
        self._cleanup_cmds: dict[int, str] = {}
        self._holds: dict[int, tuple[str, int]] = {}
        self._setups: dict[int, tuple[str, int]] = {}
        # timers: id -> attributed run (or None)
        self._timers: dict[int, tuple[str, int] | None] = {}
        # launch waits (RT-034): deadline timer -> wait call; wait call -> start
        self._wait_timers: dict[int, int] = {}
        self._wait_starts: dict[int, int] = {}
        self._ended_starts: set[int] = set()
        self._cmd_runs: dict[int, tuple[str, int]] = {}
        # secrets
        self._secrets: dict[str, None] = {}

    def __repr__(self) -> str:
        return f"InvariantMonitor(steps={self.steps}, violations={len(self.violations)})"

    # ------------------------------------------------------------------
    # Public surface

    def observe(
        self,
        event: object,
        commands: Sequence[object],
        port_calls: Sequence[object] = (),
    ) -> list[Violation]:
        """Check one step; return the violations found in it (also kept in :attr:`violations`).

        Args:
            event: the event the runtime consumed (any object is accepted).
            commands: the commands ``handle`` returned, in order.
            port_calls: the :class:`PortCall` entries of the step, in call
                order (from :func:`wrap_ports`' log); anything else is ignored.

        Returns:
            The new violations of this step (empty when none). Never raises:
            an unexpected exception is counted in :attr:`internal_errors`.
        """
        step = self.steps
        self.steps += 1
        found: list[Violation] = []
        try:
            cmds = list(commands) if isinstance(commands, (list, tuple)) else []
            calls = [c for c in port_calls if isinstance(c, PortCall)] if port_calls else []
            self._step(step, event, cmds, calls, found)
        except Exception:  # noqa: BLE001 - the monitor never raises
            self.internal_errors += 1
        self.violations.extend(found)
        return found

    # ------------------------------------------------------------------
    # One step

    def _flag(
        self,
        found: list[Violation],
        step: int,
        prop: str,
        task: object,
        run: object,
        message: str,
    ) -> None:
        t = task if type(task) is str else None
        r = run if type(run) is int else None
        if any((v.property, v.task_id, v.run_epoch) == (prop, t, r) for v in found):
            return  # one violation per property and run per step
        found.append(Violation(property=prop, step=step, task_id=t, run_epoch=r, message=message))

    def _step(
        self,
        step: int,
        event: object,
        cmds: list[object],
        calls: list[PortCall],
        found: list[Violation],
    ) -> None:
        now = getattr(event, "now_ms", None)
        if type(now) is int:
            self._now = now
        self._learn_secrets(event, cmds)
        answered = self._answers(cmds)
        active_before = dict(self._cleanups)
        env_ctx = self._on_event(step, event, answered, found)
        # The shutdown step's timer is the runtime's drain bound (RT-135), no
        # run's: it is checked when the shutdown is answered. (False positive
        # before: walk seed 41280.)
        ctx = (
            None
            if isinstance(event, RuntimeShutdown)
            else self._timer_owner(self._context(event, cmds, calls), active_before)
        )
        if isinstance(event, (WorkDone, ReadCompleted, ReadFailed)) and type(event.cmd_id) is int:
            self._cmd_runs.pop(event.cmd_id, None)  # answered once: forget it
        self._check_port_calls(step, calls, found)
        opens = self._fanouts(calls)
        self._on_commands(step, event, cmds, opens, env_ctx, ctx, active_before, found)
        if (
            isinstance(event, AbandonStart)
            and type(event.call_id) is int
            and event.call_id not in answered
            and type(event.start_id) is int
            and event.start_id in self._starts
        ):
            closing = self._starts[event.start_id]
            self._abandon_closes[event.call_id] = closing
            # That close ends the run as a CloseAssignment(stop) would (RT-048);
            # effective from the next step (an open after it was once flagged
            # nowhere).
            if self._newest.get(closing[0]) == closing[1]:
                self._closed[closing[0]] = closing[1]
        self._check_texts(step, cmds, found)

    # -- answers of host calls in this step
    @staticmethod
    def _answers(cmds: list[object]) -> dict[int, object]:
        out: dict[int, object] = {}
        for c in cmds:
            if isinstance(c, (Answer, Failed)) and type(c.call_id) is int:
                out.setdefault(c.call_id, c)
        return out

    # -- the event
    def _on_event(
        self, step: int, ev: object, answered: dict[int, object], found: list[Violation]
    ) -> tuple[str, int] | None:
        """Update the mirror from the event; return the env read context, if any."""
        if isinstance(ev, BeginStart):
            got = answered.get(ev.call_id) if type(ev.call_id) is int else None
            if (
                isinstance(got, Answer)
                and type(ev.task_id) is str
                and _is_run(ev.run_epoch)
                and type(got.value) is int
            ):
                self._starts[got.value] = (ev.task_id, ev.run_epoch)
                self._begun(ev.task_id, ev.run_epoch)
        elif isinstance(ev, ResumeRecovered):
            if type(ev.task_id) is str and _is_run(ev.run_epoch) and not self._shut:
                self._begun(ev.task_id, ev.run_epoch)
        elif isinstance(ev, CloseAssignment):
            if (
                type(ev.task_id) is str
                and _is_run(ev.run_epoch)
                and isinstance(ev.reason, str)
                and ev.reason in _CLOSE_REASONS
                and type(ev.call_id) is int
            ):
                self._close_calls[ev.call_id] = (ev.task_id, ev.run_epoch)
                if self._newest.get(ev.task_id) == ev.run_epoch:
                    self._closed[ev.task_id] = ev.run_epoch
        elif isinstance(ev, RuntimeShutdown):
            self._shut = True
            if type(ev.call_id) is int:
                self._shutdown_calls.add(ev.call_id)
        elif isinstance(ev, (AwaitLaunchReady, AcquireHold)):
            run = self._starts.get(ev.start_id) if type(ev.start_id) is int else None
            if run is not None and type(ev.call_id) is int:
                self._view_calls[ev.call_id] = run
                if isinstance(ev, AwaitLaunchReady):
                    self._wait_starts[ev.call_id] = ev.start_id
        elif isinstance(ev, (ReleaseHold, AbandonStart)):
            if type(ev.hold_id) is int:
                self._holds.pop(ev.hold_id, None)
            if isinstance(ev, AbandonStart) and type(ev.start_id) is int:
                self._ended_starts.add(ev.start_id)
        elif isinstance(ev, EndStart):
            if type(ev.start_id) is int:
                self._ended_starts.add(ev.start_id)
        elif isinstance(ev, WorkDone):
            if type(ev.cmd_id) is int:
                self._setups.pop(ev.cmd_id, None)
                task = self._cleanup_cmds.pop(ev.cmd_id, None)
                c = self._cleanups.get(task) if task is not None else None
                if c is not None:
                    c.pending.discard(ev.cmd_id)
        elif isinstance(ev, TimerFired):
            if type(ev.timer_id) is int:
                self._timers.pop(ev.timer_id, None)
                self._wait_timers.pop(ev.timer_id, None)
        elif isinstance(ev, (ReadCompleted, ReadFailed)):
            if type(ev.cmd_id) is int:
                return self._reads.pop(ev.cmd_id, None)
        elif isinstance(ev, (HandleFrame, FrameReceived)):
            return self._on_frame(ev.frame)
        return None

    def _begun(self, task: str, run: int) -> None:
        if run == self._newest.get(task) and self._still_ended(task, run):
            return  # a no-op in the registry (LR-123, Q15): not a new incarnation
        if run >= self._newest.get(task, -1):
            self._newest[task] = run
        if self._closed.get(task) == run:
            del self._closed[task]

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
        return any(r == (task, run) for r in self._close_calls.values()) or any(
            r == (task, run) for r in self._abandon_closes.values()
        )

    def _on_frame(self, frame: object) -> tuple[str, int] | None:
        kind, task, run = _frame_fields(frame)
        if kind in _ENV_KINDS:
            if type(task) is str and _is_run(run):
                return (task, run)
            return None
        if kind == "lease.stale":
            floor = (
                frame.get("minRevision")
                if isinstance(frame, dict)
                else getattr(frame, "min_revision", None)
            )
            if (
                type(task) is str
                and _is_run(run)
                and type(floor) is int
                and self._newest.get(task) == run
                and self._closed.get(task) != run
                and not self._shut
                and self._stale_valid(frame)
            ):
                key = (task, run)
                self._floors[key] = max(self._floors.get(key, 0), floor)
        return None

    @staticmethod
    def _stale_valid(frame: object) -> bool:
        """Whether the runtime's registry would take this stale frame (the codec decides)."""
        if isinstance(frame, LeaseStale):
            return True
        return isinstance(decode_frame(frame), LeaseStale)

    # -- what run a step is about (for timers)
    def _context(
        self, ev: object, cmds: list[object], calls: list[PortCall]
    ) -> tuple[str, int] | None:
        """The one run this step names, or ``None`` when none or several."""
        runs: set[tuple[str, int]] = set()

        def add(task: object, run: object) -> None:
            if type(task) is str and _is_run(run):
                runs.add((task, run))

        if isinstance(ev, (AwaitLaunchReady, AcquireHold)) and type(ev.start_id) is int:
            got = self._starts.get(ev.start_id)
            if got is not None:
                runs.add(got)
        elif isinstance(ev, TimerFired) and type(ev.timer_id) is int:
            t = self._timers.get(ev.timer_id)
            if t is not None:
                runs.add(t)
        elif isinstance(ev, (WorkDone, ReadCompleted, ReadFailed)) and type(ev.cmd_id) is int:
            got = self._cmd_runs.get(ev.cmd_id)
            if got is not None:
                runs.add(got)
        elif isinstance(ev, (HandleFrame, FrameReceived)):
            frame = ev.frame
            _kind, task, run = _frame_fields(frame)
            add(task, run)
            op = frame.get("opId") if isinstance(frame, dict) else getattr(frame, "op_id", None)
            if isinstance(op, str) and op in self._requests:
                runs.add(self._requests[op])
            lease = frame.get("lease") if isinstance(frame, dict) else None
            if isinstance(lease, dict):
                add(lease.get("taskId"), lease.get("runEpoch"))
        else:
            add(getattr(ev, "task_id", None), getattr(ev, "run_epoch", None))
        for c in calls:
            if c.method in ("open", "install"):
                add(c.task_id, c.run_epoch)
        for cmd in cmds:
            if isinstance(cmd, SendFrame):
                add(getattr(cmd.frame, "task_id", None), getattr(cmd.frame, "run_epoch", None))
            elif isinstance(cmd, (OpenReader, ReportError)):
                a = cmd.assignment
                add(getattr(a, "task_id", None), getattr(a, "run_epoch", None))
            elif isinstance(cmd, (JournalRecord, RunSetup)):
                add(cmd.task_id, cmd.run_epoch)
            elif isinstance(cmd, ConsumerWork):
                add(*self._request_run(cmd.request))
        return next(iter(runs)) if len(runs) == 1 else None

    def _waits_on(self, timer_id: int) -> bool:
        """Whether ``timer_id`` is the deadline of a launch wait still pending
        whose start has ended: ``endStart`` does not wake the wait (RT-034), so
        its deadline (RT-028) outlives the run's close; shutdown still ends it
        (RT-036). False positive before: walk seeds 776 and 4228."""
        call = self._wait_timers.get(timer_id)
        if call is None or call not in self._view_calls:
            return False
        return self._wait_starts.get(call) in self._ended_starts

    def _timer_owner(
        self, ctx: tuple[str, int] | None, active_before: dict[str, _Cleanup]
    ) -> tuple[str, int] | None:
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
        newest = self._newest.get(ctx[0])
        if newest is None or newest <= ctx[1]:
            return ctx
        c = active_before.get(ctx[0])
        if c is not None and c.reason in _HOST_CLOSE_CLEANUPS:
            return ctx
        return (ctx[0], newest)

    @staticmethod
    def _request_run(req: object) -> tuple[object, object]:
        a = getattr(req, "assignment", None)
        if a is not None:
            return getattr(a, "task_id", None), getattr(a, "run_epoch", None)
        return getattr(req, "task_id", None), getattr(req, "run_epoch", None)

    # -- port calls: opens and installs after close / shutdown, floors, expiry
    def _check_port_calls(self, step: int, calls: list[PortCall], found: list[Violation]) -> None:
        for c in calls:
            if c.method not in ("open", "install"):
                continue
            task, run = c.task_id, c.run_epoch
            what = "a gate opened" if c.method == "open" else "a consumer installed"
            if self._shut:
                self._flag(
                    found,
                    step,
                    "open-after-close",
                    task,
                    run,
                    f"{what} ({c.port}) after the runtime's shutdown began",
                )
            elif type(task) is str and type(run) is int and run <= self._closed.get(task, -1):
                self._flag(
                    found,
                    step,
                    "open-after-close",
                    task,
                    run,
                    f"{what} ({c.port}) for task {task} run {run} after its close",
                )
            if c.method != "open" or c.raised or not isinstance(c.result, ViewStamp):
                continue
            stamp = c.result
            if (stamp.task_id, stamp.run_epoch) != (task, run):
                self._flag(
                    found,
                    step,
                    "foreign-env-snapshot",
                    task,
                    run,
                    f"the {c.port} gate of task {task} run {run} opened with another run's view",
                )
            self._check_view(step, stamp, task, run, "a gate opened", found)

    def _check_view(
        self,
        step: int,
        stamp: ViewStamp,
        task: object,
        run: object,
        what: str,
        found: list[Violation],
    ) -> None:
        """Flag a view opened or served below its run's floor or at/after its expiry."""
        if type(task) is str and type(run) is int:
            floor = self._floors.get((task, run), 0)
            if stamp.manifest_revision < floor:
                self._flag(
                    found,
                    step,
                    "view-below-floor-or-expired",
                    task,
                    run,
                    f"{what} with manifest revision {stamp.manifest_revision}"
                    f" below the floor {floor}",
                )
        if stamp.expires_at >= 0 and self._now >= stamp.expires_at:
            self._flag(
                found,
                step,
                "view-below-floor-or-expired",
                task,
                run,
                f"{what} at {self._now} ms with a view that expired at {stamp.expires_at} ms",
            )

    @staticmethod
    def _fanouts(calls: list[PortCall]) -> list[tuple[str, int, bool]]:
        """The open fan-outs of the step: ``(task, run, succeeded)`` in call order."""
        out: list[tuple[str, int, bool]] = []
        cur: list[Any] | None = None
        for c in calls:
            if c.method != "open":
                continue
            if type(c.task_id) is not str or type(c.run_epoch) is not int:
                continue
            if (
                c.port == "engines"
                or cur is None
                or (cur[0], cur[1]) != (c.task_id, c.run_epoch)
                or not cur[2]
            ):
                cur = [c.task_id, c.run_epoch, True]
                out.append((c.task_id, c.run_epoch, True))
            if c.raised:
                cur[2] = False
                out[-1] = (cur[0], cur[1], False)
        return out

    # -- the commands, in order
    def _on_commands(
        self,
        step: int,
        ev: object,
        cmds: list[object],
        opens: list[tuple[str, int, bool]],
        env_ctx: tuple[str, int] | None,
        ctx: tuple[str, int] | None,
        active_before: dict[str, _Cleanup],
        found: list[Violation],
    ) -> None:
        # successful fan-outs per task, matched in order with Notify(mcp-served)
        ok_opens: dict[str, list[int]] = {}
        for task, run, ok in opens:
            if ok:
                ok_opens.setdefault(task, []).append(run)
        started: dict[str, _Cleanup] = {}
        deferred: list[tuple[str, int, _Cleanup]] = []
        step_lease = self._step_grant(ev)
        for cmd in cmds:
            if isinstance(cmd, JournalRecord):
                if type(cmd.task_id) is str and _is_run(cmd.run_epoch):
                    reason = cmd.reason if type(cmd.reason) is str else None
                    c = _Cleanup(task=cmd.task_id, run=cmd.run_epoch, reason=reason)
                    self._cleanups[cmd.task_id] = c
                    started[cmd.task_id] = c
                    self._track_cleanup_cmd(c, cmd.cmd_id)
            elif isinstance(cmd, JournalSettle):
                c2 = self._cleanups.get(cmd.task_id) if type(cmd.task_id) is str else None
                if c2 is not None:
                    self._track_cleanup_cmd(c2, cmd.cmd_id)
            elif isinstance(cmd, ConsumerWork):
                self._on_work(step, cmd, found)
            elif isinstance(cmd, RunSetup):
                if type(cmd.task_id) is str and _is_run(cmd.run_epoch) and type(cmd.cmd_id) is int:
                    self._setups[cmd.cmd_id] = (cmd.task_id, cmd.run_epoch)
                    self._cmd_runs[cmd.cmd_id] = (cmd.task_id, cmd.run_epoch)
            elif isinstance(cmd, Notify):
                if cmd.what == "mcp-served" and type(cmd.task_id) is str:
                    runs = ok_opens.get(cmd.task_id)
                    if runs:
                        run = runs.pop(0)
                        c3 = started.get(cmd.task_id)
                        if c3 is not None and self._covers(c3, run):
                            self._flag_open_in_cleanup(found, step, cmd.task_id, run)
                        else:
                            c4 = active_before.get(cmd.task_id)
                            if c4 is not None:
                                deferred.append((cmd.task_id, run, c4))
            elif isinstance(cmd, OpenReader) and type(cmd.reader_id) is int:
                a = cmd.assignment
                t = getattr(a, "task_id", None)
                r = getattr(a, "run_epoch", None)
                self._readers[cmd.reader_id] = _Reader(
                    task=t if type(t) is str else None,
                    run=r if type(r) is int else None,
                    lease=step_lease,
                )
            elif isinstance(cmd, CloseReader) and type(cmd.reader_id) is int:
                rd = self._readers.get(cmd.reader_id)
                if rd is not None:
                    rd.closed = True
            elif isinstance(cmd, ReadParameters):
                self._on_read(step, cmd, env_ctx, found)
            elif isinstance(cmd, SendFrame):
                op = getattr(cmd.frame, "op_id", None)
                t = getattr(cmd.frame, "task_id", None)
                r = getattr(cmd.frame, "run_epoch", None)
                if isinstance(op, str) and type(t) is str and _is_run(r):
                    self._requests[op] = (t, r)
            elif isinstance(cmd, StartTimer):
                if type(cmd.timer_id) is int:
                    if self._shut_answered:
                        self._flag_timer_after_shutdown(found, step, cmd.timer_id)
                    self._timers[cmd.timer_id] = ctx
                    if isinstance(ev, AwaitLaunchReady) and type(ev.call_id) is int:
                        self._wait_timers[cmd.timer_id] = ev.call_id
            elif isinstance(cmd, CancelTimer):
                if type(cmd.timer_id) is int:
                    self._timers.pop(cmd.timer_id, None)
                    self._wait_timers.pop(cmd.timer_id, None)
            elif isinstance(cmd, (Answer, Failed)):
                self._on_answer(step, cmd, found)
        # partial fan-outs: flagged only when a cleanup was in flight throughout the step
        for task, run, ok in opens:
            if not ok:
                c5 = active_before.get(task)
                if c5 is not None:
                    deferred.append((task, run, c5))
        self._settle_cleanups()
        for task, run, c6 in deferred:
            if self._cleanups.get(task) is c6 and self._covers(c6, run):
                self._flag_open_in_cleanup(found, step, task, run)

    def _flag_open_in_cleanup(self, found: list[Violation], step: int, task: str, run: int) -> None:
        self._flag(
            found,
            step,
            "gate-open-during-cleanup",
            task,
            run,
            f"the gate of task {task} run {run} opened while a cleanup of it was in flight",
        )

    def _flag_timer_after_shutdown(self, found: list[Violation], step: int, timer: int) -> None:
        """A timer armed once the shutdown was answered (RT-136: the shutdown
        resolves after the drain and the second scrub; nothing cancels a timer
        armed later). Checked at the ``StartTimer`` itself: the answer's own
        check has passed by then (such a timer was once flagged nowhere)."""
        self._flag(
            found,
            step,
            "timer-armed-after-end",
            None,
            None,
            f"timer {timer} armed after shutdown was answered",
        )

    @staticmethod
    def _covers(c: _Cleanup, run: int) -> bool:
        return run == c.run or (c.whole is True and run <= c.run)

    def _track_cleanup_cmd(self, c: _Cleanup, cmd_id: object) -> None:
        if type(cmd_id) is int:
            c.pending.add(cmd_id)
            self._cleanup_cmds[cmd_id] = c.task
            self._cmd_runs[cmd_id] = (c.task, c.run)

    def _on_work(self, step: int, cmd: ConsumerWork, found: list[Violation]) -> None:
        task, run = self._request_run(cmd.request)
        if type(task) is not str or not _is_run(run):
            return
        assert isinstance(task, str)
        assert isinstance(run, int)
        if type(cmd.cmd_id) is int:
            self._cmd_runs[cmd.cmd_id] = (task, run)
        if cmd.op == "install":
            if self._shut:
                self._flag(
                    found,
                    step,
                    "open-after-close",
                    task,
                    run,
                    f"a {cmd.consumer} install was started after the runtime's shutdown began",
                )
            elif run <= self._closed.get(task, -1):
                self._flag(
                    found,
                    step,
                    "open-after-close",
                    task,
                    run,
                    f"a {cmd.consumer} install was started for task {task} run {run}"
                    " after its close",
                )
            nxt = getattr(cmd.request, "next", None)
            lease = getattr(nxt, "lease_id", None)
            if type(lease) is str:
                self._installed[(task, run)] = lease
            return
        if cmd.op not in _CLEANUP_OPS:
            return
        c = self._cleanups.get(task)
        if c is None:
            return
        self._track_cleanup_cmd(c, cmd.cmd_id)
        if cmd.op == "cleanup":
            mode = getattr(cmd.request, "mode", None)
            if mode in ("full", "selective"):
                c.whole = mode == "full"
            c.holds = {h for h, (t, r) in self._holds.items() if t == task and r <= c.run}
            if c.whole:
                c.setups = {s for s, (t, r) in self._setups.items() if t == task and r <= c.run}

    def _settle_cleanups(self) -> None:
        """Forget the cleanups that settled: nothing outstanding, nothing joined."""
        for task, c in list(self._cleanups.items()):
            c.holds &= set(self._holds)
            c.setups &= set(self._setups)
            if not c.pending and not c.holds and not c.setups:
                del self._cleanups[task]

    def _step_grant(self, ev: object) -> str | None:
        """The lease id of the grant this step's event carries, if any."""
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
        if type(lid) is not str or type(task) is not str or not _is_run(run):
            return None
        key = (task, run, lid)
        if key not in self._lease_order:
            self._lease_order[key] = len(self._lease_order)
        return lid

    def _on_read(
        self,
        step: int,
        cmd: ReadParameters,
        env_ctx: tuple[str, int] | None,
        found: list[Violation],
    ) -> None:
        rd = self._readers.get(cmd.reader_id) if type(cmd.reader_id) is int else None
        if (
            rd is not None
            and type(cmd.cmd_id) is int
            and rd.task is not None
            and rd.run is not None
        ):
            self._cmd_runs[cmd.cmd_id] = (rd.task, rd.run)
        if rd is not None and rd.closed:
            self._flag(
                found,
                step,
                "read-on-closed-reader",
                rd.task,
                rd.run,
                f"a parameter read went through reader {cmd.reader_id} after it was closed",
            )
        sels = cmd.selectors if isinstance(cmd.selectors, tuple) else ()
        is_env = bool(sels) and all(isinstance(s, str) and s.startswith(_ENV_PREFIX) for s in sels)
        if not is_env or env_ctx is None or rd is None:
            return
        if type(cmd.cmd_id) is int:
            self._reads[cmd.cmd_id] = env_ctx
        task, run = env_ctx
        if (rd.task, rd.run) != (task, run):
            self._flag(
                found,
                step,
                "foreign-env-snapshot",
                task,
                run,
                f"an env value of task {task} run {run} was read through reader"
                f" {cmd.reader_id} of another run",
            )
            return
        cur = self._installed.get((task, run))
        if rd.lease is None or cur is None or rd.lease == cur:
            return
        mine = self._lease_order.get((task, run, rd.lease))
        theirs = self._lease_order.get((task, run, cur))
        if mine is not None and theirs is not None and mine < theirs:
            self._flag(
                found,
                step,
                "foreign-env-snapshot",
                task,
                run,
                f"an env value of task {task} run {run} was read through reader"
                f" {cmd.reader_id} of a superseded grant",
            )

    def _on_answer(self, step: int, cmd: Answer | Failed, found: list[Violation]) -> None:
        """A host call settled: answered, or failed (a close or shutdown that
        failed still ended its run: its timers are checked all the same)."""
        call = cmd.call_id
        if type(call) is not int:
            return
        run = self._view_calls.pop(call, None)
        self._wait_starts.pop(call, None)
        if run is not None and isinstance(cmd, Answer):
            view = cmd.value.view if isinstance(cmd.value, HoldInfo) else cmd.value
            if isinstance(cmd.value, HoldInfo):
                self._holds[cmd.value.hold_id] = run
            if view is not None:
                stamp = ViewStamp.of(view)
                if (stamp.task_id, stamp.run_epoch) != run:
                    self._flag(
                        found,
                        step,
                        "foreign-env-snapshot",
                        run[0],
                        run[1],
                        f"task {run[0]} run {run[1]} was served another run's view",
                    )
                else:
                    self._check_view(step, stamp, run[0], run[1], "a view was served", found)
        abandoned = self._abandon_closes.pop(call, None)
        closed = self._close_calls.pop(call, None)
        if closed is None:
            closed = abandoned  # an AbandonStart's close settled (RT-048)
        if closed is not None:
            left = sorted(
                t for t, r in self._timers.items() if r == closed and not self._waits_on(t)
            )
            if left:
                self._flag(
                    found,
                    step,
                    "timer-armed-after-end",
                    closed[0],
                    closed[1],
                    f"timer(s) {left} of task {closed[0]} run {closed[1]} still armed"
                    " when its close settled",
                )
        if call in self._shutdown_calls:
            self._shutdown_calls.discard(call)
            self._shut_answered = True
            left = sorted(self._timers)
            if left:
                self._flag(
                    found,
                    step,
                    "timer-armed-after-end",
                    None,
                    None,
                    f"timer(s) {left} still armed when shutdown was answered",
                )

    # ------------------------------------------------------------------
    # Secrets

    def _remember(self, text: str) -> None:
        if len(text) < MIN_SECRET_CHARS or text in self._secrets:
            return
        self._secrets[text] = None
        if len(self._secrets) > MAX_SECRETS:
            del self._secrets[next(iter(self._secrets))]
        if text[:1] in "{[":
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                return
            self._json_secrets(parsed, None, 0)

    def _json_secrets(self, value: object, key: str | None, depth: int) -> None:
        if depth > _WALK_DEPTH:
            return
        if isinstance(value, str):
            if key in _SECRET_KEYS:
                self._remember(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                if k in _SECRET_MAPS and isinstance(v, dict):
                    for inner in v.values():
                        if isinstance(inner, str):
                            self._remember(inner)
                self._json_secrets(v, k if isinstance(k, str) else None, depth + 1)
        elif isinstance(value, list):
            for v in value:
                self._json_secrets(v, key, depth + 1)

    def _walk(self, value: object, depth: int, seen: set[int]) -> None:
        if depth > _WALK_DEPTH or isinstance(value, (int, float, bool, type(None))):
            return
        if isinstance(value, Secret):
            self._remember(value.reveal())
            return
        if isinstance(value, str):
            return
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, dict):
            self._json_secrets(value, None, 0)
            for v in value.values():
                self._walk(v, depth + 1, seen)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                self._walk(v, depth + 1, seen)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                self._walk(getattr(value, f.name, None), depth + 1, seen)

    def _learn_secrets(self, event: object, cmds: list[object]) -> None:
        seen: set[int] = set()
        self._walk(event, 0, seen)
        for c in cmds:
            self._walk(c, 0, seen)

    @staticmethod
    def _texts(cmd: object) -> list[str]:
        """The error and log texts a command carries."""
        out: list[str] = []

        def failure(f: object, depth: int) -> None:
            if not isinstance(f, CredentialFailure) or depth > _WALK_DEPTH:
                return
            if isinstance(f.message, str):
                out.append(f.message)
            causes = f.causes if isinstance(f.causes, tuple) else ()
            for c in causes:
                failure(c, depth + 1)

        if isinstance(cmd, (Log, ReportError)):
            if isinstance(cmd.message, str):
                out.append(cmd.message)
        elif isinstance(cmd, CallDone):
            if isinstance(cmd.error, str):
                out.append(cmd.error)
        elif isinstance(cmd, Failed):
            failure(cmd.error, 0)
        elif isinstance(cmd, Abort):
            failure(cmd.reason, 0)
        elif isinstance(cmd, Answer):
            failure(cmd.value, 0)
        elif isinstance(cmd, SendAck):
            frame = cmd.frame
            for name in ("error", "code"):
                v = frame.get(name) if isinstance(frame, dict) else getattr(frame, name, None)
                if isinstance(v, str):
                    out.append(v)
        elif isinstance(cmd, ConsumerWork):
            failure(getattr(cmd.request, "error", None), 0)
        return out

    def _without_prefix(self, text: str) -> str:
        """A log text without the runtime's ``[credentials] task <id> run <n>: ``
        prefix of a task this monitor saw begin (the runtime builds it from the
        assignment, never from a secret; a secret equal to a task id would
        otherwise be "found" in every log of that task)."""
        head = "[credentials] task "
        if not text.startswith(head):
            return text
        for task in self._newest:
            lead = f"{head}{task} run "
            if text.startswith(lead):
                rest = text[len(lead) :]
                digits = len(rest) - len(rest.lstrip("0123456789"))
                if digits and rest[digits : digits + 2] == ": ":
                    return rest[digits + 2 :]
        return text

    def _check_texts(self, step: int, cmds: list[object], found: list[Violation]) -> None:
        if not self._secrets:
            return
        for cmd in cmds:
            for text in self._texts(cmd):
                if isinstance(cmd, Log):
                    text = self._without_prefix(text)
                if any(s in text for s in self._secrets):
                    self._flag(
                        found,
                        step,
                        "secret-in-error",
                        None,
                        None,
                        f"a {type(cmd).__name__} command's text contains a secret value",
                    )
                    break


class MonitorRecorder:
    """A shell recorder (``CoreRecorder``) that feeds an :class:`InvariantMonitor`.

    Build the runtime with the ports of :func:`wrap_ports` sharing ``log``;
    pass this as the shell's ``recorder``. Each :meth:`record` takes the
    step's port calls from ``log`` and observes the step. It never raises.
    """

    __slots__ = ("log", "monitor")

    def __init__(self, monitor: InvariantMonitor, log: Any) -> None:
        self.monitor = monitor
        self.log = log

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Observe one core step (``event`` handled, ``commands`` returned)."""
        try:
            calls = self.log.take()
        except Exception:  # noqa: BLE001 - a recorder never raises
            calls = []
        self.monitor.observe(event, commands, calls)
