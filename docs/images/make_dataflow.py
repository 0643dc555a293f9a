"""Write ``docs/images/dataflow.svg``: how events and commands flow through a shell.

Plain Python, no dependency: ``python docs/images/make_dataflow.py`` rewrites
the file; ``tests/docs/test_integrate.py`` checks the committed SVG equals
what :func:`svg` makes now.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dataflow.svg"

#: (id, x, y, width, height, title, subtitle) of each box, in pixels.
BOXES = (
    ("host", 260, 20, 280, 56, "Host", "BeginStart, AwaitLaunchReady, CloseAssignment ..."),
    ("shell", 260, 150, 280, 70, "Your shell", "one feeder: handle(event) -> commands"),
    ("core", 260, 300, 280, 80, "CredentialRuntime (core)", "registry + env replica, pure"),
    ("cloud", 20, 150, 170, 70, "Bridge / cloud", "frames over a transport"),
    ("ssm", 610, 110, 170, 56, "Parameter Store", "ReadParameters"),
    ("consumers", 610, 200, 170, 56, "Consumers", "ConsumerWork, RunSetup"),
    ("timers", 610, 290, 170, 56, "Timers, journal", "StartTimer, JournalRecord"),
)

#: (from, to, label, side) arrows; side picks which edges they join.
ARROWS = (
    ("host", "shell", "host calls", "down"),
    ("shell", "host", "Answer / Failed", "up"),
    ("shell", "core", "events", "down"),
    ("core", "shell", "commands", "up"),
    ("cloud", "shell", "HandleFrame, TransportConnected", "right"),
    ("shell", "cloud", "SendFrame, SendAck", "left"),
    ("shell", "ssm", "", "right"),
    ("shell", "consumers", "", "right"),
    ("shell", "timers", "", "right"),
)


def _box(b: tuple[str, int, int, int, int, str, str]) -> str:
    _, x, y, w, h, title, sub = b
    fill = "#e8f0fe" if b[0] == "core" else "#f6f6f6"
    return (
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" stroke="#333"/>\n'
        f'<text x="{x + w // 2}" y="{y + h // 2 - 4}" font-weight="bold">{escape(title)}</text>\n'
        f'<text x="{x + w // 2}" y="{y + h // 2 + 14}" font-size="11">{escape(sub)}</text>\n'
    )


def _arrow(a: tuple[str, str, str, str], at: dict[str, tuple[int, int, int, int]]) -> str:
    src, dst, label, side = a
    sx, sy, sw, sh = at[src]
    dx, dy, dw, dh = at[dst]
    if side in ("down", "up"):
        off = -40 if side == "down" else 40
        x1 = x2 = sx + sw // 2 + off
        y1, y2 = (sy + sh, dy) if side == "down" else (sy, dy + dh)
        lx, ly = x1 + (6 if side == "up" else -6), (y1 + y2) // 2 + 4
        anchor = "start" if side == "up" else "end"
    elif side == "right" and dst == "shell":  # cloud -> shell, upper lane
        x1, x2, y1 = sx + sw, dx, sy + sh // 3
        y2, lx, ly, anchor = y1, (x1 + x2) // 2, y1 - 6, "middle"
    elif side == "left":  # shell -> cloud, lower lane
        x1, x2, y1 = sx, dx + dw, sy + 2 * sh // 3
        y2, lx, ly, anchor = y1, (x1 + x2) // 2, y1 + 16, "middle"
    else:  # shell -> an I/O box, its completion comes back as an event
        x1, y1, x2, y2 = sx + sw, sy + sh // 2, dx, dy + dh // 2
        lx, ly, anchor = x2, y2, "start"
    line = (
        f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#333" marker-end="url(#head)"/>\n'
    )
    if not label:
        return line
    return (
        line
        + f'<text x="{lx}" y="{ly}" font-size="11" text-anchor="{anchor}">{escape(label)}</text>\n'
    )


def svg() -> str:
    """The SVG text of the data-flow picture (deterministic)."""
    at = {b[0]: (b[1], b[2], b[3], b[4]) for b in BOXES}
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="800" height="420" '
        'viewBox="0 0 800 420" font-family="sans-serif" font-size="13" text-anchor="middle">\n',
        '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>\n',
        '<rect width="800" height="420" fill="white"/>\n',
    ]
    parts += [_box(b) for b in BOXES]
    parts += [_arrow(a, at) for a in ARROWS]
    parts.append(
        '<text x="695" y="380" font-size="11">completions come back as events:</text>\n'
        '<text x="695" y="396" font-size="11">ReadCompleted, WorkDone, TimerFired</text>\n'
    )
    parts.append("</svg>\n")
    return "".join(parts)


def main() -> int:
    """Write :data:`OUT`."""
    OUT.write_text(svg(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
