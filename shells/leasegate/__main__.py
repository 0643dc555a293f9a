"""``python -m leasegate``: the ``leasegate`` command (:mod:`leasegate.shells.cli`).

This module lives in the ``shells/`` portion of the ``leasegate`` namespace
package, so it is present in every install that has the command.
"""

from __future__ import annotations

import sys

from leasegate.shells.cli import main

if __name__ == "__main__":
    sys.exit(main())
