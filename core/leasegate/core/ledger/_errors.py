"""Typed errors of the event store and the durable task runtime.

Messages never quote a payload value: they name ordinals, file names (bare,
e.g. ``0000000000000003.json``) and ids the caller chose. The ledger never
holds a secret, and error texts are built so that it could not leak one.
"""

from __future__ import annotations

__all__ = [
    "DurableTaskRuntimeError",
    "OrchestrationConcurrencyError",
    "OrchestrationEventStoreError",
    "OrchestrationLockTimeoutError",
    "OrchestrationSnapshotRequiredError",
]


class OrchestrationEventStoreError(Exception):
    """Any error of the event store's own checks (ESE; ES-066).

    Attributes:
        file: the bare file name the error is about (an event, snapshot,
            marker or baseline file), or ``None`` when it is about no single
            file. Corrupt files are always reported with their name.
    """

    def __init__(self, message: str, *, file: str | None = None) -> None:
        super().__init__(message)
        self.file = file


class OrchestrationConcurrencyError(OrchestrationEventStoreError):
    """``expected_last_ordinal`` did not match the log (OCE; ES-021).

    Attributes:
        expected: the ordinal the caller expected.
        actual: the last committed ordinal H.
    """

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"Orchestration event cursor changed: expected {expected}, actual {actual}."
        )
        self.expected = expected
        self.actual = actual


class OrchestrationSnapshotRequiredError(OrchestrationEventStoreError):
    """``read_after(x)`` with ``x`` below the baseline (SRE; ES-027).

    Attributes:
        through_ordinal: the baseline's ordinal T; load the snapshot and read
            after T instead.
    """

    def __init__(self, through_ordinal: int) -> None:
        super().__init__(
            f"Orchestration projection snapshot through ordinal {through_ordinal} is required."
        )
        self.through_ordinal = through_ordinal


class OrchestrationLockTimeoutError(OrchestrationEventStoreError):
    """The store lock was not obtained within the configured wait (port design)."""


class DurableTaskRuntimeError(Exception):
    """A runtime or delegation-ledger precondition failed (DTE)."""
