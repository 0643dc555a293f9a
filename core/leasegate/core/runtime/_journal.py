"""An in-memory cleanup journal that carries out the runtime's journal commands.

The durable journal is ``leasegate.shells.store.CleanupJournal``
(``docs/ledger.md``); a shell backs :class:`~._vocab.JournalRecord` with its
``record_owed(task_id, run_epoch, reason)`` and :class:`~._vocab.JournalSettle`
with ``settle(task_id, run)`` for each run, then feeds ``WorkDone``. This one
keeps the rows in memory, for tests and for a runner without a disk; it
survives the runtime object, so a test can drop a runtime, build a new one and
feed ``Recover(owed=journal.owed())`` (the crash scenario).
"""

from __future__ import annotations

from ._vocab import JournalRecord, JournalSettle, OwedCleanup

__all__ = ["MemoryJournal"]


class MemoryJournal:
    """Owed cleanups by ``(task_id, run_epoch)``, in recording order. No secret is stored.

    Reference: the coordinator's durable record (catalog "Undefined":
    ``TaskCredentialCleanupCoordinator``, step 1 and step 8).
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[tuple[str, int], OwedCleanup] = {}

    def apply(self, cmd: JournalRecord | JournalSettle) -> None:
        """Carry out a journal command (record or settle). Never raises for these types."""
        if isinstance(cmd, JournalRecord):
            key = (cmd.task_id, cmd.run_epoch)
            if key not in self._rows:
                self._rows[key] = OwedCleanup(cmd.task_id, cmd.run_epoch, cmd.reason)
        else:
            for run in cmd.runs:
                self._rows.pop((cmd.task_id, run), None)

    def owed(self) -> tuple[OwedCleanup, ...]:
        """The rows still owed, oldest first."""
        return tuple(self._rows.values())
