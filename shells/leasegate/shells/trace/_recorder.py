"""The trace recorder: a :class:`~leasegate.shells._recording.CoreRecorder`
that writes every core step, redacted, as JSON lines."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import IO, Any

from leasegate.core._base import Command, Event
from leasegate.core.registry import Assignment, InstallRequest, TaskView
from leasegate.core.runtime import (
    CredentialUnavailable,
    EnginesPort,
    FilesPort,
    GitHold,
    McpPort,
    PersonPort,
)

from ._codec import make_converter
from ._config import RuntimeConfig
from ._format import FORMAT, VERSION, config_to_json
from ._redact import Redactor

__all__ = ["TraceRecorder"]

try:  # the monitor's secret-free stamp of the view a gate opened with
    from leasegate.core.monitor import ViewStamp

    _stamp: Any = ViewStamp.of
except ImportError:  # pragma: no cover - the monitor not installed
    _stamp = None


def _names(x: object) -> tuple[str | None, int | None]:
    task = getattr(x, "task_id", None)
    run = getattr(x, "run_epoch", None)
    return (task if type(task) is str else None, run if type(run) is int else None)


class _Calls:
    """The port calls of the current step, in the trace form."""

    def __init__(self, unstructure: Any) -> None:
        self.calls: list[dict[str, Any]] = []
        self.un = unstructure

    def call(
        self, port: str, method: str, subject: object, fn: Any, *args: Any, task: str | None = None
    ) -> Any:
        t, r = _names(subject)
        if task is not None:
            t, r = task, None
        rec: dict[str, Any] = {
            "port": port,
            "method": method,
            "task_id": t,
            "run_epoch": r,
            "raised": False,
            "unavailable": None,
            "result": None,
        }
        self.calls.append(rec)
        try:
            out = fn(*args)
        except BaseException as e:
            rec["raised"] = True
            if isinstance(e, CredentialUnavailable) and isinstance(e.message, str):
                rec["unavailable"] = e.message
            raise
        if method == "leased_run":
            rec["result"] = self.un(out) if isinstance(out, Assignment) else None
        elif method == "open" and _stamp is not None:
            rec["result"] = self.un(_stamp(args[1]))
        return out

    def take(self) -> list[dict[str, Any]]:
        out, self.calls = self.calls, []
        return out


class _GitRec:
    """A recorded ``GitHold``: ``release`` is a port call of the step that releases."""

    TRACE_NAME = "GitHold"

    def __init__(self, inner: GitHold, calls: _Calls, a: Assignment) -> None:
        self._inner = inner
        self._calls = calls
        self._a = a

    def release(self) -> None:
        self._calls.call("person", "git_release", self._a, self._inner.release)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PortRec:
    def __init__(self, name: str, inner: Any, calls: _Calls) -> None:
        self._name = name
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self._calls.call(self._name, "open", assignment, self._inner.open, assignment, view)

    def close(self, assignment: Assignment) -> None:
        self._calls.call(self._name, "close", assignment, self._inner.close, assignment)

    def forget(self, assignment: Assignment) -> None:
        self._calls.call(self._name, "forget", assignment, self._inner.forget, assignment)

    def install(self, request: InstallRequest) -> None:
        a = getattr(request, "assignment", None)
        self._calls.call(self._name, "install", a, self._inner.install, request)

    def leased_run(self, task_id: str) -> Assignment | None:
        out: Assignment | None = self._calls.call(
            self._name, "leased_run", None, self._inner.leased_run, task_id, task=task_id
        )
        return out

    def hold_git(self, assignment: Assignment) -> GitHold:
        g = self._calls.call(self._name, "hold_git", assignment, self._inner.hold_git, assignment)
        return _GitRec(g, self._calls, assignment)


class TraceRecorder:
    """Writes a trace: a header, one line per core step, an end line.

    Implements :class:`~leasegate.shells._recording.CoreRecorder`: pass it as
    a shell's ``recorder=``, and build the runtime with the ports returned by
    :meth:`wrap_ports` so that port calls are part of the trace. Format:
    ``docs/trace-format.md``.

    Every secret is redacted before anything is written (:mod:`._redact`):
    the file never holds a session key, token, parameter value, env value,
    header value or private key.

    Args:
        path_or_stream: a file path (created or truncated, closed by
            :meth:`close`) or a writable text stream (flushed, not closed).
        config: the runtime's construction, written to the header.
        monitor: an optional ``InvariantMonitor`` (``leasegate.core.monitor``)
            fed every step as it is recorded; its ``violations`` accumulate.

    Raises:
        OSError: the path cannot be opened.

    :meth:`record` never raises: a step that cannot be written marks the
    trace incomplete (its end line says ``"complete": false``; replay refuses
    it) and is counted in :attr:`failures`.

    Implements ``design/ARCHITECTURE.md`` "Traces, replay and the invariant
    monitor" (issue #7 item 3); catalog TR-001, TR-002, TR-007, TR-011
    (``docs/trace-format.md``).
    """

    def __init__(
        self,
        path_or_stream: str | os.PathLike[str] | IO[str],
        config: RuntimeConfig,
        *,
        monitor: Any = None,
    ) -> None:
        if isinstance(path_or_stream, (str, os.PathLike)):
            self._out: IO[str] = open(path_or_stream, "w", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._out = path_or_stream
            self._owned = False
        self.config = config
        self.monitor = monitor
        self.failures = 0
        self.monitor_failures = 0
        self.steps = 0
        self._redactor = Redactor()
        self._conv = make_converter(self._redactor.text)
        self._calls = _Calls(self._conv.unstructure)
        self._ports = False
        self._files = False
        self._header = False
        self._closed = False
        self._mlog: Any = None
        self._encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wrap_ports(
        self,
        *,
        engines: EnginesPort,
        mcp: McpPort,
        person: PersonPort,
        files: FilesPort | None = None,
    ) -> tuple[EnginesPort, McpPort, PersonPort, FilesPort | None]:
        """Wrap the four ports so their calls are recorded in the trace.

        Build the runtime with the returned ports (``config.build(engines=…,
        …)``). Each wrapper delegates every call and records the port, the
        method, the assignment it names, whether it raised (a
        :class:`~leasegate.core.runtime.CredentialUnavailable`'s fixed message
        is kept) and, for ``leased_run``, the assignment returned. A
        ``GitHold`` from ``hold_git`` is wrapped too (its ``release`` is
        recorded). Call before the first :meth:`record`.

        Returns:
            ``(engines, mcp, person, files)`` wrapped (``files`` stays ``None``).
        """
        if self.monitor is not None:
            try:
                from leasegate.core.monitor import PortLog, wrap_ports
            except ImportError:  # pragma: no cover - the monitor not installed
                pass
            else:
                self._mlog = PortLog()
                engines, mcp, person, files = wrap_ports(
                    engines=engines, mcp=mcp, person=person, files=files, log=self._mlog
                )
        self._ports = True
        self._files = files is not None
        out = (
            _PortRec("engines", engines, self._calls),
            _PortRec("mcp", mcp, self._calls),
            _PortRec("person", person, self._calls),
            None if files is None else _PortRec("files", files, self._calls),
        )
        return out

    def _write_header(self) -> None:
        if self._header:
            return
        self._header = True
        head = {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "config": config_to_json(self.config),
            "ports": self._ports,
            "files": self._files,
        }
        self._out.write(self._encode(head) + "\n")

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Write one core step (redacted). Never raises."""
        calls = self._calls.take()
        if self._closed:
            return
        try:
            self._write_header()
            written = event
            frame = getattr(event, "frame", None)
            if isinstance(frame, (dict, list, str)) and dataclasses.is_dataclass(event):
                # A str frame is handled by the core as the JSON value its text
                # parses to: that value is redacted like any frame and written
                # back as text the core reads as the redacted value (TR-002).
                # Text the core cannot parse could hold anything: a token of
                # its length (the core refuses both alike).
                red = self._redactor.text_frame(frame) if isinstance(frame, str) else None
                red = self._redactor.frame(frame) if red is None else red
                written = dataclasses.replace(event, frame=red)  # type: ignore[call-arg]
            line = {
                "type": "step",
                "n": self.steps + 1,
                "event": self._conv.unstructure(written),
                "calls": calls,
                "commands": [self._conv.unstructure(c) for c in commands],
            }
            text = self._redactor.scrub_line(line, self._encode(line))
            self._out.write(text + "\n")
            self.steps += 1
        except Exception:  # noqa: BLE001 - a recorder never breaks the shell
            self.failures += 1
        if self.monitor is not None:
            try:
                pcs = self._mlog.take() if self._mlog is not None else ()
                self.monitor.observe(event, list(commands), pcs)
            except Exception:  # noqa: BLE001 - the monitor's fault is not the trace's
                self.monitor_failures += 1

    def close(self) -> None:
        """Write the end line and flush (close the file if it was a path). Idempotent."""
        if self._closed:
            return
        try:
            self._write_header()
            end = {"type": "end", "steps": self.steps, "complete": self.failures == 0}
            self._out.write(self._encode(end) + "\n")
            self._out.flush()
        finally:
            self._closed = True
            if self._owned:
                self._out.close()
