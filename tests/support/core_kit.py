"""What the core machines' test kits share: lease_kit's builders and the event-driver base.

Importable as ``core_kit`` (pytest's ``pythonpath`` puts ``tests/support`` on
``sys.path``). Used by ``tests/core/registry/registry_kit.py`` and
``tests/core/runtime/runtime_kit.py``:

* ``from core_kit import *`` re-exports the builders and constants of
  ``lease_kit`` that the kits' tests import from their kit (:data:`__all__`);
* :class:`EventDriver` is the base of both kits' drivers: it feeds one
  event, queues the completions the driver answers at once, records every
  command, keeps the timers armed, and moves virtual time (milliseconds) only
  when a test calls :meth:`EventDriver.advance`. Nothing sleeps, no clock is
  mocked.
"""

from __future__ import annotations

from typing import Any

from lease_kit import (
    HOUR,
    ORG,
    T0,
    TASK,
    USER,
    FakeSsm,
    engine,
    envelope,
    grant,
    lease_json,
    manifest,
    mcp,
    param,
    session,
    static,
)

from leasegate.core._base import Command
from leasegate.core.registry import CancelTimer, StartTimer, TimerFired

#: What ``from core_kit import *`` gives a kit (re-exported to its tests).
__all__ = [
    "HOUR",
    "ORG",
    "T0",
    "TASK",
    "USER",
    "FakeSsm",
    "engine",
    "envelope",
    "grant",
    "lease_json",
    "manifest",
    "mcp",
    "param",
    "session",
    "static",
]


class EventDriver:
    """Feeds events to one core machine, answers what is automatic, records commands.

    Args:
        record: the list every command is appended to (the driver's own
            ``log`` or ``out``; the driver keeps that list for good).

    A subclass defines :meth:`_handle` (the machine's ``handle`` plus its
    internal-error checks) and :meth:`_auto` (the completions a command gets
    at once, usually after :meth:`_book_timer`). Time is :attr:`now` (ms
    since the epoch, starts at ``T0``); :attr:`timers` maps an armed
    ``timer_id`` to its due time (ms). Reference behavior: the shell contract of the core machines
    (``docs/events-and-commands.md``): completions are fed after the batch
    that caused them, in order.
    """

    def __init__(self, record: list[Command]) -> None:
        self._record = record
        self.now = T0
        self.timers: dict[int, int] = {}

    def _handle(self, event: Any) -> list[Command]:
        """The machine's commands for ``event``. Defined by each driver."""
        raise NotImplementedError

    def _auto(self, cmd: Command) -> list[Any]:
        """The events that answer ``cmd`` at once (none by default)."""
        return []

    def feed(self, event: Any) -> list[Command]:
        """Feed one event; answer what is automatic; return every command caused."""
        start = len(self._record)
        queue = [event]
        while queue:
            out = self._handle(queue.pop(0))
            self._record.extend(out)
            for cmd in out:
                queue.extend(self._auto(cmd))
        return self._record[start:]

    def _book_timer(self, cmd: Command) -> bool:
        """Arm (``StartTimer``: due ``now + delay_ms``) or disarm (``CancelTimer``)
        a timer; ``False`` when ``cmd`` is neither."""
        if isinstance(cmd, StartTimer):
            self.timers[cmd.timer_id] = self.now + cmd.delay_ms
            return True
        if isinstance(cmd, CancelTimer):
            self.timers.pop(cmd.timer_id, None)
            return True
        return False

    def _timer_rank(self, timer_id: int) -> int:
        """Among timers due at the same time, the lower rank fires first (then the
        lower id). Default: all ranks equal."""
        return 0

    def advance(self, ms: int) -> list[Command]:
        """Move virtual time by ``ms``, firing due timers in due order; the commands caused."""
        start = len(self._record)
        end = self.now + ms
        while True:
            due = sorted(
                (t, self._timer_rank(tid), tid) for tid, t in self.timers.items() if t <= end
            )
            if not due:
                break
            t, _, tid = due[0]
            del self.timers[tid]
            self.now = max(self.now, t)
            self.feed(TimerFired(now_ms=self.now, timer_id=tid))
        self.now = end
        return self._record[start:]
