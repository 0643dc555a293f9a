"""The replay's fast paths: JSON lines, events and commands without cattrs' dispatch.

Replay reads every line, turns its event into a core value and checks the
commands the fresh core returns against the recorded ones. The full paths for
those are :func:`json.loads`, the cattrs converter of :mod:`._codec` and a
comparison of JSON texts; this module does the same three jobs faster, and
each of them only ever answers what the full path would, or hands over to it:

* :func:`loads` parses a line with msgspec's JSON decoder; when msgspec refuses
  the text, :func:`json.loads` parses it (and raises its own errors).
* :class:`EventDecoder` structures a trace-form value (a parsed ``{"$t": ...}``
  object) straight into the core dataclass it names, with one generated
  straight-line hook per type. Whenever the value is not plainly valid, the
  cattrs converter structures it instead (and raises its
  :class:`~._codec.TraceValueError`).
* :class:`TraceText` writes the JSON text of a core value's trace form —
  exactly ``json`` of the converter's ``unstructure`` — with one generated
  writer per type; replay compares the commands' text with the tail of the
  recorded line, the full path's own first comparison.
* :class:`CommandMatcher` says whether a core value is exactly what a parsed
  trace-form value holds (same types, same values, same key order: what makes
  their JSON texts equal); replay checks the view stamp of an opened gate
  with it. ``False`` means "not shown equal": replay then compares the
  values' trace forms.

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
        self._by_tag: dict[str, Hook] = {}

    def decode(self, value: Any) -> Any:
        """``converter.structure(value, object)``, fast when the value is plainly valid.

        Raises:
            TraceValueError: the value does not have its type's shape.
            RecursionError: nested too deeply.
        """
        try:
            if type(value) is dict:
                tag = value.get("$t")
                hook = self._by_tag.get(tag) if type(tag) is str else None
                if hook is None and type(tag) is str and tag in TYPES:
                    hook = self._by_tag[tag] = self._dataclass(TYPES[tag])
                if hook is not None:
                    return hook(value)
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
        """A generated straight-line hook for a value holding every init field
        of ``cls`` (what the recorder writes); :meth:`_general` for the rest."""
        tag = TAG_OF[cls]
        flds = [f for f in dataclasses.fields(cls) if f.init]
        allowed = frozenset(f.name for f in flds) | {"$t"}
        general = self._general(cls)
        ns: dict[str, Any] = {
            "_cls": cls,
            "_tag": tag,
            "_allowed": allowed,
            "_most": len(allowed),
            "_general": general,
            "_REJECT": _REJECT,
        }
        body = [
            "def st(v):",
            "    if type(v) is not dict or v.get('$t') != _tag or len(v) != _most:",
            "        return _general(v)",
            "    if not v.keys() <= _allowed:",
            "        raise _REJECT",
        ]
        kw: list[str] = []
        for i, f in enumerate(flds):
            a = f"a{i}"
            ns[f"_k{i}"] = f.name
            body.append(f"    {a} = v[_k{i}]")
            plain = f.name.isidentifier() and not keyword.iskeyword(f.name)
            kw.append(f"{f.name}={a}" if plain else "")
        hints = _hints(cls)
        checks: list[str] = []
        for i, f in enumerate(flds):
            a = f"a{i}"
            hint = hints.get(f.name, object)
            if hint is int or hint is str or hint is bool:
                ns[f"_t{i}"] = hint
                checks.append(f"    if type({a}) is not _t{i}:\n        raise _REJECT")
            else:
                ns[f"_h{i}"] = None  # set below
                # an optional field's None is itself (the union's first answer)
                args = typing.get_args(hint)
                optional = typing.get_origin(hint) in (Union, types.UnionType) and (
                    type(None) in args
                )
                guard = f"if {a} is not None: " if optional else ""
                checks.append(f"    {guard}{a} = _h{i}({a})")
        body.extend(checks)
        setters = _plain_init_setters(cls)
        if setters is not None:
            # what the class's generated __init__ does with every field given
            ns["_new"] = object.__new__
            body += ["    try:", "        o = _new(_cls)"]
            for i, setter in enumerate(setters):
                ns[f"_d{i}"] = setter
                body.append(f"        _d{i}(o, a{i})")
            body += ["        return o", "    except Exception:", "        raise _REJECT from None"]
        else:
            if all(kw):
                call = "_cls(" + ", ".join(kw) + ")"
            else:
                ns["_names"] = tuple(f.name for f in flds)
                values = ", ".join(f"a{i}" for i in range(len(flds)))
                call = f"_cls(**dict(zip(_names, ({values},))))"
            body += [
                "    try:",
                f"        return {call}",
                "    except Exception:",
                "        raise _REJECT from None",
            ]
        source = "\n".join(body) + "\n"
        exec(compile(source, f"<trace structure {tag}>", "exec"), ns)  # noqa: S102
        st: Hook = ns["st"]
        self._dc[cls] = st
        for i, f in enumerate(flds):
            if f"_h{i}" in ns:
                ns[f"_h{i}"] = self._hook(hints.get(f.name, object))
        return st

    def _general(self, cls: type) -> Hook:
        """The hook for any value of ``cls``: a subclass's tag, missing
        optional fields, anything to reject."""
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


def _plain_init_setters(cls: type) -> list[Callable[[Any, Any], None]] | None:
    """For a frozen dataclass whose ``__init__`` is the one ``dataclasses``
    generated (no ``__post_init__``, no ``InitVar``, every field an init
    field, no own ``__new__``), the setters that ``__init__`` amounts to when
    every field is given: ``object.__setattr__(self, name, value)`` per field,
    in order, which for a slot is its descriptor's ``__set__`` (the same
    store, without the name lookup). ``None`` for any other class or a field
    that is not a slot (the constructor is called)."""
    params = getattr(cls, "__dataclass_params__", None)
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    new: Any = cls.__new__
    if (
        params is None
        or not params.frozen
        or code is None
        or code.co_filename != "<string>"
        or getattr(init, "__qualname__", None) != f"{cls.__qualname__}.__init__"
        or hasattr(cls, "__post_init__")
        or new is not object.__new__
    ):
        return None
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if not all(f.init for f in fields):
        return None
    if code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] != ("self", *names):
        return None
    setters: list[Callable[[Any, Any], None]] = []
    for name in names:
        desc = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        if type(desc) is not types.MemberDescriptorType:
            return None  # not a slot: the constructor is called
        setters.append(desc.__set__)
    return setters


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
_dumps: Final = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, check_circular=False
).encode

Writer = Callable[[Any], str]


def _text_none(v: None) -> str:
    return "null"


def _text_bool(v: bool) -> str:
    return "true" if v else "false"


def _unchanged(watched: tuple[tuple[Any, tuple[Any, ...]], ...]) -> bool:
    """Whether each watched proxy holds the very same keys and values as when kept."""
    for proxy, items in watched:
        now = tuple(proxy.items())
        if len(now) != len(items):
            return False
        for (k, v), (k0, v0) in zip(now, items, strict=True):
            if k is not k0 or v is not v0:
                return False
    return True


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

    **Kept texts.** A value of a frozen dataclass whose fields are declared
    as immutable types (strings, numbers, booleans, ``None``, secrets,
    tuples of those, frozen dataclasses of those) and that held exactly such
    values when it was written cannot change: its text is kept, by the
    value's identity, for the next time the same object is written (the core
    hands one view to many commands). A mapping proxy declared with such
    values (a credential's ``env``) may change through its dict: its items
    are kept with the text and the text is used again only while the proxy
    still holds the very same keys and values. The kept value is held, so
    its identity is not reused; at most :data:`KEEP` texts are kept, and
    :meth:`forget` drops them. An instance is not for use by two threads at
    once.

    Catalog TR-005 (``docs/trace-format.md``).

    Raises:
        what the full path raises for a value it cannot write.
    """

    #: The most texts kept at once (all are dropped when it is reached).
    KEEP: Final = 512

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
        self._frozen: dict[Any, bool] = {}
        # identity -> (value, text, watched proxies and their items); _dirty[0]:
        # a value written since the innermost kept-text writer began was not
        # plainly immutable; _watch: the proxies written since then
        self._kept: dict[int, tuple[Any, str, tuple[Any, ...]]] = {}
        self._dirty = [False]
        self._watch: list[tuple[Any, tuple[Any, ...]]] = []
        # (namespace, name, type): a generated writer's reference to the
        # writer of a type, set once the type being generated has its entry
        self._pending: list[tuple[dict[str, Any], str, type]] = []
        get = table.get
        make = self._make

        def text(v: Any) -> str:
            w = get(type(v))
            if w is None:
                w = make(type(v))
            return w(v)

        dirty = self._dirty

        def text_unsure(v: Any) -> str:
            # a value of another type than an immutable declaration names
            dirty[0] = True
            return text(v)

        self.text: Writer = text
        self._unsure: Writer = text_unsure

    def texts(self, values: list[Any]) -> str:
        """The text of the list ``values`` (``text(values)`` for a list)."""
        self._dirty[0] = False
        self._watch.clear()
        get = self._table.get
        make = self._make
        return "[" + ",".join([(get(type(v)) or make(type(v)))(v) for v in values]) + "]"

    def forget(self) -> None:
        """Drop the kept texts (and the values they hold)."""
        self._kept.clear()

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

    # ------------------------------------------------------ immutable types

    def _immutable(self, hint: Any) -> bool:
        """Whether every value of the exact types ``hint`` names (the types a
        writer tests inline) is immutable: then so is a value that passed
        those tests throughout."""
        got = self._frozen.get(hint)
        if got is not None:
            return got
        if hint in (int, str, bool, float, type(None), Secret):
            return True
        if isinstance(hint, type) and hint in TAG_OF:
            params = getattr(hint, "__dataclass_params__", None)
            if params is None or not params.frozen:
                return False
            self._frozen[hint] = True  # a type naming itself: decided by its other fields
            hints = _hints(hint)
            ok = all(
                self._immutable(hints.get(f.name, object))
                for f in dataclasses.fields(hint)
                if f.init
            )
            self._frozen[hint] = ok
            return ok
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is Literal:
            return all(type(x) in (str, int, bool) for x in args)
        if origin is Union or origin is types.UnionType:
            return all(self._immutable(x) for x in args)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return self._immutable(args[0])
        if origin in (Mapping, typing.Mapping) and len(args) == 2 and args[0] is str:
            return self._immutable(args[1])  # a proxy, watched
        return False

    # ------------------------------------------------------ generated writers

    def _ns(self, immutable: bool) -> dict[str, Any]:
        return {
            "W": self._unsure if immutable else self.text,
            "E": _esc,
            "_I": int.__repr__,
            "_FL": _text_float,
            "_S": self._secret,
            "_Sec": Secret,
            "_N": "null",
            "_T": "true",
            "_F": "false",
        }

    def _dataclass(self, cls: type) -> Writer:
        tag = TAG_OF[cls]
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        fixed = {n: name for (c, n), name in _OPAQUE_FIELDS.items() if c == tag}
        hints = _hints(cls)
        immutable = not fixed and self._immutable(cls)
        ns = self._ns(immutable)
        nested: dict[str, type] = {}
        body: list[str] = []
        parts: list[str] = []
        const = '{"$t":' + _esc(tag)
        watched = False
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
            hint = hints.get(n, object)
            expr = self._expr(a, hint, nested, ns, in_fstring=True, immutable=immutable)
            watched = watched or "_m" in expr
            parts.append("{" + expr + f"W({a})}}")
        ns[f"_k{len(parts)}"] = const + "}"
        parts.append(f"{{_k{len(parts)}}}")
        source = "def w(x):\n" + "\n".join(body) + ('\n    return f"' + "".join(parts) + '"\n')
        exec(compile(source, f"<trace text {tag}>", "exec"), ns)  # noqa: S102
        w: Writer = ns["w"]
        if immutable and (nested or watched or len(names) >= 4):
            w = self._keeping(w)  # (a small leaf is written as fast as its text is found)
        self._table[cls] = w
        # after the entry: a type may name itself
        self._pending.extend((ns, name, tp) for name, tp in nested.items())
        while self._pending:
            into, name, tp = self._pending.pop()
            into[name] = self._table.get(tp) or self._dataclass(tp)
        return w

    def _keeping(self, w: Writer) -> Writer:
        """``w`` keeping the texts of the values it writes (see the class)."""
        kept = self._kept
        get = kept.get
        dirty = self._dirty
        watch = self._watch
        keep = self.KEEP

        def write(x: Any) -> str:
            k = id(x)
            e = get(k)
            if e is not None and e[0] is x:
                if not e[2]:
                    return e[1]
                if _unchanged(e[2]):
                    watch.extend(e[2])  # the enclosing kept text depends on them too
                    return e[1]
            before = dirty[0]
            dirty[0] = False
            mark = len(watch)
            t = w(x)
            if dirty[0]:
                return t  # stays dirty for the enclosing writer
            dirty[0] = before
            if len(kept) >= keep:
                kept.clear()
            kept[k] = (x, t, tuple(watch[mark:]))
            return t

        return write

    def _watched(self, hint: Any) -> Writer:
        """A writer of a mapping proxy with values declared as ``hint`` that
        records the proxy and its items (the kept texts depend on them)."""
        nested: dict[str, type] = {}
        ns = self._ns(True)
        ns.update(_watch=self._watch, _dirty=self._dirty, _map=self._map)
        expr = self._expr("y", hint, nested, ns, in_fstring=False, immutable=True)
        source = (
            "def m(v):\n"
            "    items = tuple(v.items())\n"
            "    _watch.append((v, items))\n"
            "    parts = []\n"
            "    for k, y in items:\n"
            "        if type(k) is not str:\n"
            "            _dirty[0] = True\n"
            "            return _map(v)\n"
            '        parts.append(E("$" + k if k.startswith("$") else k) + ":" + ('
            + expr
            + "W(y)))\n"
            '    return "{" + ",".join(parts) + "}"\n'
        )
        exec(compile(source, "<trace text mapping>", "exec"), ns)  # noqa: S102
        self._pending.extend((ns, name, tp) for name, tp in nested.items())
        w: Writer = ns["m"]
        return w

    def _expr(
        self,
        a: str,
        hint: Any,
        nested: dict[str, type],
        ns: dict[str, Any],
        *,
        in_fstring: bool,
        immutable: bool,
    ) -> str:
        """A chain of ``<text> if <exact type test> else`` writing variable
        ``a`` declared as ``hint``, for the types the hint names (empty: none
        inline); the caller ends it with ``W(a)`` (by the value's type). In an
        f-string an int is its own text (``format`` of an exact int is its
        repr). In an immutable writer a sequence is inline only as a tuple."""
        if hint is int:
            return f"{a if in_fstring else f'_I({a})'} if type({a}) is int else "
        if hint is str:
            return f"E({a}) if type({a}) is str else "
        if hint is bool:
            return f"_T if {a} is True else _F if {a} is False else "
        if hint is type(None):
            return f"_N if {a} is None else "
        if hint is float:
            return f"_FL({a}) if type({a}) is float else "
        if hint is Secret:
            return f"_S({a}) if type({a}) is _Sec else "
        if isinstance(hint, type) and hint in TAG_OF:
            i = len(nested)
            nested[f"_w{i}"] = hint
            ns[f"_c{i}"] = hint
            return f"_w{i}({a}) if type({a}) is _c{i} else "
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        kw = {"in_fstring": in_fstring, "immutable": immutable}
        if origin is Literal:
            kinds = {type(x) for x in args}
            return "".join(
                self._expr(a, k, nested, ns, **kw) for k in (str, int, bool) if k in kinds
            )
        if origin is Union or origin is types.UnionType:
            # None first, then each member (a member's own inline test only
            # ever takes values of that member's exact types)
            ordered = sorted(args, key=lambda x: x is not type(None))
            return "".join(self._expr(a, x, nested, ns, **kw) for x in ordered)
        if (origin is tuple and len(args) == 2 and args[1] is Ellipsis) or (
            origin is list and len(args) == 1 and not immutable
        ):
            i = len([k for k in ns if k.startswith("_s")])
            ns[f"_s{i}"] = self._items(args[0], immutable)
            test = f"type({a}) is tuple" + ("" if immutable else f" or type({a}) is list")
            return f"_s{i}({a}) if {test} else "
        if immutable and origin in (Mapping, typing.Mapping) and len(args) == 2 and args[0] is str:
            i = len([k for k in ns if k.startswith("_m")])
            ns[f"_m{i}"] = self._watched(args[1])
            ns["_MP"] = types.MappingProxyType
            return f"_m{i}({a}) if type({a}) is _MP else "
        return ""

    def _items(self, hint: Any, immutable: bool) -> Writer:
        """A writer of a list or tuple whose items are declared as ``hint``."""
        nested: dict[str, type] = {}
        ns = self._ns(immutable)
        expr = self._expr("y", hint, nested, ns, in_fstring=False, immutable=immutable)
        source = 'def s(v):\n    return "[" + ",".join([' + expr + 'W(y) for y in v]) + "]"\n'
        exec(compile(source, "<trace text items>", "exec"), ns)  # noqa: S102
        self._pending.extend((ns, name, tp) for name, tp in nested.items())
        w: Writer = ns["s"]
        return w
