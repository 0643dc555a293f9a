"""The ``leasegate`` command.

Sub-commands:

* ``leasegate demo`` — the main job (walks one task through a whole lease
  life against a local SSM endpoint). **Not built yet**: it arrives with the
  main-job issue; until then it says so and exits 2.
* ``leasegate version`` — prints the installed version.

The CLI uses :mod:`argparse` from the standard library: the command surface is
small and argparse gives exact exit codes and help with no dependency.
"""

from __future__ import annotations

import argparse
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
    sub.add_parser("version", help="print the installed version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``leasegate`` command.

    Args:
        argv: arguments without the program name (``sys.argv[1:]`` if None).

    Returns:
        The process exit status: 0 on success, 2 for a usage error or a
        sub-command that is not built yet.
    """
    args = _build_parser().parse_args(argv)
    if args.command == "version":
        print(_version())
        return 0
    if args.command == "demo":
        print(
            "leasegate demo: not built yet. The main job (reference cloud, local SSM "
            "endpoint, a task walked from grant to cleanup) arrives with a later issue; "
            "this placeholder exits 2 so that nobody mistakes it for a passing demo.",
            file=sys.stderr,
        )
        return 2
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
