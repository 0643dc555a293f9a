"""A timeline of traces: every task run drawn on a time axis, as one HTML page.

``leasegate timeline TRACE... [-o FILE.html] [--monitor]`` (``docs/timeline.md``).

Two halves:

* :func:`build_timeline` — a pure function of the traces' steps (as
  :func:`~leasegate.shells.trace.read_trace` yields them) to a
  :class:`Timeline`: one :class:`RunRow` per task run of each trace, with its
  phases and gate open intervals (:class:`Interval`) and its marks
  (:class:`Mark`: grants, renewals, lease expiry, revision floors,
  rotations, reads with their outcome, env snapshot commits and applies,
  errors, monitor violations). Everything is read off the recorded events,
  port calls and commands; nothing is replayed.
* :func:`render_html` — the page: inline SVG and CSS and a small inline
  script (hover shows the step), no network, no external file.

The page holds only what the trace holds: the trace is redacted when it is
written (``docs/trace-format.md``), so a secret is a redaction token here too.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ._format import StepLine, TraceFormatError, read_trace

__all__ = [
    "LANES",
    "MARK_KINDS",
    "PHASES",
    "Interval",
    "Mark",
    "RunRow",
    "StepInfo",
    "Timeline",
    "build_timeline",
    "load_timeline",
    "render_html",
    "run",
]

#: The phases a run goes through, in the order a run usually meets them.
#: ``waiting``: the gate is closed and the run waits for a new grant (after a
#: narrowing or a refused grant).
PHASES: Final = (
    "starting",
    "reading",
    "installing",
    "open",
    "waiting",
    "closing",
    "cleaning",
    "quarantined",
    "ended",
)

#: mark kind -> the lane it is drawn in.
MARK_KINDS: Final[Mapping[str, str]] = {
    "start": "lease",
    "grant": "lease",
    "renewal": "lease",
    "expiry": "lease",
    "floor": "lease",
    "stale": "lease",
    "close": "lease",
    "read": "reads",
    "rotation": "rotations",
    "env-commit": "env",
    "env-apply": "env",
    "env-ack": "env",
    "error": "errors",
    "violation": "errors",
}

#: The mark lanes of a row, top to bottom.
LANES: Final = ("lease", "reads", "rotations", "env", "errors")

_END_REASONS: Final = frozenset(("stop", "park", "teardown", "superseded", "shutdown"))
_DETAIL_CHARS: Final = 1500


@dataclasses.dataclass(frozen=True, slots=True)
class Mark:
    """One point on a run's row.

    Attributes:
        kind: one of :data:`MARK_KINDS`.
        at_ms: when (milliseconds since the epoch; a lease expiry may lie
            after the trace's end).
        step: the trace step it comes from (1-based).
        label: a short text (ids, revisions, outcome; never a value).
        bad: drawn in red (a read that did not find everything, an error, a
            violation).
    """

    kind: str
    at_ms: int
    step: int
    label: str
    bad: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Interval:
    """A span of a run's row: a phase, or the gate being open.

    Attributes:
        kind: a phase of :data:`PHASES`, or ``"gate"``.
        start_ms, end_ms: milliseconds since the epoch; ``end_ms`` is its
            trace's last step for a span still running at that trace's end.
        start_step: the step that began it.
        end_step: the step that ended it, or ``None`` (still running).
    """

    kind: str
    start_ms: int
    end_ms: int
    start_step: int
    end_step: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    """One task run of one trace.

    Attributes:
        source: the trace it comes from (its label: the file name).
        task_id, run_epoch: the run.
        phases: consecutive phase spans, in time order.
        gates: the gate open intervals (any consumer gate open), in order.
        marks: the marks, in step order.
    """

    source: str
    task_id: str
    run_epoch: int
    phases: tuple[Interval, ...]
    gates: tuple[Interval, ...]
    marks: tuple[Mark, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class StepInfo:
    """What hovering a mark shows: the step as the trace records it (redacted).

    Attributes:
        source: the trace label.
        step, line: the step number and its line in the file.
        at_ms: the event's ``now_ms``.
        text: the event, port calls and commands as JSON text, each
            shortened to 1,500 characters.
    """

    source: str
    step: int
    line: int
    at_ms: int
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """The page model.

    Attributes:
        sources: the trace labels, in the order given.
        start_ms, end_ms: the first and last step's ``now_ms`` over all traces.
        runs: one row per run, per trace in order, runs by first appearance.
        steps: ``(source, step) -> StepInfo`` for every step a mark or an
            interval names.
        violations: how many monitor violations were given (all drawn).
    """

    sources: tuple[str, ...]
    start_ms: int
    end_ms: int
    runs: tuple[RunRow, ...]
    steps: Mapping[tuple[str, int], StepInfo]
    violations: int


# ------------------------------------------------------------------ the model


def _short(v: Any) -> str:
    text = json.dumps(v, separators=(",", ":"), ensure_ascii=True)
    if len(text) <= _DETAIL_CHARS:
        return text
    return text[:_DETAIL_CHARS] + f"... ({len(text)} characters)"


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _str(v: Any) -> str | None:
    return v if type(v) is str else None


def _assignment(v: Any) -> tuple[str, int] | None:
    """``(task, run)`` of a trace-form ``registry.Assignment`` (or anything holding one)."""
    if type(v) is not dict:
        return None
    if "assignment" in v:
        return _assignment(v["assignment"])
    task, run = _str(v.get("task_id")), _int(v.get("run_epoch"))
    if task is None or run is None or task == "":
        return None
    return task, run


class _Run:
    def __init__(self, source: str, task: str, run: int) -> None:
        self.source = source
        self.task = task
        self.run = run
        self.phases: list[list[Any]] = []  # [kind, start_ms, start_step, end_ms, end_step]
        self.gates: list[list[Any]] = []
        self.marks: list[Mark] = []
        self.open_ports: list[str] = []
        self.ending = False
        self.granted = False
        self.expiry: int | None = None

    @property
    def phase(self) -> str | None:
        return self.phases[-1][0] if self.phases else None

    def enter(self, phase: str, at: int, step: int) -> None:
        if self.phase == phase:
            return
        if self.phases:
            self.phases[-1][3:] = [at, step]
        self.phases.append([phase, at, step, None, None])

    def open_port(self, port: str, at: int, step: int) -> None:
        if not self.open_ports:
            self.gates.append(["gate", at, step, None, None])
        if port not in self.open_ports:
            self.open_ports.append(port)
        self.enter("open", at, step)

    def close_port(self, port: str, at: int, step: int) -> None:
        if port not in self.open_ports:
            return
        self.open_ports.remove(port)
        if not self.open_ports:
            self.gates[-1][3:] = [at, step]
            if self.phase == "open":
                self.enter("closing", at, step)


class _Builder:
    """Walks the steps of one trace and keeps every run's state."""

    def __init__(self, source: str, runs: dict[tuple[str, str, int], _Run]) -> None:
        self.source = source
        self.runs = runs
        self.readers: dict[int, tuple[str, int]] = {}
        self.reads: dict[int, tuple[tuple[str, int], list[str]]] = {}
        self.works: dict[int, tuple[str, int]] = {}
        self.named: set[int] = set()
        self.end = 0

    def get(self, who: tuple[str, int] | None, *, create: bool = False) -> _Run | None:
        if who is None:
            return None
        key = (self.source, who[0], who[1])
        r = self.runs.get(key)
        if r is None and create:
            r = self.runs[key] = _Run(self.source, who[0], who[1])
        return r

    def live(self) -> list[_Run]:
        return [r for r in self.runs.values() if r.source == self.source and r.phase != "ended"]

    def mark(
        self, r: _Run | None, kind: str, at: int, step: int, label: str, bad: bool = False
    ) -> None:
        if r is None:
            return
        r.marks.append(Mark(kind, at, step, label, bad))
        self.named.add(step)

    def step(self, s: StepLine) -> None:
        ev = s.event
        at = _int(ev.get("now_ms"))
        if at is None:
            return
        n = s.n
        who = self._event_run(ev)
        self._on_event(ev, who, at, n)
        for call in s.calls:
            self._on_call(call, at, n)
        for cmd in s.commands:
            if type(cmd) is dict:
                self._on_command(cmd, who, ev, at, n)

    # -- events

    @staticmethod
    def _event_run(ev: dict[str, Any]) -> tuple[str, int] | None:
        if ev.get("$t") == "runtime.HandleFrame":
            frame = ev.get("frame")
            if type(frame) is not dict:
                return None
            body = frame.get("lease") if frame.get("kind") == "lease.grant.v1" else frame
            if type(body) is not dict:
                return None
            task, run = _str(body.get("taskId")), _int(body.get("runEpoch"))
            return (task, run) if task and run is not None else None
        return _assignment(ev)

    def _on_event(self, ev: dict[str, Any], who: tuple[str, int] | None, at: int, n: int) -> None:
        tag = ev.get("$t")
        if tag == "runtime.BeginStart":
            r = self.get(who, create=True)
            assert r is not None or who is None
            if r is not None:
                r.ending = False
                r.enter("starting", at, n)
                self.mark(r, "start", at, n, "recovery start" if ev.get("recovery") else "start")
        elif tag == "runtime.Recover":
            for owed in ev.get("owed") or ():
                r = self.get(_assignment(owed), create=True)
                if r is not None:
                    r.ending = True
                    r.enter("cleaning", at, n)
                    self.mark(r, "close", at, n, f"owed cleanup ({owed.get('reason')})")
            for pair in ev.get("admitted") or ():
                if type(pair) is list and len(pair) == 2:
                    r = self.get(
                        (str(pair[0]), int(pair[1])) if _int(pair[1]) is not None else None
                    )
                    self.mark(r, "start", at, n, "admitted on recovery")
        elif tag == "runtime.CloseAssignment":
            r = self.get(who)
            if r is not None:
                r.ending = True
                if not r.open_ports:
                    r.enter("closing", at, n)
                self.mark(r, "close", at, n, f"close ({ev.get('reason')})")
        elif tag == "runtime.RuntimeShutdown":
            for r in self.live():
                r.ending = True
                self.mark(r, "close", at, n, "runtime shutdown")
        elif tag == "runtime.HandleFrame":
            self._on_frame(ev.get("frame"), self.get(who), at, n)
        elif tag in ("registry.ReadCompleted", "registry.ReadFailed"):
            self._on_read(ev, at, n)
        elif tag == "runtime.WorkDone":
            err = ev.get("error")
            if type(err) is dict:
                r = self.get(self.works.get(_int(ev.get("cmd_id")) or 0))
                self.mark(r, "error", at, n, f"consumer work failed: {err.get('message')}", True)

    def _on_frame(self, frame: Any, r: _Run | None, at: int, n: int) -> None:
        if type(frame) is not dict or r is None:
            return
        kind = frame.get("kind")
        if kind == "lease.grant.v1":
            lease = frame["lease"]
            rev = lease.get("manifestRevision")
            self.mark(
                r,
                "renewal" if r.granted else "grant",
                at,
                n,
                f"{'renewal' if r.granted else 'grant'} r{rev}",
            )
            r.granted = True
            exp = _int(lease.get("expiresAt"))
            if exp is not None and exp != r.expiry:
                r.expiry = exp
                self.mark(r, "expiry", exp, n, "lease expiry")
        elif kind == "lease.stale":
            floor = frame.get("minRevision")
            removed = frame.get("removed")
            gone = (
                f", removed {', '.join(map(str, removed))}"
                if type(removed) is list and removed
                else ""
            )
            if floor is not None:
                self.mark(r, "floor", at, n, f"revision floor {floor}{gone}")
            else:
                self.mark(r, "stale", at, n, f"stale: wanted r{frame.get('wantedRevision')}{gone}")
        elif kind == "lease.deny":
            self.mark(r, "error", at, n, "lease denied", True)
        elif kind == "credential.changed":
            self.mark(
                r,
                "rotation",
                at,
                n,
                f"rotation {frame.get('credentialId')} {frame.get('revision')}",
            )
        elif kind == "env.replica.v1.commit":
            self.mark(r, "env-commit", at, n, "env snapshot commit")

    def _on_read(self, ev: dict[str, Any], at: int, n: int) -> None:
        got = self.reads.pop(_int(ev.get("cmd_id")) or 0, None)
        if got is None:
            return
        who, selectors = got
        r = self.get(who)
        if ev.get("$t") == "registry.ReadFailed":
            denied = ev.get("access_denied") is True
            self.mark(r, "read", at, n, "read: access denied" if denied else "read: failed", True)
            return
        params = ev.get("parameters") or []
        invalid = ev.get("invalid") or []
        versions = {p.get("name"): p.get("version") for p in params if type(p) is dict}
        mismatch = 0
        for sel in selectors:
            name, _, version = sel.rpartition(":")
            if name and version.isdigit() and name in versions and versions[name] != int(version):
                mismatch += 1
        if invalid:
            self.mark(r, "read", at, n, f"read: {len(params)} found, {len(invalid)} missing", True)
        elif mismatch:
            self.mark(r, "read", at, n, f"read: {mismatch} version mismatch", True)
        else:
            self.mark(r, "read", at, n, f"read: {len(params)} available")

    # -- port calls

    def _on_call(self, call: dict[str, Any], at: int, n: int) -> None:
        task, run = _str(call.get("task_id")), _int(call.get("run_epoch"))
        r = self.get((task, run) if task is not None and run is not None else None)
        if r is None or r.phase == "ended":
            return
        port, method, raised = call.get("port"), call.get("method"), call.get("raised") is True
        if raised:
            what = call.get("unavailable") or "raised"
            self.mark(r, "error", at, n, f"{port}.{method} failed: {what}", True)
            if method == "close":
                r.enter("quarantined", at, n)
            return
        if method == "open":
            r.open_port(str(port), at, n)
            self.named.add(n)
        elif method == "close":
            was = bool(r.open_ports)
            r.close_port(str(port), at, n)
            if r.phase == "quarantined":
                r.enter("closing", at, n)
            if was:
                self.named.add(n)

    # -- commands

    def _on_command(
        self, cmd: dict[str, Any], who: tuple[str, int] | None, ev: dict[str, Any], at: int, n: int
    ) -> None:
        tag = cmd.get("$t")
        if tag == "registry.OpenReader":
            a = _assignment(cmd)
            rid = _int(cmd.get("reader_id"))
            if a is not None and rid is not None:
                self.readers[rid] = a
                r = self.get(a)
                if r is not None and not r.open_ports and not r.ending:
                    r.enter("reading", at, n)
        elif tag == "registry.ReadParameters":
            a = self.readers.get(_int(cmd.get("reader_id")) or 0)
            cid = _int(cmd.get("cmd_id"))
            sel = cmd.get("selectors")
            if a is not None and cid is not None:
                self.reads[cid] = (
                    a,
                    [x for x in sel if type(x) is str] if type(sel) is list else [],
                )
        elif tag == "runtime.ConsumerWork":
            self._on_work(cmd, ev, at, n)
        elif tag == "runtime.JournalRecord":
            r = self.get(_assignment(cmd))
            if r is not None and cmd.get("reason") in _END_REASONS:
                r.ending = True
        elif tag == "runtime.JournalSettle":
            task = _str(cmd.get("task_id"))
            for run in cmd.get("runs") or ():
                r = self.get((task, run) if task and type(run) is int else None)
                if r is not None and not r.open_ports and r.phase != "quarantined":
                    r.enter("ended" if r.ending else "waiting", at, n)
        elif tag == "registry.ReportError":
            r = self.get(_assignment(cmd)) or self.get(who)
            self.mark(r, "error", at, n, f"error: {cmd.get('message')}", True)
        elif tag == "runtime.Failed":
            err = cmd.get("error")
            msg = err.get("message") if type(err) is dict else None
            self.mark(self.get(who), "error", at, n, f"call failed: {msg}", True)
        elif tag == "runtime.Abort":
            reason = cmd.get("reason")
            msg = reason.get("message") if type(reason) is dict else None
            self.mark(self.get(who), "error", at, n, f"{cmd.get('kind')} aborted: {msg}", True)
        elif tag == "runtime.SendAck":
            frame = cmd.get("frame")
            if type(frame) is dict and frame.get("ok") is False:
                r = self.get(_assignment(frame)) or self.get(who)
                self.mark(r, "env-ack", at, n, f"env ack not ok: {frame.get('code')}")

    def _on_work(self, cmd: dict[str, Any], ev: dict[str, Any], at: int, n: int) -> None:
        a = _assignment(cmd.get("request"))
        r = self.get(a)
        cid = _int(cmd.get("cmd_id"))
        if r is None or a is None:
            return
        if cid is not None:
            self.works[cid] = a
        op = cmd.get("op")
        if op == "install":
            if not r.open_ports and not r.ending:
                r.enter("installing", at, n)
            frame = ev.get("frame") if ev.get("$t") == "runtime.HandleFrame" else None
            commit = type(frame) is dict and frame.get("kind") == "env.replica.v1.commit"
            if commit and not any(m.kind == "env-apply" and m.step == n for m in r.marks):
                self.mark(r, "env-apply", at, n, "env snapshot applied (install)")
        elif op == "cleanup" and not r.open_ports and r.phase != "quarantined":
            r.enter("cleaning", at, n)


def _freeze(spans: list[list[Any]], end: int) -> tuple[Interval, ...]:
    return tuple(
        Interval(k, s, e if e is not None else max(end, s), ss, es) for k, s, ss, e, es in spans
    )


def build_timeline(
    traces: Sequence[tuple[str, Iterable[StepLine]]],
    *,
    violations: Mapping[str, Sequence[Any]] | None = None,
) -> Timeline:
    """The page model of ``traces``: a pure function of their steps.

    Args:
        traces: ``(label, steps)`` per trace, in the order to draw them
            (``steps`` as :func:`~leasegate.shells.trace.read_trace` yields
            them; a :class:`~leasegate.shells.trace.TraceFormatError` it
            raises propagates).
        violations: ``label -> violations`` of the invariant monitor over
            that trace (objects with ``step`` (0-based, as
            :class:`~leasegate.core.monitor.Violation`), ``property``,
            ``task_id``, ``run_epoch``); each becomes a red mark on its run,
            or on every run of the trace live at that step when it names none.

    Returns:
        A :class:`Timeline`. Times are the events' ``now_ms``
        (milliseconds since the epoch). Phases follow the recorded facts:
        ``starting`` at ``BeginStart``; ``reading`` at ``OpenReader``;
        ``installing`` at an install ``ConsumerWork``; ``open`` at the first
        gate ``open`` port call; ``closing`` when the last open gate is
        closed or the run is closed; ``cleaning`` at a cleanup
        ``ConsumerWork`` (or an owed cleanup on ``Recover``);
        ``quarantined`` when a gate ``close`` raised; ``ended`` when the
        journal settles a run that was closed, ``waiting`` when it settles
        one that goes on (a narrowing). A gate is open from the first
        successful ``open`` of any consumer port to the ``close`` of the
        last one.

    Never raises for odd content: a field of an unexpected type is skipped.
    """
    runs: dict[tuple[str, str, int], _Run] = {}
    infos: dict[tuple[str, int], StepInfo] = {}
    start: int | None = None
    end: int | None = None
    sources: list[str] = []
    builders: list[_Builder] = []
    count = 0
    for label, steps in traces:
        sources.append(label)
        b = _Builder(label, runs)
        builders.append(b)
        kept: dict[int, StepLine] = {}
        times: dict[int, int] = {}
        for s in steps:
            b.step(s)
            at = _int(s.event.get("now_ms"))
            if at is None:
                continue
            times[s.n] = at
            start = at if start is None else min(start, at)
            end = at if end is None else max(end, at)
            kept[s.n] = s
        for v in (violations or {}).get(label, ()):
            n = int(v.step) + 1
            at = times.get(n, end or 0)
            r = b.get((v.task_id, v.run_epoch) if v.task_id and v.run_epoch is not None else None)
            targets = [r] if r is not None else b.live()
            count += 1
            for t in targets:
                b.mark(t, "violation", at, n, f"monitor: {v.property}", True)
        b.end = max(times.values(), default=0)
        steps_named = set(b.named)
        for r in runs.values():
            if r.source == label:
                steps_named.update(p[2] for p in r.phases)
                steps_named.update(p[4] for p in r.phases if p[4] is not None)
        for n in sorted(steps_named):
            got = kept.get(n)
            if got is None:
                continue
            s = got
            text = (
                f"event: {_short(s.event)}\ncalls: "
                f"{_short(s.calls)}\ncommands: {_short(s.commands)}"
            )
            infos[(label, n)] = StepInfo(label, n, s.line, times[n], text)
    t0, t1 = start or 0, end or 0
    ends = {b.source: b.end for b in builders}
    rows = tuple(
        RunRow(
            source=r.source,
            task_id=r.task,
            run_epoch=r.run,
            phases=_freeze(r.phases, ends[r.source]),
            gates=_freeze(r.gates, ends[r.source]),
            marks=tuple(sorted(r.marks, key=lambda m: m.step)),
        )
        for r in runs.values()
    )
    order = {s: i for i, s in enumerate(sources)}
    rows = tuple(sorted(rows, key=lambda r: order[r.source]))  # stable: first appearance
    return Timeline(tuple(sources), t0, t1, rows, infos, count)


def load_timeline(paths: Sequence[str], *, monitor: bool = False) -> Timeline:
    """Read the traces at ``paths`` and build their :class:`Timeline`.

    Args:
        paths: trace files, drawn in this order (labelled by file name).
        monitor: also replay each trace with the invariant monitor
            (:func:`~leasegate.shells.trace.replay_trace`) and draw its
            violations in red.

    Raises:
        TraceFormatError: a malformed trace (``"FILE: line N: ..."``).
        OSError: a file cannot be read.
    """
    import os

    from .replay import replay_trace

    labels = [os.path.basename(p) or p for p in paths]
    if len(set(labels)) != len(labels):
        labels = list(paths)
    traces: list[tuple[str, Iterable[StepLine]]] = []
    found: dict[str, Sequence[Any]] = {}
    for path, label in zip(paths, labels, strict=True):
        with open(path, encoding="utf-8", newline="\n") as f:
            try:
                _, steps = read_trace(f)
                traces.append((label, list(steps)))
            except TraceFormatError as e:
                raise TraceFormatError(f"{path}: {e}") from None
        if monitor:
            result = replay_trace(path, monitor=True)
            found[label] = result.violations
    return build_timeline(traces, violations=found if monitor else None)


# ------------------------------------------------------------------ the page

_LEFT: Final = 230
_PLOT: Final = 1100
_RIGHT: Final = 140
_TOP: Final = 70
_BAR: Final = 20
_GATE: Final = 12
_LANE: Final = 14
_ROW: Final = 8 + _BAR + 4 + _GATE + 6 + _LANE * len(LANES) + 14
_PHASE_COLORS: Final = {
    "starting": "#c6dbef",
    "reading": "#9ecae1",
    "installing": "#6baed6",
    "open": "#74c476",
    "waiting": "#d9d9d9",
    "closing": "#fdd0a2",
    "cleaning": "#fd8d3c",
    "quarantined": "#de2d26",
    "ended": "#f0f0f0",
}
_MARK_COLORS: Final = {
    "start": "#3182bd",
    "grant": "#31a354",
    "renewal": "#006d2c",
    "expiry": "#756bb1",
    "floor": "#e6550d",
    "stale": "#fdae6b",
    "close": "#636363",
    "read": "#3182bd",
    "rotation": "#8c6d31",
    "env-commit": "#17becf",
    "env-apply": "#0e7c86",
    "env-ack": "#bdbdbd",
    "error": "#d62728",
    "violation": "#d62728",
}

_CSS: Final = """
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 4px}
p.sub{margin:0 0 10px;color:#555}
svg{display:block}
svg text{font:11px system-ui,-apple-system,"DejaVu Sans",sans-serif;fill:#333}
svg text.run{font-weight:600;font-size:12px}
svg text.src{fill:#777}
svg text.lane{fill:#888;font-size:10px}
svg text.phase{font-size:10px;fill:#222}
svg text.tick{fill:#666;font-size:10px}
svg .grid{stroke:#eee}
svg .rowline{stroke:#ccc}
svg rect.gate{fill:#238b45}
svg text.gate{fill:#fff;font-size:10px;font-weight:600}
svg .mark{stroke:#fff;stroke-width:.8;cursor:pointer}
svg .mark.bad{stroke:#7f0000;stroke-width:1.2}
svg .mark:hover,svg .hl{stroke:#000;stroke-width:2}
#detail{position:fixed;right:12px;bottom:12px;max-width:720px;max-height:45vh;overflow:auto;
 background:#fffff5;border:1px solid #bbb;padding:8px;font:11px/1.3 ui-monospace,monospace;
 white-space:pre-wrap;word-break:break-all;display:none;box-shadow:0 2px 8px #0003}
.legend span{display:inline-block;margin:0 10px 4px 0}
.legend i{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px;
 border:1px solid #999}
"""

_SCRIPT: Final = """
(function(){
  var d=document.getElementById('detail');
  function show(e){var t=e.currentTarget.querySelector('title');
    if(!t)return;d.textContent=t.textContent;d.style.display='block';}
  var els=document.querySelectorAll('[data-step]');
  for(var i=0;i<els.length;i++){els[i].addEventListener('mouseenter',show);
    els[i].addEventListener('click',show);}
  var g=document.querySelectorAll('rect.gate, rect.phase');
  for(var j=0;j<g.length;j++){var b=g[j].getBBox();
    g[j].setAttribute('data-drawn-x',b.x.toFixed(1));
    g[j].setAttribute('data-drawn-width',b.width.toFixed(1));}
  document.documentElement.setAttribute('data-drawn',String(g.length));
})();
"""


def _tick_step(span_ms: int) -> int:
    target = max(span_ms / 10, 1)
    mag = 10 ** math.floor(math.log10(target))
    for m in (1, 2, 5, 10):
        if m * mag >= target:
            return int(m * mag)
    return int(10 * mag)  # pragma: no cover - the loop always returns


def _duration(ms: int) -> str:
    if abs(ms) < 1000:
        return f"{ms} ms"
    if abs(ms) < 120_000:
        return f"{ms / 1000:.1f} s"
    if abs(ms) < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _utc(ms: int) -> str:
    import datetime

    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _mark_shape(kind: str, x: float, y: float, cls: str, fill: str, attrs: str, title: str) -> str:
    r = 5.0
    if kind in ("grant", "renewal", "start"):
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}"'
    elif kind in ("floor", "stale", "close"):
        pts = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y + r:.1f} {x - r:.1f},{y + r:.1f}"
        shape = f'<polygon points="{pts}"'
    elif kind == "expiry":
        pts = f"{x - r:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x - r:.1f},{y + r:.1f}"
        shape = f'<polygon points="{pts}"'
    elif kind in ("error", "violation"):
        pts = (
            f"{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y:.1f} "
            f"{x:.1f},{y + r + 1:.1f} {x - r - 1:.1f},{y:.1f}"
        )
        shape = f'<polygon points="{pts}"'
    else:
        shape = (
            f'<rect x="{x - r + 1:.1f}" y="{y - r + 1:.1f}" '
            f'width="{2 * r - 2}" height="{2 * r - 2}"'
        )
    return (
        f'{shape} class="{cls}" fill="{fill}" '
        f"{attrs}><title>{title}</title></{shape.split()[0][1:]}>"
    )


def render_html(timeline: Timeline, *, title: str = "leasegate timeline") -> str:
    """The self-contained HTML page of ``timeline`` (inline SVG, CSS and script).

    Layout: a time axis (relative to the first step; ticks in ms, s or min),
    then per run a row: its phase bar, its gate open intervals, and five
    lanes of marks (:data:`LANES`). Each row is ``<g class="run">`` with
    ``data-source``, ``data-task``, ``data-run``; each gate interval is
    ``<rect class="gate">`` with ``data-start-ms``, ``data-end-ms``,
    ``data-start-step``, ``data-end-step``; each mark has ``data-kind``,
    ``data-step``, ``data-at-ms`` and a ``<title>`` holding its step as the
    trace records it (redacted). A lease expiry after the axis's end is drawn
    at its right edge. The script shows a hovered (or clicked) mark's step in
    a panel and records each bar's drawn box (``data-drawn-x``,
    ``data-drawn-width``) for tests.

    Args:
        timeline: from :func:`build_timeline`.
        title: the page's heading.

    Returns:
        The page as text (no network reference, no external script).
    """
    t0, t1 = timeline.start_ms, timeline.end_ms
    span = max(t1 - t0, 1)

    def x_of(ms: int) -> float:
        return _LEFT + (min(max(ms, t0), t1) - t0) * _PLOT / span

    def tip(source: str, step: int, head: str) -> str:
        info = timeline.steps.get((source, step))
        rel = f"+{_duration(info.at_ms - t0)}" if info else ""
        body = f"\n{info.text}" if info else ""
        line = f", line {info.line}" if info else ""
        return _e(f"{head}\n{source} step {step}{line} {rel}{body}")

    height = _TOP + _ROW * len(timeline.runs) + 30
    width = _LEFT + _PLOT + _RIGHT
    out: list[str] = []
    add = out.append
    add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
    )
    # axis
    tick = _tick_step(span)
    add(
        f'<line class="rowline" x1="{_LEFT}" y1="{_TOP - 24}" '
        f'x2="{_LEFT + _PLOT}" y2="{_TOP - 24}"/>'
    )
    k = 0
    while k * tick <= span:
        x = _LEFT + k * tick * _PLOT / span
        add(f'<line class="grid" x1="{x:.1f}" y1="{_TOP - 28}" x2="{x:.1f}" y2="{height - 20}"/>')
        add(
            f'<text class="tick" x="{x:.1f}" y="{_TOP - 32}" '
            f'text-anchor="middle">+{_e(_duration(k * tick))}</text>'
        )
        k += 1
    add(f'<text class="tick" x="{_LEFT + _PLOT + 6}" y="{_TOP - 32}">{_e(_duration(span))}</text>')
    for i, row in enumerate(timeline.runs):
        y0 = _TOP + i * _ROW
        add(
            f'<g class="run" data-source="{_e(row.source)}" data-task="{_e(row.task_id)}" '
            f'data-run="{row.run_epoch}" transform="translate(0 0)">'
        )
        add(f'<line class="rowline" x1="8" y1="{y0 - 4}" x2="{width - 8}" y2="{y0 - 4}"/>')
        add(
            f'<text class="run" x="10" y="{y0 + 14}">{_e(row.task_id)} · run {row.run_epoch}</text>'
        )
        add(f'<text class="src" x="10" y="{y0 + 28}">{_e(row.source)}</text>')
        yb = y0 + 2
        for p in row.phases:
            x1, x2 = x_of(p.start_ms), x_of(p.end_ms)
            w = max(x2 - x1, 1.0)
            head = f"{p.kind} for {_duration(p.end_ms - p.start_ms)}"
            add(
                f'<rect class="phase" data-phase="{p.kind}" data-start-ms="{p.start_ms}" '
                f'data-end-ms="{p.end_ms}" data-step="{p.start_step}" x="{x1:.1f}" y="{yb}" '
                f'width="{w:.1f}" height="{_BAR}" fill="{_PHASE_COLORS.get(p.kind, "#ccc")}">'
                f"<title>{tip(row.source, p.start_step, head)}</title></rect>"
            )
            if w > 7 * len(p.kind) + 6:
                add(f'<text class="phase" x="{x1 + 4:.1f}" y="{yb + 14}">{p.kind}</text>')
        yg = yb + _BAR + 4
        add(f'<text class="lane" x="{_LEFT - 8}" y="{yg + 10}" text-anchor="end">gate</text>')
        for g in row.gates:
            x1, x2 = x_of(g.start_ms), x_of(g.end_ms)
            w = max(x2 - x1, 1.0)
            end_step = "" if g.end_step is None else str(g.end_step)
            head = (
                f"gate open for {_duration(g.end_ms - g.start_ms)} "
                f"(steps {g.start_step}–{end_step or 'end'})"
            )
            add(
                f'<rect class="gate" data-start-ms="{g.start_ms}" data-end-ms="{g.end_ms}" '
                f'data-start-step="{g.start_step}" '
                f'data-end-step="{end_step}" data-step="{g.start_step}" '
                f'x="{x1:.1f}" y="{yg}" width="{w:.1f}" height="{_GATE}" rx="2">'
                f"<title>{tip(row.source, g.start_step, head)}</title></rect>"
            )
            if w > 60:
                add(f'<text class="gate" x="{x1 + 4:.1f}" y="{yg + 10}">gate open</text>')
        yl = yg + _GATE + 6
        for j, lane in enumerate(LANES):
            add(
                f'<text class="lane" x="{_LEFT - 8}" '
                f'y="{yl + j * _LANE + 10}" text-anchor="end">{lane}</text>'
            )
        last_expiry = next((m for m in reversed(row.marks) if m.kind == "expiry"), None)
        for m in row.marks:
            y = yl + LANES.index(MARK_KINDS.get(m.kind, "errors")) * _LANE + 6
            x = x_of(m.at_ms)
            beyond = m.at_ms > t1
            label = m.label + (
                f" (+{_duration(m.at_ms - t1)} after the trace's end)" if beyond else ""
            )
            cls = "mark bad" if m.bad else "mark"
            fill = _MARK_COLORS.get(m.kind, "#999")
            attrs = f'data-kind="{m.kind}" data-step="{m.step}" data-at-ms="{m.at_ms}"'
            add(
                _mark_shape(
                    m.kind,
                    x + (6 if beyond else 0),
                    y,
                    cls,
                    fill,
                    attrs,
                    tip(row.source, m.step, label),
                )
            )
            if beyond and m is last_expiry:
                add(
                    f'<text class="lane" x="{x + 14:.1f}" y="{y + 4}">expires '
                    f"+{_e(_duration(m.at_ms - t1))}</text>"
                )
        add("</g>")
    add("</svg>")
    svg = "\n".join(out)
    legend = (
        "".join(f'<span><i style="background:{c}"></i>{p}</span>' for p, c in _PHASE_COLORS.items())
        + '<span><i style="background:#238b45"></i>gate open</span>'
    )
    marks = "".join(
        f'<span><i style="background:{_MARK_COLORS[k]};border-radius:6px"></i>{k}</span>'
        for k in MARK_KINDS
    )
    sub = (
        f"{len(timeline.runs)} runs in {len(timeline.sources)} trace(s): "
        f"{_e(', '.join(timeline.sources))} · from {_e(_utc(t0))} for {_e(_duration(t1 - t0))}"
        + (
            f' · <b style="color:#d62728">{timeline.violations} monitor violation(s)</b>'
            if timeline.violations
            else ""
        )
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="sub">{sub}</p>'
        f'<div class="legend">{legend}</div><div class="legend">{marks}</div>'
        f'{svg}<div id="detail"></div><script>{_SCRIPT}</script></body></html>\n'
    )


def run(args: argparse.Namespace) -> int:
    """``leasegate timeline TRACE... [-o FILE.html] [--monitor]``.

    Args:
        args: ``trace`` (a list of paths), ``output`` (path or ``None``:
            the first trace's path plus ``.html``), ``monitor`` (bool).

    Returns:
        0 when the page was written (also with monitor violations: they are
        drawn), 1 for a malformed or unreadable trace or an unwritable
        output (one line on stderr, never a traceback).
    """
    paths = list(args.trace)
    out = args.output or f"{paths[0]}.html"
    try:
        tl = load_timeline(paths, monitor=bool(getattr(args, "monitor", False)))
    except TraceFormatError as e:
        print(f"leasegate timeline: malformed trace {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"leasegate timeline: cannot read a trace: {e.strerror}", file=sys.stderr)
        return 1
    page = render_html(tl, title=f"leasegate timeline — {', '.join(tl.sources)}")
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        print(f"leasegate timeline: cannot write {out}: {e.strerror}", file=sys.stderr)
        return 1
    extra = f", {tl.violations} monitor violation(s)" if tl.violations else ""
    print(f"timeline: {len(tl.runs)} runs, {len(tl.sources)} trace(s){extra} -> {out}")
    return 0
