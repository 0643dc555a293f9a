"""Property tests: no input makes the codec raise; whatever decodes re-encodes exactly."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import wire_examples as ex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasegate.core import DecodeError, loads
from leasegate.core.wire import FRAME_TYPES, decode_frame, encode_frame
from leasegate.core.wire.credentials import (
    CredentialLocation,
    decode_leased_value,
    encode_leased_value,
    parse_leased_value,
    parse_parameter_name,
)

KINDS = sorted(cls.TAG[1] for cls in FRAME_TYPES if cls.TAG is not None)
WIRE_KEYS = sorted(
    {k for f in ex.FRAMES.values() for k in f}
    | set(ex.lease())
    | set(ex.manifest())
    | set(ex.engine_entry(0))
    | set(ex.mcp_entry(0))
    | set(ex.session())
)

EDGE_SCALARS = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        1,
        2**53 - 1,
        2**53,
        -(2**53),
        5.0,
        0.5,
        float("nan"),
        float("inf"),
        "",
        "x" * 128,
        "x" * 129,
        "😀" * 64,
        "😀" * 65,
        "a\n",
        "\x00",
        "\x7f",
        "\ud800",
        "lease.grant.v1",
        "credentials",
        "env",
        "none",
    ]
)
KEYS = st.one_of(st.sampled_from(WIRE_KEYS), st.text(max_size=8))
SCALARS = st.one_of(
    EDGE_SCALARS,
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(KINDS),
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=6),
        # Objects that dispatch to a real frame kind, so decoding goes deep.
        st.builds(
            lambda kind, rest: {"kind": kind, **rest},
            st.sampled_from(KINDS),
            st.dictionaries(KEYS, children, max_size=6),
        ),
    ),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_LR_018_decode_frame_never_raises_for_any_value(value: Any) -> None:
    out = decode_frame(value)
    if isinstance(out, DecodeError):
        assert isinstance(out.field, str)
        assert isinstance(out.reason, str)
    else:
        assert encode_frame(out) == value


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


@st.composite
def mutated_frames(draw: st.DrawFn) -> Any:
    """A valid example frame with one node replaced, removed or added to."""
    kind = draw(st.sampled_from([*sorted(ex.FRAMES), "big"]))
    value = ex.big_grant() if kind == "big" else ex.frame(kind)
    paths = _paths(value)
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if not path:
        return draw(JSON) if action == "replace" else value
    parent: Any = value
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if action == "replace":
        parent[last] = draw(st.one_of(EDGE_SCALARS, JSON))
    elif action == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][draw(KEYS)] = draw(SCALARS)
    elif isinstance(parent[last], list):
        parent[last].append(draw(JSON))
    else:
        parent[last] = draw(SCALARS)
    return value


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_LR_018_mutated_frames_never_raise_and_accepted_ones_round_trip(value: Any) -> None:
    before = copy.deepcopy(value) if not _has_nan(value) else None
    out = decode_frame(value)
    if before is not None:
        assert value == before  # decoding never mutates its input
    if not isinstance(out, DecodeError):
        encoded = encode_frame(out)
        assert encoded == value
        assert json.dumps(encoded, sort_keys=True) == json.dumps(value, sort_keys=True)
        assert decode_frame(encoded) == out


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    return False


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(alphabet="/uaiorgsuerdntlxcmphbk.-_:\n", max_size=60).map(lambda s: "/uai/" + s),
        st.binary(max_size=50),
        SCALARS,
    )
)
def test_LR_028_parse_parameter_name_never_raises(name: Any) -> None:
    loc = parse_parameter_name(name)
    if loc is not None:
        assert loc.parameter == name


LOCATION = CredentialLocation(
    org_id="org-1", user_id="user-1", credential_class="engine", credential_id="cred-1"
)


@st.composite
def envelope_texts(draw: st.DrawFn) -> str:
    base: dict[str, Any] = {
        "v": 1,
        "kind": "leased-credential",
        "class": draw(st.sampled_from(["engine", "mcp", "github", "ssh", "x"])),
        "orgId": "org-1",
        "userId": "user-1",
        "credentialId": "cred-1",
        "authKind": draw(st.sampled_from(["env", "config-dir", "oauth", "token", "none"])),
    }
    for key in draw(
        st.lists(
            st.sampled_from(
                [
                    "env",
                    "files",
                    "header",
                    "token",
                    "privateKey",
                    "accessToken",
                    "v",
                    "authKind",
                    "orgId",
                ]
            ),
            max_size=3,
        )
    ):
        base[key] = draw(JSON)
    return draw(st.one_of(st.just(json.dumps(base)), st.text(max_size=50)))


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(envelope_texts())
def test_LR_032_parse_leased_value_never_raises(raw: str) -> None:
    value = parse_leased_value(raw, LOCATION)
    err = decode_leased_value(raw, LOCATION)
    assert (value is None) == isinstance(err, DecodeError)
    if value is not None:
        assert parse_leased_value(encode_leased_value(value), LOCATION) == value
        assert loads(encode_leased_value(value)) == loads(raw)
