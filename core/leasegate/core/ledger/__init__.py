"""Pure parts of the orchestration ledger (ES-, DL-): no I/O, no clock.

* :mod:`._format`: the event store's names, records, validators, digest
  and decisions (reconciliation plan, compaction decision, retained merge);
* :mod:`._runtime`: the durable task runtime's projection (reducer) and its
  transition checks, which plan the events to append;
* :mod:`._delegation`: the delegation ledger's pure rules (managed task ids,
  objective selection, the goal status table, goal projections, labels);
* :mod:`._errors`: the typed errors.

The file store, the runtime and ledger wrappers and the cleanup journal are
in ``leasegate.shells.store``. See ``docs/ledger.md``.
"""

from ._errors import (
    DurableTaskRuntimeError,
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationLockTimeoutError,
    OrchestrationSnapshotRequiredError,
)
from ._format import (
    ACTORS,
    DEFAULT_MAX_IDEMPOTENCY_EVENTS,
    DEFAULT_MAX_TAIL_BYTES,
    DEFAULT_MAX_TAIL_EVENTS,
    EVENT_TYPES,
    ORCHESTRATION_SCHEMA_VERSION,
    Baseline,
    Cursor,
    ReconcilePlan,
    Snapshot,
    baseline_record,
    check_tail,
    compaction_due,
    cursor_record,
    event_file_name,
    file_ordinal,
    idempotency_marker_name,
    is_json_object,
    is_orchestration_event,
    marker_record,
    merge_retained,
    parse_baseline,
    parse_cursor,
    parse_event_file,
    parse_marker,
    parse_snapshot,
    plan_reconciliation,
    positive_safe_integer,
    prelock_skip,
    serialize,
    session_directory_name,
    snapshot_digest,
    snapshot_record,
)

__all__ = [
    "ACTORS",
    "DEFAULT_MAX_IDEMPOTENCY_EVENTS",
    "DEFAULT_MAX_TAIL_BYTES",
    "DEFAULT_MAX_TAIL_EVENTS",
    "EVENT_TYPES",
    "ORCHESTRATION_SCHEMA_VERSION",
    "Baseline",
    "Cursor",
    "DurableTaskRuntimeError",
    "OrchestrationConcurrencyError",
    "OrchestrationEventStoreError",
    "OrchestrationLockTimeoutError",
    "OrchestrationSnapshotRequiredError",
    "ReconcilePlan",
    "Snapshot",
    "baseline_record",
    "check_tail",
    "compaction_due",
    "cursor_record",
    "event_file_name",
    "file_ordinal",
    "idempotency_marker_name",
    "is_json_object",
    "is_orchestration_event",
    "marker_record",
    "merge_retained",
    "parse_baseline",
    "parse_cursor",
    "parse_event_file",
    "parse_marker",
    "parse_snapshot",
    "plan_reconciliation",
    "positive_safe_integer",
    "prelock_skip",
    "serialize",
    "session_directory_name",
    "snapshot_digest",
    "snapshot_record",
]
