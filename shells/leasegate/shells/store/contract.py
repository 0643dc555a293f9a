"""The event store contract every ledger backend implements.

:class:`EventStore` is the interface the durable task runtime
(:class:`~leasegate.shells.store.DurableTaskRuntime`), the delegation ledger
(:class:`~leasegate.shells.store.DelegationOrchestrationLedger`) and the
cleanup journal (:class:`~leasegate.shells.store.CleanupJournal`) use. Two
backends implement it:

* :class:`~leasegate.shells.store.OrchestrationEventStore`: files on one host
  (the reference's format; the embedded default);
* :class:`~leasegate.shells.store.postgres.PostgresEventStore`: one
  PostgreSQL database shared by a fleet of runner hosts (extra
  ``leasegate[postgres]``).

The contract (catalog entries ES-007..ES-063 that are not about the file
format) is checked against both by one test suite
(``tests/ledger/test_store_contract.py``). See ``docs/ledger.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from leasegate.core.ledger import OrchestrationEventStoreError

from .event_store import AppendEventInput, ProjectionSnapshot

__all__ = [
    "EventListener",
    "EventStore",
    "OrchestrationStoreUnavailableError",
]

#: A subscriber: called with a deep copy of each committed event.
EventListener = Callable[[dict[str, Any]], object]


class OrchestrationStoreUnavailableError(OrchestrationEventStoreError):
    """The backend could not be reached, or kept failing, within the
    backend's retry window (a database down, a connection cut, a timeout).

    The message names the failure's class and SQLSTATE only, never a
    statement's parameters. An append that raises this did not return an
    event: it is not acknowledged. It may still have committed if the
    connection broke after the commit was sent; retrying with the same
    idempotency key is always safe (ES-014).

    Attributes:
        sqlstate: the five-character SQLSTATE the server reported, or
            ``None`` when the failure was a lost connection or a timeout.
    """

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@runtime_checkable
class EventStore(Protocol):
    """One session's ordered, append-only event log with compaction.

    Ordinals start at 1 and grow by exactly 1 per committed event: never a
    gap, never a duplicate. Every method is durable when it returns (what
    "durable" means per backend: ``docs/ledger.md``). Errors are typed:
    :class:`~leasegate.core.ledger.OrchestrationConcurrencyError`,
    :class:`~leasegate.core.ledger.OrchestrationSnapshotRequiredError`,
    :class:`~leasegate.core.ledger.OrchestrationLockTimeoutError` and
    :class:`OrchestrationStoreUnavailableError` are all
    :class:`~leasegate.core.ledger.OrchestrationEventStoreError`.
    """

    def append(
        self, item: AppendEventInput, *, expected_last_ordinal: int | None = None
    ) -> dict[str, Any]:
        """Append one event and return it, or the earlier event with the same
        non-empty idempotency key, unchanged (ES-014..019).

        ``expected_last_ordinal`` (optimistic concurrency, ES-021): the last
        ordinal H the caller saw; a different H raises
        :class:`~leasegate.core.ledger.OrchestrationConcurrencyError` and
        writes nothing. A known key wins over the check (ES-015).

        Raises:
            OrchestrationEventStoreError: invalid input (before any write,
                ES-013; a :class:`~leasegate.core.Secret` is not JSON and is
                refused), a corrupt store, or a backend failure (a subclass).
        """
        ...

    def read_all(self) -> list[dict[str, Any]]:
        """Every event after the snapshot's ordinal T, ascending (ES-024)."""
        ...

    def read_after(self, ordinal: int) -> list[dict[str, Any]]:
        """Events with ordinal > ``ordinal``, ascending (ES-027..029).

        Raises:
            OrchestrationSnapshotRequiredError: ``ordinal`` < T.
        """
        ...

    def read_projection_snapshot(self) -> ProjectionSnapshot | None:
        """The verified snapshot ``(T, projection copy)``, or ``None`` (ES-030)."""
        ...

    def compact_if_needed(
        self, through_ordinal: int, projection: Callable[[], dict[str, Any]]
    ) -> bool:
        """Replace the events ≤ ``through_ordinal`` by a snapshot of
        ``projection()`` when ``through_ordinal`` is H and the tail reached a
        threshold (ES-036..047); return whether it compacted. A reader sees
        the old tail or the new snapshot, never a mix (two-phase)."""
        ...

    def subscribe(self, listener: EventListener) -> Callable[[], bool]:
        """Call ``listener`` after each event this instance commits
        (ES-060..063); returns an unsubscribe function (``True`` once)."""
        ...
