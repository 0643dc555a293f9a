"""A cattrs converter for every event and command type of ``leasegate.core``.

Every frozen dataclass of the core's vocabularies (registry, runtime,
replica, wire models) has a **stable type tag**: ``<area>.<ClassName>``,
where ``<area>`` is the module path below ``leasegate.core`` without its
private parts (``registry.ReadCompleted``, ``runtime.BeginStart``,
``replica.StartTimer``, ``wire.lease.LeaseRequest``). The JSON form of a
value (the "trace form"):

* ``None``, booleans, integers and strings as themselves; finite floats as
  numbers, non-finite ones as ``{"$f": "inf" | "-inf" | "nan"}``;
* a tagged dataclass as ``{"$t": tag, <field>: <value>, ...}`` (every init
  field, by its Python name);
* a :class:`~leasegate.core.Secret` as ``{"$secret": <redacted text>}``;
* tuples and lists as arrays; mappings with string keys as objects, a key
  starting with ``$`` escaped by doubling the ``$``;
* anything else (a shell's ``GitHold``, an untagged object) as
  ``{"$opaque": <name>}`` — never its content; ``<name>`` is the class's
  ``TRACE_NAME`` attribute if it has one, else the class name, except that
  ``HoldInfo.git`` (a port's own ``GitHold``) is always ``"GitHold"``.

:func:`make_converter` builds a converter. Unstructuring is value-driven (a
field typed ``object`` keeps whatever it holds); structuring is driven by the
dataclass field annotations and is strict: a wrong type, a missing field, an
unknown field or an unknown tag raises :class:`TraceValueError`.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Union

import cattrs

from leasegate.core import Secret

__all__ = [
    "TAG_OF",
    "TYPES",
    "TraceValueError",
    "make_converter",
    "tag_of",
    "unknown_tags",
]

#: The core modules whose dataclasses have tags.
_MODULES: Final = (
    "leasegate.core.registry._vocab",
    "leasegate.core.runtime._vocab",
    "leasegate.core.runtime._machine",
    "leasegate.core.replica._events",
    "leasegate.core.replica._state",
    "leasegate.core.wire.lease",
    "leasegate.core.wire.credentials",
    "leasegate.core.wire.env",
    "leasegate.core.monitor._ports",
)


#: Fields that hold a port's own object, written as this opaque name
#: whatever the object is (the Git hold a ``PersonPort.hold_git`` returned).
_OPAQUE_FIELDS: Final = {("runtime.HoldInfo", "git"): "GitHold"}


class TraceValueError(ValueError):
    """A trace value does not have the shape its type requires.

    The message names the offending path or type, never a value.
    """


def _area(module: str) -> str:
    parts = module.split(".")[2:]
    return ".".join(p for p in parts if not p.startswith("_"))


def _scan() -> tuple[dict[str, type], dict[type, str]]:
    types_: dict[str, type] = {}
    tags: dict[type, str] = {}
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:  # pragma: no cover - the monitor not installed
            continue
        for obj in vars(mod).values():
            if isinstance(obj, type) and obj.__module__ == name and dataclasses.is_dataclass(obj):
                tag = f"{_area(name)}.{obj.__qualname__}"
                if tag in types_:  # pragma: no cover - checked by a test
                    raise RuntimeError(f"duplicate trace tag {tag}")
                types_[tag] = obj
                tags[obj] = tag
    return types_, tags


#: tag -> class, and class -> tag.
TYPES, TAG_OF = _scan()


def tag_of(tp: type) -> str | None:
    """The stable tag of a core dataclass type, or ``None``."""
    return TAG_OF.get(tp)


def unknown_tags(value: Any, depth: int = 0) -> str | None:
    """The first ``$t`` tag in a trace-form JSON value that names no type."""
    if depth > 300:
        return "(nested too deeply)"
    if type(value) is dict:
        t = value.get("$t")
        if t is not None and (type(t) is not str or t not in TYPES):
            return str(t)[:80]
        for v in value.values():
            bad = unknown_tags(v, depth + 1)
            if bad is not None:
                return bad
    elif type(value) is list:
        for v in value:
            bad = unknown_tags(v, depth + 1)
            if bad is not None:
                return bad
    return None


def _origin(t: Any) -> Any:
    return typing.get_origin(t)


def _esc(k: str) -> str:
    return "$" + k if k.startswith("$") else k


def _unesc(k: str) -> str:
    return k[1:] if k.startswith("$$") else k


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        try:
            got = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - an unresolvable annotation: untyped
            got = {}
        _HINTS[cls] = got
    return got


def make_converter(secret_text: Callable[[str], str] | None = None) -> cattrs.Converter:
    """A converter between core values and the trace form.

    Args:
        secret_text: maps a secret's text to what the trace holds (a
            :class:`~.Redactor`'s ``text``); ``None`` keeps the text (used on
            replay, where every secret already is a redaction token).

    Returns:
        A :class:`cattrs.Converter`: ``unstructure(value)`` gives the trace
        form; ``structure(json_value, Type)`` rebuilds a value of ``Type``
        (an event class, ``object`` for a tagged value of any type) and raises
        :class:`TraceValueError` on a shape mismatch.

    Catalog TR-010 (``docs/trace-format.md``); ``design/ARCHITECTURE.md``:
    "cattrs lives in the shells: it (un)structures events, commands and trace
    lines, keeping the same strictness".
    """
    conv = cattrs.Converter()
    reveal: Callable[[str], str] = secret_text if secret_text is not None else (lambda s: s)

    # ---------------------------------------------------------------- unstructure
    # type -> hook, resolved through the converter once per type (its
    # dispatch is the slow part of a deep unstructure).
    un_hooks: dict[type, Callable[[Any], Any]] = {}

    def un_any(v: Any) -> Any:
        t = type(v)
        if v is None or t is bool or t is int or t is str:
            return v
        h = un_hooks.get(t)
        if h is None:
            h = un_hooks[t] = conv.get_unstructure_hook(t)
        return h(v)

    def un_float(v: float) -> Any:
        if math.isfinite(v):
            return v
        return {"$f": "nan" if v != v else ("inf" if v > 0 else "-inf")}

    def un_secret(v: Secret) -> Any:
        return {"$secret": reveal(v.reveal())}

    def un_seq(v: Any) -> Any:
        return [un_any(x) for x in v]

    def un_map(v: Any) -> Any:
        out: dict[str, Any] = {}
        for k, x in v.items():
            if type(k) is not str:
                return {"$opaque": type(v).__name__}
            out[_esc(k)] = un_any(x)
        return out

    def un_opaque(v: Any) -> Any:
        return {"$opaque": getattr(type(v), "TRACE_NAME", type(v).__name__)}

    def un_dc_factory(cls: type) -> Callable[[Any], Any]:
        tag = TAG_OF[cls]
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)

        fixed = {n: {"$opaque": name} for (c, n), name in _OPAQUE_FIELDS.items() if c == tag}

        if len(names) > 1:
            values: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*names)
        elif names:
            one = operator.attrgetter(names[0])

            def values(v: Any) -> tuple[Any, ...]:
                return (one(v),)
        else:

            def values(v: Any) -> tuple[Any, ...]:
                return ()

        def un(v: Any) -> Any:
            out: dict[str, Any] = {"$t": tag}
            for n, x in zip(names, values(v), strict=True):
                t = type(x)
                out[n] = x if (x is None or t is str or t is int or t is bool) else un_any(x)
            return out

        def un_fixed(v: Any) -> Any:
            out: dict[str, Any] = {"$t": tag}
            for n in names:
                f = fixed.get(n)
                out[n] = un_any(getattr(v, n)) if f is None else dict(f)
            return out

        return un_fixed if fixed else un

    def is_map(t: Any) -> bool:
        return isinstance(t, type) and issubclass(t, (dict, types.MappingProxyType))

    def is_seq(t: Any) -> bool:
        return isinstance(t, type) and issubclass(t, (list, tuple))

    conv.register_unstructure_hook_factory(lambda t: True, lambda t: un_opaque)
    conv.register_unstructure_hook_factory(is_seq, lambda t: un_seq)
    conv.register_unstructure_hook_factory(is_map, lambda t: un_map)
    conv.register_unstructure_hook_factory(lambda t: t in TAG_OF, un_dc_factory)
    conv.register_unstructure_hook(float, un_float)
    conv.register_unstructure_hook(Secret, un_secret)
    for prim in (int, str, bool, type(None)):
        conv.register_unstructure_hook(prim, lambda v: v)

    # ---------------------------------------------------------------- structure
    def fail(what: str) -> TraceValueError:
        return TraceValueError(what)

    def st_any(v: Any, _: Any = None) -> Any:
        t = type(v)
        if v is None or t is bool or t is int or t is str or t is float:
            return v
        if t is list:
            return [st_any(x) for x in v]
        if t is dict:
            if "$t" in v:
                tag = v["$t"]
                cls = TYPES.get(tag) if type(tag) is str else None
                if cls is None:
                    raise fail(f"unknown type tag {str(tag)[:80]!r}")
                return conv.structure(v, cls)
            if "$secret" in v:
                return st_secret(v)
            if "$f" in v:
                return st_float(v)
            if "$opaque" in v:
                raise fail("an opaque value cannot be replayed")
            return {_unesc(k): st_any(x) for k, x in v.items()}
        raise fail(f"not a JSON value: {t.__name__}")

    def st_secret(v: Any, _: Any = None) -> Secret:
        if type(v) is not dict or v.keys() != {"$secret"} or type(v["$secret"]) is not str:
            raise fail("expected a secret")
        return Secret(v["$secret"])

    def st_float(v: Any, _: Any = None) -> float:
        if type(v) in (int, float):
            return float(v)
        if type(v) is dict and v.keys() == {"$f"} and v["$f"] in ("inf", "-inf", "nan"):
            return float(v["$f"])
        raise fail("expected a number")

    def st_exact(tp: type) -> Callable[[Any, Any], Any]:
        def st(v: Any, _: Any) -> Any:
            if type(v) is not tp:
                raise fail(f"expected {tp.__name__}")
            return v

        return st

    def st_dc_factory(cls: type) -> Callable[[Any, Any], Any]:
        tag = TAG_OF[cls]
        flds = [f for f in dataclasses.fields(cls) if f.init]
        names = frozenset(f.name for f in flds)
        allowed = names | {"$t"}
        # (field, required, hook, hint), resolved on first use (a factory
        # resolving nested hooks at once would recurse into itself).
        plan: list[tuple[str, bool, Callable[[Any, Any], Any], Any]] = []

        def st(v: Any, _: Any) -> Any:
            if type(v) is not dict:
                raise fail(f"{tag}: expected an object")
            got = v.get("$t")
            if got != tag:
                sub = TYPES.get(got) if type(got) is str else None
                if sub is None or not issubclass(sub, cls):
                    raise fail(f"{tag}: wrong or missing type tag")
                return conv.structure(v, sub)
            if len(v) > len(names) + 1 or not v.keys() <= allowed:
                extra = v.keys() - allowed
                raise fail(f"{tag}: unknown field {sorted(extra)[0][:80]!r}")
            if not plan:
                hints = _hints(cls)
                for f in flds:
                    hint = hints.get(f.name, object)
                    required = (
                        f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING
                    )
                    plan.append((f.name, required, conv.get_structure_hook(hint), hint))
            kw: dict[str, Any] = {}
            for name, required, hook, hint in plan:
                if name not in v:
                    if required:
                        raise fail(f"{tag}: missing field {name!r}")
                    continue
                try:
                    kw[name] = hook(v[name], hint)
                except TraceValueError as e:
                    raise fail(f"{tag}.{name}: {e}") from None
            try:
                return cls(**kw)
            except Exception:  # noqa: BLE001 - a value its class refuses
                raise fail(f"{tag}: refused by its class") from None

        return st

    def st_union_factory(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)

        def st(v: Any, _: Any) -> Any:
            for a in args:
                try:
                    return conv.structure(v, a)
                except TraceValueError:
                    continue
            raise fail("matches no member of its union")

        return st

    def st_literal_factory(tp: Any) -> Callable[[Any, Any], Any]:
        allowed = typing.get_args(tp)

        def st(v: Any, _: Any) -> Any:
            for a in allowed:
                if type(v) is type(a) and v == a:
                    return v
            raise fail("not one of its literal values")

        return st

    def st_tuple_factory(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)

        def st(v: Any, _: Any) -> Any:
            if type(v) is not list:
                raise fail("expected an array")
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(conv.structure(x, args[0]) for x in v)
            if not args:
                return tuple(st_any(x) for x in v)
            if len(v) != len(args):
                raise fail("wrong tuple length")
            return tuple(conv.structure(x, a) for x, a in zip(v, args, strict=True))

        return st

    def st_map_factory(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)
        val = args[1] if len(args) == 2 else object
        frozen = typing.get_origin(tp) is not dict

        def st(v: Any, _: Any) -> Any:
            if type(v) is not dict or "$t" in v or "$secret" in v:
                raise fail("expected an object")
            out = {_unesc(k): conv.structure(x, val) for k, x in v.items()}
            return types.MappingProxyType(out) if frozen else out

        return st

    def st_list_factory(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)
        item = args[0] if args else object

        def st(v: Any, _: Any) -> Any:
            if type(v) is not list:
                raise fail("expected an array")
            return [conv.structure(x, item) for x in v]

        return st

    def is_union(tp: Any) -> bool:
        o = typing.get_origin(tp)
        return o is Union or o is types.UnionType

    def st_class_factory(tp: Any) -> Callable[[Any, Any], Any]:
        # An untagged class annotation (``Model``, a Protocol): any tagged
        # value that is an instance of it.
        def st(v: Any, _: Any) -> Any:
            got = st_any(v)
            if isinstance(tp, type):
                try:
                    ok = isinstance(got, tp)
                except TypeError:
                    ok = True
                if not ok:
                    raise fail(f"expected {tp.__name__}")
            return got

        return st

    conv.register_structure_hook_factory(lambda t: True, st_class_factory)
    conv.register_structure_hook_factory(lambda t: _origin(t) in (list,), st_list_factory)
    conv.register_structure_hook_factory(
        lambda t: _origin(t) in (dict, Mapping, typing.Mapping), st_map_factory
    )
    conv.register_structure_hook_factory(lambda t: _origin(t) is tuple, st_tuple_factory)
    conv.register_structure_hook_factory(lambda t: _origin(t) is Literal, st_literal_factory)
    conv.register_structure_hook_factory(is_union, st_union_factory)
    conv.register_structure_hook_factory(lambda t: t in TAG_OF, st_dc_factory)
    conv.register_structure_hook_factory(lambda t: t is object or t is Any, lambda t: st_any)
    conv.register_structure_hook(Secret, st_secret)
    conv.register_structure_hook(float, st_float)
    for prim in (int, str, bool):
        conv.register_structure_hook(prim, st_exact(prim))
    conv.register_structure_hook(type(None), st_exact(type(None)))
    return conv
