"""What the machines' phase tables share: the error of a move a table does not allow.

Each machine keeps its own ``Phase``, ``INITIAL``, ``TRANSITIONS`` and
``enter`` (``registry/_phases.py``, ``replica/_phases.py``,
``runtime/_phases.py``); a move its table does not allow raises the one
:class:`PhaseError` made by :func:`illegal_move`.
"""

from __future__ import annotations

import enum

__all__ = ["PhaseError", "illegal_move"]


class PhaseError(AssertionError):
    """A phase move a machine's ``TRANSITIONS`` does not allow: a bug of that machine.

    Correct code never raises it; each machine's ``handle`` contains it, as
    every unexpected exception (``internal_errors``). The message names the
    machine and the two phases only (never a task id or a value).
    """


def illegal_move(machine: str, old: enum.Enum, new: enum.Enum) -> PhaseError:
    """The :class:`PhaseError` of ``machine`` (``"registry"``, ``"replica"``, ``"runtime"``)
    moving a record from phase ``old`` to ``new``."""
    return PhaseError(f"{machine} phase {old.value} cannot move to {new.value}")
