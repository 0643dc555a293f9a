"""What the runtime's parts share: fixed error texts, failure folding, field checks."""

from __future__ import annotations

from collections.abc import Callable

from .._base import Event
from ..registry import Assignment, TimerFired
from ._vocab import (
    AbandonStart,
    AcquireHold,
    AwaitLaunchReady,
    CloseAssignment,
    CredentialFailure,
    CredentialUnavailable,
    EndStart,
    Interrupt,
    InterruptRecovery,
    InterruptStarts,
    ReleaseHold,
    ResumeRecovered,
    WorkDone,
)

CLU_INTERRUPTED = "this start was interrupted"
CLU_NOT_OPEN = "the task's credentials are no longer open for this run"
CLU_NEWER = "a newer run of this task has begun"
CLU_DEADLINE = "the task's credentials did not arrive in time"
CLU_WITHDRAWN = "the task's credentials were withdrawn"
CLU_CLEANING = "the task's credentials are being cleaned up"
CLU_SHUTTING = "the runner is shutting down"
CLU_INSTALL_WITHDRAWN = "the grant was withdrawn while it was being installed"
CLU_NO_READER = "the task's env replica is not active"
CLU_ENV_WITHDRAWN = "the grant was withdrawn while its env values were awaited"
CLU_ENV_DEADLINE = "the task's env values did not arrive in time"
AGGREGATE = "the task's credentials could not all be closed"
CONSUMER_FAILED = "a credential consumer failed"
INVALID = "invalid task assignment"
MAX_SAFE = 2**53 - 1
CLOSE_REASONS = ("stop", "park", "teardown", "superseded")

#: The continuation of an operation: called with its first failure, or ``None``.
Done = Callable[[CredentialFailure | None], None]


def is_int(x: object) -> bool:
    """Whether ``x`` is an ``int`` (not a ``bool``)."""
    return type(x) is int


def is_run(x: object) -> bool:
    """Whether ``x`` is a run epoch: an ``int`` in ``0 … 2**53 - 1``."""
    return type(x) is int and 0 <= x <= MAX_SAFE


def malformed(ev: Event) -> bool:
    """Whether a runtime host event carries a field of the wrong type (never raises)."""
    if isinstance(ev, (AwaitLaunchReady, AcquireHold, EndStart, Interrupt)):
        return not is_int(ev.start_id)
    if isinstance(ev, ReleaseHold):
        return not is_int(ev.hold_id)
    if isinstance(ev, AbandonStart):
        return not is_int(ev.start_id) or not (ev.hold_id is None or is_int(ev.hold_id))
    if isinstance(ev, InterruptStarts):
        return (
            type(ev.task_id) is not str
            or not (ev.exact is None or is_int(ev.exact))
            or not (ev.below is None or is_int(ev.below))
        )
    if isinstance(ev, InterruptRecovery):
        return type(ev.task_id) is not str
    if isinstance(ev, CloseAssignment):
        return (
            type(ev.task_id) is not str
            or not is_run(ev.run_epoch)
            or not isinstance(ev.reason, str)
            or ev.reason not in CLOSE_REASONS
        )
    if isinstance(ev, ResumeRecovered):
        return (
            type(ev.task_id) is not str
            or not is_run(ev.run_epoch)
            or type(ev.has_setup) is not bool
        )
    if isinstance(ev, (WorkDone, TimerFired)):
        return not is_int(getattr(ev, "cmd_id", getattr(ev, "timer_id", None)))
    return False


def failure(error: BaseException) -> CredentialFailure:
    """A port's exception as a failure: its fixed message, never an exception's text."""
    if isinstance(error, CredentialUnavailable) and isinstance(error.message, str):
        return CredentialFailure(message=error.message)
    return CredentialFailure(message=CONSUMER_FAILED)


def first(failures: list[CredentialFailure]) -> CredentialFailure | None:
    """``None``, the one failure, or the aggregate of several (attempt order)."""
    if not failures:
        return None
    if len(failures) == 1:
        return failures[0]
    return CredentialFailure(message=AGGREGATE, causes=tuple(failures))


def prefix(a: Assignment) -> str:
    """The log prefix of a run: ``[credentials] task <id> run <n>: ``."""
    return f"[credentials] task {a.task_id} run {a.run_epoch}: "


class Parts:
    """Wait for named parts; then ``done`` with the first failure in part order."""

    __slots__ = ("done", "order", "results")

    def __init__(self, order: list[str], done: Done) -> None:
        self.order = order
        self.results: dict[str, CredentialFailure | None] = {}
        self.done = done

    def fill(self, key: str, error: CredentialFailure | None) -> None:
        """Record part ``key``'s outcome (the first one counts)."""
        if key in self.results:
            return
        self.results[key] = error
        if len(self.results) < len(self.order):
            return
        for k in self.order:
            e = self.results[k]
            if e is not None:
                self.done(e)
                return
        self.done(None)
