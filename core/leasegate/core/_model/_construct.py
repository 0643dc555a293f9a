"""Building frozen dataclass instances without ``__init__``.

:func:`constructor` gives a positional constructor for values a hot path
already knows valid (decoded frames, acks, commands): the instance is filled
as a mutable twin of identical layout, then re-classed (:func:`_twin`).
The generated decoders (:mod:`._fast`) build their instances the same way.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _twin(cls: type) -> type | None:
    """A mutable subclass of frozen ``cls`` with its exact instance layout, or ``None``.

    An instance is built as the twin (``twin()``: no ``__init__`` runs; then
    plain attribute stores, the fastest way to fill slots) and then becomes
    a ``cls`` by ``__class__`` assignment. The twin adds no slot of its own,
    so that assignment finds both layouts the same at once (the twin's base
    *is* ``cls``) instead of comparing two classes' slots; it is tried here
    once. ``None`` (the caller then sets each slot through its descriptor)
    for a class without ``__slots__`` of its own, with a mangled slot name,
    with its own ``__new__``, or whose layout the assignment refuses.
    """
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or any(s.startswith("__") for s in slots):
        return None
    if "__dict__" in slots or "__weakref__" in slots or vars(object)["__new__"] is not cls.__new__:
        return None
    twin = type(
        f"_Twin_{cls.__name__}",
        (cls,),
        {
            "__slots__": (),
            # Both, so that the type's setattr slot is the generic one (fast,
            # specialized stores) even under the frozen class's overrides.
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            # twin() makes an empty instance: object's __init__, not the dataclass's.
            "__init__": object.__init__,
            "__module__": cls.__module__,
        },
    )
    try:
        probe: Any = twin()
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
        lines.append("    o = _twin()")
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


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """Set attribute ``name`` of a frozen (slotted or not) instance."""
    for klass in cls.__mro__:
        desc = klass.__dict__.get(name)
        if desc is not None and hasattr(desc, "__set__"):
            return typing.cast(Callable[[Any, Any], None], desc.__set__)

    def set_attr(obj: Any, value: Any) -> None:
        object.__setattr__(obj, name, value)

    return set_attr
