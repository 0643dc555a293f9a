"""``leasegate demo`` — placeholder until the main job lands (issue #7).

It says so and exits 2, so nobody mistakes it for a passing demo.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Say the demo is not built yet; return 2."""
    print("leasegate demo: not built yet (issue #7); exits 2.", file=sys.stderr)
    return 2
