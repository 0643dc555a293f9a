"""ER-024, ER-098: the env replica's text fast paths equal the full paths.

* ``decode_apply_text(text)`` is ``None`` or exactly
  ``decode(EnvApply, loads(text))`` (same values, same field types), and is
  never a frame where the full path refuses the text; checked on generated
  apply values written in the compact wire form and in other forms (key
  orders, whitespace, escapes, duplicate keys, trailing data), then mutated.
* ``staged_envelope_value(raw, ...)`` is ``_staged_envelope_parsed(raw, ...)``
  on every text: generated envelopes in both orders, mutated, and the edge
  cases one character away from the fast form.
* Neither fast path is vacuous: texts of the form they target take them.
* The replica: text that is not a frame yields one ``FrameRejected`` and
  nothing else (ER-024); the same frames given as values, as text and as
  UTF-8 bytes give the same commands at every step; a secret value never
  reaches a command's ``repr``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasegate.core import DecodeError, JsonError, Secret, decode, encode, loads
from leasegate.core.replica import (
    FrameRejected,
    ReadStagedValue,
    SendAck,
)
from leasegate.core.replica._receipts import state_json
from leasegate.core.wire import _env_text, decode_apply_text
from leasegate.core.wire import env as wire_env
from leasegate.core.wire.env import EnvAck, EnvApply

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replica"))
from replica_kit import (
    BOOT,
    ORG,
    TASK,
    Driver,
    FakeReader,
    apply,
    begin,
    commit,
    js_str,
    legacy_ref,
    page,
    reads,
    sid,
    staged_ref,
    state,
)

_PARSED = wire_env._staged_envelope_parsed
_INVALID = "invalid task project environment replica frame"


def _cfg(n: int) -> settings:
    """Hypothesis settings: ``n`` examples, no deadline (the file stays < 60 s)."""
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ---------------------------------------------------------------------------
# Writing JSON text: the wire form and its variants


class Num:
    """A number written verbatim (``1e2``, ``1.0``, ``01``...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Num({self.text!r})"


def _esc_u(ch: str) -> str:
    return "".join(f"\\u{u:04x}" for u in _units(ch))


def _units(ch: str) -> list[int]:
    b = ch.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2)]


def _str(s: str, esc: str) -> str:
    """A JSON string: ``wire`` as the transports write it (lone surrogates
    escaped), ``raw`` (lone surrogates left raw), ``ascii``, ``first`` (its
    first character as ``\\uXXXX``), ``all`` (every character so)."""
    if esc == "raw":
        return json.dumps(s, ensure_ascii=False)
    if esc == "ascii":
        return json.dumps(s)
    if esc == "first" and s:
        return '"' + _esc_u(s[0]) + js_str(s[1:])[1:]
    if esc == "all":
        return '"' + "".join(_esc_u(c) for c in s) + '"'
    return js_str(s)


def dump(v: Any, *, order: str = "wire", space: bool = False, esc: str = "wire") -> str:
    """JSON text of ``v``; ``order="wire"``, no space and ``esc="wire"`` is
    ``json.dumps(v, separators=(",", ":"), ensure_ascii=False)`` (with lone
    surrogates escaped, as ``JSON.stringify`` writes them)."""
    comma, colon = (", ", ": ") if space else (",", ":")
    if isinstance(v, Num):
        return v.text
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, int | float):
        return json.dumps(v)
    if isinstance(v, str):
        return _str(v, esc)
    if isinstance(v, list | tuple):
        return "[" + comma.join(dump(x, order=order, space=space, esc=esc) for x in v) + "]"
    keys = list(v)
    if order == "sorted":
        keys.sort()
    elif order == "reversed":
        keys.reverse()
    body = comma.join(
        _str(k, esc) + colon + dump(v[k], order=order, space=space, esc=esc) for k in keys
    )
    return "{" + body + "}"


def compact(v: Any) -> str:
    """The wire's compact form: ``json.dumps(v, separators=(",", ":"),
    ensure_ascii=False)`` (``v`` holds no lone surrogate)."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# Text-level changes of a whole JSON text (duplicate keys, trailing data...).
_TWEAKS: dict[str, Any] = {
    "dup_first": lambda t: '{"kind":null,' + t[1:] if t.startswith("{") else t,
    "dup_last_same": lambda t: t[:-1] + ',"kind":"env.replica.v1.apply"}',
    "dup_last_other": lambda t: t[:-1] + ',"runEpoch":2}',
    "dup_head": lambda t: t.replace('"head":{', '"head":{"revision":"x",', 1),
    "lead_ws": lambda t: " " + t,
    "trail_ws": lambda t: t + "\n",
    "trail_x": lambda t: t + "x",
    "trail_obj": lambda t: t + "{}",
    "trail_nul": lambda t: t + "\x00",
    "bom": lambda t: "\ufeff" + t,
    "inner_ws": lambda t: t.replace(":", ": ", 1),
    "inner_tab": lambda t: t.replace(",", ",\t", 2),
    "slash": lambda t: t.replace("-", "\\u002d", 1),
    "unclosed": lambda t: t[:-1],
    "double_close": lambda t: t + "}",
}

_MUT_CHARS = list(
    '"{}[],:0123456789-+.eE \\/tfnrsula\t\n\x00\x1f\x7fAé\u2028\uffff\U0001f600\ud800'
)
_SPECIAL = frozenset('"{}[],:0123456789tfn\\')


def _mutate(text: str, ops: list[tuple[str, int, str]]) -> str:
    """Insert, delete or replace characters (``near`` replaces the k-th
    structurally meaningful character: quote, brace, digit, comma...;
    ``digit`` inserts a digit into a number)."""
    for op, pos, ch in ops:
        if op == "digit":
            # Lengthen a number: insert a digit after the k-th digit.
            where = [i for i, c in enumerate(text) if c.isdigit()]
            if where:
                i = where[pos % len(where)] + 1
                text = text[:i] + str(pos % 10) + text[i:]
            continue
        if op == "near":
            where = [i for i, c in enumerate(text) if c in _SPECIAL]
            if not where:
                continue
            i = where[pos % len(where)]
            text = text[:i] + ch + text[i + 1 :]
            continue
        i = pos % (len(text) + 1)
        if op == "ins":
            text = text[:i] + ch + text[i:]
        elif op == "del":
            text = text[:i] + text[i + 1 :]
        else:
            text = text[:i] + ch + text[i + 1 :]
    return text


_MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["ins", "del", "rep", "near", "digit"]),
        st.integers(0, 10_000),
        st.sampled_from(_MUT_CHARS),
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def texts_of(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> tuple[str, bool]:
    """A JSON text of a drawn value: the compact wire form two times in
    three, else another order, spacing or escaping; maybe tweaked, maybe mutated.
    Returns ``(text, wire)``: ``wire`` when the text is the untouched wire form."""
    v = draw(values)
    if draw(st.integers(0, 2)) > 0:
        text, wire = dump(v), True
    else:
        text = dump(
            v,
            order=draw(st.sampled_from(["wire", "sorted", "reversed"])),
            space=draw(st.booleans()),
            esc=draw(st.sampled_from(["wire", "raw", "ascii", "first", "all"])),
        )
        wire = False
    if draw(st.integers(0, 3)) == 0:
        for name in draw(st.lists(st.sampled_from(sorted(_TWEAKS)), min_size=1, max_size=2)):
            text, wire = _TWEAKS[name](text), False
    if draw(st.integers(0, 2)) == 0:
        text, wire = _mutate(text, draw(_MUTATIONS)), False
    return text, wire


# ---------------------------------------------------------------------------
# Apply frame values


@st.composite
def _mostly(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """``good`` nineteen times in twenty, else ``bad``."""
    return draw(bad) if draw(st.integers(0, 19)) == 0 else draw(good)


_ASTRAL = "\U0001f600"
_ALNUM = "ABCXYZabcxyz0189"


def _ascii_text(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=lo, max_size=hi)


def _op_ids(hi: int) -> st.SearchStrategy[str]:
    """``OP_ID`` strings of at most ``hi`` characters."""
    return _ascii_text(_ALNUM + "_-", 1, hi)


def _segments(hi: int) -> st.SearchStrategy[str]:
    """Path segments (never ``.`` or ``..``) of at most ``hi`` characters."""
    return _ascii_text(_ALNUM + "_.-", 1, hi).filter(lambda s: s not in {".", ".."})


def _env_keys(hi: int) -> st.SearchStrategy[str]:
    """Env keys of at most ``hi`` characters."""
    return st.builds(str.__add__, _ascii_text("ABZ_az", 1, 1), _ascii_text(_ALNUM + "_", 0, hi - 1))


_STAGING_IDS = st.integers(0, 2**128 - 1).map(lambda n: str(uuid.UUID(int=n)))
# Characters a fast-form string may hold: nothing to escape, no control
# character, no surrogate, nothing outside the Basic Multilingual Plane.
_BMP_FREE = st.characters(
    min_codepoint=0x20,
    max_codepoint=0xFFFF,
    blacklist_characters='"\\\x7f',
    blacklist_categories=("Cs",),
)
_NO_CONTROL = st.characters(blacklist_categories=("Cc",), blacklist_characters="\x7f")

# Each field: (fast form, other valid values, invalid values).
_OP = (
    st.one_of(
        _op_ids(8),
        st.sampled_from(["a" * 128, "Z-_9" * 32]),
    ),
    st.sampled_from(["op", "a" * 128]),
    st.sampled_from(["", "b" * 129, "a b", "é", "x.y", 'a"', _ASTRAL, "a\\b", 1, None]),
)
_TEXT_FAST = st.one_of(
    st.text(_BMP_FREE, min_size=1, max_size=12),
    st.sampled_from(["t1", "é" * 128, "\uffff" * 128, "a" * 128, "\x85\u2028"]),
)
_TEXT_MORE = st.one_of(
    st.text(_NO_CONTROL, min_size=1, max_size=12),
    st.sampled_from(
        [_ASTRAL * 64, "a" * 126 + _ASTRAL, 'q"uote', "back\\slash", "\ud800", "a\udc00b"]
    ),
)
_TEXT_BAD = st.sampled_from(
    [
        "",
        "a" * 129,
        "é" * 129,
        _ASTRAL * 64 + "a",
        "a" * 127 + _ASTRAL,  # 128 code points, 129 UTF-16 units
        "a\x7f",
        "\x7f",
        "a\x00",
        "a\x1f",
        "\n",
        1,
        None,
    ]
)
_INT_BAD = st.sampled_from(
    [
        -1,
        2**53,
        2**53,
        2**53 + 1,
        10**16 - 1,
        -(2**53),
        10**400,
        True,
        False,
        None,
        "1",
        1.0,
        0.0,
        -0.0,
        1.5,
        1e2,
        Num("1e2"),
        Num("1E0"),
        Num("1.0"),
        Num("-0"),
        Num("01"),
        Num("1e400"),
        Num("9007199254740993"),
        [],
        {},
    ]
)
_NAT = (
    st.one_of(st.integers(0, 10**15 - 1), st.sampled_from([0, 1, 10**15 - 1])),
    st.one_of(st.integers(10**15, 2**53 - 1), st.sampled_from([10**15, 2**53 - 1])),
    _INT_BAD,
)
_POS = (
    st.one_of(st.integers(1, 10**15 - 1), st.sampled_from([1, 10**15 - 1])),
    _NAT[1],
    st.one_of(_INT_BAD, st.just(0)),
)
_SEG = (
    st.one_of(
        _segments(8),
        st.sampled_from(["p1", "...", ".a", "a.", "c" * 128]),
    ),
    st.just("p1"),
    st.sampled_from([".", "..", "", "c" * 129, "a/b", "é", 1]),
)
_KEY = (
    st.one_of(
        _env_keys(9),
        st.sampled_from(["A", "_", "K" * 256]),
    ),
    st.just("A"),
    st.sampled_from(["", "1A", "a-b", "K" * 257, "é", None]),
)
_REF = (
    st.one_of(
        st.none(),
        st.integers(0, 2**32 - 1).map(sid).map(lambda s: {"kind": "staged", "stagingId": s}),
        _POS[0].map(lambda v: {"kind": "legacy", "ssmVersion": v}),
    ),
    st.one_of(
        _OP[0].map(lambda r: {"kind": "row", "rowId": r}),
        _NAT[1].map(lambda v: {"kind": "legacy", "ssmVersion": v}),
    ),
    st.sampled_from(
        [
            {"kind": "staged"},
            {"kind": "staged", "stagingId": sid(1).upper()},
            {"kind": "staged", "stagingId": sid(1)[:-1]},
            {"kind": "legacy", "ssmVersion": 0},
            {"kind": "legacy", "ssmVersion": True},
            {"kind": "other"},
            {"kind": "staged", "stagingId": sid(1), "x": 1},
            {"kind": "row", "rowId": ""},
            "x",
            [],
        ]
    ),
)
_REASON_BAD = st.sampled_from(["", "r" * 129, "a\x01", "\x7f", "r" * 127 + _ASTRAL, None, 1])
_BINDING = (
    st.one_of(
        st.none(),
        st.just({"kind": "env"}),
        st.just({"kind": "omit"}),
        st.one_of(_TEXT_FAST, st.just("r" * 128)).map(lambda r: {"kind": "withhold", "reason": r}),
    ),
    _TEXT_MORE.map(lambda r: {"kind": "withhold", "reason": r}),
    st.one_of(
        _REASON_BAD.map(lambda r: {"kind": "withhold", "reason": r}),
        st.sampled_from([{"kind": "withhold"}, {"kind": "env", "x": 1}, {"kind": "x"}, "env", 1]),
    ),
)
_EPOCH = (st.one_of(st.none(), _POS[0]), _POS[1], _POS[2])
_TOMB = (st.booleans(), st.booleans(), st.sampled_from([0, 1, "true", None]))
_KIND = (
    st.just("env.replica.v1.apply"),
    st.just("env.replica.v1.apply"),
    st.sampled_from(["env.replica.v1.begin", "env.replica.v1.applyx", "", None]),
)
_ATTEMPT_ID = (st.one_of(st.none(), _OP[0]), st.none(), _OP[2])


@st.composite
def apply_values(draw: st.DrawFn) -> dict[str, Any]:
    """Apply frame values in the model's field order. Half of them keep to
    the fast form; the others also take valid values outside it (astral
    characters, escapes, 16-digit integers, ``row`` references). Each field
    is invalid one time in fifty (fast form) or twenty (others); a key is
    missing or extra rarely."""
    fam = draw(st.booleans())

    def pick(field: tuple[Any, Any, Any]) -> Any:
        fast, more, bad = field
        if draw(st.integers(0, 49 if fam else 19)) == 0:
            return draw(bad)
        return draw(more if not fam and draw(st.integers(0, 2)) == 0 else fast)

    stream = pick(_OP)
    head = {
        "revision": pick(_NAT),
        "generation": pick(_NAT),
        "tombstone": pick(_TOMB),
        "valueRef": pick(_REF),
    }
    st_ = {
        "key": pick(_KEY),
        "head": head,
        "binding": pick(_BINDING),
        "policyEpoch": pick(_EPOCH),
        "listingGeneration": pick(_NAT),
    }
    frame = {
        "kind": pick(_KIND),
        "opId": pick(_OP),
        "taskId": pick((_TEXT_FAST, _TEXT_MORE, _TEXT_BAD)),
        "runEpoch": pick(_POS),
        "runnerBootId": pick(_OP),
        "streamId": stream,
        "attemptId": pick(_ATTEMPT_ID),
        "projectId": pick(_SEG),
        "recordVersion": pick(_NAT),
        "state": st_,
        "delivery": {
            "streamId": pick((st.just(stream), st.just(stream), st.sampled_from(["x", "", "S1"]))),
            "sequence": pick(_POS),
        },
    }
    if draw(st.integers(0, 29)) == 0:
        where = draw(st.sampled_from([frame, st_, head, frame["delivery"]]))
        if draw(st.booleans()):
            where.pop(draw(st.sampled_from(sorted(where))))
        else:
            where["extra"] = 1
    return frame


# The family the fast path targets, over its whole range: staged/legacy/null
# references, strings with nothing to escape and inside the Basic
# Multilingual Plane, integers of at most 15 digits.
_F_OP = st.one_of(_op_ids(128), st.just("o" * 128))
_F_NAT = st.one_of(st.integers(0, 10**15 - 1), st.sampled_from([0, 10**15 - 1]))
_F_POS = st.one_of(st.integers(1, 10**15 - 1), st.sampled_from([1, 10**15 - 1]))
_F_TEXT = st.text(_BMP_FREE, min_size=1, max_size=128)


@st.composite
def fast_apply_values(draw: st.DrawFn) -> dict[str, Any]:
    stream = draw(_F_OP)
    ref = draw(
        st.one_of(
            st.none(),
            _STAGING_IDS.map(staged_ref_of),
            _F_POS.map(lambda v: {"kind": "legacy", "ssmVersion": v}),
        )
    )
    binding = draw(
        st.one_of(
            st.none(),
            st.sampled_from([{"kind": "env"}, {"kind": "omit"}]),
            st.one_of(_F_TEXT, st.just("r" * 128)).map(lambda r: {"kind": "withhold", "reason": r}),
        )
    )
    return {
        "kind": "env.replica.v1.apply",
        "opId": draw(_F_OP),
        "taskId": draw(st.one_of(_F_TEXT, st.just("\uffff" * 128))),
        "runEpoch": draw(_F_POS),
        "runnerBootId": draw(_F_OP),
        "streamId": stream,
        "attemptId": draw(st.one_of(st.none(), _F_OP)),
        "projectId": draw(st.one_of(_segments(128), st.just("p" * 128))),
        "recordVersion": draw(_F_NAT),
        "state": {
            "key": draw(st.one_of(_env_keys(256), st.just("K" * 256))),
            "head": {
                "revision": draw(_F_NAT),
                "generation": draw(_F_NAT),
                "tombstone": draw(st.booleans()),
                "valueRef": ref,
            },
            "binding": binding,
            "policyEpoch": draw(st.one_of(st.none(), _F_POS)),
            "listingGeneration": draw(_F_NAT),
        },
        "delivery": {"streamId": stream, "sequence": draw(_F_POS)},
    }


def staged_ref_of(staging_id: str) -> dict[str, Any]:
    return {"kind": "staged", "stagingId": staging_id}


# ---------------------------------------------------------------------------
# The apply contract


def _exact(x: Any) -> Any:
    """A structure that differs whenever a value or a type differs (``True``
    vs ``1``, ``1.0`` vs ``1``, ``str`` vs a subclass)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x), tuple(_exact(getattr(x, f.name)) for f in dataclasses.fields(x)))
    if isinstance(x, tuple):
        return (tuple, tuple(_exact(i) for i in x))
    return (type(x), x)


def check_apply(text: str) -> EnvApply | None:
    """Assert the contract of ``decode_apply_text`` on ``text``; return its result."""
    fast = decode_apply_text(text)
    try:
        value = loads(text)
    except JsonError:
        assert fast is None, text
        return None
    full = decode(EnvApply, value)
    if fast is not None:
        assert not isinstance(full, DecodeError), (text, full)
        assert fast == full
        assert repr(fast) == repr(full)
        assert _exact(fast) == _exact(full)
        assert encode(fast) == encode(full)
    return fast


def test_er024_apply_text_contract_on_generated_and_mutated_texts() -> None:
    hits: Counter[str] = Counter()

    @_cfg(900)
    @given(got=texts_of(apply_values()))
    def run(got: tuple[str, bool]) -> None:
        text, wire = got
        fast = check_apply(text)
        hits["examples"] += 1
        hits["wire"] += wire
        hits["hit"] += fast is not None

    run()
    # Not vacuous: a healthy fraction of the generated texts took the fast path.
    assert hits["hit"] >= hits["examples"] // 30, hits


@_cfg(300)
@given(value=fast_apply_values())
def test_er024_apply_text_fast_path_takes_every_compact_text_of_its_family(
    value: dict[str, Any],
) -> None:
    text = compact(value)
    fast = check_apply(text)
    assert fast is not None, text
    assert encode(fast) == value
    # The same frame written any other way is decoded equally by the full path.
    for other in (
        dump(value, order="sorted"),
        dump(value, space=True),
        dump(value, esc="first"),
        " " + text,
    ):
        assert check_apply(other) in (None, fast)


@_cfg(300)
@given(value=fast_apply_values(), ops=_MUTATIONS)
def test_er024_apply_text_contract_on_mutated_fast_texts(
    value: dict[str, Any], ops: list[tuple[str, int, str]]
) -> None:
    check_apply(_mutate(compact(value), ops))


def _valid_apply(**over: Any) -> dict[str, Any]:
    f = apply(state("A"), 1)
    f.update(over)
    return f


def _with_state(**over: Any) -> dict[str, Any]:
    s = state("A")
    s.update(over)
    return apply(s, 1)


def _with_head(**over: Any) -> dict[str, Any]:
    s = state("A")
    s["head"].update(over)
    return apply(s, 1)


_FAST_EXAMPLES = [
    _valid_apply(),
    _valid_apply(attemptId="A1"),
    _with_head(valueRef=legacy_ref(10**15 - 1)),
    _with_head(valueRef=None, tombstone=True),
    _with_state(binding={"kind": "env"}, policyEpoch=None),
    _with_state(binding={"kind": "omit"}),
    _with_state(binding={"kind": "withhold", "reason": "é policy \uffff"}),
    _with_state(binding={"kind": "withhold", "reason": "r" * 128}),
    _with_state(key="K" * 256, listingGeneration=10**15 - 1),
    _valid_apply(opId="o" * 128, taskId="\u00e9" * 128, projectId="p" * 128, runEpoch=10**15 - 1),
    _valid_apply(projectId="...", recordVersion=0),
]


@pytest.mark.parametrize("value", _FAST_EXAMPLES, ids=range(len(_FAST_EXAMPLES)))
def test_er024_apply_text_fast_path_examples(value: dict[str, Any]) -> None:
    fast = check_apply(compact(value))
    assert fast is not None
    assert encode(fast) == value


_OTHER_EXAMPLES = [
    # Valid frames outside the fast form: the full path decides.
    _with_head(valueRef={"kind": "row", "rowId": "r1"}),
    _valid_apply(runEpoch=10**15),
    _valid_apply(runEpoch=2**53 - 1),
    _valid_apply(taskId=_ASTRAL * 64),
    _valid_apply(taskId="\ud800"),
    _with_state(binding={"kind": "withhold", "reason": 'say "no"'}),
    _with_state(binding={"kind": "withhold", "reason": "back\\slash"}),
    _with_state(binding={"kind": "withhold", "reason": _ASTRAL}),
]
_INVALID_EXAMPLES = [
    _valid_apply(opId=""),
    _valid_apply(taskId=""),
    _valid_apply(runnerBootId=""),
    _valid_apply(attemptId=""),
    _valid_apply(projectId=""),
    _valid_apply(streamId="", delivery={"streamId": "", "sequence": 1}),
    _with_state(key=""),
    _with_state(binding={"kind": "withhold", "reason": ""}),
    _with_head(valueRef={"kind": "staged", "stagingId": ""}),
    _valid_apply(recordVersion=2**53),
    _valid_apply(recordVersion=10**16 - 1),
    _valid_apply(delivery={"streamId": "S1", "sequence": 2**53}),
    _with_head(revision=2**53),
    _with_head(generation=2**53),
    _with_head(valueRef=legacy_ref(2**53)),
    _with_state(policyEpoch=2**53),
    _with_state(listingGeneration=2**53),
    _valid_apply(taskId="a" * 127 + _ASTRAL),
    _valid_apply(taskId="t\x7f"),
    _valid_apply(taskId="t" * 129),
    _valid_apply(opId="o" * 129),
    _valid_apply(projectId="."),
    _valid_apply(projectId=".."),
    _valid_apply(projectId="p" * 129),
    _with_state(key="K" * 257),
    _valid_apply(runEpoch=0),
    _valid_apply(runEpoch=2**53),
    _valid_apply(runEpoch=True),
    _valid_apply(runEpoch=1.0),
    _valid_apply(delivery={"streamId": "S2", "sequence": 1}),
    _valid_apply(delivery={"streamId": "S1", "sequence": 0}),
    _with_head(valueRef=legacy_ref(0)),
    _with_head(tombstone=1),
    _with_state(policyEpoch=0),
    _with_state(binding={"kind": "withhold", "reason": "r" * 129}),
    _with_state(binding={"kind": "withhold", "reason": "a\tb"}),
]


@pytest.mark.parametrize("value", _OTHER_EXAMPLES, ids=range(len(_OTHER_EXAMPLES)))
def test_er024_apply_text_valid_frames_outside_the_fast_form(value: dict[str, Any]) -> None:
    text = dump(value)
    assert isinstance(decode(EnvApply, loads(text)), EnvApply)
    check_apply(text)


@pytest.mark.parametrize("value", _INVALID_EXAMPLES, ids=range(len(_INVALID_EXAMPLES)))
def test_er024_apply_text_never_accepts_an_invalid_frame(value: dict[str, Any]) -> None:
    text = dump(value)
    assert isinstance(decode(EnvApply, loads(text)), DecodeError)
    assert decode_apply_text(text) is None


@pytest.mark.parametrize(
    "text",
    [
        compact(_valid_apply()).replace("1}}", "1.0}}"),
        compact(_valid_apply()).replace("1}}", "1e0}}"),
        compact(_valid_apply()).replace('"A"', '"\\u0041"'),
        compact(_valid_apply()).replace('"runEpoch":1', '"runEpoch":01'),
        compact(_valid_apply()).replace('"runEpoch":1', '"runEpoch":-1'),
        compact(_valid_apply())[:-1],
        compact(_valid_apply()) + "}",
        compact(_valid_apply()) + " ",
        '{"kind":null,' + compact(_valid_apply())[1:],
        compact(_valid_apply())[:-2] + ',"sequence":0}}',
        "",
        "null",
        "[]",
    ],
)
def test_er024_apply_text_edge_texts(text: str) -> None:
    check_apply(text)


@pytest.mark.parametrize("text", [None, b"{}", 1, bytearray(b"x")])
def test_er024_apply_text_never_raises_on_non_str(text: Any) -> None:
    assert decode_apply_text(text) is None


_MATCH = getattr(_env_text, "_decode_apply_match", None)


@pytest.mark.skipif(_MATCH is None, reason="no separate match helper in this version")
@_cfg(200)
@given(value=fast_apply_values(), ops=st.one_of(st.just([]), _MUTATIONS))
def test_er055_apply_match_state_text_is_the_state_json(
    value: dict[str, Any], ops: list[tuple[str, int, str]]
) -> None:
    """The replica takes an apply's state text from the frame's text (its
    fingerprint and ledger cost, ER-055, ER-114): it must be the text the
    replica writes for the decoded state, and the frame ``decode_apply_text``'s."""
    text = _mutate(compact(value), ops) if ops else compact(value)
    got = _MATCH(text)  # type: ignore[misc]
    fast = check_apply(text)
    if got is None:
        assert fast is None
        return
    frame, state_text = got
    assert frame == fast
    assert repr(frame) == repr(fast)
    assert state_text == state_json(frame.state)
    assert loads(state_text) == encode(frame.state)


# ---------------------------------------------------------------------------
# Staged envelopes (ER-098)

_SID = sid(7)
_ENV_ARGS = ("org1", "p1", "API_KEY", _SID)


def _head(order: str, org: str, project: str, key: str, staging: str) -> str:
    """The text a compact envelope has before its value (without escapes)."""
    if order == "insertion":
        return (
            f'{{"v":2,"kind":"project-env","orgId":"{org}","projectId":"{project}",'
            f'"key":"{key}","stagingId":"{staging}","value":"'
        )
    return (
        f'{{"key":"{key}","kind":"project-env","orgId":"{org}",'
        f'"projectId":"{project}","stagingId":"{staging}","v":2,"value":"'
    )


def _envelope(
    org: str, project: str, key: str, staging: str, value: Any, *, v: Any = 2, kind: Any = None
) -> dict[str, Any]:
    return {
        "v": v,
        "kind": "project-env" if kind is None else kind,
        "orgId": org,
        "projectId": project,
        "key": key,
        "stagingId": staging,
        "value": value,
    }


def check_staged(raw: Any, org: str, project: str, key: str, staging: str) -> bool:
    """Assert ``staged_envelope_value`` equals the full parse; ``True`` when
    the fast path decided (the full parse was not called)."""
    calls: list[int] = []

    def counted(*args: Any) -> Any:
        calls.append(1)
        return _PARSED(*args)

    with mock.patch.object(wire_env, "_staged_envelope_parsed", counted):
        got = wire_env.staged_envelope_value(raw, org, project, key, staging)
    want = _PARSED(raw, org, project, key, staging)
    if isinstance(want, Secret):
        assert type(got) is Secret, (raw, got)
        assert type(got.reveal()) is str
        assert got.reveal() == want.reveal(), raw
    else:
        assert got == want, (raw, got, want)
    return not calls


_ORG_IDS = st.one_of(
    st.sampled_from(
        ["org1", 'o"q', "o\\b", "o\x01", "o\x7f", "é", _ASTRAL, "\ud800", "", "org 1", "o/g"]
    ),
    st.text(max_size=6),
)
_PROJECTS = st.sampled_from(["p1", "p.1", ".", "p-_9", 'p"', "é", ""])
_KEYS = st.sampled_from(["API_KEY", "A", "_", "a\\b", ""])
_STAGINGS = st.sampled_from([_SID, sid(8), "X"])
_VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", 'a"b', "a\\b", "\x00", "\x1f", "\x7f", "\ud800", "\udfff\ud800", _ASTRAL, "é\u2028"]
    ),
)


@st.composite
def envelope_cases(draw: st.DrawFn) -> tuple[str, tuple[str, str, str, str]]:
    """``(raw, args)``: an envelope for the record ``args`` (sometimes for
    another record), in insertion or canonical order, maybe changed."""
    args = (draw(_ORG_IDS), draw(_PROJECTS), draw(_KEYS), draw(_STAGINGS))
    fields = list(args)
    if draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(0, 3))
        fields[i] = draw([_ORG_IDS, _PROJECTS, _KEYS, _STAGINGS][i])
    value = draw(st.one_of(_VALUES, _VALUES, st.sampled_from([None, 1, [], {}])))
    v = draw(
        _mostly(
            st.just(2),
            st.sampled_from([1, Num("2.0"), Num("2e0"), Num("20e-1"), "2", True, None]),
        )
    )
    kind = draw(_mostly(st.just("project-env"), st.sampled_from(["project-envx", "", 2])))
    env = _envelope(*fields, value, v=v, kind=kind)
    if draw(st.integers(0, 9)) == 0:
        if draw(st.booleans()):
            env.pop(draw(st.sampled_from(sorted(env))))
        else:
            env["extra"] = 1
    order = draw(st.sampled_from(["wire", "sorted", "wire", "sorted", "reversed"]))
    if draw(st.booleans()):
        raw = dump(env, order=order)
    else:
        raw = dump(
            env,
            order=order,
            space=draw(st.booleans()),
            esc=draw(st.sampled_from(["wire", "raw", "ascii", "first", "all"])),
        )
    cut = draw(st.integers(0, 5))
    if cut == 0:
        raw = _mutate(raw, draw(_MUTATIONS))
    elif cut == 1:
        # Cut inside the value (or anywhere), then close the text somehow.
        end = (
            len(raw) - draw(st.integers(0, 6))
            if draw(st.booleans())
            else draw(st.integers(0, len(raw)))
        )
        raw = raw[:end] + draw(st.sampled_from(["", "}", '"}', '""}', "x}", '"']))
    elif cut == 2:
        raw += draw(st.sampled_from([" ", "\n", "x", "}", '"}', "\x00"]))
    return raw, args


@_cfg(900)
@given(case=envelope_cases())
def test_er098_staged_envelope_value_equals_the_full_parse(
    case: tuple[str, tuple[str, str, str, str]],
) -> None:
    raw, args = case
    check_staged(raw, *args)


_PLAIN_ID = st.text(
    st.characters(blacklist_characters='"\\', blacklist_categories=("Cc", "Cs")), max_size=8
)
_PLAIN_VALUE = st.text(
    st.characters(blacklist_characters='"\\', blacklist_categories=("Cs",)).filter(
        lambda c: c >= " "
    ),
    max_size=24,
)


@_cfg(300)
@given(
    ids=st.tuples(_PLAIN_ID, _PLAIN_ID, _PLAIN_ID, _PLAIN_ID),
    value=_PLAIN_VALUE,
    order=st.sampled_from(["wire", "sorted"]),
    ops=_MUTATIONS,
)
def test_er098_staged_fast_path_takes_compact_envelopes_and_mutations_agree(
    ids: tuple[str, str, str, str], value: str, order: str, ops: list[tuple[str, int, str]]
) -> None:
    raw = dump(_envelope(*ids, value), order=order)
    # The compact envelope of plain strings is the fast form: decided there.
    assert check_staged(raw, *ids)
    got = wire_env.staged_envelope_value(raw, *ids)
    assert isinstance(got, Secret)
    assert got.reveal() == value
    check_staged(_mutate(raw, ops), *ids)


# What follows an envelope's head in the edge cases (one character away
# from the fast form, or a value that needs the full parse).
_EDGE_TAILS = [
    "}",  # unterminated string
    "",  # the head alone
    '"',
    '"}',  # empty value
    '""}',
    'a"b"}',
    'a\\"}',
    'a\\\\"}',
    'a\\u0041"}',
    '\\ud800"}',
    '\ud800"}',  # a raw lone surrogate
    '\ud83d\ude00"}',
    'é\U0001f600\u2028"}',
    '\x01"}',
    '\x1f"}',
    '\x7f"}',
    '\t"}',
    'x"} ',
    "x}",  # unterminated, one character longer than the head + "}"
    "xy}",
    'a"b}',
    'x"',
    'x" }',
    'x"}x',
    'x"}}',
    'x"}"}',
    'x","value":"y"}',  # a duplicate value key: the last wins
    'x","extra":"y"}',
    'x","v":3,"w":"y"}',
]


def _edge_raws() -> list[tuple[str, tuple[str, str, str, str]]]:
    a = _ENV_ARGS
    out: list[tuple[str, tuple[str, str, str, str]]] = []
    for order in ("insertion", "canonical"):
        h = _head(order, *a)
        out += [(h + tail, a) for tail in _EDGE_TAILS]
        out.append((" " + h + 'x"}', a))
        for org in ('o"q', "o\\b", "o\x01", "o\x7f", "é", _ASTRAL, "\ud800", ""):
            args = (org, *a[1:])
            out.append((_head(order, *args) + 'x"}', args))
            out.append((dump(_envelope(*args, "x"), order="wire"), args))
            out.append((dump(_envelope(*args, "x"), order="sorted"), args))
        # An org id that would spell the rest of the head by itself.
        tricky = ('org1","projectId":"p1', "p1", "API_KEY", _SID)
        out.append((_head(order, *tricky) + 'x"}', tricky))
    raw = dump(_envelope(*a, "x"))
    out += [
        (raw.replace('"v":2', '"v":2.0'), a),
        (raw.replace('"v":2', '"v":2e0'), a),
        (raw.replace('"v":2', '"v":"2"'), a),
        (raw.replace('"v":2', '"v":true'), a),
        (json.dumps(_envelope(*a, "x")), a),
        (json.dumps(_envelope(*a, "x"), sort_keys=True), a),
        ("", a),
        ("null", a),
        ("[]", a),
        ("{}", a),
        ("{", a),
    ]
    return out


@pytest.mark.parametrize(("raw", "args"), _edge_raws())
def test_er098_staged_envelope_edge_cases(raw: str, args: tuple[str, str, str, str]) -> None:
    check_staged(raw, *args)


def test_er098_staged_envelope_edge_results() -> None:
    """A few edge results spelled out (not only "equal to the full parse")."""

    def value(raw: str) -> str:
        got = wire_env.staged_envelope_value(raw, *_ENV_ARGS)
        return got.reveal() if isinstance(got, Secret) else f"<{got}>"

    for order in ("insertion", "canonical"):
        h = _head(order, *_ENV_ARGS)
        assert value(h + "}") == "<value_unavailable>"
        assert value(h + '"}') == ""
        assert value(h + '\x7f"}') == "\x7f"
        assert value(h + 'x","value":"y"}') == "y"
        assert value(h + 'x"}x') == "<value_unavailable>"
        assert value(h + 'x","w":"y"}') == "<value_envelope_mismatch>"
        assert check_staged(h + 'CANARY-é\U0001f600"}', *_ENV_ARGS)


_FAST_HELPER = getattr(wire_env, "_staged_envelope_fast", None)


@pytest.mark.skipif(_FAST_HELPER is None, reason="no separate fast helper in this version")
@_cfg(300)
@given(case=envelope_cases())
def test_er098_replica_fast_helper_is_none_or_the_full_parse(
    case: tuple[str, tuple[str, str, str, str]],
) -> None:
    """The replica calls the helper directly when its org id is plain (its
    other ids are plain by their patterns): ``None`` or the full result."""
    raw, args = case
    if not wire_env._plain("".join(args)):
        return
    got = _FAST_HELPER(raw, *args)  # type: ignore[misc]
    if got is not None:
        want = _PARSED(raw, *args)
        assert isinstance(want, Secret), raw
        assert got.reveal() == want.reveal()


def test_er098_staged_envelope_value_never_raises_on_bytes() -> None:
    raw: Any = dump(_envelope(*_ENV_ARGS, "x")).encode()
    assert isinstance(_PARSED(raw, *_ENV_ARGS), Secret)  # the full parse reads UTF-8 bytes
    got = wire_env.staged_envelope_value(raw, *_ENV_ARGS)
    assert got == _PARSED(raw, *_ENV_ARGS)


@pytest.mark.parametrize("bad", [None, 7, b"org1", ("org1",)])
def test_er098_staged_envelope_value_never_raises_on_non_string_ids(bad: Any) -> None:
    raw = dump(_envelope(*_ENV_ARGS, "x"))
    for i in range(4):
        args: list[Any] = list(_ENV_ARGS)
        args[i] = bad
        assert wire_env.staged_envelope_value(raw, *args) == "value_envelope_mismatch"


# ---------------------------------------------------------------------------
# The replica, driven by events


class CompactReader(FakeReader):
    """A reader answering staged reads with compact envelopes of value
    ``CANARY-{key}-...``: staging id ``n`` odd gets canonical order, even
    insertion order; 3 gets another org's envelope, 4 an unparsable one."""

    def answer(self, cmd: Any, now: int = 0) -> Any:
        if isinstance(cmd, ReadStagedValue):
            k = ("staged", cmd.project_id, cmd.key, cmd.staging_id)
            n = int(cmd.staging_id[:8], 16)
            org = "other-org" if n == 3 else ORG
            env = _envelope(org, cmd.project_id, cmd.key, cmd.staging_id, canary(cmd))
            raw = dump(env, order="sorted" if n % 2 else "wire")
            self.values.setdefault(k, raw[:-1] if n == 4 else raw)
        return super().answer(cmd, now)


def canary(cmd: Any) -> str:
    return f"CANARY-{cmd.key}-{cmd.staging_id[:8]}-é{_ASTRAL}"


def _norm(x: Any) -> Any:
    """Commands as comparable data: secrets revealed, acks compared by ``==``
    (and ``repr``, so ``True`` never passes for ``1``), readers by name."""
    if isinstance(x, Secret):
        return ("Secret", x.reveal())
    if isinstance(x, EnvAck):
        return (x, repr(x))
    if isinstance(x, FakeReader):
        return repr(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (
            type(x).__name__,
            tuple((f.name, _norm(getattr(x, f.name))) for f in dataclasses.fields(x)),
        )
    if isinstance(x, list | tuple):
        return tuple(_norm(i) for i in x)
    return x


def _observe(d: Driver) -> Any:
    status = d.m.read_status(TASK)
    projects = () if status is None else status.project_ids
    return _norm(
        (
            status,
            d.m.read_view(TASK, 1, projects),
            d.m.ledger_totals,
            d.m.task_ledger(TASK),
            d.m.is_ready(TASK, 1),
        )
    )


def _driver() -> Driver:
    d = Driver()
    d.readers[TASK] = CompactReader(f"r-{TASK}")
    d.activate()
    return d


_KEYS_R = ["A", "B", "C"]
_REFS_R = st.one_of(st.integers(1, 6).map(staged_ref), st.integers(1, 3).map(legacy_ref))
_BINDINGS_R = st.sampled_from(
    [
        None,
        None,
        {"kind": "env"},
        {"kind": "omit"},
        {"kind": "withhold", "reason": 'é "r"'},
        {"kind": "withhold", "reason": "é ü\u2028\uffff"},
    ]
)
_STATES = st.builds(
    lambda key, rev, gen, tomb, ref, binding, epoch, lg: state(
        key,
        rev=rev,
        gen=gen,
        tomb=tomb,
        ref=None if tomb else ref,
        binding=binding,
        epoch=epoch,
        lg=lg,
    ),
    st.sampled_from(_KEYS_R),
    st.integers(0, 2),
    st.integers(0, 2),
    st.booleans(),
    st.one_of(
        st.integers(1, 4).map(staged_ref),
        st.integers(1, 2).map(legacy_ref),
        st.just({"kind": "row", "rowId": "r1"}),
    ),
    _BINDINGS_R,
    st.sampled_from([None, 1, 1, 2]),
    st.integers(0, 1),
)
_ATTEMPT = st.sampled_from(["A1", "A2"])
_STREAM = st.sampled_from(["S1", "S1", "S2"])
_PROJECT = st.sampled_from(["p1", "p1", "p2"])


@st.composite
def replica_frames(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["begin", "page", "apply", "apply", "apply", "commit", "bad"]))
    if kind == "begin":
        return begin(
            draw(_ATTEMPT),
            draw(st.sampled_from([("p1",), ("p1", "p2"), ()])),
            stream=draw(_STREAM),
        )
    if kind == "page":
        recs = {s["key"]: s for s in draw(st.lists(_STATES, max_size=3))}
        return page(
            [recs[k] for k in sorted(recs)],
            project=draw(_PROJECT),
            version=draw(st.integers(0, 3)),
            complete=draw(st.booleans()),
            attempt=draw(_ATTEMPT),
            stream=draw(_STREAM),
        )
    if kind == "apply":
        return apply(
            draw(_STATES),
            draw(st.integers(0, 5)),
            project=draw(_PROJECT),
            version=draw(st.integers(0, 4)),
            attempt=draw(st.one_of(st.none(), _ATTEMPT)),
            stream=draw(_STREAM),
            run=draw(st.sampled_from([1, 1, 1, 2])),
            boot=draw(st.sampled_from([BOOT, BOOT, BOOT, "boot2"])),
        )
    if kind == "commit":
        return commit(
            draw(st.sampled_from([[("p1", 1)], [("p1", 1), ("p2", 1)], [("p1", 2)], []])),
            seq=draw(st.integers(0, 5)),
            attempt=draw(_ATTEMPT),
            stream=draw(_STREAM),
        )
    base = apply(draw(_STATES), 1)
    return draw(
        st.sampled_from(
            [
                {**base, "runEpoch": True},
                {**base, "kind": "env.replica.v1.ack"},
                {**base, "delivery": {"streamId": "S9", "sequence": 1}},
                {**base, "extra": 1},
                {k: v for k, v in base.items() if k != "state"},
                {**begin(), "projectIds": ["p1", "p1"]},
                [base],
                "frame",
                7,
                None,
            ]
        )
    )


@st.composite
def replica_runs(draw: st.DrawFn) -> list[tuple[Any, str]]:
    """Frames with the way their text is written: mostly a snapshot, then
    live applies that follow it (next sequence, next record version, a new
    record or a new value generation), sometimes off by one; random frames;
    and replays of earlier frames written in another way (the compact form
    if the first was not, else sorted)."""
    run: list[tuple[Any, str]] = []
    styles = st.sampled_from(["wire", "wire", "sorted", "spaced", "ascii"])
    if draw(st.integers(0, 3)) > 0:
        prefix = [begin(), page([state("A"), state("B", ref=staged_ref(2))]), commit()]
        run += [(f, draw(styles)) for f in prefix]
    seq, version = 0, 1
    heads: dict[str, list[Any]] = {"A": [1, 1, None, 1], "B": [1, 1, None, 1]}
    for _ in range(draw(st.integers(1, 12))):
        what = draw(st.integers(0, 5))
        if run and what < 2:
            frame, style = run[draw(st.integers(0, len(run) - 1))]
            run.append((frame, "sorted" if style == "wire" else "wire"))
            continue
        if what < 5:
            key = draw(st.sampled_from(["A", "B", "C", "D"]))
            if key not in heads:
                heads[key] = [1, 0, draw(_BINDINGS_R), draw(st.sampled_from([1, 2, None]))]
            h = heads[key]
            h[1] += 1
            s = state(key, rev=h[0], gen=h[1], ref=draw(_REFS_R), binding=h[2], epoch=h[3])
            off = draw(st.sampled_from([(1, 1)] * 6 + [(2, 1), (1, 2), (0, 1), (1, 0)]))
            frame = apply(s, seq + off[0], version=version + off[1])
            if off == (1, 1):
                seq, version = seq + 1, version + 1
        else:
            frame = draw(replica_frames())
        run.append((frame, draw(styles)))
    return run


def _text(frame: Any, style: str) -> str:
    if style == "sorted":
        return dump(frame, order="sorted")
    if style == "spaced":
        return dump(frame, space=True)
    if style == "ascii":
        return dump(frame, esc="ascii")
    return dump(frame)


def test_er024_frames_as_values_text_and_bytes_give_the_same_commands() -> None:
    seen: Counter[str] = Counter()

    @_cfg(200)
    @given(run=replica_runs())
    def check(run: list[tuple[Any, str]]) -> None:
        as_value, as_text, as_bytes = _driver(), _driver(), _driver()
        styles: dict[str, set[str]] = {}
        for frame, style in run:
            text = _text(frame, style)
            if decode_apply_text(text) is not None:
                seen["fast"] += 1
                # The same apply given before in another form (its state's
                # text then written by the replica, now taken from the text).
                seen["fast_replay_other_form"] += bool(styles.get(text, set()) - {style})
            styles.setdefault(_text(frame, "wire"), set()).add(style)
            cmds = as_value.step(frame)
            seen["applied"] += any(
                type(c) is SendAck and c.ack.ok and c.ack.phase == "applied" for c in cmds
            )
            want = _norm(cmds)
            assert _norm(as_text.step(text)) == want, (frame, style)
            assert _norm(as_bytes.step(text.encode())) == want, (frame, style)
            observed = _observe(as_value)
            assert _observe(as_text) == observed
            assert _observe(as_bytes) == observed

    check()
    # Not vacuous: many texts were applies of the fast form, some of them
    # replays of an apply first given in another form; many applies applied.
    assert seen["fast"] >= 200, seen
    assert seen["fast_replay_other_form"] >= 20, seen
    assert seen["applied"] >= 100, seen


_NOT_JSON: list[Any] = [
    "",
    " ",
    "{",
    "nan",
    "NaN",
    "Infinity",
    "[1,]",
    '{"a":1}x',
    compact(apply(state("A"), 1)) + "x",
    compact(apply(state("A"), 1))[:-1],
    "\ufeff" + compact(apply(state("A"), 1)),
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",  # an encoded surrogate
    bytearray(b'{"kind":"\xff"}'),
    compact(apply(state("A"), 1)).encode("utf-16"),
]
_NOT_FRAMES: list[Any] = [
    "null",
    "[]",
    "1",
    '"x"',
    "{}",
    b"{}",
    compact({**apply(state("A"), 1), "kind": "env.replica.v1.ack"}),
    compact({**apply(state("A"), 1), "runEpoch": True}),
    compact({**apply(state("A"), 1), "runEpoch": 1.0}),
    compact(apply(state("A"), 0)),
    compact({**apply(state("A"), 1), "delivery": {"streamId": "S2", "sequence": 1}}),
    compact({**apply(state("A"), 1), "taskId": "t\x7f"}).encode(),
    compact({**begin(), "projectIds": ["p1", "p1"]}),
    compact({**commit(), "extra": 1}).encode(),
]


@pytest.mark.parametrize("bad", _NOT_JSON + _NOT_FRAMES, ids=range(len(_NOT_JSON + _NOT_FRAMES)))
def test_er024_text_that_is_not_a_frame_is_rejected_and_changes_nothing(bad: Any) -> None:
    if any(bad is x for x in _NOT_JSON):
        want = FrameRejected(error=_INVALID, field="")
    else:
        # JSON, not a frame: refused as its value is (same offending field).
        (want,) = _driver().raw(loads(bad))
        assert type(want) is FrameRejected
    d, control = _driver(), _driver()
    pending = []
    for x in (d, control):
        x.ready_snapshot()
        # A read left pending: the task's lane is busy.
        (rd,) = reads(x.raw(compact(apply(state("C"), 1, version=2))))
        pending.append(rd)
    before = _observe(d)
    got = d.raw(bad)
    assert got == [want]
    assert _observe(d) == before
    # The rejected text never entered the lane: what follows is answered as
    # on a replica that never saw it.
    answered = [
        _norm(x.send(x.readers[TASK].answer(rd)))
        for x, rd in zip((d, control), pending, strict=True)
    ]
    assert answered[0] == answered[1]
    assert any(c[0] == "SendAck" for c in answered[0])
    nxt = compact(apply(state("B", rev=2), 2, version=3))
    assert _norm(d.step(nxt)) == _norm(control.step(nxt))
    assert _observe(d) == _observe(control)


def test_er024_compact_apply_text_and_bytes_are_accepted_like_the_value() -> None:
    frame = apply(state("C", ref=legacy_ref(1)), 1, version=2)
    text = compact(frame)
    assert decode_apply_text(text) is not None
    got = []
    for form in (frame, text, text.encode(), bytearray(text.encode())):
        d = _driver()
        d.ready_snapshot()
        got.append(d.step(form))
    assert [_norm(g) for g in got[1:]] == [_norm(got[0])] * 3
    (ack,) = [c.ack for c in got[1] if type(c) is SendAck]
    assert ack.ok
    assert ack.result is not None
    assert ack.result.state.key == "C"


def test_er098_secret_values_never_reach_a_command() -> None:
    parsed: list[int] = []

    def counted(*args: Any) -> Any:
        parsed.append(1)
        return _PARSED(*args)

    d = _driver()
    reader = d.readers[TASK]
    # Legacy reads get an envelope whose value is a canary too.
    reader.values[("legacy", "p1", "L", 1)] = (
        json.dumps(
            {
                "v": 1,
                "kind": "project-env",
                "projectId": "p1",
                "key": "L",
                "value": "CANARY-legacy",
                "updatedAt": 1,
            }
        ),
        1,
    )
    records = [
        state("A", ref=staged_ref(1)),  # canonical order
        state("B", ref=staged_ref(2)),  # insertion order
        state("C", ref=staged_ref(3)),  # another org's envelope
        state("D", ref=staged_ref(4)),  # not JSON
        state("E", ref=staged_ref(5)),
        state("L", ref=legacy_ref(1)),
    ]
    cmds: list[Any] = []
    with mock.patch.object(wire_env, "_staged_envelope_parsed", counted):
        cmds += d.step(compact(begin()))
        cmds += d.step(compact(page(records)).encode())
        cmds += d.step(compact(commit(seq=0)))
        snapshot_parses = len(parsed)
        for i, key in enumerate(["A", "B", "E"], start=1):
            live = apply(state(key, gen=2, ref=staged_ref(10 + i)), i, version=1 + i)
            cmds += d.step(compact(live))
        live_parses = len(parsed) - snapshot_parses
    # Frames that carry the canary and are refused.
    bad_frames: list[Any] = [
        compact(apply(state("A"), 9)) + "CANARY-trailing",
        compact({**apply(state("A"), 9), "taskId": "CANARY-task\x01"}),
        compact({**apply(state("A"), 9), "attemptId": "CANARY attempt"}).encode(),
        b"CANARY-bytes\xff",
        "CANARY-not-json",
    ]
    for bad in bad_frames:
        cmds += d.step(bad)
    rejected = [c for c in cmds if isinstance(c, FrameRejected)]
    assert len(rejected) == len(bad_frames)
    view = d.m.read_view(TASK, 1, ("p1",))
    assert view is not None
    values = {e.state.key: e.value.reveal() for p in view.projects for e in p.entries if e.value}
    # Not vacuous: canaries were installed, by the fast path and by the parse.
    assert values["A"] == f"CANARY-A-{sid(11)[:8]}-é{_ASTRAL}"  # canonical order
    assert values["B"] == f"CANARY-B-{sid(12)[:8]}-é{_ASTRAL}"  # insertion order
    assert values["L"] == "CANARY-legacy"
    assert "C" not in values
    assert "D" not in values
    assert snapshot_parses >= 2, "the other org's and the unparsable envelopes were parsed"
    assert live_parses == 0, "the live applies' compact envelopes did not take the fast path"
    for c in cmds:
        assert "CANARY" not in repr(c), c
        if isinstance(c, SendAck):
            assert "CANARY" not in json.dumps(encode(c.ack)), c
        if isinstance(c, FrameRejected):
            assert "CANARY" not in c.field
            assert "CANARY" not in c.error
