"""The env replica's state: the public values and the internal records.

Public: :class:`ReplicaLimits` (the replay-ledger limits), the served view
(:class:`ReplicaView`, :class:`ViewProject`, :class:`ViewEntry`) and
:class:`ReplicaStatus`, and the module's constants. Internal: one
:class:`_Replica` per task (its phase, :mod:`._phases`; gate, live
snapshot, attempt, delivery cursor, replay ledger, waiters), an
:class:`_Attempt` with one :class:`_Staged` project per project id, the
:class:`_Entry` of one key and the :class:`_Op` of a page or apply waiting
on a read. Plaintext values live only in entries (and in-flight
operations); *scrubbing* sets an entry's value to ``None`` (ER-128).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from .._model import constructor
from .._secret import Secret
from ..wire.env import (
    BindingState,
    DeliveryCursor,
    EnvApply,
    EnvBegin,
    EnvCommit,
    EnvPage,
    Materialization,
    RecordResult,
    _plain,
)
from ._events import NotifyChange
from ._phases import EXHAUSTED, INITIAL, LIVE, Phase
from ._receipts import _ApplyReceipt

__all__ = [
    "DEFAULT_POLICY_EPOCHS",
    "MAX_READY_TIMEOUT_MS",
    "PROJECT_ENV_ACTIVATION_PENDING",
    "PROJECT_ENV_READER_CHANGED",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_BYTES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_ENTRIES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_BYTES",
    "PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_ENTRIES",
    "ReplicaLimits",
    "ReplicaStatus",
    "ReplicaView",
    "ViewEntry",
    "ViewProject",
]

PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_ENTRIES: Final = 16_384
PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_BYTES: Final = 8 * 1024 * 1024
PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_ENTRIES: Final = 65_536
PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_BYTES: Final = 64 * 1024 * 1024
PROJECT_ENV_ACTIVATION_PENDING: Final = "activation_pending"
PROJECT_ENV_READER_CHANGED: Final = "reader_changed"
#: ``PROJECT_ENV_POLICY_EPOCHS`` (decided here: the reference imports it).
DEFAULT_POLICY_EPOCHS: Final[tuple[int, ...]] = (1,)
#: Longest ``awaitReady`` timeout (2**31 - 1 ms, Node's timer bound; decided
#: here instead of copying Node's clamp to 1 ms).
MAX_READY_TIMEOUT_MS: Final = 2**31 - 1
#: Most policy epochs a manager accepts (decided here).
MAX_POLICY_EPOCHS: Final = 64

_EXHAUSTED: Final = "replica_restart_required"
_INVALID_FRAME: Final = "invalid task project environment replica frame"
_NEEDS_RESTART: Final = "task replica requires a runner restart"
_CONTROL_CHARS: Final = frozenset(chr(c) for c in [*range(0x20), 0x7F])


class _ClosedReader:
    """The sentinel reader of a destroyed or exhausted replica."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<closed reader>"


_CLOSED_READER: Final = _ClosedReader()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLimits:
    """Replay-ledger limits (ER-001, ER-002, ER-115).

    ``max_task_entries`` / ``max_task_bytes``: per task; ``max_total_entries``
    / ``max_total_bytes``: the whole process (bytes of canonical evidence
    JSON + 64 per record). Each must be a safe integer ≥ 1 and the task limit
    at most the total limit; :class:`ReplicaManager` checks this.
    Defaults: 16,384 entries / 8 MiB per task, 65,536 / 64 MiB per process.
    """

    max_task_entries: int = PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_ENTRIES
    max_task_bytes: int = PROJECT_ENV_REPLAY_LEDGER_MAX_TASK_BYTES
    max_total_entries: int = PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_ENTRIES
    max_total_bytes: int = PROJECT_ENV_REPLAY_LEDGER_MAX_TOTAL_BYTES


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ViewEntry:
    """One record of a served view: state, materialization and the value.

    ``value`` is the plaintext :class:`Secret` (installed entries) or ``None``.
    """

    state: BindingState
    materialization: Materialization
    value: Secret | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ViewProject:
    """One project of a view: its record version and entries in key order."""

    project_id: str
    record_version: int
    entries: tuple[ViewEntry, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaView:
    """``ProjectEnvTaskReplicaSnapshot``: the committed snapshot (ER-125)."""

    task_id: str
    run_epoch: int
    runner_boot_id: str
    applied_through: DeliveryCursor
    projects: tuple[ViewProject, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStatus:
    """``readStatus`` (ER-127). Never holds a value."""

    task_id: str
    run_epoch: int
    runner_boot_id: str
    gate_open: bool
    restart_required: bool
    stream_id: str | None
    attempt_id: str | None
    applied_through: DeliveryCursor | None
    project_ids: tuple[str, ...]


# ---------------------------------------------------------------------------
# Internal state


class _Entry:
    __slots__ = ("mat", "state", "value")

    def __init__(self, state: BindingState, mat: Materialization, value: Secret | None) -> None:
        self.state = state
        self.mat = mat
        self.value = value

    def __repr__(self) -> str:
        return f"_Entry({self.state.key!r}, {self.mat!r})"


class _Project:
    __slots__ = ("entries", "record_version")

    def __init__(self, record_version: int, entries: dict[str, _Entry]) -> None:
        self.record_version = record_version
        self.entries = entries


class _PageReceipt:
    __slots__ = ("after", "applied_through", "complete", "fp", "record_version", "results")

    def __init__(
        self,
        fp: tuple[Any, ...],
        after: str | None,
        record_version: int,
        results: tuple[RecordResult, ...],
        complete: bool,
        applied_through: DeliveryCursor,
    ) -> None:
        self.fp = fp
        self.after = after
        self.record_version = record_version
        self.results = results
        self.complete = complete
        self.applied_through = applied_through


class _Staged:
    __slots__ = ("complete", "entries", "last_key", "pages", "record_version", "started")

    def __init__(self) -> None:
        self.record_version = 0
        self.entries: dict[str, _Entry] = {}
        self.started = False
        self.complete = False
        self.last_key: str | None = None
        self.pages: dict[str | None, _PageReceipt] = {}


class _Attempt:
    __slots__ = ("attempt_id", "fp", "project_ids", "projects", "reader_generation")

    def __init__(
        self, attempt_id: str, fp: tuple[Any, ...], project_ids: tuple[str, ...], rg: int
    ) -> None:
        self.attempt_id = attempt_id
        self.fp = fp
        self.project_ids = project_ids
        self.reader_generation = rg
        self.projects = {p: _Staged() for p in project_ids}


class _Replica:
    __slots__ = (
        "apply_receipts",
        "attempt",
        "completed",
        "fence",
        "in_flight",
        "ledger_bytes",
        "ledger_entries",
        "live",
        "notice",
        "org_id",
        "org_plain",
        "phase",
        "reader",
        "reader_generation",
        "receipt_bytes",
        "retired_attempts",
        "retired_streams",
        "run_epoch",
        "sequence",
        "snapshot_generation",
        "stream_id",
        "task_id",
        "waiters",
    )

    def __init__(self, task_id: str, run_epoch: int, org_id: str, reader: object) -> None:
        self.task_id = task_id
        self.run_epoch = run_epoch
        self.org_id = org_id
        self.org_plain = _plain(org_id)
        # The change notice of this task (an immutable command, emitted again
        # after every live apply).
        self.notice = _new_notify(task_id)
        self.reader = reader
        self.reader_generation = 1
        self.snapshot_generation: int | None = None
        self.fence = 1
        self.phase: Phase = INITIAL  # changed only by enter()
        self.stream_id: str | None = None
        self.sequence = 0
        self.attempt: _Attempt | None = None
        self.live: dict[str, _Project] = {}
        self.retired_streams: set[str] = set()
        self.retired_attempts: set[str] = set()
        self.apply_receipts: dict[int, _ApplyReceipt] = {}
        self.receipt_bytes = 0  # the sum of the receipts' ledger costs
        self.completed: dict[str, tuple[tuple[Any, ...], DeliveryCursor]] = {}
        self.ledger_entries = 0
        self.ledger_bytes = 0
        self.in_flight: set[_Entry] = set()
        self.waiters: dict[int, int] = {}  # waiter id -> timer id

    @property
    def gate_open(self) -> bool:
        """Whether the gate is open: exactly in the ``live`` phase."""
        return self.phase is LIVE

    @property
    def restart_required(self) -> bool:
        """Whether the run requires a runner restart: exactly in the ``exhausted`` phase."""
        return self.phase is EXHAUSTED


def _serves(r: _Replica) -> bool:
    """Whether ``r`` serves its snapshot: gate open, no attempt, a stream
    (``isReady`` for the replica's own run, ER-121)."""
    return r.phase is LIVE and r.attempt is None and r.stream_id is not None


_Frame = EnvBegin | EnvPage | EnvApply | EnvCommit


class _Op:
    """A page or apply waiting on a read (the lane's busy operation)."""

    __slots__ = (
        "advances",
        "attempt",
        "cmd_id",
        "current",
        "entries",
        "fence",
        "fp",
        "frame",
        "index",
        "live_project",
        "project",
        "reader",
        "reader_generation",
        "replica",
        "sjson",
        "state",
    )

    # Set by the page path only: entries, index, fp, live_project; by the
    # apply path only: current, advances, sjson; by both: project.
    entries: list[_Entry]
    index: int
    fp: tuple[Any, ...]
    live_project: _Project | None
    project: Any
    current: _Entry | None
    advances: bool
    sjson: str

    def __init__(self, frame: EnvPage | EnvApply, replica: _Replica) -> None:
        self.frame = frame
        self.replica = replica
        self.attempt = replica.attempt
        self.reader = replica.reader
        self.reader_generation = replica.reader_generation
        self.fence = replica.fence
        self.cmd_id = 0
        self.state: BindingState | None = None


# ER-128 (scrubProjects, scrubEntry): plaintext dropped from a project's entries.
def _scrub_project(proj: _Project) -> None:
    for e in proj.entries.values():
        e.value = None


# ER-128 (scrubAttempt): a superseded or destroyed attempt's staged values dropped.
def _scrub_attempt(a: _Attempt) -> None:
    for st in a.projects.values():
        for e in st.entries.values():
            e.value = None
        st.pages = {}


# A fast constructor (positional, in field order) for the change notice.
_new_notify: Final = constructor(NotifyChange)
