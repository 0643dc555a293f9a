"""Attacks on trace redaction and replay (catalog TR- in docs/trace-format.md).

Each test is an attack that broke the recorder or replay before its fix.
Every secret contains ``CANARY``; runs are driven by events only.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from trace_kit import RecordingDriver

from leasegate.core.runtime import RuntimeShutdown
from leasegate.core.wire.credentials import parse_leased_value, parse_parameter_name
from leasegate.shells.trace import Redactor, replay_trace


def _run_with_value(path: pathlib.Path, name: str, raw: str) -> RecordingDriver:
    """A whole run (grant, env snapshot, renewals, close, shutdown) whose
    credential parameter ``name`` (version of the manifest) holds ``raw``."""
    from runtime_kit import TASK, engine, manifest, mcp, static

    d = RecordingDriver(path=path, real_replica=True, files=True, runner_kind="task-machine")
    d.ssm.values[(name, 1)] = raw
    m = manifest(
        engines=[engine(0)], mcps=[mcp(0), mcp(1)], github=static("github"), ssh=static("ssh")
    )
    s = d.begin()
    d.wait(s)
    d.grant(m=m, files=True)
    d.snapshot(TASK, 1)
    d.advance(60_000)
    d.close()
    d.call(lambda c: RuntimeShutdown(now_ms=d.now, call_id=c))
    d.close_trace()
    return d


def _credential(cls: str, cid: str, **fields: Any) -> dict[str, Any]:
    from lease_kit import ORG, USER

    return {
        "v": 1,
        "kind": "leased-credential",
        "orgId": ORG,
        "userId": USER,
        "credentialId": cid,
        "class": cls,
        **fields,
    }


# ---------------------------------------------------------------------------
# TR-002: no secret in the trace, wherever a peer puts it


def test_TR_002_envelope_identity_fields_of_another_type_are_redacted() -> None:
    r = Redactor()
    env = _credential("github", "github-1", token="t")
    env["orgId"] = {"x": "CANARY-org"}
    env["credentialId"] = ["CANARY-id"]
    env["v"] = "CANARY-v"
    env["class"] = "CANARY class with spaces"
    assert "CANARY" not in r.text(json.dumps(env))
    hdr = _credential(
        "mcp", "mcp-1", authKind="token", header={"name": ["CANARY-n"], "value": "CANARY-hv"}
    )
    assert "CANARY" not in r.text(json.dumps(hdr))
    # the identity a core authenticates is still there
    ok = json.loads(r.text(json.dumps(_credential("github", "github-1", token="CANARY-t"))))
    assert ok["orgId"] == "org-1"
    assert ok["credentialId"] == "github-1"
    assert ok["class"] == "github"


def test_TR_002_frame_secret_keys_holding_containers_are_redacted() -> None:
    r = Redactor()
    grant = {
        "kind": "lease.grant.v1",
        "lease": {
            "sessions": [
                {"sessionToken": ["CANARY-1"], "secretAccessKey": {"a": "CANARY-2"}},
            ]
        },
    }
    assert "CANARY" not in json.dumps(r.frame(grant))
    deny = {"kind": "lease.deny", "opId": "x", "error": ["CANARY-3", {"m": "CANARY-4"}]}
    assert "CANARY" not in json.dumps(r.frame(deny))


# ---------------------------------------------------------------------------
# TR-003: a token must keep what the core validates in a secret


@pytest.mark.parametrize(
    ("cls", "cid", "fields"),
    [
        ("mcp", "mcp-1", {"authKind": "token", "header": {"name": "X", "value": "CANARY\nx"}}),
        ("mcp", "mcp-1", {"authKind": "token", "header": {"name": "X", "value": "CANARY\tx"}}),
        ("mcp", "mcp-1", {"authKind": "oauth", "accessToken": "CANARY\tx"}),
        ("github", "github-1", {"token": "CANARY\x7f"}),
        ("ssh", "ssh-1", {"privateKey": "CANARY\x00key"}),
        ("ssh", "ssh-1", {"privateKey": "CANARY\nkey\n"}),
        ("engine", "engine-0", {"authKind": "env", "env": {"K": "CANARY\x00v"}}),
        ("engine", "engine-0", {"authKind": "env", "env": {"K": "\x00"}}),
    ],
)
def test_TR_003_token_keeps_control_characters_the_core_validates(
    cls: str, cid: str, fields: dict[str, Any]
) -> None:
    from lease_kit import param

    loc = parse_parameter_name(param(cls, cid))
    raw = json.dumps(_credential(cls, cid, **fields))
    red = Redactor().text(raw)
    assert "CANARY" not in red
    before, after = parse_leased_value(raw, loc), parse_leased_value(red, loc)
    assert (before is None) == (after is None), (before, after)


def test_TR_003_tokens_with_control_characters_stay_distinct_and_sized() -> None:
    r = Redactor()
    a, b, c = "CANARY\na", "CANARY\nb", "\x00\x01"
    ta, tb, tc = r.leaf(a), r.leaf(b), r.leaf(c)
    assert len({ta, tb, tc}) == 3
    assert len(ta) == len(a)
    assert ta[6] == "\n"
    assert tc.startswith("\x00\x01")
    assert "CANARY" not in ta + tb


def test_TR_001_header_value_with_a_newline_replays_exactly(tmp_path: pathlib.Path) -> None:
    """A header value the core refuses (a newline) must stay refused on replay:
    before the fix its token was a valid value and replay diverged."""
    from lease_kit import param

    env = _credential(
        "mcp", "mcp-1", authKind="token", header={"name": "Authorization", "value": "B CANARY\nx"}
    )
    d = _run_with_value(tmp_path / "t.jsonl", param("mcp", "mcp-1"), json.dumps(env))
    assert b"CANARY" not in d.path.read_bytes()
    res = replay_trace(str(d.path))
    assert res.ok, res.divergence and res.divergence.report()


# ---------------------------------------------------------------------------
# TR-002 + the monitor's secret-in-error: a secret quoted in an error text


def test_TR_002_a_secret_quoted_in_an_error_text_is_redacted_and_still_flagged(
    tmp_path: pathlib.Path,
) -> None:
    """A port breaking its contract (a CredentialUnavailable quoting the run's
    session token) put the secret in the trace twice (the call's message and
    the Failed command); replay's monitor, seeing only tokens as secrets,
    then missed the leak. Now the text holds the token, and both the live
    monitor and replay's monitor flag it."""
    from runtime_kit import TASK

    from leasegate.core.monitor import InvariantMonitor
    from leasegate.core.runtime import CredentialUnavailable

    mon = InvariantMonitor()
    d = RecordingDriver(path=tmp_path / "t.jsonl", monitor=mon)
    s = d.usable(TASK, 1)
    leak = "CANARY-token-s1"  # lease_kit's session token of the grant

    def hold_git(a: Any) -> Any:
        raise CredentialUnavailable(f"sign-in failed with {leak}")

    d.person.hold_git = hold_git  # type: ignore[method-assign]
    res = d.hold(s)
    assert type(res).__name__ == "Failed"
    d.close()
    d.close_trace()
    raw = d.path.read_bytes()
    assert b"CANARY" not in raw
    assert [v.property for v in mon.violations] == ["secret-in-error"]
    r = replay_trace(str(d.path), monitor=True)
    assert r.divergence is None, r.divergence.report()
    assert [v.property for v in r.violations] == ["secret-in-error"]


# ---------------------------------------------------------------------------
# TR-004: a redacted envelope keeps its numbers' JSON types


@pytest.mark.parametrize("v", ["1", "1.0", "1e0", "1.5", "true", '"1"'])
def test_TR_004_credential_envelope_version_type_is_kept(v: str) -> None:
    """``"v": 1.0`` is refused by the core; re-serialized canonically it was
    ``"v": 1`` and the redacted envelope was accepted: replay diverged."""
    from lease_kit import envelope, param

    name = param("github", "github-1")
    loc = parse_parameter_name(name)
    raw = json.dumps(json.loads(envelope(name))).replace('"v": 1', f'"v": {v}')
    red = Redactor().text(raw)
    assert "CANARY" not in red
    assert (parse_leased_value(raw, loc) is None) == (parse_leased_value(red, loc) is None)


@pytest.mark.parametrize("updated", ["1700000000000", "1.7e12", "1e400", "-1e400", "-0.0", "1e3"])
def test_TR_004_legacy_env_envelope_updated_at_is_kept(updated: str) -> None:
    from leasegate.core.wire.env import parse_legacy_envelope

    raw = (
        '{"v":1,"kind":"project-env","orgId":"o","projectId":"p","key":"K",'
        f'"value":"CANARY-legacy","updatedAt":{updated}}}'
    )
    red = Redactor().text(raw)
    assert "CANARY" not in red

    def outcome(text: str) -> str:
        got = parse_legacy_envelope(text, org_id="o", project_id="p", key="K")
        return "secret" if not isinstance(got, str) else got

    assert outcome(raw) == outcome(red)


# ---------------------------------------------------------------------------
# TR-008: a malformed trace is a one-line error naming the line


@pytest.mark.parametrize("field", ["port", "method"])
@pytest.mark.parametrize("bad", [{}, [], {"$secret": "s"}])
def test_TR_008_a_port_call_naming_an_unhashable_port_or_method_is_malformed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], field: str, bad: Any
) -> None:
    """Found by fuzzing: an object or array as a port call's ``port`` or
    ``method`` raised TypeError in the reader (exit 1, but as an "internal
    error" without the line)."""
    import argparse

    from runtime_kit import TASK

    from leasegate.shells.trace import replay as replay_mod

    d = RecordingDriver(path=tmp_path / "t.jsonl")
    d.usable(TASK, 1)
    d.close()
    d.close_trace()
    lines = [json.loads(x) for x in d.path.read_text("utf-8").splitlines()]
    idx = next(i for i, x in enumerate(lines) if x.get("calls"))
    lines[idx]["calls"][0][field] = bad
    edited = tmp_path / "e.jsonl"
    edited.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    rc = replay_mod.run(argparse.Namespace(trace=str(edited), monitor=True))
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1
    assert f"line {idx + 1}: a port call names an unknown port or method" in err


def test_TR_002_only_text_fields_are_searched_for_quoted_secrets() -> None:
    """A secret that merely equals an id or a region (an env value
    ``us-east-1``) must not be replaced in those fields: the core compares
    them across steps, and lines written before the secret was seen hold
    them in clear (replay would diverge)."""
    from leasegate.core import Secret

    r = Redactor()
    conv_line = {
        "event": {"$t": "x", "region": "us-east-1", "frame": {"region": "us-east-1"}},
        "calls": [{"unavailable": "no us-east-1 here"}],
        "commands": [
            {"$t": "runtime.Log", "message": "[credentials] bad us-east-1"},
            {"$t": "runtime.Failed", "error": {"message": "us-east-1!", "causes": []}},
            {"$t": "registry.OpenReader", "region": "us-east-1"},
        ],
    }
    tok = r.leaf(Secret("us-east-1").reveal())
    text = json.dumps(conv_line, separators=(",", ":"))
    out = json.loads(r.scrub_line(conv_line, text))
    assert out["event"]["region"] == "us-east-1"
    assert out["event"]["frame"]["region"] == "us-east-1"
    assert out["commands"][2]["region"] == "us-east-1"
    assert out["calls"][0]["unavailable"] == f"no {tok} here"
    assert out["commands"][0]["message"] == f"[credentials] bad {tok}"
    assert out["commands"][1]["error"]["message"] == f"{tok}!"


# ---------------------------------------------------------------------------
# Mutation testing of replay and the reader: checks no test exercised


def _small_trace(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[dict[str, Any]]]:
    from runtime_kit import TASK

    d = RecordingDriver(path=tmp_path / "t.jsonl")
    d.usable(TASK, 1)
    d.close()
    d.close_trace()
    return d.path, [json.loads(x) for x in d.path.read_text("utf-8").splitlines()]


@pytest.mark.parametrize(("field", "value"), [("task_id", "task-other"), ("run_epoch", 7)])
def test_TR_005_an_edited_port_call_is_a_divergence(
    tmp_path: pathlib.Path, field: str, value: Any
) -> None:
    """A recorded port call naming another run than the one the core calls
    for: replay must report it (disabling that comparison passed every test)."""
    _, lines = _small_trace(tmp_path)
    idx = next(
        i
        for i, x in enumerate(lines)
        if x.get("calls") and any(c["method"] == "close" for c in x["calls"])
    )
    call = next(c for c in lines[idx]["calls"] if c["method"] == "close")
    call[field] = value
    edited = tmp_path / "e.jsonl"
    edited.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    r = replay_trace(str(edited))
    assert r.divergence is not None
    assert r.divergence.line == idx + 1
    assert r.divergence.what == "the core made another port call than the trace records"
    assert "CANARY" not in r.divergence.report()


def test_TR_008_a_trace_whose_last_line_lost_its_newline_is_truncated(
    tmp_path: pathlib.Path,
) -> None:
    """The end line is complete JSON but the file was cut before its newline:
    the trace is refused as truncated (the check survived mutation)."""
    from leasegate.shells.trace import TraceFormatError

    path, lines = _small_trace(tmp_path)
    text = path.read_text("utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[:-1], "utf-8")
    with pytest.raises(TraceFormatError, match=rf"^line {len(lines)}: the line is cut off"):
        replay_trace(str(cut))
