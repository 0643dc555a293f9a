"""OpenTelemetry metrics of a runner shell, derived from the core's steps.

:class:`MetricsRecorder` is a :class:`~leasegate.shells._recording.CoreRecorder`:
pass it as a shell's ``recorder=`` (with
:class:`~leasegate.shells._recording.RecorderChain` next to a
trace recorder or the invariant monitor). From each step's event and
commands, and the runtime's pure queries (the registry's ``status``, the env
replica's ledger totals), it moves the instruments listed in
``docs/observability.md``. It never changes the core and never calls back
into the shell.

It needs the ``otel`` extra (``opentelemetry-api``); importing this module
without it raises :class:`~leasegate.shells.MissingExtraError`. Nothing else
in leasegate imports it, so without the extra leasegate pays nothing.

Attribute values are fixed vocabularies (phases, outcomes, reasons, codes,
consumer names) and, only with ``task_ids=True``, the task id. Never a
secret, a credential id, a parameter name, a lease id or an op id.
All times are the core's event times (``now_ms``), in milliseconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Final, get_args

from ._extras import require_extra

require_extra("leasegate.shells.metrics", "otel", ("opentelemetry",))

import opentelemetry.metrics as otel_metrics  # noqa: E402 - after the extra check

from leasegate.core._base import Command, Event  # noqa: E402
from leasegate.core.registry import (  # noqa: E402
    CancelTimer,
    CleanupRequest,
    GateReason,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    SendFrame,
    StartTimer,
    TimerFired,
)
from leasegate.core.runtime import (  # noqa: E402
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    HandleFrame,
    Recover,
    SendAck,
    WorkDone,
)
from leasegate.core.wire.lease import LeaseRequest  # noqa: E402

__all__ = ["INSTRUMENTS", "METER_NAME", "PHASES", "MetricsRecorder"]

#: The instrumentation scope (meter) name of every instrument.
METER_NAME: Final = "leasegate"

#: Every instrument: name -> (kind, unit, attribute keys). ``docs/observability.md``
#: describes when each moves; the test suite checks the two agree.
INSTRUMENTS: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "leasegate.runs": ("gauge", "{run}", ("phase",)),
    "leasegate.gate.open_latency": ("histogram", "ms", ()),
    "leasegate.gate.closes": ("counter", "{close}", ("reason",)),
    "leasegate.lease.requests": ("counter", "{request}", ("kind",)),
    "leasegate.lease.answers": ("counter", "{frame}", ("outcome",)),
    "leasegate.ssm.parameters": ("counter", "{parameter}", ("outcome",)),
    "leasegate.ssm.read.duration": ("histogram", "ms", ("outcome",)),
    "leasegate.cleanups": ("counter", "{cleanup}", ("consumer", "outcome")),
    "leasegate.cleanup.duration": ("histogram", "ms", ("consumer",)),
    "leasegate.quarantines": ("counter", "{quarantine}", ()),
    "leasegate.env.acks": ("counter", "{ack}", ("phase", "code")),
    "leasegate.env.ledger.entries": ("gauge", "{entry}", ()),
    "leasegate.env.ledger.bytes": ("gauge", "By", ()),
    "leasegate.timers.armed": ("gauge", "{timer}", ()),
}

#: The registry's run phases (``RunStatus.phase``): the ``leasegate.runs`` series.
PHASES: Final = ("recovering", "waiting", "usable", "narrowing", "lost", "ended")

#: Incoming lease frame kinds -> their ``leasegate.lease.answers`` outcome.
_ANSWERS: Final = {
    "lease.grant.v1": "grant",
    "lease.stale": "stale",
    "lease.deny": "deny",
    "lease.unavailable": "unavailable",
}

#: Consumer-work ops counted as cleanups (the registry's consumer cleanups and
#: the host's removal of the task's paths).
_CLEANUP_OPS: Final = ("cleanup", "remove-paths")

#: Gate-close reasons (the registry's ``GateReason``); other cleanup reasons
#: (``lease-replaced``) are not gate closes.
_GATE_REASONS: Final = frozenset(get_args(GateReason))


class _Run:
    """What the recorder remembers of one task's registered run."""

    __slots__ = ("close_pending", "gate_open", "phase", "quarantined", "run_epoch", "started_ms")

    def __init__(self, run_epoch: int) -> None:
        self.run_epoch = run_epoch
        self.phase: str | None = None
        self.gate_open = False
        self.quarantined = False
        #: ``now_ms`` of the run's ``BeginStart`` until its gate first opened.
        self.started_ms: int | None = None
        #: The gate closed; its reason comes with the next consumer cleanup.
        self.close_pending = False


class MetricsRecorder:
    """The shells' OpenTelemetry instruments, moved from each core step.

    Args:
        runtime: the runtime the shell drives (its registry and env replica
            are read through pure queries after each step), or ``None``:
            then only what events and commands show moves (no run phases,
            gate opens and closes, quarantines or ledger gauges).
        meter_provider: where the instruments live (``None``: OpenTelemetry's
            global provider, a no-op until the host installs an SDK).
        task_ids: add a ``task_id`` attribute to the per-run instruments
            (``leasegate.gate.open_latency``, ``leasegate.gate.closes``,
            ``leasegate.lease.requests``, ``leasegate.lease.answers``,
            ``leasegate.cleanups``, ``leasegate.quarantines``). Off by default:
            task ids are unbounded in number.

    ``record`` runs on the shell's feeding path, never raises and never
    calls back into the shell. Instruments: :data:`INSTRUMENTS`
    (``docs/observability.md``). Times are event times, milliseconds.
    """

    def __init__(
        self,
        runtime: Any = None,
        *,
        meter_provider: otel_metrics.MeterProvider | None = None,
        task_ids: bool = False,
    ) -> None:
        provider = meter_provider or otel_metrics.get_meter_provider()
        meter = provider.get_meter(METER_NAME)
        self._runtime = runtime
        self._task_ids = task_ids
        u = {name: spec[1] for name, spec in INSTRUMENTS.items()}
        self._runs = meter.create_gauge(
            "leasegate.runs", unit=u["leasegate.runs"], description="Runs registered, by phase."
        )
        self._open_latency = meter.create_histogram(
            "leasegate.gate.open_latency",
            unit="ms",
            description="From a run's start to its gate's first opening.",
        )
        self._gate_closes = meter.create_counter(
            "leasegate.gate.closes", unit=u["leasegate.gate.closes"], description="Gate closes."
        )
        self._requests = meter.create_counter(
            "leasegate.lease.requests",
            unit=u["leasegate.lease.requests"],
            description="lease.request frames sent.",
        )
        self._answers = meter.create_counter(
            "leasegate.lease.answers",
            unit=u["leasegate.lease.answers"],
            description="Lease frames received from the cloud.",
        )
        self._parameters = meter.create_counter(
            "leasegate.ssm.parameters",
            unit=u["leasegate.ssm.parameters"],
            description="Parameters read from SSM, by outcome.",
        )
        self._read_duration = meter.create_histogram(
            "leasegate.ssm.read.duration", unit="ms", description="SSM read calls."
        )
        self._cleanups = meter.create_counter(
            "leasegate.cleanups", unit=u["leasegate.cleanups"], description="Cleanups finished."
        )
        self._cleanup_duration = meter.create_histogram(
            "leasegate.cleanup.duration", unit="ms", description="Cleanup durations."
        )
        self._quarantines = meter.create_counter(
            "leasegate.quarantines",
            unit=u["leasegate.quarantines"],
            description="Runs quarantined (a gate close failed).",
        )
        self._acks = meter.create_counter(
            "leasegate.env.acks", unit=u["leasegate.env.acks"], description="Env replica acks sent."
        )
        self._ledger_entries = meter.create_gauge(
            "leasegate.env.ledger.entries",
            unit=u["leasegate.env.ledger.entries"],
            description="Replay-ledger entries in use.",
        )
        self._ledger_bytes = meter.create_gauge(
            "leasegate.env.ledger.bytes", unit="By", description="Replay-ledger bytes in use."
        )
        self._timers_armed = meter.create_gauge(
            "leasegate.timers.armed",
            unit=u["leasegate.timers.armed"],
            description="Core timers armed.",
        )
        self._runs_by_task: dict[str, _Run] = {}
        self._phase_counts: dict[str, int] = {}
        #: ReadParameters cmd_id -> (now_ms, selectors).
        self._reads: dict[int, tuple[int, tuple[str, ...]]] = {}
        #: ConsumerWork cmd_id -> (now_ms, consumer, task id or None).
        self._work: dict[int, tuple[int, str, str | None]] = {}
        self._armed: set[int] = set()
        self._armed_reported = -1
        self._ledger: tuple[int, int] | None = None

    # ------------------------------------------------------------------ step

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Move the instruments for one core step (never raises)."""
        with contextlib.suppress(Exception):  # metrics never break the shell
            self._step(event, commands)

    def _attrs(self, task: str | None, **attrs: str) -> dict[str, str]:
        if self._task_ids and task is not None:
            attrs["task_id"] = task
        return attrs

    def _step(self, event: Event, commands: Sequence[Command]) -> None:
        now = event.now_ms
        before = {t: (r.run_epoch, self._installed(t)) for t, r in self._runs_by_task.items()}
        self._on_event(event, now)
        for cmd in commands:
            self._on_command(cmd, event, now, before)
        self._observe_runs(now)
        self._observe_gauges()

    def _on_event(self, event: Event, now: int) -> None:
        if isinstance(event, BeginStart) and type(event.task_id) is str:
            run = self._runs_by_task.get(event.task_id)
            if run is None or run.run_epoch != event.run_epoch:
                run = self._runs_by_task[event.task_id] = _Run(event.run_epoch)
            run.started_ms = now
        elif isinstance(event, Recover):
            for owed in event.owed:
                self._runs_by_task.setdefault(owed.task_id, _Run(owed.run_epoch))
        elif isinstance(event, CloseAssignment):
            self._runs_by_task.setdefault(event.task_id, _Run(event.run_epoch))
        elif isinstance(event, HandleFrame):
            frame: dict[str, Any] = event.frame if isinstance(event.frame, dict) else {}
            kind = frame.get("kind")
            outcome = _ANSWERS.get(kind) if type(kind) is str else None
            if outcome is not None:
                frame_task = frame.get("taskId")
                task = frame_task if type(frame_task) is str else None
                if outcome == "stale" and self._is_floor(frame, task):
                    outcome = "stale-floor"
                self._answers.add(1, self._attrs(task, outcome=outcome))
        elif isinstance(event, (ReadCompleted, ReadFailed)):
            self._on_read_done(event, now)
        elif isinstance(event, WorkDone):
            self._on_work_done(event, now)
        elif isinstance(event, TimerFired):
            self._armed.discard(event.timer_id)

    def _on_command(
        self, cmd: Command, event: Event, now: int, before: dict[str, tuple[int, int | None]]
    ) -> None:
        if isinstance(cmd, StartTimer):
            self._armed.add(cmd.timer_id)
        elif isinstance(cmd, CancelTimer):
            self._armed.discard(cmd.timer_id)
        elif isinstance(cmd, SendFrame) and isinstance(cmd.frame, LeaseRequest):
            task = cmd.frame.task_id
            held = before.get(task)
            renewal = held is not None and held[0] == cmd.frame.run_epoch and held[1] is not None
            self._requests.add(1, self._attrs(task, kind="renewal" if renewal else "initial"))
        elif isinstance(cmd, ReadParameters):
            self._reads[cmd.cmd_id] = (now, tuple(cmd.selectors))
        elif isinstance(cmd, SendAck):
            frame = cmd.frame
            ok = getattr(frame, "ok", None)
            code = getattr(frame, "code", None)
            phase = getattr(frame, "phase", None)
            self._acks.add(
                1,
                {
                    "phase": phase if type(phase) is str else "unknown",
                    "code": "ok" if ok is True else (code if type(code) is str else "unknown"),
                },
            )
        elif isinstance(cmd, ConsumerWork) and cmd.op in _CLEANUP_OPS:
            req = cmd.request
            work_task = _task_of(req)
            self._work[cmd.cmd_id] = (now, cmd.consumer, work_task)
            if isinstance(req, CleanupRequest) and req.reason in _GATE_REASONS:
                run = self._runs_by_task.get(req.assignment.task_id)
                if run is not None and run.close_pending:
                    run.close_pending = False
                    self._gate_closes.add(1, self._attrs(work_task, reason=req.reason))

    def _on_read_done(self, event: ReadCompleted | ReadFailed, now: int) -> None:
        started = self._reads.pop(event.cmd_id, None)
        if started is None:
            return
        t0, selectors = started
        if isinstance(event, ReadFailed):
            outcome = "access-denied" if event.access_denied else "failed"
            self._read_duration.record(now - t0, {"outcome": outcome})
            self._parameters.add(len(selectors), {"outcome": outcome})
            return
        self._read_duration.record(now - t0, {"outcome": "ok"})
        versions = {p.name: p.version for p in event.parameters}
        invalid = set(event.invalid)
        counts: dict[str, int] = {}
        for sel in selectors:
            name, _, version = sel.partition(":")
            if sel in invalid or name in invalid or name not in versions:
                outcome = "missing"
            elif version and version.isdigit() and int(version) != versions[name]:
                outcome = "version-mismatch"
            else:
                outcome = "available"
            counts[outcome] = counts.get(outcome, 0) + 1
        for outcome, n in counts.items():
            self._parameters.add(n, {"outcome": outcome})

    def _on_work_done(self, event: WorkDone, now: int) -> None:
        started = self._work.pop(event.cmd_id, None)
        if started is None:
            return
        t0, consumer, task = started
        outcome = "ok" if event.error is None else "failed"
        self._cleanups.add(1, self._attrs(task, consumer=consumer, outcome=outcome))
        self._cleanup_duration.record(now - t0, {"consumer": consumer})

    # ------------------------------------------------------- runtime queries

    def _status(self, task: str) -> Any:
        registry = getattr(self._runtime, "registry", None)
        return None if registry is None else registry.status(task)

    def _installed(self, task: str) -> int | None:
        st = self._status(task)
        return None if st is None else st.installed_revision

    def _is_floor(self, frame: dict[str, Any], task: str | None) -> bool:
        floor = frame.get("minRevision")
        if type(floor) is not int or task is None:
            return False
        st = self._status(task)
        installed = None if st is None else st.installed_revision
        return installed is None or floor > installed

    def _observe_runs(self, now: int) -> None:
        if self._runtime is None:
            return
        counts = dict.fromkeys(PHASES, 0)
        for task, run in list(self._runs_by_task.items()):
            st = self._status(task)
            if st is None:
                if run.phase is not None:  # registered once, now forgotten (ended)
                    del self._runs_by_task[task]
                continue
            if st.assignment.run_epoch != run.run_epoch:
                run = self._runs_by_task[task] = _Run(st.assignment.run_epoch)
            run.phase = st.phase
            counts[st.phase] = counts.get(st.phase, 0) + 1
            if st.gate_open and not run.gate_open:
                if run.started_ms is not None:
                    self._open_latency.record(now - run.started_ms, self._attrs(task))
                    run.started_ms = None
                run.close_pending = False
            elif run.gate_open and not st.gate_open:
                run.close_pending = True
            run.gate_open = st.gate_open
            if st.quarantined and not run.quarantined:
                self._quarantines.add(1, self._attrs(task))
            run.quarantined = st.quarantined
        for phase, n in counts.items():
            if self._phase_counts.get(phase) != n:
                self._phase_counts[phase] = n
                self._runs.set(n, {"phase": phase})

    def _observe_gauges(self) -> None:
        if len(self._armed) != self._armed_reported:
            self._armed_reported = len(self._armed)
            self._timers_armed.set(self._armed_reported)
        replica = getattr(self._runtime, "_replica", None)
        totals = getattr(replica, "ledger_totals", None)
        if isinstance(totals, tuple) and len(totals) == 2 and totals != self._ledger:
            self._ledger = totals
            self._ledger_entries.set(int(totals[0]))
            self._ledger_bytes.set(int(totals[1]))


def _task_of(request: object) -> str | None:
    """The task id of a consumer-work request (registry or runtime cleanup request)."""
    assignment = getattr(request, "assignment", None)
    task = getattr(assignment, "task_id", None) or getattr(request, "task_id", None)
    return task if type(task) is str else None
