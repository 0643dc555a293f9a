"""Fuzz harness: the wire codec (frames and credential envelopes).

``TestOneInput(data)``: the first byte picks a mode (``data[0] % 6``):

0. **raw frame**: the rest is JSON text → :func:`leasegate.core.loads` →
   :func:`leasegate.core.wire.decode_frame`.
1. **raw envelope**: the second byte picks a credential location; the rest,
   read as UTF-8 (``surrogateescape``), is an SSM value →
   :func:`~leasegate.core.wire.credentials.decode_leased_value`; the same
   text also goes to ``parse_parameter_name`` (must spell back exactly).
2. **structured frame**: a :class:`~_harness.DataProvider` picks a valid
   frame template (``tests/core/wire/wire_examples.py``) and mutates it
   field by field (type swaps, ``bool`` for ``int``, huge and unsafe
   integers, floats, control characters and lone surrogates, long strings,
   extra, missing and duplicated keys and items), optionally re-computing
   the manifest digest so the mutation gets past the digest check, then
   decodes the value directly and as JSON text.
3. **structured envelope**: the same over envelope templates (one per class
   and auth kind, written here).
4. **raw project env envelope**: the second byte picks staged (odd) or
   legacy (even); the rest is the SSM value →
   :func:`~leasegate.core.wire.env.parse_staged_envelope` /
   :func:`~leasegate.core.wire.env.parse_legacy_envelope`.
5. **structured project env envelope**: staged and legacy templates mutated;
   the writers' models (``StagedEnvelope``/``LegacyEnvelope``) and the
   readers must agree, and the readers never raise.

Invariants (an ``AssertionError``, or any other exception, is a finding):

* ``loads`` raises only :class:`~leasegate.core.JsonError` (documented);
  ``decode_frame``/``decode_leased_value`` never raise;
* a refusal is a ``DecodeError`` whose ``reason`` does not contain the
  canary ``CANARY`` (error texts never quote values);
* an accepted frame ``f``: ``decode_frame(encode_frame(f)) == f``; its
  encoding equals the accepted value (canonical JSON: exact re-encoding);
  canonical JSON of the encoding is stable through ``loads``; the frame's
  ``repr``/``str`` show no secret (canary) value;
* an accepted envelope ``v``: ``v.location`` is the location it was read
  for; ``encode_leased_value(v)`` decodes back to ``v``, equals the
  canonical JSON of the accepted text, and ``parse_leased_value`` agrees;
* decoding a value and decoding ``loads(json.dumps(value))`` agree;
* ``parse_staged_envelope``/``parse_legacy_envelope`` never raise; they
  return a ``Secret`` equal to the envelope's ``value`` or one of their two
  reasons; what the writers' model accepts (for the record asked for), the
  reader accepts with the same value.

Reference behavior: ``docs/protocol.md`` (strict decoding, exact
re-encoding, secrets), the codec's contract in ``leasegate.core.wire``.
Run: ``python3 fuzz/codec_harness.py [libFuzzer flags] [corpus dirs]``;
``docs/fuzzing.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "core" / "wire"))

import _harness
from _harness import DataProvider

with _harness.instrument(__name__ == "__main__"):
    from leasegate.core import (
        DecodeError,
        JsonError,
        Secret,
        canonical_dumps,
        decode,
        loads,
    )
    from leasegate.core.wire import FRAME_TYPES, decode_frame, encode_frame
    from leasegate.core.wire.credentials import (
        CredentialLocation,
        credential_parameter_name,
        decode_leased_value,
        encode_leased_value,
        parse_leased_value,
        parse_parameter_name,
    )
    from leasegate.core.wire.env import (
        LegacyEnvelope,
        StagedEnvelope,
        parse_legacy_envelope,
        parse_staged_envelope,
    )

import wire_examples

from _mutate import check_no_leak, mutate, refresh_digest

CANARY = "CANARY"

# ---------------------------------------------------------------------------
# Templates

_ENV_COMMON: dict[str, Any] = {
    "opId": "env-1-abc",
    "taskId": wire_examples.TASK,
    "runEpoch": 1,
    "runnerBootId": "boot-1",
    "streamId": "stream-1",
}


def _binding_state(key: str, binding: Any, ref: Any) -> dict[str, Any]:
    return {
        "key": key,
        "head": {"revision": 3, "generation": 2, "tombstone": ref is None, "valueRef": ref},
        "binding": binding,
        "policyEpoch": 1,
        "listingGeneration": 0,
    }


_STATES = [
    _binding_state(
        "API_KEY", None, {"kind": "staged", "stagingId": "0b4f5a4e-3c1e-4f4e-9a1b-2f3c4d5e6f70"}
    ),
    _binding_state("DB_URL", {"kind": "env"}, {"kind": "legacy", "ssmVersion": 4}),
    _binding_state("OLD", {"kind": "withhold", "reason": "policy says no"}, None),
    _binding_state("ROW", {"kind": "omit"}, {"kind": "row", "rowId": "row-1"}),
]

#: Env replica frames (``leasegate.core.wire.env``), written here: one per
#: kind, plus each ack shape.
ENV_TEMPLATES: list[dict[str, Any]] = [
    {
        "kind": "env.replica.v1.begin",
        **_ENV_COMMON,
        "attemptId": "attempt-1",
        "projectIds": ["proj-1", "proj-2"],
    },
    {
        "kind": "env.replica.v1.page",
        **_ENV_COMMON,
        "attemptId": "attempt-1",
        "projectId": "proj-1",
        "after": None,
        "recordVersion": 7,
        "records": _STATES,
        "complete": True,
    },
    {
        "kind": "env.replica.v1.apply",
        **_ENV_COMMON,
        "attemptId": None,
        "projectId": "proj-1",
        "recordVersion": 8,
        "state": _STATES[0],
        "delivery": {"streamId": "stream-1", "sequence": 5},
    },
    {
        "kind": "env.replica.v1.commit",
        **_ENV_COMMON,
        "attemptId": "attempt-1",
        "highWater": {"streamId": "stream-1", "sequence": 5},
        "versions": [
            {"projectId": "proj-1", "recordVersion": 7},
            {"projectId": "proj-2", "recordVersion": 0},
        ],
    },
]
_ACK_COMMON: dict[str, Any] = {
    "kind": "env.replica.v1.ack",
    **_ENV_COMMON,
    "attemptId": "attempt-1",
    "policyEpochs": [1, 2],
    "appliedThrough": {"streamId": "stream-1", "sequence": 4},
}
ENV_TEMPLATES += [
    {**_ACK_COMMON, "ok": True, "phase": "begun"},
    {**_ACK_COMMON, "ok": False, "phase": "page", "code": "delivery_gap", "error": "delivery_gap"},
    {
        **_ACK_COMMON,
        "ok": True,
        "phase": "page",
        "projectId": "proj-1",
        "after": None,
        "recordVersion": 7,
        "results": [
            {"state": _STATES[0], "materialization": {"kind": "installed"}},
            {"state": _STATES[2], "materialization": {"kind": "withheld", "reason": "tombstone"}},
            {
                "state": _STATES[3],
                "materialization": {"kind": "unavailable", "reason": "value_unavailable"},
            },
        ],
        "complete": True,
    },
    {
        **_ACK_COMMON,
        "ok": True,
        "phase": "applied",
        "projectId": "proj-1",
        "recordVersion": 8,
        "result": {"state": _STATES[1], "materialization": {"kind": "installed"}},
    },
    {
        **_ACK_COMMON,
        "ok": True,
        "phase": "complete",
        "highWater": {"streamId": "stream-1", "sequence": 5},
    },
]

#: Every frame template: the lease and credential examples of
#: ``tests/core/wire/wire_examples.py`` (read there), then the env frames.
FRAME_TEMPLATES: list[dict[str, Any]] = [
    *(wire_examples.frame(kind) for kind in sorted(wire_examples.FRAMES)),
    wire_examples.big_grant(),
    wire_examples.grant(files=True),
    *ENV_TEMPLATES,
]

LOCATIONS: list[CredentialLocation] = [
    CredentialLocation(
        org_id="org-1", user_id="user-1", credential_class="engine", credential_id="engine-1"
    ),
    CredentialLocation(
        org_id="org-1", user_id=None, credential_class="engine", credential_id="engine-2"
    ),
    CredentialLocation(org_id="org-1", user_id=None, credential_class="mcp", credential_id="mcp-1"),
    CredentialLocation(
        org_id="org-1", user_id="user-1", credential_class="github", credential_id="github-1"
    ),
    CredentialLocation(
        org_id="org-1", user_id="user-1", credential_class="ssh", credential_id="ssh-1"
    ),
]


def _envelope(loc: CredentialLocation, **rest: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "kind": "leased-credential",
        "orgId": loc.org_id,
        "userId": loc.user_id,
        "credentialId": loc.credential_id,
        "class": loc.credential_class,
        **rest,
    }


#: (location index, envelope) pairs; each template is valid for its location.
ENVELOPE_TEMPLATES: list[tuple[int, dict[str, Any]]] = [
    (
        0,
        _envelope(
            LOCATIONS[0],
            authKind="env",
            env={"ANTHROPIC_API_KEY": "CANARY-env-1", "OTHER": "CANARY-env-2"},
        ),
    ),
    (
        1,
        _envelope(
            LOCATIONS[1],
            authKind="config-dir",
            files={".claude/credentials.json": '{"t":"CANARY-file"}', "a/b.txt": "CANARY-x"},
        ),
    ),
    (1, _envelope(LOCATIONS[1], authKind="oauth", files={"auth.json": "CANARY-oauth"})),
    (
        2,
        _envelope(
            LOCATIONS[2],
            authKind="token",
            header={"name": "Authorization", "value": "Bearer CANARY-mcp"},
        ),
    ),
    (2, _envelope(LOCATIONS[2], authKind="oauth", accessToken="CANARY-access")),
    (3, _envelope(LOCATIONS[3], token="ghp_CANARY-github")),
    (4, _envelope(LOCATIONS[4], privateKey="-----BEGIN KEY-----\nCANARY-ssh\n-----END KEY-----\n")),
]

#: The record the project env envelopes are checked against.
PROJECT_ENV = {
    "org_id": "org-1",
    "project_id": "proj-1",
    "key": "API_KEY",
    "staging_id": "0b4f5a4e-3c1e-4f4e-9a1b-2f3c4d5e6f70",
}

#: (is staged, envelope) pairs, valid for :data:`PROJECT_ENV`.
PROJECT_ENV_TEMPLATES: list[tuple[bool, dict[str, Any]]] = [
    (
        True,
        {
            "v": 2,
            "kind": "project-env",
            "orgId": "org-1",
            "projectId": "proj-1",
            "key": "API_KEY",
            "stagingId": PROJECT_ENV["staging_id"],
            "value": "CANARY-staged",
        },
    ),
    (
        False,
        {
            "v": 1,
            "kind": "project-env",
            "orgId": "org-1",
            "projectId": "proj-1",
            "key": "API_KEY",
            "value": "CANARY-legacy",
            "updatedAt": 1_800_000_000_000,
        },
    ),
    (
        False,
        {
            "v": 1,
            "kind": "project-env",
            "projectId": "proj-1",
            "key": "API_KEY",
            "value": "",
            "updatedAt": 1.5,
        },
    ),
]

# ---------------------------------------------------------------------------
# Invariants


def check_refusal(err: DecodeError) -> None:
    """A refusal is well-formed and quotes nothing."""
    assert isinstance(err, DecodeError)
    assert type(err.field) is str
    assert type(err.reason) is str
    assert CANARY not in err.reason, "a DecodeError reason quotes a value"
    str(err)
    repr(err)


def check_frame_value(value: Any) -> None:
    """Decode ``value`` as a frame and check the round-trip invariants."""
    out = decode_frame(value)
    if isinstance(out, DecodeError):
        check_refusal(out)
        return
    assert type(out) in FRAME_TYPES, "decode_frame returned a non-frame"
    enc = encode_frame(out)
    assert decode_frame(enc) == out, "decode(encode(f)) != f"
    text = canonical_dumps(enc)
    assert text == canonical_dumps(value), "accepted value does not re-encode exactly"
    back = loads(text)
    assert canonical_dumps(back) == text, "canonical JSON of the encoding is not stable"
    again = decode_frame(back)
    assert again == out, "decode(loads(canonical(encode(f)))) != f"
    assert isinstance(again, tuple(FRAME_TYPES))
    assert canonical_dumps(encode_frame(again)) == text
    check_no_leak(out)


def check_envelope_text(text: str, loc: CredentialLocation) -> None:
    """Decode ``text`` as the SSM value at ``loc`` and check the invariants."""
    out = decode_leased_value(text, loc)
    parsed = parse_leased_value(text, loc)
    if isinstance(out, DecodeError):
        check_refusal(out)
        assert parsed is None, "parse_leased_value accepts what decode_leased_value refuses"
        return
    assert parsed == out, "parse_leased_value disagrees with decode_leased_value"
    assert out.location == loc, "accepted value names another location"
    enc = encode_leased_value(out)
    assert enc == canonical_dumps(loads(text)), "accepted envelope does not re-encode exactly"
    again = decode_leased_value(enc, loc)
    assert again == out, "decode(encode(v)) != v"
    assert not isinstance(again, DecodeError)
    assert encode_leased_value(again) == enc
    check_no_leak(out)


def check_parameter_name(text: str) -> None:
    """``parse_parameter_name`` never raises, and what it parses the
    location's ``parameter`` spells back exactly."""
    loc = parse_parameter_name(text)
    if loc is None:
        return
    assert loc.parameter == text, "a parsed parameter name does not spell back"
    assert (
        credential_parameter_name(loc.org_id, loc.user_id, loc.credential_class, loc.credential_id)
        == text
    )


def check_project_env_text(text: str, staged: bool) -> None:
    """``parse_staged_envelope``/``parse_legacy_envelope`` never raise; they
    return a ``Secret`` holding the envelope's ``value``, or one of the two
    documented reasons."""
    p = PROJECT_ENV
    if staged:
        out = parse_staged_envelope(
            text,
            org_id=p["org_id"],
            project_id=p["project_id"],
            key=p["key"],
            staging_id=p["staging_id"],
        )
    else:
        out = parse_legacy_envelope(
            text, org_id=p["org_id"], project_id=p["project_id"], key=p["key"]
        )
    if isinstance(out, Secret):
        obj = loads(text)
        assert type(obj) is dict, "accepted a non-object envelope"
        assert obj["value"] == out.reveal(), "the secret is not the envelope's value"
        assert obj["projectId"] == p["project_id"]
        assert obj["key"] == p["key"]
        assert CANARY not in repr(out)
    else:
        assert out in ("value_unavailable", "value_envelope_mismatch"), "unknown reason"


def check_project_env_value(value: Any, staged: bool) -> None:
    """A value the writers' model (``StagedEnvelope``/``LegacyEnvelope``)
    accepts, written as JSON, is accepted by the reader with that value."""
    model = StagedEnvelope if staged else LegacyEnvelope
    decoded = decode(model, value)
    if isinstance(decoded, DecodeError):
        check_refusal(decoded)
        return
    check_no_leak(decoded)
    p = PROJECT_ENV
    matches = (
        decoded.org_id == p["org_id"]
        and decoded.project_id == p["project_id"]
        and decoded.key == p["key"]
        and (not staged or decoded.staging_id == p["staging_id"])
    )
    if not matches:
        return
    text = canonical_dumps(value)
    if staged:
        out = parse_staged_envelope(text, **p)
    else:
        out = parse_legacy_envelope(
            text, org_id=p["org_id"], project_id=p["project_id"], key=p["key"]
        )
    assert isinstance(out, Secret), "the reader refuses what the writers' model accepts"
    assert out == decoded.value


def _as_json_text(value: Any) -> str | None:
    """``json.dumps(value)`` (escaping non-ASCII), or ``None`` if not JSON."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return None


def _as_json_ascii_off(value: Any) -> str | None:
    """``json.dumps(value, ensure_ascii=False)``, or ``None`` if not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return None


def _loads_or_none(text: str | bytes) -> tuple[bool, Any]:
    """``(True, loads(text))``, or ``(False, None)`` on the documented
    :class:`JsonError` (any other exception propagates: a finding)."""
    try:
        return True, loads(text)
    except JsonError as exc:
        message = str(exc)
    assert CANARY not in message, "a JsonError quotes the input"
    return False, None


# ---------------------------------------------------------------------------
# Entry point


def TestOneInput(data: bytes) -> None:
    """One fuzz input (see the module docstring for the layout).

    Raises:
        AssertionError: an invariant broke (a finding).
        Exception: anything else the codec raised (a finding).
    """
    if not data:
        return
    mode = data[0] % 6
    if mode == 0:
        ok, value = _loads_or_none(data[1:])
        if ok:
            check_frame_value(value)
    elif mode == 1:
        loc = LOCATIONS[(data[1] if len(data) > 1 else 0) % len(LOCATIONS)]
        text = data[2:].decode("utf-8", "surrogateescape")
        check_envelope_text(text, loc)
        check_parameter_name(text)
    elif mode == 2:
        fdp = DataProvider(data[1:])
        template = FRAME_TEMPLATES[fdp.int_in_range(0, len(FRAME_TEMPLATES) - 1)]
        value = mutate(fdp, template)
        if fdp.boolean():
            refresh_digest(value)
        check_frame_value(value)
        text = _as_json_text(value)
        if text is not None:
            ok, reread = _loads_or_none(text)
            if ok:
                check_frame_value(reread)
                assert decode_frame(reread) == decode_frame(value), "text and value decode apart"
    elif mode == 4:
        staged = bool(data[1] & 1) if len(data) > 1 else True
        check_project_env_text(data[2:].decode("utf-8", "surrogateescape"), staged)
    elif mode == 5:
        fdp = DataProvider(data[1:])
        staged, template = fdp.pick(PROJECT_ENV_TEMPLATES)
        value = mutate(fdp, template)
        check_project_env_value(value, staged)
        for text in (_as_json_text(value), _as_json_ascii_off(value)):
            if text is not None:
                check_project_env_text(text, staged)
    else:  # mode 3
        fdp = DataProvider(data[1:])
        loc_index, template = ENVELOPE_TEMPLATES[fdp.int_in_range(0, len(ENVELOPE_TEMPLATES) - 1)]
        if fdp.int_in_range(0, 7) == 0:
            loc_index = fdp.int_in_range(0, len(LOCATIONS) - 1)  # maybe the wrong location
        value = mutate(fdp, template)
        text = _as_json_text(value) if fdp.boolean() else None
        if text is None:
            try:
                text = json.dumps(value, ensure_ascii=False)
            except (ValueError, TypeError, RecursionError):
                return
        check_envelope_text(text, LOCATIONS[loc_index])


if __name__ == "__main__":
    _harness.main(TestOneInput)
