"""The orchestration ledger on PostgreSQL (``PostgresEventStore``).

Needs the extra ``leasegate[postgres]`` (psycopg 3 and psycopg-pool).

Theory of operation
===================

One database holds every session of every runner host of a fleet, in the
schema ``leasegate`` that :func:`ensure_schema` creates and migrates
(versioned: ``leasegate.schema_version``; the tables are in
``docs/ledger.md``):

* ``sessions``: one row per session: the head (last ordinal H), the
  snapshot's ordinal T with the snapshot record and its digest, and the
  tail's size (events and bytes since T);
* ``events``: one row per committed event above T, primary key
  ``(session_id, ordinal)``; unique ``(session_id, event_id)``;
* ``idempotency``: one row per idempotency key, primary key
  ``(session_id, idempotency_key)``: the unique constraint that makes a key
  commit once; after a compaction it carries the retained event itself;
* ``pruned_events``: the event id → ordinal of each event a compaction
  pruned, within ``max_pruned_event_ids`` ordinals of T.

An append is one row checked and written by the server function
``leasegate.append_event``: it locks the session's head row (``SELECT ...
FOR UPDATE``), answers a known key or event id with the stored event,
compares ``expected_last_ordinal`` with H (optimistic concurrency as a
conditional insert: the event row is written only when H matches), inserts
the event at H + 1 and moves the head. The ordinal is allocated inside the
transaction that writes the event, under the head row's lock: a rolled-back
append frees its ordinal with it (never a gap) and two writers never read
the same H (never a duplicate), whatever the number of hosts. The commit is
the acknowledgement; with ``synchronous_commit = on`` it is durable on the
server (and on its synchronous standbys) when the call returns.

Group commit: the head row's lock is held until the commit's WAL flush, so
appends to one session commit one flush after another. Concurrent appends
of one process to one session therefore commit together: the first caller
runs ``leasegate.append_events`` (``append_event`` for each queued append,
in arrival order) in one transaction for every append queued when it
starts, and hands over to the next waiting caller when done. One flush
acknowledges the whole group; each append is still checked on its own (its
key, its expected ordinal), and a statement the server refuses is retried
one append at a time so a bad append fails alone.

A lost connection during an append is retried within ``retry_timeout_s``
with the same event id: the function answers an event id it already
committed with that event (from ``events``, or from ``pruned_events`` when
another host compacted in between), so a retry never appends twice.

Compaction is one transaction: lock the head, write the snapshot into the
session row, delete the events ≤ T (their ids and ordinals go to
``pruned_events``, those ≤ T − ``max_pruned_event_ids`` are dropped), keep the newest
``max_idempotency_events`` keyed events in ``idempotency`` (ES-043) and
drop the other keys. Readers see the old tail or the new snapshot, never a
mix (each read is one statement).

After each group commits, one ``NOTIFY`` on channel ``leasegate_events``
(payload :func:`notify_payload`: ``<session_id> <H>``) is sent in its own
transaction, committed asynchronously: a ``NOTIFY`` inside the appending
transaction would hold the database-wide notification lock through the WAL
flush and serialize every session's commits. The notification is a wake-up,
not data: :meth:`PostgresEventStore.watch` reads after its position on a
notification and on a timer, so one lost (the notifying host died between
its commit and the ``NOTIFY``) delays delivery by at most the poll interval.
The contract's :meth:`subscribe` stays "events this instance committed"
(ES-060).

Secrets never reach the database: the event is validated by the same
predicate as the file store's (a :class:`~leasegate.core.Secret` is not JSON
and is refused before any statement), and error messages carry the
failure's class and SQLSTATE, never a statement's parameters.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from leasegate.core import is_safe_int
from leasegate.core.ledger import (
    ORCHESTRATION_SCHEMA_VERSION,
    Baseline,
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
    compaction_due,
    event_file_name,
    is_json_object,
    is_orchestration_event,
    merge_retained,
    parse_snapshot,
    positive_safe_integer,
    serialize,
    snapshot_record,
)

from .contract import EventListener, OrchestrationStoreUnavailableError
from .event_store import (
    AppendEventInput,
    ProjectionSnapshot,
    candidate_event,
    iso_now,
    store_limits,
)

__all__ = [
    "DEFAULT_MAX_PRUNED_EVENT_IDS",
    "MAX_GROUP_APPENDS",
    "NOTIFY_CHANNEL",
    "SCHEMA_VERSION",
    "WATCH_APPLICATION_NAME",
    "EventWatch",
    "PostgresEventStore",
    "create_pool",
    "ensure_schema",
    "list_sessions",
    "notify_payload",
]

#: The schema version this library creates and reads.
SCHEMA_VERSION = 3
#: How many of the newest pruned events' ids a compaction keeps by default
#: (``max_pruned_event_ids``): a retry whose answer was lost finds its event
#: among them after another host compacted.
DEFAULT_MAX_PRUNED_EVENT_IDS = 100_000
#: The most appends one transaction commits together (see ``append``).
MAX_GROUP_APPENDS = 64
#: The channel every committed append notifies (payload: :func:`notify_payload`).
NOTIFY_CHANNEL = "leasegate_events"
#: The ``application_name`` of a :meth:`PostgresEventStore.watch` connection.
WATCH_APPLICATION_NAME = "leasegate-watch"

Event = dict[str, Any]

# ``leasegate.append_event`` as version 1 created it; version 3 replaces it
# with one that also finds an event id a compaction pruned (a retry whose
# answer was lost, after another host compacted).
_APPEND_EVENT = """
{create} FUNCTION leasegate.append_event(
    p_session text, p_expected bigint, p_event_id text, p_type text, p_aggregate text,
    p_actor text, p_occurred text, p_correlation text, p_causation text, p_key text,
    p_payload json, p_bytes bigint, p_notify boolean
) RETURNS TABLE (outcome text, out_ordinal bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    h bigint;
    found_ordinal bigint;
BEGIN
    SELECT s.last_ordinal INTO h FROM leasegate.sessions s
        WHERE s.session_id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO leasegate.sessions (session_id) VALUES (p_session)
            ON CONFLICT (session_id) DO NOTHING;
        SELECT s.last_ordinal INTO h FROM leasegate.sessions s
            WHERE s.session_id = p_session FOR UPDATE;
    END IF;
    SELECT e.ordinal INTO found_ordinal FROM leasegate.events e
        WHERE e.session_id = p_session AND e.event_id = p_event_id;
    IF FOUND THEN
        RETURN QUERY SELECT 'retried'::text, found_ordinal;
        RETURN;
    END IF;
{pruned_lookup}    IF p_key IS NOT NULL THEN
        SELECT i.ordinal INTO found_ordinal FROM leasegate.idempotency i
            WHERE i.session_id = p_session AND i.idempotency_key = p_key;
        IF FOUND THEN
            RETURN QUERY SELECT 'duplicate'::text, found_ordinal;
            RETURN;
        END IF;
    END IF;
    IF p_expected IS NOT NULL AND p_expected <> h THEN
        RETURN QUERY SELECT 'conflict'::text, h;
        RETURN;
    END IF;
    INSERT INTO leasegate.events (session_id, ordinal, event_id, type, aggregate_id, actor,
        occurred_at, correlation_id, causation_id, idempotency_key, payload)
    VALUES (p_session, h + 1, p_event_id, p_type, p_aggregate, p_actor, p_occurred,
        p_correlation, p_causation, p_key, p_payload);
    IF p_key IS NOT NULL THEN
        INSERT INTO leasegate.idempotency (session_id, idempotency_key, ordinal)
            VALUES (p_session, p_key, h + 1);
    END IF;
    UPDATE leasegate.sessions SET last_ordinal = h + 1, tail_events = tail_events + 1,
        tail_bytes = tail_bytes + p_bytes WHERE session_id = p_session;
    IF p_notify THEN
        PERFORM pg_notify('leasegate_events', p_session || ' ' || (h + 1)::text);
    END IF;
    RETURN QUERY SELECT 'appended'::text, h + 1;
END
$fn$;
"""
_PRUNED_LOOKUP = """    SELECT p.ordinal INTO found_ordinal FROM leasegate.pruned_events p
        WHERE p.session_id = p_session AND p.event_id = p_event_id;
    IF FOUND THEN
        RETURN QUERY SELECT 'retried'::text, found_ordinal;
        RETURN;
    END IF;
"""

_MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE leasegate.sessions (
    session_id text PRIMARY KEY,
    last_ordinal bigint NOT NULL DEFAULT 0,
    through_ordinal bigint NOT NULL DEFAULT 0,
    snapshot text,
    snapshot_digest text,
    tail_events bigint NOT NULL DEFAULT 0,
    tail_bytes bigint NOT NULL DEFAULT 0,
    CHECK (through_ordinal <= last_ordinal)
);
CREATE TABLE leasegate.events (
    session_id text NOT NULL REFERENCES leasegate.sessions (session_id),
    ordinal bigint NOT NULL CHECK (ordinal >= 1),
    event_id text NOT NULL,
    type text NOT NULL,
    aggregate_id text NOT NULL,
    actor text NOT NULL,
    occurred_at text NOT NULL,
    correlation_id text,
    causation_id text,
    idempotency_key text,
    payload json NOT NULL,
    PRIMARY KEY (session_id, ordinal),
    UNIQUE (session_id, event_id)
);
CREATE TABLE leasegate.idempotency (
    session_id text NOT NULL REFERENCES leasegate.sessions (session_id),
    idempotency_key text NOT NULL,
    ordinal bigint NOT NULL,
    retained_event text,
    PRIMARY KEY (session_id, idempotency_key)
);
"""
    + _APPEND_EVENT.format(create="CREATE", pruned_lookup=""),
    2: """
CREATE FUNCTION leasegate.append_events(p_session text, p_items json, p_payloads text[])
RETURNS TABLE (idx bigint, outcome text, out_ordinal bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    item json;
    n bigint;
BEGIN
    FOR item, n IN SELECT x.value, x.ordinality
        FROM json_array_elements(p_items) WITH ORDINALITY AS x LOOP
        RETURN QUERY SELECT n, a.outcome, a.out_ordinal FROM leasegate.append_event(
            p_session, (item->>'expected')::bigint, item->>'eventId', item->>'type',
            item->>'aggregateId', item->>'actor', item->>'occurredAt',
            item->>'correlationId', item->>'causationId', item->>'idempotencyKey',
            p_payloads[n]::json, (item->>'bytes')::bigint, false) a;
    END LOOP;
END
$fn$;
""",
    3: """
CREATE TABLE leasegate.pruned_events (
    session_id text NOT NULL REFERENCES leasegate.sessions (session_id),
    event_id text NOT NULL,
    ordinal bigint NOT NULL,
    PRIMARY KEY (session_id, event_id)
);
CREATE INDEX pruned_events_by_ordinal ON leasegate.pruned_events (session_id, ordinal);
"""
    + _APPEND_EVENT.format(create="CREATE OR REPLACE", pruned_lookup=_PRUNED_LOOKUP),
}

_APPEND_EVENTS = (
    "SELECT idx, outcome, out_ordinal FROM leasegate.append_events(%s, %s::json, %s::text[])"
)
# A notification is a wake-up for watchers, not data: it is sent after the
# append committed, in its own transaction committed asynchronously, so the
# database-wide lock NOTIFY takes at commit is never held through a WAL flush.
_NOTIFY_AFTER_COMMIT = "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s)"

_SELECT_EVENTS = (
    "SELECT ordinal, event_id, type, aggregate_id, actor, occurred_at, correlation_id,"
    " causation_id, idempotency_key, payload::text FROM leasegate.events"
)
_READ_TAIL = (
    "SELECT s.through_ordinal, s.last_ordinal, e.ordinal, e.event_id, e.type,"
    " e.aggregate_id, e.actor, e.occurred_at, e.correlation_id, e.causation_id,"
    " e.idempotency_key, e.payload::text"
    " FROM leasegate.sessions s LEFT JOIN leasegate.events e"
    " ON e.session_id = s.session_id"
    " AND e.ordinal > GREATEST(s.through_ordinal, COALESCE(%s, 0))"
    " WHERE s.session_id = %s ORDER BY e.ordinal"
)


def _unavailable(exc: BaseException, doing: str) -> OrchestrationStoreUnavailableError:
    """A typed error naming the failure's class and SQLSTATE only (a psycopg
    message can quote a statement's parameters)."""
    sqlstate = getattr(exc, "sqlstate", None)
    code = f" (SQLSTATE {sqlstate})" if sqlstate else ""
    return OrchestrationStoreUnavailableError(
        f"PostgreSQL orchestration store unavailable while {doing}: {type(exc).__name__}{code}.",
        sqlstate=sqlstate if isinstance(sqlstate, str) else None,
    )


#: SQLSTATE of a value too long for an index entry (about 2.7 KB per entry).
_PROGRAM_LIMIT_EXCEEDED = "54000"


def _too_long(exc: BaseException) -> OrchestrationEventStoreError:
    """Invalid input, not an outage: an idempotency key, event id or session
    id too long for PostgreSQL's index (a retry cannot cure it)."""
    return OrchestrationEventStoreError(
        "Invalid orchestration event input: the session id and idempotency key or event id "
        f"are too long for a PostgreSQL index entry: {type(exc).__name__} "
        f"(SQLSTATE {_PROGRAM_LIMIT_EXCEEDED})."
    )


def _transient(exc: BaseException) -> bool:
    """A failure a retry on a fresh connection can cure: a lost connection,
    a pool timeout, a server shutting down or a serialization failure."""
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg.OperationalError):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and (
        sqlstate.startswith("08") or sqlstate.startswith("57P") or sqlstate in ("40001", "40P01")
    )


def create_pool(
    conninfo: str,
    *,
    min_size: int = 1,
    max_size: int = 8,
    timeout_s: float = 10.0,
    migrate: bool = True,
    prepare_threshold: int | None = 5,
) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
    """Open a connection pool for :class:`PostgresEventStore`, check the
    server's durability settings and create, migrate or check the schema.

    Args:
        conninfo: a libpq connection string or URI
            (``postgresql://user@host:5432/db?sslmode=verify-full``). It may
            hold a password: it is passed to libpq only, never logged.
        min_size, max_size: pool bounds, in connections.
        timeout_s: longest wait for a free connection, in seconds.
        migrate: run :func:`ensure_schema` once on open (the role needs
            ``CREATE``); ``False`` only checks that the schema is at
            :data:`SCHEMA_VERSION` (a least-privileged role, docs/ledger.md).
        prepare_threshold: psycopg's server-side prepared statements (after
            this many runs of a statement on a connection); ``None`` turns
            them off (a transaction-mode pooler without prepared-statement
            support).

    Returns:
        An open pool of autocommit connections. A connection is not checked
        when it is taken (that would cost a round trip per operation): one
        that died while idle (a server restart) fails its first statement,
        which the store retries on a fresh connection.

    Raises:
        OrchestrationStoreUnavailableError: the server could not be reached,
            or refused the migration.
        OrchestrationEventStoreError: ``synchronous_commit`` or ``fsync`` is
            ``off`` for this role and database (a returned append would not
            be durable), or the schema is newer than this library, or (with
            ``migrate=False``) not at :data:`SCHEMA_VERSION`.
    """
    pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = psycopg_pool.ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout_s,
        kwargs={"autocommit": True, "prepare_threshold": prepare_threshold},
        open=False,
    )
    try:
        pool.open(wait=True, timeout=timeout_s)
        with pool.connection() as conn:
            _check_durability(conn)
            if migrate:
                ensure_schema(conn)
            else:
                _check_schema_version(conn)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        pool.close()
        raise _unavailable(exc, "opening the pool") from None
    except BaseException:
        pool.close()
        raise
    return pool


def _check_durability(conn: psycopg.Connection[Any]) -> None:
    """Refuse a server or role on which a commit is not durable when it
    returns (``synchronous_commit`` or ``fsync`` off)."""
    for name in ("synchronous_commit", "fsync"):
        row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
        if row is not None and str(row[0]) == "off":
            raise OrchestrationEventStoreError(
                f"PostgreSQL {name} is off: an acknowledged append would not be durable."
            )


def _check_schema_version(conn: psycopg.Connection[Any]) -> None:
    """Refuse a database whose ``leasegate`` schema is not this library's."""
    try:
        row = conn.execute("SELECT version FROM leasegate.schema_version").fetchone()
    except psycopg.errors.UndefinedTable:
        row = None
    version = 0 if row is None else int(row[0])
    if version != SCHEMA_VERSION:
        raise OrchestrationEventStoreError(
            f"The database's leasegate schema is version {version}; this library "
            f"needs {SCHEMA_VERSION} (run ensure_schema as the schema's owner)."
        )


def ensure_schema(conn: psycopg.Connection[Any]) -> int:
    """Create or migrate the ``leasegate`` schema to :data:`SCHEMA_VERSION`.

    Runs in one transaction under a transaction-level advisory lock, so
    hosts starting together migrate once. Idempotent.

    Returns:
        The schema version now in the database.

    Raises:
        OrchestrationEventStoreError: the database holds a newer version
            than this library knows (upgrade the library first).
        psycopg.Error: the server refused (e.g. no ``CREATE`` privilege).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('leasegate.schema'))")
        conn.execute("CREATE SCHEMA IF NOT EXISTS leasegate")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS leasegate.schema_version ("
            " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
            " version integer NOT NULL)"
        )
        row = conn.execute("SELECT version FROM leasegate.schema_version").fetchone()
        version = 0 if row is None else int(row[0])
        if version > SCHEMA_VERSION:
            raise OrchestrationEventStoreError(
                f"The database's leasegate schema is version {version}; this library "
                f"knows up to {SCHEMA_VERSION}."
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            conn.execute(sql.SQL(_MIGRATIONS[target]))
        if version == 0:
            conn.execute("INSERT INTO leasegate.schema_version (version) VALUES (%s)", (1,))
        conn.execute("UPDATE leasegate.schema_version SET version = %s", (SCHEMA_VERSION,))
    return SCHEMA_VERSION


def list_sessions(
    pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]], prefix: str = ""
) -> list[tuple[str, int]]:
    """Every session whose id starts with ``prefix``, with its last ordinal H,
    ordered by id (e.g. ``prefix="cleanup-journal:"`` lists the fleet's
    cleanup journals).

    Raises:
        OrchestrationStoreUnavailableError: the server could not be reached.
    """
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    try:
        with pool.connection() as conn:
            rows = conn.execute(
                "SELECT session_id, last_ordinal FROM leasegate.sessions"
                " WHERE session_id LIKE %s ORDER BY session_id",
                (pattern,),
            ).fetchall()
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise _unavailable(exc, "listing sessions") from None
    return [(str(r[0]), int(r[1])) for r in rows]


def _event_from_row(row: tuple[Any, ...]) -> Event:
    """An event dict in the store's key order from an ``events`` row."""
    ordinal, event_id, type_, aggregate, actor, occurred, corr, caus, key, payload = row
    event: Event = {
        "schemaVersion": ORCHESTRATION_SCHEMA_VERSION,
        "ordinal": int(ordinal),
        "eventId": event_id,
        "type": type_,
        "aggregateId": aggregate,
        "actor": actor,
        "occurredAt": occurred,
    }
    for name, value in (("correlationId", corr), ("causationId", caus), ("idempotencyKey", key)):
        if value is not None:
            event[name] = value
    event["payload"] = json.loads(payload)
    return event


def notify_payload(session_id: str, ordinal: int) -> str:
    """The ``NOTIFY`` payload of an append: ``<session_id> <ordinal>``, or
    ``sha256:<hex of the session id> <ordinal>`` when that would reach
    PostgreSQL's payload limit (8000 bytes)."""
    payload = f"{session_id} {ordinal}"
    if len(payload.encode("utf-8")) < _NOTIFY_PAYLOAD_LIMIT:
        return payload
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
    return f"sha256:{digest} {ordinal}"


_NOTIFY_PAYLOAD_LIMIT = 8000


class _PendingAppend:
    """One append call waiting in its session's group commit."""

    __slots__ = ("done", "error", "expected", "lead", "notify", "record", "result", "size")

    def __init__(self, record: Event, expected: int | None, size: int, notify: bool) -> None:
        self.record = record
        self.expected = expected
        self.size = size
        self.notify = notify
        self.done = threading.Event()
        self.lead = False
        self.result: tuple[str, int, Event | None] | None = None
        self.error: BaseException | None = None


class _GroupCommit:
    """The appends of one process (one pool) to one session, committed
    together: the first caller leads and commits every append queued when
    it starts (at most :data:`MAX_GROUP_APPENDS`) in one transaction, the
    others wait; when it is done it hands the lead to the oldest caller
    still queued. A lone caller commits at once (no added wait); under
    load, one WAL flush acknowledges many appends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[_PendingAppend] = []
        self.busy = False

    def submit(
        self,
        pending: _PendingAppend,
        commit: Callable[[list[_PendingAppend]], Callable[[], None] | None],
    ) -> None:
        """Queue ``pending`` and return when it has its result or error.

        ``commit(batch)`` sets each one's result or error and may return a
        follow-up (the ``NOTIFY``), which the leader runs after handing the
        lead on, so the next group commits meanwhile."""
        with self.lock:
            self.queue.append(pending)
            lead = not self.busy
            self.busy = True
        if not lead:
            pending.done.wait()
            if not pending.lead:
                return
        after: Callable[[], None] | None = None
        try:
            with self.lock:
                batch = self.queue[:MAX_GROUP_APPENDS]
                del self.queue[:MAX_GROUP_APPENDS]
            try:
                after = commit(batch)
            except BaseException:
                for other in batch:
                    if other.result is None and other.error is None:
                        other.error = OrchestrationStoreUnavailableError(
                            "PostgreSQL orchestration store append interrupted; "
                            "it may have committed."
                        )
                        other.done.set()
                raise
        finally:
            with self.lock:
                if self.queue:
                    self.queue[0].lead = True
                    self.queue[0].done.set()
                else:
                    self.busy = False
        if after is not None:
            after()


def _run_all(hooks: list[Callable[[], None]]) -> Callable[[], None] | None:
    """One follow-up running ``hooks`` in order, or ``None`` for none."""
    if not hooks:
        return None

    def run() -> None:
        for hook in hooks:
            hook()

    return run


_GROUPS_LOCK = threading.Lock()
_GROUPS: weakref.WeakKeyDictionary[Any, dict[tuple[str, float], _GroupCommit]] = (
    weakref.WeakKeyDictionary()
)


def _group_commit(pool: Any, key: tuple[str, float]) -> _GroupCommit:
    """The group commit of ``key`` (session id, retry timeout) on ``pool``."""
    with _GROUPS_LOCK:
        groups = _GROUPS.setdefault(pool, {})
        group = groups.get(key)
        if group is None:
            group = groups[key] = _GroupCommit()
        return group


def _forget_idle_group(pool: Any, key: tuple[str, float], group: _GroupCommit) -> None:
    """Drop ``group`` from the registry when nobody is queued on it (a late
    caller still holding it leads it alone: the database orders both)."""
    with _GROUPS_LOCK:
        groups = _GROUPS.get(pool)
        with group.lock:
            if groups is not None and groups.get(key) is group and not group.busy:
                del groups[key]


class PostgresEventStore:
    """One session's event log in PostgreSQL (the :class:`~.contract.EventStore`
    contract), shared by every host that opens the same session id.

    Args:
        pool: a pool from :func:`create_pool` (one per process; shared by
            any number of stores).
        session_id: any non-empty string without NUL (ES-001's session).
        now: returns the ``occurredAt``/``createdAt`` text (default
            :func:`~.event_store.iso_now`).
        create_event_id: returns a new ``eventId`` (default: a UUID v4).
            Called once per append call, before the outcome is known.
        max_tail_events, max_tail_bytes, max_idempotency_events: as the file
            store's (ES-065; bytes are those of the file format's event).
        max_pruned_event_ids: a compaction by this store keeps the event id
            and ordinal of each pruned event within this many ordinals of
            its T (those > T − this), and drops older ones: a retried append
            whose first try committed is found there (default
            :data:`DEFAULT_MAX_PRUNED_EVENT_IDS`, in events).
        retry_timeout_s: how long an operation retries a lost connection or
            a server restart before raising, in seconds (finite, ≥ 0).
        notify: ``NOTIFY`` after each committed group of appends (what
            :meth:`watch` on other hosts wakes on; one short transaction
            after the commit, off the appends' WAL flush).

    Raises:
        OrchestrationEventStoreError: a limit is not a positive safe
            integer, the retry timeout is not finite and ≥ 0, or the session
            id is empty or holds NUL.

    Construction touches no database. The instance is thread-safe (each call
    takes its own connection from the pool).
    """

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]],
        session_id: str,
        *,
        now: Callable[[], str] | None = None,
        create_event_id: Callable[[], str] | None = None,
        max_tail_events: int | None = None,
        max_tail_bytes: int | None = None,
        max_idempotency_events: int | None = None,
        max_pruned_event_ids: int = DEFAULT_MAX_PRUNED_EVENT_IDS,
        retry_timeout_s: float = 10.0,
        notify: bool = True,
    ) -> None:
        if type(session_id) is not str or not session_id or "\x00" in session_id:
            raise OrchestrationEventStoreError(
                "Orchestration session id must be a non-empty string without NUL."
            )
        self.max_tail_events, self.max_tail_bytes, self.max_idempotency_events = store_limits(
            max_tail_events, max_tail_bytes, max_idempotency_events
        )
        pruned = positive_safe_integer(
            max_pruned_event_ids, DEFAULT_MAX_PRUNED_EVENT_IDS, "maxPrunedEventIds"
        )
        if isinstance(pruned, OrchestrationEventStoreError):
            raise pruned
        self.max_pruned_event_ids = pruned
        if (
            type(retry_timeout_s) not in (int, float)
            or not math.isfinite(retry_timeout_s)
            or retry_timeout_s < 0
        ):
            raise OrchestrationEventStoreError(
                "retryTimeout must be a finite, non-negative number of seconds."
            )
        self.pool = pool
        self.session_id = session_id
        self.retry_timeout_s = float(retry_timeout_s)
        self.notify = bool(notify)
        self._now = now or iso_now
        self._create_event_id = create_event_id or (lambda: str(uuid.uuid4()))
        self._listeners: dict[EventListener, None] = {}

    def __repr__(self) -> str:
        return f"PostgresEventStore(session_id={self.session_id!r})"

    # ------------------------------------------------------------------
    # Connection handling

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn:
            yield conn

    def _retrying(self, doing: str, op: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run ``op`` on a pooled connection; retry transient failures until
        ``retry_timeout_s`` passed, then raise typed."""
        try:
            return self._retrying_raw(op)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise _unavailable(exc, doing) from None

    def _retrying_raw(self, op: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run ``op`` on a pooled connection; retry transient failures (the
        first at once: a pooled connection may have died while idle, then
        with backoff up to 1 s) until ``retry_timeout_s`` passed, then
        re-raise the last one."""
        deadline = time.monotonic() + self.retry_timeout_s
        delay = 0.0
        while True:
            try:
                with self._connection() as conn:
                    return op(conn)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                if not _transient(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(max(delay * 2, 0.05), 1.0)

    # ------------------------------------------------------------------
    # The contract

    def append(self, item: AppendEventInput, *, expected_last_ordinal: int | None = None) -> Event:
        """Append one event and return it (a deep copy); see
        :meth:`~.contract.EventStore.append` (ES-007..022).

        Concurrent appends of this process (any store on the same pool)
        to the same session commit together: one transaction, one call of
        ``leasegate.append_events`` checking each append in turn (its key,
        its ``expected_last_ordinal``, in arrival order) and one WAL flush
        for all of them. A lost connection is retried with the same event
        ids within ``retry_timeout_s``; a retry returns an event the first
        try had committed instead of appending it twice. After the commit
        a ``NOTIFY`` (committed asynchronously; a wake-up, not data) tells
        other hosts' :meth:`watch`.

        Raises:
            OrchestrationConcurrencyError: ``expected_last_ordinal`` ≠ H.
            OrchestrationEventStoreError: invalid input (before any
                statement; also a NUL in a string field other than the
                payload, which a PostgreSQL ``text`` cannot hold), the
                clock or id source returned an invalid value, or the
                session id with the idempotency key or event id is too
                long for an index entry (about 2.7 KB; SQLSTATE 54000,
                nothing stored).
            OrchestrationStoreUnavailableError: the server stayed
                unreachable or refused the statement; the append is not
                acknowledged (it may have committed: retry with the same
                idempotency key).
            Exception: whatever a listener raised, after the commit (ES-062).
        """
        record = candidate_event(item)
        if expected_last_ordinal is not None and not is_safe_int(expected_last_ordinal):
            raise OrchestrationEventStoreError("expectedLastOrdinal must be a safe integer.")
        record["eventId"] = self._create_event_id()
        record["occurredAt"] = self._now()
        if is_orchestration_event(record) is None:
            raise OrchestrationEventStoreError(
                "Invalid orchestration event: the clock or id source returned an invalid value."
            )
        # Every string but the payload goes to a text column (no NUL there).
        if any(type(v) is str and "\x00" in v for k, v in record.items() if k != "payload"):
            raise OrchestrationEventStoreError(
                "Invalid orchestration event input: PostgreSQL text cannot hold NUL."
            )
        pending = _PendingAppend(record, expected_last_ordinal, len(serialize(record)), self.notify)
        key = (self.session_id, self.retry_timeout_s)
        group = _group_commit(self.pool, key)
        try:
            group.submit(pending, self._commit_group)
        finally:
            if not group.busy:
                _forget_idle_group(self.pool, key, group)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        outcome, ordinal, stored = pending.result
        if outcome == "conflict":
            assert expected_last_ordinal is not None
            raise OrchestrationConcurrencyError(expected_last_ordinal, ordinal)
        if outcome == "duplicate":
            assert stored is not None
            return stored
        record["ordinal"] = ordinal
        event = copy.deepcopy(record)
        # "retried": an earlier try of this call committed the event (its
        # answer was lost with the connection); event ids are unique.
        if outcome in ("appended", "retried"):
            for listener in list(self._listeners):
                listener(copy.deepcopy(event))
        return event

    def _commit_group(self, batch: list[_PendingAppend]) -> Callable[[], None] | None:
        """Commit ``batch`` in one transaction and set each one's result or
        error. A statement the server refuses (not a lost connection) is
        retried one append at a time, so one bad append fails alone."""

        def op(conn: psycopg.Connection[Any]) -> list[tuple[str, int, Any]]:
            items = [
                {
                    "eventId": p.record["eventId"],
                    "type": p.record["type"],
                    "aggregateId": p.record["aggregateId"],
                    "actor": p.record["actor"],
                    "occurredAt": p.record["occurredAt"],
                    "correlationId": p.record.get("correlationId"),
                    "causationId": p.record.get("causationId"),
                    "idempotencyKey": p.record.get("idempotencyKey"),
                    "expected": p.expected,
                    "bytes": p.size,
                }
                for p in batch
            ]
            # Payloads apart: extracting a value from a json item decodes its
            # escapes, and a payload may hold a \u0000 a text cannot.
            payloads = [
                json.dumps(p.record["payload"], ensure_ascii=False, allow_nan=False) for p in batch
            ]
            text = json.dumps(items, ensure_ascii=False, allow_nan=False)
            rows = conn.execute(_APPEND_EVENTS, (self.session_id, text, payloads)).fetchall()
            by_index = {int(r[0]): (str(r[1]), int(r[2])) for r in rows}
            results: list[tuple[str, int, Any]] = []
            for index, pending in enumerate(batch, start=1):
                outcome, ordinal = by_index[index]
                stored: Any = None
                if outcome == "duplicate":
                    try:
                        stored = self._stored_keyed(conn, pending.record["idempotencyKey"], ordinal)
                    except OrchestrationEventStoreError as exc:
                        stored = exc
                results.append((outcome, ordinal, stored))
            return results

        try:
            results = self._retrying_raw(op)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            if len(batch) > 1 and not _transient(exc):
                hooks = [self._commit_group([pending]) for pending in batch]
                return _run_all([h for h in hooks if h is not None])
            for pending in batch:
                pending.error = (
                    _too_long(exc)
                    if getattr(exc, "sqlstate", None) == _PROGRAM_LIMIT_EXCEEDED
                    else _unavailable(exc, "appending")
                )
                pending.done.set()
            return None
        notified = [
            ordinal
            for pending, (outcome, ordinal, _) in zip(batch, results, strict=True)
            if outcome in ("appended", "retried") and pending.notify
        ]
        for pending, (outcome, ordinal, stored) in zip(batch, results, strict=True):
            if isinstance(stored, OrchestrationEventStoreError):
                pending.error = stored
            else:
                pending.result = (outcome, ordinal, stored)
            pending.done.set()
        if not notified:
            return None
        head = max(notified)
        return lambda: self._notify_committed(head)

    def _notify_committed(self, ordinal: int) -> None:
        """Tell watchers that the session reached ``ordinal``: one ``NOTIFY``
        in its own transaction, after the appends committed. Best effort (a
        watcher's poll covers a lost notification): never raises."""
        payload = notify_payload(self.session_id, ordinal)
        with (
            contextlib.suppress(psycopg.Error, psycopg_pool.PoolTimeout),
            self._connection() as conn,
        ):
            conn.execute(_NOTIFY_AFTER_COMMIT, (NOTIFY_CHANNEL, payload))

    def read_all(self) -> list[Event]:
        """Every event after T, ascending (ES-024); one statement, so one
        consistent view of T and the tail.

        Raises:
            OrchestrationEventStoreError: a gap in the tail (a damaged
                database).
            OrchestrationStoreUnavailableError: the server stayed unreachable.
        """
        return self._read(None)

    def read_after(self, ordinal: int) -> list[Event]:
        """Events with ordinal > ``ordinal``, ascending (ES-027..029).

        Raises:
            OrchestrationSnapshotRequiredError: ``ordinal`` < T.
            OrchestrationEventStoreError: ``ordinal`` is not an integer, or a
                gap in the tail.
            OrchestrationStoreUnavailableError: the server stayed unreachable.
        """
        if type(ordinal) is not int:
            raise OrchestrationEventStoreError("readAfter ordinal must be an integer.")
        return self._read(ordinal)

    def read_projection_snapshot(self) -> ProjectionSnapshot | None:
        """The verified snapshot ``(T, projection copy)``, or ``None`` (ES-030).

        Raises:
            OrchestrationEventStoreError: the stored snapshot fails its digest
                or shape check (ES-051, ES-052), naming ``<T>.json``.
            OrchestrationStoreUnavailableError: the server stayed unreachable.
        """

        def op(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(
                "SELECT through_ordinal, snapshot, snapshot_digest FROM leasegate.sessions"
                " WHERE session_id = %s",
                (self.session_id,),
            ).fetchone()

        row = self._retrying("reading the snapshot", op)
        if row is None or int(row[0]) == 0:
            return None
        snapshot = self._verify_snapshot(int(row[0]), row[1], row[2])
        return ProjectionSnapshot(snapshot.through_ordinal, copy.deepcopy(snapshot.projection))

    def compact_if_needed(
        self, through_ordinal: int, projection: Callable[[], dict[str, Any]]
    ) -> bool:
        """Snapshot and prune in one transaction when ``through_ordinal`` is H
        and the tail reached ``max_tail_events`` events or ``max_tail_bytes``
        bytes (ES-036..043). ``projection()`` is called once, only when
        compacting, with the head row locked.

        Raises:
            OrchestrationEventStoreError: a non-object projection (nothing is
                written), an invalid stored snapshot.
            OrchestrationStoreUnavailableError: the server stayed
                unreachable (nothing is committed, or all of it is).
        """
        if type(through_ordinal) is not int:
            raise OrchestrationEventStoreError("Compaction ordinal must be an integer.")

        def peek(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(
                "SELECT last_ordinal, tail_events, tail_bytes FROM leasegate.sessions"
                " WHERE session_id = %s",
                (self.session_id,),
            ).fetchone()

        head = self._retrying("checking compaction", peek)
        if (
            head is None
            or int(head[0]) != through_ordinal
            or not compaction_due(
                int(head[1]), int(head[2]), self.max_tail_events, self.max_tail_bytes
            )
        ):
            return False

        def op(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                row = conn.execute(
                    "SELECT last_ordinal, through_ordinal, snapshot, snapshot_digest,"
                    " tail_events, tail_bytes FROM leasegate.sessions"
                    " WHERE session_id = %s FOR UPDATE",
                    (self.session_id,),
                ).fetchone()
                if row is None or int(row[0]) != through_ordinal:
                    return False
                if not compaction_due(
                    int(row[4]), int(row[5]), self.max_tail_events, self.max_tail_bytes
                ):
                    return False
                old = self._verify_snapshot(int(row[1]), row[2], row[3]) if row[1] else None
                keyed = [
                    _event_from_row(r)
                    for r in conn.execute(
                        _SELECT_EVENTS + " WHERE session_id = %s AND idempotency_key IS NOT NULL"
                        " AND ordinal <= %s ORDER BY ordinal",
                        (self.session_id, through_ordinal),
                    ).fetchall()
                ]
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
                created_at = self._now()
                if type(created_at) is not str:
                    raise OrchestrationEventStoreError("The store clock must return a string.")
                snap = snapshot_record(through_ordinal, created_at, copy.deepcopy(value), retained)
                conn.execute(
                    "UPDATE leasegate.sessions SET through_ordinal = %s, snapshot = %s,"
                    " snapshot_digest = %s, tail_events = 0, tail_bytes = 0"
                    " WHERE session_id = %s",
                    (
                        through_ordinal,
                        serialize(snap).decode("utf-8"),
                        snap["digest"],
                        self.session_id,
                    ),
                )
                # The pruned events' ids stay findable by a retry whose
                # first try committed (its answer lost) before this prune.
                horizon = through_ordinal - self.max_pruned_event_ids
                conn.execute(
                    "WITH pruned AS (DELETE FROM leasegate.events"
                    " WHERE session_id = %s AND ordinal <= %s RETURNING event_id, ordinal)"
                    " INSERT INTO leasegate.pruned_events (session_id, event_id, ordinal)"
                    " SELECT %s, event_id, ordinal FROM pruned WHERE ordinal > %s"
                    " ON CONFLICT (session_id, event_id) DO UPDATE SET ordinal = EXCLUDED.ordinal",
                    (self.session_id, through_ordinal, self.session_id, horizon),
                )
                conn.execute(
                    "DELETE FROM leasegate.pruned_events WHERE session_id = %s AND ordinal <= %s",
                    (self.session_id, horizon),
                )
                keys = [ev["idempotencyKey"] for ev in retained]
                conn.execute(
                    "DELETE FROM leasegate.idempotency WHERE session_id = %s"
                    " AND ordinal <= %s AND NOT (idempotency_key = ANY(%s))",
                    (self.session_id, through_ordinal, keys),
                )
                for ev in retained:
                    conn.execute(
                        "UPDATE leasegate.idempotency SET retained_event = %s"
                        " WHERE session_id = %s AND idempotency_key = %s",
                        (
                            json.dumps(ev, ensure_ascii=False),
                            self.session_id,
                            ev["idempotencyKey"],
                        ),
                    )
                return True

        return bool(self._retrying("compacting", op))

    def subscribe(self, listener: EventListener) -> Callable[[], bool]:
        """Call ``listener`` with a deep copy of each event this instance
        appends, after the commit, in subscription order (ES-060..063). For
        other hosts' appends use :meth:`watch`.

        Returns:
            An unsubscribe function: ``True`` the first time, then ``False``.
        """
        self._listeners[listener] = None

        def unsubscribe() -> bool:
            return self._listeners.pop(listener, 0) is None

        return unsubscribe

    def watch(
        self,
        listener: EventListener,
        conninfo: str,
        *,
        after_ordinal: int | None = None,
        poll_s: float = 1.0,
    ) -> EventWatch:
        """Call ``listener`` from a background thread with every event any
        host commits to this session, in ordinal order, each once (the
        promise and its two exceptions: :class:`EventWatch`).

        Fed by ``LISTEN leasegate_events`` on a dedicated connection
        (``application_name`` :data:`WATCH_APPLICATION_NAME`); a
        notification naming this session triggers a read after the watch's
        position, and so does every ``poll_s`` seconds without one, so a
        notification lost (the notifying host died after its commit, or the
        connection was down) delays an event by at most ``poll_s`` but never
        drops it.

        Args:
            listener: called with each event (a fresh copy).
            conninfo: the connection string (the pool's) for the LISTEN
                connection; a session-mode connection (not a transaction
                pooler).
            after_ordinal: deliver events after this ordinal (default: the
                current H: only new events).
            poll_s: the safety poll interval and the longest reconnect
                backoff, in seconds (> 0).

        Returns:
            The running :class:`EventWatch`; call :meth:`EventWatch.close`.

        Raises:
            OrchestrationEventStoreError: ``after_ordinal`` is not a
                non-negative integer, or ``poll_s`` is not a positive number.
            OrchestrationStoreUnavailableError: reading the current H (the
                default ``after_ordinal``) failed.
        """
        if after_ordinal is not None and not (is_safe_int(after_ordinal) and after_ordinal >= 0):
            raise OrchestrationEventStoreError("Watch ordinal must be a non-negative integer.")
        if after_ordinal is None:
            events = self.read_all()
            snap = self.read_projection_snapshot()
            after_ordinal = (
                events[-1]["ordinal"] if events else (snap.through_ordinal if snap else 0)
            )
        return EventWatch(self, listener, conninfo, after_ordinal, poll_s)

    # ------------------------------------------------------------------
    # Internals

    def _stored_keyed(self, conn: psycopg.Connection[Any], key: str, ordinal: int) -> Event:
        """The stored event with idempotency key ``key`` (ES-016..019): the
        tail's row, or the one a compaction retained."""
        row = conn.execute(
            _SELECT_EVENTS + " WHERE session_id = %s AND ordinal = %s",
            (self.session_id, ordinal),
        ).fetchone()
        if row is not None:
            return _event_from_row(row)
        kept = conn.execute(
            "SELECT retained_event FROM leasegate.idempotency"
            " WHERE session_id = %s AND idempotency_key = %s",
            (self.session_id, key),
        ).fetchone()
        event = is_orchestration_event(json.loads(kept[0])) if kept and kept[0] else None
        if event is None or event.get("idempotencyKey") != key:
            raise OrchestrationEventStoreError(
                "Orchestration idempotency key has no stored event.",
                file=event_file_name(ordinal),
            )
        return event

    def _verify_snapshot(self, through: int, text: str | None, digest: str | None) -> Any:
        """The stored snapshot verified by the file store's rules (ES-051/052)."""
        name = event_file_name(through)
        if text is None or digest is None:
            raise OrchestrationEventStoreError(
                "Invalid orchestration projection snapshot.", file=name
            )
        snapshot = parse_snapshot(text.encode("utf-8"), Baseline(through, digest, name))
        if isinstance(snapshot, OrchestrationEventStoreError):
            raise snapshot
        return snapshot

    def _read(self, after: int | None) -> list[Event]:
        def op(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(_READ_TAIL, (after, self.session_id)).fetchall()

        rows = self._retrying("reading", op)
        if not rows:
            return []
        through, last = int(rows[0][0]), int(rows[0][1])
        if after is not None and after < through:
            raise OrchestrationSnapshotRequiredError(through)
        events = [_event_from_row(r[2:]) for r in rows if r[2] is not None]
        expected = max(through, after or 0) + 1
        for event in events:
            if event["ordinal"] != expected:
                raise OrchestrationEventStoreError(
                    f"Orchestration event ordinal gap before {event['ordinal']}.",
                    file=event_file_name(event["ordinal"]),
                )
            expected += 1
        if expected - 1 < last:
            raise OrchestrationEventStoreError(
                f"Orchestration events missing up to the head {last}.",
                file=event_file_name(expected),
            )
        return events


#: How often a waiting watch checks whether it was closed, in seconds.
_WATCH_STOP_CHECK_S = 0.2


class EventWatch:
    """A running :meth:`PostgresEventStore.watch`: a daemon thread that
    delivers every host's appends to one listener, in ordinal order.

    What it promises: while it runs, the listener is called once for each
    event after :attr:`position`, in ordinal order, with no gap, and
    :attr:`position` (the last ordinal delivered) only moves forward, one
    event at a time. A lost connection, a server restart or a lost
    notification delays events, never drops or repeats one: the watch
    reconnects (after 0.1 s, doubling up to ``poll_s``) and reads after its
    position. Two exceptions: events a compaction folded into the snapshot
    before the watch read them are skipped (the position jumps to the
    snapshot's ordinal T; the events are in the projection), and a listener
    that raises does not get the event again (its exception type's name is
    kept in :attr:`errors`, never its message).

    Attributes:
        position: the ordinal of the last event delivered.
        errors: the type names of the listener's exceptions, in order.
        connections: how many ``LISTEN`` connections the watch opened (1
            while it never lost one).
    """

    def __init__(
        self,
        store: PostgresEventStore,
        listener: EventListener,
        conninfo: str,
        after_ordinal: int,
        poll_s: float,
    ) -> None:
        if not (isinstance(poll_s, int | float) and math.isfinite(poll_s) and poll_s > 0):
            raise OrchestrationEventStoreError("Watch poll interval must be a positive number.")
        self.store = store
        self.position = after_ordinal
        self.errors: list[str] = []
        self.connections = 0
        self._listener = listener
        self._conninfo = conninfo
        self._tag = notify_payload(store.session_id, 0).rpartition(" ")[0]
        self._poll_s = float(poll_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasegate-watch", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait for it, at most ``timeout_s`` seconds
        (a wait for notifications notices within 0.2 s; a read in progress
        finishes first, or gives up after the store's ``retry_timeout_s``)."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _deliver(self) -> None:
        try:
            events = self.store.read_after(self.position)
        except OrchestrationSnapshotRequiredError as exc:
            self.position = exc.through_ordinal
            events = self.store.read_after(self.position)
        for event in events:
            try:
                self._listener(event)
            except Exception as exc:  # noqa: BLE001 - a listener's failure must not stop the watch
                self.errors.append(type(exc).__name__)
            self.position = event["ordinal"]

    def _wait_for_notification(self, conn: psycopg.Connection[Any]) -> None:
        """Return on a notification naming this session, after ``poll_s``
        without one, or soon after :meth:`close`: a burst costs one read,
        other sessions' notifications none."""
        deadline = time.monotonic() + self._poll_s
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for note in conn.notifies(timeout=min(remaining, _WATCH_STOP_CHECK_S)):
                if note.payload.rpartition(" ")[0] == self._tag:
                    return

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    application_name=WATCH_APPLICATION_NAME,
                    connect_timeout=10,
                ) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                    self.connections += 1
                    delay = 0.1
                    # Listening first, then reading: an append committed in
                    # between is read now or notified later, never missed.
                    self._deliver()
                    while not self._stop.is_set():
                        self._wait_for_notification(conn)
                        self._deliver()
            except (psycopg.Error, OrchestrationEventStoreError):
                self._stop.wait(delay)
                delay = min(delay * 2, self._poll_s)
