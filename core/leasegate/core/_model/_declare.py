"""The declarations every wire model is made of.

:class:`Model` (the base of every wire model), :func:`spec` (a field's wire
name and limits), :class:`DecodeError` (what a refused value decodes to) and
the helpers the compilers share: a model's declared fields, how a failure
path is written, which annotations are unions.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, TypeAlias, TypeVar, Union, get_args, get_origin

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

# The models being compiled in this call chain (see _decode._decoder_for).
_Building: TypeAlias = frozenset[Any]


def _join(path: list[str]) -> str:
    out = ""
    for part in path:
        if part.startswith("["):
            out += part
        else:
            out = f"{out}.{part}" if out else part
    return out


def _split(path: str) -> list[str]:
    return [p for p in re.split(r"\.|(?=\[)", path) if p]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Model) and dataclasses.is_dataclass(tp)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return get_args(tp)
    return None


def _model_fields(cls: type[Model]) -> list[tuple[str, str, Any, _Spec]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        sp = f.metadata.get(_SPEC_KEY, _Spec())
        out.append((f.name, sp.name or f.name, hints[f.name], sp))
    return out


def field_specs(cls: type[Model]) -> Mapping[str, tuple[str, Any, _Spec]]:
    """The declared fields of a model: python name → (wire name, type, spec).

    For docs and tests that enumerate the strictness rules of each model.
    """
    return {py: (w, tp, sp) for py, w, tp, sp in _model_fields(cls)}
