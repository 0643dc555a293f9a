"""One small declarative validator for every wire model.

Theory of operation
===================

Wire models are frozen dataclasses. Each field's Python annotation says its
JSON type, and its :func:`spec` metadata says its wire name and limits
(pattern, length in UTF-16 code units, numeric bounds, item counts, control
characters). Nothing else describes a frame: this module compiles, once per
class, a decoder and an encoder from those declarations, and the same
declarations drive docs and tests.

Strictness, as the reference's parsers are strict:

* an object must have exactly the declared keys: an extra key or a missing
  key is an error (``exact`` key sets);
* types are exact: ``bool`` is not an integer, a string is never coerced to a
  number, integers must be safe (``|n| ≤ 2**53 - 1``) and floats are not
  integers;
* strings are checked against their pattern with a full match (JavaScript's
  ``^…$`` with no multiline flag matches the whole input; Python's ``$``
  would also accept a final newline, so patterns are always full-matched);
* lengths count UTF-16 code units, as JavaScript's ``.length`` does.

Supported annotations: ``str``, :class:`~leasegate.core.Secret` (a JSON
string held as a secret), ``int``, ``float`` (any finite JSON number, never a
``bool``), ``bool``, ``None``, ``typing.Literal`` of strings or ints,
``tuple[X, ...]`` (a JSON array), ``dict[str, X]`` (a JSON object with
arbitrary keys), another model, a union of those (``X | None``), a union of
*tagged* models (each declares ``TAG = ("kind", "lease.grant.v1")``; the tag
picks the member), and :data:`JsonValue` (any JSON value, kept as is, for
fields the protocol declares opaque).

A model may define ``_check(self) -> tuple[str, str] | None`` for rules that
span fields; it returns ``(field, reason)`` for the first violation.

Errors never quote the offending value (it may be a secret): a
:class:`DecodeError` names the field path and the rule that failed.

The decoder never raises for any input: :func:`decode` returns either the
model or a :class:`DecodeError`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, TypeAlias, TypeVar, Union, get_args, get_origin

from ._json import MAX_SAFE_INTEGER, is_js_finite, utf16_len
from ._secret import Secret

# The regex parser (CPython 3.11+), to see which patterns match ASCII only
# (_ascii_width); typeshed does not describe these modules.
_re_constants: Any = re._constants  # type: ignore[attr-defined]
_re_parser: Any = re._parser  # type: ignore[attr-defined]

__all__ = [
    "DecodeError",
    "JsonValue",
    "Model",
    "decode",
    "decoder",
    "encode",
    "spec",
]

T = TypeVar("T")

#: Any JSON value, kept as decoded (for fields the protocol leaves opaque).
JsonValue: TypeAlias = Any

_SPEC_KEY: Final = "leasegate.wire"
_CONTROL: Final = re.compile("[\x00-\x1f\x7f]")
_SAFE_KEY: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _key_name(key: object) -> str:
    """How an unexpected key is named in a :class:`DecodeError` path.

    Only a short key of safe characters is quoted; anything else (a secret, a
    newline, a terminal escape, a megabyte) becomes ``"<unexpected key>"``.
    """
    if type(key) is str and _SAFE_KEY.fullmatch(key) is not None:
        return key
    return "<unexpected key>"


class DecodeError(Exception):
    """A value did not match its model.

    Attributes:
        field: the path of the offending field, in wire names, e.g.
            ``"lease.sessions[1].accessKeyId"``; ``""`` for the value itself.
            An unexpected key is named only when it is short and safe
            (``[A-Za-z0-9_.-]{1,64}``), else as ``"<unexpected key>"``.
        reason: which rule failed (``"unexpected key"``, ``"expected
            integer"``, ``"does not match pattern"`` ...). Never contains the
            value.

    It is an ordinary ``Exception`` (a traceback, cause and notes can be
    attached, so it may be raised through a context manager), but the
    decoder only ever *returns* it. Two errors are equal when their
    ``(field, reason)`` are; ``field`` and ``reason`` are read-only.
    """

    __slots__ = ("_field", "_reason")

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self._field = field
        self._reason = reason

    @property
    def field(self) -> str:
        """The offending field's path in wire names (``""``: the value)."""
        return self._field

    @property
    def reason(self) -> str:
        """The rule that failed; never the value."""
        return self._reason

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, DecodeError)
        return (self._field, self._reason) == (other._field, other._reason)

    def __hash__(self) -> int:
        return hash((self._field, self._reason))

    def __repr__(self) -> str:
        return f"DecodeError(field={self._field!r}, reason={self._reason!r})"

    def __str__(self) -> str:
        where = self._field or "<value>"
        return f"{where}: {self._reason}"


class _Fail(Exception):  # noqa: N818 - internal signal, never escapes
    """Internal: carries a failure outward while the path is collected."""

    __slots__ = ("path", "reason")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    name: str | None = None
    pattern: re.Pattern[str] | None = None
    min_len: int | None = None
    max_len: int | None = None
    no_control: bool = False
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_items: int | None = None
    max_items: int | None = None
    key_pattern: re.Pattern[str] | None = None
    unique: bool = False


def spec(
    name: str | None = None,
    *,
    pattern: str | None = None,
    min_len: int | None = None,
    max_len: int | None = None,
    no_control: bool = False,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
    key_pattern: str | None = None,
    unique: bool = False,
) -> Any:
    """Declare a model field's wire name and limits.

    Args:
        name: the JSON key (defaults to the Python field name).
        pattern: a regular expression the whole string must match.
        min_len, max_len: string length bounds in UTF-16 code units (for
            ``tuple`` fields, use ``min_items``/``max_items``).
        no_control: refuse U+0000–U+001F and U+007F.
        minimum, maximum: inclusive numeric bounds.
        min_items, max_items: array (or object) size bounds.
        key_pattern: for ``dict[str, X]``: the pattern every key must match.
        unique: for arrays of scalars: no value may repeat.

    Returns:
        A :func:`dataclasses.field` carrying the declaration; the field has no
        default (every wire key is required).
    """
    return dataclasses.field(
        metadata={
            _SPEC_KEY: _Spec(
                name=name,
                pattern=re.compile(pattern) if pattern is not None else None,
                min_len=min_len,
                max_len=max_len,
                no_control=no_control,
                minimum=minimum,
                maximum=maximum,
                min_items=min_items,
                max_items=max_items,
                key_pattern=re.compile(key_pattern) if key_pattern is not None else None,
                unique=unique,
            )
        }
    )


class Model:
    """Base of every wire model (a frozen dataclass).

    Subclasses are decorated with ``@dataclasses.dataclass(frozen=True,
    slots=True, kw_only=True)``. A tagged model sets ``TAG = (key, value)``;
    the tag key is part of the model's exact key set but not a field.
    """

    __slots__ = ()
    TAG: ClassVar[tuple[str, str] | None] = None

    def _check(self) -> tuple[str, str] | None:
        """Cross-field rules; ``(field, reason)`` of the first violation."""
        return None


Decoder: TypeAlias = Callable[[Any], Any]
Encoder: TypeAlias = Callable[[Any], Any]

_DECODERS: dict[Any, Decoder] = {}
_ENCODERS: dict[Any, Encoder] = {}


def decode(model: type[T] | Any, value: object) -> T | DecodeError:
    """Decode a JSON value (as :func:`leasegate.core._json.loads` returns it).

    Args:
        model: a model class, or a union of tagged model classes.
        value: any object.

    Returns:
        The model instance, or a :class:`DecodeError` naming the first
        offending field. Never raises.
    """
    try:
        dec = _decoder_for(model)
        return typing.cast(T, dec(value))
    except _Fail as fail:
        fail.path.reverse()
        return DecodeError(_join(fail.path), fail.reason)
    except RecursionError:
        return DecodeError("", "nested too deeply")
    except Exception:  # noqa: BLE001 - input whose own __eq__/__hash__ raises
        return DecodeError("", "invalid value")


def decoder(model: type[T] | Any) -> Callable[[object], T | DecodeError]:
    """A ready decoder for ``model``: ``decoder(M)(value) == decode(M, value)``.

    Compiles (or looks up) the model's decoder once, so that a hot path, such
    as ``decode_frame`` over a union of frames, skips the per-call lookup.
    The returned function never raises.
    """
    dec = _decoder_for(model)

    def run(value: object) -> T | DecodeError:
        try:
            return typing.cast(T, dec(value))
        except _Fail as fail:
            fail.path.reverse()
            return DecodeError(_join(fail.path), fail.reason)
        except RecursionError:
            return DecodeError("", "nested too deeply")
        except Exception:  # noqa: BLE001 - input whose own __eq__/__hash__ raises
            return DecodeError("", "invalid value")

    return run


def encode(obj: Model) -> dict[str, Any]:
    """Encode a model to its JSON value (dicts, lists, str, int, ...).

    Secrets are revealed: the result is what goes on the wire. The inverse of
    :func:`decode`: ``decode(type(m), encode(m)) == m``.
    """
    enc = _encoder_for(type(obj))
    return typing.cast(dict[str, Any], enc(obj))


def _join(path: list[str]) -> str:
    out = ""
    for part in path:
        if part.startswith("["):
            out += part
        else:
            out = f"{out}.{part}" if out else part
    return out


# --------------------------------------------------------------------------
# Compilation


# Compiled coders are published in _DECODERS/_ENCODERS only once complete
# (build, then publish), so a thread that finds one may use it at once. Two
# threads compiling the same model at the same time both build it and one
# wins; both results are complete and equivalent. A model that refers to
# itself (directly or through others) being compiled in *this* call chain is
# reached through an indirection (_late_decoder/_late_encoder) that looks the
# finished coder up when called, which is only after it was published.
# `building` is the set of models being compiled in this call chain.

_Building: TypeAlias = frozenset[Any]


def _decoder_for(tp: Any, building: _Building = frozenset()) -> Decoder:
    dec = _DECODERS.get(tp)
    if dec is None:
        if tp in building:
            return _late_decoder(tp)
        if _is_model(tp):
            dec = _model_decoder(tp, building)
        else:
            dec = _compile_decoder(tp, _Spec(), building)
        _DECODERS[tp] = dec
    return dec


def _late_decoder(tp: Any) -> Decoder:
    def late(v: Any) -> Any:
        # Normally published by now; a mutually recursive model published
        # before the model it reaches may run first: compile that one then.
        dec = _DECODERS.get(tp)
        return (dec if dec is not None else _decoder_for(tp))(v)

    return late


def _encoder_for(tp: Any, building: _Building = frozenset()) -> Encoder:
    enc = _ENCODERS.get(tp)
    if enc is None:
        if tp in building:
            return _late_encoder(tp)
        enc = _compile_encoder(tp, building)
        _ENCODERS[tp] = enc
    return enc


def _late_encoder(tp: Any) -> Encoder:
    def late(v: Any) -> Any:
        enc = _ENCODERS.get(tp)
        return (enc if enc is not None else _encoder_for(tp))(v)

    return late


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Model) and dataclasses.is_dataclass(tp)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def _compile_decoder(tp: Any, sp: _Spec, building: _Building = frozenset()) -> Decoder:
    args = _union_args(tp)
    if args is not None:
        return _union_decoder(args, sp, building)
    if tp is Any:
        return lambda v: v
    if tp is type(None) or tp is None:

        def dec_none(v: Any) -> None:
            if v is not None:
                raise _Fail("expected null")

        return dec_none
    if tp is str:
        return _str_decoder(sp, secret=False)
    if tp is Secret:
        return _str_decoder(sp, secret=True)
    if tp is bool:

        def dec_bool(v: Any) -> bool:
            if type(v) is not bool:
                raise _Fail("expected boolean")
            return v

        return dec_bool
    if tp is int:
        return _int_decoder(sp)
    if tp is float:
        return _float_decoder(sp)
    origin = get_origin(tp)
    if origin is Literal:
        return _literal_decoder(get_args(tp))
    if origin is tuple:
        targs = get_args(tp)
        if len(targs) != 2 or targs[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] is supported, not {tp!r}")
        return _array_decoder(targs[0], sp, building)
    if origin is dict:
        kt, vt = get_args(tp)
        if kt is not str:
            raise TypeError("dict keys must be str")
        return _object_decoder(vt, sp, building)
    if _is_model(tp):
        return _decoder_for(tp, building)
    raise TypeError(f"unsupported wire annotation {tp!r}")


def _str_decoder(sp: _Spec, *, secret: bool) -> Decoder:
    pattern = sp.pattern
    min_len = sp.min_len
    max_len = sp.max_len
    no_control = sp.no_control
    plain = pattern is None and min_len is None and max_len is None and not no_control

    if plain and not secret:

        def dec_plain(v: Any) -> str:
            if type(v) is not str:
                raise _Fail("expected string")
            return v

        return dec_plain

    def dec_str(v: Any) -> Any:
        if type(v) is not str:
            raise _Fail("expected string")
        if min_len is not None or max_len is not None:
            n = utf16_len(v)
            if min_len is not None and n < min_len:
                raise _Fail(f"shorter than {min_len} characters")
            if max_len is not None and n > max_len:
                raise _Fail(f"longer than {max_len} characters")
        if no_control and _CONTROL.search(v) is not None:
            raise _Fail("contains a control character")
        if pattern is not None and pattern.fullmatch(v) is None:
            raise _Fail("does not match pattern")
        return Secret(v) if secret else v

    return dec_str


def _int_decoder(sp: _Spec) -> Decoder:
    lo = -MAX_SAFE_INTEGER if sp.minimum is None else sp.minimum
    hi = MAX_SAFE_INTEGER if sp.maximum is None else sp.maximum

    def dec_int(v: Any) -> int:
        if type(v) is not int:
            raise _Fail("expected integer")
        if v < -MAX_SAFE_INTEGER or v > MAX_SAFE_INTEGER:
            raise _Fail("not a safe integer")
        if v < lo:
            raise _Fail(f"less than {lo}")
        if v > hi:
            raise _Fail(f"greater than {hi}")
        return v

    return dec_int


def _float_decoder(sp: _Spec) -> Decoder:
    lo, hi = sp.minimum, sp.maximum

    def dec_float(v: Any) -> float:
        t = type(v)
        if t is not int and t is not float:
            raise _Fail("expected number")
        if not is_js_finite(v):
            # NaN, ±inf, or an int JSON.parse reads as ±Infinity (10**400).
            raise _Fail("not a finite number")
        if lo is not None and v < lo:
            raise _Fail(f"less than {lo}")
        if hi is not None and v > hi:
            raise _Fail(f"greater than {hi}")
        return typing.cast(float, v)

    return dec_float


def _literal_decoder(values: tuple[Any, ...]) -> Decoder:
    allowed = {(type(v), v) for v in values}
    allowed_types = frozenset(type(v) for v in values)

    def dec_literal(v: Any) -> Any:
        # The type test first: an unhashable value (a list) is never allowed.
        if type(v) not in allowed_types or (type(v), v) not in allowed:
            raise _Fail("not an allowed value")
        return v

    return dec_literal


def _array_decoder(item_tp: Any, sp: _Spec, building: _Building) -> Decoder:
    item = _compile_decoder(
        item_tp, dataclasses.replace(sp, min_items=None, max_items=None, unique=False), building
    )
    min_items, max_items, unique = sp.min_items, sp.max_items, sp.unique

    def dec_array(v: Any) -> tuple[Any, ...]:
        if type(v) is not list:
            raise _Fail("expected array")
        n = len(v)
        if min_items is not None and n < min_items:
            raise _Fail(f"fewer than {min_items} items")
        if max_items is not None and n > max_items:
            raise _Fail(f"more than {max_items} items")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Fail as fail:
                fail.path.append(f"[{i}]")
                raise
        if unique and len(set(out)) != n:
            raise _Fail("items repeat")
        return tuple(out)

    return dec_array


def _object_decoder(val_tp: Any, sp: _Spec, building: _Building) -> Decoder:
    val = _compile_decoder(
        val_tp, dataclasses.replace(sp, key_pattern=None, max_items=None, min_items=None), building
    )
    key_pattern, min_items, max_items = sp.key_pattern, sp.min_items, sp.max_items

    def dec_object(v: Any) -> dict[str, Any]:
        if type(v) is not dict:
            raise _Fail("expected object")
        n = len(v)
        if min_items is not None and n < min_items:
            raise _Fail(f"fewer than {min_items} keys")
        if max_items is not None and n > max_items:
            raise _Fail(f"more than {max_items} keys")
        out = {}
        for k, x in v.items():
            if key_pattern is not None and key_pattern.fullmatch(k) is None:
                raise _Fail("a key does not match its pattern")
            try:
                out[k] = val(x)
            except _Fail as fail:
                fail.path.append(k)
                raise
        return out

    return dec_object


def _union_decoder(args: tuple[Any, ...], sp: _Spec, building: _Building) -> Decoder:
    nullable = type(None) in args
    rest = [a for a in args if a is not type(None)]
    tagged = [a for a in rest if _is_model(a) and a.TAG is not None]
    if tagged and len(tagged) == len(rest):
        inner = _tagged_decoder(tuple(tagged), building)
    elif len(rest) == 1:
        inner = _compile_decoder(rest[0], sp, building)
    else:
        raise TypeError(f"unsupported union {args!r}: use X | None or tagged models")
    if not nullable:
        return inner

    def dec_nullable(v: Any) -> Any:
        if v is None:
            return None
        return inner(v)

    return dec_nullable


def _tagged_decoder(members: tuple[type[Model], ...], building: _Building) -> Decoder:
    keys = {m.TAG[0] for m in members if m.TAG is not None}
    if len(keys) != 1:
        raise TypeError("tagged union members must share one tag key")
    (key,) = keys
    table: dict[str, Decoder] = {}
    for m in members:
        assert m.TAG is not None
        if m.TAG[1] in table:
            raise TypeError(f"tag {m.TAG[1]!r} declared twice")
        table[m.TAG[1]] = _decoder_for(m, building)

    def dec_tagged(v: Any) -> Any:
        if type(v) is not dict:
            raise _Fail("expected object")
        tag = v.get(key)
        if type(tag) is not str:
            fail = _Fail("expected string" if key in v else "missing key")
            fail.path.append(key)
            raise fail
        dec = table.get(tag)
        if dec is None:
            fail = _Fail("unknown value")
            fail.path.append(key)
            raise fail
        return dec(v)

    return dec_tagged


def _model_fields(cls: type[Model]) -> list[tuple[str, str, Any, _Spec]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        sp = f.metadata.get(_SPEC_KEY, _Spec())
        out.append((f.name, sp.name or f.name, hints[f.name], sp))
    return out


def _model_decoder(cls: type[Model], building: _Building) -> Decoder:
    """Build (never publish) the decoder of ``cls``; the caller publishes."""
    building = building | {cls}
    tag = cls.TAG
    declared = _model_fields(cls)
    fields_: list[tuple[str, str, Decoder]] = [
        (pyname, wname, _compile_decoder(tp, sp, building)) for pyname, wname, tp, sp in declared
    ]
    wire_keys = [wname for _, wname, _, _ in declared]
    if tag is not None:
        wire_keys.insert(0, tag[0])
    key_set = frozenset(wire_keys)

    def dec_model(v: Any) -> Any:
        if type(v) is not dict:
            raise _Fail("expected object")
        if v.keys() != key_set:
            for k in v:
                if k not in key_set:
                    fail = _Fail("unexpected key")
                    fail.path.append(_key_name(k))
                    raise fail
            for k in wire_keys:
                if k not in v:
                    fail = _Fail("missing key")
                    fail.path.append(k)
                    raise fail
        if tag is not None and (type(v[tag[0]]) is not str or v[tag[0]] != tag[1]):
            wrong = _Fail("unexpected value")
            wrong.path.append(tag[0])
            raise wrong
        kwargs = {}
        for pyname, wname, dec in fields_:
            try:
                kwargs[pyname] = dec(v[wname])
            except _Fail as fail:
                fail.path.append(wname)
                raise
        obj = cls(**kwargs)
        problem = obj._check()
        if problem is not None:
            bad = _Fail(problem[1])
            if problem[0]:
                bad.path.extend(reversed(_split(problem[0])))
            raise bad
        return obj

    return _fast_model_decoder(cls, declared, [d for _, _, d in fields_], dec_model, building)


# --------------------------------------------------------------------------
# The fast path
#
# Each model also gets a decoder generated as Python source from the same
# declarations: straight-line code with the common checks inlined, that builds
# the instance without going through the dataclass __init__. It only ever
# *accepts*: at the first check that does not pass, it hands the value to the
# decoder above (the reference implementation of the rules), which then fails
# with the precise field path and reason. So the fast path can never change
# what is accepted as long as each inlined check is implied by the slow
# path's; tests/core/test_model.py checks the two agree on generated inputs.

_CACHE_MAX: Final = 1024
_CACHE_MAX_CHARS: Final = 256
_PATTERN_CACHES: dict[tuple[str, int], tuple[dict[str, bool], Callable[[str], bool]]] = {}


def clear_pattern_caches() -> None:
    """Forget every string the fast path remembered as matching its pattern.

    For benchmarks that measure a cold decode, and for tests. Decoding is the
    same with or without the caches; only its speed differs.
    """
    for cache, _ in _PATTERN_CACHES.values():
        cache.clear()


def _pattern_cache(pattern: re.Pattern[str]) -> tuple[dict[str, bool], Callable[[str], bool]]:
    """A full-match test with a bounded cache of strings known to match.

    Only non-secret fields use it. Wire ids repeat (engine names, regions,
    org ids), and a dict lookup is several times cheaper than a match. One
    cache per distinct pattern (source and flags), shared by every field
    declaring it: a string that matched matches wherever the pattern is.
    """
    key = (pattern.pattern, int(pattern.flags))
    got = _PATTERN_CACHES.get(key)
    if got is not None:
        return got
    ok: dict[str, bool] = {}
    fullmatch = pattern.fullmatch

    def matches(s: str) -> bool:
        if fullmatch(s) is None:
            return False
        if len(s) <= _CACHE_MAX_CHARS:
            if len(ok) >= _CACHE_MAX:
                # Full (unique op ids fill it): start again, so that strings
                # that recur (boot, stream, org ids) are soon remembered again.
                ok.clear()
            ok[s] = True
        return True

    _PATTERN_CACHES[key] = (ok, matches)
    return ok, matches


def _ascii_width(pattern: re.Pattern[str]) -> tuple[int, int | None] | None:
    """``(min, max)`` length of every full match, if the pattern matches ASCII only.

    ``max`` is ``None`` when unbounded. ``None`` when the pattern could match a
    non-ASCII character (a negated set, ``.``, a category such as ``\\w``, a
    flag) or uses a construct not analysed here: the caller then keeps its
    length checks. For an ASCII-only pattern, a match's length in UTF-16
    code units is its ``len``, so a length limit the pattern already implies
    need not be checked again (the fast path's shortcut; the slow path always
    checks). Conservative: any doubt answers ``None``.
    """
    if pattern.flags != re.UNICODE:
        return None
    try:
        parsed = _re_parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - a pattern this analysis cannot read
        return None
    return _items_width(list(parsed))


def _items_width(items: list[tuple[Any, Any]]) -> tuple[int, int | None] | None:
    c = _re_constants
    lo = 0
    hi: int | None = 0
    for op, av in items:
        if op is c.LITERAL:
            if av >= 0x80:
                return None
            w: tuple[int, int | None] | None = (1, 1)
        elif op is c.IN:
            if not all(
                (o is c.LITERAL and a < 0x80) or (o is c.RANGE and a[1] < 0x80) for o, a in av
            ):
                return None
            w = (1, 1)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            rmin, rmax, sub = av
            inner = _items_width(list(sub))
            if inner is None:
                return None
            top = None if inner[1] is None or rmax == c.MAXREPEAT else inner[1] * rmax
            w = (inner[0] * rmin, top)
        elif op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                return None
            w = _items_width(list(sub))
        elif op is c.BRANCH:
            widths = [_items_width(list(sub)) for sub in av[1]]
            if any(x is None for x in widths) or not widths:
                return None
            ws = typing.cast(list[tuple[int, int | None]], widths)
            tops = [x[1] for x in ws]
            w = (min(x[0] for x in ws), None if None in tops else max(typing.cast(list[int], tops)))
        elif op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            w = (0, 0)  # consumes nothing
        else:
            return None
        if w is None:
            return None
        lo += w[0]
        hi = None if hi is None or w[1] is None else hi + w[1]
    return lo, hi


def _len_check(x: str, lo: int, hi: int | None, ns: dict[str, Any], i: int) -> str | None:
    """A length test in UTF-16 units for a ``str`` ``x``, or ``None`` if none is needed.

    Code points bound code units: ``len(x) <= utf16_len(x) <= 2 * len(x)``. So
    ``lo <= len(x)`` proves the lower bound and ``len(x) <= hi // 2`` the
    upper one; only a string failing that quick test is measured exactly.
    """
    if lo <= 0 and hi is None:
        return None
    quick = (f"{lo} <= " if lo > 0 else "") + f"len({x})"
    quick += f" <= {hi // 2}" if hi is not None else ""

    def exact(s: str) -> bool:
        n = utf16_len(s)
        return lo <= n and (hi is None or n <= hi)

    ns[f"_len{i}"] = exact
    return f"({quick} or _len{i}({x}))"


def _str_check(x: str, sp: _Spec, ns: dict[str, Any], i: int, *, cache: bool) -> str:
    """A boolean expression over local ``x`` (already known to be a str).

    Implied by the slow path's checks of the same spec, and implying them.
    A length limit that an ASCII-only pattern bounds already is not tested
    twice (:func:`_ascii_width`); with an ASCII-only pattern, ``len`` is the
    length in UTF-16 units.
    """
    parts = []
    lo = 0 if sp.min_len is None else sp.min_len
    hi = sp.max_len
    width = _ascii_width(sp.pattern) if sp.pattern is not None else None
    if width is not None:
        if lo <= width[0]:
            lo = 0
        if hi is not None and width[1] is not None and width[1] <= hi:
            hi = None
        if lo > 0 or hi is not None:
            # The pattern (checked in the same expression) proves x is ASCII.
            bound = (f"{lo} <= " if lo > 0 else "") + f"len({x})"
            parts.append(bound + (f" <= {hi}" if hi is not None else ""))
    else:
        check = _len_check(x, lo, hi, ns, i)
        if check is not None:
            parts.append(check)
    if sp.no_control:
        parts.append(f"(({x}.isascii() and {x}.isprintable()) or _ctrl({x}) is None)")
    if sp.pattern is not None:
        if cache:
            ok, matches = _pattern_cache(sp.pattern)
            ns[f"_ok{i}"], ns[f"_pm{i}"] = ok, matches
            parts.append(f"({x} in _ok{i} or _pm{i}({x}))")
        else:
            ns[f"_fm{i}"] = sp.pattern.fullmatch
            parts.append(f"_fm{i}({x}) is not None")
    return " and ".join(parts) if parts else "True"


def _tagged_table(members: list[Any], building: _Building) -> dict[str, Decoder] | None:
    """``tag value → decoder`` for a union of tagged models (``None`` otherwise)."""
    if not members or not all(_is_model(m) and m.TAG is not None for m in members):
        return None
    keys = {m.TAG[0] for m in members}
    if len(keys) != 1:
        return None
    table = {m.TAG[1]: _decoder_for(m, building) for m in members}
    return table if len(table) == len(members) else None


def _field_code(
    tp: Any, sp: _Spec, ns: dict[str, Any], i: int, dec: Decoder, building: _Building
) -> list[str]:
    """Statements that check local ``x`` and leave the decoded value in it.

    They ``return _slow(v)`` on a failed check; calls to sub-decoders raise
    ``_Fail``, which the caller turns into ``return _slow(v)`` too.
    """
    args = _union_args(tp)
    nullable = False
    ns[f"_d{i}"] = dec
    if args is not None:
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        table = _tagged_table(members, building)
        if table is not None:
            # A tagged union: dispatch on the tag here (the member's decoder
            # checks the tag again, with the rest of the object).
            (key,) = {m.TAG[0] for m in members}
            ns[f"_tab{i}"] = table
            tagged = [
                "if type(x) is not dict: return _slow(v)",
                f"t = x.get({key!r})",
                "if type(t) is not str: return _slow(v)",
                f"dd = _tab{i}.get(t)",
                "if dd is None: return _slow(v)",
                "x = dd(x)",
            ]
            if not nullable:
                return tagged
            return ["if x is not None:", *("    " + line for line in tagged)]
        if not (len(args) == 2 and nullable):
            return [f"x = _d{i}(x)"]
        (tp,) = members
        if _union_args(tp) is not None:
            return [f"x = _d{i}(x)"]
    body: list[str]
    if tp is str or tp is Secret:
        check = _str_check("x", sp, ns, i, cache=tp is str)
        body = [f"if type(x) is not str or not ({check}): return _slow(v)"]
        if tp is Secret:
            body.append("x = _Secret(x)")
    elif tp is int:
        lo = -MAX_SAFE_INTEGER if sp.minimum is None else max(-MAX_SAFE_INTEGER, sp.minimum)
        hi = MAX_SAFE_INTEGER if sp.maximum is None else min(MAX_SAFE_INTEGER, sp.maximum)
        body = [f"if type(x) is not int or not ({lo!r} <= x <= {hi!r}): return _slow(v)"]
    elif tp is bool:
        body = ["if type(x) is not bool: return _slow(v)"]
    elif get_origin(tp) is Literal and len({type(a) for a in get_args(tp)}) == 1:
        values = get_args(tp)
        t = type(values[0])
        if t not in (str, int):
            return [f"x = _d{i}(x)"]
        ns[f"_lit{i}"] = frozenset(values)
        body = [f"if type(x) is not {t.__name__} or x not in _lit{i}: return _slow(v)"]
    elif _is_model(tp) and nullable:
        # The model's own (fast) decoder, without the nullable wrapper.
        ns[f"_m{i}"] = _decoder_for(tp, building)
        body = [f"x = _m{i}(x)"]
    elif (
        get_origin(tp) is tuple
        and len(get_args(tp)) == 2
        and get_args(tp)[1] is Ellipsis
        and not sp.unique
        and not nullable
    ):
        ns[f"_item{i}"] = _compile_decoder(
            get_args(tp)[0], dataclasses.replace(sp, min_items=None, max_items=None), building
        )
        lo = 0 if sp.min_items is None else sp.min_items
        bound = f"{lo} <= len(x)" + (f" <= {sp.max_items}" if sp.max_items is not None else "")
        return [
            f"if type(x) is not list or not ({bound}): return _slow(v)",
            f"x = tuple(map(_item{i}, x))",
        ]
    else:
        return [f"x = _d{i}(x)"]
    if not nullable:
        return body
    return ["if x is not None:", *("    " + line for line in body)]


def _twin(cls: type) -> type | None:
    """A mutable class with the exact instance layout of frozen ``cls``, or ``None``.

    An instance is built as the twin (plain attribute stores, the fastest way
    to fill slots) and then becomes a ``cls`` by ``__class__`` assignment,
    which Python allows only between identical layouts; that is tried here
    once. ``None`` (the caller then sets each slot through its descriptor)
    for a class without ``__slots__`` of its own, with a mangled slot name,
    or whose layout the assignment refuses.
    """
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or any(s.startswith("__") for s in slots):
        return None
    if "__dict__" in slots or "__weakref__" in slots or len(cls.__bases__) != 1:
        return None
    twin = type(
        f"_Twin_{cls.__name__}",
        cls.__bases__,
        {
            "__slots__": slots,
            # Both, so that the type's setattr slot is the generic one (fast,
            # specialized stores) even under a frozen base's overrides.
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
        },
    )
    try:
        probe: Any = object.__new__(twin)
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


def constructor(cls: type[T]) -> Callable[..., T]:
    """A fast positional constructor for a frozen, slotted dataclass ``cls``.

    ``constructor(C)(a, b, ...)`` equals ``C(f1=a, f2=b, ...)`` (fields in
    declaration order, every field given, no defaults) but skips
    ``__init__``: no ``__post_init__``, no conversion, no check. For hot paths
    that build values they already know valid (decoded frames, acks, commands);
    never for input. Falls back to setting each slot through its descriptor
    when a twin layout is not possible (:func:`_twin`).

    Raises:
        TypeError: ``cls`` is not a dataclass, or defines ``__post_init__``.
    """
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        raise TypeError("constructor() needs a dataclass without __post_init__")
    names = [f.name for f in dataclasses.fields(cls)]
    twin = _twin(cls)
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_twin": twin}
    params = ", ".join(f"a{i}" for i in range(len(names)))
    lines = [f"def make({params}):"]
    if twin is not None:
        lines.append("    o = _new(_twin)")
        lines.extend(f"    o.{n} = a{i}" for i, n in enumerate(names))
        lines.append("    o.__class__ = _cls")
    else:
        lines.append("    o = _new(_cls)")
        for i, n in enumerate(names):
            ns[f"_set{i}"] = _slot_setter(cls, n)
            lines.append(f"    _set{i}(o, a{i})")
    lines.append("    return o")
    exec(compile("\n".join(lines), f"<leasegate constructor {cls.__qualname__}>", "exec"), ns)  # noqa: S102
    return typing.cast(Callable[..., T], ns["make"])


def _fast_model_decoder(
    cls: type[Model],
    declared: list[tuple[str, str, Any, _Spec]],
    decoders: list[Decoder],
    slow: Decoder,
    building: _Building,
) -> Decoder:
    twin = _twin(cls)
    ns: dict[str, Any] = {
        "_slow": slow,
        "_Fail": _Fail,
        "_new": object.__new__,
        "_cls": cls,
        "_twin": twin,
        "_u16": utf16_len,
        "_ctrl": _CONTROL.search,
        "_Secret": _fast_secret,
    }
    tag = cls.TAG
    n_keys = len(declared) + (1 if tag is not None else 0)
    lines = [
        "def fast(v):",
        f"    if type(v) is not dict or len(v) != {n_keys}: return _slow(v)",
    ]
    if twin is not None:
        # Fields go straight into the (still mutable) twin; it becomes a
        # _cls only once every field passed.
        lines.append("    o = _new(_twin)")
    lines.append("    try:")
    if tag is not None:
        ns["_tag"] = tag[1]
        lines.append(f"        t = v[{tag[0]!r}]")
        lines.append("        if type(t) is not str or t != _tag: return _slow(v)")
    for i, ((py, wname, tp, sp), dec) in enumerate(zip(declared, decoders, strict=True)):
        lines.append(f"        x = v[{wname!r}]")
        lines.extend("        " + line for line in _field_code(tp, sp, ns, i, dec, building))
        lines.append(f"        o.{py} = x" if twin is not None else f"        f{i} = x")
    lines.append("    except (KeyError, _Fail):")
    lines.append("        return _slow(v)")
    if twin is not None:
        lines.append("    o.__class__ = _cls")
    else:
        lines.append("    o = _new(_cls)")
        for i, (pyname, _w, _t, _s) in enumerate(declared):
            ns[f"_set{i}"] = _slot_setter(cls, pyname)
            lines.append(f"    _set{i}(o, f{i})")
    if cls._check is not Model._check:
        lines.append("    if o._check() is not None: return _slow(v)")
    lines.append("    return o")
    source = "\n".join(lines)
    exec(compile(source, f"<leasegate decoder {cls.__qualname__}>", "exec"), ns)  # noqa: S102
    return typing.cast(Decoder, ns["fast"])


_SECRET_SET: Final = Secret.__dict__["_value"].__set__


def _fast_secret(value: str) -> Secret:
    """``Secret(value)`` for a value already known to be a ``str``."""
    out = object.__new__(Secret)
    _SECRET_SET(out, value)
    return out


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """Set attribute ``name`` of a frozen (slotted or not) instance."""
    for klass in cls.__mro__:
        desc = klass.__dict__.get(name)
        if desc is not None and hasattr(desc, "__set__"):
            return typing.cast(Callable[[Any, Any], None], desc.__set__)

    def set_attr(obj: Any, value: Any) -> None:
        object.__setattr__(obj, name, value)

    return set_attr


def _split(path: str) -> list[str]:
    return [p for p in re.split(r"\.|(?=\[)", path) if p]


def _compile_encoder(tp: Any, building: _Building = frozenset()) -> Encoder:
    args = _union_args(tp)
    if args is not None:
        encs = [(a, _compile_encoder(a, building)) for a in args if a is not type(None)]

        def enc_union(v: Any) -> Any:
            if v is None:
                return None
            for a, e in encs:
                if _is_model(a):
                    if type(v) is a:
                        return e(v)
                else:
                    return e(v)
            raise TypeError("value matches no member of the union")

        return enc_union
    if tp is Secret:
        return lambda v: v.reveal()
    if tp in (str, int, float, bool, Any) or tp is type(None) or get_origin(tp) is Literal:
        return lambda v: v
    origin = get_origin(tp)
    if origin is tuple:
        item = _compile_encoder(get_args(tp)[0], building)
        return lambda v: [item(x) for x in v]
    if origin is dict:
        val = _compile_encoder(get_args(tp)[1], building)
        return lambda v: {k: val(x) for k, x in v.items()}
    if _is_model(tp):
        if tp in building or tp in _ENCODERS:
            return _encoder_for(tp, building)
        return _model_encoder(tp, building)
    raise TypeError(f"unsupported wire annotation {tp!r}")


def _model_encoder(cls: type[Model], building: _Building) -> Encoder:
    """Build (never publish) the encoder of ``cls``; the caller publishes."""
    building = building | {cls}
    fields_: list[tuple[str, str, Encoder]] = [
        (pyname, wname, _compile_encoder(tp, building))
        for pyname, wname, tp, _sp in _model_fields(cls)
    ]
    tag = cls.TAG

    def enc_model(v: Any) -> dict[str, Any]:
        out: dict[str, Any] = {tag[0]: tag[1]} if tag is not None else {}
        for pyname, wname, enc in fields_:
            out[wname] = enc(getattr(v, pyname))
        return out

    return enc_model


def field_specs(cls: type[Model]) -> Mapping[str, tuple[str, Any, _Spec]]:
    """The declared fields of a model: python name → (wire name, type, spec).

    For docs and tests that enumerate the strictness rules of each model.
    """
    return {py: (w, tp, sp) for py, w, tp, sp in _model_fields(cls)}
