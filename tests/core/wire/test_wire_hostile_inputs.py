"""Breaker tests for the wire codec (issue #2): inputs a newcomer or an attacker sends.

Each test pins one promise of the codec against an input found while trying
to break it. A test marked ``xfail(strict=True)`` documents a defect that is
still open (its ``reason`` says what is wrong); it turns into a failure the
moment the defect is fixed, so whoever fixes it removes the mark.

What held (checked here so that it keeps holding): mutating every field of
every example frame with type swaps, bool/int/float confusion, unsafe and huge
integers, NaN/Infinity, lone surrogates, U+2028, a trailing newline on ids,
UTF-16 limits with emoji, subclasses of ``str``/``int``/``dict``/``list``,
tuples, sets, bytes and arbitrary objects never made ``decode_frame`` raise;
every accepted value encoded back to itself; the generated fast path never
accepted what the declarative slow path refused.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from wire_examples import FRAMES, frame, grant

from leasegate.core import JsonError, canonical_dumps, loads, sha256_hex
from leasegate.core import _model as model_mod
from leasegate.core._model import DecodeError, Model, decode, encode, spec
from leasegate.core.wire import FRAME_TYPES, decode_frame, encode_frame
from leasegate.core.wire.credentials import (
    CredentialLocation,
    decode_leased_value,
    parse_leased_value,
)
from leasegate.core.wire.env import LegacyEnvelope
from leasegate.core.wire.lease import LeaseRequest, Manifest, manifest_digest

# ---------------------------------------------------------------------------
# Hostile Python values


class _Str(str):
    __slots__ = ()


class _Int(int):
    pass


class _Dict(dict[Any, Any]):
    pass


class _List(list[Any]):
    pass


class _EqAll(str):
    """A str subclass equal to everything."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class _Raises:
    """Any comparison raises; hashes like the key it imitates."""

    def __init__(self, like: str = "") -> None:
        self.like = like

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("comparison refused")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("comparison refused")

    def __hash__(self) -> int:
        return hash(self.like)


NASTY: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.0,
    -0.0,
    2**53,
    2**53 - 1,
    -(2**53),
    10**400,
    float("nan"),
    float("inf"),
    "",
    "x\n",
    "a\u2028",
    "\ud800",
    "😀" * 64,
    "😀" * 65,
    "a" * 129,
    "\x00",
    "\x7f",
    "١٢٣",  # Arabic-Indic digits: Python's \d would match them, JavaScript's does not
    [],
    {},
    (1,),
    {1},
    b"x",
    _Str("x"),
    _Int(1),
    _Dict(),
    _List(),
    _EqAll("x"),
    object(),
    {1: 2},
]


def _paths(v: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(v, dict):
        for k in v:
            yield from _paths(v[k], (*path, k))
    elif isinstance(v, list):
        for i in range(len(v)):
            yield from _paths(v[i], (*path, i))


def _set(v: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(v)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = new
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal with exact JSON types (``1 == 1.0 == True`` does not count)."""
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (
            type(b) is list
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def _slow(cls: type[Any]) -> Any:
    fast = model_mod._decoder_for(cls)
    return fast.__globals__["_slow"]


def _slow_accepts(cls: type[Any], value: Any) -> bool:
    try:
        _slow(cls)(value)
    except model_mod._Fail:
        return False
    return True


@pytest.mark.parametrize("kind", sorted(FRAMES))
def test_mutated_frames_never_raise_round_trip_and_paths_agree(kind: str) -> None:
    # Every field of the example replaced by every hostile value.
    base = frame(kind)
    cls = next(c for c in FRAME_TYPES if c.TAG is not None and c.TAG[1] == kind)
    checked = 0
    for path in list(_paths(base)):
        for nasty in NASTY:
            value = _set(base, path, nasty)
            got = decode_frame(value)  # must not raise
            if isinstance(got, DecodeError):
                assert isinstance(got.field, str)
                assert isinstance(got.reason, str)
                assert got.reason
                if path:
                    assert got.field, f"{path}: error names no field"
                assert "CANARY" not in str(got) + repr(got)
            else:
                assert _same(encode_frame(got), value), path
            if type(value) is dict and value.get("kind") == kind:
                fast_ok = not isinstance(decode(cls, value), DecodeError)
                assert fast_ok == _slow_accepts(cls, value), (path, nasty)
            checked += 1
    assert checked >= len(NASTY)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("opId",), "lease-1-abc\n"),
        (("opId",), "lease-1-abc\u2028"),
        (("opId",), _Str("lease-1-abc")),
        (("taskId",), "😀" * 65),
        (("taskId",), "t\x7f"),
        (("runEpoch",), True),
        (("runEpoch",), 1.0),
        (("runEpoch",), _Int(1)),
        (("runEpoch",), 2**53),
        (("runEpoch",), "1"),
    ],
)
def test_lease_request_refuses_near_misses(path: tuple[str, ...], value: Any) -> None:
    got = decode_frame(_set(frame("lease.request"), path, value))
    assert isinstance(got, DecodeError)
    assert got.field == path[0]


def test_task_id_of_64_emoji_is_exactly_128_units() -> None:
    ok = decode_frame(_set(frame("lease.request"), ("taskId",), "😀" * 64))
    assert not isinstance(ok, DecodeError)
    assert ok.task_id == "😀" * 64  # type: ignore[attr-defined]


def test_subclassed_containers_are_refused_by_both_paths() -> None:
    value = _Dict(frame("lease.request"))
    assert isinstance(decode_frame(value), DecodeError)
    assert not _slow_accepts(LeaseRequest, value)
    stale = frame("lease.stale")
    stale["removed"] = _List(stale["removed"])
    assert isinstance(decode_frame(stale), DecodeError)


def test_deep_nesting_is_a_decode_error() -> None:
    deep: list[Any] = []
    cur = deep
    for _ in range(50_000):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    got = decode_frame({"kind": "lease.request", "opId": deep, "taskId": "t", "runEpoch": 1})
    assert isinstance(got, DecodeError)
    assert got.field == "opId"


def test_loads_keeps_the_last_duplicate_and_refuses_nan() -> None:
    assert loads('{"a":1,"a":2}') == {"a": 2}
    for text in ("NaN", "Infinity", "-Infinity", "[NaN]"):
        with pytest.raises(JsonError):
            loads(text)


def test_sha256_of_lone_surrogates_is_javascripts() -> None:
    # TextEncoder / Buffer.from(text, "utf8") write U+FFFD for each lone unit.
    for text in ("\ud800", "a\udfffb", "\ud800\ud800", "\udc00\ud800"):
        want = hashlib.sha256(
            "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text).encode()
        ).hexdigest()
        assert sha256_hex(text) == want


def test_canonical_dumps_is_stable_under_key_order_and_sorts_utf16() -> None:
    a = {"b": 1, "a": [{"y": 1, "x": 2}], "😀": 1, "\uffff": 2}
    b = dict(reversed(list(a.items())))
    assert canonical_dumps(a) == canonical_dumps(b)
    # U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FFFF.
    assert canonical_dumps(a) == '{"a":[{"x":2,"y":1}],"b":1,"😀":1,"\uffff":2}'


# ---------------------------------------------------------------------------
# Open defects (strict xfail: remove the mark when fixed)


def test_decode_never_raises_for_objects_whose_comparison_raises() -> None:
    req = frame("lease.request")
    assert isinstance(decode(LeaseRequest, dict(req, kind=_Raises())), DecodeError)
    key_like_kind = {(_Raises("kind") if k == "kind" else k): v for k, v in req.items()}
    assert isinstance(decode_frame(key_like_kind), DecodeError)
    key_like_op = {(_Raises("opId") if k == "opId" else k): v for k, v in req.items()}
    assert isinstance(decode_frame(key_like_op), DecodeError)


def test_unexpected_key_is_not_quoted_into_the_error() -> None:
    req = frame("lease.request")
    req["CANARY-s3cret\n\x1b[31mforged log line"] = 1
    got = decode_frame(req)
    assert isinstance(got, DecodeError)
    assert got.reason == "unexpected key"
    text = str(got) + repr(got)
    assert "CANARY" not in text
    assert "\n" not in str(got)
    big = frame("lease.request")
    big["x" * 1_000_000] = 1
    assert len(str(decode_frame(big))) <= 512


def test_float_field_refuses_an_integer_javascript_reads_as_infinity() -> None:
    legacy = {
        "v": 1,
        "kind": "project-env",
        "orgId": "org-1",
        "projectId": "proj-1",
        "key": "API_KEY",
        "value": "CANARY-v",
        "updatedAt": 1,
    }
    assert not isinstance(decode(LegacyEnvelope, legacy), DecodeError)
    for huge in (10**400, -(10**400), 2**1024):
        got = decode(LegacyEnvelope, dict(legacy, updatedAt=huge))
        assert isinstance(got, DecodeError)
        assert got.field == "updatedAt"


def test_loads_of_a_5000_digit_number_is_json_semantics() -> None:
    text = "1" * 5000
    try:
        value = loads(text)
    except JsonError:
        return
    assert value == float("inf")


LOC = CredentialLocation(
    org_id="org-1", user_id="user-1", credential_class="github", credential_id="cred-1"
)


def test_leased_value_with_a_5000_digit_number_never_raises() -> None:
    for raw in ("1" * 5000, '{"v":' + "1" * 5000 + "}"):
        assert isinstance(decode_leased_value(raw, LOC), DecodeError)
        assert parse_leased_value(raw, LOC) is None


def test_canonical_json_escapes_lone_surrogates_like_json_stringify() -> None:
    assert canonical_dumps({"a": "x\ud800"}) == '{"a":"x\\ud800"}'
    g = grant()
    m = g["lease"]["manifest"]
    m["engines"][0]["revision"] = "rev-\ud800"
    decoded = decode(Manifest, m)
    assert not isinstance(decoded, DecodeError)
    js_text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace(
        "\ud800", "\\ud800"
    )
    assert manifest_digest(decoded) == hashlib.sha256(js_text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("value", "js"),
    [(1.0, "1"), (-0.0, "0"), (1e-7, "1e-7"), (1e16, "10000000000000000"), (2.5e-5, "0.000025")],
)
def test_canonical_json_writes_numbers_like_json_stringify(value: float, js: str) -> None:
    assert canonical_dumps([value]) == f"[{js}]"


def test_canonical_dumps_non_str_key_raises_the_documented_type_error() -> None:
    with pytest.raises(TypeError):
        canonical_dumps({1: 2})


def test_decode_error_can_be_raised_through_a_context_manager() -> None:
    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        yield

    with pytest.raises(DecodeError) as info, scope():
        raise DecodeError("lease.opId", "does not match pattern")
    assert info.value.field == "lease.opId"
    err = DecodeError("kind", "unknown value")
    err.add_note("while reading a frame")
    assert err.__notes__ == ["while reading a frame"]


def _fresh_model(i: int) -> type[Model]:
    names = [f"f{j}" for j in range(20)]
    ns: dict[str, Any] = {"__annotations__": dict.fromkeys(names, "str"), "__module__": __name__}
    for n in names:
        ns[n] = spec(n, pattern=r"[a-z]+", max_len=10)
    cls = type(f"_Fresh{i}", (Model,), ns)
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)


def test_first_decode_of_a_model_from_several_threads_never_raises() -> None:
    value = {f"f{j}": "abc" for j in range(20)}
    escaped: list[str] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(100):
            cls = _fresh_model(i)
            start = threading.Barrier(4)

            def run(cls: type[Model] = cls, start: threading.Barrier = start) -> None:
                start.wait()
                try:
                    got = decode(cls, value)
                except Exception as exc:  # noqa: BLE001 - the defect: anything escaping decode
                    escaped.append(type(exc).__name__)
                    return
                if isinstance(got, DecodeError):
                    escaped.append(f"refused: {got}")

            threads = [threading.Thread(target=run) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(old)
    assert escaped == []


def test_first_encode_of_a_model_from_several_threads_is_complete() -> None:
    value = {f"f{j}": "abc" for j in range(20)}
    wrong: list[int] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(100, 200):
            cls = _fresh_model(i)
            obj = cls(**value)
            start = threading.Barrier(4)

            def run(obj: Model = obj, start: threading.Barrier = start) -> None:
                start.wait()
                out = encode(obj)
                if out != value:
                    wrong.append(len(out))

            threads = [threading.Thread(target=run) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(old)
    assert wrong == []


# ---------------------------------------------------------------------------
# Fixed defects: the shared mechanism around each fix


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Tree(Model):
    name: str = spec("name", pattern=r"[a-z]+")
    kids: tuple[_Tree, ...] = spec("kids")
    parent: _Tree | None = spec("parent")


def test_self_recursive_model_compiles_without_publishing_a_placeholder() -> None:
    # Build-then-publish: a model reaching itself goes through a late lookup.
    leaf = {"name": "leaf", "kids": [], "parent": None}
    value = {"name": "root", "kids": [leaf, dict(leaf, parent=dict(leaf))], "parent": None}
    got = decode(_Tree, value)
    assert isinstance(got, _Tree)
    assert got.kids[1].parent == _Tree(name="leaf", kids=(), parent=None)
    assert encode(got) == value
    bad = copy.deepcopy(value)
    bad["kids"][1]["parent"]["name"] = "BAD"
    assert decode(_Tree, bad) == DecodeError("kids[1].parent.name", "does not match pattern")


def test_unexpected_safe_key_is_still_named() -> None:
    req = frame("lease.request")
    req["extra_Key-1.v2"] = 1
    assert decode_frame(req) == DecodeError("extra_Key-1.v2", "unexpected key")
    req = frame("lease.request")
    req["k" * 65] = 1
    assert decode_frame(req) == DecodeError("<unexpected key>", "unexpected key")


def test_decode_error_is_equal_by_field_and_reason_and_read_only() -> None:
    a = DecodeError("x.y", "missing key")
    assert a == DecodeError("x.y", "missing key")
    assert a != DecodeError("x.y", "unexpected key")
    assert hash(a) == hash(DecodeError("x.y", "missing key"))
    assert repr(a) == "DecodeError(field='x.y', reason='missing key')"
    assert str(a) == "x.y: missing key"
    with pytest.raises(AttributeError):
        a.field = "z"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "js"),
    [
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"),
        (123.456, "123.456"),
        (-3.5, "-3.5"),
        (1e20, "100000000000000000000"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.1, "0.1"),
    ],
)
def test_canonical_json_number_layout_follows_number_to_string(value: float, js: str) -> None:
    assert canonical_dumps({"n": value}) == f'{{"n":{js}}}'


def test_overflowing_numbers_read_as_infinity_and_are_refused_by_float_fields() -> None:
    assert loads("1e400") == float("inf")
    assert loads("[-" + "9" * 5000 + "]") == [float("-inf")]
    text = (
        '{"v":1,"kind":"project-env","orgId":"org-1","projectId":"proj-1",'
        '"key":"API_KEY","value":"CANARY-v","updatedAt":1e400}'
    )
    got = decode(LegacyEnvelope, loads(text))
    assert got == DecodeError("updatedAt", "not a finite number")
    assert "CANARY" not in repr(got) + str(got)
