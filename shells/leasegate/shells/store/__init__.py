"""The orchestration ledger's I/O half: the file event store, the durable
task runtime, the delegation ledger and the runner's cleanup journal.

* :class:`EventStore` (``contract.py``): the store contract the runtime,
  the delegation ledger and the journal use;
* :class:`OrchestrationEventStore` (``event_store.py``): ES-001..ES-072,
  the file backend (embedded default);
* ``leasegate.shells.store.postgres``: the PostgreSQL backend (extra
  ``leasegate[postgres]``; imported on demand, not from here);
* :class:`FsOps` (``_fsops.py``): the file-system seam (crash injection);
* :class:`DurableTaskRuntime` (``task_runtime.py``): the event-sourced
  runtime over the store, with its pure projection in
  :mod:`leasegate.core.ledger`;
* :class:`DelegationOrchestrationLedger` (``delegation.py``): DL-001..DL-027;
* :class:`CleanupJournal` (``journal.py``): owed cleanups, for the runtime;
* :class:`RuntimeJournal` (``runtime_journal.py``): the runtime core's
  ``JournalRecord``/``JournalSettle`` commands and boot ``Recover`` on it.

See ``docs/ledger.md``.
"""

from ._fsops import FsOps, write_atomic
from .contract import EventListener, EventStore, OrchestrationStoreUnavailableError
from .delegation import DelegationOrchestrationLedger, StartedDelegationAttempt
from .event_store import AppendEventInput, OrchestrationEventStore, ProjectionSnapshot, iso_now
from .journal import CleanupClaimError, CleanupJournal, OwedCleanup
from .runtime_journal import RuntimeJournal, RuntimeJournalError
from .task_runtime import AttemptLease, DurableTaskRuntime

__all__ = [
    "AppendEventInput",
    "AttemptLease",
    "CleanupClaimError",
    "CleanupJournal",
    "DelegationOrchestrationLedger",
    "DurableTaskRuntime",
    "EventListener",
    "EventStore",
    "FsOps",
    "OrchestrationEventStore",
    "OrchestrationStoreUnavailableError",
    "OwedCleanup",
    "ProjectionSnapshot",
    "RuntimeJournal",
    "RuntimeJournalError",
    "StartedDelegationAttempt",
    "iso_now",
    "write_atomic",
]
