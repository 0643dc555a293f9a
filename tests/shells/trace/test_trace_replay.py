"""Traces and replay (issue #7 items 3 and 4; catalog TR- in docs/trace-format.md).

Runs of the real runtime (lease registry + env replica) are driven by events
only (``trace_kit.RecordingDriver``), recorded, then replayed through a fresh
core. No sleeps, no clock, no AWS. Every secret of the builders contains
``CANARY``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from trace_kit import RecordingDriver

from leasegate.core import Secret
from leasegate.core.runtime import CredentialUnavailable, ReleaseHold, RuntimeShutdown
from leasegate.core.wire.credentials import parse_leased_value, parse_parameter_name
from leasegate.core.wire.env import parse_staged_envelope
from leasegate.shells.trace import (
    TYPES,
    Redactor,
    RuntimeConfig,
    TraceFormatError,
    TraceRecorder,
    make_converter,
    read_trace,
    replay_trace,
    schema,
)
from leasegate.shells.trace import replay as replay_mod

# ---------------------------------------------------------------------------
# Recording helpers


@pytest.fixture
def traces(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    RecordingDriver.directory = tmp_path
    RecordingDriver.paths.clear()
    yield tmp_path
    RecordingDriver.paths.clear()
    RecordingDriver.directory = None


def _scenario(monkeypatch: pytest.MonkeyPatch) -> list[RecordingDriver]:
    """The runtime tests' whole-runner scenario, recorded (two drivers: crash, recovery)."""
    import test_runtime_scenario as sc

    built: list[RecordingDriver] = []

    class Rec(RecordingDriver):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            built.append(self)

    monkeypatch.setattr(sc, "RtDriver", Rec)
    sc.test_whole_runner_scenario()
    for d in built:
        d.close_trace()
    return built


def _rich(path: pathlib.Path) -> RecordingDriver:
    """Every kind of secret: sessions (credentials + Files), engine env and
    files, MCP header and OAuth token, GitHub token, SSH key, project env values."""
    from runtime_kit import TASK, engine, manifest, mcp, param, static

    from leasegate.core.wire.credentials import McpValue, encode_leased_value

    d = RecordingDriver(path=path, real_replica=True, files=True, runner_kind="task-machine")
    d.ssm.auth[param("engine", "engine-1")] = "config-dir"
    oauth = param("mcp", "mcp-1")
    loc = parse_parameter_name(oauth)
    assert loc is not None
    d.ssm.values[(oauth, 1)] = encode_leased_value(
        McpValue(
            location=loc, auth_kind="oauth", header=None, access_token=Secret("CANARY-oauth-tok")
        )
    )
    m = manifest(
        engines=[engine(0), engine(1, auth="config-dir")],
        mcps=[mcp(0), mcp(1, auth="oauth")],
        github=static("github"),
        ssh=static("ssh"),
    )
    s = d.begin()
    w = d.wait(s)
    d.grant(m=m, files=True)
    d.snapshot(TASK, 1)
    assert d.value(w).assignment.run_epoch == 1
    hold = d.hold(s)
    assert hold is not None
    d.feed(ReleaseHold(now_ms=d.now, hold_id=hold.value.hold_id))  # type: ignore[attr-defined]
    d.snapshot(TASK, 1, n=2)  # a second env value
    d.advance(3_600_000)  # renewals, timers
    d.close()
    d.call(lambda c: RuntimeShutdown(now_ms=d.now, call_id=c))
    d.close_trace()
    return d


def _lines(p: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in p.read_text("utf-8").splitlines()]


def _write(p: pathlib.Path, lines: list[dict[str, Any]]) -> None:
    p.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")


def _run(path: pathlib.Path, monitor: bool = False) -> int:
    return replay_mod.run(argparse.Namespace(trace=str(path), monitor=monitor))


# ---------------------------------------------------------------------------
# TR-001 round trip


def test_TR_001_scenario_trace_replays_exactly(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    drivers = _scenario(monkeypatch)
    assert len(drivers) == 2
    for d in drivers:
        r = replay_trace(str(d.path))
        assert r.ok, r.divergence and r.divergence.report()
        assert r.events == d.recorder.steps > 10
        assert _run(d.path) == 0
    assert "replay matched" in capsys.readouterr().out


def test_TR_001_rich_trace_replays_exactly(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    r = replay_trace(str(d.path))
    assert r.ok, r.divergence and r.divergence.report()
    assert r.events == d.recorder.steps
    lines = _lines(d.path)
    assert lines[0]["type"] == "header"
    assert lines[0]["config"]["runner_kind"] == "task-machine"
    assert lines[0]["config"]["boot_id"] == "boot1"
    assert lines[0]["files"] is True
    assert lines[0]["ports"] is True
    assert lines[-1] == {"type": "end", "steps": d.recorder.steps, "complete": True}
    methods = {c["method"] for x in lines[1:-1] for c in x["calls"]}
    assert {"open", "close", "install", "hold_git", "git_release", "leased_run"} <= methods


# ---------------------------------------------------------------------------
# TR-002 canary


def test_TR_002_no_secret_in_the_trace(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _rich(traces / "rich.jsonl")
    drivers = _scenario(monkeypatch)
    for p in [d.path, *(x.path for x in drivers)]:
        raw = p.read_bytes()
        assert b"CANARY" not in raw
        assert b"Q0FOQVJZ" not in raw  # nor base64 of it
    # the redacted trace still carried the secrets' places: tokens are there
    text = d.path.read_text("utf-8")
    assert '"$secret":"#' in text or '"$secret": "#' in text
    assert '"secretAccessKey":"#' in text


def test_TR_002_a_frame_given_as_text_is_redacted_and_replays(
    traces: pathlib.Path,
) -> None:
    from lease_kit import grant

    d = RecordingDriver(path=traces / "text.jsonl")
    d.frame(json.dumps(grant("op-x")))  # text, not a JSON value: refused by the core
    d.frame(json.dumps(grant("op-y")))
    d.close_trace()
    assert b"CANARY" not in d.path.read_bytes()
    r = replay_trace(str(d.path))
    assert r.ok, r.divergence and r.divergence.report()


def test_TR_002_recorder_redacts_commands_it_never_saw_in_events(tmp_path: pathlib.Path) -> None:
    from leasegate.core.runtime import ConsumerWork

    p = tmp_path / "t.jsonl"
    with TraceRecorder(p, RuntimeConfig(op_id_seed="s")) as rec:
        rec.record(
            RuntimeShutdown(now_ms=1, call_id=1),
            [ConsumerWork(cmd_id=-1, consumer="host", op="quiesce", request=Secret("CANARY-x"))],
        )
    assert b"CANARY" not in p.read_bytes()


# ---------------------------------------------------------------------------
# TR-003 / TR-004 redaction


def test_TR_003_tokens_are_stable_distinct_and_keep_utf16_length() -> None:
    r = Redactor()
    a, b = "CANARY-alpha-secret", "CANARY-beta-secret!"
    ta, tb = r.text(a), r.text(b)
    assert ta == r.text(a) == r.leaf(a)  # stable across forms
    assert ta != tb
    assert len(ta) == len(a)
    assert len(tb) == len(b)
    assert "CANARY" not in ta + tb
    astral = "CANARY-\U0001f511-key"  # a non-BMP character counts 2 UTF-16 units
    t = r.text(astral)
    assert len(t) == len(astral) + 1
    short = r.text("k")  # shorter than a token core: longer, still distinct
    assert short != "k"
    assert short != r.text("z")
    assert r.text("") == ""


def test_TR_004_envelopes_redacted_inside_still_authenticate() -> None:
    from lease_kit import ORG, envelope, param

    r = Redactor()
    raw = json.dumps(
        {
            "v": 2,
            "kind": "project-env",
            "orgId": ORG,
            "projectId": "proj-0",
            "key": "API_KEY",
            "stagingId": "00000001-0000-4000-8000-000000000000",
            "value": "CANARY-env-value",
        }
    )
    red = r.text(raw)
    assert "CANARY" not in red
    got = parse_staged_envelope(
        red,
        org_id=ORG,
        project_id="proj-0",
        key="API_KEY",
        staging_id="00000001-0000-4000-8000-000000000000",
    )
    assert isinstance(got, Secret)
    assert got.reveal() == r.leaf("CANARY-env-value")
    for cls, cid, auth in [
        ("engine", "engine-0", None),
        ("engine", "engine-1", "config-dir"),
        ("mcp", "mcp-0", None),
        ("github", "github-1", None),
        ("ssh", "ssh-1", None),
    ]:
        name = param(cls, cid)
        env = envelope(name, auth=auth)
        red = r.text(env)
        assert "CANARY" not in red
        loc = parse_parameter_name(name)
        before, after = parse_leased_value(env, loc), parse_leased_value(red, loc)
        assert before is not None, cls
        assert after is not None, cls
        assert type(before) is type(after)
    # an unexpected field is redacted too, and the envelope stays refused
    extra = json.loads(envelope(param("github", "github-1")))
    extra["note"] = {"deep": ["CANARY-extra"]}
    raw_extra = json.dumps(extra)
    red = r.text(raw_extra)
    assert "CANARY" not in red
    loc = parse_parameter_name(param("github", "github-1"))
    assert parse_leased_value(raw_extra, loc) is None
    assert parse_leased_value(red, loc) is None
    # JSON of another shape stays JSON (not an envelope); non-JSON stays non-JSON
    other = r.text('{"CANARY": 1}')
    assert json.loads(other) != {"CANARY": 1}
    assert "CANARY" not in other
    plain = r.text("CANARY not json")
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        json.loads(plain)


def test_TR_004_frame_secrets_redacted_even_in_refused_frames() -> None:
    from lease_kit import grant

    r = Redactor()
    g = grant("op-1")
    red = r.frame(g)
    s = red["lease"]["sessions"][0]
    assert s["secretAccessKey"] == r.leaf("CANARY-secret-s1")
    assert s["sessionToken"] == r.leaf("CANARY-token-s1")
    assert red["lease"]["sessions"][0]["accessKeyId"] == "ASIAEXAMPLEEXAMPLE01"
    g["lease"]["region"] = 7  # refused by the codec: the key rule still applies
    assert "CANARY" not in json.dumps(r.frame(g))


# ---------------------------------------------------------------------------
# TR-005 divergence


def test_TR_005_edited_command_reports_the_divergence(
    traces: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _rich(traces / "rich.jsonl")
    lines = _lines(d.path)
    # the first step whose first command is an Answer: change the answered value
    idx = next(
        i
        for i, x in enumerate(lines)
        if x["type"] == "step" and x["commands"] and x["commands"][0]["$t"] == "runtime.Answer"
    )
    lines[idx]["commands"][0]["call_id"] += 1
    edited = traces / "edited.jsonl"
    _write(edited, lines)
    r = replay_trace(str(edited))
    assert not r.ok
    assert r.divergence is not None
    assert r.divergence.step == lines[idx]["n"]
    assert r.divergence.line == idx + 1
    assert r.divergence.what == "command #1 differs"
    assert len(r.divergence.before) == min(5, lines[idx]["n"] - 1)
    assert r.divergence.before[-1][0] == lines[idx]["n"] - 1
    assert _run(edited) == 1
    out = capsys.readouterr().out
    assert f"divergence at step {lines[idx]['n']} (line {idx + 1})" in out
    assert "events before it:" in out


def test_TR_005_dropped_or_extra_command_reports_the_divergence(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    lines = _lines(d.path)
    idx = next(i for i, x in enumerate(lines) if x["type"] == "step" and len(x["commands"]) >= 2)
    dropped = [dict(x) for x in lines]
    dropped[idx] = dict(lines[idx], commands=lines[idx]["commands"][:-1])
    _write(traces / "a.jsonl", dropped)
    r = replay_trace(str(traces / "a.jsonl"))
    assert r.divergence is not None
    assert "extra command" in r.divergence.what


def test_TR_007_port_outcome_edited_reports_the_divergence(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    lines = _lines(d.path)
    idx = next(
        i
        for i, x in enumerate(lines)
        if x["type"] == "step" and any(c["method"] == "open" for c in x["calls"])
    )
    calls = [dict(c) for c in lines[idx]["calls"]]
    k = next(i for i, c in enumerate(calls) if c["method"] == "open")
    calls[k]["raised"] = True  # the gate now fails to open: the core answers differently
    lines[idx]["calls"] = calls
    _write(traces / "b.jsonl", lines)
    r = replay_trace(str(traces / "b.jsonl"))
    assert r.divergence is not None
    assert r.divergence.step == lines[idx]["n"]
    # the view a gate opened with is recorded (its secret-free stamp)
    lines = _lines(d.path)
    calls = [dict(c) for c in lines[idx]["calls"]]
    assert calls[k]["result"]["$t"] == "monitor.ViewStamp"
    calls[k]["result"] = dict(calls[k]["result"], manifest_revision=99)
    lines[idx]["calls"] = calls
    _write(traces / "v.jsonl", lines)
    r = replay_trace(str(traces / "v.jsonl"))
    assert r.divergence is not None
    assert r.divergence.what == "the core opened a gate with another view than the trace records"
    # a recorded call the core does not make
    lines = _lines(d.path)
    lines[1]["calls"] = [*lines[1]["calls"], dict(calls[k], raised=False)]
    _write(traces / "c.jsonl", lines)
    r = replay_trace(str(traces / "c.jsonl"))
    assert r.divergence is not None
    assert r.divergence.step == 1
    assert "port call" in r.divergence.what


def test_TR_007_a_raising_port_is_replayed(traces: pathlib.Path) -> None:
    from runtime_kit import TASK

    d = RecordingDriver(path=traces / "t.jsonl")
    d.person.unreadable = True  # hold_git raises CredentialUnavailable
    s = d.usable(TASK, 1)
    res = d.hold(s)
    assert res is not None
    assert type(res).__name__ == "Failed"
    d.engines.fail_close = RuntimeError("CANARY-close")
    d.close()
    d.close_trace()
    lines = _lines(d.path)
    raised = [c for x in lines[1:-1] for c in x["calls"] if c["raised"]]
    assert {c["method"] for c in raised} == {"hold_git", "close"}
    assert any(c["unavailable"] for c in raised if c["method"] == "hold_git")
    assert not any(c["unavailable"] for c in raised if c["method"] == "close")
    assert b"CANARY" not in d.path.read_bytes()
    r = replay_trace(str(d.path))
    assert r.ok, r.divergence and r.divergence.report()
    # the message of a CredentialUnavailable matters: edit it, the replay diverges
    for x in lines[1:-1]:
        for c in x["calls"]:
            if c["unavailable"]:
                c["unavailable"] = "another message"
    _write(traces / "u.jsonl", lines)
    assert replay_trace(str(traces / "u.jsonl")).divergence is not None
    assert CredentialUnavailable  # the type replayed


# ---------------------------------------------------------------------------
# TR-006 malformed traces


def _corrupt(src: pathlib.Path, dst: pathlib.Path, how: str) -> int:
    """Corrupt ``src`` into ``dst``; return the line number that is bad."""
    text = src.read_text("utf-8")
    lines = text.splitlines(keepends=True)
    if how == "bad-json":
        lines[3] = lines[3][: len(lines[3]) // 2] + "\n"
        bad = 4
    elif how == "wrong-version":
        head = json.loads(lines[0])
        head["version"] = 99
        lines[0] = json.dumps(head) + "\n"
        bad = 1
    elif how == "config-type":
        head = json.loads(lines[0])
        head["config"]["op_id_seed"] = 5  # a number where text is required: not coerced
        lines[0] = json.dumps(head) + "\n"
        bad = 1
    elif how == "unknown-tag":
        step = json.loads(lines[2])
        step["event"]["$t"] = "runtime.NoSuchEvent"
        lines[2] = json.dumps(step) + "\n"
        bad = 3
    elif how == "missing-field":
        step = json.loads(lines[4])
        del step["event"]["now_ms"]
        lines[4] = json.dumps(step) + "\n"
        bad = 5
    elif how == "wrong-type":
        step = json.loads(lines[4])
        step["event"]["now_ms"] = "soon"
        lines[4] = json.dumps(step) + "\n"
        bad = 5
    elif how == "truncated":
        cut = "".join(lines)
        cut = cut[: len(cut) - len(lines[-1]) - 10]
        dst.write_text(cut, "utf-8")
        return len(lines) - 1
    elif how == "no-end":
        lines = lines[:-1]
        bad = len(lines) + 1
    elif how == "binary":
        dst.write_bytes(b"\xff\xfe\x00garbage\n")
        return 1
    else:  # pragma: no cover
        raise AssertionError(how)
    dst.write_text("".join(lines), "utf-8")
    return bad


CORRUPTIONS = [
    "bad-json",
    "wrong-version",
    "config-type",
    "unknown-tag",
    "missing-field",
    "wrong-type",
    "truncated",
    "no-end",
    "binary",
]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_TR_006_corrupted_trace_is_a_one_line_error(
    traces: pathlib.Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _rich(traces / "rich.jsonl")
    bad = traces / f"{how}.jsonl"
    line = _corrupt(d.path, bad, how)
    with pytest.raises(TraceFormatError) as e:
        replay_trace(str(bad))
    msg = str(e.value)
    assert msg.startswith(f"line {line}: "), msg
    assert "\n" not in msg
    assert _run(bad) == 1
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.count("\n") == 0
    assert f"line {line}: " in err
    assert "Traceback" not in cap.err + cap.out


def test_TR_006_cli_subprocess_one_line_no_traceback(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    bad = traces / "bad.jsonl"
    _corrupt(d.path, bad, "unknown-tag")
    proc = subprocess.run(
        [sys.executable, "-m", "leasegate.shells.cli", "replay", str(bad)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip().count("\n") == 0
    assert "line 3: " in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "leasegate.shells.cli", "replay", str(d.path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "leasegate.shells.cli", "replay", str(traces / "nope.jsonl")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    # A trace that cannot be read is a usage error found before any replay: exit 2.
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr
    assert str(traces / "nope.jsonl") in missing.stderr


# ---------------------------------------------------------------------------
# TR-008 schema


def _validate(value: Any, sch: dict[str, Any], root: dict[str, Any], path: str = "$") -> None:
    """A small validator for the keywords trace-schema.json uses."""
    if "$ref" in sch:
        ref = sch["$ref"]
        assert ref.startswith("#/$defs/")
        return _validate(value, root["$defs"][ref[8:]], root, path)
    if "oneOf" in sch or "anyOf" in sch:
        opts = sch.get("oneOf") or sch["anyOf"]
        ok = 0
        for o in opts:
            try:
                _validate(value, o, root, path)
                ok += 1
            except AssertionError:
                pass
        assert ok == 1 if "oneOf" in sch else ok >= 1, f"{path}: {ok} alternatives match"
        return None
    if "not" in sch:
        try:
            _validate(value, sch["not"], root, path)
        except AssertionError:
            pass
        else:
            raise AssertionError(f"{path}: matches a 'not'")
    if "const" in sch:
        assert value == sch["const"], path
        assert type(value) is type(sch["const"]), path
    if "enum" in sch:
        assert value in sch["enum"], path
    if "type" in sch:
        kinds = sch["type"] if isinstance(sch["type"], list) else [sch["type"]]
        names = {
            "null": value is None,
            "boolean": type(value) is bool,
            "integer": type(value) is int,
            "number": type(value) in (int, float),
            "string": type(value) is str,
            "array": type(value) is list,
            "object": type(value) is dict,
        }
        assert any(names[k] for k in kinds), f"{path}: not {kinds}"
    if "pattern" in sch and type(value) is str:
        import re

        assert re.search(sch["pattern"], value), f"{path}: pattern"
    if "minimum" in sch and type(value) is int:
        assert value >= sch["minimum"], path
    if type(value) is dict:
        props = sch.get("properties", {})
        for k in sch.get("required", []):
            assert k in value, f"{path}: missing {k}"
        if "propertyNames" in sch:
            for k in value:
                _validate(k, sch["propertyNames"], root, f"{path}.{k}")
        for k, v in value.items():
            if k in props:
                _validate(v, props[k], root, f"{path}.{k}")
            elif sch.get("additionalProperties") is False:
                raise AssertionError(f"{path}: unexpected {k}")
            elif isinstance(sch.get("additionalProperties"), dict):
                _validate(v, sch["additionalProperties"], root, f"{path}.{k}")
    if type(value) is list and "items" in sch:
        for i, v in enumerate(value):
            _validate(v, sch["items"], root, f"{path}[{i}]")
    return None


def test_TR_008_trace_lines_validate_against_the_schema(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    sch = schema()
    assert sch["$defs"]["header"]["properties"]["version"] == {"const": 1}
    import dataclasses

    fields = {f.name for f in dataclasses.fields(RuntimeConfig)}
    assert set(sch["$defs"]["config"]["required"]) == fields
    for x in _lines(d.path):
        _validate(x, sch, sch)
    # and the schema refuses a wrong version, an untagged event, an unknown key
    lines = _lines(d.path)
    for bad in (
        dict(lines[0], version=2),
        dict(lines[1], event={"now_ms": 1}),
        dict(lines[1], extra=1),
        {"type": "end", "steps": 1},
    ):
        with pytest.raises(AssertionError):
            _validate(bad, sch, sch)


# ---------------------------------------------------------------------------
# TR-009 monitor on replay


def test_TR_009_monitor_on_replay_is_clean_for_the_scenario(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("leasegate.core.monitor")
    drivers = _scenario(monkeypatch)
    d = _rich(traces / "rich.jsonl")
    for p in [d.path, *(x.path for x in drivers)]:
        r = replay_trace(str(p), monitor=True)
        assert not r.violations, [str(v) for v in r.violations]
        assert r.ok
        assert _run(p, monitor=True) == 0


def test_TR_009_monitor_violation_fails_the_replay(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mon = pytest.importorskip("leasegate.core.monitor")
    d = _rich(traces / "rich.jsonl")

    class Flagging(mon.InvariantMonitor):  # type: ignore[misc, name-defined]
        def observe(self, event: Any, commands: Any, port_calls: Any = ()) -> list[Any]:
            got: list[Any] = super().observe(event, commands, port_calls)
            if type(event).__name__ == "RuntimeShutdown":
                v = mon.Violation("secret-in-error", 0, None, None, "flagged by the test")
                self.violations.append(v)
                got.append(v)
            return got

    monkeypatch.setattr(mon, "InvariantMonitor", Flagging)
    r = replay_trace(str(d.path), monitor=True)
    assert not r.ok
    assert r.divergence is None
    assert len(r.violations) == 1
    assert _run(d.path, monitor=True) == 1
    assert "flagged by the test" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# TR-010 codec


def test_TR_010_every_core_event_and_command_type_has_a_tag() -> None:
    import leasegate.core.registry as reg
    import leasegate.core.replica as rep
    import leasegate.core.runtime as rt
    from leasegate.core._base import Command, Event

    for mod in (reg, rep, rt):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, type) and issubclass(obj, (Event, Command)):
                assert obj in TYPES.values(), name
    assert len(set(TYPES.values())) == len(TYPES)


def test_TR_010_every_recorded_event_structures_back_equal(traces: pathlib.Path) -> None:
    d = _rich(traces / "rich.jsonl")
    conv = make_converter(None)
    with d.path.open(encoding="utf-8") as f:
        _, steps = read_trace(f)
        n = 0
        for step in steps:
            ev = conv.structure(step.event, object)
            assert conv.unstructure(ev) == step.event
            n += 1
    assert n == d.recorder.steps


def test_TR_011_recorder_never_raises_and_marks_a_broken_trace(tmp_path: pathlib.Path) -> None:
    class Broken:
        def __init__(self) -> None:
            self.n = 0
            self.text: list[str] = []

        def write(self, s: str) -> int:
            self.n += 1
            if self.n == 2:
                raise OSError("disk full")
            self.text.append(s)
            return len(s)

        def flush(self) -> None:
            pass

    out = Broken()
    rec = TraceRecorder(out, RuntimeConfig(op_id_seed="s"))  # type: ignore[arg-type]
    rec.record(RuntimeShutdown(now_ms=1, call_id=1), [])  # header ok, the step fails
    rec.close()
    assert rec.failures == 1
    p = tmp_path / "broken.jsonl"
    p.write_text("".join(out.text), "utf-8")
    with pytest.raises(TraceFormatError, match="could not write every step"):
        replay_trace(str(p))


# ---------------------------------------------------------------------------
# TR-012 hostile traces


def _mutate(value: Any, rnd: Any, depth: int = 0) -> Any:
    """One random change somewhere inside a JSON value."""
    if type(value) is dict and value and (depth < 6 and rnd.random() < 0.7):
        k = rnd.choice(sorted(value))
        out = dict(value)
        out[k] = _mutate(value[k], rnd, depth + 1)
        return out
    if type(value) is list and value and (depth < 6 and rnd.random() < 0.7):
        i = rnd.randrange(len(value))
        out_l = list(value)
        out_l[i] = _mutate(value[i], rnd, depth + 1)
        return out_l
    choices: list[Any] = [
        None,
        True,
        0,
        -1,
        2**70,
        1.5,
        "",
        "x",
        [],
        {},
        {"$t": "runtime.WorkDone"},
        {"$secret": 5},
        {"$f": "inf"},
        {"$opaque": "GitHold"},
        [[[[]]]],
    ]
    if type(value) is dict and value:
        k = rnd.choice(sorted(value))
        out = dict(value)
        if rnd.random() < 0.5:
            del out[k]
        else:
            out[k + "_x"] = out[k]
        return out
    return rnd.choice(choices)


def test_TR_012_mutated_traces_never_raise_anything_else(
    traces: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import random

    d = RecordingDriver(path=traces / "small.jsonl")
    from runtime_kit import TASK

    s = d.usable(TASK, 1)
    d.hold(s)
    d.close()
    d.close_trace()
    lines = _lines(d.path)
    rnd = random.Random(7)
    outcomes = {"ok": 0, "diverged": 0, "malformed": 0}
    for i in range(150):
        mutated = [dict(x) for x in lines]
        k = rnd.randrange(len(mutated))
        mutated[k] = _mutate(mutated[k], rnd)
        p = traces / f"m{i}.jsonl"
        _write(p, mutated)
        err: TraceFormatError | None = None
        try:
            r = replay_trace(str(p), monitor=i % 3 == 0)
        except TraceFormatError as e:
            err = e
        if err is not None:
            assert "\n" not in str(err)
            assert str(err).startswith("line ")
            outcomes["malformed"] += 1
        else:
            outcomes["ok" if r.ok else "diverged"] += 1
        assert _run(p) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
    assert outcomes["malformed"] > 20
    assert outcomes["diverged"] > 5


def test_TR_010_only_git_holds_are_opaque_in_recorded_traces(
    traces: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _rich(traces / "rich.jsonl")
    drivers = _scenario(monkeypatch)
    names: set[str] = set()

    def walk(v: Any) -> None:
        if type(v) is dict:
            if "$opaque" in v:
                names.add(v["$opaque"])
            for x in v.values():
                walk(x)
        elif type(v) is list:
            for x in v:
                walk(x)

    for p in [d.path, *(x.path for x in drivers)]:
        for line in _lines(p):
            walk(line)
    assert names == {"GitHold"}


def test_TR_007_without_recorded_ports_replay_uses_quiet_ports(traces: pathlib.Path) -> None:
    from runtime_kit import TASK

    d = RecordingDriver(path=traces / "noports.jsonl", wrap=False)
    s = d.usable(TASK, 1)
    hold = d.hold(s)
    assert hold is not None
    d.feed(ReleaseHold(now_ms=d.now, hold_id=hold.value.hold_id))  # type: ignore[attr-defined]
    d.close()
    d.close_trace()
    lines = _lines(d.path)
    assert lines[0]["ports"] is False
    assert all(x["calls"] == [] for x in lines[1:-1])
    r = replay_trace(str(d.path))
    assert r.ok, r.divergence and r.divergence.report()


def test_TR_009_recorder_feeds_the_monitor_every_step(traces: pathlib.Path) -> None:
    mon = pytest.importorskip("leasegate.core.monitor")
    from runtime_kit import TASK

    m = mon.InvariantMonitor()
    d = RecordingDriver(path=traces / "mon.jsonl", real_replica=True, monitor=m)
    s = d.begin()
    d.wait(s)
    d.grant()
    d.snapshot(TASK, 1)
    d.close()
    d.close_trace()
    assert d.recorder.monitor_failures == 0
    assert m.steps == d.recorder.steps > 10
    assert m.violations == []
    # the monitor saw the open calls with their view stamps (wrap_ports inside)
    r = replay_trace(str(d.path), monitor=True)
    assert r.ok


def test_TR_catalog_in_the_docs_matches_the_tests() -> None:
    import re

    root = pathlib.Path(__file__).resolve().parents[3]
    doc = (root / "docs" / "trace-format.md").read_text("utf-8")
    documented = set(re.findall(r"^\| (TR-\d{3}) \|", doc, re.M))
    tested = {
        "TR-" + m
        for m in re.findall(
            r"^def test_TR_(\d{3})_", pathlib.Path(__file__).read_text("utf-8"), re.M
        )
    }
    assert documented == tested
