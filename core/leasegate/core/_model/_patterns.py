"""The fast path's pattern shortcuts: remembered matches and ASCII widths.

* :func:`_pattern_cache`: a bounded set of strings known to match a pattern
  (wire ids repeat: engine names, regions, org ids), shared by every field
  declaring the same pattern; :func:`clear_pattern_caches` empties them all.
* :func:`_ascii_width`: the length bounds of every full match of a pattern
  that matches ASCII only, so that a length limit the pattern implies is
  not checked twice. Conservative: any doubt answers ``None``.

Neither ever decides a value: a string not remembered is matched, and the
reference decoder still checks every limit of a value the fast path refuses.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any, Final

# The regex parser (CPython 3.11+), to see which patterns match ASCII only
# (_ascii_width); typeshed does not describe these modules.
_re_constants: Any = re._constants  # type: ignore[attr-defined]
_re_parser: Any = re._parser  # type: ignore[attr-defined]

_CACHE_MAX: Final = 1024
_CACHE_MAX_CHARS: Final = 256
_PATTERN_CACHES: dict[tuple[str, int], tuple[dict[str, str], Callable[[str], object]]] = {}
#: The remembered strings of every pattern (the first item of each cache).
_REMEMBERED: list[dict[str, str]] = []


def clear_pattern_caches() -> None:
    """Forget every string the fast path remembered as matching its pattern.

    For benchmarks that measure a cold decode, and for tests. Decoding is the
    same with or without the caches; only its speed (and which decoded
    values are one object) differs.
    """
    any(map(dict.clear, _REMEMBERED))  # dict.clear returns None: clears them all


def _pattern_cache(pattern: re.Pattern[str]) -> tuple[dict[str, str], Callable[[str], object]]:
    """``(remembered, fullmatch)``: strings known to match ``pattern``, and its full match.

    Only non-secret fields use it. Wire ids repeat (engine names, regions,
    org ids), and a dict lookup is several times cheaper than a match. One
    cache per distinct pattern (source and flags), shared by every field
    declaring it: a string that matched matches wherever the pattern is.
    ``remembered`` maps each string to itself (the first instance decoded).
    The generated code (``_fast._str_check``) fills it: at most
    :data:`_CACHE_MAX` strings of at most :data:`_CACHE_MAX_CHARS`
    characters, emptied when full (unique op ids fill it; the strings that
    recur are soon remembered again).
    """
    key = (pattern.pattern, int(pattern.flags))
    got = _PATTERN_CACHES.get(key)
    if got is None:
        got = _PATTERN_CACHES[key] = ({}, pattern.fullmatch)
        _REMEMBERED.append(got[0])
    return got


def _ascii_width(pattern: re.Pattern[str]) -> tuple[int, int | None] | None:
    """``(min, max)`` length of every full match, if the pattern matches ASCII only.

    ``max`` is ``None`` when unbounded. ``None`` when the pattern could match a
    non-ASCII character (a negated set, ``.``, a category such as ``\\w``, a
    flag) or uses a construct not analysed here: the caller then keeps its
    length checks. For an ASCII-only pattern, a match's length in UTF-16
    code units is its ``len``, so a length limit the pattern already implies
    need not be checked again (the fast path's shortcut; the slow path always
    checks). Conservative: any doubt answers ``None``.
    """
    if pattern.flags != re.UNICODE:
        return None
    try:
        parsed = _re_parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - a pattern this analysis cannot read
        return None
    return _items_width(list(parsed))


def _items_width(items: list[tuple[Any, Any]]) -> tuple[int, int | None] | None:
    c = _re_constants
    lo = 0
    hi: int | None = 0
    for op, av in items:
        if op is c.LITERAL:
            if av >= 0x80:
                return None
            w: tuple[int, int | None] | None = (1, 1)
        elif op is c.IN:
            if not all(
                (o is c.LITERAL and a < 0x80) or (o is c.RANGE and a[1] < 0x80) for o, a in av
            ):
                return None
            w = (1, 1)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            rmin, rmax, sub = av
            inner = _items_width(list(sub))
            if inner is None:
                return None
            top = None if inner[1] is None or rmax == c.MAXREPEAT else inner[1] * rmax
            w = (inner[0] * rmin, top)
        elif op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                return None
            w = _items_width(list(sub))
        elif op is c.BRANCH:
            widths = [_items_width(list(sub)) for sub in av[1]]
            if any(x is None for x in widths) or not widths:
                return None
            ws = typing.cast(list[tuple[int, int | None]], widths)
            tops = [x[1] for x in ws]
            w = (min(x[0] for x in ws), None if None in tops else max(typing.cast(list[int], tops)))
        elif op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            w = (0, 0)  # consumes nothing
        else:
            return None
        if w is None:
            return None
        lo += w[0]
        hi = None if hi is None or w[1] is None else hi + w[1]
    return lo, hi
