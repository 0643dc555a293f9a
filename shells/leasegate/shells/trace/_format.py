"""The trace file format: JSON lines, a header, steps and an end line.

Specified in ``docs/trace-format.md``; the JSON Schema is
``trace-schema.json`` next to this module (:func:`schema`).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from importlib import resources
from typing import IO, Any, Final, Literal

import cattrs
import msgspec

from ._codec import unknown_tags
from ._config import RuntimeConfig
from ._fast import loads

__all__ = [
    "FORMAT",
    "VERSION",
    "Header",
    "RecordedCall",
    "ReplayStep",
    "StepLine",
    "TraceFormatError",
    "read_replay",
    "read_trace",
    "schema",
]

#: The ``format`` field of every header.
FORMAT: Final = "leasegate-trace"
#: The format version this code writes and reads.
VERSION: Final = 1

_CONFIG = cattrs.Converter(forbid_extra_keys=True)


class TraceFormatError(Exception):
    """A malformed trace: one line of text naming the line number and the fault.

    The message never quotes the line (it is already redacted, but it may be
    huge or binary garbage).
    """


@dataclasses.dataclass(frozen=True, slots=True)
class Header:
    """The first line: the core's construction.

    Attributes:
        config: how to build the runtime again.
        ports: whether the consumer ports' calls were recorded.
        files: whether a Files port was configured.
    """

    config: RuntimeConfig
    ports: bool
    files: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StepLine:
    """One core step as read from the file (trace form, not yet structured).

    Attributes:
        line: its 1-based line number.
        n: its step number (1-based, consecutive).
        event: the event (trace form: a tagged object).
        calls: the port calls made during the step, in order.
        commands: the commands the core returned (trace form).
        raw: the line's text (replay compares its tail first: cheap).
    """

    line: int
    n: int
    event: dict[str, Any]
    calls: list[dict[str, Any]]
    commands: list[Any]
    raw: str = ""


def schema() -> dict[str, Any]:
    """The trace JSON Schema (``trace-schema.json``) as a dict."""
    text = resources.files(__package__).joinpath("trace-schema.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def config_to_json(config: RuntimeConfig) -> dict[str, Any]:
    """The header's ``config`` object."""
    out: dict[str, Any] = _CONFIG.unstructure(config)
    if out.get("policy_epochs") is not None:
        out["policy_epochs"] = list(out["policy_epochs"])
    return out


_CALL_KEYS: Final = frozenset(
    ("port", "method", "task_id", "run_epoch", "raised", "unavailable", "result")
)
PortName = Literal["engines", "mcp", "person", "files"]
MethodName = Literal["open", "close", "forget", "install", "hold_git", "leased_run", "git_release"]
_PORTS: Final = frozenset(typing.get_args(PortName))
_METHODS: Final = frozenset(typing.get_args(MethodName))


class RecordedCall(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One recorded port call of a step, as replay reads it (the keys of
    :func:`_check_call`: all required, no other; the same types)."""

    port: PortName
    method: MethodName
    task_id: str | None
    run_epoch: int | None
    raised: bool
    unavailable: str | None
    result: Any


class _StepForm(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    # A step line as msgspec checks it: what _parse_step checks of the keys
    # and the calls; the commands an array, each left as its text (replay
    # compares the text of all of them).
    type: Literal["step"]
    n: int
    event: Any
    calls: list[RecordedCall]
    commands: list[msgspec.Raw]


_decode_step: Final = msgspec.json.Decoder(_StepForm).decode


class ReplayStep(msgspec.Struct, gc=False):
    """One step as replay reads it: the event parsed, the port calls checked,
    the commands left as text until they are needed.

    A struct the cyclic collector does not track (built in C, one per line;
    what it holds came from one JSON line: no reference cycle).

    Attributes:
        line: its 1-based line number.
        n: its step number.
        event: the event (trace form: a tagged object).
        calls: the port calls, in order.
        raw: the line's text (ending with ``,"commands":<commands>}`` and a
            newline when the recorder wrote it).
    """

    line: int
    n: int
    event: dict[str, Any]
    calls: list[RecordedCall]
    raw: str
    _parsed: dict[str, Any] | None = None

    def parsed(self) -> dict[str, Any]:
        """The whole line as :func:`read_trace` parses it (what a divergence
        reports: the recorded commands and port calls as written)."""
        if self._parsed is None:
            self._parsed = loads(self.raw)
        return self._parsed


def _check_call(c: Any) -> str | None:
    if type(c) is not dict or c.keys() != _CALL_KEYS:
        return "a port call must have exactly the keys " + ", ".join(sorted(_CALL_KEYS))
    if (
        type(c["port"]) is not str
        or type(c["method"]) is not str
        or c["port"] not in _PORTS
        or c["method"] not in _METHODS
    ):
        return "a port call names an unknown port or method"
    if c["task_id"] is not None and type(c["task_id"]) is not str:
        return "a port call's task_id is not a string"
    if c["run_epoch"] is not None and type(c["run_epoch"]) is not int:
        return "a port call's run_epoch is not an integer"
    if type(c["raised"]) is not bool:
        return "a port call's raised is not a boolean"
    if c["unavailable"] is not None and type(c["unavailable"]) is not str:
        return "a port call's unavailable is not a string"
    return None


_OPT_INT: Final = (int, type(None))
#: The exact JSON types of each config key (strict: cattrs alone would coerce).
_CONFIG_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "runner_kind": (str,),
    "op_id_seed": (str,),
    "replica": (bool,),
    "boot_id": (str, type(None)),
    "policy_epochs": (list, type(None)),
    "max_task_entries": _OPT_INT,
    "max_task_bytes": _OPT_INT,
    "max_total_entries": _OPT_INT,
    "max_total_bytes": _OPT_INT,
    "launch_deadline_ms": _OPT_INT,
    "env_ready_timeout_ms": _OPT_INT,
    "shutdown_drain_ms": _OPT_INT,
    "recovery_retry_base_ms": _OPT_INT,
}


def _parse_header(obj: Any) -> Header:
    if type(obj) is not dict or obj.get("type") != "header":
        raise ValueError("the first line is not a trace header")
    if obj.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    v = obj.get("version")
    if type(v) is not int:
        raise ValueError("the header has no integer version")
    if v != VERSION:
        raise ValueError(f"unsupported trace version {v} (this leasegate reads {VERSION})")
    if obj.keys() != {"type", "format", "version", "config", "ports", "files"}:
        raise ValueError("the header must have exactly type, format, version, config, ports, files")
    if type(obj["ports"]) is not bool or type(obj["files"]) is not bool:
        raise ValueError("the header's ports and files must be booleans")
    cfg = obj["config"]
    if type(cfg) is not dict:
        raise ValueError("the header's config is not an object")
    for key, value in cfg.items():
        want = _CONFIG_TYPES.get(key)
        if want is None:
            raise ValueError("the header's config has an unknown key")
        if type(value) not in want:
            raise ValueError(f"the header's config.{key} has the wrong type")
        if key == "policy_epochs" and value is not None and any(type(x) is not int for x in value):
            raise ValueError("the header's config.policy_epochs must hold integers")
    try:
        config = _CONFIG.structure(cfg, RuntimeConfig)
    except Exception:  # noqa: BLE001 - cattrs' own errors are multi-line
        raise ValueError("the header's config is malformed") from None
    for name in ("runner_kind", "op_id_seed", "boot_id"):
        got = getattr(config, name)
        if got is not None and type(got) is not str:
            raise ValueError(f"the header's config.{name} is not a string")
    if config.runner_kind not in ("owned", "task-machine"):
        raise ValueError("the header's config.runner_kind is unknown")
    if config.replica and config.boot_id is None:
        raise ValueError("the header's config has a replica without a boot_id")
    return Header(config=config, ports=obj["ports"], files=obj["files"])


def _parse_step(obj: Any, line: int, want: int, check_tags: bool, raw: str) -> StepLine:
    if obj.keys() != {"type", "n", "event", "calls", "commands"}:
        raise ValueError("a step must have exactly type, n, event, calls, commands")
    if obj["n"] != want or type(obj["n"]) is not int:
        raise ValueError(f"the step number is not {want} (steps count 1, 2, ...)")
    ev = obj["event"]
    if type(ev) is not dict or type(ev.get("$t")) is not str:
        raise ValueError("the step's event is not a tagged object")
    if type(obj["calls"]) is not list or type(obj["commands"]) is not list:
        raise ValueError("the step's calls and commands must be arrays")
    for c in obj["calls"]:
        bad = _check_call(c)
        if bad is not None:
            raise ValueError(bad)
    if check_tags:
        bad_tag = unknown_tags(ev) or unknown_tags(obj["commands"]) or unknown_tags(obj["calls"])
        if bad_tag is not None:
            raise ValueError(f"unknown type tag {bad_tag!r}")
    return StepLine(line, want, ev, obj["calls"], obj["commands"], raw)


def read_trace(stream: IO[str], *, check_tags: bool = True) -> tuple[Header, Iterator[StepLine]]:
    """Read and validate a trace, lazily.

    Args:
        stream: the trace text (one JSON object per line).
        check_tags: walk every event, command and port call for type tags
            that name no type (replay passes ``False``: it finds an unknown
            tag when it structures the event or when a command differs).

    Returns:
        The header (read at once) and an iterator of the steps; the iterator
        checks the end line when it reaches it.

    Raises:
        TraceFormatError: (from this call or from the iterator) the first
            malformed line: ``"line N: <reason>"``, one line of text. Reasons:
            not JSON, not an object, wrong format or version, unknown
            ``type``, a step out of order, an unknown type tag, a missing or
            extra field, text after the end line, no end line (truncated).

    Catalog TR-006, TR-008 (``docs/trace-format.md``).
    """
    header, steps = _read(stream, check_tags, quick=False)
    return header, steps


def read_replay(stream: IO[str]) -> tuple[Header, Iterator[ReplayStep]]:
    """:func:`read_trace` (``check_tags=False``) for replay: the same checks,
    the same errors, the steps as :class:`ReplayStep` (commands unparsed).

    Catalog TR-006, TR-008 (``docs/trace-format.md``).

    Raises:
        TraceFormatError: as :func:`read_trace`.
    """
    header, steps = _read(stream, False, quick=True)
    return header, steps


def _read(stream: IO[str], check_tags: bool, *, quick: bool) -> tuple[Header, Iterator[Any]]:
    it = iter(stream)

    def parse(text: str, n: int) -> Any:
        if not text.endswith("\n"):
            raise TraceFormatError(f"line {n}: the line is cut off (truncated file)")
        try:
            return loads(text)
        except (ValueError, RecursionError):
            raise TraceFormatError(f"line {n}: not valid JSON") from None

    try:
        first = next(it)
    except StopIteration:
        raise TraceFormatError("line 1: the trace is empty") from None
    except UnicodeDecodeError:
        raise TraceFormatError("line 1: not UTF-8 text") from None
    try:
        header = _parse_header(parse(first, 1))
    except ValueError as e:
        raise TraceFormatError(f"line 1: {e}") from None

    def steps() -> Iterator[Any]:
        decode_step = _decode_step
        n = 1
        want = 1
        ended = False
        while True:
            try:
                text = next(it)
            except StopIteration:
                break
            except UnicodeDecodeError:
                raise TraceFormatError(f"line {n + 1}: not UTF-8 text") from None
            n += 1
            if ended:
                raise TraceFormatError(f"line {n}: text after the end line")
            if quick and text[-1:] == "\n":
                # The step read the quick way, when msgspec's typed decoding
                # plainly accepts it (else the full reader below reads it: an
                # end line, a malformed line, a text msgspec refuses). The
                # full reader (_parse_step over loads) returns the same step
                # for it: msgspec's checks of the keys and calls are those of
                # _check_call (a duplicated key keeping its last value, like
                # json.loads), and what it leaves to Python (the step number,
                # the event's tag) is checked here. The commands are not
                # parsed; replay compares their text, falling back to
                # ReplayStep.parsed.
                try:
                    form = decode_step(text)
                except (msgspec.DecodeError, RecursionError):
                    form = None
                if form is not None:
                    ev = form.event
                    if form.n == want and type(ev) is dict and type(ev.get("$t")) is str:
                        yield ReplayStep(n, want, ev, form.calls, text)
                        want += 1
                        continue
            obj = parse(text, n)
            kind = obj.get("type") if type(obj) is dict else None
            try:
                if kind == "step":
                    s = _parse_step(obj, n, want, check_tags, text)
                    if quick:
                        calls = [RecordedCall(**c) for c in s.calls]
                        yield ReplayStep(n, want, s.event, calls, text, obj)
                    else:
                        yield s
                    want += 1
                elif kind == "end":
                    if obj.keys() != {"type", "steps", "complete"}:
                        raise ValueError("the end line must have exactly type, steps, complete")
                    if obj["steps"] != want - 1 or type(obj["steps"]) is not int:
                        raise ValueError("the end line's step count does not match")
                    if obj["complete"] is not True:
                        raise ValueError("the recorder could not write every step")
                    ended = True
                else:
                    raise ValueError("not a step or end line")
            except ValueError as e:
                raise TraceFormatError(f"line {n}: {e}") from None
        if not ended:
            raise TraceFormatError(f"line {n + 1}: the trace has no end line (truncated file)")

    return header, steps()
