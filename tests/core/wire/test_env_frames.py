"""Round-trip and rejection tests for every env replica frame and envelope."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from leasegate.core import Secret
from leasegate.core._model import DecodeError, Model, decode, encode
from leasegate.core.wire import env

SID = "0000000a-0000-4000-8000-000000000000"
STATE = {
    "key": "API_KEY",
    "head": {
        "revision": 1,
        "generation": 1,
        "tombstone": False,
        "valueRef": {"kind": "staged", "stagingId": SID},
    },
    "binding": {"kind": "withhold", "reason": "policy"},
    "policyEpoch": 1,
    "listingGeneration": 0,
}
COMMON = {
    "opId": "op1",
    "taskId": "task 1",
    "runEpoch": 2,
    "runnerBootId": "boot",
    "streamId": "s1",
}
CURSOR = {"streamId": "s1", "sequence": 3}
ACK_COMMON = {
    "kind": "env.replica.v1.ack",
    **COMMON,
    "attemptId": "a1",
    "policyEpochs": [1, 2],
    "appliedThrough": CURSOR,
}
RESULT = {"state": STATE, "materialization": {"kind": "installed"}}

SAMPLES: list[tuple[type[Model], dict[str, Any]]] = [
    (
        env.EnvBegin,
        {"kind": env.BEGIN_KIND, **COMMON, "attemptId": "a1", "projectIds": ["p1", "p.2"]},
    ),
    (
        env.EnvPage,
        {
            "kind": env.PAGE_KIND,
            **COMMON,
            "attemptId": "a1",
            "projectId": "p1",
            "after": "A",
            "recordVersion": 4,
            "records": [STATE, {**STATE, "key": "B", "binding": None, "policyEpoch": None}],
            "complete": False,
        },
    ),
    (
        env.EnvApply,
        {
            "kind": env.APPLY_KIND,
            **COMMON,
            "attemptId": None,
            "projectId": "p1",
            "recordVersion": 5,
            "state": {
                **STATE,
                "head": {**STATE["head"], "valueRef": {"kind": "legacy", "ssmVersion": 3}},
            },
            "delivery": CURSOR,
        },
    ),
    (
        env.EnvCommit,
        {
            "kind": env.COMMIT_KIND,
            **COMMON,
            "attemptId": "a1",
            "highWater": CURSOR,
            "versions": [{"projectId": "p1", "recordVersion": 0}],
        },
    ),
    (
        env.EnvAck,
        {
            **ACK_COMMON,
            "ok": False,
            "phase": "page",
            "code": "delivery_gap",
            "error": "delivery_gap",
        },
    ),
    (env.EnvAck, {**ACK_COMMON, "ok": True, "phase": "begun"}),
    (
        env.EnvAck,
        {
            **ACK_COMMON,
            "ok": True,
            "phase": "page",
            "projectId": "p1",
            "after": None,
            "recordVersion": 1,
            "results": [RESULT],
            "complete": True,
        },
    ),
    (
        env.EnvAck,
        {
            **ACK_COMMON,
            "ok": True,
            "phase": "applied",
            "projectId": "p1",
            "recordVersion": 1,
            "result": RESULT,
        },
    ),
    (env.EnvAck, {**ACK_COMMON, "ok": True, "phase": "complete", "highWater": CURSOR}),
    (
        env.StagedEnvelope,
        {
            "v": 2,
            "kind": "project-env",
            "orgId": "o",
            "projectId": "p1",
            "key": "K",
            "stagingId": SID,
            "value": "CANARY-s",
        },
    ),
    (
        env.LegacyEnvelope,
        {
            "v": 1,
            "kind": "project-env",
            "orgId": "o",
            "projectId": "p1",
            "key": "K",
            "value": "CANARY-l",
            "updatedAt": 1.5,
        },
    ),
]
IDS = [f"{c.__name__}-{i}" for i, (c, _) in enumerate(SAMPLES)]


@pytest.mark.parametrize(("cls", "wire"), SAMPLES, ids=IDS)
def test_env_round_trip(cls: type[Model], wire: dict[str, Any]) -> None:
    got = decode(cls, copy.deepcopy(wire))
    assert isinstance(got, cls), got
    assert encode(got) == wire
    assert "CANARY" not in repr(got)


def test_env_frames_dispatch_by_kind() -> None:
    kinds = {c.TAG[1] for c in env.FRAMES if c.TAG is not None}
    assert kinds == {env.BEGIN_KIND, env.PAGE_KIND, env.APPLY_KIND, env.COMMIT_KIND, env.ACK_KIND}


def _int_paths(v: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(v, dict):
        for k, x in v.items():
            out += _int_paths(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _int_paths(x, (*path, i))
    elif type(v) is int:
        out.append(path)
    return out


def _set(v: Any, path: tuple[Any, ...], new: Any) -> Any:
    v = copy.deepcopy(v)
    cur = v
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = new
    return v


@pytest.mark.parametrize(("cls", "wire"), SAMPLES, ids=IDS)
def test_env_rejections(cls: type[Model], wire: dict[str, Any]) -> None:
    assert isinstance(decode(cls, {**wire, "extra": 1}), DecodeError)
    for k in wire:
        assert isinstance(decode(cls, {x: y for x, y in wire.items() if x != k}), DecodeError), k
    for path in _int_paths(wire):
        if path == ("updatedAt",):
            continue
        for bad in (True, "1", 2**53):
            assert isinstance(decode(cls, _set(wire, path, bad)), DecodeError), (path, bad)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("opId", "bad id"),
        ("opId", "x" * 129),
        ("runnerBootId", ""),
        ("streamId", "s\n"),
        ("taskId", "t" * 129),
        ("taskId", "t\x00"),
        ("attemptId", "a/1"),
        ("projectIds", [".."]),
        ("projectIds", ["p1", "p1"]),
        ("projectIds", [f"p{i}" for i in range(257)]),
        ("runEpoch", 0),
    ],
)
def test_env_begin_rejects_bad_ids_and_text(field: str, bad: Any) -> None:
    wire = {**SAMPLES[0][1], field: bad}
    assert isinstance(decode(env.EnvBegin, wire), DecodeError)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda w: w["records"].reverse(),
        lambda w: w.update(after="B"),
        lambda w: w.update(after="\x00"),
        lambda w: w["records"][0].update(key="1BAD"),
        lambda w: w["records"][0].pop("binding"),
        lambda w: w["records"][0].update(binding={"kind": "withhold", "reason": "r\x07"}),
        lambda w: w["records"][0].update(binding={"kind": "withhold", "reason": "r" * 129}),
        lambda w: w["records"][0].update(binding={"kind": "nope"}),
        lambda w: w["records"][0]["head"].update(
            valueRef={"kind": "staged", "stagingId": SID.upper()}
        ),
        lambda w: w["records"][0]["head"].update(valueRef={"kind": "legacy", "ssmVersion": 0}),
        lambda w: w.update(records=[STATE] * 2),
    ],
)
def test_env_page_record_rules(mutate: Any) -> None:
    wire = copy.deepcopy(SAMPLES[1][1])
    mutate(wire)
    assert isinstance(decode(env.EnvPage, wire), DecodeError)


def test_env_apply_and_commit_cross_field_rules() -> None:
    apply = copy.deepcopy(SAMPLES[2][1])
    apply["delivery"] = {"streamId": "other", "sequence": 1}
    assert decode(env.EnvApply, apply).field == "delivery.streamId"  # type: ignore[union-attr]
    apply["delivery"] = {"streamId": "s1", "sequence": 0}
    assert isinstance(decode(env.EnvApply, apply), DecodeError)
    commit = copy.deepcopy(SAMPLES[3][1])
    commit["highWater"] = {"streamId": "other", "sequence": 1}
    assert isinstance(decode(env.EnvCommit, commit), DecodeError)


def test_env_ack_shape_is_exact() -> None:
    err = SAMPLES[4][1]
    assert isinstance(decode(env.EnvAck, {**err, "error": "stream_mismatch"}), DecodeError)
    assert isinstance(
        decode(env.EnvAck, {**err, "code": "made_up", "error": "made_up"}), DecodeError
    )
    assert isinstance(decode(env.EnvAck, {**SAMPLES[5][1], "highWater": CURSOR}), DecodeError)
    assert isinstance(decode(env.EnvAck, {**SAMPLES[5][1], "phase": "nope"}), DecodeError)


def test_env_staged_envelope_parser() -> None:
    kw = {"org_id": "o", "project_id": "p1", "key": "K", "staging_id": SID}
    raw = json.dumps(SAMPLES[9][1])
    got = env.parse_staged_envelope(raw, **kw)
    assert isinstance(got, Secret)
    assert got.reveal() == "CANARY-s"
    assert env.parse_staged_envelope("nope CANARY", **kw) == "value_unavailable"
    assert env.parse_staged_envelope(raw.replace('"v": 2', '"v": 2.0'), **kw) == got
    assert (
        env.parse_staged_envelope(raw.replace('"v": 2', '"v": true'), **kw)
        == "value_envelope_mismatch"
    )


def test_env_legacy_envelope_parser() -> None:
    kw = {"org_id": "o", "project_id": "p1", "key": "K"}
    w = dict(SAMPLES[10][1])
    assert isinstance(env.parse_legacy_envelope(json.dumps(w), **kw), Secret)
    w.pop("orgId")
    assert isinstance(env.parse_legacy_envelope(json.dumps(w), **kw), Secret)
    assert (
        env.parse_legacy_envelope(json.dumps({**w, "orgId": None}), **kw)
        == "value_envelope_mismatch"
    )
    assert (
        env.parse_legacy_envelope(json.dumps(w).replace("1.5", "1e999"), **kw)
        == "value_envelope_mismatch"
    )


def test_env_parameter_paths() -> None:
    digest = hashlib.sha256(b"K").hexdigest()
    assert env.project_env_staged_parameter("p1", "K", SID) == (
        f"/uai/projects/p1/env-values/{digest}/{SID}"
    )
    assert env.project_env_legacy_parameter("p1", "K") == "/uai/projects/p1/env/K"
    assert env.project_env_legacy_selector("p1", "K", 3) == "/uai/projects/p1/env/K:3"
    assert env.project_env_staged_parameter("p/1", "K", SID) is None
    assert env.project_env_legacy_selector("p1", "K", 0) is None


@pytest.mark.parametrize(("cls", "wire"), SAMPLES[:9], ids=IDS[:9])
def test_env_frames_through_the_codec(cls: type[Model], wire: dict[str, Any]) -> None:
    from leasegate.core.wire import decode_frame, encode_frame

    got = decode_frame(copy.deepcopy(wire))
    assert type(got) is cls
    assert encode_frame(got) == wire
