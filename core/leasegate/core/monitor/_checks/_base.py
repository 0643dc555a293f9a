"""The base of a checker: one property, judged over the stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from .._mirror import Mirror
from .._stream import Called, Emitted, Fed, Returned

__all__ = ["Checker", "Flag"]

#: Where a checker reports: ``flag(property, step, task, run, message)``.
Flag = Callable[[str, int, object, object, str], None]


class Checker:
    """One property of ``docs/monitor.md``, judged over every item of the stream.

    A subclass sets :attr:`PROPERTY` and overrides the hooks it needs:
    :meth:`fed`, :meth:`called`, :meth:`emitted`, :meth:`returned` (one per
    item type of ``_stream``; the others see nothing) and declares in
    :attr:`COMMANDS` the command types its :meth:`emitted` judges (the
    monitor offers it no other command). The shared
    :class:`~leasegate.core.monitor._mirror.Mirror` has learnt from an item
    before any checker sees it. :meth:`flag` reports a violation of
    :attr:`PROPERTY`, the only property a checker can report.
    """

    PROPERTY: ClassVar[str] = ""
    #: The command types :meth:`emitted` is offered (subclasses included).
    COMMANDS: ClassVar[tuple[type, ...]] = (object,)

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        self.mirror = mirror
        self._sink = flag

    def flag(self, step: int, task: object, run: object, message: str) -> None:
        """Report :attr:`PROPERTY` broken at ``step`` for ``(task, run)`` (fixed text plus ids)."""
        self._sink(self.PROPERTY, step, task, run, message)

    def fed(self, item: Fed) -> None:
        """See the step's event (default: nothing)."""

    def called(self, item: Called) -> None:
        """See one port call of the step (default: nothing)."""

    def emitted(self, item: Emitted) -> None:
        """See one command of the step (default: nothing)."""

    def returned(self, item: Returned) -> None:
        """See the end of the step (default: nothing)."""
