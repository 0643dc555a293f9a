"""Replay's fast paths against the full paths they stand in for (catalog TR-001,
TR-005, TR-010; ``shells/leasegate/shells/trace/_fast.py``).

Differential: over the recorded traces (the whole-runner scenario, the rich
trace, a benchmark-shaped run) and over mutated copies of their lines,

* :func:`_fast.loads` gives exactly what ``json.loads`` gives, or both refuse;
* :class:`_fast.EventDecoder` gives an event equal to the cattrs converter's,
  or raises the same error type with the same message;
* :class:`_fast.TraceText` writes exactly the JSON text of the converter's
  trace form (over the replayed commands and over values of every type, kept
  texts included);
* :class:`_fast.CommandMatcher` says "equal" only where the JSON texts of the
  commands' trace form are equal (and it says so for every recorded step);
* :func:`_format.read_replay` yields the steps :func:`read_trace` yields, or
  fails with the same error, over the recorded traces and mutated lines.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import pathlib
import random
import types
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from test_trace_replay import _mutate, _rich, _scenario
from trace_kit import RecordingDriver

from leasegate.core import Secret
from leasegate.shells.trace import (
    TraceFormatError,
    TraceValueError,
    _fast,
    make_converter,
    read_trace,
    replay_trace,
)
from leasegate.shells.trace._format import ReplayStep, read_replay

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False).encode


@pytest.fixture
def traces(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    RecordingDriver.directory = tmp_path
    RecordingDriver.paths.clear()
    yield tmp_path
    RecordingDriver.paths.clear()
    RecordingDriver.directory = None


def _same(a: Any, b: Any) -> bool:
    """Equal in every type, value and key order (what makes two JSON values one):
    the reprs of JSON values tell ``1``, ``1.0`` and ``True`` and key orders apart."""
    return repr(a) == repr(b)


def _all_traces(traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> list[pathlib.Path]:
    out = [d.path for d in _scenario(monkeypatch)]
    out.append(_rich(traces / "rich.jsonl").path)
    d = RecordingDriver(path=traces / "small.jsonl")
    from runtime_kit import TASK

    d.hold(d.usable(TASK, 1))
    d.close()
    d.close_trace()
    out.append(d.path)
    # whole task lives as the replay benchmark records them (ports wrapped)
    bench = pathlib.Path(__file__).resolve().parents[3] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import bench_replay

    bench_replay.record(traces / "lives.jsonl", 300)
    out.append(traces / "lives.jsonl")
    return out


def _full_loads(text: str) -> Any:
    return json.loads(text, parse_constant=_fast._bad_constant)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except (ValueError, RecursionError, TraceValueError) as e:
        return (type(e).__name__, str(e))


def _check_loads(text: str) -> None:
    fast = _outcome(_fast.loads, text)
    full = _outcome(_full_loads, text)
    assert fast[0] == full[0], text[:200]
    if fast[0] == "ok":
        assert _same(fast[1], full[1]), text[:200]


def _check_event(decoder: _fast.EventDecoder, conv: Any, value: Any) -> None:
    fast = _outcome(decoder.decode, value)
    full = _outcome(conv.structure, value, object)
    assert fast[0] == full[0]
    if fast[0] == "ok":
        assert fast[1] == full[1]
        assert type(fast[1]) is type(full[1])
        assert _dumps(conv.unstructure(fast[1])) == _dumps(conv.unstructure(full[1]))
    else:
        assert fast[1] == full[1]


def test_TR_001_fast_loads_is_json_loads_on_hostile_texts() -> None:
    texts = [
        '{"a":1,"a":2}\n',
        "[12345678901234567890123456789]\n",
        "[-9223372036854775809, 18446744073709551616]\n",
        "[-0, -0.0, 0.1, 1e-400, 5e-324]\n",
        "[1e400]\n",
        "[-1e400]\n",
        '["\\ud800"]\n',
        '["\\udfff\\ud800"]\n',
        '["\\ud83d\\ude00", "\\u00e9", "é"]\n',
        "[NaN]\n",
        "[Infinity]\n",
        "[-Infinity]\n",
        " [1] \n",
        "[1,]\n",
        "{'a': 1}\n",
        '{"a":1}{"b":2}\n',
        "",
        "\n",
        '"\x01"\n',
        "[" * 5000 + "]" * 5000 + "\n",
        "[" * 900 + "]" * 900 + "\n",
        "[1.7976931348623157e308, 2.2250738585072014e-308, 1E5, 1e+5]\n",
        "[true, false, null]\n",
        '{"$t": "runtime.WorkDone", "now_ms": 1, "cmd_id": 2}\n',
    ]
    for text in texts:
        _check_loads(text)


def test_TR_001_fast_loads_is_json_loads_over_recorded_and_mutated_lines(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(18)
    for path in _all_traces(traces, monkeypatch):
        for line in path.read_text("utf-8").splitlines(True):
            _check_loads(line)
            for _ in range(3):  # a character replaced, dropped or doubled
                i = rnd.randrange(len(line))
                c = rnd.choice(['"', "\\", "}", "]", ",", "0", "e", "-", "u", "\\u", " "])
                _check_loads(line[:i] + c + line[i + 1 :])
                _check_loads(line[:i] + line[i + 1 :])


def test_TR_010_fast_decoder_equals_the_converter_over_recorded_and_mutated_events(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = make_converter(None)
    decoder = _fast.EventDecoder(conv)
    rnd = random.Random(10)
    events = 0
    for path in _all_traces(traces, monkeypatch):
        for line in path.read_text("utf-8").splitlines()[1:-1]:
            event = json.loads(line)["event"]
            _check_event(decoder, conv, event)
            events += 1
            for _ in range(4):
                _check_event(decoder, conv, _mutate(event, rnd))
    assert events > 100


def _replayed_commands(
    paths: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> list[tuple[list[Any], list[Any]]]:
    """(the commands the fresh core returned, the recorded commands) of every
    step of every trace, replayed (each trace must match)."""
    seen: list[tuple[list[Any], list[Any]]] = []
    orig = _fast.TraceText.texts
    for path in paths:
        steps: list[list[Any]] = [
            json.loads(x)["commands"] for x in path.read_text("utf-8").splitlines()[1:-1]
        ]
        produced: list[list[Any]] = []

        def spy(self: Any, values: list[Any], _into: Any = produced) -> str:
            _into.append(list(values))
            return str(orig(self, values))

        monkeypatch.setattr(_fast.TraceText, "texts", spy)
        assert replay_trace(str(path)).ok
        monkeypatch.setattr(_fast.TraceText, "texts", orig)
        assert len(produced) == len(steps)
        seen += list(zip(produced, steps, strict=True))
    return seen


def test_TR_005_command_text_is_the_converters_json_over_recorded_steps(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = make_converter(None)
    writer = _fast.TraceText(conv)
    seen = _replayed_commands(_all_traces(traces, monkeypatch), monkeypatch)
    for _ in range(2):  # the second time from kept texts
        for values, recorded in seen:
            text = _dumps([conv.unstructure(c) for c in values])
            assert writer.texts(values) == text
            assert text == _dumps(recorded)
            for c in values:
                assert writer.text(c) == _dumps(conv.unstructure(c))
    assert len(seen) > 100


def test_TR_005_command_matcher_agrees_with_the_json_texts(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = make_converter(None)
    matcher = _fast.CommandMatcher()
    rnd = random.Random(5)
    checked = 0
    seen = _replayed_commands(_all_traces(traces, monkeypatch), monkeypatch)
    for values, recorded in seen:
        text = _dumps([conv.unstructure(c) for c in values])
        assert text == _dumps(recorded)
        assert matcher.matches_all(values, recorded)  # every recorded step: the fast answer
        checked += 1
        for _ in range(4):
            edited = _mutate(recorded, rnd)
            if matcher.matches_all(values, edited):
                assert text == _dumps(edited)
    assert checked > 100
    # a reordered object is not the same text: the matcher says so
    for values, recorded in seen:
        for i, cmd in enumerate(recorded):
            if type(cmd) is dict and len(cmd) > 2:
                flipped = list(recorded)
                flipped[i] = dict(reversed(list(cmd.items())))
                assert not matcher.matches_all(values, flipped)
                break


class _Plain:
    """An untagged object (the trace writes its name, never its content)."""

    TRACE_NAME = "PlainThing"


class _Level(enum.IntEnum):
    LOW = 1


class _Text(str):
    """A ``str`` of another type."""


class _Seq(list[Any]):
    """A ``list`` of another type."""


def _odd_values() -> list[Any]:
    """Values of every type the trace form knows, and of types a declaration
    does not name (each written as the converter writes it)."""
    from leasegate.core.registry import Assignment, CleanupRequest, Identity
    from leasegate.core.runtime import Answer, HoldInfo, Notify
    from leasegate.core.wire.credentials import CredentialLocation, EngineValue

    loc = CredentialLocation(
        org_id="org-é", user_id="u\ud800", credential_class="engine", credential_id="e-1"
    )
    env = types.MappingProxyType({"K": Secret("v"), "$KEY": Secret("w\u2028")})
    values: list[Any] = [
        None,
        True,
        0,
        -(2**80),
        1.5,
        -0.0,
        1e16,
        float("inf"),
        float("-inf"),
        float("nan"),
        "",
        "é\x00\ud83d\ude00",
        Secret("s\n"),
        [1, (2, [3])],
        (),
        {"$t": 1, "$$x": 2, "a": {"$secret": "x"}},
        {1: "non-text key"},
        types.MappingProxyType({"a": [1]}),
        _Plain(),
        _Level.LOW,
        _Text("t"),
        _Seq([1, "2"]),
        Assignment(task_id="t", run_epoch=1),
        Assignment(task_id=_Text("t"), run_epoch=True),  # type: ignore[arg-type]
        Assignment(task_id=Secret("t"), run_epoch=_Level.LOW),  # type: ignore[arg-type]
        Answer(call_id=1, value=[Assignment(task_id="t", run_epoch=2), {"k": 1.25}]),
        Notify(what="mcp-served", task_id="t"),
        Notify(what=_Text("env-served"), task_id="t"),  # type: ignore[arg-type]
        CleanupRequest(
            assignment=Assignment(task_id="t", run_epoch=1),
            mode="selective",
            reason="stopped",
            removed=(Identity(credential_class="engine", credential_id="e", revision=None),),
            remove_files_session=False,
        ),
        CleanupRequest(
            assignment=Assignment(task_id="t", run_epoch=1),
            mode="full",
            reason="stopped",
            removed=[Identity(credential_class="mcp", credential_id="m", revision="r")],  # type: ignore[arg-type]
            remove_files_session=1,  # type: ignore[arg-type]
        ),
        EngineValue(location=loc, auth_kind="env", env=env, files=None),
        EngineValue(location=loc, auth_kind="env", env={"K": Secret("v")}, files=env),  # type: ignore[arg-type]
        EngineValue(
            location=loc, auth_kind="env", env=types.MappingProxyType({"K": "v"}), files=None
        ),  # type: ignore[dict-item]
        HoldInfo(
            hold_id=1, assignment=Assignment(task_id="t", run_epoch=1), view=None, git=_Plain()
        ),  # type: ignore[arg-type]
    ]
    return values


def test_TR_005_command_text_is_the_converters_json_for_every_kind_of_value() -> None:
    conv = make_converter(None)
    writer = _fast.TraceText(conv)
    values = _odd_values()
    for _ in range(2):  # the second time from kept texts
        for v in values:
            assert writer.text(v) == _dumps(conv.unstructure(v)), repr(v)
        assert writer.texts(values) == _dumps([conv.unstructure(v) for v in values])
        nested = [values, tuple(values), {"k": values}]
        assert writer.texts(nested) == _dumps(conv.unstructure(nested))


def test_TR_005_a_kept_text_follows_a_change_of_a_watched_mapping() -> None:
    from leasegate.core.registry import CredentialEntry
    from leasegate.core.wire.credentials import CredentialLocation, EngineValue
    from leasegate.core.wire.lease import ManifestEngine

    conv = make_converter(None)
    writer = _fast.TraceText(conv)
    loc = CredentialLocation(org_id="o", user_id="u", credential_class="engine", credential_id="e")
    underlying: dict[str, Any] = {"K": Secret("one")}
    entry = CredentialEntry(
        manifest=ManifestEngine(
            credential_id="e",
            engine="claude-code",
            revision="r",
            parameter="/p",
            version=1,
            session_id="s",
            auth_kind="env",
        ),
        availability="available",
        material=EngineValue(
            location=loc, auth_kind="env", env=types.MappingProxyType(underlying), files=None
        ),
        observed_version=1,
    )
    first = writer.text(entry)
    assert first == _dumps(conv.unstructure(entry))
    assert writer.text(entry) == first  # kept
    underlying["K"] = Secret("two")
    assert writer.text(entry) == _dumps(conv.unstructure(entry)) != first
    underlying["L"] = "not a secret"
    assert writer.text(entry) == _dumps(conv.unstructure(entry))
    del underlying["L"]
    underlying["K"] = Secret("one")
    assert writer.text(entry) == first
    writer.forget()
    assert writer.text(entry) == first


# ----------------------------------------------------------- the step reader


def _steps_outcome(read: Any, text: str) -> list[tuple[Any, ...]]:
    """What a reader yields for a trace text: each step's line, number, event,
    port calls (as objects), commands, then the error (type, message), if any."""
    out: list[tuple[Any, ...]] = []
    try:
        _, steps = read(io.StringIO(text, newline="\n"))
        for s in steps:
            if isinstance(s, ReplayStep):
                calls = [msgspec.structs.asdict(c) for c in s.calls]
                commands = s.parsed()["commands"]
                assert s.parsed() == json.loads(s.raw)
            else:
                calls, commands = s.calls, s.commands
            # a call's key order is not part of it (replay reports the line's own)
            calls = [sorted(c.items()) for c in calls]
            out.append((s.line, s.n, repr(s.event), repr(calls), repr(commands)))
    except TraceFormatError as e:
        out.append(("error", str(e)))
    return out


def _full_reader(stream: Any) -> Any:
    return read_trace(stream, check_tags=False)


def _mutate_line(line: str, rnd: random.Random) -> str:
    """One edit of a step line: a value changed, a key reordered, dropped,
    added or doubled, a bool for an int, a character changed."""
    obj = json.loads(line)
    how = rnd.randrange(8)
    if how == 0 and obj.get("calls"):
        c = dict(obj["calls"][0])
        k = rnd.choice(sorted(c))
        c[k] = rnd.choice([True, 1, None, "x", 2**70, 1.0, [], {}])
        obj["calls"][0] = c
    elif how == 1:
        obj = dict(reversed(list(obj.items())))
        if obj.get("calls"):
            obj["calls"][0] = dict(reversed(list(obj["calls"][0].items())))
    elif how == 2:
        del obj[rnd.choice(sorted(obj))]
    elif how == 3:
        obj["extra"] = 1
    elif how == 4:
        obj["n"] = rnd.choice([True, float(obj["n"]), obj["n"] + 1, str(obj["n"])])
    elif how == 5:
        obj[rnd.choice(["event", "calls", "commands"])] = rnd.choice([None, {}, [], "x", 1])
    elif how == 6:
        text = json.dumps(obj, separators=(",", ":"))
        k = rnd.choice(sorted(obj))
        return text[:-1] + "," + json.dumps(k) + ":" + json.dumps(obj[k]) + "}\n"
    else:
        text = line
        i = rnd.randrange(len(text) - 1)
        return (
            text[:i]
            + rnd.choice(['"', "\\", "}", "]", ",", "0", "e", "t", "\\ud800"])
            + text[i + 1 :]
        )
    return json.dumps(obj, separators=(",", ":")) + "\n"


def test_TR_008_replay_reader_reads_every_trace_as_the_full_reader(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(8)
    mutated = 0
    for path in _all_traces(traces, monkeypatch):
        text = path.read_text("utf-8")
        full = _steps_outcome(_full_reader, text)
        assert full[-1][0] != "error"
        assert _steps_outcome(read_replay, text) == full
        lines = text.splitlines(True)
        for _ in range(60):
            i = rnd.randrange(1, len(lines) - 1)
            edited = [*lines[:i], _mutate_line(lines[i], rnd), *lines[i + 1 :]]
            t = "".join(edited)
            assert _steps_outcome(read_replay, t) == _steps_outcome(_full_reader, t)
            mutated += 1
        # the end line, a truncated last step, text after the end
        for t in (
            "".join(lines[:-1]),
            "".join(lines[:-1])[:-1],
            text + lines[1],
            "".join(lines[:1] + lines[2:]),
        ):
            assert _steps_outcome(read_replay, t) == _steps_outcome(_full_reader, t)
    assert mutated > 100


@pytest.mark.parametrize(
    "edit",
    [
        lambda o: o["calls"][0].update(run_epoch=True),
        lambda o: o["calls"][0].update(raised=0),
        lambda o: o["calls"][0].update(port="elsewhere"),
        lambda o: o["calls"][0].pop("result"),
        lambda o: o["calls"][0].update(extra=None),
        lambda o: o.update(n=True),
        lambda o: o.update(n=1.0),
        lambda o: o.update(commands={}),
        lambda o: o.update(event={"now_ms": 1}),
        lambda o: o.update(event=[]),
    ],
)
def test_TR_008_replay_reader_refuses_what_the_full_reader_refuses(
    traces: pathlib.Path, edit: Any
) -> None:
    d = _rich(traces / "rich.jsonl")
    lines = d.path.read_text("utf-8").splitlines(True)
    i = next(k for k, x in enumerate(lines) if json.loads(x).get("calls"))
    obj = json.loads(lines[i])
    edit(obj)
    lines[i] = json.dumps(obj, separators=(",", ":")) + "\n"
    t = "".join(lines)
    full = _steps_outcome(_full_reader, t)
    assert full[-1][0] == "error"
    assert _steps_outcome(read_replay, t) == full


def test_TR_010_fast_decoder_builds_each_type_as_its_constructor_does() -> None:
    """The decoder's construction of a frozen dataclass without calling it
    (its slots set one by one) stores what the dataclass's own ``__init__``
    stores, for every trace type: the same object in every field, the same
    type; a class whose constructor does more is not built that way."""
    from leasegate.shells.trace._codec import TYPES

    built = 0
    for cls in TYPES.values():
        setters = _fast._plain_init_setters(cls)
        if setters is None:
            continue
        names = [f.name for f in dataclasses.fields(cls)]
        values = [object() for _ in names]
        direct = cls(**dict(zip(names, values, strict=True)))
        bypass = object.__new__(cls)
        for setter, v in zip(setters, values, strict=True):
            setter(bypass, v)
        assert type(bypass) is type(direct)
        for n, v in zip(names, values, strict=True):
            assert getattr(bypass, n) is v is getattr(direct, n), (cls, n)
        built += 1
    assert built > 100

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Computed:
        x: int
        y: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithInitVar:
        x: int
        scale: dataclasses.InitVar[int] = 1

    class Custom(Checked):
        def __init__(self, x: int) -> None:
            object.__setattr__(self, "x", x * 2)

    for cls in (Checked, Mutable, NoSlots, Computed, WithInitVar, Custom, int, Secret):
        assert _fast._plain_init_setters(cls) is None, cls


def test_TR_005_command_tail_check_is_endswith_of_the_concatenation() -> None:
    """Replay's in-place test of a line's tail says what ``raw.endswith(
    ',"commands":' + text + "}\\n")`` says, over every short line and text
    made of the characters that matter (exhaustive up to the lengths given)."""
    import itertools

    from leasegate.shells.trace.replay import _ends_with_commands

    alphabet = ['"', ",", ":", "}", "\n", "[", "]", "c"]
    texts = ["", "[]", "[1]", "]", '"', "c"]
    tails = ["}\n", ',"commands":[]}\n', ',"commands":[1]}\n', ',"commands":]}\n']
    checked = 0
    for text in texts:
        for size in range(5):
            for chars in itertools.product(alphabet, repeat=size):
                head = "".join(chars)
                for tail in ("", *tails):
                    raw = head + tail
                    want = raw.endswith(',"commands":' + text + "}\n")
                    assert _ends_with_commands(raw, text) is want, (raw, text)
                    checked += 1
    assert checked > 100_000
