"""Draw each core machine's phases from its transition table.

Usage::

    python tools/make_state_diagrams.py          # rewrite the pictures and tables
    python tools/make_state_diagrams.py --check  # exit 1 when a committed one differs

Every machine listed in :data:`MACHINES` keeps its phases as data in
``leasegate.core.<machine>._phases``: ``Phase`` (an enum), ``INITIAL`` (the
phase a record starts in) and ``TRANSITIONS`` (each phase → the phases it may
move to). From those three names this tool writes, deterministically:

* ``docs/images/states-<machine>.svg``: the phases as boxes in a row, one
  arc per allowed move;
* the transition table of the machine's page, between
  ``<!-- states:<machine> -->`` and ``<!-- /states:<machine> -->``.

``tests/docs/test_state_diagrams.py`` checks that the committed files equal
what this tool makes now, so a change to a table that is not redrawn fails.
Plain Python, no dependency.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping
from enum import Enum
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"

#: machine → the docs page that shows its phases.
MACHINES: dict[str, str] = {
    "registry": "docs/registry.md",
    "replica": "docs/env-replica.md",
    "runtime": "docs/runtime.md",
}

BOX_W, BOX_H, COL_GAP, MARGIN = 130, 36, 40, 20


def load(machine: str) -> tuple[list[Enum], Enum, Mapping[Enum, frozenset[Enum]]]:
    """The phases (in enum order), the initial phase and the table of ``machine``.

    Raises ``ImportError`` when the machine keeps no ``_phases`` module and
    ``ValueError`` when the table names a phase of another enum or leaves a
    phase out.
    """
    mod: Any = importlib.import_module(f"leasegate.core.{machine}._phases")
    phases = list(mod.Phase)
    table: Mapping[Enum, frozenset[Enum]] = mod.TRANSITIONS
    if set(table) != set(phases):
        raise ValueError(f"{machine}: TRANSITIONS must have one row per Phase")
    for row in table.values():
        if not set(row) <= set(phases):
            raise ValueError(f"{machine}: TRANSITIONS names a phase of another enum")
    return phases, mod.INITIAL, table


def svg(machine: str) -> str:
    """The SVG text of ``machine``'s phase diagram (deterministic).

    An arc diagram: the phases in a row in enum order (``INITIAL`` shaded), a
    move to a phase on the right as an arc above the row, a move to the left
    as a dashed arc below it, a move that stays as a loop on the box's right edge.
    """
    phases, initial, table = load(machine)
    n = len(phases)
    lift = 28  # an arc's height per box it spans
    above = below = 0
    for i, p in enumerate(phases):
        for q in table[p]:
            j = phases.index(q)
            if j > i:
                above = max(above, j - i)
            elif j < i:
                below = max(below, i - j)
    top = MARGIN + 30 + max(above * lift, 26) + 8
    width = 2 * MARGIN + n * BOX_W + (n - 1) * COL_GAP
    height = top + BOX_H + below * lift + 2 * MARGIN + 24

    def x(i: int) -> int:
        return MARGIN + i * (BOX_W + COL_GAP)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
        'text-anchor="middle">\n',
        '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>\n',
        f'<rect width="{width}" height="{height}" fill="white"/>\n',
        f'<text x="{MARGIN}" y="{MARGIN + 8}" text-anchor="start" font-weight="bold">'
        f"{escape(machine)} phases (from {escape(machine)}/_phases.py): a move right is an "
        "arc above, a move left a dashed arc below</text>\n",
    ]
    for i, p in enumerate(phases):
        fill = "#e8f0fe" if p is initial else "#f6f6f6"
        parts.append(
            f'<rect x="{x(i)}" y="{top}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" '
            f'stroke="#333"/>\n<text x="{x(i) + BOX_W // 2}" y="{top + BOX_H // 2 + 4}">'
            f"{escape(str(p.value))}</text>\n"
        )
    for i, p in enumerate(phases):
        for q in sorted(table[p], key=phases.index):
            parts.append(_arc(i, phases.index(q), x(i), x(phases.index(q)), top, lift, n))
    parts.append("</svg>\n")
    return "".join(parts)


def _arc(i: int, j: int, xi: int, xj: int, top: int, lift: int, n: int) -> str:
    """One move from phase ``i`` (box at ``xi``) to ``j`` (at ``xj``); see :func:`svg`."""
    slot = BOX_W // (n + 1)  # where on a box's edge a move leaves or lands: by the other end
    if i == j:
        r, y1, y2 = xi + BOX_W, top + 8, top + BOX_H - 8  # a loop on the box's right edge
        return (
            f'<path d="M{r},{y1} C{r + 20},{y1 - 4} {r + 20},{y2 + 4} {r},{y2}" '
            'fill="none" stroke="#333" marker-end="url(#head)"/>\n'
        )
    x1, x2 = xi + slot * (j + 1), xj + slot * (i + 1)
    if j > i:
        y, h, style = top, top - lift * (j - i), 'stroke="#333"'
    else:
        y, h = top + BOX_H, top + BOX_H + lift * (i - j)
        style = 'stroke="#888" stroke-dasharray="4 3"'
    return (
        f'<path d="M{x1},{y} C{x1},{h} {x2},{h} {x2},{y}" fill="none" {style} '
        'marker-end="url(#head)"/>\n'
    )


def table_md(machine: str) -> str:
    """The Markdown block (picture and transition table) for ``machine``'s page."""
    phases, initial, table = load(machine)
    lines = [
        f"<!-- states:{machine} -->",
        f"![The {machine}'s phases and the moves between them](images/states-{machine}.svg)",
        "",
        f"Generated by `tools/make_state_diagrams.py` from `{machine}/_phases.py`; "
        f"a record starts in `{initial.value}`.",
        "",
        "| phase | may move to |",
        "| --- | --- |",
    ]
    for p in phases:
        dests = ", ".join(f"`{q.value}`" for q in sorted(table[p], key=phases.index))
        lines.append(f"| `{p.value}` | {dests or '(final)'} |")
    lines.append(f"<!-- /states:{machine} -->")
    return "\n".join(lines)


def page_text(machine: str) -> str:
    """The machine's page with its generated block replaced.

    Raises ``ValueError`` when the page has no ``<!-- states:<machine> -->`` block.
    """
    page = (ROOT / MACHINES[machine]).read_text(encoding="utf-8")
    start, end = f"<!-- states:{machine} -->", f"<!-- /states:{machine} -->"
    if start not in page or end not in page:
        raise ValueError(f"{MACHINES[machine]} has no {start} ... {end} block")
    head, rest = page.split(start, 1)
    tail = rest.split(end, 1)[1]
    return head + table_md(machine) + tail


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) every machine's picture and table; exit 0/1."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    args = ap.parse_args(argv)
    stale = []
    for machine, page in MACHINES.items():
        outputs = {IMAGES / f"states-{machine}.svg": svg(machine), ROOT / page: page_text(machine)}
        for path, text in outputs.items():
            old = path.read_text(encoding="utf-8") if path.exists() else None
            if old == text:
                continue
            if args.check:
                stale.append(str(path.relative_to(ROOT)))
            else:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    if stale:
        print("stale (run tools/make_state_diagrams.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
