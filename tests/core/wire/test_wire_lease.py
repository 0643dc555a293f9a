"""Lease and credential frames: round trips and every strictness rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import wire_examples as ex

from leasegate.core import DecodeError, Secret, decode
from leasegate.core.wire import FRAME_TYPES, decode_frame, encode_frame
from leasegate.core.wire.lease import (
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    LeaseDeny,
    LeaseGrant,
    LeaseRequest,
    LeaseStale,
    LeaseUnavailable,
    Manifest,
    TaskLease,
    canonical_manifest_json,
    lease_expires_at,
    manifest_digest,
)

MAX_SAFE = 2**53 - 1


def _decoded(value: Any) -> Any:
    out = decode_frame(value)
    assert not isinstance(out, DecodeError), str(out)
    return out


def _refused(value: Any) -> DecodeError:
    out = decode_frame(value)
    assert isinstance(out, DecodeError), "expected a decode error"
    return out


def _round_trip(kind: str, cls: type) -> Any:
    raw = ex.frame(kind)
    frame = _decoded(raw)
    assert type(frame) is cls
    assert encode_frame(frame) == raw
    assert json.dumps(encode_frame(frame)) == json.dumps(raw)  # key order too
    assert _decoded(encode_frame(frame)) == frame
    return frame


# ---------------------------------------------------------------------------
# Every frame round-trips


def test_LR_012_lease_request_round_trips() -> None:
    f = _round_trip("lease.request", LeaseRequest)
    assert (f.op_id, f.task_id, f.run_epoch) == ("lease-1-abc", ex.TASK, 1)


def test_LR_018_lease_grant_round_trips_with_whole_lease() -> None:
    f = _round_trip("lease.grant.v1", LeaseGrant)
    lease = f.lease
    assert isinstance(lease, TaskLease)
    assert (lease.task_id, lease.run_epoch, lease.org_id, lease.user_id) == (
        ex.TASK,
        1,
        ex.ORG,
        ex.USER,
    )
    assert [e.credential_id for e in lease.manifest.engines] == ["engine-0", "engine-1"]
    assert lease.manifest.github is not None
    assert lease.manifest.github.version == 2
    assert lease.sessions[0].secret_access_key == Secret("CANARY-secret-s-cred")
    assert isinstance(lease.sessions[0].session_token, Secret)


def test_LR_022_grant_with_files_session_round_trips() -> None:
    raw = ex.grant(files=True)
    f = _decoded(raw)
    assert f.lease.files is not None
    assert f.lease.files.bucket == "files-bucket"
    assert [s.purpose for s in f.lease.sessions] == ["credentials", "files"]
    assert encode_frame(f) == raw


def test_LR_110_lease_unavailable_round_trips() -> None:
    _round_trip("lease.unavailable", LeaseUnavailable)


def test_LR_111_lease_deny_round_trips() -> None:
    f = _round_trip("lease.deny", LeaseDeny)
    assert f.error == "not allowed"


def test_LR_078_lease_stale_round_trips_and_min_revision_may_be_null() -> None:
    f = _round_trip("lease.stale", LeaseStale)
    assert f.removed == ("engine-0",)
    raw = ex.frame("lease.stale") | {"minRevision": None, "removed": []}
    g = _decoded(raw)
    assert g.min_revision is None
    assert g.removed == ()
    assert encode_frame(g) == raw


def test_LR_091_credential_changed_round_trips() -> None:
    f = _round_trip("credential.changed", CredentialChanged)
    assert f.version == 4


def test_LR_104_credential_refresh_and_unavailable_result_round_trip() -> None:
    _round_trip("credential.refresh", CredentialRefresh)
    _round_trip("credential.refresh.result", CredentialRefreshResult)
    # The registry's own "unavailable" answer is a valid frame too.
    unavailable = {
        "kind": "credential.refresh.result",
        "opId": "refresh-1-op",
        "outcome": "unavailable",
        "version": None,
        "expiresAt": None,
    }
    assert encode_frame(_decoded(unavailable)) == unavailable


@pytest.mark.parametrize("outcome", ["refreshed", "fresh"])
def test_LR_107_refreshed_or_fresh_result_requires_a_version(outcome: str) -> None:
    raw = ex.frame("credential.refresh.result") | {"outcome": outcome, "version": None}
    err = _refused(raw)
    assert (err.field, err.reason) == ("version", "required for this outcome")


@pytest.mark.parametrize("outcome", ["needs_sign_in", "unavailable", "failed"])
def test_LR_108_other_outcomes_decode_without_a_version(outcome: str) -> None:
    raw = ex.frame("credential.refresh.result") | {"outcome": outcome, "version": None}
    assert _decoded(raw).outcome == outcome
    assert _refused(raw | {"outcome": "maybe"}).field == "outcome"


def test_RT_124_frame_types_cover_every_lease_kind() -> None:
    kinds = {cls.TAG[1] for cls in FRAME_TYPES if cls.TAG is not None}
    assert set(ex.FRAMES) <= kinds


def test_RT_124_unknown_or_missing_kind_is_a_decode_error_naming_kind() -> None:
    assert _refused({"kind": "lease.nope", "opId": "a"}).field == "kind"
    err = _refused({"opId": "a"})
    assert (err.field, err.reason) == ("kind", "missing key")
    assert _refused({"kind": 3}).field == "kind"
    for not_object in (None, [], "lease.deny", 3, 2.5, True):
        assert _refused(not_object).field == ""


def test_RT_005_encode_frame_refuses_a_non_frame() -> None:
    manifest = decode(Manifest, ex.manifest())
    assert isinstance(manifest, Manifest)
    with pytest.raises(TypeError):
        encode_frame(manifest)


# ---------------------------------------------------------------------------
# Strictness: one rejection test per rule, each naming the offending field


def _set(value: dict[str, Any], path: str, new: Any) -> dict[str, Any]:
    """Replace the leaf at a dotted path (``lease.sessions.0.expiresAt``)."""
    *parents, last = path.split(".")
    node: Any = value
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = new
    else:
        node[last] = new
    return value


def _wire_path(path: str) -> str:
    out = ""
    for part in path.split("."):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


# (frame kind, dotted path of an integer field)
INT_FIELDS = [
    ("lease.request", "runEpoch"),
    ("lease.grant.v1", "lease.runEpoch"),
    ("lease.grant.v1", "lease.manifestRevision"),
    ("lease.grant.v1", "lease.expiresAt"),
    ("lease.grant.v1", "lease.sessions.0.expiresAt"),
    ("lease.grant.v1", "lease.manifest.engines.0.version"),
    ("lease.grant.v1", "lease.manifest.mcp.0.version"),
    ("lease.grant.v1", "lease.manifest.github.version"),
    ("lease.stale", "wantedRevision"),
    ("lease.stale", "minRevision"),
    ("credential.changed", "version"),
    ("credential.refresh.result", "version"),
    ("credential.refresh.result", "expiresAt"),
]


@pytest.mark.parametrize(("kind", "path"), INT_FIELDS)
@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (True, "expected integer"),
        (False, "expected integer"),
        ("5", "expected integer"),
        (5.0, "expected integer"),
        (2**53, "not a safe integer"),
        (-(2**53), "not a safe integer"),
        (10**30, "not a safe integer"),
    ],
    ids=["true", "false", "string", "float", "2^53", "-2^53", "huge"],
)
def test_LR_163_integers_are_exact_and_safe(kind: str, path: str, bad: Any, reason: str) -> None:
    err = _refused(_set(ex.frame(kind), path, bad))
    assert (err.field, err.reason) == (_wire_path(path), reason)


@pytest.mark.parametrize(("kind", "path"), INT_FIELDS)
def test_LR_163_largest_safe_integer_is_accepted(kind: str, path: str) -> None:
    raw = _set(ex.frame(kind), path, MAX_SAFE)
    if kind == "lease.grant.v1":  # keep the digest right when the manifest changed
        raw["lease"]["manifestDigest"] = ex.digest_of(raw["lease"]["manifest"])
    assert encode_frame(_decoded(raw)) == raw


@pytest.mark.parametrize("kind", sorted(ex.FRAMES))
def test_LR_111_extra_key_is_refused(kind: str) -> None:
    raw = ex.frame(kind) | {"extra": 1}
    err = _refused(raw)
    assert (err.field, err.reason) == ("extra", "unexpected key")


@pytest.mark.parametrize(
    ("kind", "key"),
    [(k, key) for k in sorted(ex.FRAMES) for key in ex.FRAMES[k] if key != "kind"],
)
def test_LR_111_missing_key_is_refused(kind: str, key: str) -> None:
    raw = ex.frame(kind)
    del raw[key]
    err = _refused(raw)
    assert (err.field, err.reason) == (key, "missing key")


@pytest.mark.parametrize(
    "path",
    [
        "lease",
        "lease.manifest",
        "lease.manifest.engines.0",
        "lease.manifest.mcp.0",
        "lease.manifest.github",
        "lease.manifest.projects.0",
        "lease.sessions.0",
    ],
)
def test_LR_018_nested_objects_have_exact_key_sets(path: str) -> None:
    raw = ex.frame("lease.grant.v1")
    node: Any = raw
    for p in path.split("."):
        node = node[int(p)] if isinstance(node, list) else node[p]
    node["surplus"] = None
    err = _refused(raw)
    assert (err.field, err.reason) == (_wire_path(path) + ".surplus", "unexpected key")
    del node["surplus"]
    first = next(iter(node))
    del node[first]
    err = _refused(raw)
    assert (err.field, err.reason) == (_wire_path(path) + f".{first}", "missing key")


OP_ID_FRAMES = [
    "lease.request",
    "lease.grant.v1",
    "lease.unavailable",
    "lease.deny",
    "credential.refresh",
    "credential.refresh.result",
]


@pytest.mark.parametrize("kind", OP_ID_FRAMES)
@pytest.mark.parametrize(
    "bad",
    ["", "a" * 129, "a b", "a.b", "abc\n", "é", "a/b", 7, None],
    ids=["empty", "129", "space", "dot", "trailing-newline", "non-ascii", "slash", "int", "null"],
)
def test_LR_111_op_ids_match_the_op_id_pattern(kind: str, bad: Any) -> None:
    err = _refused(ex.frame(kind) | {"opId": bad})
    assert err.field == "opId"


@pytest.mark.parametrize("kind", OP_ID_FRAMES)
def test_LR_163_op_id_of_128_characters_is_accepted(kind: str) -> None:
    op = "A-_z9" * 25 + "abc"
    assert len(op) == 128
    assert _decoded(ex.frame(kind) | {"opId": op}).op_id == op


@pytest.mark.parametrize(
    ("error", "ok"),
    [
        ("x", True),
        ("x" * 512, True),
        ("x" * 513, False),
        ("", False),
        ("😀" * 256, True),  # 512 UTF-16 code units
        ("😀" * 256 + "x", False),  # 513 code units, 257 code points
        ("line\nbreak", True),
    ],
    ids=["1", "512", "513", "empty", "512-units-astral", "513-units-astral", "newline"],
)
def test_LR_111_deny_error_is_1_to_512_utf16_units(error: str, ok: bool) -> None:
    raw = ex.frame("lease.deny") | {"error": error}
    out = decode_frame(raw)
    if ok:
        assert isinstance(out, LeaseDeny)
        assert out.error == error
    else:
        assert isinstance(out, DecodeError)
        assert out.field == "error"


TASK_ID_FRAMES = [
    ("lease.request", "taskId"),
    ("lease.grant.v1", "lease.taskId"),
    ("lease.stale", "taskId"),
    ("credential.changed", "taskId"),
    ("credential.refresh", "taskId"),
]


@pytest.mark.parametrize(("kind", "path"), TASK_ID_FRAMES)
@pytest.mark.parametrize(
    "bad",
    ["", "t" * 129, "😀" * 64 + "t", "a\x00b", "a\x1fb", "a\x7fb", "tab\there", "end\n", 5],
    ids=["empty", "129", "129-units", "nul", "us", "del", "tab", "newline", "int"],
)
def test_LR_163_task_ids_are_1_to_128_units_without_control_characters(
    kind: str, path: str, bad: Any
) -> None:
    err = _refused(_set(ex.frame(kind), path, bad))
    assert err.field == _wire_path(path)


@pytest.mark.parametrize(("kind", "path"), TASK_ID_FRAMES)
@pytest.mark.parametrize("good", ["t" * 128, "😀" * 64, "task with spaces/and é", "\x80ok"])
def test_LR_163_task_ids_at_the_limits_are_accepted(kind: str, path: str, good: str) -> None:
    raw = _set(ex.frame(kind), path, good)
    assert encode_frame(_decoded(raw)) == raw


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("lease.request", "runEpoch"),
        ("lease.grant.v1", "lease.runEpoch"),
        ("lease.stale", "runEpoch"),
        ("credential.changed", "runEpoch"),
        ("credential.refresh", "runEpoch"),
    ],
)
@pytest.mark.parametrize("bad", [0, -1])
def test_LR_163_run_epochs_are_at_least_1(kind: str, path: str, bad: int) -> None:
    err = _refused(_set(ex.frame(kind), path, bad))
    assert (err.field, err.reason) == (_wire_path(path), "less than 1")


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("lease.manifestDigest", "A" * 64),
        ("lease.manifestDigest", "a" * 63),
        ("lease.region", "US-EAST-1"),
        ("lease.region", "us-east-1\n"),
        ("lease.orgId", ".."),
        ("lease.orgId", "org/evil"),
        ("lease.userId", ""),
        ("lease.leaseId", ""),
        ("lease.leaseId", "x" * 129),
        ("lease.sessions.0.purpose", "admin"),
        ("lease.sessions.0.accessKeyId", "short"),
        ("lease.sessions.0.secretAccessKey", ""),
        ("lease.sessions.0.sessionToken", 5),
        ("lease.sessions.0.id", ""),
        ("lease.manifest.engines.0.authKind", "password"),
        ("lease.manifest.engines.0.engine", "Claude Code"),
        ("lease.manifest.engines.0.parameter", None),
        ("lease.manifest.engines.0.parameter", "p" * 2049),
        ("lease.manifest.engines.0.sessionId", None),
        ("lease.manifest.engines.0.version", -1),
        ("lease.manifest.engines.0.revision", ""),
        ("lease.manifest.mcp.0.server", ""),
        ("lease.manifest.projects.0.projectId", "a/b"),
        ("lease.manifest.projects.0.projectId", "p" * 129),
        ("lease.manifest.github.sessionId", None),
        ("lease.manifest.ssh", []),
        ("lease.manifest.engines", {}),
        ("lease.sessions", None),
    ],
)
def test_LR_018_grant_field_rules(path: str, bad: Any) -> None:
    err = _refused(_set(ex.frame("lease.grant.v1"), path, bad))
    assert err.field == _wire_path(path)


def test_LR_018_grant_refuses_repeated_session_ids() -> None:
    raw = ex.grant()
    raw["lease"]["sessions"].append(ex.session("s-cred"))
    err = _refused(raw)
    assert (err.field, err.reason) == ("lease.sessions[1].id", "repeats an earlier session id")


def test_LR_018_list_limits() -> None:
    raw = ex.grant()
    raw["lease"]["manifest"]["engines"] = [ex.engine_entry(i) for i in range(65)]
    assert _refused(raw).field == "lease.manifest.engines"
    raw = ex.grant()
    raw["lease"]["sessions"] = [ex.session(f"s{i}") for i in range(33)]
    assert _refused(raw).field == "lease.sessions"
    raw = ex.frame("lease.stale") | {"removed": ["c"] * 1025}
    assert _refused(raw).field == "removed"
    raw = ex.frame("lease.stale") | {"removed": ["ok", ""]}
    assert _refused(raw).field == "removed[1]"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("lease.manifest.engines.0.version", 0),
        ("lease.manifest.engines.0.parameter", ""),
        ("lease.manifest.engines.0.parameter", "/not/a/credential/path"),
        ("lease.manifest.engines.0.sessionId", ""),
        ("lease.manifest.engines.0.sessionId", "no-such-session"),
        ("lease.manifest.engines.0.authKind", "none"),
        ("lease.manifest.mcp.0.parameter", None),
        ("lease.manifest.mcp.0.version", None),
        ("lease.manifest.mcp.0.sessionId", None),
        ("lease.manifest.github.version", 0),
        ("lease.manifest.engines.1.credentialId", "engine-0"),
        ("lease.manifestDigest", "0" * 64),
        ("lease.expiresAt", 0),
    ],
)
def test_LR_028_entries_the_registry_refuses_still_decode(path: str, value: Any) -> None:
    # The registry answers these grants ("manifest credential is incomplete",
    # digest mismatch, expired, duplicate ids ...): the codec must let them
    # through, or they would be ignored silently instead (LR-018).
    raw = _set(ex.frame("lease.grant.v1"), path, value)
    if path != "lease.manifestDigest":
        raw["lease"]["manifestDigest"] = ex.digest_of(raw["lease"]["manifest"])
    assert encode_frame(_decoded(raw)) == raw


# ---------------------------------------------------------------------------
# Canonical JSON, digest and expiry


def _independent_digest(manifest_value: dict[str, Any]) -> str:
    # ASCII-only keys: Python's sort equals JavaScript's here.
    text = json.dumps(manifest_value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_LR_020_manifest_digest_is_sha256_of_canonical_manifest_json() -> None:
    raw = ex.manifest(engines=3, mcp=2, projects=2)
    raw["engines"][0]["credentialId"] = "clé-€-😀"  # non-ASCII written as itself
    m = decode(Manifest, raw)
    assert isinstance(m, Manifest)
    text = canonical_manifest_json(m)
    assert text == json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert "clé-€-😀" in text
    assert " " not in text
    assert manifest_digest(m) == _independent_digest(raw)
    assert len(manifest_digest(m)) == 64


def test_LR_020_digest_ignores_key_order_but_not_list_order() -> None:
    raw = ex.manifest(engines=2)
    reordered = {k: raw[k] for k in reversed(list(raw))}
    reordered["engines"] = [dict(reversed(list(e.items()))) for e in raw["engines"]]
    a, b = decode(Manifest, raw), decode(Manifest, reordered)
    assert isinstance(a, Manifest)
    assert isinstance(b, Manifest)
    assert manifest_digest(a) == manifest_digest(b)
    swapped = ex.manifest(engines=2)
    swapped["engines"].reverse()
    c = decode(Manifest, swapped)
    assert isinstance(c, Manifest)
    assert manifest_digest(c) != manifest_digest(a)


def test_LR_020_example_grant_digest_matches() -> None:
    f = _decoded(ex.big_grant())
    assert manifest_digest(f.lease.manifest) == f.lease.manifest_digest


def test_LR_021_lease_expires_at_is_the_earliest_of_lease_and_sessions() -> None:
    raw = ex.grant(files=True)
    raw["lease"]["expiresAt"] = 5_000
    raw["lease"]["sessions"][0]["expiresAt"] = 7_000
    raw["lease"]["sessions"][1]["expiresAt"] = 6_000
    assert lease_expires_at(_decoded(raw).lease) == 5_000
    raw["lease"]["sessions"][1]["expiresAt"] = 4_000  # the files session bounds it too
    assert lease_expires_at(_decoded(raw).lease) == 4_000
    raw["lease"]["sessions"][0]["expiresAt"] = 3_000
    assert lease_expires_at(_decoded(raw).lease) == 3_000
    raw["lease"]["sessions"] = []
    assert lease_expires_at(_decoded(raw).lease) == 5_000


# ---------------------------------------------------------------------------
# Secrets never show


def test_LR_158_decoded_grant_repr_and_errors_hold_no_secret() -> None:
    f = _decoded(ex.big_grant())
    assert "CANARY" not in repr(f)
    assert "CANARY" not in str(f)
    assert "CANARY" in json.dumps(encode_frame(f))  # only the wire reveals
    for path, bad in [
        ("lease.sessions.0.secretAccessKey", "CANARY" * 300),
        ("lease.sessions.0.sessionToken", "CANARY" * 3000),
        ("lease.sessions.0.accessKeyId", "CANARY-bad"),
        ("lease.manifest.engines.0.engine", "CANARY BAD"),
        ("lease.manifest.engines.0.credentialId", "CANARY" * 30),
    ]:
        err = _refused(_set(ex.big_grant(), path, bad))
        assert "CANARY" not in str(err)
        assert "CANARY" not in repr(err)
    err = _refused(ex.frame("lease.deny") | {"error": "CANARY" * 100})
    assert "CANARY" not in str(err)


def test_RT_122_env_replica_frames_dispatch_through_decode_frame() -> None:
    from leasegate.core.wire.env import EnvBegin

    raw = {
        "kind": "env.replica.v1.begin",
        "opId": "op-1",
        "taskId": ex.TASK,
        "runEpoch": 1,
        "runnerBootId": "boot-1",
        "streamId": "stream-1",
        "attemptId": "attempt-1",
        "projectIds": ["proj-1", "proj-2"],
    }
    frame = _decoded(raw)
    assert type(frame) is EnvBegin
    assert frame.project_ids == ("proj-1", "proj-2")
    assert encode_frame(frame) == raw
    err = _refused(raw | {"runEpoch": True})
    assert (err.field, err.reason) == ("runEpoch", "expected integer")
    assert EnvBegin in FRAME_TYPES


def test_LR_018_deeply_nested_values_are_refused_without_raising() -> None:
    deep: Any = {}
    for _ in range(100_000):
        deep = {"kind": "lease.grant.v1", "opId": "a", "lease": deep}
    assert _refused(deep).field.startswith("lease")
    deep_list: Any = []
    for _ in range(100_000):
        deep_list = [deep_list]
    assert _refused(ex.frame("lease.stale") | {"removed": deep_list}).field == "removed[0]"
