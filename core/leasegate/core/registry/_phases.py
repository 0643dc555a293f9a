"""The phases of a registered run, and every move between them, as data.

A run (one ``(task_id, run_epoch)`` registered in a :class:`LeaseRegistry`,
the reference's ``TaskState``) is always in one :class:`Phase`:

``recovering``
    Registered by a start that must first run a startup cleanup: a recovery
    start (``StartRun(recovery=True)``, LR-004) or a start that superseded an
    older epoch, whose ended cleanup it completes (LR-005, LR-007). No lease
    is requested and no gate opens until the startup is done.
``waiting``
    No usable grant: a lease request may be pending, or the retry armed
    (LR-011–LR-016). A grant may be read, installed and committed here; its
    gate opening moves the run to ``usable``.
``usable``
    A committed grant's gate opened on its view (LR-061): the run serves
    credentials while the bundle is current (``_usable``: gate open, not
    quarantined, not expired, at or above the revision floor).
``narrowing``
    A ``lease.stale`` raised the revision floor above the committed bundle or
    removed identities: the gate is closed "minimum-revision", the bundle
    sealed, a selective cleanup runs and the floor's grace timer is armed
    (LR-083–LR-088). A grant at or above the floor opens the gate again.
``lost``
    A full cleanup is in flight or has failed and is retried (LR-070–LR-075):
    the gate is closed, nothing is requested or opened until the full cleanup
    succeeds and moves the run back to ``waiting``.
``ended``
    The run was closed, superseded or shut down (LR-121, LR-126): its gate is
    closed, timers cancelled, refreshes and waiters answered. It stays
    registered only while its ended cleanup drains (LR-123, quirk Q15) and
    never leaves this phase.

A run is registered in :data:`INITIAL` (``waiting``) by a start with nothing
to clean up first (LR-003), or in ``recovering`` by one that has a startup
cleanup to run (:func:`initial_phase`). Every later move goes through
:func:`enter`, which checks it against :data:`TRANSITIONS`; a move not in the
table is a bug of the registry (:class:`PhaseError`), never a reaction to
input: ``handle`` contains it like any unexpected exception (it counts in
``internal_errors``, which the tests and the fuzz harness assert stays 0).

Some moves only arise from interleavings: a full cleanup started during a
predecessor's startup cleanup (a launch-fence escalation) can succeed first,
and the run can request, commit and open a grant (even narrow) before that
startup ends and sets ``waiting`` (``_startup_op``), or fail first and leave
the run ``lost`` until then; hence ``usable``, ``narrowing`` and ``lost`` →
``waiting``. A committed grant that did not open (a hold, an expired or
below-floor bundle) leaves a bundle in ``waiting``, which a floor raise can
narrow.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Protocol

from .._phases import PhaseError, illegal_move

__all__ = [
    "ENDED",
    "INITIAL",
    "LOST",
    "NARROWING",
    "RECOVERING",
    "TRANSITIONS",
    "USABLE",
    "WAITING",
    "Phase",
    "PhaseError",
    "enter",
    "initial_phase",
]


class Phase(enum.Enum):
    """The phase of one registered run; the value is ``RunStatus.phase``."""

    RECOVERING = "recovering"
    WAITING = "waiting"
    USABLE = "usable"
    NARROWING = "narrowing"
    LOST = "lost"
    ENDED = "ended"


# Module-level names of the members, for the registry's many phase tests: an
# ``Enum`` member read through its class costs a descriptor call on every
# access (about 0.7 µs on CPython 3.11), a module global a dictionary lookup.
RECOVERING: Final = Phase.RECOVERING
WAITING: Final = Phase.WAITING
USABLE: Final = Phase.USABLE
NARROWING: Final = Phase.NARROWING
LOST: Final = Phase.LOST
ENDED: Final = Phase.ENDED

#: The phase a run is registered in by a start with nothing to clean up
#: first (LR-003); one with a startup cleanup starts ``recovering``
#: (:func:`initial_phase`).
INITIAL: Final = WAITING

#: Every allowed move: ``TRANSITIONS[a]`` holds each phase a run in ``a``
#: may enter (a phase listed in its own set is re-entered, e.g. a renewal's
#: gate opening on a usable run). ``ended`` is final.
TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    # Its startup done (LR-004, LR-007); a full cleanup (launch fence, LR-076); a close.
    RECOVERING: frozenset({WAITING, LOST, ENDED}),
    # A gate opening (LR-061); a floor raise (LR-083); a full cleanup (LR-071); a close;
    # a predecessor's startup cleanup ending after a full cleanup already succeeded.
    WAITING: frozenset({WAITING, USABLE, NARROWING, LOST, ENDED}),
    # A renewal or a change re-opening (LR-062); a floor raise; a full cleanup; a close;
    # a predecessor's startup cleanup ending late (see the module docstring).
    USABLE: frozenset({WAITING, USABLE, NARROWING, LOST, ENDED}),
    # A grant at or above the floor opening (LR-090); another narrowing (LR-088); the
    # grace's full cleanup (LR-085); a close; a startup cleanup ending late.
    NARROWING: frozenset({WAITING, USABLE, NARROWING, LOST, ENDED}),
    # The full cleanup succeeded (LR-072) or a startup ended after it failed; a retry of
    # it (LR-073); a close.
    LOST: frozenset({WAITING, LOST, ENDED}),
    # A second close or a supersession of an ended run still draining (LR-123).
    ENDED: frozenset({ENDED}),
}


class _Phased(Protocol):
    phase: Phase


def initial_phase(needs_startup: bool) -> Phase:
    """The phase a new run is registered in.

    Args:
        needs_startup: the start has a startup cleanup to run first (a
            recovery, LR-004, or a superseded older epoch, LR-005).

    Returns:
        ``recovering`` when ``needs_startup``, else :data:`INITIAL`.
    """
    return RECOVERING if needs_startup else INITIAL


def enter(record: _Phased, new_phase: Phase) -> None:
    """Move ``record`` (a run) to ``new_phase``: the one place a phase changes.

    Raises:
        PhaseError: ``new_phase`` is not in ``TRANSITIONS[record.phase]`` (a
            bug; the record keeps its phase).
    """
    if new_phase not in TRANSITIONS[record.phase]:
        raise illegal_move("registry", record.phase, new_phase)
    record.phase = new_phase
