"""The invariant monitor: safety properties checked over the runtime's steps.

A *step* is what a trace holds for one ``CredentialRuntime.handle`` call:
the event consumed, the port calls made during it (:class:`PortCall`, in
call order) and the commands returned (in order). :class:`InvariantMonitor`
turns each step into items of one ordered stream (``_stream``: the event
fed, each port call, each command emitted, the handle's return), lets the
shared mirror (``_mirror``) learn from each item and hands it to its
checkers (``_checks``), one per property, each the only place its property
is flagged. It looks at nothing else: no query of the runtime, no clock.
What each property observes, and its limits, is documented in
``docs/monitor.md``.

Within one step the port calls and the commands are two separate lists, so
their interleaving is known only where a command marks a port call: a
successful open fan-out is followed by ``Notify(what="mcp-served")`` (the
runtime emits it right after the ports opened, RT-081). Where the order
cannot be known the monitor does not flag (no false positive on a correct
run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from .._base import Command, Event
from ._checks import (
    CHECKERS,
    MAX_SECRETS,
    MIN_SECRET_CHARS,
    Checker,
    TimerArmedAfterEnd,
    ViewBelowFloorOrExpired,
)
from ._mirror import Mirror
from ._ports import PortCall
from ._stream import Called, Emitted, Fed, Returned, Run

__all__ = [
    "MAX_SECRETS",
    "MIN_SECRET_CHARS",
    "PROPERTIES",
    "InvariantMonitor",
    "MonitorRecorder",
    "Violation",
]

_C = TypeVar("_C", bound=Checker)

#: The properties the monitor checks, in the order of ``docs/monitor.md``.
PROPERTIES: Final[tuple[str, ...]] = (
    "gate-open-during-cleanup",
    "read-on-closed-reader",
    "foreign-env-snapshot",
    "open-after-close",
    "view-below-floor-or-expired",
    "secret-in-error",
    "timer-armed-after-end",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One broken property at one step.

    Attributes:
        property: one of :data:`PROPERTIES`.
        step: the index of the step (0 for the first ``observe`` call).
        task_id, run_epoch: the run concerned, when known.
        message: a fixed description plus ids (task ids, runs, reader and
            timer ids); never a secret or an input value's text.
    """

    property: str
    step: int
    task_id: str | None
    run_epoch: int | None
    message: str


class InvariantMonitor:
    """Checks the safety properties of :data:`PROPERTIES` over a runtime's steps.

    Feed it every step, in order, with :meth:`observe` (the same event,
    port calls and commands a trace holds). It never raises and never
    changes what it is given.

    Attributes:
        violations: every violation found so far, in order.
        steps: how many steps were observed.
        internal_errors: how many unexpected exceptions ``observe`` contained
            (0 unless the monitor has a bug; tests assert it).
        checkers: the checkers, one per property, in the order they see each
            item (``_checks.CHECKERS``).

    Reference: issue #7 item 5; the properties restate the catalog's
    safety entries (RT-064, RT-080..090, RT-128..136, LR-060, LR-078..083,
    LR-154..157) as checks over the observable stream.
    """

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.steps = 0
        self.internal_errors = 0
        self._found: list[Violation] = []
        mirror = Mirror()
        self.checkers: tuple[Checker, ...] = tuple(cls(mirror, self._flag) for cls in CHECKERS)
        # Who sees an item, in order: the mirror first, then each checker
        # with a hook for its type (an Emitted: whose COMMANDS hold the
        # command's type; resolved once per command type).
        self._mirror = mirror
        self._on_fed = (mirror.fed, *self._hooked("fed"))
        self._on_called = tuple(self._hooked("called"))
        self._on_returned = (mirror.returned, *self._hooked("returned"))
        self._on_emitted: dict[type, tuple[Callable[[Emitted], None], ...]] = {}

    def _hooked(self, name: str, command: type | None = None) -> list[Callable[[Any], None]]:
        """The checkers' hooks ``name`` (those they define), in checker order."""
        return [
            getattr(c, name)
            for c in self.checkers
            if getattr(type(c), name) is not getattr(Checker, name)
            and (command is None or issubclass(command, c.COMMANDS))
        ]

    def _emitted_hooks(self, command: type) -> tuple[Callable[[Emitted], None], ...]:
        hooks = self._on_emitted.get(command)
        if hooks is None:
            hooks = (self._mirror.emitted, *self._hooked("emitted", command))
            self._on_emitted[command] = hooks
        return hooks

    def __repr__(self) -> str:
        return f"InvariantMonitor(steps={self.steps}, violations={len(self.violations)})"

    # -- read-only views of the mirror's and checkers' state (tests read them)
    def _checker(self, cls: type[_C]) -> _C:
        for c in self.checkers:
            if isinstance(c, cls):
                return c
        raise LookupError(cls.__name__)  # every checker class is in CHECKERS

    @property
    def _floors(self) -> dict[Run, int]:
        """The revision floors ``(task, run) → revision`` the stale frames set."""
        return self._checker(ViewBelowFloorOrExpired).floors

    @property
    def _shut_answered(self) -> bool:
        """Whether the shutdown was answered (no timer may be armed any more)."""
        return self._checker(TimerArmedAfterEnd).shut_answered

    @property
    def _abandon_closes(self) -> dict[int, Run]:
        """The ``AbandonStart`` closes not answered yet: call id → run."""
        return self._mirror.abandon_closes

    def observe(
        self,
        event: object,
        commands: Sequence[object],
        port_calls: Sequence[object] = (),
    ) -> list[Violation]:
        """Check one step; return the violations found in it (also kept in :attr:`violations`).

        Args:
            event: the event the runtime consumed (any object is accepted).
            commands: the commands ``handle`` returned, in order.
            port_calls: the :class:`PortCall` entries of the step, in call
                order (from :func:`wrap_ports`' log); anything else is ignored.

        Returns:
            The new violations of this step (empty when none). Never raises:
            an unexpected exception is counted in :attr:`internal_errors`.
        """
        step = self.steps
        self.steps += 1
        found: list[Violation] = []
        self._found = found
        try:
            cmds = list(commands) if isinstance(commands, (list, tuple)) else []
            calls = [c for c in port_calls if isinstance(c, PortCall)] if port_calls else []
            self._step(step, event, calls, cmds)
        except Exception:  # noqa: BLE001 - the monitor never raises
            self.internal_errors += 1
        self.violations.extend(found)
        return found

    def _step(self, step: int, event: object, calls: list[PortCall], cmds: list[object]) -> None:
        """The step as stream items, in order, each seen by the mirror, then the checkers."""
        fed = Fed(step, event, calls, cmds)
        for see_fed in self._on_fed:
            see_fed(fed)
        for call in calls:
            called = Called(step, call)
            for see_called in self._on_called:
                see_called(called)
        for cmd in cmds:
            emitted = Emitted(step, cmd)
            for see_emitted in self._on_emitted.get(type(cmd)) or self._emitted_hooks(type(cmd)):
                see_emitted(emitted)
        end = Returned(step)
        for see_end in self._on_returned:
            see_end(end)

    def _flag(self, prop: str, step: int, task: object, run: object, message: str) -> None:
        """A checker's report: kept unless the step already has one for ``prop`` and the run."""
        t = task if type(task) is str else None
        r = run if type(run) is int else None
        found = self._found
        if any((v.property, v.task_id, v.run_epoch) == (prop, t, r) for v in found):
            return  # one violation per property and run per step
        found.append(Violation(property=prop, step=step, task_id=t, run_epoch=r, message=message))


class MonitorRecorder:
    """A shell recorder (``CoreRecorder``) that feeds an :class:`InvariantMonitor`.

    Build the runtime with the ports of :func:`wrap_ports` sharing ``log``;
    pass this as the shell's ``recorder``. Each :meth:`record` takes the
    step's port calls from ``log`` and observes the step. It never raises.
    """

    __slots__ = ("log", "monitor")

    def __init__(self, monitor: InvariantMonitor, log: Any) -> None:
        self.monitor = monitor
        self.log = log

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Observe one core step (``event`` handled, ``commands`` returned)."""
        try:
            calls = self.log.take()
        except Exception:  # noqa: BLE001 - a recorder never raises
            calls = []
        self.monitor.observe(event, commands, calls)
