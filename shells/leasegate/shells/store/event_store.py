"""The crash-safe file event store (``OrchestrationEventStore``).

Theory of operation
===================

One directory per session (``<agent_dir>/state/orchestration/<name>``,
ES-001/ES-002) holds:

* ``events/<16-digit ordinal>.json``: one file per event, never rewritten;
* ``cursor.json``: ``{version, lastOrdinal, tailBytes}``, an index that may
  lag the events (a crash tail) but is never ahead of them;
* ``idempotency/<sha256(key)>.json``: marker → ordinal for keyed events;
* ``snapshots/<T>.json`` and ``projection-baseline.json``: the compacted
  projection and the pointer that publishes it (two-phase);
* ``cursor.json.lock``: the ``flock`` file (never deleted).

Every mutation (append, compaction) runs under the exclusive lock and starts
with *reconciliation*. The cursor read under the lock is the authority for
the last ordinal H: when ``events/<C>`` exists and ``events/<C+1>`` does not
(two stats, :func:`~leasegate.core.ledger.cursor_probe`), the cursor is at H
and nothing is listed, so an append costs the same whatever the size of the
store. Otherwise (a crash tail, a cursor missing, invalid or ahead)
``events/`` is listed, the tail checks run and the uncovered events are
re-indexed (markers, cursor). Compaction and reads list the tail anyway and
check it for gaps. Reads take the shared lock and never write store files.
Every write is :func:`~._fsops.write_atomic`: temp, fsync, rename, fsync of
the directory.

Commit points: the rename of ``events/<n>.json`` commits an append; the
rename of ``projection-baseline.json`` publishes a compaction. What a crash
after each step leaves is in ``docs/ledger.md`` (tables A and K).

All decisions (names, validation, digests, plans) are pure functions in
:mod:`leasegate.core.ledger`; this module does the I/O.

Implements ``reference/orchestration/event-store.ts``
(``OrchestrationEventStore``), catalog entries ES-001..ES-072.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import math
import os
import stat as stat_mod
import uuid
from collections.abc import Callable
from typing import Any

from leasegate.core import is_safe_int
from leasegate.core.ledger import (
    DEFAULT_MAX_IDEMPOTENCY_EVENTS,
    DEFAULT_MAX_TAIL_BYTES,
    DEFAULT_MAX_TAIL_EVENTS,
    ORCHESTRATION_SCHEMA_VERSION,
    Baseline,
    Cursor,
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
    Snapshot,
    baseline_record,
    check_tail,
    compaction_due,
    cursor_probe,
    cursor_record,
    event_file_name,
    file_ordinal,
    idempotency_marker_name,
    is_json_object,
    is_orchestration_event,
    marker_ordinal,
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
    snapshot_record,
)

from ._fsops import FsOps, ensure_dir, write_atomic
from ._lock import file_lock

__all__ = [
    "AppendEventInput",
    "OrchestrationEventStore",
    "ProjectionSnapshot",
    "candidate_event",
    "iso_now",
    "store_limits",
]

Event = dict[str, Any]
Listener = Callable[[Event], object]


def iso_now() -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (ES-064 default)."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AppendEventInput:
    """What a caller appends (the reference's ``AppendOrchestrationEventInput``).

    Attributes:
        type: one of :data:`leasegate.core.ledger.EVENT_TYPES`.
        aggregate_id: non-empty id of the aggregate the event is about.
        actor: one of :data:`leasegate.core.ledger.ACTORS`.
        payload: a JSON object (deep-copied at the call). Never a secret: a
            :class:`~leasegate.core.Secret` is not JSON and is refused.
        correlation_id, causation_id, idempotency_key: optional; ``None`` or
            ``""`` omits the field (ES-007). A non-empty idempotency key
            deduplicates the append (ES-014).
    """

    type: str
    aggregate_id: str
    actor: str
    payload: dict[str, Any]
    correlation_id: str | None = None
    causation_id: str | None = None
    idempotency_key: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ProjectionSnapshot:
    """What :meth:`OrchestrationEventStore.read_projection_snapshot` returns
    (ES-030): the ordinal T and a deep copy of the projection."""

    through_ordinal: int
    projection: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class _Verified:
    """The snapshot this instance last verified (ES-053): its pointer, the
    file's identity, and its retained keyed events by key (ES-016)."""

    baseline: Baseline
    signature: tuple[int, int, int, int, int]
    retained: dict[str, Event]


class OrchestrationEventStore:
    """A per-session, crash-safe, multi-process event log with compaction.

    Args:
        agent_dir: the agent's directory; the store lives under
            ``<agent_dir>/state/orchestration/`` (ES-002).
        session_id: any well-formed string (ES-001).
        now: returns the ``occurredAt``/``createdAt`` text (ES-064 default:
            :func:`iso_now`); called once per committed append/compaction.
        create_event_id: returns a new ``eventId`` (default: a UUID v4).
        max_tail_events: compaction threshold in tail files (default 256).
        max_tail_bytes: compaction threshold in tail bytes (default 4 MiB).
        max_idempotency_events: keyed events a snapshot retains (default 512).
        fs: the file-system seam (tests record or inject crashes with it).
        lock_timeout_s: longest wait for the store lock, in seconds (a
            finite number ≥ 0; default 5).

    Raises:
        OrchestrationEventStoreError: a limit is not a positive safe integer
            (ES-065, in the order listed), the lock timeout is not a finite
            number ≥ 0 (a NaN would wait forever), or the session id is
            malformed.

    Construction creates nothing on disk (ES-002). The instance is safe to
    use from several threads only through separate instances (the lock is
    per open file, so separate instances exclude each other).
    """

    def __init__(
        self,
        agent_dir: str | os.PathLike[str],
        session_id: str,
        *,
        now: Callable[[], str] | None = None,
        create_event_id: Callable[[], str] | None = None,
        max_tail_events: int | None = None,
        max_tail_bytes: int | None = None,
        max_idempotency_events: int | None = None,
        fs: FsOps | None = None,
        lock_timeout_s: float = 5.0,
    ) -> None:
        name = session_directory_name(session_id)
        if isinstance(name, OrchestrationEventStoreError):
            raise name
        self.root_dir = os.path.join(os.fspath(agent_dir), "state", "orchestration", name)
        self.events_dir = os.path.join(self.root_dir, "events")
        self.idempotency_dir = os.path.join(self.root_dir, "idempotency")
        self.snapshots_dir = os.path.join(self.root_dir, "snapshots")
        self.cursor_path = os.path.join(self.root_dir, "cursor.json")
        self.baseline_path = os.path.join(self.root_dir, "projection-baseline.json")
        self.lock_path = self.cursor_path + ".lock"
        self._now = now or iso_now
        self._create_event_id = create_event_id or (lambda: str(uuid.uuid4()))
        self.max_tail_events, self.max_tail_bytes, self.max_idempotency_events = store_limits(
            max_tail_events, max_tail_bytes, max_idempotency_events
        )
        self.fs = fs or FsOps()
        if (
            type(lock_timeout_s) not in (int, float)
            or not math.isfinite(lock_timeout_s)
            or lock_timeout_s < 0
        ):
            raise OrchestrationEventStoreError(
                "lockTimeout must be a finite, non-negative number of seconds."
            )
        self.lock_timeout_s = float(lock_timeout_s)
        self._listeners: dict[Listener, None] = {}
        self._verified: _Verified | None = None

    # ------------------------------------------------------------------
    # Public API

    def append(self, item: AppendEventInput, *, expected_last_ordinal: int | None = None) -> Event:
        """Append one event and return it (a deep copy).

        Order (ES-015): reconcile the crash tail; if the key is known, return
        the stored event unchanged (ES-014, ES-016, ES-019); compare
        ``expected_last_ordinal`` with H (ES-021); then write E(n), M(K), the
        cursor, each durably (ES-009, ES-068). Listeners run after the lock is
        released (ES-060..062).

        Args:
            item: the event to append.
            expected_last_ordinal: optimistic concurrency: the H the caller
                saw; ``None`` disables the check.

        Returns:
            The committed event (``schemaVersion``, ``ordinal``, ``eventId``,
            ``type``, ``aggregateId``, ``actor``, ``occurredAt``, optional ids,
            ``payload``), or the earlier event with the same key.

        Raises:
            OrchestrationConcurrencyError: ``expected_last_ordinal`` ≠ H.
            OrchestrationEventStoreError: the input is not a valid event
                (ES-013, before any write), or the store is corrupt (naming
                the file), or the lock timed out.
            OSError: a write, rename, fsync, stat or listing failed.
            Exception: whatever a listener raised, after the commit (ES-062).
        """
        # ES-006: the first event (schemaVersion 1, ordinal 1, its ids and time); ES-008: the
        # ordinal after a crash tail is H+1; ES-010: tailBytes grows by the event's UTF-8 length;
        # ES-012: each append runs alone under the exclusive file lock; ES-022: expected H appends
        # H+1, also after a compaction; ES-023: racing appends with one expected ordinal: exactly
        # one wins.
        record = candidate_event(item)
        if expected_last_ordinal is not None and (not is_safe_int(expected_last_ordinal)):
            raise OrchestrationEventStoreError("expectedLastOrdinal must be a safe integer.")
        key = record.get("idempotencyKey")
        ensure_dir(self.fs, self.root_dir)
        appended = False
        with file_lock(self.lock_path, shared=False, timeout_s=self.lock_timeout_s):
            highest, tail_bytes = self._synchronize()
            existing = self._read_idempotent(key) if key else None
            if existing is not None:
                event = existing
            else:
                if expected_last_ordinal is not None and expected_last_ordinal != highest:
                    raise OrchestrationConcurrencyError(expected_last_ordinal, highest)
                ordinal = highest + 1
                record["ordinal"] = ordinal
                record["eventId"] = self._create_event_id()
                record["occurredAt"] = self._now()
                event_or_none = is_orchestration_event(record)
                if event_or_none is None:
                    raise OrchestrationEventStoreError(
                        "Invalid orchestration event: the clock or id source returned an "
                        "invalid value."
                    )
                event = event_or_none
                data = serialize(event)
                write_atomic(self.fs, os.path.join(self.events_dir, event_file_name(ordinal)), data)
                if key:
                    self._write_marker(key, ordinal)
                write_atomic(
                    self.fs,
                    self.cursor_path,
                    serialize(cursor_record(ordinal, tail_bytes + len(data))),
                    directory_exists=True,  # the root, ensured before the lock was taken
                )
                appended = True
        if appended:
            for listener in list(self._listeners):
                listener(copy.deepcopy(event))
        return copy.deepcopy(event)

    def read_all(self) -> list[Event]:
        """Every event after the baseline, ascending (ES-024, ES-025).

        Verifies the snapshot (parse + digest) on every call, checks tail
        contiguity and the cursor (ES-033, ES-034), and validates each file
        (ES-026). Takes the shared lock (ES-032); never writes store files.
        Returns ``[]`` without creating anything when the root is missing.

        Raises:
            OrchestrationEventStoreError: any integrity defect, naming the file.
        """
        # ES-031: reads see a crash tail and repair nothing.
        if not self.fs.exists(self.root_dir):
            return []
        with file_lock(self.lock_path, shared=True, timeout_s=self.lock_timeout_s):
            snapshot = self._read_snapshot()
            through = snapshot.through_ordinal if snapshot is not None else 0
            return self._read_tail(through, through)

    def read_after(self, ordinal: int) -> list[Event]:
        """Events with ordinal > ``ordinal``, ascending (ES-027..029).

        Raises:
            OrchestrationSnapshotRequiredError: ``ordinal`` < T (before any
                event file is listed); load :meth:`read_projection_snapshot`.
            OrchestrationEventStoreError: an invalid baseline pointer, a tail
                gap, a cursor ahead, or a bad file above ``ordinal``.
        """
        # ES-028: deep copies of the events after x, ascending, never opening lower files; ES-029:
        # reads only the baseline pointer, never the snapshot payload; ES-031: a crash tail is
        # returned without writing, locking or repairing.
        if type(ordinal) is not int:
            raise OrchestrationEventStoreError("readAfter ordinal must be an integer.")
        if not self.fs.exists(self.root_dir):
            return []
        with file_lock(self.lock_path, shared=True, timeout_s=self.lock_timeout_s):
            baseline = self._read_baseline()
            through = baseline.through_ordinal if baseline is not None else 0
            if baseline is not None and ordinal < through:
                raise OrchestrationSnapshotRequiredError(through)
            return self._read_tail(through, ordinal)

    def read_projection_snapshot(self) -> ProjectionSnapshot | None:
        """The verified snapshot ``(T, projection copy)``, or ``None`` (ES-030).

        Raises:
            OrchestrationEventStoreError: ES-050..052 defects.
        """
        if not self.fs.exists(self.root_dir):
            return None
        with file_lock(self.lock_path, shared=True, timeout_s=self.lock_timeout_s):
            snapshot = self._read_snapshot()
        if snapshot is None:
            return None
        return ProjectionSnapshot(snapshot.through_ordinal, copy.deepcopy(snapshot.projection))

    def compact_if_needed(
        self, through_ordinal: int, projection: Callable[[], dict[str, Any]]
    ) -> bool:
        """Replace the tail by a verified snapshot when it is large enough.

        Returns ``True`` after compacting at T = ``through_ordinal``; ``False``
        when T ≠ H (ES-037), or the tail holds fewer than ``max_tail_events``
        files and fewer than ``max_tail_bytes`` bytes (ES-036). A pre-lock
        check returns ``False`` without the lock in the common case (ES-038).

        ``projection()`` is called exactly once, under the lock, only when
        compacting (ES-040); it must return a JSON object (ES-049).

        Steps (ES-044..046): write S(T) durably; publish the baseline
        durably; remove all markers and fsync ``idempotency/``; remove
        events ≤ T (ascending); remove
        other snapshots; remove stray temp files (ES-072); write cursor
        ``{T, 0}`` durably.

        Raises:
            OrchestrationEventStoreError: a non-object projection (before
                any write), an invalid baseline or snapshot, a corrupt tail.
            OSError: a write or (other than "missing") unlink failed.
        """
        # ES-039: an empty tail compacts nothing (a fresh store still gets its root, lock and
        # cursor); ES-045: the prune order after publishing; ES-048: the state after a compaction;
        # ES-071: every step is crash-safe under SIGKILL at any point.
        if type(through_ordinal) is not int:
            raise OrchestrationEventStoreError("throughOrdinal must be an integer.")
        baseline = self._read_baseline()
        if prelock_skip(
            self._read_cursor(),
            baseline.through_ordinal if baseline is not None else 0,
            through_ordinal,
            self.max_tail_events,
            self.max_tail_bytes,
        ):
            return False
        ensure_dir(self.fs, self.root_dir)
        with file_lock(self.lock_path, shared=False, timeout_s=self.lock_timeout_s):
            highest, tail_bytes = self._synchronize()
            if highest != through_ordinal:
                return False
            baseline = self._read_baseline()
            base_ordinal = baseline.through_ordinal if baseline is not None else 0
            ordinals = self._event_ordinals()
            # Reconciliation trusted a confirmed cursor without listing; the
            # listing compaction needs anyway also proves the tail has no
            # gap (ES-033) before any of it is folded into a snapshot.
            gap = check_tail(ordinals, base_ordinal, None)
            if isinstance(gap, OrchestrationEventStoreError):
                raise gap
            tail = [n for n in ordinals if n > base_ordinal]
            if not compaction_due(len(tail), tail_bytes, self.max_tail_events, self.max_tail_bytes):
                return False
            old = self._read_snapshot()
            keyed: list[Event] = []
            for n in tail:
                event = self._read_event_checked(n, read_path=True)
                if event["ordinal"] <= through_ordinal and "idempotencyKey" in event:
                    keyed.append(event)
            retained = merge_retained(
                old.idempotency_events if old is not None else (),
                keyed,
                self.max_idempotency_events,
            )
            value = projection()
            if not is_json_object(value):
                raise OrchestrationEventStoreError(
                    "Orchestration projection must be a JSON object."
                )
            record = snapshot_record(
                through_ordinal, self._checked_now(), copy.deepcopy(value), retained
            )
            snapshot_file = event_file_name(through_ordinal)
            write_atomic(
                self.fs, os.path.join(self.snapshots_dir, snapshot_file), serialize(record)
            )
            write_atomic(
                self.fs,
                self.baseline_path,
                serialize(baseline_record(through_ordinal, record["digest"])),
            )
            self._verified = None
            markers = self._idempotency_names()
            for name in markers:
                self._unlink_managed(os.path.join(self.idempotency_dir, name))
            if markers:
                # Make the marker removals durable before any event file goes
                # (ES-046 across power loss: unlinks in different directories
                # reach the disk in no particular order).
                self.fs.fsync_dir(self.idempotency_dir)
            for n in self._event_ordinals():
                if n <= through_ordinal:
                    self._unlink_managed(os.path.join(self.events_dir, event_file_name(n)))
            for name in self._snapshot_names():
                if name != snapshot_file:
                    self._unlink_managed(os.path.join(self.snapshots_dir, name))
            self._remove_stray_temps()
            write_atomic(self.fs, self.cursor_path, serialize(cursor_record(through_ordinal, 0)))
            return True

    def subscribe(self, listener: Listener) -> Callable[[], bool]:
        """Call ``listener`` with a deep copy of each event this instance
        appends, after the commit, in subscription order (ES-060, ES-061).

        The same callable is registered once (ES-063). Listeners are called
        over a copy of the list taken before the first call: one added during
        a notification is not called for that event; one removed during it
        still is (pinned by a test).

        Returns:
            An unsubscribe function: ``True`` the first time, then ``False``.
        """
        self._listeners[listener] = None

        def unsubscribe() -> bool:
            return self._listeners.pop(listener, 0) is None

        return unsubscribe

    # ------------------------------------------------------------------
    # Internals

    def _checked_now(self) -> str:
        value = self._now()
        if type(value) is not str:
            raise OrchestrationEventStoreError("The store clock must return a string.")
        return value

    def _event_exists(self, ordinal: int) -> bool:
        """Whether ``events/<ordinal>.json`` exists (one stat, no open)."""
        return self.fs.exists(os.path.join(self.events_dir, event_file_name(ordinal)))

    def _event_ordinals(self) -> list[int]:
        try:
            names = self.fs.listdir(self.events_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in (file_ordinal(name) for name in names) if n is not None)

    def _idempotency_names(self) -> list[str]:
        try:
            return [n for n in self.fs.listdir(self.idempotency_dir) if n.endswith(".json")]
        except OSError:
            return []

    def _snapshot_names(self) -> list[str]:
        try:
            return sorted(
                n for n in self.fs.listdir(self.snapshots_dir) if file_ordinal(n) is not None
            )
        except OSError:
            return []

    def _read_cursor(self) -> Cursor | None:
        try:
            data = self.fs.read(self.cursor_path)
        except OSError:
            return None
        return parse_cursor(data)

    def _read_baseline(self) -> Baseline | None:
        try:
            data = self.fs.read(self.baseline_path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration snapshot baseline: {exc.strerror}",
                file="projection-baseline.json",
            ) from None
        baseline = parse_baseline(data)
        if isinstance(baseline, OrchestrationEventStoreError):
            raise baseline
        return baseline

    def _read_snapshot(self) -> Snapshot | None:
        baseline = self._read_baseline()
        return self._load_snapshot(baseline) if baseline is not None else None

    def _load_snapshot(self, baseline: Baseline) -> Snapshot:
        """Read, parse and digest-verify the snapshot ``baseline`` names."""
        try:
            data = self.fs.read(os.path.join(self.snapshots_dir, baseline.snapshot_file))
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration projection snapshot: {exc.strerror}",
                file=baseline.snapshot_file,
            ) from None
        snapshot = parse_snapshot(data, baseline)
        if isinstance(snapshot, OrchestrationEventStoreError):
            raise snapshot
        return snapshot

    def _signature(self, baseline: Baseline) -> tuple[int, int, int, int, int]:
        path = os.path.join(self.snapshots_dir, baseline.snapshot_file)
        try:
            st = self.fs.stat(path)
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration projection snapshot: {exc.strerror}",
                file=baseline.snapshot_file,
            ) from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise OrchestrationEventStoreError(
                "Orchestration projection snapshot is not a file.", file=baseline.snapshot_file
            )
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def _verified_baseline(self) -> Baseline | None:
        """The baseline, verifying its snapshot only when the pointer or the
        file's identity changed (ES-053, ES-054)."""
        baseline = self._read_baseline()
        if baseline is None:
            self._verified = None
            return None
        signature = self._signature(baseline)
        cached = self._verified
        if cached is not None and cached.baseline == baseline and cached.signature == signature:
            return baseline
        snapshot = self._load_snapshot(baseline)
        if self._signature(baseline) != signature:
            raise OrchestrationEventStoreError(
                "Orchestration projection snapshot changed while being verified.",
                file=baseline.snapshot_file,
            )
        retained = {ev["idempotencyKey"]: ev for ev in snapshot.idempotency_events}
        self._verified = _Verified(baseline, signature, retained)
        return baseline

    def _read_event_checked(self, ordinal: int, *, read_path: bool) -> Event:
        name = event_file_name(ordinal)
        try:
            data = self.fs.read(os.path.join(self.events_dir, name))
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration event {name}: {exc.strerror}", file=name
            ) from None
        event = parse_event_file(name, data)
        if isinstance(event, OrchestrationEventStoreError):
            raise event
        if event["ordinal"] != ordinal:
            message = (
                f"Non-monotonic orchestration event ordinal in {name}"
                if read_path
                else f"Event ordinal does not match file name: {name}"
            )
            raise OrchestrationEventStoreError(message, file=name)
        return event

    def _read_tail(self, through: int, after: int) -> list[Event]:
        ordinals = self._event_ordinals()
        cursor = self._read_cursor()
        checked = check_tail(ordinals, through, cursor)
        if isinstance(checked, OrchestrationEventStoreError):
            raise checked
        if cursor is None:
            self._assert_markers_within(checked)
        return [
            self._read_event_checked(n, read_path=True)
            for n in ordinals
            if n > through and n > after
        ]

    def _write_marker(self, key: str, ordinal: int) -> None:
        write_atomic(
            self.fs,
            os.path.join(self.idempotency_dir, idempotency_marker_name(key)),
            serialize(marker_record(key, ordinal)),
        )

    def _read_idempotent(self, key: str) -> Event | None:
        """The stored event with key ``key``, or ``None`` (ES-016..019)."""
        # ES-018: a marker whose event has another ordinal or key is an error; ES-020: only the
        # newest maxIdempotencyEvents keys stay deduplicated after a compaction.
        marker_path = os.path.join(self.idempotency_dir, idempotency_marker_name(key))
        try:
            data = self.fs.read(marker_path)
        except FileNotFoundError:
            return self._retained(key)
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration idempotency marker: {exc.strerror}",
                file=idempotency_marker_name(key),
            ) from None
        ordinal = parse_marker(data, key)
        if isinstance(ordinal, OrchestrationEventStoreError):
            raise ordinal
        if not self._event_exists(ordinal):
            retained = self._retained(key)
            if retained is not None and retained["ordinal"] == ordinal:
                return retained
        name = event_file_name(ordinal)
        try:
            raw = self.fs.read(os.path.join(self.events_dir, name))
        except OSError as exc:
            raise OrchestrationEventStoreError(
                f"Failed to parse orchestration event {name}: {exc.strerror}", file=name
            ) from None
        event = parse_event_file(name, raw)
        if isinstance(event, OrchestrationEventStoreError):
            raise event
        if event["ordinal"] != ordinal or event.get("idempotencyKey") != key:
            raise OrchestrationEventStoreError(
                "Orchestration idempotency marker does not match its event.", file=name
            )
        return event

    def _retained(self, key: str) -> Event | None:
        """The event with key ``key`` the current snapshot retains, or ``None``
        (ES-016, ES-019). Called after :meth:`_synchronize` in the same lock
        hold, which verified the snapshot the baseline names (or found no
        baseline and dropped the cache), so the cached retained events are
        the current snapshot's: the lookup parses nothing (ES-053)."""
        cached = self._verified
        return cached.retained.get(key) if cached is not None else None

    def _synchronize(self) -> tuple[int, int]:
        """Crash-tail reconciliation (ES-055..059); returns (H, tailBytes).

        The cursor, read under the exclusive lock, is the authority for H:
        when :func:`~leasegate.core.ledger.cursor_probe` confirms it with two
        stats (``events/<C>`` present, ``events/<C+1>`` absent), nothing is
        listed, opened or written, so the cost does not grow with the store.
        Otherwise ``events/`` is listed and the plan reports or repairs the
        tail. Validates every event to re-index before writing any marker,
        so a corrupt file fails the operation with nothing new written
        (ES-058).
        """
        # ES-056: reconciliation reads and validates files C+1..H and rewrites their markers and
        # the cursor; ES-057: an absent, invalid or below-baseline cursor rebuilds from T+1;
        # ES-059: off the fast path tailBytes is recomputed from the tail files' sizes.
        baseline = self._verified_baseline()
        through = baseline.through_ordinal if baseline is not None else 0
        cursor = self._read_cursor()
        probe = cursor_probe(cursor, through)
        if (
            probe is not None
            and (probe.present is None or self._event_exists(probe.present))
            and not self._event_exists(probe.absent)
        ):
            return probe.highest, probe.tail_bytes
        ordinals = self._event_ordinals()
        plan = plan_reconciliation(ordinals, through, cursor)
        if isinstance(plan, OrchestrationEventStoreError):
            raise plan
        if plan.fast:
            return plan.highest, plan.tail_bytes
        if cursor is None:
            self._assert_markers_within(plan.highest)
        to_index: list[tuple[str, int]] = []
        for n in ordinals:
            if n < plan.rebuild_from or n <= through:
                continue
            event = self._read_event_checked(n, read_path=False)
            key = event.get("idempotencyKey")
            if key:
                to_index.append((key, n))
        for key, n in to_index:
            self._write_marker(key, n)
        tail_bytes = 0
        for n in ordinals:
            if n <= through:
                continue
            with contextlib.suppress(OSError):
                tail_bytes += self.fs.stat(
                    os.path.join(self.events_dir, event_file_name(n))
                ).st_size
        write_atomic(self.fs, self.cursor_path, serialize(cursor_record(plan.highest, tail_bytes)))
        return plan.highest, tail_bytes

    def _assert_markers_within(self, highest: int) -> None:
        """Without a valid cursor, the markers are the only other record of
        the last ordinal: a marker naming an ordinal past H proves that
        committed events are gone (a lost last event file *and* cursor).
        Raise instead of handing that ordinal out again (port extension of
        ES-034/ES-035; never the case after any crash, since a marker is
        written only after its event is durable and compaction removes
        markers durably before events). Unreadable or invalid markers are
        left to ES-017 when their key is used."""
        for name in self._idempotency_names():
            try:
                data = self.fs.read(os.path.join(self.idempotency_dir, name))
            except OSError:
                continue
            ordinal = marker_ordinal(data)
            if ordinal is not None and ordinal > highest:
                raise OrchestrationEventStoreError(
                    f"Orchestration idempotency marker names ordinal {ordinal} past the last "
                    f"committed event {highest}.",
                    file=name,
                )

    def _remove_stray_temps(self) -> None:
        """Delete temp files a crashed writer left (ES-072). Runs under the
        exclusive lock, so no live writer owns a temp file at this point."""
        for directory in (self.root_dir, self.events_dir, self.idempotency_dir, self.snapshots_dir):
            try:
                names = self.fs.listdir(directory)
            except OSError:
                continue
            for name in names:
                if name.endswith(".tmp") and ".json." in name:
                    self._unlink_managed(os.path.join(directory, name))

    def _unlink_managed(self, path: str) -> None:
        """Unlink during pruning; a file already gone is skipped (ES-047)."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(path)


def candidate_event(item: AppendEventInput) -> Event:
    """The event record an append of ``item`` writes, before its ordinal, id and time.

    Validated with the readers' predicate (ES-013), its payload deep-copied
    (ES-011); shared by every backend of the store contract.

    Raises:
        OrchestrationEventStoreError: the record would fail validation
            (nothing is written).
    """
    record: Event = {
        "schemaVersion": ORCHESTRATION_SCHEMA_VERSION,
        "ordinal": 1,
        "eventId": "pending",
        "type": item.type,
        "aggregateId": item.aggregate_id,
        "actor": item.actor,
        "occurredAt": "pending",
    }
    for name, value in (
        ("correlationId", item.correlation_id),
        ("causationId", item.causation_id),
        ("idempotencyKey", item.idempotency_key),
    ):
        if value is not None and value != "":
            record[name] = value
    record["payload"] = item.payload
    if is_orchestration_event(record) is None:
        raise OrchestrationEventStoreError(
            "Invalid orchestration event input: the record would fail validation."
        )
    record["payload"] = copy.deepcopy(item.payload)
    return record


def store_limits(
    max_tail_events: object, max_tail_bytes: object, max_idempotency_events: object
) -> tuple[int, int, int]:
    """The compaction and idempotency limits of a store, defaults filled in (ES-064).

    Shared by every backend of the store contract.

    Raises:
        OrchestrationEventStoreError: a limit is not a positive safe integer
            (its option named).
    """
    limits: list[int] = []
    for value, default, label in (
        (max_tail_events, DEFAULT_MAX_TAIL_EVENTS, "maxTailEvents"),
        (max_tail_bytes, DEFAULT_MAX_TAIL_BYTES, "maxTailBytes"),
        (max_idempotency_events, DEFAULT_MAX_IDEMPOTENCY_EVENTS, "maxIdempotencyEvents"),
    ):
        resolved = positive_safe_integer(value, default, label)
        if isinstance(resolved, OrchestrationEventStoreError):
            raise resolved
        limits.append(resolved)
    return limits[0], limits[1], limits[2]
