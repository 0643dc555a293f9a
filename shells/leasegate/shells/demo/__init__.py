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
``--status-every S`` (the live runner's status as a table every S seconds).
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse

from ._walk import TASK, DemoOptions, DemoResult, run_demo

__all__ = ["TASK", "DemoOptions", "DemoResult", "run", "run_demo"]


def run(args: argparse.Namespace) -> int:
    """Run ``leasegate demo`` with the CLI's parsed arguments.

    Args:
        args: ``shell`` (``"trio"``, ``"asyncio"`` or ``"threads"``),
            ``ssm_endpoint`` (URL or ``None``), ``trace`` (path or ``None``),
            ``status_every`` (seconds or ``None``).

    Returns:
        0 when every expected outcome happened, 1 otherwise, 2 when
        ``--ssm-endpoint`` is not an ``http(s)://`` URL (a usage error).
    """
    url = getattr(args, "ssm_endpoint", None)
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            print(
                "leasegate demo: --ssm-endpoint must be an http:// or https:// URL", file=sys.stderr
            )
            return 2
    options = DemoOptions(
        shell=str(getattr(args, "shell", "trio") or "trio"),
        ssm_endpoint=getattr(args, "ssm_endpoint", None),
        trace=getattr(args, "trace", None),
        status_every_s=getattr(args, "status_every", None),
    )
    # SIGTERM takes Ctrl-C's way out: the command (cli.py) delivers it again as SIGINT.
    return run_demo(options, isolate_logs=True).exit_code
