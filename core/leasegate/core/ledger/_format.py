"""The event store's on-disk format, as pure functions (no I/O).

Theory of operation
===================

The file store (``leasegate.shells.store``) lists, stats, reads, writes,
fsyncs, unlinks and locks; every *decision* is made here from the bytes and
listings it hands over:

* names: the session directory (ES-001), event and snapshot files (ES-003),
  idempotency markers (ES-005);
* codecs and validators for the five records: event (``is_orchestration_event``),
  cursor (ES-035), marker (ES-017), baseline (ES-050), snapshot (ES-051/052);
* the serialized form (ES-004) and the snapshot digest (ES-042);
* the retained-idempotency merge (ES-043);
* the tail checks (ES-033, ES-034), the cursor probe that lets a mutation
  trust the cursor without listing ``events/`` (ES-055), and the
  reconciliation plan (ES-055..059);
* the compaction decisions (ES-036, ES-038).

Nothing here raises for any input: a failed check *returns* an
:class:`~.OrchestrationEventStoreError`, which the shell raises.

Records are plain JSON values (``dict``/``list``/``str``/``int``/...). The
event validator is written by hand rather than with ``_model.py`` because an
event has optional keys (``correlationId``, ``causationId``,
``idempotencyKey``) and files may hold integral floats (``1.0``) where an
ordinal is expected, which the reference accepts; ``_model`` supports
neither (see ``docs/ledger.md``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Final

from .._json import MAX_SAFE_INTEGER, JsonError, loads
from ._errors import OrchestrationEventStoreError

__all__ = [
    "ACTORS",
    "DEFAULT_MAX_IDEMPOTENCY_EVENTS",
    "DEFAULT_MAX_TAIL_BYTES",
    "DEFAULT_MAX_TAIL_EVENTS",
    "EVENT_TYPES",
    "ORCHESTRATION_SCHEMA_VERSION",
    "Baseline",
    "Cursor",
    "CursorProbe",
    "ReconcilePlan",
    "Snapshot",
    "baseline_record",
    "check_tail",
    "compaction_due",
    "cursor_probe",
    "cursor_record",
    "event_file_name",
    "file_ordinal",
    "idempotency_marker_name",
    "is_json_object",
    "is_orchestration_event",
    "marker_ordinal",
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

#: ``ORCHESTRATION_SCHEMA_VERSION`` (ES-066).
ORCHESTRATION_SCHEMA_VERSION: Final = 1
#: ES-064 defaults.
DEFAULT_MAX_TAIL_EVENTS: Final = 256
DEFAULT_MAX_TAIL_BYTES: Final = 4 * 1024 * 1024
DEFAULT_MAX_IDEMPOTENCY_EVENTS: Final = 512

#: Event types ``is_orchestration_event`` accepts: the durable task runtime's
#: (orchestration.md, "Undefined in the reference") plus the cleanup
#: journal's two (``docs/ledger.md``).
EVENT_TYPES: Final = frozenset(
    {
        "objective.created",
        "objective.updated",
        "objective.evidence_recorded",
        "objective.paused",
        "objective.resumed",
        "objective.cancelled",
        "objective.completed",
        "task.created",
        "task.failed",
        "attempt.queued",
        "attempt.leased",
        "attempt.started",
        "attempt.finished",
        "attempt.cancelled",
        "attempt.lease_expired",
        "cleanup.owed",
        "cleanup.settled",
    }
)
#: Actors ``is_orchestration_event`` accepts.
ACTORS: Final = frozenset({"human", "kernel", "runtime", "policy", "router", "worker"})

_NAME_RE: Final = re.compile(r"([0-9]{16})\.json")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_MAX_DEPTH: Final = 30
_EVENT_KEYS: Final = (
    "schemaVersion",
    "ordinal",
    "eventId",
    "type",
    "aggregateId",
    "actor",
    "occurredAt",
    "correlationId",
    "causationId",
    "idempotencyKey",
    "payload",
)
_REQUIRED_KEYS: Final = frozenset(
    {"schemaVersion", "ordinal", "eventId", "type", "aggregateId", "actor", "occurredAt", "payload"}
)
_UNRESERVED: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'()"
)


# --------------------------------------------------------------------------
# Names


def session_directory_name(session_id: str) -> str | OrchestrationEventStoreError:
    """The per-session directory name ``<readable>-<digest>`` (ES-001).

    ``readable`` is ``encodeURIComponent(session_id)`` with ``%`` replaced by
    ``_``, cut to 80 characters (``session`` when empty); ``digest`` is the
    first 16 hex digits of SHA-256 over the id's UTF-8.

    Implements ``event-store.ts`` ``safeSessionDirectoryName``.

    Returns:
        The name, or an error for an id holding a lone surrogate (it has no
        UTF-8 form; the reference throws too).
    """
    if not isinstance(session_id, str) or _SURROGATE.search(session_id) is not None:
        return OrchestrationEventStoreError("Session id must be a well-formed Unicode string.")
    data = session_id.encode("utf-8")
    parts: list[str] = []
    for ch in session_id:
        if ch in _UNRESERVED:
            parts.append(ch)
        else:
            parts.extend(f"_{b:02X}" for b in ch.encode("utf-8"))
    readable = "".join(parts)[:80] or "session"
    return f"{readable}-{hashlib.sha256(data).hexdigest()[:16]}"


def event_file_name(ordinal: int) -> str:
    """``<ordinal zero-padded to 16 digits>.json`` (ES-003); also snapshot names."""
    return f"{ordinal:016d}.json"


def file_ordinal(name: str) -> int | None:
    """The ordinal of an event/snapshot file name, or ``None`` for any other
    entry (ES-003: exactly 16 ASCII digits then ``.json``, full match)."""
    m = _NAME_RE.fullmatch(name)
    return int(m.group(1)) if m is not None else None


def idempotency_marker_name(key: str) -> str:
    """``<lowercase hex SHA-256 of key's UTF-8>.json`` (ES-005).

    The key must be well formed (``is_orchestration_event`` refuses lone
    surrogates before a marker name is ever derived).
    """
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest() + ".json"


# --------------------------------------------------------------------------
# Serialization and digest


def serialize(value: Any) -> bytes:
    """A record as the store writes it (ES-004): tab-indented JSON, ``": "``
    after keys, non-ASCII raw, one final newline, UTF-8 encoded.

    Raises:
        ValueError, TypeError: the value is not JSON (callers validate first;
            ``is_orchestration_event`` guarantees an event serializes).
    """
    return (json.dumps(value, indent="\t", ensure_ascii=False, allow_nan=False) + "\n").encode(
        "utf-8"
    )


def snapshot_digest(
    through_ordinal: int,
    created_at: str,
    projection: Any,
    idempotency_events: Sequence[Any],
) -> str:
    """Lowercase hex SHA-256 of the compact JSON of the snapshot content in
    the key order ``version, schemaVersion, throughOrdinal, createdAt,
    projection, idempotencyEvents`` (ES-042); nested key order is kept.

    Implements ``event-store.ts`` ``snapshotDigest``.
    """
    content = {
        "version": 1,
        "schemaVersion": ORCHESTRATION_SCHEMA_VERSION,
        "throughOrdinal": through_ordinal,
        "createdAt": created_at,
        "projection": projection,
        "idempotencyEvents": list(idempotency_events),
    }
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


# --------------------------------------------------------------------------
# Validators


def _as_int(value: Any) -> int | None:
    """A safe integer read from a file; integral floats count (Conventions)."""
    if type(value) is int:
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if type(value) is float and math.isfinite(value) and value.is_integer():
        iv = int(value)
        return iv if -MAX_SAFE_INTEGER <= iv <= MAX_SAFE_INTEGER else None
    return None


def _is_json(value: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    t = type(value)
    if value is None or t is bool or t is int:
        return t is not int or -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if t is float:
        return math.isfinite(value)
    if t is str:
        return _SURROGATE.search(value) is None
    if t is list:
        return all(_is_json(v, depth + 1) for v in value)
    if t is dict:
        return all(
            type(k) is str and _SURROGATE.search(k) is None and _is_json(v, depth + 1)
            for k, v in value.items()
        )
    return False


def is_json_object(value: Any, *, depth: int = 1) -> bool:
    """``True`` for a JSON object (``dict``) of JSON values: strings without
    lone surrogates, finite numbers, safe integers, bools, ``None``, lists and
    objects, nested at most 30 deep.

    Args:
        value: the candidate.
        depth: the nesting level ``value`` itself will have (1 = top level);
            a value meant to sit inside another object at level ``depth``
            may nest only ``30 - depth`` further levels.
    """
    return type(value) is dict and _is_json(value, depth)


def _non_empty_str(value: Any) -> bool:
    return type(value) is str and value != "" and _SURROGATE.search(value) is None


def is_orchestration_event(value: Any) -> dict[str, Any] | None:
    """Validate an event record; return it normalized, or ``None``.

    Accepts a JSON object with exactly the event's keys (extra keys are
    refused: the project's strict-decoding rule), where ``schemaVersion`` is
    1, ``ordinal`` a safe integer ≥ 1 (an integral float counts), ``eventId``,
    ``aggregateId`` and ``occurredAt`` non-empty strings, ``type`` one of
    :data:`EVENT_TYPES`, ``actor`` one of :data:`ACTORS`, the three optional
    ids absent or non-empty strings, and ``payload`` a JSON object
    (:func:`is_json_object`).

    The normalized copy has the ES-004 key order and integer ordinals; the
    payload is the same object (callers copy). Implements the proposed
    ``isOrchestrationEvent`` of orchestration.md.
    """
    if type(value) is not dict:
        return None
    keys = value.keys()
    if not keys >= _REQUIRED_KEYS or any(k not in _EVENT_KEYS for k in keys):
        return None
    if _as_int(value["schemaVersion"]) != ORCHESTRATION_SCHEMA_VERSION:
        return None
    ordinal = _as_int(value["ordinal"])
    if ordinal is None or ordinal < 1:
        return None
    for k in ("eventId", "aggregateId", "occurredAt"):
        if not _non_empty_str(value[k]):
            return None
    if value["type"] not in EVENT_TYPES or value["actor"] not in ACTORS:
        return None
    for k in ("correlationId", "causationId", "idempotencyKey"):
        if k in value and not _non_empty_str(value[k]):
            return None
    if not is_json_object(value["payload"]):
        return None
    out: dict[str, Any] = {}
    for k in _EVENT_KEYS:
        if k in value:
            out[k] = value[k]
    out["schemaVersion"] = ORCHESTRATION_SCHEMA_VERSION
    out["ordinal"] = ordinal
    return out


def _parse_json(data: bytes) -> tuple[Any] | str:
    """Parse bytes; on failure return the platform cause text (never quoting
    the input). A successful parse is wrapped in a 1-tuple."""
    try:
        return (loads(data),)
    except JsonError as exc:
        return str(exc)


def parse_event_file(name: str, data: bytes) -> dict[str, Any] | OrchestrationEventStoreError:
    """Decode an event file's bytes (ES-026).

    Returns the normalized event, or ESE "Failed to parse orchestration
    event ``name``: <cause>" / "Invalid orchestration event record: ``name``",
    naming the file. Implements ``readEventFileUnlocked``.
    """
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return OrchestrationEventStoreError(
            f"Failed to parse orchestration event {name}: {parsed}", file=name
        )
    event = is_orchestration_event(parsed[0])
    if event is None:
        return OrchestrationEventStoreError(
            f"Invalid orchestration event record: {name}", file=name
        )
    return event


@dataclasses.dataclass(frozen=True, slots=True)
class Cursor:
    """``cursor.json``: last committed ordinal and the tail's byte count
    (``tail_bytes`` may be absent in a valid cursor)."""

    last_ordinal: int
    tail_bytes: int | None


def parse_cursor(data: bytes | None) -> Cursor | None:
    """Decode ``cursor.json`` (ES-035); ``None`` when missing or invalid.

    Invalid means: not JSON, not an object, version ≠ 1, lastOrdinal not a
    safe integer ≥ 0, or tailBytes present (``null`` included) but not a safe
    integer ≥ 0. Implements ``parseCursor``.
    """
    if data is None:
        return None
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return None
    rec = parsed[0]
    if type(rec) is not dict or _as_int(rec.get("version")) != 1 or rec.get("version") is True:
        return None
    last = _as_int(rec.get("lastOrdinal"))
    if last is None or last < 0:
        return None
    tail: int | None = None
    if "tailBytes" in rec:
        tail = _as_int(rec["tailBytes"])
        if tail is None or tail < 0:
            return None
    return Cursor(last, tail)


def cursor_record(last_ordinal: int, tail_bytes: int) -> dict[str, Any]:
    """The cursor record ``{version, lastOrdinal, tailBytes}`` (ES-004 order)."""
    return {"version": 1, "lastOrdinal": last_ordinal, "tailBytes": tail_bytes}


def marker_record(key: str, ordinal: int) -> dict[str, Any]:
    """The marker record ``{version, key, ordinal}`` (ES-005)."""
    return {"version": 1, "key": key, "ordinal": ordinal}


def marker_ordinal(data: bytes) -> int | None:
    """The ordinal of a marker file's bytes whatever its key, or ``None``
    when the bytes are not a valid marker record (ES-005 shape)."""
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return None
    rec = parsed[0]
    if type(rec) is not dict or type(rec.get("key")) is not str:
        return None
    ordinal = parse_marker(data, rec["key"])
    return ordinal if type(ordinal) is int else None


def parse_marker(data: bytes, key: str) -> int | OrchestrationEventStoreError:
    """Decode marker M(key) (ES-017) to its ordinal, or an ESE whose ``file``
    names the marker (``<sha256 of key>.json``)."""
    name = idempotency_marker_name(key)
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return OrchestrationEventStoreError(
            f"Failed to parse orchestration idempotency marker: {parsed}", file=name
        )
    rec = parsed[0]
    bad = OrchestrationEventStoreError("Invalid orchestration idempotency marker.", file=name)
    if type(rec) is not dict or rec.get("version") is True or _as_int(rec.get("version")) != 1:
        return bad
    ordinal = _as_int(rec.get("ordinal"))
    if rec.get("key") != key or type(rec.get("key")) is not str or ordinal is None or ordinal < 1:
        return bad
    return ordinal


@dataclasses.dataclass(frozen=True, slots=True)
class Baseline:
    """``projection-baseline.json``: the published snapshot pointer."""

    through_ordinal: int
    digest: str
    snapshot_file: str


def parse_baseline(data: bytes) -> Baseline | OrchestrationEventStoreError:
    """Decode ``projection-baseline.json`` (ES-050).

    Implements ``readBaselineUnlocked`` (the caller handles "absent").
    """
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return OrchestrationEventStoreError(
            f"Failed to parse orchestration snapshot baseline: {parsed}",
            file="projection-baseline.json",
        )
    rec = parsed[0]
    bad = OrchestrationEventStoreError(
        "Invalid orchestration snapshot baseline.", file="projection-baseline.json"
    )
    if type(rec) is not dict or rec.get("version") is True or _as_int(rec.get("version")) != 1:
        return bad
    through = _as_int(rec.get("throughOrdinal"))
    digest = rec.get("digest")
    snap = rec.get("snapshotFile")
    if through is None or through < 1 or rec.get("throughOrdinal") is True:
        return bad
    if type(digest) is not str or digest == "" or type(snap) is not str:
        return bad
    if file_ordinal(snap) != through:
        return bad
    return Baseline(through, digest, snap)


def baseline_record(through_ordinal: int, digest: str) -> dict[str, Any]:
    """The baseline record (ES-041)."""
    return {
        "version": 1,
        "throughOrdinal": through_ordinal,
        "digest": digest,
        "snapshotFile": event_file_name(through_ordinal),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A verified projection snapshot.

    Attributes:
        through_ordinal: T.
        created_at: the store clock's text at compaction.
        projection: the projection (a JSON object; callers copy).
        idempotency_events: retained keyed events, ascending ordinals.
    """

    through_ordinal: int
    created_at: str
    projection: dict[str, Any]
    idempotency_events: tuple[dict[str, Any], ...]

    def retained(self, key: str) -> dict[str, Any] | None:
        """The retained event with idempotency key ``key``, if any."""
        for ev in self.idempotency_events:
            if ev.get("idempotencyKey") == key:
                return ev
        return None


def snapshot_record(
    through_ordinal: int,
    created_at: str,
    projection: dict[str, Any],
    idempotency_events: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The snapshot record with its digest (ES-041, ES-042)."""
    events = list(idempotency_events)
    return {
        "version": 1,
        "schemaVersion": ORCHESTRATION_SCHEMA_VERSION,
        "throughOrdinal": through_ordinal,
        "createdAt": created_at,
        "projection": projection,
        "idempotencyEvents": events,
        "digest": snapshot_digest(through_ordinal, created_at, projection, events),
    }


def parse_snapshot(data: bytes, baseline: Baseline) -> Snapshot | OrchestrationEventStoreError:
    """Decode and verify the snapshot the baseline names (ES-051, ES-052).

    The digest is recomputed from the file's content with version and
    schemaVersion as constants and throughOrdinal from the baseline.
    Implements ``readProjectionSnapshotUnlocked``.
    """
    name = baseline.snapshot_file
    parsed = _parse_json(data)
    if isinstance(parsed, str):
        return OrchestrationEventStoreError(
            f"Failed to parse orchestration projection snapshot: {parsed}", file=name
        )
    rec = parsed[0]
    bad = OrchestrationEventStoreError("Invalid orchestration projection snapshot.", file=name)
    if type(rec) is not dict:
        return bad
    for k in ("version", "schemaVersion"):
        if rec.get(k) is True or _as_int(rec.get(k)) != 1:
            return bad
    if rec.get("throughOrdinal") is True or _as_int(rec.get("throughOrdinal")) != (
        baseline.through_ordinal
    ):
        return bad
    created_at = rec.get("createdAt")
    projection = rec.get("projection")
    raw_events = rec.get("idempotencyEvents")
    if type(created_at) is not str or type(projection) is not dict or type(raw_events) is not list:
        return bad
    events: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in raw_events:
        ev = is_orchestration_event(raw)
        if ev is None or ev["ordinal"] > baseline.through_ordinal or "idempotencyKey" not in ev:
            return bad
        if ev["idempotencyKey"] in seen:
            return bad
        seen.add(ev["idempotencyKey"])
        events.append(ev)
    digest = rec.get("digest")
    if type(digest) is not str or digest != baseline.digest:
        return bad
    try:
        actual = snapshot_digest(baseline.through_ordinal, created_at, projection, raw_events)
    except (ValueError, TypeError, RecursionError):
        return bad
    if actual != baseline.digest:
        return OrchestrationEventStoreError(
            "Orchestration projection snapshot digest mismatch.", file=name
        )
    return Snapshot(baseline.through_ordinal, created_at, projection, tuple(events))


# --------------------------------------------------------------------------
# Decisions


def positive_safe_integer(
    value: Any, default: int, label: str
) -> int | OrchestrationEventStoreError:
    """An option in 1..2**53-1, ``None`` meaning ``default`` (ES-064, ES-065)."""
    resolved = default if value is None else value
    if type(resolved) is not int or not 1 <= resolved <= MAX_SAFE_INTEGER:
        return OrchestrationEventStoreError(f"{label} must be a positive safe integer.")
    return resolved


def check_tail(
    ordinals: Sequence[int], baseline_ordinal: int, cursor: Cursor | None
) -> int | OrchestrationEventStoreError:
    """Tail contiguity and cursor-ahead checks (ES-033, ES-034).

    Args:
        ordinals: the event-file ordinals, ascending.
        baseline_ordinal: T (0 without a baseline).
        cursor: the parsed cursor, if valid.

    Returns:
        H = max(T, highest event ordinal), or the ESE of the first gap
        ("Missing orchestration event ordinal X before <name>.") or of a cursor
        ahead of H. Implements ``assertReadableTailUnlocked``.
    """
    expected = baseline_ordinal + 1
    for n in ordinals:
        if n <= baseline_ordinal:
            continue
        if n != expected:
            name = event_file_name(n)
            return OrchestrationEventStoreError(
                f"Missing orchestration event ordinal {expected} before {name}.", file=name
            )
        expected += 1
    highest = max(baseline_ordinal, ordinals[-1] if ordinals else 0)
    if cursor is not None and cursor.last_ordinal > highest:
        return OrchestrationEventStoreError(
            f"Orchestration cursor {cursor.last_ordinal} is ahead of the last committed "
            f"event {highest}.",
            file="cursor.json",
        )
    return highest


@dataclasses.dataclass(frozen=True, slots=True)
class ReconcilePlan:
    """What reconciliation must do (ES-055..059).

    Attributes:
        highest: H.
        fast: the cursor already matches: open nothing, write nothing.
        rebuild_from: the first ordinal whose file is read and whose marker
            is rewritten (meaningful when not ``fast``).
        tail_bytes: the cursor's tailBytes on the fast path.
    """

    highest: int
    fast: bool
    rebuild_from: int
    tail_bytes: int


def plan_reconciliation(
    ordinals: Sequence[int], baseline_ordinal: int, cursor: Cursor | None
) -> ReconcilePlan | OrchestrationEventStoreError:
    """Decide reconciliation from a listing, T and the cursor.

    Implements ``synchronizeIndexesUnlocked``'s decisions: the tail checks;
    the fast path (tailBytes present, lastOrdinal = H, and H > T or
    tailBytes = 0); otherwise a rebuild from C+1 for a valid cursor with
    T ≤ C ≤ H, else from T+1.
    """
    highest = check_tail(ordinals, baseline_ordinal, cursor)
    if isinstance(highest, OrchestrationEventStoreError):
        return highest
    if (
        cursor is not None
        and cursor.last_ordinal == highest
        and cursor.tail_bytes is not None
        and (highest > baseline_ordinal or cursor.tail_bytes == 0)
    ):
        return ReconcilePlan(highest, True, highest + 1, cursor.tail_bytes)
    start = baseline_ordinal + 1
    if cursor is not None and baseline_ordinal <= cursor.last_ordinal <= highest:
        start = max(start, cursor.last_ordinal + 1)
    return ReconcilePlan(highest, False, start, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class CursorProbe:
    """The two file checks that confirm a cursor without a listing (ES-055).

    Attributes:
        present: the ordinal whose event file must exist (C, when C > T),
            or ``None`` when the cursor is at T (no tail file to confirm).
        absent: the ordinal whose event file must not exist (C+1).
        highest: H when both checks pass (C).
        tail_bytes: the cursor's tailBytes, the tail's size in bytes.
    """

    present: int | None
    absent: int
    highest: int
    tail_bytes: int


def cursor_probe(cursor: Cursor | None, baseline_ordinal: int) -> CursorProbe | None:
    """What confirms a cursor as the last ordinal, or ``None`` to list instead.

    Every append writes its event file before the cursor and reconciles a
    lagging cursor before writing, so in any state a crash leaves, the tail
    is T+1..H and the cursor is either at H or behind it. A valid cursor
    C with tailBytes present, T ≤ C, and tailBytes = 0 when C = T is then at
    H exactly when ``events/<C>`` exists (for C > T) and ``events/<C+1>``
    does not: the same condition as :func:`plan_reconciliation`'s fast path,
    at two stats instead of a listing whatever the size of the store.
    A cursor ahead (E(C) missing) or behind (E(C+1) present) fails a check,
    and the caller lists and runs :func:`plan_reconciliation`, which reports
    or repairs it (ES-034, ES-056..059). A gap below C, which only deleting
    a file makes, is not seen here; reads and compaction list and report it
    (ES-033).

    Args:
        cursor: the parsed cursor, if valid.
        baseline_ordinal: T (0 without a baseline).

    Returns:
        The checks to make, or ``None`` when the cursor cannot be trusted
        (absent, invalid, without tailBytes, below T, or at T with
        tailBytes > 0 as a crashed compaction leaves it).
    """
    if cursor is None or cursor.tail_bytes is None:
        return None
    last = cursor.last_ordinal
    if last < baseline_ordinal or (last == baseline_ordinal and cursor.tail_bytes != 0):
        return None
    present = last if last > baseline_ordinal else None
    return CursorProbe(present, last + 1, last, cursor.tail_bytes)


def prelock_skip(
    cursor: Cursor | None,
    baseline_ordinal: int,
    through_ordinal: int,
    max_tail_events: int,
    max_tail_bytes: int,
) -> bool:
    """``True`` when compaction may return False without the lock (ES-038)."""
    return (
        cursor is not None
        and cursor.last_ordinal == through_ordinal
        and cursor.tail_bytes is not None
        and through_ordinal - baseline_ordinal < max_tail_events
        and cursor.tail_bytes < max_tail_bytes
    )


def compaction_due(
    tail_files: int, tail_bytes: int, max_tail_events: int, max_tail_bytes: int
) -> bool:
    """The tail reached ``max_tail_events`` files or ``max_tail_bytes`` (ES-036)."""
    return tail_files >= max_tail_events or tail_bytes >= max_tail_bytes


def merge_retained(
    retained: Sequence[dict[str, Any]],
    tail: Sequence[dict[str, Any]],
    limit: int,
) -> list[dict[str, Any]]:
    """The new retained idempotency events (ES-043): the union by key of the
    old snapshot's events and the tail's keyed events (a tail event replaces
    an older one), sorted by ordinal, cut to the last ``limit``."""
    by_key: dict[str, dict[str, Any]] = {}
    for ev in list(retained) + list(tail):
        key = ev.get("idempotencyKey")
        if isinstance(key, str) and key:
            by_key[key] = ev
    merged = sorted(by_key.values(), key=lambda e: int(e["ordinal"]))
    return merged[-limit:] if limit > 0 else []
