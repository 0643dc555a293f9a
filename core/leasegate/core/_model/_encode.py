"""Encoders: a model instance to its JSON value (what goes on the wire)."""

from __future__ import annotations

import typing
from typing import Any, Literal, get_args, get_origin

from .._secret import Secret
from ._declare import Encoder, Model, _Building, _is_model, _model_fields, _union_args

_ENCODERS: dict[Any, Encoder] = {}


def encode(obj: Model) -> dict[str, Any]:
    """Encode a model to its JSON value (dicts, lists, str, int, ...).

    Secrets are revealed: the result is what goes on the wire. The inverse of
    :func:`decode`: ``decode(type(m), encode(m)) == m``.
    """
    enc = _encoder_for(type(obj))
    return typing.cast(dict[str, Any], enc(obj))


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
