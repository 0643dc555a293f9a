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

__all__ = ["CoreRecorder"]


class CoreRecorder(Protocol):
    """Receives each core step: the event consumed and the commands it emitted.

    ``record`` runs on the shell's feeding path (the event loop's thread, or
    under the threading shell's core lock): it must be quick, must not raise
    and must not call back into the shell.
    """

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """One core step: ``event`` was handled and returned ``commands``."""
