"""JSON with JavaScript's semantics, and canonical JSON.

The reference runs on JavaScript, so the wire is read the way ``JSON.parse``
reads it and written the way ``JSON.stringify`` writes it:

* :func:`loads` rejects ``NaN``, ``Infinity`` and ``-Infinity`` literals
  (Python's :mod:`json` accepts them by default); a duplicate key keeps the
  last value, as ``JSON.parse`` does; text must be ``str`` or UTF-8 bytes.
* :func:`loads` reads an overflowing number as ``JSON.parse`` does: ``1e400``
  and an integer literal of more than 4300 digits (past Python's integer
  digit limit) become ``±inf`` (a ``float``), which every validator refuses
  as not finite; an integer literal of at most 4300 digits stays an exact
  ``int`` (validators refuse one beyond their range, and a float field
  refuses one ``JSON.parse`` would read as ``±Infinity``). Decision recorded
  in ``docs/protocol.md``. No exception other than :class:`JsonError` ever
  leaves :func:`loads`.
* :func:`canonical_dumps` writes sorted keys and no whitespace, non-ASCII
  characters as themselves, lone surrogates escaped (``\\ud800``) and numbers
  as ``Number::toString`` does (``1.0`` → ``1``, ``1e-07`` → ``1e-7``), exactly
  as ``JSON.stringify`` does; it is what the manifest digest hashes
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
    "canonical_dumps_reference",
    "is_js_finite",
    "is_safe_int",
    "js_number",
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


def _parse_int(text: str) -> int | float:
    # Python refuses to convert more than 4300 digits (a bare ValueError).
    # JSON.parse reads every number as a double, and such a literal as
    # ±Infinity; so does this (float() of it is ±inf). Shorter integers stay
    # exact Python ints (validators decide what range they accept).
    if len(text) > 4300:
        return float(text)
    return int(text)


_INF: Final = float("inf")

# The common case parses integers in C; only text holding an integer literal
# Python refuses (a bare ValueError) is parsed again, with _parse_int.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
_HUGE_INT_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_parse_int)
_SCAN: Final = _DECODER.scan_once  # type: ignore[attr-defined]


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
            No other exception escapes. A number too large for a double
            (``1e400``, 5000 digits) is not an error: it reads as ``±inf``,
            as ``JSON.parse`` reads it.
    """
    if type(text) is not str:
        if isinstance(text, bytes | bytearray):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JsonError(f"invalid UTF-8 at byte {exc.start}") from None
        elif not isinstance(text, str):
            raise JsonError("JSON text must be str or bytes")
    # The common case: the C scanner alone, when the text is one value with
    # no surrounding whitespace. Anything else (whitespace, trailing data,
    # an error) takes the full path below, which decides exactly as
    # JSONDecoder.decode does.
    try:
        obj, end = _SCAN(text, 0)
    except Exception:  # noqa: BLE001, S110 - decided again below
        pass
    else:
        if end == len(text):
            return obj
    try:
        return _DECODER.decode(text)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsonError("JSON nested too deeply") from None
    except ValueError:
        pass  # an integer literal past Python's digit limit: parse again below
    try:
        return _HUGE_INT_DECODER.decode(text)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsonError("JSON nested too deeply") from None
    except (ValueError, OverflowError, MemoryError):
        # Defensive: any other conversion failure of a literal is still bad JSON.
        raise JsonError("invalid JSON number") from None


def canonical_dumps(value: Any) -> str:
    """Serialize ``value`` canonically, exactly as ``JSON.stringify`` would.

    Sorted keys, no whitespace. Keys are sorted by UTF-16 code units, as a
    JavaScript sort of the keys does, which differs from Python's code-point
    order only for characters above U+FFFF. Non-ASCII text is written as
    itself, but a lone surrogate is escaped as ``\\udXXX`` (well-formed
    ``JSON.stringify``). Numbers are written as ECMAScript
    ``Number::toString`` writes them (:func:`js_number`): ``1.0`` → ``1``,
    ``-0.0`` → ``0``, ``1e-07`` → ``1e-7``, ``1e16`` → ``10000000000000000``.

    A value of exact ``dict``/``list``/``tuple``/``str``/``int``/``bool``/
    ``None`` nodes with no floats is written by ``json``'s C encoder, whose
    text is then the same (checked: no character from U+D800 up, where lone
    surrogates and UTF-16 key order differ); everything else by
    :func:`canonical_dumps_reference`, which defines the result either way
    (``tests/core/wire/test_canonical_json.py`` compares the two).

    Args:
        value: ``dict`` (``str`` keys), ``list``/``tuple``, ``str``, ``int``,
            ``float``, ``bool`` or ``None``, nested.

    Raises:
        ValueError: a float that is not finite.
        TypeError: a value JSON cannot represent, or a non-``str`` key.
    """
    try:
        plain = _plain(value)
    except RecursionError:
        plain = False  # nested too deeply for this check: the writer decides
    if plain:
        try:
            text: str = _C_CANONICAL(value)
        except (ValueError, RecursionError):
            pass  # an int past Python's digit limit, deep nesting: the writer decides
        else:
            if text.isascii() or _JS_DIFFERS.search(text) is None:
                return text
    return canonical_dumps_reference(value)


def canonical_dumps_reference(value: Any) -> str:
    """:func:`canonical_dumps` by the pure-Python writer, for every value.

    The definition :func:`canonical_dumps` must agree with; it takes this
    path itself for what the C encoder writes differently from
    ``JSON.stringify`` (floats, lone surrogates, keys whose UTF-16 order is
    not their code-point order) or refuses differently (non-``str`` keys,
    other types). Same arguments, result and errors as :func:`canonical_dumps`.
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what the C encoder writes as ``JSON.stringify`` does.

    Exact ``dict`` (``str`` keys), ``list``, ``tuple``, ``str``, ``int``,
    ``bool`` and ``None``, nested: for these, ``json``'s C encoder (sorted
    keys, no whitespace, ``ensure_ascii=False``) writes the same text as
    :func:`_write`: the same string escaper (``encode_basestring``),
    ``int.__repr__``, ``true``/``false``/``null``. Subclasses and floats are
    not plain (a subclass may iterate differently; a float's ``repr`` is not
    ``Number::toString``). May raise ``RecursionError`` on deep nesting.
    """
    t = type(value)
    if t is dict:
        for k, x in value.items():
            if type(k) is not str:
                return False
            tx = type(x)
            if tx is str or tx is int or tx is bool or x is None:
                continue
            if not _plain(x):
                return False
        return True
    if t is list or t is tuple:
        for x in value:
            tx = type(x)
            if tx is str or tx is int or tx is bool or x is None:
                continue
            if not _plain(x):
                return False
        return True
    return t is str or t is int or t is bool or value is None


#: ``json``'s C encoder with the canonical layout (for plain values only).
_C_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
).encode

#: A character whose presence may make the C encoder's text differ from
#: ``JSON.stringify``'s: a lone surrogate (written raw, not escaped), or a
#: character from U+D800 up, which in a key may sort differently by UTF-16
#: code units than by code points. Conservative: such text is written again
#: by the reference writer.
_JS_DIFFERS: Final = re.compile("[\ud800-\U0010ffff]")

_ENCODE_STR: Final = json.encoder.encode_basestring


def _write_str(text: str, out: list[str]) -> None:
    encoded = _ENCODE_STR(text)
    if _SURROGATE.search(encoded) is not None:
        encoded = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)
    out.append(encoded)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        _write_str(value, out)
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(js_number(value))
    elif isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise TypeError("object keys must be str")
        out.append("{")
        first = True
        for k in sorted(value, key=_utf16_key):
            if not first:
                out.append(",")
            first = False
            _write_str(k, out)
            out.append(":")
            _write(value[k], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def js_number(x: float) -> str:
    """ECMAScript ``Number::toString(x)`` for a finite float (radix 10).

    The shortest round-trip digits (Python's ``repr``), laid out per the
    spec: fixed notation when ``1e-7 <= |x| < 1e21`` (``1e16`` →
    ``10000000000000000``, ``2.5e-05`` → ``0.000025``), else exponent form
    (``1e+21``, ``1.5e-7``); integral values have no fraction (``1.0`` →
    ``1``) and ``-0.0`` is ``0``.

    Raises:
        ValueError: ``x`` is NaN or infinite (``JSON.stringify`` would write
            ``null``; canonical JSON refuses them).
    """
    if x != x or x in (_INF, -_INF):
        raise ValueError("out of range float values are not JSON compliant")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))
    mantissa, _, exp_text = r.partition("e")
    exp = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # Value is 0.digits * 10**n (the spec's n), digits without trailing zeros.
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    n = len(int_part) - lead_zeros + exp
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        e_text = f"e+{e}" if e >= 0 else f"e-{-e}"
        body = digits + e_text if k == 1 else digits[0] + "." + digits[1:] + e_text
    return sign + body


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


#: The smallest integer magnitude a JavaScript number rounds to Infinity.
_INT_AS_INF: Final = 2**1024 - 2**970


def is_js_finite(value: int | float) -> bool:
    """``Number.isFinite`` of the number ``JSON.parse`` reads for ``value``.

    ``value`` is an ``int`` or ``float`` from :func:`loads`. A float is finite
    unless NaN or ±inf; an ``int`` is finite unless its magnitude rounds to
    ``±Infinity`` as a double (``>= 2**1024 - 2**970``, e.g. ``10**400``).
    Never raises (unlike :func:`math.isfinite`, which overflows on such an
    int). Implements the reference's ``Number.isFinite`` checks of decoded
    numbers (e.g. a legacy envelope's ``updatedAt``, ER-100).
    """
    if type(value) is int:
        return -_INT_AS_INF < value < _INT_AS_INF
    return value == value and value not in (_INF, -_INF)
