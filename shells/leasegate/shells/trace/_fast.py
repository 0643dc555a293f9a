"""The replay's fast paths: JSON lines, events and commands without cattrs' dispatch.

Replay reads every line, turns its event into a core value and checks the
commands the fresh core returns against the recorded ones. The full paths for
those are :func:`json.loads`, the cattrs converter of :mod:`._codec` and a
comparison of JSON texts; this module does the same three jobs faster, and
each of them only ever answers what the full path would, or hands over to it:

* :func:`loads` parses a line with msgspec's JSON decoder; when msgspec refuses
  the text, :func:`json.loads` parses it (and raises its own errors).
* :class:`EventDecoder` structures a trace-form value (a parsed ``{"$t": ...}``
  object) straight into the core dataclass it names, with one compiled hook
  per type. Whenever the value is not plainly valid, the cattrs converter
  structures it instead (and raises its :class:`~._codec.TraceValueError`).
* :class:`TraceText` writes the JSON text of a core value's trace form —
  exactly ``json`` of the converter's ``unstructure`` — with one generated
  writer per type; replay compares the commands' text with the tail of the
  recorded line, the full path's own first comparison.
* :class:`CommandMatcher` says whether a core value is exactly what a parsed
  trace-form value holds (same types, same values, same key order: what makes
  their JSON texts equal). ``False`` means "not shown equal": replay then
  compares the JSON texts and reports the divergence from them.

Catalog TR-001, TR-005 (``docs/trace-format.md``).
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Union

import msgspec

from leasegate.core import Secret

from ._codec import _OPAQUE_FIELDS, TAG_OF, TYPES, TraceValueError, _hints

__all__ = ["CommandMatcher", "EventDecoder", "TraceText", "loads"]

_decode: Final = msgspec.json.Decoder().decode


def _bad_constant(name: str) -> Any:
    raise ValueError("a non-JSON number constant")


def loads(text: str) -> Any:
    """Parse one JSON text exactly as ``json.loads(text)`` with the non-JSON
    number constants (``NaN``, ``Infinity``) refused.

    msgspec parses the text; what msgspec refuses (a lone surrogate escape, a
    number beyond a float's range, a text nested deeper than msgspec goes, any
    malformed text) is parsed by :func:`json.loads` instead, which either
    accepts it or raises its own error.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError`` or the constant's error).
        RecursionError: nested too deeply for :func:`json.loads`.
    """
    try:
        return _decode(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text, parse_constant=_bad_constant)


class _Slow(Exception):  # noqa: N818 - a signal, not an error
    """The fast path cannot tell: the full path structures the value."""


class _Reject(_Slow):
    """The full path surely rejects this value for this type (a union tries the next)."""


_SLOW: Final = _Slow()
_REJECT: Final = _Reject()

Hook = Callable[[Any], Any]


def _unesc(k: str) -> str:
    return k[1:] if k.startswith("$$") else k


_NON_FINITE: Final = frozenset(("inf", "-inf", "nan"))


class EventDecoder:
    """Structures trace-form values into core dataclasses, as the cattrs
    converter does, without its dispatch.

    Args:
        converter: the full path (``make_converter(None)``): it structures any
            value the fast hooks do not plainly accept, and gives the errors.

    :meth:`decode` returns a value equal to ``converter.structure(value,
    object)`` or raises what that raises (a differential test checks it over
    recorded and mutated traces).
    """

    def __init__(self, converter: Any) -> None:
        self._conv = converter
        self._hooks: dict[Any, Hook] = {}
        self._dc: dict[type, Hook] = {}
        self._any = self._make_any()

    def decode(self, value: Any) -> Any:
        """``converter.structure(value, object)``, fast when the value is plainly valid.

        Raises:
            TraceValueError: the value does not have its type's shape.
            RecursionError: nested too deeply.
        """
        try:
            return self._any(value)
        except (_Slow, RecursionError):
            pass
        return self._conv.structure(value, object)

    # ----------------------------------------------------------------- hooks

    def _make_any(self) -> Hook:
        dataclass = self._dataclass
        types_get = TYPES.get

        def any_(v: Any) -> Any:
            t = type(v)
            if v is None or t is bool or t is int or t is str or t is float:
                return v
            if t is list:
                return [any_(x) for x in v]
            if t is dict:
                if "$t" in v:
                    tag = v["$t"]
                    cls = types_get(tag) if type(tag) is str else None
                    if cls is None:
                        raise _REJECT
                    return dataclass(cls)(v)
                if "$secret" in v:
                    return _secret(v)
                if "$f" in v:
                    return _float(v)
                if "$opaque" in v:
                    raise _REJECT
                return {
                    (k[1:] if k.startswith("$$") else k): (
                        x if (x is None or type(x) is str or type(x) is int) else any_(x)
                    )
                    for k, x in v.items()
                }
            raise _REJECT

        return any_

    def _hook(self, hint: Any) -> Hook:
        try:
            got = self._hooks.get(hint)
        except TypeError:  # an unhashable annotation
            return self._full(hint)
        if got is None:
            got = self._hooks[hint] = self._make(hint)
        return got

    def _make(self, hint: Any) -> Hook:
        if hint is int or hint is str or hint is bool:
            return _exact(hint)
        if hint is type(None):
            return _none
        if hint is Secret:
            return _secret
        if hint is float:
            return _float
        if hint is object or hint is Any:
            return self._any
        if isinstance(hint, type) and hint in TAG_OF:
            return self._dataclass(hint)
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is Union or origin is types.UnionType:
            return self._union(args)
        if origin is Literal:
            return _literal(args)
        if origin is tuple:
            return self._tuple(args)
        if origin is list:
            return self._list(self._hook(args[0]) if args else self._any)
        if origin in (dict, Mapping, typing.Mapping):
            val = self._hook(args[1]) if len(args) == 2 else self._any
            return self._map(val, frozen=origin is not dict)
        if origin is None and isinstance(hint, type):
            return self._instance(hint)
        return self._full(hint)

    def _full(self, hint: Any) -> Hook:
        """The converter's own hook for an annotation the fast path does not model."""
        hook = self._conv.get_structure_hook(hint)

        def st(v: Any) -> Any:
            try:
                return hook(v, hint)
            except TraceValueError:
                raise _REJECT from None

        return st

    def _instance(self, tp: type) -> Hook:
        # An untagged class annotation (``Model``, a Protocol): any tagged
        # value that is an instance of it.
        def st(v: Any) -> Any:
            got = self._any(v)
            try:
                ok = isinstance(got, tp)
            except TypeError:
                ok = True
            if not ok:
                raise _REJECT
            return got

        return st

    def _union(self, args: tuple[Any, ...]) -> Hook:
        # Each member's hook, with the exact type of a value it alone can take
        # (``None``, ``int``, ``str``, ``bool``: tried without raising) or
        # ``None``, and whether it takes only objects (a tagged dataclass, a secret).
        members = tuple(
            (
                a if a is type(None) or a is int or a is str or a is bool else None,
                a is Secret or (isinstance(a, type) and a in TAG_OF),
                self._hook(a),
            )
            for a in args
        )

        def st(v: Any) -> Any:
            t = type(v)
            for exact, objects_only, hook in members:
                if exact is not None:
                    if t is exact:
                        return v
                    continue
                if objects_only and t is not dict:
                    continue
                try:
                    return hook(v)
                except _Reject:
                    continue
            raise _REJECT

        return st

    def _tuple(self, args: tuple[Any, ...]) -> Hook:
        if len(args) == 2 and args[1] is Ellipsis:
            item = self._hook(args[0])

            def st_var(v: Any) -> Any:
                if type(v) is not list:
                    raise _REJECT
                return tuple([item(x) for x in v])

            return st_var
        if not args:
            return lambda v: tuple(self._list(self._any)(v))
        items = tuple(self._hook(a) for a in args)

        def st_fixed(v: Any) -> Any:
            if type(v) is not list or len(v) != len(items):
                raise _REJECT
            return tuple([h(x) for h, x in zip(items, v, strict=True)])

        return st_fixed

    @staticmethod
    def _list(item: Hook) -> Hook:
        def st(v: Any) -> Any:
            if type(v) is not list:
                raise _REJECT
            return [item(x) for x in v]

        return st

    @staticmethod
    def _map(val: Hook, *, frozen: bool) -> Hook:
        def st(v: Any) -> Any:
            if type(v) is not dict or "$t" in v or "$secret" in v:
                raise _REJECT
            out = {_unesc(k): val(x) for k, x in v.items()}
            return types.MappingProxyType(out) if frozen else out

        return st

    def _dataclass(self, cls: type) -> Hook:
        got = self._dc.get(cls)
        if got is None:
            got = self._dc[cls] = self._make_dataclass(cls)
        return got

    def _make_dataclass(self, cls: type) -> Hook:
        tag = TAG_OF[cls]
        flds = [f for f in dataclasses.fields(cls) if f.init]
        allowed = frozenset(f.name for f in flds) | {"$t"}
        most = len(allowed)
        # (field, required, exact type or None, hook), resolved on first use
        # (a type may name itself); an exact type (int, str, bool) is checked inline.
        plan: list[tuple[str, bool, type | None, Hook]] = []

        def st(v: Any) -> Any:
            if type(v) is not dict:
                raise _REJECT
            got = v.get("$t")
            if got != tag:
                sub = TYPES.get(got) if type(got) is str else None
                if sub is None or not issubclass(sub, cls):
                    raise _REJECT
                return self._dataclass(sub)(v)
            if len(v) > most or not v.keys() <= allowed:
                raise _REJECT
            if not plan:
                hints = _hints(cls)
                for f in flds:
                    hint = hints.get(f.name, object)
                    required = (
                        f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING
                    )
                    inline = hint if hint is int or hint is str or hint is bool else None
                    plan.append((f.name, required, inline, self._hook(hint)))
            kw: dict[str, Any] = {}
            for name, required, exact, hook in plan:
                if name in v:
                    x = v[name]
                    if exact is None:
                        kw[name] = hook(x)
                    elif type(x) is exact:
                        kw[name] = x
                    else:
                        raise _REJECT
                elif required:
                    raise _REJECT
            try:
                return cls(**kw)
            except Exception:  # noqa: BLE001 - a value its class refuses
                raise _REJECT from None

        return st


def _exact(tp: type) -> Hook:
    def st(v: Any) -> Any:
        if type(v) is not tp:
            raise _REJECT
        return v

    return st


def _none(v: Any) -> None:
    if v is not None:
        raise _REJECT


def _secret(v: Any) -> Secret:
    if type(v) is not dict or v.keys() != {"$secret"} or type(v["$secret"]) is not str:
        raise _REJECT
    return Secret(v["$secret"])


def _float(v: Any) -> float:
    if type(v) in (int, float):
        return float(v)
    if type(v) is dict and v.keys() == {"$f"} and v["$f"] in _NON_FINITE:
        return float(v["$f"])
    raise _REJECT


def _literal(allowed: tuple[Any, ...]) -> Hook:
    def st(v: Any) -> Any:
        for a in allowed:
            if type(v) is type(a) and v == a:
                return v
        raise _REJECT

    return st


Matcher = Callable[[Any, Any], bool]


class CommandMatcher:
    """Whether a core value is exactly what a parsed trace-form value holds.

    ``matches(value, parsed)`` is ``True`` only when the trace form of
    ``value`` (``make_converter(None).unstructure(value)``) is equal to
    ``parsed`` in every type, value and key order — so both JSON texts are
    equal — without building that trace form. ``False`` means "not shown
    equal" (a difference, or a value this matcher does not model: a
    non-finite or zero float, a subclass, an opaque object); the caller then
    compares the texts.
    """

    def __init__(self) -> None:
        self._dc: dict[type, Matcher] = {}

    def matches_all(self, values: list[Any], parsed: Any) -> bool:
        """``matches`` over a list of values and a parsed array, item by item."""
        if type(parsed) is not list or len(parsed) != len(values):
            return False
        m = self.matches
        return all(m(x, j) for x, j in zip(values, parsed, strict=True))

    def matches(self, x: Any, j: Any) -> bool:
        """Whether ``x``'s trace form is exactly ``j`` (see the class)."""
        t = type(x)
        if x is None:
            return j is None
        if t is str or t is int or t is bool:
            return type(j) is t and j == x
        dc = self._dc.get(t)
        if dc is not None:
            return dc(x, j)
        if t in TAG_OF:
            dc = self._dc[t] = self._make_dataclass(t)
            return dc(x, j)
        if t is Secret:
            return (
                type(j) is dict
                and len(j) == 1
                and type(j.get("$secret")) is str
                and j["$secret"] == x.reveal()
            )
        if t is float:
            return type(j) is float and x != 0 and math.isfinite(x) and j == x
        if t is list or t is tuple:
            if type(j) is not list or len(j) != len(x):
                return False
            m = self.matches
            return all(m(a, b) for a, b in zip(x, j, strict=True))
        if t is dict or t is types.MappingProxyType:
            if type(j) is not dict or len(j) != len(x):
                return False
            for (k, v), (jk, jv) in zip(x.items(), j.items(), strict=True):
                if type(k) is not str:
                    return False
                if jk != ("$" + k if k.startswith("$") else k) or not self.matches(v, jv):
                    return False
            return True
        return False

    def _make_dataclass(self, cls: type) -> Matcher:
        tag = TAG_OF[cls]
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        keys = ("$t", *names)
        fixed = {n: name for (c, n), name in _OPAQUE_FIELDS.items() if c == tag}
        get: Callable[[Any], Any] = operator.attrgetter(*names) if names else (lambda v: ())
        if len(names) == 1:
            one = get
            get = lambda v: (one(v),)  # noqa: E731
        m = self.matches

        def match(x: Any, j: Any) -> bool:
            if type(j) is not dict or len(j) != len(keys) or tuple(j) != keys:
                return False
            if j["$t"] != tag or type(j["$t"]) is not str:
                return False
            for n, v in zip(names, get(x), strict=True):
                jv = j[n]
                t = type(v)
                if t is str or t is int or t is bool:
                    if type(jv) is not t or jv != v:
                        return False
                elif v is None and n not in fixed:
                    if jv is not None:
                        return False
                elif n in fixed:
                    if type(jv) is not dict or jv != {"$opaque": fixed[n]}:
                        return False
                elif not m(v, jv):
                    return False
            return True

        return match


#: The text of a JSON string as ``json`` writes it with ``ensure_ascii`` (the
#: C function when there is one): the trace's encoder.
_esc: Final[Callable[[str], str]] = json.encoder.encode_basestring_ascii
_dumps: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False).encode

Writer = Callable[[Any], str]


def _text_none(v: None) -> str:
    return "null"


def _text_bool(v: bool) -> str:
    return "true" if v else "false"


def _text_float(v: float) -> str:
    if math.isfinite(v):
        return float.__repr__(v)
    return '{"$f":"nan"}' if v != v else ('{"$f":"inf"}' if v > 0 else '{"$f":"-inf"}')


class TraceText:
    """The JSON text of a core value's trace form, without building the trace form.

    Args:
        converter: the full path (``make_converter(None)``): it writes the
            values this class has no writer for (``_dumps(converter.unstructure(v))``,
            ``_dumps`` being the trace's ``json`` encoder: compact separators,
            ASCII escapes).

    :meth:`text` returns exactly ``_dumps(converter.unstructure(value))``:
    the text the recorder wrote for the value (a differential test checks it
    over recorded and generated values). The writers dispatch on the exact
    type of every value (``None``, ``bool``, ``int``, ``str``, ``float``,
    ``Secret``, lists and tuples, dicts and mapping proxies, tagged
    dataclasses: one generated straight-line writer per class); any other
    type is written by the full path, which composes the same way (a
    container's text is its items' texts joined). Secrets are written with
    their text (replay's secrets already are redaction tokens).

    Raises:
        what the full path raises for a value it cannot write.
    """

    def __init__(self, converter: Any) -> None:
        self._conv = converter
        table: dict[type, Writer] = {
            type(None): _text_none,
            bool: _text_bool,
            int: int.__repr__,
            str: _esc,
            float: _text_float,
            Secret: self._secret,
            list: self._seq,
            tuple: self._seq,
            dict: self._map,
            types.MappingProxyType: self._map,
        }
        self._table = table
        get = table.get
        make = self._make

        def text(v: Any) -> str:
            w = get(type(v))
            if w is None:
                w = make(type(v))
            return w(v)

        self.text: Writer = text

    def texts(self, values: list[Any]) -> str:
        """The text of the list ``values`` (``text(values)`` for a list)."""
        text = self.text
        return "[" + ",".join([text(v) for v in values]) + "]"

    def _full(self, v: Any) -> str:
        text: str = _dumps(self._conv.unstructure(v))
        return text

    def _make(self, tp: type) -> Writer:
        if tp in TAG_OF:
            return self._dataclass(tp)
        self._table[tp] = self._full
        return self._full

    def _secret(self, v: Secret) -> str:
        r = v.reveal()
        if type(r) is not str:
            return self._full(v)
        return '{"$secret":' + _esc(r) + "}"

    def _seq(self, v: Any) -> str:
        text = self.text
        return "[" + ",".join([text(x) for x in v]) + "]"

    def _map(self, v: Any) -> str:
        text = self.text
        parts: list[str] = []
        for k, x in v.items():
            if type(k) is not str:
                return '{"$opaque":' + _esc(type(v).__name__) + "}"
            parts.append(_esc("$" + k if k.startswith("$") else k) + ":" + text(x))
        return "{" + ",".join(parts) + "}"

    def _dataclass(self, cls: type) -> Writer:
        tag = TAG_OF[cls]
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        fixed = {n: name for (c, n), name in _OPAQUE_FIELDS.items() if c == tag}
        hints = _hints(cls)
        ns: dict[str, Any] = {"W": self.text, "E": _esc, "_N": "null", "_T": "true", "_F": "false"}
        nested: dict[str, type] = {}
        body: list[str] = []
        parts: list[str] = []
        const = '{"$t":' + _esc(tag)
        for i, n in enumerate(names):
            const += "," + _esc(n) + ":"
            if n in fixed:
                const += _dumps({"$opaque": fixed[n]})
                continue
            ns[f"_k{len(parts)}"] = const
            parts.append(f"{{_k{len(parts)}}}")
            const = ""
            a = f"a{i}"
            if n.isidentifier() and not keyword.iskeyword(n):
                body.append(f"    {a} = x.{n}")
            else:
                ns[f"_n{i}"] = n
                body.append(f"    {a} = getattr(x, _n{i})")
            parts.append("{" + self._field(a, hints.get(n, object), nested, ns) + "}")
        ns[f"_k{len(parts)}"] = const + "}"
        parts.append(f"{{_k{len(parts)}}}")
        source = "def w(x):\n" + "\n".join(body) + ('\n    return f"' + "".join(parts) + '"\n')
        exec(compile(source, f"<trace text {tag}>", "exec"), ns)  # noqa: S102
        w: Writer = ns["w"]
        self._table[cls] = w
        for name, tp in nested.items():  # after the entry: a type may name itself
            ns[name] = self._table.get(tp) or self._dataclass(tp)
        return w

    def _field(self, a: str, hint: Any, nested: dict[str, type], ns: dict[str, Any]) -> str:
        """The f-string expression writing variable ``a`` declared as ``hint``:
        inline for the hint's own exact type, ``W`` for anything else."""
        if hint is int:
            return f"{a} if type({a}) is int else W({a})"
        if hint is str:
            return f"E({a}) if type({a}) is str else W({a})"
        if hint is bool:
            return f"_T if {a} is True else _F if {a} is False else W({a})"
        if isinstance(hint, type) and hint in TAG_OF:
            i = len(nested)
            nested[f"_w{i}"] = hint
            ns[f"_c{i}"] = hint
            return f"_w{i}({a}) if type({a}) is _c{i} else W({a})"
        origin = typing.get_origin(hint)
        if origin is Union or origin is types.UnionType:
            args = [x for x in typing.get_args(hint) if x is not type(None)]
            if len(args) == 1 and len(typing.get_args(hint)) == 2:
                return f"_N if {a} is None else " + self._field(a, args[0], nested, ns)
        return f"W({a})"
