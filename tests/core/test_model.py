"""The validator's generated fast path agrees with its reference decoder.

``_model`` compiles each model twice: a reference decoder that raises the
precise field path and reason, and a generated fast path that only accepts
and hands every doubtful value to the reference decoder. These tests check,
on valid and mutated inputs of every wire model, that the two agree: same
model instance, or the same error.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import sys
from pathlib import Path
from typing import Any, Final, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lease_kit import typed

from leasegate.core import DecodeError, Model, Secret, decode, encode, spec
from leasegate.core._model import _decoder_for, _Fail, clear_pattern_caches

sys.path.insert(0, str(Path(__file__).parent / "wire"))
import wire_examples as ex

from leasegate.core.wire import lease as wl


def _outcome(dec: Any, value: Any) -> Any:
    try:
        return ("ok", dec(value))
    except _Fail as fail:
        return ("fail", tuple(fail.path), fail.reason)


def _pair(cls: type) -> tuple[Any, Any]:
    fast = _decoder_for(cls)
    slow = fast.__globals__["_slow"]
    return fast, slow


def _samples() -> list[tuple[type, Any]]:
    g = ex.big_grant()
    lease = g["lease"]
    m = lease["manifest"]
    out: list[tuple[type, Any]] = [
        (wl.LeaseGrant, g),
        (wl.TaskLease, lease),
        (wl.Manifest, m),
        (wl.ManifestEngine, m["engines"][0]),
        (wl.ManifestMcp, m["mcp"][0]),
        (wl.ManifestMcp, ex.mcp_entry(9, auth_kind="none")),
        (wl.ManifestStatic, m["github"]),
        (wl.ManifestProject, m["projects"][0]),
        (wl.LeaseSession, lease["sessions"][0]),
        (wl.LeaseFiles, lease["files"]),
    ]
    for kind, frame in ex.FRAMES.items():
        cls = next(c for c in wl.FRAMES if c.TAG is not None and c.TAG[1] == kind)
        out.append((cls, frame))
    return out


SAMPLES = _samples()

REPLACEMENTS = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            0,
            -1,
            2**53,
            2**53 - 1,
            5.0,
            "",
            "x" * 129,
            "😀" * 65,
            "a\n",
            "\x00",
            "env",
            "none",
            [],
            {},
            "US-EAST-1",
            "..",
        ]
    ),
    st.integers(),
    st.text(max_size=20),
)


@st.composite
def mutations(draw: st.DrawFn) -> tuple[type, Any]:
    cls, sample = draw(st.sampled_from(SAMPLES))
    value = copy.deepcopy(sample)
    keys = list(value)
    action = draw(st.sampled_from(["replace", "delete", "add", "keep"]))
    key = draw(st.sampled_from(keys))
    if action == "replace":
        value[key] = draw(REPLACEMENTS)
    elif action == "delete":
        del value[key]
    elif action == "add":
        value[draw(st.sampled_from(["extra", *keys]))] = draw(REPLACEMENTS)
    return cls, value


@pytest.mark.parametrize(("cls", "value"), SAMPLES, ids=lambda x: getattr(x, "__name__", ""))
def test_LR_163_fast_and_reference_decoders_agree_on_valid_values(cls: type, value: Any) -> None:
    fast, slow = _pair(cls)
    a, b = _outcome(fast, value), _outcome(slow, value)
    assert a[0] == "ok"
    assert a == b
    clear_pattern_caches()  # cold caches decode the same
    assert _outcome(fast, value) == b


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_LR_163_fast_and_reference_decoders_agree_on_mutated_values(case: tuple[type, Any]) -> None:
    cls, value = case
    fast, slow = _pair(cls)
    assert _outcome(fast, value) == _outcome(slow, value)


# ---------------------------------------------------------------------------
# Validator features the codec relies on


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Lit(Model):
    mode: Literal["a", "b"] = spec("mode")
    n: Literal[1, 2] = spec("n")


@pytest.mark.parametrize("bad", [[], {}, [1], True, 1.0, None])
def test_LR_163_literal_field_refuses_unhashable_and_lookalike_values(bad: Any) -> None:
    err = decode(_Lit, {"mode": "a", "n": bad})
    assert isinstance(err, DecodeError)
    assert (err.field, err.reason) == ("n", "not an allowed value")
    err = decode(_Lit, {"mode": bad, "n": 1})
    assert isinstance(err, DecodeError)
    assert err.field == "mode"


def test_LR_163_literal_field_accepts_its_values() -> None:
    assert decode(_Lit, {"mode": "b", "n": 2}) == _Lit(mode="b", n=2)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Sec(Model):
    token: Secret = spec("token", min_len=1, max_len=4, no_control=True)
    opt: Secret | None = spec("opt", pattern="[a-z]+")


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"token": "CANARY", "opt": None}, "token"),
        ({"token": "ab\x01", "opt": None}, "token"),
        ({"token": "", "opt": None}, "token"),
        ({"token": "ab", "opt": "CANARY"}, "opt"),
        ({"token": "ab", "opt": 1}, "opt"),
    ],
)
def test_LR_158_secret_fields_are_checked_and_never_quoted(value: Any, field: str) -> None:
    err = decode(_Sec, value)
    assert isinstance(err, DecodeError)
    assert err.field == field
    assert "CANARY" not in str(err)


def test_LR_158_secret_fields_decode_to_secrets_and_encode_back() -> None:
    out = decode(_Sec, {"token": "ab", "opt": "xyz"})
    assert out == _Sec(token=Secret("ab"), opt=Secret("xyz"))
    assert isinstance(out, _Sec)
    assert encode(out) == {"token": "ab", "opt": "xyz"}
    assert "xyz" not in repr(out)


# ---------------------------------------------------------------------------
# The whole fast path against the reference decoders alone
#
# ``reference_decoder`` compiles the rules with no fast path at any depth (the
# pairs above still reach nested fast decoders through the reference's
# fields). Every value the codec fuzz harness decodes, replaying its corpus
# and generated inputs, must decode to the same instance (same types all the
# way down) or the same error, with warm and with cold pattern caches.

_FUZZ = Path(__file__).resolve().parents[2] / "fuzz"


def _recorded_decodes(
    monkeypatch: pytest.MonkeyPatch, inputs: list[bytes]
) -> list[tuple[Any, Any]]:
    """``(model, value)`` for every value the codec harness decodes on ``inputs``."""
    sys.path.insert(0, str(_FUZZ))
    import _harness

    codec = _harness.load_harness("codec_harness")
    from leasegate.core.wire import _FRAME_UNION, credentials, decode_frame

    seen: list[tuple[Any, Any]] = []

    def record_frame(value: Any) -> Any:
        seen.append((_FRAME_UNION, copy.deepcopy(value)))
        return decode_frame(value)

    def record(model: Any, value: Any) -> Any:
        seen.append((model, copy.deepcopy(value)))
        return decode(model, value)

    monkeypatch.setattr(codec, "decode_frame", record_frame)
    monkeypatch.setattr(codec, "decode", record)
    # Envelope routes are made on first use: start with none, each made
    # with a recording decoder.
    monkeypatch.setattr(credentials, "_ROUTES", {})
    monkeypatch.setattr(credentials, "decoder", lambda model: lambda value: record(model, value))
    for data in inputs:
        codec.TestOneInput(data)
    return seen


def _codec_inputs() -> list[bytes]:
    sys.path.insert(0, str(_FUZZ))
    import _harness

    known = _harness.known_bugs()
    corpus = [
        path.read_bytes()
        for path in _harness.corpus_files("codec_harness")
        if f"codec_harness/{path.name}" not in known
    ]
    # Generated: the structured modes (2: frames, 3: credential envelopes,
    # 5: project env envelopes) over seeded random choices.
    rng = random.Random(18)
    generated = [bytes([mode]) + rng.randbytes(96) for mode in (2, 3, 5) for _ in range(300)]
    return corpus + generated


def test_LR_163_fast_path_equals_the_reference_decoders_on_the_codec_fuzz_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leasegate.core._model import reference_decoder

    decodes = _recorded_decodes(monkeypatch, _codec_inputs())
    monkeypatch.undo()
    models = {model for model, _ in decodes}
    assert len(decodes) > 1000  # the harness reached the codec
    assert len(models) >= 5
    accepted = 0
    for model, value in decodes:
        want = typed(reference_decoder(model)(copy.deepcopy(value)))
        clear_pattern_caches()
        cold = typed(decode(model, copy.deepcopy(value)))
        warm = typed(decode(model, copy.deepcopy(value)))
        assert cold == want
        assert warm == want
        accepted += want[0] is not DecodeError
    assert accepted > 100  # and not only refusals


def test_LR_163_reference_decoders_have_no_fast_path_at_any_depth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leasegate.core._model import _decode, reference_decoder

    value = ex.big_grant()
    fast_grant = decode(wl.LeaseGrant, copy.deepcopy(value))
    assert typed(reference_decoder(wl.LeaseGrant)(copy.deepcopy(value))) == typed(fast_grant)
    # A nested fast decoder that accepted anything would change nothing: the
    # reference compiles its own nested decoders.
    calls: list[Any] = []

    def accept_anything(v: Any) -> Any:
        calls.append(v)
        return v

    monkeypatch.setattr(_decode, "_REFERENCE_DECODERS", {})
    monkeypatch.setitem(_decode._DECODERS, wl.ManifestEngine, accept_anything)
    monkeypatch.setitem(_decode._COMPILED, wl.ManifestEngine, accept_anything)
    broken = copy.deepcopy(value)
    broken["lease"]["manifest"]["engines"][0]["engine"] = "NOT A NAME"
    assert reference_decoder(wl.LeaseGrant)(broken) == DecodeError(
        "lease.manifest.engines[0].engine", "does not match pattern"
    )
    assert typed(reference_decoder(wl.LeaseGrant)(copy.deepcopy(value))) == typed(fast_grant)
    assert calls == []


# ---------------------------------------------------------------------------
# Maps of strings (an engine envelope's ``env``), decoded by the fast path


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Env(Model):
    env: dict[str, Secret] = spec(
        "env", key_pattern="[A-Z_][A-Z0-9_]*", min_items=1, max_items=3, pattern="[^\x00]*"
    )
    tags: dict[str, str] = spec("tags", max_len=4)


_ENV_OK: Final = {"env": {"A": "1", "B_2": "x"}, "tags": {"k": "abcd"}}


@pytest.mark.parametrize(
    "env",
    [
        {"A": "1"},
        {"A": "1", "B": "2", "C": "3"},
        {},
        {"A": "1", "B": "2", "C": "3", "D": "4"},
        {"a": "1"},
        {"A": "1\x00"},
        {"A": 1},
        {"A": None},
        {1: "1"},
        {"A": Secret("1")},
        [("A", "1")],
        None,
    ],
)
@pytest.mark.parametrize("tags", [{"k": "abcd"}, {"k": "abcde"}, {"k": "\ud83d\ude00\ud83d"}, {}])
def test_LR_163_fast_path_decodes_string_maps_as_the_reference_does(env: Any, tags: Any) -> None:
    from leasegate.core._model import decoder, reference_decoder

    assert "for k, s in x.items()" in _pair(_Env)[0].__globals__["SOURCE"]  # decoded inline
    value = {"env": env, "tags": tags}  # (decoders never change their input)
    want = typed(reference_decoder(_Env)(value))
    assert typed(decoder(_Env)(value)) == want
    clear_pattern_caches()
    assert typed(decoder(_Env)(value)) == want


def test_LR_163_remembered_map_keys_are_one_object() -> None:
    first = decode(_Env, copy.deepcopy(_ENV_OK))
    second = decode(_Env, copy.deepcopy(_ENV_OK))
    assert isinstance(first, _Env)
    assert isinstance(second, _Env)
    assert [id(k) for k in first.env] == [id(k) for k in second.env]
    assert all(type(s) is Secret for s in second.env.values())
