"""Canonical JSON: the C encoder's fast path writes what the reference writer writes.

``canonical_dumps`` hands plain values (exact dict/list/tuple/str/int/bool/None,
no floats) to ``json``'s C encoder and keeps the pure-Python writer
(``canonical_dumps_reference``) for what the C encoder writes differently from
``JSON.stringify``. These tests compare the two on generated values: same text,
or the same exception type.
"""

from __future__ import annotations

from typing import Any

import wire_examples as ex
from hypothesis import given, settings
from hypothesis import strategies as st

from leasegate.core import _json, decode, encode
from leasegate.core._json import canonical_dumps, canonical_dumps_reference
from leasegate.core.wire.lease import Manifest, canonical_manifest_json

# Every code point, lone surrogates included (hypothesis leaves them out by default).
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None)
# Characters around every boundary the fast path reasons about.
EDGE_CHAR = st.sampled_from(
    [
        "a",
        "Z",
        '"',
        "\\",
        "\x00",
        "\x1f",
        "\x7f",
        "é",
        "\u2028",
        "\ud7ff",
        "\ud800",
        "\udbff",
        "\udc00",
        "\udfff",
        "\ue000",
        "\uffff",
        "\U00010000",
        "\U0001f600",
        "\U0010ffff",
    ]
)
TEXT = st.text(st.one_of(ANY_CHAR, EDGE_CHAR), max_size=8)
ASCII_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=8)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
PLAIN_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), ASCII_TEXT)


def _tree(scalars: st.SearchStrategy[Any], keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.lists(children, max_size=5).map(tuple),
            st.dictionaries(keys, children, max_size=5),
        ),
        max_leaves=30,
    )


VALUES = _tree(SCALARS, TEXT)
PLAIN_VALUES = _tree(PLAIN_SCALARS, ASCII_TEXT)


def _outcome(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return ("ok", fn(value))
    except (TypeError, ValueError, RecursionError) as exc:
        return ("raises", type(exc).__name__)


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_canonical_dumps_equals_the_reference_writer_on_generated_values(value: Any) -> None:
    assert _outcome(canonical_dumps, value) == _outcome(canonical_dumps_reference, value)


@settings(max_examples=150, deadline=None)
@given(PLAIN_VALUES)
def test_c_encoder_writes_plain_ascii_values_as_the_reference_writer(value: Any) -> None:
    # The fast path itself, not only canonical_dumps' final answer.
    assert _json._plain(value)
    assert _json._C_CANONICAL(value) == canonical_dumps_reference(value)


NO_SURROGATE_TEXT = st.text(
    st.one_of(
        st.characters(codec="utf-8"), EDGE_CHAR.filter(lambda c: not "\ud800" <= c <= "\udfff")
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(NO_SURROGATE_TEXT, st.integers(), max_size=8))
def test_canonical_dumps_sorts_keys_by_utf16_code_units(value: dict[str, int]) -> None:
    text = canonical_dumps(value)
    assert text == canonical_dumps_reference(value)
    assert list(_json.loads(text)) == sorted(value, key=lambda k: k.encode("utf-16-be"))


class _Str(str):
    __slots__ = ()


class _Int(int):
    __slots__ = ()

    def __repr__(self) -> str:
        return "forged"


class _Dict(dict[str, Any]):
    def items(self) -> Any:  # the C encoder's view
        return [("forged", 1)]


def test_canonical_dumps_leaves_non_plain_values_to_the_reference_writer() -> None:
    for value in ({"a": 1.0}, [1e16, -0.0, 2.5e-5], [_Str("s")], [_Int(5)], _Dict(a=2)):
        assert not _json._plain(value)
        assert canonical_dumps(value) == canonical_dumps_reference(value)
    assert canonical_dumps({"a": 1.0}) == '{"a":1}'
    assert canonical_dumps([_Int(5)]) == "[5]"
    assert canonical_dumps(_Dict(a=2)) == '{"a":2}'


def test_canonical_dumps_rewrites_text_where_the_c_encoder_differs_from_json_stringify() -> None:
    # Plain values whose C-encoded text is not JSON.stringify's: a lone
    # surrogate (written raw), keys whose UTF-16 order is not code-point order.
    lone = {"a": "x\ud800"}
    order = {"\uffff": 1, "\U0001f600": 2}
    for value in (lone, order):
        assert _json._plain(value)
        assert _json._C_CANONICAL(value) != canonical_dumps_reference(value)
        assert canonical_dumps(value) == canonical_dumps_reference(value)
    assert canonical_dumps(lone) == '{"a":"x\\ud800"}'
    assert canonical_dumps(order) == '{"\U0001f600":2,"\uffff":1}'


def test_canonical_dumps_refuses_non_str_keys_on_every_path() -> None:
    for value in ({1: 2}, {True: 1}, {None: 1}, {1.5: 1}, [{"a": {2: 3}}], {"a": 1, 2: 3}):
        assert _outcome(canonical_dumps, value) == ("raises", "TypeError")


def test_canonical_dumps_refuses_what_json_cannot_represent() -> None:
    assert _outcome(canonical_dumps, [float("nan")]) == ("raises", "ValueError")
    assert _outcome(canonical_dumps, {"a": {1, 2}}) == ("raises", "TypeError")
    assert _outcome(canonical_dumps, [b"bytes"]) == ("raises", "TypeError")


def test_canonical_manifest_json_of_a_grant_manifest_takes_the_c_encoder() -> None:
    manifest = decode(Manifest, ex.manifest())
    assert isinstance(manifest, Manifest)
    encoded = encode(manifest)
    assert _json._plain(encoded)
    assert canonical_manifest_json(manifest) == canonical_dumps_reference(encoded)
    assert canonical_manifest_json(manifest) == _json._C_CANONICAL(encoded)
