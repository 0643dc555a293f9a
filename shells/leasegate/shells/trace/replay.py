"""Replay a trace through a fresh core and compare every command.

``leasegate replay TRACE [--monitor]`` (``shells/leasegate/shells/cli.py``)
calls :func:`run`. :func:`replay_trace` is the library form. On a terminal
stdout, a trace of :data:`PROGRESS_MIN_LINES` lines or more gets a rich
progress bar (transient); every replay ends with a one-line summary (steps,
tasks, violations, time).

Replay builds the runtime from the header's
:class:`~leasegate.shells.trace.RuntimeConfig` with **scripted ports**: each
port call the core makes is checked against the next call the trace recorded
for that step (port, method, task, run) and reproduces the recorded outcome
(it raises when the recorded call raised — a
:class:`~leasegate.core.runtime.CredentialUnavailable` with the recorded
message, or a generic error — and ``leased_run`` returns the recorded
assignment). Each step's event is fed to the core; the commands it returns are
put in the trace form (secrets are redaction tokens already, so no second
redaction changes them) and compared with the recorded ones, byte for byte
as JSON. The first difference — in commands or in port calls — is the
divergence: replay stops there and reports the step, its line, what was
expected, what the core did, and the events before it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from leasegate.core._base import Event
from leasegate.core.registry import Assignment, InstallRequest, TaskView
from leasegate.core.runtime import CredentialUnavailable, GitHold

from .._extras import missing_modules
from ._codec import TraceValueError, make_converter, unknown_tags
from ._fast import CommandMatcher, EventDecoder, TraceText
from ._format import RecordedCall, ReplayStep, TraceFormatError, read_replay

__all__ = ["Divergence", "ReplayResult", "replay_trace", "run"]

try:  # the monitor's secret-free stamp of the view a gate opened with
    from leasegate.core.monitor import ViewStamp

    _stamp: Any = ViewStamp.of
except ImportError:  # pragma: no cover - the monitor not installed
    _stamp = None

#: The smallest trace (in lines) ``leasegate replay`` shows a progress bar for.
PROGRESS_MIN_LINES: Final = 2000
#: How many events before a divergence its report shows.
CONTEXT_EVENTS: Final = 5
_SHOW: Final = 600


_dumps: Final = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, check_circular=False
).encode


def _short(v: Any) -> str:
    text = _dumps(v)
    return text if len(text) <= _SHOW else text[:_SHOW] + f"... ({len(text)} characters)"


@dataclasses.dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first differed from its trace.

    Attributes:
        step: the step number (1-based).
        line: the trace line of that step.
        what: one sentence: what differed.
        expected: the recorded value (trace form, JSON text, shortened).
        got: what the fresh core did (same form).
        before: the events of the preceding steps (at most
            :data:`CONTEXT_EVENTS`), as ``(step, JSON text)``.
    """

    step: int
    line: int
    what: str
    expected: str
    got: str
    before: tuple[tuple[int, str], ...]

    def report(self) -> str:
        """A multi-line human report (no secret: the trace holds none)."""
        out = [
            f"divergence at step {self.step} (line {self.line}): {self.what}",
            f"  expected: {self.expected}",
            f"  got:      {self.got}",
        ]
        if self.before:
            out.append("  events before it:")
            out.extend(f"    step {n}: {ev}" for n, ev in self.before)
        return "\n".join(out)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of :func:`replay_trace`.

    Attributes:
        ok: every step matched (and, with the monitor, no violation).
        divergence: the first divergence, or ``None``.
        violations: the monitor's violations (empty without the monitor).
        events: how many steps were replayed (up to and including a
            diverging one).
        tasks: how many distinct task ids those steps' events named.
    """

    ok: bool
    divergence: Divergence | None
    violations: tuple[Any, ...]
    events: int
    tasks: int = 0


class _Diverged(BaseException):
    """Raised by a scripted port through the core (which only catches Exception)."""


class _PortFailedError(Exception):
    """The recorded port call raised something other than CredentialUnavailable."""


def _names(x: object) -> tuple[str | None, int | None]:
    if type(x) is Assignment:
        task: Any = x.task_id
        run: Any = x.run_epoch
        return (task if type(task) is str else None, run if type(run) is int else None)
    task = getattr(x, "task_id", None)
    run = getattr(x, "run_epoch", None)
    return (task if type(task) is str else None, run if type(run) is int else None)


class _Script:
    def __init__(self, conv: Any, scripted: bool) -> None:
        self.conv = conv
        self.matcher = CommandMatcher()
        self.scripted = scripted
        self.step: ReplayStep | None = None
        self.calls: list[RecordedCall] = []
        self.i = 0
        self.problem: tuple[str, Any, Any] | None = None

    def load(self, step: ReplayStep) -> None:
        self.step = step
        self.calls = step.calls
        self.i = 0
        self.problem = None

    def recorded(self, i: int) -> Any:
        """Port call ``i`` of the current step as the line writes it."""
        assert self.step is not None
        return self.step.parsed()["calls"][i]

    def next(
        self, port: str, method: str, subject: object, task: str | None = None
    ) -> RecordedCall | None:
        if not self.scripted:
            return None
        if task is not None:
            t: str | None = task
            r: int | None = None
        else:
            t, r = _names(subject)
        i = self.i
        if i >= len(self.calls):
            made = {"port": port, "method": method, "task_id": t, "run_epoch": r}
            self.problem = ("the core made a port call the trace does not record", None, made)
            raise _Diverged
        c = self.calls[i]
        self.i = i + 1
        # (the tuples' comparison, item by item)
        if c.port != port or c.method != method or c.task_id != t or c.run_epoch != r:
            made = {"port": port, "method": method, "task_id": t, "run_epoch": r}
            self.problem = (
                "the core made another port call than the trace records",
                self.recorded(i),
                made,
            )
            raise _Diverged
        if c.raised:
            if c.unavailable is not None:
                raise CredentialUnavailable(c.unavailable)
            raise _PortFailedError("a recorded port failure")
        return c


class _ReplayGit:
    TRACE_NAME = "GitHold"

    def __init__(self, script: _Script, a: Assignment) -> None:
        self._s = script
        self._a = a

    def release(self) -> None:
        self._s.next("person", "git_release", self._a)


class _ReplayPort:
    def __init__(self, name: str, script: _Script) -> None:
        self._name = name
        self._s = script

    def open(self, assignment: Assignment, view: TaskView) -> None:
        c = self._s.next(self._name, "open", assignment)
        if c is not None and c.result is not None and _stamp is not None:
            stamp = _stamp(view)
            if self._s.matcher.matches(stamp, c.result):
                return
            got = self._s.conv.unstructure(stamp)
            if got != c.result:
                self._s.problem = (
                    "the core opened a gate with another view than the trace records",
                    c.result,
                    got,
                )
                raise _Diverged

    def close(self, assignment: Assignment) -> None:
        self._s.next(self._name, "close", assignment)

    def forget(self, assignment: Assignment) -> None:
        self._s.next(self._name, "forget", assignment)

    def install(self, request: InstallRequest) -> None:
        self._s.next(self._name, "install", getattr(request, "assignment", None))

    def leased_run(self, task_id: str) -> Assignment | None:
        c = self._s.next(self._name, "leased_run", None, task=task_id)
        if c is None or c.result is None:
            return None
        try:
            got = self._s.conv.structure(c.result, Assignment)
        except TraceValueError:
            self._s.problem = (
                "the recorded leased_run result is not an assignment",
                self._s.recorded(self._s.i - 1),
                None,
            )
            raise _Diverged from None
        return got  # type: ignore[no-any-return]

    def hold_git(self, assignment: Assignment) -> GitHold:
        self._s.next(self._name, "hold_git", assignment)
        return _ReplayGit(self._s, assignment)


def _event_tasks(event: Any, into: dict[str, None]) -> None:
    """Add the task ids an event (trace form) names: its ``task_id``, a frame's
    ``taskId``, a recovery's owed rows."""
    if not isinstance(event, dict):
        return
    task = event.get("task_id")
    if type(task) is str and task not in into:
        into[task] = None
    if "frame" not in event and "owed" not in event:
        return  # most events: nothing more to look at
    frame = event.get("frame")
    if isinstance(frame, dict) and type(frame.get("taskId")) is str:
        into.setdefault(frame["taskId"], None)
    for row in event.get("owed") or ():
        if isinstance(row, dict) and type(row.get("task_id")) is str:
            into.setdefault(row["task_id"], None)


_LOCAL: Final = threading.local()
#: What a recorder-written step line holds before its commands' text.
_TAIL: Final = ',"commands":'
_TAIL_AT: Final = len(_TAIL)


def _ends_with_commands(raw: str, text: str) -> bool:
    """``raw.endswith(',"commands":' + text + "}\n")``, tested in place
    (no copy of the line's tail)."""
    at = len(raw) - 2 - len(text)
    return (
        at >= _TAIL_AT
        and raw.startswith(text, at)
        and raw.startswith(_TAIL, at - _TAIL_AT)
        and raw.endswith("}\n")
    )


def _tools() -> tuple[Any, EventDecoder, TraceText]:
    """Replay's converter, event decoder and command writer: built once per
    thread (their hooks are generated per type on first use and kept; the
    writer's kept texts are one replay's at a time)."""
    tools: tuple[Any, EventDecoder, TraceText] | None = getattr(_LOCAL, "tools", None)
    if tools is None:
        conv = make_converter(None)
        tools = _LOCAL.tools = (conv, EventDecoder(conv), TraceText(conv))
    return tools


def _replay(
    steps: Iterator[ReplayStep],
    header: Any,
    monitor: bool,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    conv, decoder, writer = _tools()
    decode = decoder.decode
    texts = writer.texts
    script = _Script(conv, header.ports)
    engines: Any = _ReplayPort("engines", script)
    mcp: Any = _ReplayPort("mcp", script)
    person: Any = _ReplayPort("person", script)
    files: Any = _ReplayPort("files", script) if header.files else None
    mon: Any = None
    mlog: Any = None
    if monitor:
        try:
            from leasegate.core.monitor import InvariantMonitor, PortLog, wrap_ports
        except ImportError:
            raise TraceFormatError(
                "line 1: the invariant monitor (leasegate.core.monitor) is not available"
            ) from None
        mon = InvariantMonitor()
        mlog = PortLog()
        engines, mcp, person, files = wrap_ports(
            engines=engines, mcp=mcp, person=person, files=files, log=mlog
        )
    try:
        rt = header.config.build(engines=engines, mcp=mcp, person=person, files=files)
    except ValueError:
        raise TraceFormatError("line 1: the header's config cannot build a runtime") from None
    handle = rt.handle
    scripted = script.scripted
    # the steps before the current one (their events are shown by a divergence)
    before: collections.deque[ReplayStep] = collections.deque(maxlen=CONTEXT_EVENTS)
    remember = before.append
    count = 0
    tasks: dict[str, None] = {}
    for step in steps:
        count += 1
        raw = step.raw
        if progress is not None:
            progress(len(raw))
        ev = step.event
        _event_tasks(ev, tasks)
        try:
            event = decode(ev)
        except TraceValueError as e:
            raise TraceFormatError(f"line {step.line}: event: {e}") from None
        except RecursionError:
            raise TraceFormatError(f"line {step.line}: event: nested too deeply") from None
        if not isinstance(event, Event):
            raise TraceFormatError(f"line {step.line}: the event is not an event type")
        script.load(step)
        calls = step.calls
        div: tuple[str, Any, Any] | None = None
        try:
            commands = handle(event)
        except _Diverged:
            commands = []
            div = script.problem or ("a port call diverged", None, None)
        if div is None and scripted and script.i < len(calls):
            div = (
                "the trace records a port call the core did not make",
                script.recorded(script.i),
                None,
            )
        if div is None:
            # The commands' text (exactly json of their trace form): the line
            # as the recorder wrote it ends with ``,"commands":`` + it + ``}``
            # and a newline (tested in place: no copy of the line's tail);
            # otherwise (a line written by other means) compare the parsed
            # commands re-encoded.
            text = texts(commands)
            if not _ends_with_commands(raw, text):
                recorded = step.parsed()
                if text != _dumps(recorded["commands"]):
                    bad = unknown_tags(recorded["commands"]) or unknown_tags(recorded["calls"])
                    if bad is not None:
                        raise TraceFormatError(f"line {step.line}: unknown type tag {bad!r}")
                    got = [conv.unstructure(c) for c in commands]
                    div = _first_difference(recorded["commands"], got)
        if div is not None:
            d = Divergence(
                step=step.n,
                line=step.line,
                what=div[0],
                expected=_short(div[1]),
                got=_short(div[2]),
                before=tuple((s.n, _short(s.event)) for s in before),
            )
            return ReplayResult(False, d, tuple(mon.violations) if mon else (), count, len(tasks))
        if mon is not None:
            mon.observe(event, commands, mlog.take())
        remember(step)
    violations = tuple(mon.violations) if mon is not None else ()
    return ReplayResult(not violations, None, violations, count, len(tasks))


def _first_difference(expected: list[Any], got: list[Any]) -> tuple[str, Any, Any]:
    for i in range(max(len(expected), len(got))):
        e = expected[i] if i < len(expected) else None
        g = got[i] if i < len(got) else None
        if i >= len(expected):
            return (f"the core emitted an extra command #{i + 1}", None, g)
        if i >= len(got):
            return (f"the core did not emit command #{i + 1}", e, None)
        if _dumps(e) != _dumps(g):
            return (f"command #{i + 1} differs", e, g)
    return ("the commands differ", expected, got)  # pragma: no cover - dumps differ somewhere


def replay_trace(
    path: str, *, monitor: bool = False, progress: Callable[[int], None] | None = None
) -> ReplayResult:
    """Replay the trace at ``path`` through a fresh core.

    Args:
        path: the trace file.
        monitor: also run ``leasegate.core.monitor.InvariantMonitor`` over
            the replayed steps (a violation makes the result not ``ok``).
        progress: called before each step with the size of its line, in
            characters (a progress bar's advance); ``None``: not called.

    Returns:
        A :class:`ReplayResult`: ``ok`` when every step matched.

    Implements ``design/ARCHITECTURE.md`` "Traces, replay and the invariant
    monitor" (issue #7 item 4); catalog TR-001, TR-005–TR-007, TR-009,
    TR-012 (``docs/trace-format.md``).

    Raises:
        TraceFormatError: the trace is malformed (one line: ``"line N: ..."``).
        OSError: the file cannot be read.
    """
    writer = _tools()[2]
    writer.forget()
    try:
        with open(path, encoding="utf-8", newline="\n") as f:
            header, steps = read_replay(f)
            return _replay(steps, header, monitor, progress)
    finally:
        writer.forget()


def _count_lines(path: str) -> int:
    """The number of lines of the file at ``path`` (read in 1 MiB chunks)."""
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


@contextlib.contextmanager
def _progress_bar(path: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar over ``path``'s size, on a terminal stdout, for a trace of
    at least :data:`PROGRESS_MIN_LINES` lines; else ``None`` (no bar, no cost
    beyond a ``isatty``). Without rich (the ``demo`` extra) there is no bar."""
    try:
        on_terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):
        on_terminal = False
    if not on_terminal or missing_modules(["rich"]) or _count_lines(path) < PROGRESS_MIN_LINES:
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    total = os.path.getsize(path)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("replaying", total=total)
        pending = 0

        def advance(chars: int) -> None:
            nonlocal pending
            pending += chars
            if pending >= total // 200 + 1:  # at most ~200 redraw requests
                bar.advance(task, pending)
                pending = 0

        yield advance


def _summary(result: ReplayResult, elapsed_s: float) -> str:
    """The one-line summary printed at the end of every replay."""
    return (
        f"summary: {result.events} steps, {result.tasks} task(s), "
        f"{len(result.violations)} violation(s), {elapsed_s:.2f}s"
    )


def run(args: argparse.Namespace) -> int:
    """``leasegate replay TRACE [--monitor]``.

    Args:
        args: ``args.trace`` (path), ``args.monitor`` (bool).

    Returns:
        0 when the replay matches (and the monitor is clean), 1 on a
        divergence, a violation, a malformed or unreadable trace (the CLI
        checks readability first and answers exit 2). Never raises but
        ``KeyboardInterrupt`` (the CLI turns it into exit 130): every failure
        is reported on stderr as one line (a divergence as its multi-line
        report on stdout).
    """
    started = time.monotonic()
    try:
        with _progress_bar(args.trace) as progress:
            result = replay_trace(
                args.trace, monitor=bool(getattr(args, "monitor", False)), progress=progress
            )
    except TraceFormatError as e:
        print(f"leasegate replay: malformed trace {args.trace}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"leasegate replay: cannot read {args.trace}: {e.strerror}", file=sys.stderr)
        return 1
    except BaseException as e:  # never a traceback (an interrupt is re-raised)
        if isinstance(e, KeyboardInterrupt):
            raise  # the CLI answers an interrupt: "interrupted", exit 130
        print(f"leasegate replay: internal error ({type(e).__name__})", file=sys.stderr)
        return 1
    summary = _summary(result, time.monotonic() - started)
    if result.divergence is not None:
        print(result.divergence.report())
        print(summary)
        return 1
    if result.violations:
        print(f"replay matched {result.events} steps, but the monitor found violations:")
        for v in result.violations:
            print(f"  step {v.step}: {v.property}: {v.message}")
        print(summary)
        return 1
    extra = " (monitor clean)" if getattr(args, "monitor", False) else ""
    print(f"replay matched: {result.events} steps{extra}")
    print(summary)
    return 0
