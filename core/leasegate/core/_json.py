"""JSON with JavaScript's semantics, and canonical JSON.

The reference runs on JavaScript, so the wire is read the way ``JSON.parse``
reads it and written the way ``JSON.stringify`` writes it:

* :func:`loads` rejects ``NaN``, ``Infinity`` and ``-Infinity`` literals
  (Python's :mod:`json` accepts them by default); a duplicate key keeps the
  last value, as ``JSON.parse`` does; text must be ``str`` or UTF-8 bytes.
* :func:`canonical_dumps` writes sorted keys and no whitespace, non-ASCII
  characters as themselves, and is what the manifest digest hashes
  (``docs/protocol.md`` § Canonical JSON).
* :func:`utf16_len` counts UTF-16 code units, the unit of every length limit
  of the reference (``taskId`` ≤ 128, error text ≤ 512).
* :func:`is_safe_int` is ``Number.isSafeInteger`` for values decoded from
  JSON: an ``int`` (never a ``bool``) with ``|n| ≤ 2**53 - 1``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final

__all__ = [
    "MAX_SAFE_INTEGER",
    "JsonError",
    "canonical_dumps",
    "is_safe_int",
    "loads",
    "sha256_hex",
    "utf16_len",
]

#: ``Number.MAX_SAFE_INTEGER``.
MAX_SAFE_INTEGER: Final = 2**53 - 1


class JsonError(ValueError):
    """The text is not JSON as ``JSON.parse`` accepts it.

    The message names the position only, never the text (which may hold a
    secret).
    """


def _reject_constant(name: str) -> Any:
    raise JsonError(f"non-standard JSON literal {name}")


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def loads(text: str | bytes | bytearray) -> Any:
    """Parse one JSON text the way ``JSON.parse`` does.

    Args:
        text: a ``str``, or UTF-8 ``bytes``/``bytearray``.

    Returns:
        The decoded value: ``dict``, ``list``, ``str``, ``int``, ``float``,
        ``bool`` or ``None``.

    Raises:
        JsonError: not valid UTF-8, not JSON, trailing data, or a
            ``NaN``/``Infinity`` literal. The message never quotes the input.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonError(f"invalid UTF-8 at byte {exc.start}") from None
    if not isinstance(text, str):
        raise JsonError("JSON text must be str or bytes")
    try:
        return _DECODER.decode(text)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsonError("JSON nested too deeply") from None


def canonical_dumps(value: Any) -> str:
    """Serialize ``value`` canonically: sorted keys, no whitespace.

    Keys are sorted by UTF-16 code units, as a JavaScript sort of the keys
    does, which differs from Python's code-point order only for characters
    above U+FFFF. Non-ASCII text is written as itself.

    Raises:
        ValueError: a float that is not finite.
        TypeError: a value JSON cannot represent.
    """
    return json.dumps(
        _sorted_for_js(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _sorted_for_js(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_for_js(value[k]) for k in sorted(value, key=_utf16_key)}
    if isinstance(value, list | tuple):
        return [_sorted_for_js(v) for v in value]
    return value


def sha256_hex(text: str) -> str:
    """Lowercase hex SHA-256 of ``text`` encoded as UTF-8.

    Lone surrogates are replaced by U+FFFD first, as JavaScript's encoder does.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = _SURROGATE.sub("\ufffd", text).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (JavaScript's ``.length``)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def is_safe_int(value: object) -> bool:
    """``Number.isSafeInteger`` for a decoded JSON value.

    ``True`` only for an ``int`` that is not a ``bool`` and whose magnitude is
    at most ``2**53 - 1``. Floats are refused even when integral (``5.0``):
    the wire writes integers without a fraction, so a fraction means the peer
    did not send an integer (decision recorded in ``docs/protocol.md``).
    """
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
