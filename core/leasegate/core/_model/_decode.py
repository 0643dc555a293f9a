"""The reference decoders, and the entry points :func:`decode` and :func:`decoder`.

Each annotation compiles to a closure that checks one rule after another and
raises the internal ``_Fail`` at the first one that does not hold (the
caller collects the field path on the way out). These decoders *are* the
rules: the generated fast path (:mod:`._fast`) accepts only what they
accept, and hands them every value it is not sure of, so that every
refusal's path and reason come from here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar, get_args, get_origin

from .._json import MAX_SAFE_INTEGER, is_js_finite, utf16_len
from .._secret import Secret
from ._declare import (
    _CONTROL,
    DecodeError,
    Decoder,
    Model,
    _Building,
    _Fail,
    _is_model,
    _join,
    _key_name,
    _model_fields,
    _Spec,
    _split,
    _union_args,
)
from ._fast import fast_model_decoder

T = TypeVar("T")

_DECODERS: dict[Any, Decoder] = {}
_MISSING: Final = object()


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
    except Exception as exc:  # noqa: BLE001 - every failure becomes a DecodeError
        return _error_of(exc)


def decoder(model: type[T] | Any) -> Callable[[object], T | DecodeError]:
    """A ready decoder for ``model``: ``decoder(M)(value) == decode(M, value)``.

    Compiles (or looks up) the model's decoder once, so that a hot path, such
    as ``decode_frame`` over a union of frames, skips the per-call lookup.
    The returned function never raises.
    """
    return _runner(_decoder_for(model))


def reference_decoder(model: type[T] | Any) -> Callable[[object], T | DecodeError]:
    """As :func:`decoder`, with the reference decoders only (no fast path at any depth).

    For tests that check the generated fast path against the rules it
    shortcuts: ``reference_decoder(M)(v)`` and ``decoder(M)(v)`` must agree
    for every value (the same instance, or the same error). A decoder
    registered by hand for a model (``EnvAck``'s) serves both.
    """
    return _runner(_decoder_for(model, _REFERENCE_ONLY))


def _runner(dec: Decoder) -> Callable[[object], Any]:
    """``dec`` turned into a function that returns a :class:`DecodeError` instead of raising."""

    def run(value: object) -> Any:
        try:
            return dec(value)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a DecodeError
            return _error_of(exc)

    return run


def _error_of(exc: Exception) -> DecodeError:
    """The :class:`DecodeError` of a decoder's failure: the rule that refused
    (``_Fail``, with its field path), input nested too deeply, or input whose
    own ``__eq__``/``__hash__`` raised."""
    if isinstance(exc, _Fail):
        exc.path.reverse()
        return DecodeError(_join(exc.path), exc.reason)
    if isinstance(exc, RecursionError):
        return DecodeError("", "nested too deeply")
    return DecodeError("", "invalid value")


# Compiled coders are published in _DECODERS/_ENCODERS only once complete
# (build, then publish), so a thread that finds one may use it at once. Two
# threads compiling the same model at the same time both build it and one
# wins; both results are complete and equivalent. A model that refers to
# itself (directly or through others) being compiled in *this* call chain is
# reached through an indirection (_late_decoder/_late_encoder) that looks the
# finished coder up when called, which is only after it was published.
# `building` is the set of models being compiled in this call chain; with
# _REFERENCE in it, the chain compiles the reference decoders only (no fast
# path at any depth), published in _REFERENCE_DECODERS instead.

#: Marks a compilation of reference decoders only (see reference_decoder).
_REFERENCE: Final = object()
_REFERENCE_ONLY: Final[_Building] = frozenset({_REFERENCE})
_REFERENCE_DECODERS: dict[Any, Decoder] = {}
#: What _decoder_for published in _DECODERS; any other entry (EnvAck's) was
#: registered by hand and is also the reference decoder of its type.
_COMPILED: dict[Any, Decoder] = {}


def _decoder_for(tp: Any, building: _Building = frozenset()) -> Decoder:
    if _REFERENCE in building:
        return _reference_decoder_for(tp, building)
    dec = _DECODERS.get(tp)
    if dec is None:
        if tp in building:
            return _late_decoder(tp, building)
        dec = _DECODERS[tp] = _COMPILED[tp] = _build_decoder(tp, building)
    return dec


def _reference_decoder_for(tp: Any, building: _Building) -> Decoder:
    dec = _REFERENCE_DECODERS.get(tp)
    if dec is None:
        by_hand = _DECODERS.get(tp)
        if by_hand is not None and _COMPILED.get(tp) is not by_hand:
            return by_hand
        if tp in building:
            return _late_decoder(tp, building)
        dec = _REFERENCE_DECODERS[tp] = _build_decoder(tp, building)
    return dec


def _build_decoder(tp: Any, building: _Building) -> Decoder:
    if _is_model(tp):
        return _model_decoder(tp, building)
    return _compile_decoder(tp, _Spec(), building)


def _late_decoder(tp: Any, building: _Building) -> Decoder:
    mode = _REFERENCE_ONLY if _REFERENCE in building else frozenset()
    published = _REFERENCE_DECODERS if mode else _DECODERS

    def late(v: Any) -> Any:
        # Normally published by now; a mutually recursive model published
        # before the model it reaches may run first: compile that one then.
        dec = published.get(tp)
        return (dec if dec is not None else _decoder_for(tp, mode))(v)

    return late


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
    # (type, value) → the declared value: a decoded literal is the declared
    # object itself (one object per value, however often it is decoded).
    allowed = {(type(v), v): v for v in values}
    allowed_types = frozenset(type(v) for v in values)

    def dec_literal(v: Any) -> Any:
        # The type test first: an unhashable value (a list) is never allowed.
        if type(v) not in allowed_types:
            raise _Fail("not an allowed value")
        out = allowed.get((type(v), v), _MISSING)
        if out is _MISSING:
            raise _Fail("not an allowed value")
        return out

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

    if _REFERENCE in building:
        return dec_model

    def sub(tp: Any, sp: _Spec) -> Decoder:
        return _compile_decoder(tp, sp, building)

    return fast_model_decoder(cls, declared, [d for _, _, d in fields_], dec_model, sub)
