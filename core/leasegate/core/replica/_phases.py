"""The phases of one task's replica, as data.

A replica (``_state._Replica``, one per task and run) is in exactly one
phase; every change of phase goes through :func:`enter`, which allows only
the moves in :data:`TRANSITIONS`. The phase is the replica's gate and its
restart mark: the gate is open exactly in :attr:`Phase.LIVE`, and a replica
requires a runner restart exactly in :attr:`Phase.EXHAUSTED`.

* ``waiting`` (:data:`INITIAL`): activated (ER-008), no snapshot begun: gate
  closed, no stream, cursor, attempt or live projects. Frames other than a
  begin are mismatches.
* ``staging``: a reconciliation attempt is in progress (a begin was
  accepted, ER-033): gate closed; pages and staged applies fill the
  attempt's projects. A begin of another attempt stays here (the old
  attempt retired and scrubbed).
* ``live``: the attempt was committed (ER-092): gate open, the live snapshot
  is served (ER-121, ER-124) and live applies change it. A begin starts a
  new attempt (back to ``staging``).
* ``exhausted``: the replay ledger refused a reservation (ER-119):
  restart-required, gate and reader closed, every value dropped; every
  later frame for the run gets ``replica_restart_required``. Only a drop or
  a newer run ends it.
* ``dropped``: destroyed: dropped (ER-015), replaced by a newer run
  (ER-012) or dropped with every other replica (ER-016); no longer
  registered, reader closed, values scrubbed. Final.

A move outside :data:`TRANSITIONS` is a bug in the machine, never a result
of its input: :func:`enter` raises :class:`PhaseError` (an
:class:`AssertionError`) for it, which correct code never triggers (the
replica fuzz harness drives every event sequence it finds through
``handle``, which would raise).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Protocol

from .._phases import PhaseError, illegal_move

__all__ = [
    "DROPPED",
    "EXHAUSTED",
    "INITIAL",
    "LIVE",
    "STAGING",
    "TRANSITIONS",
    "WAITING",
    "Phase",
    "PhaseError",
    "enter",
]


class Phase(enum.Enum):
    """The phase of one task's replica (see the module docstring)."""

    WAITING = "waiting"
    STAGING = "staging"
    LIVE = "live"
    EXHAUSTED = "exhausted"
    DROPPED = "dropped"


# The members as module names, for the machine's hot paths (an enum member
# looked up on its class costs about ten times a module name on Python 3.11).
WAITING: Final = Phase.WAITING
STAGING: Final = Phase.STAGING
LIVE: Final = Phase.LIVE
EXHAUSTED: Final = Phase.EXHAUSTED
DROPPED: Final = Phase.DROPPED

#: Where every replica starts: activated, waiting for its first snapshot.
INITIAL: Final = Phase.WAITING

#: Every allowed move: ``TRANSITIONS[p]`` is the set of phases a replica in
#: phase ``p`` may enter (``staging`` to ``staging``: a begin of another
#: attempt).
TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = MappingProxyType(
    {
        Phase.WAITING: frozenset({Phase.STAGING, Phase.DROPPED}),
        Phase.STAGING: frozenset({Phase.STAGING, Phase.LIVE, Phase.EXHAUSTED, Phase.DROPPED}),
        Phase.LIVE: frozenset({Phase.STAGING, Phase.EXHAUSTED, Phase.DROPPED}),
        Phase.EXHAUSTED: frozenset({Phase.DROPPED}),
        Phase.DROPPED: frozenset(),
    }
)


class _HasPhase(Protocol):
    phase: Phase


def enter(record: _HasPhase, new_phase: Phase) -> None:
    """Move ``record`` (a replica) to ``new_phase``.

    Raises:
        PhaseError: ``new_phase`` is not in ``TRANSITIONS[record.phase]``
            (a bug in the machine; nothing is changed).
    """
    if new_phase not in TRANSITIONS[record.phase]:
        raise illegal_move("replica", record.phase, new_phase)
    record.phase = new_phase
