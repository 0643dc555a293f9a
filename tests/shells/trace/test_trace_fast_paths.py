"""Replay's fast paths against the full paths they stand in for (catalog TR-001,
TR-005, TR-010; ``shells/leasegate/shells/trace/_fast.py``).

Differential: over the recorded traces (the whole-runner scenario, the rich
trace, a benchmark-shaped run) and over mutated copies of their lines,

* :func:`_fast.loads` gives exactly what ``json.loads`` gives, or both refuse;
* :class:`_fast.EventDecoder` gives an event equal to the cattrs converter's,
  or raises the same error type with the same message;
* :class:`_fast.CommandMatcher` says "equal" only where the JSON texts of the
  commands' trace form are equal (and it says so for every recorded step).
"""

from __future__ import annotations

import json
import pathlib
import random
from collections.abc import Iterator
from typing import Any

import pytest
from test_trace_replay import _mutate, _rich, _scenario
from trace_kit import RecordingDriver

from leasegate.shells.trace import TraceValueError, _fast, make_converter, replay_trace

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


def test_TR_005_command_matcher_agrees_with_the_json_texts(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from leasegate.shells.trace import replay as replay_mod

    conv = make_converter(None)
    matcher = _fast.CommandMatcher()
    rnd = random.Random(5)
    checked = 0
    seen: list[tuple[list[Any], list[Any]]] = []

    orig = replay_mod.CommandMatcher.matches_all
    for path in _all_traces(traces, monkeypatch):
        steps: list[list[Any]] = [
            json.loads(x)["commands"] for x in path.read_text("utf-8").splitlines()[1:-1]
        ]
        produced: list[list[Any]] = []

        def spy(self: Any, values: list[Any], parsed: Any, _into: Any = produced) -> bool:
            _into.append(list(values))
            return bool(orig(self, values, parsed))

        monkeypatch.setattr(replay_mod.CommandMatcher, "matches_all", spy)
        assert replay_trace(str(path)).ok
        monkeypatch.setattr(replay_mod.CommandMatcher, "matches_all", orig)
        assert len(produced) == len(steps)
        seen += list(zip(produced, steps, strict=True))
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
