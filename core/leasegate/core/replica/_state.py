"""The env replica machine: :class:`ReplicaManager`.

Theory of operation
===================

The manager keeps, for each task id, at most one *replica*: the in-memory
copy of the project environment values of exactly one run ``(task, run)``.
It is the sans-I/O port of ``ProjectEnvTaskReplicaManager``
(``host/lib/project-env-task-replica.ts``; catalog ``env-replica.md``,
ER-001–ER-130). Everything happens in :meth:`ReplicaManager.handle`: one
event in, a list of commands out. It never raises for any event.

Lifecycle events (:class:`ActivateAssignment`, :class:`ExpectActivation`,
:class:`SettleActivation`, :class:`DropAssignment`, :class:`DropAll`,
:class:`AwaitReady`, :class:`ReadinessDeadline`) take effect at once, even
while a frame of the same task waits on a value read.

Frames (:class:`EnvFrameReceived`) are decoded strictly; an invalid one is
answered with :class:`FrameRejected` only (ER-024). A valid frame joins its
task's FIFO *lane*. The head of an idle lane is dispatched inside the same
``handle`` call (ordering guarantee: events apply strictly in arrival order,
so a lifecycle event fed before a frame is seen by it, and one fed after is
not). Dispatch runs the identity checks (boot, pending activation, run,
restart-required: ER-027), then the kind's rules, in the reference's order.

A page or apply that must read a value emits :class:`ReadStagedValue` /
:class:`ReadLegacyValue` carrying the reader handle captured at dispatch,
and the lane stays busy. Its completion (:class:`ValueReadCompleted` /
:class:`ValueReadFailed`) resumes the operation; *before anything else*
the fence is re-run (same replica object registered, same run and boot,
same fence generation, same reader handle, same stream, same attempt
object). A failed fence scrubs what the frame read and answers
``reader_changed`` (the same replica's reader changed) or
``replica_state_changed`` (ER-103, ER-104). When the operation acks, the
lane's next frame is dispatched, so frames of one task are acked in arrival
order whatever the order of their reads' completions; different tasks'
lanes are independent.

State per replica: the *gate*, the live snapshot (``live``), the attempt in
progress, the delivery cursor, the replay ledger (retired streams, retired
attempts, apply receipts, completed attempts: each costs 1 entry and
``64 + len(canonical evidence)`` bytes per task and per process, ER-114) and
the readiness waiters. When a reservation fails the replica is *exhausted*:
restart-required, every value dropped, waiters rejected (ER-119).

Plaintext values are :class:`~leasegate.core.Secret` objects held only in
staged and live entries and by in-flight operations; *scrubbing* sets the
entry's reference to ``None`` (docs/security.md § Env replica plaintext says
what that can and cannot mean in Python).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Final, Literal, TypeAlias

from .._base import Command, Event
from .._json import MAX_SAFE_INTEGER, JsonError, loads, utf16_len
from .._model import DecodeError, constructor, decoder, encode
from .._secret import Secret
from ..wire._common import is_op_id
from ..wire._env_text import _decode_apply_match, _new_cursor
from ..wire.env import (
    APPLY_KIND,
    MAX_PROJECT_ENV_ACK_PAGE_BYTES,
    BindingEnv,
    BindingOmit,
    BindingState,
    BindingWithhold,
    DeliveryCursor,
    EnvAck,
    EnvApply,
    EnvBegin,
    EnvCommit,
    EnvPage,
    Installed,
    Materialization,
    RecordResult,
    Unavailable,
    ValueRefLegacy,
    ValueRefRow,
    ValueRefStaged,
    _plain,
    _staged_envelope_fast,
    parse_legacy_envelope,
    staged_envelope_value,
)
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
from ._ledger import (
    LEDGER_RECORD_OVERHEAD_BYTES,
    canonical,
    compact_utf8_len,
    evidence_bytes,
    js,
    utf8_len,
)
from ._order import (
    desired_withheld,
    is_plain_value_advance,
    is_reachable_record_advance,
    locale_key,
    state_order,
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
    "ReplicaLimits",
    "ReplicaManager",
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


#: One apply's receipt (ER-114): the frame's fingerprint and its answer,
#: packed into one string of ten fields joined by U+0000 (no field can hold
#: one: ids match patterns, numbers are digits, and JSON text escapes every
#: control character):
#:
#: ``ok`` ("1" or "0"), ``bytes`` (the ledger cost charged for it), then the
#: fingerprint without the sequence (the receipt's key): attempt id ("" for
#: ``None``; an attempt id is never empty), delivery stream id, project id
#: and the frame's record version; then the answer: the result's record
#: version (or a consumed error's code), the materialization as canonical
#: JSON and the result state as :func:`state_json` (both "" for an error;
#: the result "" also when it is the frame's state); last the frame's state
#: as :func:`state_json`.
#:
#: A string, not a tuple: a dict of ints to strings is never tracked by the
#: garbage collector (a tuple of them would be, until a collection), and one
#: object per receipt instead of several keeps a long stream's memory small
#: and its young collections fast. Read only when an apply is replayed
#: (:func:`_receipt_fields`).
_ApplyReceipt: TypeAlias = str
_RECEIPT_SEP: Final = "\x00"


def _receipt_fields(rec: _ApplyReceipt) -> list[str]:
    """The ten fields of a receipt (see :data:`_ApplyReceipt`)."""
    return rec.split(_RECEIPT_SEP, 9)


def _receipt_bytes(rec: _ApplyReceipt) -> int:
    """The ledger cost charged for a receipt (its second field)."""
    return int(rec[2 : rec.index(_RECEIPT_SEP, 2)])


class _Replica:
    __slots__ = (
        "apply_receipts",
        "attempt",
        "completed",
        "fence",
        "gate_open",
        "in_flight",
        "ledger_bytes",
        "ledger_entries",
        "live",
        "notice",
        "org_id",
        "org_plain",
        "reader",
        "reader_generation",
        "receipt_bytes",
        "restart_required",
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
        self.gate_open = False
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
        self.restart_required = False
        self.in_flight: set[_Entry] = set()
        self.waiters: dict[int, int] = {}  # waiter id -> timer id


_Frame = EnvBegin | EnvPage | EnvApply | EnvCommit
_decode_frame: Final = decoder(EnvBegin | EnvPage | EnvApply | EnvCommit)
# The same decision for a value whose kind is already known to be an apply
# (the union dispatches on ``kind`` to exactly this decoder).
_decode_apply: Final = decoder(EnvApply)


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


def _safe_limit(v: object) -> bool:
    return type(v) is int and 1 <= v <= MAX_SAFE_INTEGER


def _valid_org(org: object) -> bool:
    return (
        type(org) is str and 0 < utf16_len(org) <= 128 and not any(c in _CONTROL_CHARS for c in org)
    )


class ReplicaManager:
    """The per-task env replica manager (``ProjectEnvTaskReplicaManager``).

    Args:
        boot_id: this runner process's boot id (``OP_ID``); frames carrying
            another get ``runner_boot_mismatch``.
        policy_epochs: the policy epochs this runner understands: 1–64
            unique safe integers ≥ 1 (copied; default
            :data:`DEFAULT_POLICY_EPOCHS`).
        limits: replay-ledger limits (default :class:`ReplicaLimits`).

    Raises:
        ValueError: ``"invalid task replica manager identity"`` for an invalid
            boot id, policy epochs or limits (ER-002). Construction is the
            only call that raises; :meth:`handle` never does.

    Reference: ``ProjectEnvTaskReplicaManager`` constructor (ER-001–ER-004).
    """

    def __init__(
        self,
        *,
        boot_id: str,
        policy_epochs: tuple[int, ...] | list[int] | None = None,
        limits: ReplicaLimits | None = None,
    ) -> None:
        epochs = DEFAULT_POLICY_EPOCHS if policy_epochs is None else policy_epochs
        lim = ReplicaLimits() if limits is None else limits
        if (
            not is_op_id(boot_id)
            or not isinstance(epochs, tuple | list)
            or not 1 <= len(epochs) <= MAX_POLICY_EPOCHS
            or not all(type(e) is int and 1 <= e <= MAX_SAFE_INTEGER for e in epochs)
            or len(set(epochs)) != len(epochs)
            or not isinstance(lim, ReplicaLimits)
            or not all(
                _safe_limit(x)
                for x in (
                    lim.max_task_entries,
                    lim.max_task_bytes,
                    lim.max_total_entries,
                    lim.max_total_bytes,
                )
            )
            or lim.max_task_entries > lim.max_total_entries
            or lim.max_task_bytes > lim.max_total_bytes
        ):
            raise ValueError("invalid task replica manager identity")
        self._boot_id: Final = boot_id
        self._epochs: Final = tuple(epochs)
        self._epoch_set: Final = frozenset(epochs)
        self._limits: Final = lim
        self._replicas: dict[str, _Replica] = {}
        self._floors: dict[str, int] = {}
        self._restart_marks: dict[str, int] = {}
        self._pending: dict[str, dict[int, int]] = {}
        self._token = 0
        self._total_entries = 0
        self._total_bytes = 0
        self._lanes: dict[str, deque[tuple[_Frame, str | None]]] = {}
        self._busy: dict[str, _Op] = {}
        self._ops: dict[int, _Op] = {}
        self._next_cmd = 0
        self._next_timer = 0
        self._timers: dict[int, tuple[_Replica, int]] = {}
        self._out: list[Command] = []

    # ------------------------------------------------------------------
    # Read-only properties and queries

    @property
    def boot_id(self) -> str:
        """The runner boot id (``runnerBootId``)."""
        return self._boot_id

    @property
    def policy_epochs(self) -> tuple[int, ...]:
        """The manager's own copy of the policy epochs (ER-003)."""
        return self._epochs

    @property
    def ledger_totals(self) -> tuple[int, int]:
        """Process ledger totals ``(entries, bytes)`` (ER-114, ER-118)."""
        return (self._total_entries, self._total_bytes)

    def task_ledger(self, task_id: str) -> tuple[int, int] | None:
        """The task's ledger usage ``(entries, bytes)``, or ``None`` without a replica."""
        r = self._replicas.get(task_id)
        return None if r is None else (r.ledger_entries, r.ledger_bytes)

    def reader_generation(self, task_id: str, run_epoch: int) -> int | None:
        """``readerGeneration``: the run's reader generation, else ``None`` (ER-014)."""
        r = self._replicas.get(task_id)
        return r.reader_generation if r is not None and r.run_epoch == run_epoch else None

    def is_ready(self, task_id: str, run_epoch: int) -> bool:
        """``isReady`` (ER-121): exact run, gate open, no attempt, a stream."""
        r = self._replicas.get(task_id)
        return (
            r is not None
            and r.run_epoch == run_epoch
            and r.gate_open
            and r.attempt is None
            and r.stream_id is not None
        )

    def read_status(self, task_id: str) -> ReplicaStatus | None:
        """``readStatus`` (ER-127, ER-120): no values, live project ids sorted."""
        r = self._replicas.get(task_id)
        if r is None:
            return None
        return ReplicaStatus(
            task_id=task_id,
            run_epoch=r.run_epoch,
            runner_boot_id=self._boot_id,
            gate_open=r.gate_open,
            restart_required=r.restart_required,
            stream_id=r.stream_id,
            attempt_id=r.attempt.attempt_id if r.attempt is not None else None,
            applied_through=None
            if r.stream_id is None
            else DeliveryCursor(stream_id=r.stream_id, sequence=r.sequence),
            project_ids=tuple(sorted(r.live, key=_utf16)),
        )

    def read_view(
        self, task_id: str, run_epoch: int, project_ids: tuple[str, ...] | list[str]
    ) -> ReplicaView | None:
        """``readView`` (ER-124, ER-125): the committed snapshot, or ``None``.

        ``project_ids`` must list the live project set exactly, each once;
        projects come back in the caller's order, entries in
        :func:`~._order.locale_key` order. Never raises.
        """
        r = self._replicas.get(task_id)
        if (
            r is None
            or r.run_epoch != run_epoch
            or not r.gate_open
            or r.attempt is not None
            or r.stream_id is None
        ):
            return None
        requested = list(project_ids)
        if not all(type(p) is str for p in requested):
            return None
        if len(set(requested)) != len(requested) or set(requested) != r.live.keys():
            return None
        projects = []
        for pid in requested:
            proj = r.live[pid]
            entries = sorted(proj.entries.values(), key=lambda e: locale_key(e.state.key))
            projects.append(
                ViewProject(
                    project_id=pid,
                    record_version=proj.record_version,
                    entries=tuple(
                        ViewEntry(state=e.state, materialization=e.mat, value=e.value)
                        for e in entries
                    ),
                )
            )
        return ReplicaView(
            task_id=task_id,
            run_epoch=run_epoch,
            runner_boot_id=self._boot_id,
            applied_through=DeliveryCursor(stream_id=r.stream_id, sequence=r.sequence),
            projects=tuple(projects),
        )

    def read_view_at(
        self,
        task_id: str,
        run_epoch: int,
        project_ids: tuple[str, ...] | list[str],
        generation: int,
    ) -> ReplicaView | None:
        """``readViewAt`` (ER-126): :meth:`read_view` if the snapshot was
        produced under reader generation ``generation``, else ``None``."""
        r = self._replicas.get(task_id)
        if r is None or r.snapshot_generation is None or r.snapshot_generation != generation:
            return None
        return self.read_view(task_id, run_epoch, project_ids)

    # ------------------------------------------------------------------
    # The entry point

    def handle(self, event: Event) -> list[Command]:
        """Apply one event; return the commands it produced, in order.

        Never raises. Events: :class:`EnvFrameReceived`,
        :class:`ValueReadCompleted`, :class:`ValueReadFailed`,
        :class:`ActivateAssignment`, :class:`ExpectActivation`,
        :class:`SettleActivation`, :class:`DropAssignment`, :class:`DropAll`,
        :class:`AwaitReady`, :class:`ReadinessDeadline`; any other event is
        ignored (no commands).
        """
        out: list[Command] = []
        self._out = out
        t = type(event)
        if t is EnvFrameReceived:
            self._on_frame(event)  # type: ignore[arg-type]
        elif t is ValueReadCompleted or t is ValueReadFailed:
            self._on_read(event)  # type: ignore[arg-type]
        elif t is ActivateAssignment:
            self._on_activate(event)  # type: ignore[arg-type]
        elif t is ExpectActivation:
            self._on_expect(event)  # type: ignore[arg-type]
        elif t is SettleActivation:
            self._on_settle(event)  # type: ignore[arg-type]
        elif t is DropAssignment:
            self._on_drop(event)  # type: ignore[arg-type]
        elif t is DropAll:
            self._on_drop_all()
        elif t is AwaitReady:
            self._on_await(event)  # type: ignore[arg-type]
        elif t is ReadinessDeadline:
            self._on_deadline(event)  # type: ignore[arg-type]
        self._out = []
        return out

    # ------------------------------------------------------------------
    # Lifecycle

    def _notify(self, task_id: str) -> None:
        self._out.append(_new_notify(task_id))

    def _on_activate(self, ev: ActivateAssignment) -> None:
        def fail(msg: str) -> None:
            self._out.append(
                ActivationOutcome(
                    task_id=ev.task_id, run_epoch=ev.run_epoch, outcome=None, error=msg
                )
            )

        task, run = ev.task_id, ev.run_epoch
        # ER-005: the task id is an op id (``isHostOpId``), stricter than the
        # registry's task id rule; refused before anything changes.
        if (
            not is_op_id(task)
            or type(run) is not int
            or not 1 <= run <= MAX_SAFE_INTEGER
            or not _valid_org(ev.org_id)
            or ev.reader is None
        ):
            return fail("invalid task assignment")
        # ER-006: a run below the highest run created for the task is stale; the floor never
        # lowers.
        if run < self._floors.get(task, 0):
            return fail("task assignment run epoch is stale")
        mark = self._restart_marks.get(task)
        # ER-007: a run marked restart-required (ER-119) never activates again, even after a drop.
        if mark == run:
            return fail(_NEEDS_RESTART)
        current = self._replicas.get(task)
        # ER-011: the org of a run's replica cannot change; nothing changes.
        if current is not None and current.run_epoch == run and current.org_id != ev.org_id:
            return fail("task assignment organization cannot change")
        if mark is not None and run > mark:
            del self._restart_marks[task]
        # ER-009 (same reader, same org: "retained", untouched); ER-010 (another reader:
        # "retained", reader generation and fence bumped, no notify).
        if current is not None and current.run_epoch == run:
            if current.reader is not ev.reader:
                current.reader = ev.reader
                current.reader_generation += 1
                current.fence += 1
            self._activated(task, run)
            self._out.append(
                ActivationOutcome(task_id=task, run_epoch=run, outcome="retained", error=None)
            )
            return None
        if current is not None:
            # The reference deletes nothing from the map here: the new
            # replica takes the task's existing position (ER-016).
            # ER-012: a newer run replaces the replica; the old one is destroyed and scrubbed first
            # (#destroyTask).
            self._destroy(current, "assignment replaced")
        # ER-008: a fresh replica ("created"): gate closed, no stream, cursor, attempt or live
        # projects.
        self._replicas[task] = _Replica(task, run, ev.org_id, ev.reader)
        self._floors[task] = run
        self._activated(task, run)
        self._out.append(
            ActivationOutcome(
                task_id=task,
                run_epoch=run,
                outcome="created" if current is None else "replaced",
                error=None,
            )
        )
        self._notify(task)
        return None

    def _activated(self, task: str, run: int) -> None:
        pending = self._pending.get(task)
        if pending is None:
            return
        for token in [k for k, r in pending.items() if r == run]:
            del pending[token]
        if not pending:
            del self._pending[task]

    def _on_expect(self, ev: ExpectActivation) -> None:
        self._token += 1
        # Ill-typed arguments get a token that no frame can ever match.
        if type(ev.task_id) is str and type(ev.run_epoch) is int:
            self._pending.setdefault(ev.task_id, {})[self._token] = ev.run_epoch
        self._out.append(
            ActivationToken(task_id=ev.task_id, run_epoch=ev.run_epoch, token=self._token)
        )

    def _on_settle(self, ev: SettleActivation) -> None:
        if type(ev.task_id) is not str or type(ev.token) is not int:
            return
        pending = self._pending.get(ev.task_id)
        if pending is None:
            return
        pending.pop(ev.token, None)
        if not pending:
            del self._pending[ev.task_id]

    def _on_drop(self, ev: DropAssignment) -> None:
        r = self._replicas.get(ev.task_id) if type(ev.task_id) is str else None
        if r is None or r.run_epoch != ev.run_epoch:
            self._out.append(Dropped(task_id=ev.task_id, run_epoch=ev.run_epoch, dropped=False))
            return
        del self._replicas[ev.task_id]
        self._destroy(r, "task credentials were dropped")
        self._out.append(Dropped(task_id=ev.task_id, run_epoch=ev.run_epoch, dropped=True))
        self._notify(ev.task_id)

    def _on_drop_all(self) -> None:
        replicas = list(self._replicas.values())
        self._replicas.clear()
        # ER-022: dropAll clears every pending token (dropAssignment keeps them).
        self._pending.clear()
        for r in replicas:
            self._destroy(r, "runner process ended")
            self._notify(r.task_id)

    def _scrub_live_and_attempt(self, r: _Replica) -> None:
        if r.attempt is not None:
            _scrub_attempt(r.attempt)
        r.attempt = None
        for proj in r.live.values():
            _scrub_project(proj)
        # ER-105: values a waiting page already read are scrubbed at once when the replica is
        # destroyed.
        for e in r.in_flight:
            e.value = None
        r.in_flight.clear()

    def _destroy(self, r: _Replica, reason: str) -> None:
        r.fence += 1
        r.gate_open = False
        r.reader = _CLOSED_READER
        self._scrub_live_and_attempt(r)
        self._clear_ledger(r)
        self._reject_waiters(r, reason)

    def _reject_waiters(self, r: _Replica, reason: str) -> None:
        waiters, r.waiters = r.waiters, {}
        for wid, tid in waiters.items():
            self._timers.pop(tid, None)
            self._out.append(CancelTimer(timer_id=tid))
            self._out.append(RejectWaiter(waiter_id=wid, reason=reason))

    # ------------------------------------------------------------------
    # Readiness

    def _on_await(self, ev: AwaitReady) -> None:
        ms = ev.timeout_ms
        if type(ms) is not int or not 1 <= ms <= MAX_READY_TIMEOUT_MS:
            self._out.append(
                RejectWaiter(
                    waiter_id=ev.waiter_id, reason="invalid task replica readiness timeout"
                )
            )
            return
        r = self._replicas.get(ev.task_id) if type(ev.task_id) is str else None
        if r is None or r.run_epoch != ev.run_epoch or type(ev.waiter_id) is not int:
            self._out.append(
                RejectWaiter(
                    waiter_id=ev.waiter_id, reason="task replica assignment is unavailable"
                )
            )
            return
        if r.restart_required:
            self._out.append(RejectWaiter(waiter_id=ev.waiter_id, reason=_NEEDS_RESTART))
            return
        if self.is_ready(ev.task_id, ev.run_epoch):
            self._out.append(ResolveWaiter(waiter_id=ev.waiter_id))
            return
        if ev.waiter_id in r.waiters:
            # A reused waiter id replaces its older registration.
            old = r.waiters.pop(ev.waiter_id)
            self._timers.pop(old, None)
            self._out.append(CancelTimer(timer_id=old))
        self._next_timer += 1
        tid = self._next_timer
        r.waiters[ev.waiter_id] = tid
        self._timers[tid] = (r, ev.waiter_id)
        self._out.append(StartTimer(timer_id=tid, delay_ms=ms))

    def _on_deadline(self, ev: ReadinessDeadline) -> None:
        found = self._timers.pop(ev.timer_id, None) if type(ev.timer_id) is int else None
        if found is None:
            return
        r, wid = found
        if r.waiters.get(wid) == ev.timer_id:
            del r.waiters[wid]
            self._out.append(
                RejectWaiter(
                    waiter_id=wid, reason="task environment replica did not become ready in time"
                )
            )

    # ------------------------------------------------------------------
    # Ledger

    def _reserve(self, r: _Replica, evidence: Any) -> int | None:
        return self._reserve_cost(r, evidence_bytes(evidence))

    def _reserve_cost(self, r: _Replica, cost: int) -> int | None:
        lim = self._limits
        if (
            r.ledger_entries + 1 > lim.max_task_entries
            or r.ledger_bytes + cost > lim.max_task_bytes
            or self._total_entries + 1 > lim.max_total_entries
            or self._total_bytes + cost > lim.max_total_bytes
        ):
            return None
        r.ledger_entries += 1
        r.ledger_bytes += cost
        self._total_entries += 1
        self._total_bytes += cost
        return cost

    def _release(self, r: _Replica, entries: int, cost: int) -> None:
        """Give back ``entries`` ledger entries costing ``cost`` bytes in all."""
        r.ledger_entries -= entries
        r.ledger_bytes -= cost
        self._total_entries -= entries
        self._total_bytes -= cost
        assert min(r.ledger_entries, r.ledger_bytes, self._total_entries, self._total_bytes) >= 0, (
            "task replica replay ledger accounting underflow"
        )

    # ER-117: retired ids and completed attempts stay for the replica's life; all is released when
    # it is destroyed (#clearReplayLedger).
    def _clear_ledger(self, r: _Replica) -> None:
        self._total_entries -= r.ledger_entries
        self._total_bytes -= r.ledger_bytes
        assert min(self._total_entries, self._total_bytes) >= 0, (
            "task replica replay ledger accounting underflow"
        )
        r.retired_streams.clear()
        r.retired_attempts.clear()
        r.apply_receipts.clear()
        r.receipt_bytes = 0
        r.completed.clear()
        r.ledger_entries = 0
        r.ledger_bytes = 0

    # ER-116: recording an id already recorded costs nothing and succeeds.
    def _retire_stream(self, r: _Replica, stream_id: str) -> bool:
        if stream_id in r.retired_streams:
            return True
        if self._reserve(r, ["retired_stream", stream_id]) is None:
            return False
        r.retired_streams.add(stream_id)
        return True

    def _retire_attempt(self, r: _Replica, attempt_id: str) -> bool:
        if attempt_id in r.retired_attempts:
            return True
        if self._reserve(r, ["retired_attempt", attempt_id]) is None:
            return False
        r.retired_attempts.add(attempt_id)
        return True

    def _remember_receipt(
        self,
        r: _Replica,
        frame: EnvApply,
        sj: str,
        code: str | None,
        version: int | None,
        result_sj: str | None,
        mat: Materialization | None,
    ) -> bool:
        """Store an apply receipt, charging ``["apply", seq, receipt]`` (ER-114).

        ``code`` is a consumed error's code (then ``version``, ``result_sj``
        and ``mat`` are ``None``); otherwise the receipt is ``ok`` with the
        result's record version, state (as :func:`state_json` ``result_sj``) and
        materialization. The cost is :func:`_receipt_cost`. Returns ``False``
        (nothing stored) when a ledger limit refuses it.
        """
        d = frame.delivery
        seq = d.sequence
        receipts = r.apply_receipts
        if seq in receipts:
            return True
        mat_json = None if mat is None else _mat_json(mat)
        cost = self._reserve_cost(r, _receipt_cost(frame, sj, code, version, result_sj, mat_json))
        if cost is None:
            return False
        a = frame.attempt_id
        if code is None:
            receipts[seq] = (
                f"1\x00{cost}\x00{'' if a is None else a}\x00{d.stream_id}\x00{frame.project_id}"
                f"\x00{frame.record_version}\x00{version}\x00{mat_json}"
                f"\x00{'' if result_sj is sj else result_sj}\x00{sj}"
            )
        else:
            receipts[seq] = (
                f"0\x00{cost}\x00{'' if a is None else a}\x00{d.stream_id}\x00{frame.project_id}"
                f"\x00{frame.record_version}\x00{code}\x00\x00\x00{sj}"
            )
        r.receipt_bytes += cost
        return True

    def _exhaust(self, r: _Replica, frame: _Frame) -> None:
        if not r.restart_required:
            r.restart_required = True
            self._restart_marks[r.task_id] = r.run_epoch
            r.fence += 1
            r.gate_open = False
            r.reader = _CLOSED_READER
            self._scrub_live_and_attempt(r)
            r.live = {}
            self._clear_ledger(r)
            self._reject_waiters(r, _NEEDS_RESTART)
            self._notify(r.task_id)
        self._error(frame, r, _EXHAUSTED)

    # ------------------------------------------------------------------
    # Acks

    def _cursor(self, r: _Replica | None, stream_id: str) -> DeliveryCursor:
        seq = r.sequence if r is not None and r.stream_id == stream_id else 0
        return _new_cursor(stream_id, seq)

    # None) -> DeliveryCursor:|ER-110: error acks and begin successes carry the cursor only for the
    # manager's boot, the frame's run and the replica's stream, else sequence 0.
    def _common(self, frame: _Frame, r: _Replica | None) -> DeliveryCursor:
        matched = (
            r
            if frame.runner_boot_id == self._boot_id
            and r is not None
            and r.run_epoch == frame.run_epoch
            else None
        )
        return self._cursor(matched, frame.stream_id)

    def _ack(
        self,
        frame: _Frame,
        applied_through: DeliveryCursor,
        ok: bool,
        code: str | None = None,
        error: str | None = None,
        project_id: str | None = None,
        record_version: int | None = None,
        result: RecordResult | None = None,
        high_water: DeliveryCursor | None = None,
    ) -> None:
        # Built positionally (EnvAck field order) from values that are valid
        # by construction: frame fields were decoded strictly.
        self._out.append(
            _new_send_ack(
                _new_ack(
                    frame.op_id,
                    frame.task_id,
                    frame.run_epoch,
                    frame.runner_boot_id,
                    frame.stream_id,
                    frame.attempt_id,
                    self._epochs,
                    applied_through,
                    ok,
                    _PHASES[type(frame)],
                    code,
                    error,
                    project_id,
                    None,
                    record_version,
                    None,
                    None,
                    result,
                    high_water,
                )
            )
        )

    def _error(self, frame: _Frame, r: _Replica | None, code: str) -> None:
        self._ack(frame, self._common(frame, r), False, code=code, error=code)

    def _page_ack(self, frame: EnvPage, rec: _PageReceipt) -> EnvAck:
        return EnvAck(
            op_id=frame.op_id,
            task_id=frame.task_id,
            run_epoch=frame.run_epoch,
            runner_boot_id=frame.runner_boot_id,
            stream_id=frame.stream_id,
            attempt_id=frame.attempt_id,
            policy_epochs=self._epochs,
            applied_through=rec.applied_through,
            ok=True,
            phase="page",
            code=None,
            error=None,
            project_id=frame.project_id,
            after=rec.after,
            record_version=rec.record_version,
            results=rec.results,
            complete=rec.complete,
            result=None,
            high_water=None,
        )

    def _apply_cursor(self, frame: EnvApply, r: _Replica | None) -> DeliveryCursor:
        d = frame.delivery
        # The frame's own cursor when the replica stands exactly there (the
        # usual case after an apply): equal to a fresh one, and frozen.
        if r is not None and r.sequence == d.sequence and r.stream_id == d.stream_id:
            return d
        return self._cursor(r, frame.stream_id)

    def _apply_replay_ack(self, frame: EnvApply, r: _Replica, rec: _ApplyReceipt) -> None:
        """The ack of an apply already answered: its receipt's answer again."""
        # ER-112: every ack is built afresh from the receipt's fields, so a caller changing an ack
        # changes no later replay.
        cur = self._apply_cursor(frame, r)
        f = _receipt_fields(rec)
        if f[0] != "1":
            self._ack(frame, cur, False, code=f[6], error=f[6])
            return
        self._ack(
            frame,
            cur,
            True,
            project_id=f[4],
            record_version=int(f[6]),
            result=_receipt_result(f),
        )

    # ------------------------------------------------------------------
    # Frames: intake and lanes

    def _on_frame(self, ev: EnvFrameReceived) -> None:
        value: Any = ev.frame
        tv = type(value)
        if tv is str or tv is bytes or tv is bytearray:
            # The frame's text as received: an apply in the wire's compact
            # form is decoded in one match (decode_apply_text, which accepts
            # only what the full path would decode to the same frame), its
            # state's JSON sliced from the text; any other text is parsed,
            # then decoded as a JSON value.
            if tv is not str:
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                    return
            fast = _decode_apply_match(value)
            if fast is not None:
                return self._intake(*fast)
            try:
                value = loads(value)
            except JsonError:
                self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                return
        elif tv in (EnvBegin, EnvPage, EnvApply, EnvCommit):
            # A pre-built frame is trusted no more than JSON (ER-024): it is
            # encoded (its fields may hold anything, so encoding may fail)
            # and the result goes through the same decoder as a JSON value,
            # which also deep-copies it (ER-025). Env frames hold no secrets.
            try:
                value = encode(value)
            except Exception:  # noqa: BLE001 - any failure means "not a frame"
                self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                return
        kind: object = None
        if type(value) is dict:
            try:
                kind = value.get("kind")
            except Exception:  # noqa: BLE001 - a hostile key; the decoder decides
                kind = None
        frame: Any = (
            _decode_apply(value)
            if type(kind) is str and kind == APPLY_KIND
            else _decode_frame(value)
        )
        if isinstance(frame, DecodeError):
            self._out.append(FrameRejected(error=_INVALID_FRAME, field=frame.field))
            return
        # An apply's state as JSON (state_json), taken now: its fingerprint
        # and ledger cost are computed from it (the caller's value may change).
        # (Written from the decoded, frozen state, which is exact.)
        self._intake(frame, state_json(frame.state) if type(frame) is EnvApply else None)

    # None) -> None:|ER-026: one lane per task: frames of a task run one at a time in arrival
    # order, each with its reads finished before the next; lanes of different tasks are
    # independent.
    def _intake(self, frame: _Frame, sj: str | None) -> None:
        """Dispatch a decoded frame, or queue it behind its task's lane."""
        task_id = frame.task_id
        lane = self._lanes.get(task_id)
        if lane is None:
            if task_id not in self._busy:
                # Nothing queued and nothing running: dispatch at once.
                self._dispatch(frame, sj)
                return
            lane = self._lanes[task_id] = deque()
        lane.append((frame, sj))
        if task_id not in self._busy:
            self._pump(task_id)

    def _pump(self, task_id: str) -> None:
        lane = self._lanes.get(task_id)
        while lane and task_id not in self._busy:
            self._dispatch(*lane.popleft())
        if lane is not None and not lane and task_id not in self._busy:
            del self._lanes[task_id]

    def _dispatch(self, frame: _Frame, sj: str | None) -> None:
        r = self._replicas.get(frame.task_id)
        if frame.runner_boot_id != self._boot_id:
            return self._error(frame, r, "runner_boot_mismatch")
        # ER-023: the pending-activation check runs at dispatch, not at receipt; ER-019: tokens
        # pending only for another run have no effect on this frame.
        pending = self._pending.get(frame.task_id)
        if pending is not None and frame.run_epoch in pending.values():
            return self._error(frame, r, PROJECT_ENV_ACTIVATION_PENDING)
        if r is None or r.run_epoch != frame.run_epoch:
            return self._error(frame, r, "task_assignment_mismatch")
        if r.restart_required:
            return self._error(frame, r, _EXHAUSTED)
        t = type(frame)
        if t is EnvApply:
            return self._apply(r, frame, sj)  # type: ignore[arg-type]
        if t is EnvPage:
            return self._page(r, frame)  # type: ignore[arg-type]
        if t is EnvBegin:
            return self._begin(r, frame)  # type: ignore[arg-type]
        return self._commit(r, frame)  # type: ignore[arg-type]

    # ------------------------------------------------------------------
    # Begin

    def _begin(self, r: _Replica, frame: EnvBegin) -> None:
        fp = (frame.stream_id, frame.attempt_id, frame.project_ids)
        # ER-029: a retired stream is refused first.
        if frame.stream_id in r.retired_streams:
            return self._error(frame, r, "stream_retired")
        # ER-030: a retired attempt id is refused, even for an identical begin.
        if frame.attempt_id in r.retired_attempts:
            return self._error(frame, r, "reconciliation_attempt_retired")
        a = r.attempt
        if r.stream_id == frame.stream_id and a is not None and a.attempt_id == frame.attempt_id:
            # ER-031: an identical begin replays with phase begun and changes nothing; ER-032:
            # other projectIds for the same attempt conflict.
            if a.fp == fp:
                return self._ack(frame, self._cursor(r, frame.stream_id), True)
            return self._error(frame, r, "reconciliation_attempt_conflict")
        # ER-034: a begin on another stream releases its receipts, retires the stream, then the
        # attempt; ER-035: a retirement the ledger cannot hold exhausts the replica (_exhaust).
        if r.stream_id is not None and r.stream_id != frame.stream_id:
            # A stream switch releases every apply receipt at once.
            self._release(r, len(r.apply_receipts), r.receipt_bytes)
            r.apply_receipts.clear()
            r.receipt_bytes = 0
            if not self._retire_stream(r, r.stream_id):
                return self._exhaust(r, frame)
            r.sequence = 0
        # ER-033: a new attempt id retires and scrubs the old attempt, closes the gate and starts
        # the new attempt.
        if a is not None and not self._retire_attempt(r, a.attempt_id):
            return self._exhaust(r, frame)
        if a is not None:
            _scrub_attempt(a)
        r.stream_id = frame.stream_id
        r.gate_open = False
        r.fence += 1
        r.attempt = _Attempt(frame.attempt_id, fp, frame.project_ids, r.reader_generation)
        self._notify(r.task_id)
        return self._ack(frame, self._cursor(r, frame.stream_id), True)

    # ------------------------------------------------------------------
    # Page

    def _page(self, r: _Replica, frame: EnvPage) -> None:
        a = r.attempt
        if (
            r.stream_id != frame.stream_id
            or a is None
            or a.attempt_id != frame.attempt_id
            or r.gate_open
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-038: reader_changed comes before the receipt replay, so even an exact page replay gets
        # it.
        if a.reader_generation != r.reader_generation:
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        staged = a.projects.get(frame.project_id)
        if staged is None:
            # ER-039: the page's project is not among the begin's projectIds.
            return self._error(frame, r, "project_not_in_attempt")
        fp = (frame.project_id, frame.after, frame.record_version, frame.records, frame.complete)
        rec = staged.pages.get(frame.after)
        if rec is not None:
            # ER-040 (same fingerprint: the recorded ack is returned); ER-041 (another fingerprint
            # at that after: snapshot_page_conflict).
            if rec.fp != fp:
                return self._error(frame, r, "snapshot_page_conflict")
            self._out.append(SendAck(ack=self._page_ack(frame, rec)))
            return None
        # ER-042: pages chain by after (null first, then the last key); ER-043: an empty incomplete
        # page leaves no last key, so every continuation is a mismatch; ER-047: the page rules run
        # in the catalog order, one check after another below.
        if (frame.after is None and staged.started) or (
            frame.after is not None
            and (not staged.started or staged.complete or staged.last_key != frame.after)
        ):
            return self._error(frame, r, "snapshot_page_mismatch")
        # ER-044: every page of a project in one attempt has one record version.
        if staged.started and staged.record_version != frame.record_version:
            return self._error(frame, r, "snapshot_version_conflict")
        live = r.live.get(frame.project_id)
        # ER-045: a first page below the live version is stale.
        if not staged.started and live is not None and frame.record_version < live.record_version:
            return self._error(frame, r, "record_version_stale")
        # ER-046: a page at exactly the live version must equal the live snapshot.
        if live is not None and frame.record_version == live.record_version:
            conflicts = False
            for s in frame.records:
                le = live.entries.get(s.key)
                if le is None or le.state != s:
                    conflicts = True
                    break
            if not conflicts and frame.complete:
                keys = set(staged.entries) | {s.key for s in frame.records}
                conflicts = keys != live.entries.keys()
            if conflicts:
                return self._error(frame, r, "snapshot_version_conflict")
        op = _Op(frame, r)
        op.entries = []
        op.index = 0
        op.fp = fp
        op.project = staged
        op.live_project = live
        return self._page_continue(op)

    def _page_continue(self, op: _Op) -> None:
        frame = op.frame
        assert isinstance(frame, EnvPage)
        r = op.replica
        a = op.attempt
        assert a is not None
        live = op.live_project
        records = frame.records
        # ER-048: records are materialized one at a time, in frame order, through the reader held
        # when the page was accepted.
        while op.index < len(records):
            s = records[op.index]
            le = live.entries.get(s.key) if live is not None else None
            withheld = desired_withheld(s, self._epoch_set)
            if (
                le is not None
                # ER-049: keep-installed rule (live entry installed under the attempt's generation,
                # same state, not withheld) reuses the live value; ER-050: otherwise the record is
                # read again.
                and r.snapshot_generation == a.reader_generation
                and type(le.mat) is Installed
                and le.state == s
                and withheld is None
            ):
                entry = _Entry(s, le.mat, le.value)
            else:
                entry_or_read = self._materialize_start(op, frame.project_id, s, withheld)
                if entry_or_read is None:
                    return None  # waiting on a read
                entry = entry_or_read
            r.in_flight.add(entry)
            op.entries.append(entry)
            op.index += 1
        self._page_finish(op)
        return None

    def _page_finish(self, op: _Op) -> None:
        frame = op.frame
        assert isinstance(frame, EnvPage)
        r = op.replica
        staged: _Staged = op.project
        results = tuple(RecordResult(state=e.state, materialization=e.mat) for e in op.entries)
        rec = _PageReceipt(
            op.fp,
            frame.after,
            frame.record_version,
            results,
            frame.complete,
            self._cursor(r, frame.stream_id),
        )
        ack = self._page_ack(frame, rec)
        if compact_utf8_len(encode(ack)) > MAX_PROJECT_ENV_ACK_PAGE_BYTES:
            for e in op.entries:
                e.value = None
                r.in_flight.discard(e)
            op.entries.clear()
            return self._error(frame, r, "ack_page_too_large")
        # ER-052: an accepted page stages its entries by key, starts the project at its version and
        # sets lastKey and complete; no ledger entry, no notify.
        for e in op.entries:
            r.in_flight.discard(e)
            staged.entries[e.state.key] = e
        staged.started = True
        staged.record_version = frame.record_version
        staged.last_key = frame.records[-1].key if frame.records else None
        staged.complete = frame.complete
        staged.pages[frame.after] = rec
        self._out.append(SendAck(ack=ack))
        return None

    # ------------------------------------------------------------------
    # Materialization

    def _materialize_start(
        self, op: _Op, project_id: str, s: BindingState, withheld: Materialization | None
    ) -> _Entry | None:
        """An entry decided without a read, or ``None`` after emitting a read."""
        if withheld is not None:
            return _Entry(s, withheld, None)
        ref = s.head.value_ref
        if ref is None:
            return _Entry(s, _UNAVAILABLE["value_reference_invalid"], None)
        r = op.replica
        self._next_cmd += 1
        cid = self._next_cmd
        if type(ref) is ValueRefStaged:
            cmd: Command = _new_read_staged(
                cid, op.reader, r.task_id, r.run_epoch, project_id, s.key, ref.staging_id
            )
        elif type(ref) is ValueRefLegacy:
            cmd = ReadLegacyValue(
                cmd_id=cid,
                reader=op.reader,
                task_id=r.task_id,
                run_epoch=r.run_epoch,
                project_id=project_id,
                key=s.key,
                version=ref.ssm_version,
            )
        else:
            # A row reference: the registry's reader refuses it (decided: no read).
            return _Entry(s, _UNAVAILABLE["value_unavailable"], None)
        op.cmd_id = cid
        op.state = s
        self._ops[cid] = op
        self._busy[r.task_id] = op
        self._out.append(cmd)
        return None

    def _materialize_finish(self, op: _Op, ev: ValueReadCompleted | ValueReadFailed) -> _Entry:
        s = op.state
        assert s is not None
        frame = op.frame
        ref = s.head.value_ref
        if type(ev) is ValueReadFailed:
            return _Entry(s, _UNAVAILABLE["value_unavailable"], None)
        assert isinstance(ev, ValueReadCompleted)
        raw = ev.raw
        if raw is None or type(raw) is not Secret:
            return _Entry(
                s, _UNAVAILABLE["value_missing" if raw is None else "value_unavailable"], None
            )
        org = op.replica.org_id
        if type(ref) is ValueRefStaged:
            text = raw.reveal()
            # Project ids, keys and staging ids match patterns with nothing
            # to escape, so only the org id decides whether the fast path
            # may be taken without checking the ids (ER-098).
            got: Secret | str | None = (
                _staged_envelope_fast(text, org, frame.project_id, s.key, ref.staging_id)
                if op.replica.org_plain and type(text) is str
                else None
            )
            if got is None:
                got = staged_envelope_value(text, org, frame.project_id, s.key, ref.staging_id)
        else:
            assert type(ref) is ValueRefLegacy
            if type(ev.version) is not int or ev.version != ref.ssm_version:
                return _Entry(s, _UNAVAILABLE["value_version_mismatch"], None)
            got = parse_legacy_envelope(
                raw.reveal(), org_id=org, project_id=frame.project_id, key=s.key
            )
        if type(got) is Secret:
            return _Entry(s, _INSTALLED, got)
        assert isinstance(got, str)
        return _Entry(s, _UNAVAILABLE[got], None)

    def _on_read(self, ev: ValueReadCompleted | ValueReadFailed) -> None:
        op = self._ops.pop(ev.cmd_id, None) if type(ev.cmd_id) is int else None
        if op is None:
            return
        r = op.replica
        task_id = r.task_id
        frame = op.frame
        del self._busy[task_id]
        cur = self._replicas.get(task_id)
        # ER-106 (#readFenceCurrent): lifecycle calls that change none of these fields leave the
        # frame to complete normally; ER-107: a fenced frame keeps its lane until its read returns
        # (the pump below runs after it).
        # The fence runs before the completion is looked at: a fenced
        # payload is discarded unseen (never revealed nor parsed; ER-103/104).
        if not (
            cur is r
            and r.run_epoch == frame.run_epoch
            and frame.runner_boot_id == self._boot_id
            and r.fence == op.fence
            and r.reader is op.reader
            and r.stream_id == frame.stream_id
            and r.attempt is op.attempt
            and (
                frame.attempt_id is None
                if op.attempt is None
                else frame.attempt_id == op.attempt.attempt_id
            )
        ):
            op.state = None
            for e in op.entries if type(frame) is EnvPage else ():
                e.value = None
                r.in_flight.discard(e)
            code = (
                PROJECT_ENV_READER_CHANGED
                if cur is r and r.reader_generation != op.reader_generation
                else "replica_state_changed"
            )
            self._error(frame, cur, code)
        else:
            entry = self._materialize_finish(op, ev)
            op.state = None
            if type(frame) is EnvPage:
                # Held until the page settles (scrubbed if the replica is).
                r.in_flight.add(entry)
                op.entries.append(entry)
                op.index += 1
                self._page_continue(op)
            else:
                self._apply_finish(op, entry)
        if task_id in self._lanes:
            self._pump(task_id)

    # ------------------------------------------------------------------
    # Apply

    def _apply(self, r: _Replica, frame: EnvApply, sj: str | None) -> None:
        assert sj is not None
        # ER-071: the apply rules run in the catalog order, one check after another below; ER-070:
        # an apply refused before it is consumed leaves the cursor and the receipts as they were.
        if r.stream_id != frame.stream_id:
            return self._error(frame, r, "stream_mismatch")
        seq = frame.delivery.sequence
        if seq <= r.sequence:
            rec = r.apply_receipts.get(seq)
            # ER-057 (reference `#apply`, `receipt_missing`): a sequence at or below the cursor
            # without a receipt.
            if rec is None:
                return self._error(frame, r, "receipt_missing")
            if not _same_apply(rec, frame, sj):
                return self._error(frame, r, "delivery_conflict")
            return self._apply_replay_ack(frame, r, rec)
        a = r.attempt
        if (
            # ER-058: with the gate open only applies with a null attemptId; with it closed only
            # the attempt in progress.
            (frame.attempt_id is not None or a is not None)
            if r.gate_open
            else (a is None or frame.attempt_id != a.attempt_id)
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-059: a sequence above cursor + 1 is a delivery_gap, not consumed.
        if seq != r.sequence + 1:
            return self._error(frame, r, "delivery_gap")
        if (
            # ER-060: a live apply needs the snapshot's reader generation, a staged apply the
            # attempt's, to be the current one.
            r.snapshot_generation != r.reader_generation
            if a is None
            else a.reader_generation != r.reader_generation
        ):
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        project: _Project | _Staged | None = (
            r.live.get(frame.project_id) if a is None else a.projects.get(frame.project_id)
        )
        if project is None:
            # ER-061: a project not in the live snapshot (live apply) or the attempt (staged apply)
            # is consumed as an error.
            return self._consume_error(r, frame, "project_not_in_replica", sj)
        # ER-062: a staged apply needs a project whose pages are complete.
        if type(project) is _Staged and not project.complete:
            return self._error(frame, r, "snapshot_incomplete")
        # ER-063: record_version_gap, not consumed.
        if frame.record_version > project.record_version + 1:
            return self._error(frame, r, "record_version_gap")
        current = project.entries.get(frame.state.key)
        # ER-064: an apply advances only at version + 1, newer by stateOrder and reachable
        # (isReachableRecordAdvance).
        if frame.record_version != project.record_version + 1:
            advances = False
        elif current is not None and is_plain_value_advance(frame.state, current.state):
            advances = True  # the common case; implies the two rules below
        else:
            advances = (
                current is None or state_order(frame.state, current.state) == "newer"
            ) and is_reachable_record_advance(
                frame.state, current.state if current is not None else None
            )
        # ER-066: no entry and no advance: consumed as record_version_conflict.
        if not advances and current is None:
            return self._consume_error(r, frame, "record_version_conflict", sj)
        op = _Op(frame, r)
        op.project = project
        op.current = current
        op.advances = advances
        op.sjson = sj
        # ER-067: an entry and no advance: absorbed as a consumed success, state and version kept;
        # ER-068: an installed, not withheld entry is kept without a read, any other is
        # materialized again.
        if not advances:
            assert current is not None
            if (
                type(current.mat) is Installed
                and desired_withheld(current.state, self._epoch_set) is None
            ):
                return self._apply_finish(op, _Entry(current.state, current.mat, current.value))
            desired = current.state
        else:
            # ER-065: an advancing apply reads its state afresh through the current reader.
            desired = frame.state
        got = self._materialize_start(
            op, frame.project_id, desired, desired_withheld(desired, self._epoch_set)
        )
        if got is None:
            return None  # waiting on a read
        return self._apply_finish(op, got)

    def _apply_finish(self, op: _Op, entry: _Entry) -> None:
        """Install an apply's decided entry, remember its receipt, ack it.

        Runs in the same step as the decision (no event can come between),
        so the entry is never in flight: its value is scrubbed here when the
        ledger refuses the receipt.
        """
        frame = op.frame
        assert isinstance(frame, EnvApply)
        r = op.replica
        project = op.project
        version = frame.record_version if op.advances else project.record_version
        state = entry.state
        mat = entry.mat
        sj = op.sjson
        assert sj is not None
        result_sj = sj if state is frame.state else state_json(state)
        if not self._remember_receipt(r, frame, sj, None, version, result_sj, mat):
            entry.value = None
            return self._exhaust(r, frame)
        current = op.current
        # ER-065: the new entry replaces the old one, whose value is scrubbed.
        if current is not None and current is not entry:
            current.value = None
        project.entries[state.key] = entry
        project.record_version = version
        r.sequence = frame.delivery.sequence
        # ER-069: a live apply notifies once and is visible at once; a staged apply does not
        # notify.
        if r.gate_open:
            self._out.append(r.notice)
        self._ack(
            frame,
            self._apply_cursor(frame, r),
            True,
            None,
            None,
            frame.project_id,
            version,
            _new_result(state, mat),
        )

    def _consume_error(self, r: _Replica, frame: EnvApply, code: str, sj: str) -> None:
        if not self._remember_receipt(r, frame, sj, code, None, None, None):
            return self._exhaust(r, frame)
        r.sequence = frame.delivery.sequence
        cur = self._apply_cursor(frame, r)
        return self._ack(frame, cur, False, code=code, error=code)

    # ------------------------------------------------------------------
    # Commit

    def _commit(self, r: _Replica, frame: EnvCommit) -> None:
        fp = (frame.stream_id, frame.attempt_id, frame.high_water, frame.versions)
        done = r.completed.get(frame.attempt_id)
        if done is not None:
            # ER-087: a committed attempt's commit with another fingerprint conflicts.
            if done[0] != fp:
                return self._error(frame, r, "reconciliation_attempt_conflict")
            return self._ack(frame, done[1], True, high_water=done[1])
        a = r.attempt
        if (
            r.stream_id != frame.stream_id
            or a is None
            or a.attempt_id != frame.attempt_id
            # ER-088: a commit for another stream, without an attempt, for another attempt or with
            # the gate open is a mismatch.
            or r.gate_open
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-089: a commit of an attempt begun under an older reader generation gets
        # reader_changed; nothing is committed.
        if a.reader_generation != r.reader_generation:
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        if frame.high_water.sequence != r.sequence:
            # ER-090: highWater.sequence must equal the cursor's sequence.
            return self._error(frame, r, "delivery_incomplete")
        if len(frame.versions) != len(a.project_ids) or any(
            v.project_id != pid
            or not a.projects[pid].complete
            or a.projects[pid].record_version != v.record_version
            for v, pid in zip(frame.versions, a.project_ids, strict=False)
        ):
            # ER-091: versions must match the attempt exactly (length, order, completeness,
            # versions).
            return self._error(frame, r, "record_version_changed")
        fp_json = canonical(
            {
                "streamId": frame.stream_id,
                "attemptId": frame.attempt_id,
                "highWater": encode(frame.high_water),
                "versions": [encode(v) for v in frame.versions],
            }
        )
        if frame.attempt_id not in r.completed:
            evidence = [
                "completed_attempt",
                frame.attempt_id,
                {"fingerprint": fp_json, "highWater": encode(frame.high_water)},
            ]
            # ER-093: a commit whose records cannot be stored exhausts the replica, nothing
            # committed.
            if self._reserve(r, evidence) is None:
                return self._exhaust(r, frame)
            r.completed[frame.attempt_id] = (fp, frame.high_water)
        if not self._retire_attempt(r, frame.attempt_id):
            return self._exhaust(r, frame)
        # ER-092: the live snapshot becomes exactly the attempt's staged projects; the previous
        # live entries are scrubbed.
        old = r.live
        r.live = {
            pid: _Project(a.projects[pid].record_version, a.projects[pid].entries)
            for pid in a.project_ids
        }
        for st in a.projects.values():
            st.entries = {}
            st.pages = {}
        r.attempt = None
        r.snapshot_generation = a.reader_generation
        r.gate_open = True
        r.fence += 1
        for proj in old.values():
            _scrub_project(proj)
        waiters, r.waiters = r.waiters, {}
        for wid, tid in waiters.items():
            self._timers.pop(tid, None)
            self._out.append(CancelTimer(timer_id=tid))
            self._out.append(ResolveWaiter(waiter_id=wid))
        self._notify(r.task_id)
        return self._ack(frame, frame.high_water, True, high_water=frame.high_water)


_ACK_OPTIONAL: Final = (
    "code",
    "error",
    "project_id",
    "after",
    "record_version",
    "results",
    "complete",
    "result",
    "high_water",
)
_INSTALLED: Final = Installed()
_UNAVAILABLE: Final[dict[str, Unavailable]] = {
    reason: Unavailable(reason=reason)
    for reason in (
        "value_reference_invalid",
        "value_missing",
        "value_envelope_mismatch",
        "value_version_mismatch",
        "value_unavailable",
    )
}


_MAT_JSON: dict[Materialization, str] = {}


def _mat_json(m: Materialization) -> str:
    """Canonical JSON of a materialization (cached; ``installed`` first)."""
    if m is _INSTALLED:
        return _INSTALLED_JSON
    got = _MAT_JSON.get(m)
    if got is None:
        got = canonical(encode(m))
        if len(_MAT_JSON) < 1024:
            _MAT_JSON[m] = got
    return got


_decode_state: Final = decoder(BindingState)
_decode_mat: Final = decoder(Materialization)


def _receipt_result(f: list[str]) -> RecordResult:
    """The ``result`` of an ``ok`` receipt (its fields ``f``), rebuilt from
    its JSON texts.

    Equal (by value) to the result of the original ack: the texts were
    written from decoded values, and decoding them gives the same values
    back (``tests/core/replica`` checks the round trip on
    generated states).
    """
    state = _decode_state(loads(f[8] or f[9]))
    mat = _decode_mat(loads(f[7]))
    assert isinstance(state, BindingState), "receipt state does not decode"
    assert not isinstance(mat, DecodeError), "receipt materialization does not decode"
    return _new_result(state, mat)


def _same_apply(rec: _ApplyReceipt, frame: EnvApply, sj: str) -> bool:
    """Whether ``frame`` (its state as :func:`state_json` ``sj``) is the apply
    that ``rec`` (the receipt of its sequence) answered: same attempt,
    delivery stream, project, record version and state (the reference's
    fingerprint, ER-055/ER-056)."""
    f = _receipt_fields(rec)
    return (
        f[3] == frame.delivery.stream_id
        and f[2] == ("" if frame.attempt_id is None else frame.attempt_id)
        and f[4] == frame.project_id
        and f[5] == str(frame.record_version)
        and f[9] == sj
    )


_INSTALLED_JSON: Final = canonical(encode(_INSTALLED))
_INSTALLED_LEN: Final = len(_INSTALLED_JSON)


def _id_json(v: str | None) -> str:
    # Ids match OP_ID (``[A-Za-z0-9_-]``): nothing to escape.
    return "null" if v is None else '"' + v + '"'


# The apply evidence ``["apply", seq, receipt]`` as canonical JSON, its
# fixed text between the variable parts (ER-114):
#   '["apply",' S ',{"appliedThrough":{"sequence":' S ',"streamId":"' STREAM
#   '"},"attemptId":' ATTEMPT ',"fingerprint":' FP
#   then ',"ok":true,"projectId":"' P '","recordVersion":' RV
#        ',"result":{"materialization":' MAT ',"state":' STATE '}}]'
#   or   ',"code":' CODE (before ',"fingerprint":') and ',"ok":false}]'.
_EV_HEAD_LEN: Final = sum(
    map(len, ['["apply",', ',{"appliedThrough":{"sequence":', ',"streamId":"', '"},"attemptId":'])
)
_EV_OK_LEN: Final = sum(
    map(
        len,
        [
            ',"fingerprint":',
            ',"ok":true,"projectId":"',
            '","recordVersion":',
            ',"result":{"materialization":',
            ',"state":',
            "}}]",
        ],
    )
)
_EV_ERR_LEN: Final = sum(map(len, [',"code":', ',"fingerprint":', ',"ok":false}]']))
# The fingerprint: canonical JSON of {attemptId, delivery, projectId,
# recordVersion, state}, held in the evidence as a JSON string (each '"'
# escaped, quotes around):
#   '{"attemptId":' ATTEMPT ',"delivery":{"sequence":' S ',"streamId":"'
#   STREAM '"},"projectId":"' P '","recordVersion":' RV ',"state":' STATE '}'
_FP_FIXED_LEN: Final = 2 + sum(
    len(part) + part.count('"')
    for part in [
        '{"attemptId":',
        ',"delivery":{"sequence":',
        ',"streamId":"',
        '"},"projectId":"',
        '","recordVersion":',
        ',"state":',
        "}",
    ]
)


def _receipt_cost(
    frame: EnvApply,
    sj: str,
    code: str | None,
    version: int | None,
    result_sj: str | None,
    mat_json: str | None,
) -> int:
    """Ledger bytes of an apply's evidence ``["apply", seq, receipt]`` (ER-114).

    ``64 +`` the UTF-8 length of the evidence's canonical JSON (keys
    sorted). That text is never written, only its length: it is summed from
    the fixed parts (above) and the variable ones. Ids (stream, attempt,
    project) and numbers are ASCII with nothing to escape; the state (``sj``,
    its :func:`state_json`: the canonical JSON's members in another order,
    so the same length and characters), held
    twice (in the fingerprint, a JSON string, each ``"`` escaped; and as
    the result), needs the encoder only when it holds non-ASCII text or a
    backslash (a withhold reason). ``tests/core/replica`` checks the sum
    equals the generic form's on generated applies.
    """
    d = frame.delivery
    a = frame.attempt_id
    plain = sj.isascii() and "\\" not in sj
    rv_len = len(str(frame.record_version))
    n = (
        _EV_HEAD_LEN
        + _FP_FIXED_LEN
        + 3 * len(str(d.sequence))
        + 2 * len(d.stream_id)
        + (8 if a is None else 2 * len(a) + 6)
        + len(frame.project_id)
        + rv_len
        + (len(sj) + _plain_quotes(frame.state, sj) if plain else _fp_state_len(sj))
    )
    if code is None:
        assert result_sj is not None
        assert mat_json is not None
        n += (
            _EV_OK_LEN
            + len(frame.project_id)
            + (rv_len if version == frame.record_version else len(str(version)))
            + (_INSTALLED_LEN if mat_json is _INSTALLED_JSON else utf8_len(mat_json))
            + (len(sj) if result_sj is sj and plain else utf8_len(result_sj))
        )
    else:
        n += _EV_ERR_LEN + utf8_len(js(code))
    return LEDGER_RECORD_OVERHEAD_BYTES + n


_QUOTES: dict[tuple[type, type], int] = {}


def _plain_quotes(state: BindingState, sj: str) -> int:
    """The number of ``"`` in ``sj``, the :func:`state_json` of ``state``,
    when ``sj`` is plain (ASCII, no backslash).

    Then no value holds a quote (keys, staging and row ids match patterns
    without one; a withhold reason holding one is written ``\\"``, not plain),
    so the count depends only on the kinds of the value reference and the
    binding: counted once per pair of kinds, then remembered.
    """
    kinds = (type(state.head.value_ref), type(state.binding))
    got = _QUOTES.get(kinds)
    if got is None:
        got = _QUOTES[kinds] = sj.count('"')
    return got


def _fp_state_len(sj: str) -> int:
    """UTF-8 length of a state's JSON ``sj`` (:func:`state_json`, as long as
    its canonical JSON) written inside the
    fingerprint, a JSON string (quotes excluded; ER-114).

    JavaScript writes a lone surrogate in the state as the six characters
    ``\\udxxx``; held in the fingerprint string, that backslash is escaped
    again: seven bytes, one more than :func:`utf8_len` charges it.
    """
    n = utf8_len(js(sj)) - 2
    try:
        sj.encode("utf-8")
    except UnicodeEncodeError:
        n += sum(1 for c in sj if "\ud800" <= c <= "\udfff")
    return n


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


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


# Fast constructors (positional, in field order) for values built on the hot
# path from fields that are valid by construction.
_new_ack: Final = constructor(EnvAck)
_new_send_ack: Final = constructor(SendAck)
_new_notify: Final = constructor(NotifyChange)
_new_result: Final = constructor(RecordResult)
_new_read_staged: Final = constructor(ReadStagedValue)
_PHASES: Final[dict[type, Literal["begun", "page", "applied", "complete"]]] = {
    EnvBegin: "begun",
    EnvPage: "page",
    EnvApply: "applied",
    EnvCommit: "complete",
}


def state_json(s: BindingState) -> str:
    """The JSON of a decoded state, written directly: ``js(encode(s))``.

    Compact, keys in field order (``key, head, binding, policyEpoch,
    listingGeneration``; ``revision, generation, tombstone, valueRef``;
    ``kind`` first in a reference or binding): the form the wire carries, so
    that an apply given as text takes it as a slice of the frame
    (:func:`~leasegate.core.wire._env_text.decode_apply_match`). It is the
    state's identity in an apply's fingerprint (equal states, equal texts:
    ER-055/ER-056) and the measure of its ledger cost: the canonical JSON
    the reference charges (ER-114) holds the same members, so it has the
    same length and the same characters. Ids, keys and staging ids match
    ASCII patterns with nothing to escape; a withhold reason is free text
    and is written by the JSON encoder. ``tests/core/replica`` checks the
    equality on generated states.
    """
    h = s.head
    ref = h.value_ref
    t = type(ref)
    if ref is None:
        rj = "null"
    elif t is ValueRefStaged:
        rj = '{"kind":"staged","stagingId":"' + ref.staging_id + '"}'  # type: ignore[union-attr]
    elif t is ValueRefLegacy:
        rj = '{"kind":"legacy","ssmVersion":' + str(ref.ssm_version) + "}"  # type: ignore[union-attr]
    elif t is ValueRefRow:
        rj = '{"kind":"row","rowId":"' + ref.row_id + '"}'  # type: ignore[union-attr]
    else:
        return js(encode(s))
    b = s.binding
    tb = type(b)
    if b is None:
        bj = "null"
    elif tb is BindingEnv:
        bj = '{"kind":"env"}'
    elif tb is BindingOmit:
        bj = '{"kind":"omit"}'
    elif tb is BindingWithhold:
        bj = '{"kind":"withhold","reason":' + js(b.reason) + "}"  # type: ignore[union-attr]
    else:
        return js(encode(s))
    pe = s.policy_epoch
    # One f-string (a single allocation); every interpolated number is an
    # int (decoded strictly: never a bool), written as ``str`` writes it.
    return (
        f'{{"key":"{s.key}","head":{{"revision":{h.revision},"generation":{h.generation},'
        f'"tombstone":{"true" if h.tombstone else "false"},"valueRef":{rj}}},"binding":{bj},'
        f'"policyEpoch":{"null" if pe is None else pe},'
        f'"listingGeneration":{s.listing_generation}}}'
    )
