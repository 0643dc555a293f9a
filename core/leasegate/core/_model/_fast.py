"""The generated fast path: one straight-line decoder per model.

Each model also gets a decoder generated as Python source from the same
declarations as its reference decoder (:mod:`._decode`): straight-line code
with the common checks inlined, that builds the instance without going
through the dataclass ``__init__``. It only ever *accepts*: at the first
check that does not pass, it hands the value to the reference decoder,
which then fails with the precise field path and reason. So the fast path
can never change what is accepted as long as each inlined check is implied
by the reference's; ``tests/core/test_model.py`` checks that the two agree
on the codec's fuzz corpus and on generated values.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, Final, Literal, get_args, get_origin

from .._json import MAX_SAFE_INTEGER, utf16_len
from .._secret import Secret
from ._construct import _slot_setter, _twin
from ._declare import _CONTROL, Decoder, Model, _Fail, _is_model, _Spec, _union_args
from ._patterns import _CACHE_MAX, _CACHE_MAX_CHARS, _ascii_width, _pattern_cache

#: Compiles the decoder of a field's annotation and spec (the reference
#: compiler, bound to the models being compiled in this call chain).
SubDecoder = Callable[[Any, _Spec], Decoder]


_SECRET_SET: Final = Secret.__dict__["_value"].__set__
#: Secrets are built as decoded instances are (``_construct._twin``): filled as
#: a mutable twin, then re-classed.
_SECRET_TWIN: Final = _twin(Secret)


def _secret_code(src: str, dst: str) -> list[str]:
    """Statements that set local ``dst`` to ``Secret(src)`` for a ``str`` ``src`` (no call)."""
    if _SECRET_TWIN is None:
        return [f"{dst} = _new(_Secret)", f"_set_secret({dst}, {src})"]
    return [f"{dst} = _secret_twin()", f"{dst}._value = {src}", f"{dst}.__class__ = _Secret"]


def _fast_secret(value: str) -> Secret:
    """``Secret(value)`` for a value already known to be a ``str``."""
    out = object.__new__(Secret)
    _SECRET_SET(out, value)
    return out


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


def _str_check(x: str, sp: _Spec, ns: dict[str, Any], i: int, *, cache: bool) -> list[str]:
    """Statements that ``return _slow(v)`` unless local ``x`` is a str that meets ``sp``.

    Implied by the slow path's checks of the same spec, and implying them.
    A length limit that an ASCII-only pattern bounds already is not tested
    twice (:func:`_ascii_width`); with an ASCII-only pattern, ``len`` is the
    length in UTF-16 units. With ``cache`` (a non-secret field), a string
    that matched the pattern before is not matched again, and ``x`` becomes
    the remembered instance, so that a value that recurs (an org id, a
    region, an engine name) is one object however often it is decoded.
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
            # The pattern (checked below) proves x is ASCII.
            bound = (f"{lo} <= " if lo > 0 else "") + f"len({x})"
            parts.append(bound + (f" <= {hi}" if hi is not None else ""))
    else:
        check = _len_check(x, lo, hi, ns, i)
        if check is not None:
            parts.append(check)
    if sp.no_control:
        parts.append(f"(({x}.isascii() and {x}.isprintable()) or _ctrl({x}) is None)")
    out = [f"if type({x}) is not str or not ({' and '.join(parts)}): return _slow(v)"]
    if not parts:
        out = [f"if type({x}) is not str: return _slow(v)"]
    if sp.pattern is None:
        return out
    ns[f"_fm{i}"] = sp.pattern.fullmatch
    match = f"_fm{i}({x}) is None"
    if not cache:
        return [*out, f"if {match}: return _slow(v)"]
    ns[f"_ok{i}"] = _pattern_cache(sp.pattern)[0]
    remember = [f"if len(_ok{i}) >= {_CACHE_MAX}: _ok{i}.clear()", f"_ok{i}[{x}] = {x}"]
    if width is None or width[1] is None or width[1] > _CACHE_MAX_CHARS:
        remember = [f"if len({x}) <= {_CACHE_MAX_CHARS}:", *("    " + r for r in remember)]
    return [
        *out,
        f"if {x} in _ok{i}:",
        f"    {x} = _ok{i}[{x}]",
        "else:",
        f"    if {match}: return _slow(v)",
        *("    " + r for r in remember),
    ]


def _tagged_table(members: list[Any], sub: SubDecoder) -> dict[str, Decoder] | None:
    """``tag value → decoder`` for a union of tagged models (``None`` otherwise)."""
    if not members or not all(_is_model(m) and m.TAG is not None for m in members):
        return None
    keys = {m.TAG[0] for m in members}
    if len(keys) != 1:
        return None
    table = {m.TAG[1]: sub(m, _Spec()) for m in members}
    return table if len(table) == len(members) else None


def _field_code(
    tp: Any, sp: _Spec, ns: dict[str, Any], i: int, dec: Decoder, sub: SubDecoder
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
        table = _tagged_table(members, sub)
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
        body = _str_check("x", sp, ns, i, cache=tp is str)
        if tp is Secret:
            # Secret(x) without the call (x is known to be a str).
            body += [*_secret_code("x", "s"), "x = s"]
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
        # The declared value itself, not the decoded copy (one object per value).
        ns[f"_lit{i}"] = {value: value for value in values}
        body = [
            f"if type(x) is not {t.__name__} or x not in _lit{i}: return _slow(v)",
            f"x = _lit{i}[x]",
        ]
    elif _is_model(tp) and nullable:
        # The model's own (fast) decoder, without the nullable wrapper.
        ns[f"_m{i}"] = sub(tp, _Spec())
        body = [f"x = _m{i}(x)"]
    elif (
        get_origin(tp) is dict
        and get_args(tp)[0] is str
        and get_args(tp)[1] in (str, Secret)
        and not nullable
    ):
        return _mapping_code(get_args(tp)[1], sp, ns, i)
    elif (
        get_origin(tp) is tuple
        and len(get_args(tp)) == 2
        and get_args(tp)[1] is Ellipsis
        and not sp.unique
        and not nullable
    ):
        ns[f"_item{i}"] = sub(
            get_args(tp)[0], dataclasses.replace(sp, min_items=None, max_items=None)
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


def _mapping_code(val_tp: Any, sp: _Spec, ns: dict[str, Any], i: int) -> list[str]:
    """Statements that decode local ``x``, a ``dict[str, str | Secret]``, into a new dict.

    The checks of the reference's object decoder (``_decode._object_decoder``):
    the item count, every key's pattern, every value's string spec (the
    value spec without the item and key limits). A key that matched before
    is the remembered instance (the key pattern's cache), so that recurring
    names (``ANTHROPIC_API_KEY``) are one object.
    """
    lo = 0 if sp.min_items is None else sp.min_items
    bound = f"{lo} <= len(x)" + (f" <= {sp.max_items}" if sp.max_items is not None else "")
    out = [f"if type(x) is not dict or not ({bound}): return _slow(v)", "y = {}"]
    body = ["if type(k) is not str: return _slow(v)"]
    if sp.key_pattern is not None:
        ns[f"_kfm{i}"] = sp.key_pattern.fullmatch
        ns[f"_kok{i}"] = _pattern_cache(sp.key_pattern)[0]
        body += [
            f"if k in _kok{i}:",
            f"    k = _kok{i}[k]",
            "else:",
            f"    if _kfm{i}(k) is None: return _slow(v)",
            f"    if len(k) <= {_CACHE_MAX_CHARS}:",
            f"        if len(_kok{i}) >= {_CACHE_MAX}: _kok{i}.clear()",
            f"        _kok{i}[k] = k",
        ]
    val_sp = dataclasses.replace(sp, key_pattern=None, min_items=None, max_items=None)
    body += _str_check("s", val_sp, ns, i, cache=False)
    if val_tp is Secret:
        body += [*_secret_code("s", "o2"), "y[k] = o2"]
    else:
        body.append("y[k] = s")
    return [*out, "for k, s in x.items():", *("    " + line for line in body), "x = y"]


def fast_model_decoder(
    cls: type[Model],
    declared: list[tuple[str, str, Any, _Spec]],
    decoders: list[Decoder],
    slow: Decoder,
    sub: SubDecoder,
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
        "_Secret": Secret,
        "_set_secret": _SECRET_SET,
        "_secret_twin": _SECRET_TWIN,
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
        lines.append("    o = _twin()")
    lines.append("    try:")
    if tag is not None:
        ns["_tag"] = tag[1]
        lines.append(f"        t = v[{tag[0]!r}]")
        lines.append("        if type(t) is not str or t != _tag: return _slow(v)")
    for i, ((py, wname, tp, sp), dec) in enumerate(zip(declared, decoders, strict=True)):
        lines.append(f"        x = v[{wname!r}]")
        lines.extend("        " + line for line in _field_code(tp, sp, ns, i, dec, sub))
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
    ns["SOURCE"] = source  # fast.__globals__["SOURCE"]: the generated code, for reading
    exec(compile(source, f"<leasegate decoder {cls.__qualname__}>", "exec"), ns)  # noqa: S102
    return typing.cast(Decoder, ns["fast"])
