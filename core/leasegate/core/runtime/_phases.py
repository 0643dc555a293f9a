"""The runtime's phases of one task, as data.

A task's phase says what the consumers may see of it: whether a run of it
is begun and whether its gate is open. Every task record starts in
:data:`INITIAL` and changes phase only through :func:`enter`, which checks
the move against :data:`TRANSITIONS`.

* ``idle`` (:attr:`Phase.IDLE`, the initial phase): no run of the task is
  begun (never, or its begun run was closed) and its gate is closed.
* ``begun`` (:attr:`Phase.BEGUN`): a run is begun (``BeginStart`` admitted
  it, RT-012) and the gate is closed: the run waits for its grant, is being
  installed, or its gate was closed (a credential withdrawal, a cleanup).
* ``open`` (:attr:`Phase.OPEN`): the task's gate is open for a run (the open
  fan-out succeeded, RT-080..084); consumers serve its credentials. The begun
  run may already be closed while the registry's close is still under way,
  or be newer than the open one until the registry closes it (RT-091).
* ``shut`` (:attr:`Phase.SHUT`): the runtime shut down (RT-129); no gate opens
  again and no run is begun. Terminal.

A gate opens only for a begun run (the registry opens it for the run the
runtime started), so ``idle`` never moves to ``open`` directly.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol

from .._phases import PhaseError, illegal_move

__all__ = ["INITIAL", "TRANSITIONS", "IllegalPhaseChange", "Phase", "enter"]


class Phase(enum.Enum):
    """A task's phase in the runtime (see the module docstring)."""

    IDLE = "idle"
    BEGUN = "begun"
    OPEN = "open"
    SHUT = "shut"


#: Where every task record starts.
INITIAL: Phase = Phase.IDLE

#: Every allowed move: ``TRANSITIONS[current]`` is the set of phases it may enter.
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset({Phase.BEGUN, Phase.SHUT}),
    Phase.BEGUN: frozenset({Phase.IDLE, Phase.OPEN, Phase.SHUT}),
    Phase.OPEN: frozenset({Phase.IDLE, Phase.BEGUN, Phase.SHUT}),
    Phase.SHUT: frozenset(),
}


#: The runtime's name for the machines' shared :class:`~leasegate.core._phases.PhaseError`.
IllegalPhaseChange = PhaseError


class _HasPhase(Protocol):
    task_id: str
    phase: Phase


def enter(record: _HasPhase, new_phase: Phase) -> None:
    """Move ``record`` to ``new_phase``; every phase change goes through here.

    Raises:
        IllegalPhaseChange: ``new_phase`` is not in ``TRANSITIONS[record.phase]``
            (correct code never does this; the fuzz harnesses check it).
    """
    if new_phase not in TRANSITIONS[record.phase]:
        raise illegal_move("runtime", record.phase, new_phase)
    record.phase = new_phase
