"""The ``leasegate`` command.

Sub-commands:

* ``leasegate demo`` — the main job: walks one task through a whole lease
  life against a local SSM endpoint (``leasegate.shells.demo``).
* ``leasegate replay TRACE`` — feeds a recorded trace to a fresh core and
  compares every command (``leasegate.shells.trace``).
* ``leasegate version`` — prints the installed version.

The CLI uses :mod:`argparse` from the standard library: the command surface is
small and argparse gives exact exit codes and help with no dependency. Each
sub-command's module is imported only when it runs, so ``leasegate version``
stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

__all__ = ["main"]


def _version() -> str:
    try:
        return version("leasegate")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="leasegate",
        description="Task-scoped cloud credential leases for runner hosts.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="walk one task through a whole lease life (main job)")
    demo.add_argument("--shell", choices=("trio", "asyncio", "threads"), default="trio")
    demo.add_argument("--ssm-endpoint", metavar="URL", default=None)
    demo.add_argument("--trace", metavar="FILE", default=None)
    replay = sub.add_parser("replay", help="replay a recorded trace through a fresh core")
    replay.add_argument("trace", metavar="TRACE")
    replay.add_argument("--monitor", action="store_true", help="run the invariant monitor")
    sub.add_parser("version", help="print the installed version")
    return parser


#: sub-command -> module whose ``run(args: argparse.Namespace) -> int`` serves it.
_COMMANDS = {
    "demo": "leasegate.shells.demo",
    "replay": "leasegate.shells.trace.replay",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``leasegate`` command.

    Args:
        argv: arguments without the program name (``sys.argv[1:]`` if None).

    Returns:
        The process exit status: 0 on success, 1 when a sub-command's outcome
        is a failure (a demo outcome missing, a replay divergence or a
        malformed trace), 2 for a usage error.
    """
    args = _build_parser().parse_args(argv)
    if args.command == "version":
        print(_version())
        return 0
    module = importlib.import_module(_COMMANDS[args.command])
    status: int = module.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
