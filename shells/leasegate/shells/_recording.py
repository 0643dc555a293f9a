"""The hook through which a shell reports every step of its core.

Both shells call :meth:`CoreRecorder.record` right after each
``runtime.handle(event)`` returns, before any command is carried out, in the
exact order the core consumed the events. Traces
(``leasegate.shells.trace``) and the invariant monitor
(``leasegate.core.monitor``) plug in here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from leasegate.core._base import Command, Event

__all__ = ["CoreRecorder", "RecorderChain"]


class CoreRecorder(Protocol):
    """Receives each core step: the event consumed and the commands it emitted.

    ``record`` runs on the shell's feeding path (the event loop's thread, or
    under the threading shell's core lock): it must be quick, must not raise
    and must not call back into the shell.
    """

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """One core step: ``event`` was handled and returned ``commands``."""


class RecorderChain:
    """A :class:`CoreRecorder` handing each step to several.

    Args:
        recorders: called in order with every step; ``None`` entries are skipped.
            One that raises is skipped for that step (the others still run);
            ``record`` never raises.
    """

    def __init__(self, *recorders: CoreRecorder | None) -> None:
        self.recorders: tuple[CoreRecorder, ...] = tuple(r for r in recorders if r is not None)

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Hand ``(event, commands)`` to every recorder, in order."""
        for rec in self.recorders:
            try:
                rec.record(event, commands)
            except Exception:  # noqa: BLE001, S112 - a recorder never breaks the shell
                continue
