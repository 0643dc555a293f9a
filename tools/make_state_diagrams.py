"""Draw each core machine's phases from its transition table.

Usage::

    python tools/make_state_diagrams.py          # rewrite the pictures and tables
    python tools/make_state_diagrams.py --check  # exit 1 when a committed one differs

Every machine listed in :data:`MACHINES` keeps its phases as data in
``leasegate.core.<machine>._phases``: ``Phase`` (an enum), ``INITIAL`` (the
phase a record starts in) and ``TRANSITIONS`` (each phase → the phases it may
move to). From those three names this tool writes, deterministically:

* ``docs/images/states-<machine>.svg``: the phases as boxes in columns by
  their distance from ``INITIAL``, one arrow per allowed move;
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

BOX_W, BOX_H, COL_GAP, ROW_GAP, MARGIN = 150, 36, 70, 26, 20
#: room above the first row: the title and the backward moves' curves.
TOP = 80


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


def _columns(
    phases: list[Enum], initial: Enum, table: Mapping[Enum, frozenset[Enum]]
) -> dict[Enum, tuple[int, int]]:
    """Each phase's (column, row): column = moves from ``initial`` (unreached: last)."""
    depth = {initial: 0}
    frontier = [initial]
    while frontier:
        nxt: list[Enum] = []
        for p in frontier:
            for q in sorted(table[p], key=phases.index):
                if q not in depth:
                    depth[q] = depth[p] + 1
                    nxt.append(q)
        frontier = nxt
    last = max(depth.values()) + 1
    at: dict[Enum, tuple[int, int]] = {}
    rows: dict[int, int] = {}
    for p in phases:
        col = depth.get(p, last)
        at[p] = (col, rows.get(col, 0))
        rows[col] = rows.get(col, 0) + 1
    return at


def svg(machine: str) -> str:
    """The SVG text of ``machine``'s phase diagram (deterministic)."""
    phases, initial, table = load(machine)
    at = _columns(phases, initial, table)
    cols = max(c for c, _ in at.values()) + 1
    rows = max(r for _, r in at.values()) + 1
    width = 2 * MARGIN + cols * BOX_W + cols * COL_GAP
    height = 2 * MARGIN + rows * BOX_H + (rows - 1) * ROW_GAP + TOP

    def xy(p: Enum) -> tuple[int, int]:
        c, r = at[p]
        return MARGIN + c * (BOX_W + COL_GAP), MARGIN + TOP + r * (BOX_H + ROW_GAP)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
        'text-anchor="middle">\n',
        '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>\n',
        f'<rect width="{width}" height="{height}" fill="white"/>\n',
        f'<text x="{MARGIN}" y="{MARGIN + 8}" text-anchor="start" font-weight="bold">'
        f"{escape(machine)} phases (from {escape(machine)}/_phases.py)</text>\n",
    ]
    for p in phases:
        x, y = xy(p)
        fill = "#e8f0fe" if p is initial else "#f6f6f6"
        parts.append(
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" '
            f'stroke="#333"/>\n<text x="{x + BOX_W // 2}" y="{y + BOX_H // 2 + 4}">'
            f"{escape(str(p.value))}</text>\n"
        )
    for p in phases:
        for q in sorted(table[p], key=phases.index):
            parts.append(_edge(xy(p), xy(q), at[p], at[q]))
    parts.append("</svg>\n")
    return "".join(parts)


def _edge(
    src: tuple[int, int], dst: tuple[int, int], ps: tuple[int, int], pd: tuple[int, int]
) -> str:
    (sx, sy), (dx, dy) = src, dst
    if src == dst:  # a phase that may be entered again: a small loop on its top
        x, y = sx + BOX_W - 30, sy
        return (
            f'<path d="M{x},{y} C{x},{y - 22} {x + 24},{y - 22} {x + 24},{y}" fill="none" '
            'stroke="#333" marker-end="url(#head)"/>\n'
        )
    if pd[0] > ps[0]:  # forward: right edge to left edge
        x1, y1, x2, y2 = sx + BOX_W, sy + BOX_H // 2, dx, dy + BOX_H // 2
        return (
            f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#333" '
            'marker-end="url(#head)"/>\n'
        )
    if pd[0] == ps[0]:  # within a column: a curve on the right of the boxes
        x1, y1, x2, y2 = sx + BOX_W, sy + BOX_H // 2 - 6, dx + BOX_W, dy + BOX_H // 2 + 6
        bend = x1 + COL_GAP // 2
        return (
            f'<path d="M{x1},{y1} C{bend},{y1} {bend},{y2} {x2},{y2}" fill="none" '
            'stroke="#888" stroke-dasharray="4 3" marker-end="url(#head)"/>\n'
        )
    # backward: a curve above the boxes, top edge to top edge
    x1, y1, x2, y2 = sx + BOX_W // 2 - 10, sy, dx + BOX_W // 2 + 10, dy
    bend = min(y1, y2) - ROW_GAP - 8 * (ps[0] - pd[0])
    return (
        f'<path d="M{x1},{y1} C{x1},{bend} {x2},{bend} {x2},{y2}" fill="none" '
        'stroke="#888" stroke-dasharray="4 3" marker-end="url(#head)"/>\n'
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
