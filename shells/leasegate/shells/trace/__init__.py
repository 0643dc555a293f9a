"""Traces: every core step as redacted JSON lines, and their replay.

* :class:`RuntimeConfig` — the runtime's construction (the trace header).
* :class:`TraceRecorder` — a :class:`~leasegate.shells._recording.CoreRecorder`
  writing a trace; :meth:`TraceRecorder.wrap_ports` records port calls.
* :func:`replay_trace` — feed a trace to a fresh core and compare every
  command; :mod:`leasegate.shells.trace.replay` serves ``leasegate replay``.
* :func:`read_trace`, :func:`schema` — the validating reader and the JSON Schema.
* :func:`make_converter` — the cattrs converter of every core event/command.

Format, redaction and replay semantics: ``docs/trace-format.md``.
"""

from __future__ import annotations

from ._codec import TYPES, TraceValueError, make_converter, tag_of
from ._config import RuntimeConfig
from ._format import FORMAT, VERSION, Header, StepLine, TraceFormatError, read_trace, schema
from ._recorder import TraceRecorder
from ._redact import Redactor
from .replay import Divergence, ReplayResult, replay_trace

__all__ = [
    "FORMAT",
    "TYPES",
    "VERSION",
    "Divergence",
    "Header",
    "Redactor",
    "ReplayResult",
    "RuntimeConfig",
    "StepLine",
    "TraceFormatError",
    "TraceRecorder",
    "TraceValueError",
    "make_converter",
    "read_trace",
    "replay_trace",
    "schema",
    "tag_of",
]
