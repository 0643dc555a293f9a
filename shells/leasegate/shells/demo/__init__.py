"""``leasegate demo`` — the main job: one task through a whole lease life, checked.

With no arguments the demo starts a moto server on 127.0.0.1 (the local SSM
and STS endpoint), the reference cloud (:mod:`leasegate.testing`) and a
runner on the async shell (trio), and walks one task through: start →
grant → env snapshot → gate open (files and env shown as names, sizes and
permissions) → rotation → narrowing with a floor → env change → denial and
recovery → stop with every file removed → a second run whose runner dies
mid-cleanup, recovered by a new runner from the durable journal before it
starts again. It prints a timeline while it works and a final table of
outcomes, each decided from observable facts; it exits 0 only if every
expected outcome happened (see ``docs/demo.md``).

Options (``leasegate demo --help``): ``--shell trio|asyncio|threads``,
``--ssm-endpoint URL`` (your own endpoint instead of moto), ``--trace FILE``
(the core's steps as a trace; ``leasegate replay FILE --monitor`` replays it),
``--timeline FILE.html`` (the run's traces drawn as a timeline page,
``docs/timeline.md``).
``--status-every S`` (the live runner's status as a table every S seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import urllib.parse

from ._walk import TASK, DemoOptions, DemoResult, run_demo

__all__ = ["TASK", "DemoOptions", "DemoResult", "run", "run_demo"]


def run(args: argparse.Namespace) -> int:
    """Run ``leasegate demo`` with the CLI's parsed arguments.

    Args:
        args: ``shell`` (``"trio"``, ``"asyncio"`` or ``"threads"``),
            ``ssm_endpoint`` (URL or ``None``), ``trace`` (path or ``None``),
            ``timeline`` (an HTML path or ``None``: the page of the run's
            traces is written there, also when an outcome missed; without
            ``trace`` the traces live in a temporary directory, removed after).
            ``status_every`` (seconds or ``None``).

    Returns:
        0 when every expected outcome happened (and the timeline, if asked
        for, was written), 1 otherwise, 2 when ``--ssm-endpoint`` is not an
        ``http(s)://`` URL (a usage error).
    """
    url = getattr(args, "ssm_endpoint", None)
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            print(
                "leasegate demo: --ssm-endpoint must be an http:// or https:// URL", file=sys.stderr
            )
            return 2
    page = getattr(args, "timeline", None)
    with contextlib.ExitStack() as stack:
        trace = getattr(args, "trace", None)
        if page is not None and trace is None:
            where = stack.enter_context(tempfile.TemporaryDirectory(prefix="leasegate-timeline-"))
            trace = os.path.join(where, "demo.trace.jsonl")
        options = DemoOptions(
            shell=str(getattr(args, "shell", "trio") or "trio"),
            ssm_endpoint=getattr(args, "ssm_endpoint", None),
            trace=trace,
            status_every_s=getattr(args, "status_every", None),
        )
        # SIGTERM takes Ctrl-C's way out: the command (cli.py) delivers it again as SIGINT.
        result = run_demo(options, isolate_logs=True)
        if page is None:
            return result.exit_code
        return max(result.exit_code, _write_timeline(result.traces, page))


def _write_timeline(traces: tuple[str, ...], page: str) -> int:
    """Draw the demo's ``traces`` into ``page``; 0 when written, else 1 (one line on stderr)."""
    from leasegate.shells.trace.timeline import load_timeline, render_html

    if not traces:
        print("leasegate demo: no trace was recorded, no timeline written", file=sys.stderr)
        return 1
    try:
        tl = load_timeline(list(traces))
        with open(page, "w", encoding="utf-8") as f:
            f.write(render_html(tl, title="leasegate demo timeline"))
    except Exception as e:  # noqa: BLE001 - one line, the type only
        print(f"leasegate demo: timeline not written ({type(e).__name__})", file=sys.stderr)
        return 1
    print(f"timeline: {len(tl.runs)} runs -> {page}")
    return 0
