"""Replay-ledger costs and byte-exact JavaScript JSON lengths.

The reference charges every piece of replay evidence 1 entry and
``64 + Buffer.byteLength(canonicalJson(evidence))`` bytes, and measures a page
ack as ``Buffer.byteLength(JSON.stringify(ack))`` (ER-113, ER-114). Python's
:func:`json.dumps` with ``ensure_ascii=False`` and compact separators writes
the same escapes as ``JSON.stringify`` (``\\"``, ``\\\\``, ``\\b \\f \\n \\r
\\t``, other C0 as lowercase ``\\u00xx``, DEL raw) except for lone
surrogates, which JavaScript writes as a 6-byte ``\\udxxx`` escape: the
length functions add the difference. All keys of the evidence are ASCII
field names, so Python's key sort equals the reference's UTF-16 sort.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = [
    "LEDGER_RECORD_OVERHEAD_BYTES",
    "canonical",
    "compact_utf8_len",
    "evidence_bytes",
    "evidence_text_bytes",
    "js",
    "utf8_len",
]

#: Bytes charged per ledger record on top of its evidence JSON.
LEDGER_RECORD_OVERHEAD_BYTES: Final = 64

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def utf8_len(text: str) -> int:
    """Bytes of ``text`` as JavaScript writes it in UTF-8 JSON.

    ``Buffer.byteLength``; a lone surrogate counts 6 (``JSON.stringify``
    escapes it as ``\\udxxx``). Additive: ``utf8_len(a + b) == utf8_len(a) +
    utf8_len(b)``.
    """
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        # Each lone surrogate: 3 bytes raw here, a 6-byte escape in JS.
        return len(text.encode("utf-8", "surrogatepass")) + 3 * len(_SURROGATE.findall(text))


#: ``JSON.stringify`` of a scalar (a string, number, boolean or ``None``).
js: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def evidence_text_bytes(text: str) -> int:
    """The ledger cost of evidence already written as canonical JSON ``text``."""
    return LEDGER_RECORD_OVERHEAD_BYTES + utf8_len(text)


_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":")
).encode


def canonical(value: Any) -> str:
    """Canonical JSON (recursively sorted keys, no whitespace, raw non-ASCII)."""
    return _CANONICAL(value)


def compact_utf8_len(value: Any) -> int:
    """UTF-8 length of ``JSON.stringify(value)`` (key order does not matter)."""
    return utf8_len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def evidence_bytes(evidence: Any) -> int:
    """The ledger cost in bytes of one evidence tuple (ER-114)."""
    return LEDGER_RECORD_OVERHEAD_BYTES + utf8_len(canonical(evidence))
