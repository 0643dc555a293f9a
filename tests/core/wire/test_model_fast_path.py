"""The validator's fast path: shortcuts that must never change what is accepted.

``_model`` generates a fast decoder per model that only *accepts*; the
reference decoder decides every doubtful value. The shortcuts checked here:

* a length limit an ASCII-only pattern already bounds is not re-checked
  (``_ascii_width`` decides which patterns are ASCII-only, conservatively);
* other length limits use ``len`` (code points) as a quick bound on UTF-16
  units and measure exactly only near the limit;
* a tagged union field dispatches on its tag inline;
* instances are built through a mutable twin class then re-classed
  (``constructor``, also used by the replica for acks and commands).

Each test compares the fast decoder with the reference decoder, or with an
independent computation, on the values where a shortcut could go wrong.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_env_frames import SAMPLES as ENV_SAMPLES

from leasegate.core import DecodeError, Model, Secret, decode, spec
from leasegate.core._base import Event
from leasegate.core._model import _ascii_width, _decoder_for, _Fail, constructor, field_specs
from leasegate.core._model._construct import _twin
from leasegate.core.replica import NotifyChange, ReadStagedValue, SendAck
from leasegate.core.wire import FRAME_TYPES, _common, env, lease


def _outcome(dec: Any, value: Any) -> Any:
    try:
        return ("ok", dec(value))
    except _Fail as fail:
        return ("fail", tuple(fail.path), fail.reason)


def _fast_and_slow(cls: type) -> tuple[Any, Any]:
    fast = _decoder_for(cls)
    return fast, fast.__globals__["_slow"]


def lease_session_value() -> dict[str, Any]:
    return {
        "id": "s-1",
        "purpose": "credentials",
        "accessKeyId": "ASIAEXAMPLEEXAMPLE01",
        "secretAccessKey": "CANARY-a",
        "sessionToken": "CANARY-t",
        "expiresAt": 5,
    }


def _utf16(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


# ---------------------------------------------------------------------------
# Which patterns are ASCII-only, and their match widths


@pytest.mark.parametrize(
    ("pattern", "width"),
    [
        (_common.OP_ID_PATTERN, (1, 128)),
        (_common.PATH_SEGMENT_PATTERN, (1, 128)),
        (_common.PROJECT_ENV_KEY_PATTERN, (1, None)),
        (_common.PROJECT_ENV_STAGING_ID_PATTERN, (36, 36)),
        (_common.DIGEST_PATTERN, (64, 64)),
        (_common.REGION_PATTERN, (6, None)),
        (r"a|bcd", (1, 3)),
        (r"(?:ab){2,3}x?", (4, 7)),
        # Not ASCII-only (or not analysed): the length checks stay.
        (r"[^a]", None),
        (r".", None),
        (r"\w+", None),
        (r"\d", None),
        (r"(?i)k", None),  # matches KELVIN SIGN U+212A
        (r"(?i:k)", None),
        ("é", None),
        (r"[a-é]", None),
        (r"(a)\1", None),
    ],
)
def test_LR_163_ascii_width_is_exact_or_declines(pattern: str, width: Any) -> None:
    assert _ascii_width(re.compile(pattern)) == width


def _declared_patterns() -> list[str]:
    out = set()
    for cls in [*FRAME_TYPES, *_models_of(lease), *_models_of(env)]:
        for _w, _tp, sp in field_specs(cls).values():
            if sp.pattern is not None:
                out.add(sp.pattern.pattern)
    return sorted(out)


def _models_of(module: Any) -> list[type[Model]]:
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, Model) and dataclasses.is_dataclass(v)
    ]


@pytest.mark.parametrize("pattern", _declared_patterns())
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_LR_163_every_match_of_an_ascii_pattern_is_ascii_within_its_width(
    pattern: str, data: st.DataObject
) -> None:
    width = _ascii_width(re.compile(pattern))
    if width is None:
        return
    text = data.draw(st.from_regex(re.compile(pattern), fullmatch=True))
    assert text.isascii()
    assert width[0] <= len(text)
    assert width[1] is None or len(text) <= width[1]


# ---------------------------------------------------------------------------
# Length limits in UTF-16 units, fast and slow


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Lengths(Model):
    short: str = spec("short", min_len=2, max_len=5)
    upper: str = spec("upper", max_len=4)
    lower: str = spec("lower", min_len=3)
    # An ASCII pattern that does not bound the length: the length is checked.
    keyed: str = spec("keyed", pattern=r"[A-Z]+", max_len=3)
    # A pattern that is not ASCII-only: the exact UTF-16 check stays.
    wide: str = spec("wide", pattern=r"[^/]*", max_len=3)


_TEXTS = [
    "",
    "a",
    "ab",
    "abcd",
    "abcde",
    "abcdef",
    "\U0001f600",
    "\U0001f600a",
    "\U0001f600\U0001f600",
    "\U0001f600\U0001f600\U0001f600",
    "é",
    "éé",
    "ABC",
    "ABCD",
    "A\U0001f600",
    "\ud800",
    "\ud800\udc00",
]
_OK = {"short": "ab", "upper": "", "lower": "abc", "keyed": "A", "wide": ""}
_RULES = {
    "short": lambda s: 2 <= _utf16(s) <= 5,
    "upper": lambda s: _utf16(s) <= 4,
    "lower": lambda s: _utf16(s) >= 3,
    "keyed": lambda s: re.fullmatch(r"[A-Z]+", s) is not None and _utf16(s) <= 3,
    "wide": lambda s: "/" not in s and _utf16(s) <= 3,
}


@pytest.mark.parametrize("field", sorted(_OK))
@pytest.mark.parametrize("text", _TEXTS)
def test_LR_163_fast_length_checks_count_utf16_units(field: str, text: str) -> None:
    fast, slow = _fast_and_slow(_Lengths)
    value = {**_OK, field: text}
    fast_got, slow_got = _outcome(fast, value), _outcome(slow, value)
    assert fast_got == slow_got
    assert (fast_got[0] == "ok") == _RULES[field](text)


def _str_fields(cls: type[Model]) -> list[str]:
    return [w for w, tp, sp in field_specs(cls).values() if sp.max_len or sp.min_len]


@pytest.mark.parametrize(("cls", "wire"), ENV_SAMPLES[:4], ids=lambda x: getattr(x, "__name__", ""))
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 127, 128, 129, 256, 257])
@pytest.mark.parametrize("ch", ["a", "é", "\U0001f600", "A"])
def test_ER_024_env_frame_lengths_fast_equals_reference(
    cls: type[Model], wire: dict[str, Any], n: int, ch: str
) -> None:
    fast, slow = _fast_and_slow(cls)
    for name in _str_fields(cls):
        value = copy.deepcopy(wire)
        value[name] = ch * n
        assert _outcome(fast, value) == _outcome(slow, value)
    if cls in (env.EnvPage, env.EnvApply):
        value = copy.deepcopy(wire)
        st_ = value["records"][0] if cls is env.EnvPage else value["state"]
        st_["key"] = "K" + ch * n
        assert _outcome(fast, value) == _outcome(slow, value)


# ---------------------------------------------------------------------------
# Env frames and tagged unions, fast and slow

_REFS = [
    None,
    {"kind": "staged", "stagingId": "0000000a-0000-4000-8000-000000000000"},
    {"kind": "legacy", "ssmVersion": 3},
    {"kind": "row", "rowId": "r1"},
    {"kind": "staged", "ssmVersion": 3},
    {"kind": "legacy"},
    {"kind": "other", "rowId": "r1"},
    {"kind": 1},
    {"kind": ["staged"]},
    {},
    [],
    "staged",
]
_BINDINGS = [
    None,
    {"kind": "env"},
    {"kind": "omit"},
    {"kind": "withhold", "reason": "policy"},
    {"kind": "withhold", "reason": ""},
    {"kind": "withhold", "reason": "a\nb"},
    {"kind": "omit", "reason": "x"},
    {"kind": "nope"},
    {"kind": None},
    0,
]


@pytest.mark.parametrize("ref", _REFS)
@pytest.mark.parametrize("binding", _BINDINGS)
def test_ER_024_tagged_fields_fast_equals_reference(ref: Any, binding: Any) -> None:
    fast, slow = _fast_and_slow(env.EnvApply)
    value = copy.deepcopy(ENV_SAMPLES[2][1])
    value["state"]["head"]["valueRef"] = ref
    value["state"]["binding"] = binding
    got = _outcome(fast, value)
    assert got == _outcome(slow, value)
    expect_ok = ref in _REFS[:4] and binding in _BINDINGS[:4]
    assert (got[0] == "ok") == expect_ok


@pytest.mark.parametrize(("cls", "wire"), ENV_SAMPLES, ids=lambda x: getattr(x, "__name__", ""))
def test_ER_024_env_samples_decode_to_frozen_instances(cls: type[Model], wire: Any) -> None:
    got = decode(cls, copy.deepcopy(wire))
    assert not isinstance(got, DecodeError)
    assert type(got) is cls
    name = dataclasses.fields(got)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(got, name, None)


# ---------------------------------------------------------------------------
# constructor()


def test_ER_108_constructor_builds_the_same_frozen_value_as_init() -> None:
    make = constructor(ReadStagedValue)
    args = {
        "cmd_id": 3,
        "reader": "r",
        "task_id": "t",
        "run_epoch": 1,
        "project_id": "p",
        "key": "K",
        "staging_id": "s",
    }
    got = make(*args.values())
    want = ReadStagedValue(**args)  # type: ignore[arg-type]
    assert type(got) is ReadStagedValue
    assert got == want
    assert hash(got) == hash(want)
    assert repr(got) == repr(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.key = "other"  # type: ignore[misc]
    ack = decode(env.EnvAck, copy.deepcopy(ENV_SAMPLES[7][1]))
    assert constructor(SendAck)(ack) == SendAck(ack=ack)  # type: ignore[arg-type]
    assert constructor(NotifyChange)("t") == NotifyChange(task_id="t")


@pytest.mark.parametrize("cls", FRAME_TYPES, ids=lambda c: c.__name__)
def test_ER_108_the_twin_is_a_slotless_subclass_built_without_init(cls: type) -> None:
    twin = _twin(cls)
    assert twin is not None
    assert twin.__bases__ == (cls,)
    assert twin.__dict__["__slots__"] == ()
    empty = twin()  # no __init__ runs: no field is set
    with pytest.raises(AttributeError):
        getattr(empty, dataclasses.fields(cls)[0].name)
    empty.__class__ = cls
    assert type(empty) is cls


def test_ER_108_fast_path_secrets_are_plain_immutable_secrets() -> None:
    session = decode(lease.LeaseSession, copy.deepcopy(lease_session_value()))
    assert not isinstance(session, DecodeError)
    for got, text in ((session.secret_access_key, "CANARY-a"), (session.session_token, "CANARY-t")):
        assert type(got) is Secret
        assert got == Secret(text)
        assert hash(got) == hash(Secret(text))
        assert "CANARY" not in repr(got) + str(got)
        with pytest.raises(AttributeError):
            got._value = "other"  # type: ignore[misc]


def test_ER_108_constructor_without_a_twin_sets_slots_through_descriptors() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class OwnNew(Model):
        n: int

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return object.__new__(cls)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class NoSlots(Model):
        n: int

    for cls in (OwnNew, NoSlots):
        assert _twin(cls) is None
        got = constructor(cls)(5)
        assert type(got) is cls
        assert got == cls(n=5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.n = 6  # type: ignore[misc]


def test_ER_108_constructor_refuses_a_post_init() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked(Event):
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    with pytest.raises(TypeError):
        constructor(Checked)


# ---------------------------------------------------------------------------
# loads(): the scanner-only fast path decides as the full decoder does

_JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def _reference_loads(text: str) -> Any:
    import json

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return ("ok", json.loads(text, parse_constant=refuse))
    except (ValueError, RecursionError):
        return ("error",)


def _core_loads(text: str) -> Any:
    from leasegate.core import JsonError, loads

    try:
        return ("ok", loads(text))
    except JsonError:
        return ("error",)


@settings(max_examples=300, deadline=None)
@given(
    value=_JSON_VALUES,
    before=st.sampled_from(["", " ", "\n\t"]),
    after=st.sampled_from(["", " ", "\r\n", "x", ",1", "}", " 1"]),
)
def test_LR_163_loads_fast_path_decides_like_the_decoder(
    value: Any, before: str, after: str
) -> None:
    import json

    text = before + json.dumps(value) + after
    got = _core_loads(text)
    assert got == _reference_loads(text)
    assert (got[0] == "ok") == (after.strip() == "")


@pytest.mark.parametrize(
    "text",
    ["NaN", "[Infinity]", '{"a": -Infinity}', "", " ", "[1,]", '"\\ud800"', "1" * 5000, "[" * 5000],
)
def test_LR_163_loads_fast_path_edge_texts(text: str) -> None:
    got = _core_loads(text)
    if text == "1" * 5000:
        assert got == ("ok", float("inf"))  # JSON.parse reads it as Infinity
    elif text == '"\\ud800"':
        assert got == ("ok", "\ud800")
    else:
        assert got == ("error",)


def test_LR_163_pattern_cache_stays_bounded_and_never_decides() -> None:
    from leasegate.core._model import _CACHE_MAX, _PATTERN_CACHES

    frame = copy.deepcopy(ENV_SAMPLES[2][1])
    for i in range(_CACHE_MAX + 50):
        frame["opId"] = f"op{i}"
        assert type(decode(env.EnvApply, frame)) is env.EnvApply
    ok, _ = _PATTERN_CACHES[(_common.OP_ID_PATTERN, int(re.UNICODE))]
    assert 0 < len(ok) <= _CACHE_MAX
    assert "op1073" in ok  # recent strings are remembered again after a reset
    frame["opId"] = "op 1"  # a space: never matches, cache or not
    assert decode(env.EnvApply, frame) == DecodeError("opId", "does not match pattern")
