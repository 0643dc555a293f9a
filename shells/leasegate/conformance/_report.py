"""Reports: the terminal table, JSON and self-contained HTML; the CLI's ``run``.

Evidence lists frame kinds with their times and SSM calls with names and
access key ids only: never a value, key or token.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Sequence
from typing import Any

from ._cases import CASES
from ._suite import PARTS, Case, Target, Verdict, run_suite

__all__ = ["exit_status", "render_html", "render_json", "render_table", "run"]


def exit_status(verdicts: Sequence[Verdict]) -> int:
    """0 when every applicable case passed (and at least one ran), else 1."""
    ran = [v for v in verdicts if v.outcome != "not applicable"]
    return 0 if ran and all(v.outcome == "passed" for v in ran) else 1


def render_table(verdicts: Sequence[Verdict]) -> str:
    """One line per case (number, verdict, seconds, catalog ids, detail) and a total."""
    rows = [("case", "verdict", "s", "catalog", "detail")]
    for v in verdicts:
        rows.append(
            (v.case.name, v.outcome, f"{v.seconds:.1f}", " ".join(v.case.catalog), v.detail)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
        for r in rows
    ]
    counts = {
        o: sum(v.outcome == o for v in verdicts) for o in ("passed", "failed", "not applicable")
    }
    lines.append(", ".join(f"{n} {o}" for o, n in counts.items()))
    return "\n".join(line.rstrip() for line in lines)


def render_json(verdicts: Sequence[Verdict], target: Target) -> str:
    """The report as JSON text: target, per-case verdicts with evidence, exit status."""
    doc: dict[str, Any] = {
        "target": {
            "command": target.command,
            "url": target.url,
            "implements": list(target.implements),
        },
        "cases": [v.as_json() for v in verdicts],
        "exitStatus": exit_status(verdicts),
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def render_html(verdicts: Sequence[Verdict], target: Target) -> str:
    """A self-contained HTML page (inline style, no script, no external link)."""
    esc = html.escape
    colour = {"passed": "#1a7f37", "failed": "#cf222e", "not applicable": "#6e7781"}
    rows = []
    for v in verdicts:
        ev = "<br>".join(esc(e) for e in v.evidence)
        rows.append(
            f"<tr><td>{esc(v.case.name)}</td><td>{esc(v.case.title)}</td>"
            f"<td>{esc(' '.join(v.case.catalog))}</td>"
            f"<td style='color:{colour[v.outcome]}'><b>{esc(v.outcome)}</b></td>"
            f"<td>{esc(v.detail)}</td><td><details><summary>{len(v.evidence)} items</summary>"
            f"<code>{ev}</code></details></td></tr>"
        )
    who = esc(target.command or target.url or "")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>leasegate conformance</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px;"
        "vertical-align:top}table{border-collapse:collapse}code{font-size:85%}</style></head>"
        f"<body><h1>leasegate conformance</h1><p>runner: <code>{who}</code></p>"
        f"<p>{esc(render_table(verdicts).splitlines()[-1])}</p><table><tr><th>case</th>"
        "<th>checks</th><th>catalog</th><th>verdict</th><th>detail</th><th>evidence</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )


def select(names: Sequence[str] | None) -> list[Case]:
    """The cases named by number or ``NN-slug`` (all when ``None``/empty).

    Raises:
        ValueError: a name that matches no case.
    """
    if not names:
        return list(CASES)
    out = []
    for n in names:
        found = [c for c in CASES if n in (c.name, c.slug, str(c.number), f"{c.number:02d}")]
        if not found:
            raise ValueError(f"no case {n}")
        out.extend(found)
    return out


def run(args: argparse.Namespace) -> int:
    """``leasegate conformance``: run the selected cases, print the table,
    write ``--json``/``--html`` if given; return :func:`exit_status` (2 on a
    bad ``--case`` or ``--implements``, or ``--jobs`` above 1 with
    ``--runner-url``). ``--jobs N`` runs up to ``N`` cases at once."""
    implements = tuple(p for p in (args.implements or ",".join(PARTS)).split(",") if p)
    unknown = [p for p in implements if p not in PARTS]
    try:
        cases = select(args.case)
    except ValueError as e:
        print(f"leasegate conformance: {e}", file=sys.stderr)
        return 2
    if unknown or "lease" not in implements:
        print(
            f"leasegate conformance: --implements takes {','.join(PARTS)} (lease required)",
            file=sys.stderr,
        )
        return 2
    jobs = getattr(args, "jobs", 1)
    if args.runner_url is not None and jobs > 1:
        print("leasegate conformance: --jobs needs --runner-cmd", file=sys.stderr)
        return 2
    target = Target(command=args.runner_cmd, url=args.runner_url, implements=implements)
    verdicts = run_suite(
        cases,
        target,
        jobs=jobs,
        on_verdict=lambda v: print(v.line(), file=sys.stderr, flush=True),
    )
    print(render_table(verdicts))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(render_json(verdicts, target))
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_html(verdicts, target))
    return exit_status(verdicts)
