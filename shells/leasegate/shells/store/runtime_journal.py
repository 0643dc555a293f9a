"""``RuntimeJournal``: the runtime core's journal commands, made durable.

The runtime core (:mod:`leasegate.core.runtime`) asks for its owed-cleanup
journal with two commands and learns the outcome from one completion event:

* :class:`~leasegate.core.runtime.JournalRecord` ``(cmd_id, task_id,
  run_epoch, reason)``: the run owes a cleanup (step 1 of the cleanup
  procedure, before anything destructive);
* :class:`~leasegate.core.runtime.JournalSettle` ``(cmd_id, task_id, runs)``:
  the cleanups of those runs are done (step 8);
* :class:`~leasegate.core.runtime.WorkDone` ``(cmd_id, error)``: what the
  shell feeds back once the command is durable (``error=None``) or failed.

At boot the shell feeds :class:`~leasegate.core.runtime.Recover` with the
journal's rows (:meth:`RuntimeJournal.recover_event`) and asks for no grant
(no ``BeginStart``) before the runtime answered that call: the runtime then
runs a whole-task cleanup, reason ``recovery``, for every owed task and
settles its rows (runtime catalog RT-100 and "Undefined":
``TaskCredentialCleanupCoordinator.recoverAll``; issue #8, item 5).

The rows are those of :class:`~leasegate.shells.store.CleanupJournal`: task
ids, run epochs and reason codes. No secret can enter: the commands carry
none, and the journal refuses anything but a plain ``str``/``int`` (a
:class:`~leasegate.core.Secret` is a ``str`` subclass and is refused with a
message that does not show it).

Port decision (re-owing a settled run): ``CleanupJournal.record_owed`` and
``settle`` use one idempotency key per run (``cleanup-owed:<task>:<epoch>``),
so once a run was recorded and settled, a second record of the *same* run
would be a silent replay and the run would not be owed on disk. The runtime
does record a run twice: a selective cleanup (a narrowed grant) and later the
stop of the same run. This adapter therefore checks the journal after each
call and, when the row did not change as asked, appends the
``cleanup.owed`` / ``cleanup.settled`` event itself, without an idempotency
key (the check before it is what makes a retry append nothing; a duplicate
would be harmless: the journal keeps the first owed row and a settle of a
settled run changes nothing). The journal reads these like its own events.
"""

from __future__ import annotations

import os

from leasegate.core.runtime import (
    CredentialFailure,
    JournalRecord,
    JournalSettle,
    OwedCleanup,
    Recover,
    WorkDone,
)

from .journal import CleanupJournal

__all__ = ["RECORD_FAILED", "SETTLE_FAILED", "RuntimeJournal", "RuntimeJournalError"]

#: The fixed text of a failed :class:`JournalRecord` (no input value in it).
RECORD_FAILED = "the cleanup journal could not record the owed cleanup"
#: The fixed text of a failed :class:`JournalSettle` (no input value in it).
SETTLE_FAILED = "the cleanup journal could not settle the cleanup"


class RuntimeJournalError(Exception):
    """A journal command was not made durable.

    Attributes:
        message: :data:`RECORD_FAILED` or :data:`SETTLE_FAILED`, a fixed text
            that quotes no input (the underlying error, which may name a
            journal file, is chained as ``__cause__``).
        cmd_id: the command's id, for its ``WorkDone``.
    """

    def __init__(self, message: str, cmd_id: int) -> None:
        super().__init__(message)
        self.message = message
        self.cmd_id = cmd_id


class RuntimeJournal:
    """The runtime's owed-cleanup journal on disk, one per runner identity.

    Args:
        agent_dir: the agent's directory (the store lives under it).
        runner_id: the runner identity (one journal per runner).
        journal: use this :class:`CleanupJournal` instead (tests, crash seams).

    Raises:
        OrchestrationEventStoreError: a corrupt journal, when it is opened
            (naming the file; see ``docs/ledger.md``).
        TypeError: neither ``agent_dir`` nor ``journal`` was given.

    A runner killed mid-run finds its owed rows on the next start: a new
    ``RuntimeJournal`` over the same directory returns them from
    :meth:`owed`, oldest first.
    """

    def __init__(
        self,
        agent_dir: str | os.PathLike[str] | None = None,
        runner_id: str = "default",
        *,
        journal: CleanupJournal | None = None,
    ) -> None:
        if journal is None:
            if agent_dir is None:
                raise TypeError("RuntimeJournal needs an agent_dir or a journal")
            journal = CleanupJournal(agent_dir, runner_id)
        self.journal = journal

    # ------------------------------------------------------------------
    # Commands

    def apply(self, cmd: JournalRecord | JournalSettle) -> None:
        """Carry out a journal command durably; return once it is on disk.

        ``JournalRecord`` → the run ``(task_id, run_epoch)`` is owed (its
        first reason is kept); ``JournalSettle`` → each listed run is settled.
        Both are idempotent.

        Raises:
            RuntimeJournalError: the journal could not be written or read
                (I/O error, lock timeout, corrupt journal, a non-plain value);
                the cause is chained.
            TypeError: ``cmd`` is not a journal command.
        """
        if isinstance(cmd, JournalRecord):
            try:
                self._record(cmd.task_id, cmd.run_epoch, cmd.reason)
            except Exception as exc:
                raise RuntimeJournalError(RECORD_FAILED, cmd.cmd_id) from exc
        elif isinstance(cmd, JournalSettle):
            try:
                for run in cmd.runs:
                    self._settle(cmd.task_id, run)
            except Exception as exc:
                raise RuntimeJournalError(SETTLE_FAILED, cmd.cmd_id) from exc
        else:
            raise TypeError("RuntimeJournal.apply takes a JournalRecord or a JournalSettle")

    def complete(self, cmd: JournalRecord | JournalSettle, *, now_ms: int) -> WorkDone:
        """Carry out ``cmd`` (:meth:`apply`) and return the completion to feed the runtime.

        Args:
            cmd: the runtime's journal command.
            now_ms: the event time, milliseconds since the Unix epoch.

        Returns:
            ``WorkDone(cmd_id, error=None)`` once durable, or
            ``WorkDone(cmd_id, error=CredentialFailure(RECORD_FAILED |
            SETTLE_FAILED))`` when it could not be made durable (the runtime
            then fails that cleanup and keeps the run owed in memory).

        Raises:
            TypeError: ``cmd`` is not a journal command.
        """
        try:
            self.apply(cmd)
        except RuntimeJournalError as exc:
            return WorkDone(
                now_ms=now_ms, cmd_id=cmd.cmd_id, error=CredentialFailure(message=exc.message)
            )
        return WorkDone(now_ms=now_ms, cmd_id=cmd.cmd_id)

    # ------------------------------------------------------------------
    # Boot recovery

    def owed(self) -> tuple[OwedCleanup, ...]:
        """The runtime's rows still owed, oldest first (read from disk).

        Raises:
            OrchestrationEventStoreError: a corrupt journal (naming the file).
            OSError: the journal could not be read.
        """
        return tuple(
            OwedCleanup(item.task_id, item.run_epoch, item.reason) for item in self.journal.owed()
        )

    def recover_event(
        self, *, now_ms: int, call_id: int, admitted: tuple[tuple[str, int], ...] = ()
    ) -> Recover:
        """The boot event ``Recover(now_ms, call_id, owed=self.owed(), admitted)``.

        Feed it before any ``BeginStart`` and wait for its ``Answer`` /
        ``Failed`` (RT-100). A failed recovery leaves every run it could not
        clean up owed, for the next boot.

        Args:
            now_ms: milliseconds since the Unix epoch.
            call_id: the shell's call id (non-negative).
            admitted: ``(task_id, admitted run)`` pairs (``runEpochForTask``).

        Raises:
            OrchestrationEventStoreError, OSError: as :meth:`owed`.
        """
        return Recover(now_ms=now_ms, call_id=call_id, owed=self.owed(), admitted=admitted)

    # ------------------------------------------------------------------
    # Internals

    def _record(self, task_id: str, run_epoch: int, reason: str) -> None:
        self.journal.record_owed(task_id, run_epoch, reason)

    def _settle(self, task_id: str, run_epoch: int) -> None:
        self.journal.settle(task_id, run_epoch)
