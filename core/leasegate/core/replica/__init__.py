"""The env replica: the sans-I/O per-task project environment replica.

:class:`ReplicaManager` is driven by :meth:`ReplicaManager.handle` (events in
:mod:`._events` in, commands out) and answers synchronous queries
(:meth:`~ReplicaManager.read_view`, :meth:`~ReplicaManager.read_view_at`,
:meth:`~ReplicaManager.read_status`, :meth:`~ReplicaManager.is_ready`,
:meth:`~ReplicaManager.reader_generation`). Frames and acks are in
:mod:`leasegate.core.wire.env`. Documented in ``docs/env-replica.md``;
reference ``host/lib/project-env-task-replica.ts`` (catalog ER-001–ER-130).
"""

from __future__ import annotations

from ._events import (
    ActivateAssignment,
    ActivationOutcome,
    ActivationToken,
    AwaitReady,
    CancelTimer,
    DropAll,
    DropAssignment,
    Dropped,
    EnvFrameReceived,
    ExpectActivation,
    FrameRejected,
    NotifyChange,
    ReadinessDeadline,
    ReadLegacyValue,
    ReadStagedValue,
    RejectWaiter,
    ResolveWaiter,
    SendAck,
    SettleActivation,
    StartTimer,
    ValueReadCompleted,
    ValueReadFailed,
)
from ._manager import ReplicaManager
from ._order import is_reachable_record_advance, locale_key, state_order
from ._state import (
    DEFAULT_POLICY_EPOCHS,
    MAX_READY_TIMEOUT_MS,
    PROJECT_ENV_ACTIVATION_PENDING,
    PROJECT_ENV_READER_CHANGED,
    PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_BYTES,
    PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_ENTRIES,
    PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_BYTES,
    PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_ENTRIES,
    ReplicaLimits,
    ReplicaStatus,
    ReplicaView,
    ViewEntry,
    ViewProject,
)

__all__ = [
    "DEFAULT_POLICY_EPOCHS",
    "MAX_READY_TIMEOUT_MS",
    "PROJECT_ENV_ACTIVATION_PENDING",
    "PROJECT_ENV_READER_CHANGED",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_BYTES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_ENTRIES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_BYTES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_ENTRIES",
    "ActivateAssignment",
    "ActivationOutcome",
    "ActivationToken",
    "AwaitReady",
    "CancelTimer",
    "DropAll",
    "DropAssignment",
    "Dropped",
    "EnvFrameReceived",
    "ExpectActivation",
    "FrameRejected",
    "NotifyChange",
    "ReadLegacyValue",
    "ReadStagedValue",
    "ReadinessDeadline",
    "RejectWaiter",
    "ReplicaLimits",
    "ReplicaManager",
    "ReplicaStatus",
    "ReplicaView",
    "ResolveWaiter",
    "SendAck",
    "SettleActivation",
    "StartTimer",
    "ValueReadCompleted",
    "ValueReadFailed",
    "ViewEntry",
    "ViewProject",
    "is_reachable_record_advance",
    "locale_key",
    "state_order",
]
