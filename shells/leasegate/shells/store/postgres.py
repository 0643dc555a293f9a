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
  commit once; after a compaction it carries the retained event itself.

An append is one call of the server function ``leasegate.append_event`` in
one transaction: it locks the session's head row (``SELECT ... FOR
UPDATE``), answers a known key or event id with the stored event, compares
``expected_last_ordinal`` with H (optimistic concurrency as a conditional
insert: the event row is written only when H matches), inserts the event at
H + 1 and moves the head. The ordinal is allocated inside the transaction
that writes the event, under the head row's lock: a rolled-back append frees
its ordinal with it (never a gap) and two writers never read the same H
(never a duplicate), whatever the number of hosts. The commit is the
acknowledgement; with ``synchronous_commit = on`` it is durable on the
server (and on its synchronous standbys) when the call returns.

A lost connection during an append is retried within ``retry_timeout_s``
with the same event id: the function answers an event id it already
committed with that event, so a retry never appends twice.

Compaction is one transaction: lock the head, write the snapshot into the
session row, delete the events ≤ T, keep the newest
``max_idempotency_events`` keyed events in ``idempotency`` (ES-043) and
drop the other keys. Readers see the old tail or the new snapshot, never a
mix (each read is one statement).

Each committed append also ``NOTIFY``s channel ``leasegate_events`` with
``<session_id> <ordinal>``; :meth:`PostgresEventStore.watch` turns those into
calls of a listener on any host (the contract's :meth:`subscribe` stays
"events this instance committed", ES-060).

Secrets never reach the database: the event is validated by the same
predicate as the file store's (a :class:`~leasegate.core.Secret` is not JSON
and is refused before any statement), and error messages carry the
failure's class and SQLSTATE, never a statement's parameters.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import threading
import time
import uuid
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
    "NOTIFY_CHANNEL",
    "SCHEMA_VERSION",
    "EventWatch",
    "PostgresEventStore",
    "create_pool",
    "ensure_schema",
    "list_sessions",
]

#: The schema version this library creates and reads.
SCHEMA_VERSION = 1
#: The channel every committed append notifies (payload ``<session> <ordinal>``).
NOTIFY_CHANNEL = "leasegate_events"

Event = dict[str, Any]

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
CREATE FUNCTION leasegate.append_event(
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
    IF p_key IS NOT NULL THEN
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
""",
}

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
) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
    """Open a connection pool for :class:`PostgresEventStore` and (by
    default) create or migrate the schema.

    Args:
        conninfo: a libpq connection string or URI
            (``postgresql://user@host:5432/db?sslmode=verify-full``). It may
            hold a password: it is passed to libpq only, never logged.
        min_size, max_size: pool bounds, in connections.
        timeout_s: longest wait for a free connection, in seconds.
        migrate: run :func:`ensure_schema` once on open.

    Returns:
        An open pool of autocommit connections, checked before each use.

    Raises:
        OrchestrationStoreUnavailableError: the server could not be reached.
        OrchestrationEventStoreError: the database's schema is newer than
            this library.
    """
    pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = psycopg_pool.ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout_s,
        kwargs={"autocommit": True},
        check=psycopg_pool.ConnectionPool.check_connection,
        open=False,
    )
    try:
        pool.open(wait=True, timeout=timeout_s)
        if migrate:
            with pool.connection() as conn:
                ensure_schema(conn)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        pool.close()
        raise _unavailable(exc, "opening the pool") from None
    except BaseException:
        pool.close()
        raise
    return pool


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
        retry_timeout_s: how long an operation retries a lost connection or
            a server restart before raising, in seconds (finite, ≥ 0).
        notify: ``NOTIFY`` each committed append (needed by :meth:`watch`
            on other hosts; costs a database-wide lock at commit).

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
        """Run ``op`` on a pooled connection; retry transient failures with
        backoff until ``retry_timeout_s`` passed, then raise typed."""
        deadline = time.monotonic() + self.retry_timeout_s
        delay = 0.05
        while True:
            try:
                with self._connection() as conn:
                    return op(conn)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                if not _transient(exc) or time.monotonic() + delay > deadline:
                    raise _unavailable(exc, doing) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------
    # The contract

    def append(self, item: AppendEventInput, *, expected_last_ordinal: int | None = None) -> Event:
        """Append one event and return it (a deep copy); see
        :meth:`~.contract.EventStore.append` (ES-007..022).

        One server-side function call in one transaction. A lost
        connection is retried with the same event id within
        ``retry_timeout_s``; the retry returns the event if the first try had
        committed.

        Raises:
            OrchestrationConcurrencyError: ``expected_last_ordinal`` ≠ H.
            OrchestrationEventStoreError: invalid input (before any
                statement), or the clock or id source returned an invalid
                value.
            OrchestrationStoreUnavailableError: the server stayed
                unreachable; the append is not acknowledged.
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
        payload_text = json.dumps(record["payload"], ensure_ascii=False, allow_nan=False)
        size = len(serialize(record))

        def op(conn: psycopg.Connection[Any]) -> tuple[str, int, Event | None]:
            row = conn.execute(
                "SELECT outcome, out_ordinal FROM leasegate.append_event("
                "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::json, %s, %s)",
                (
                    self.session_id,
                    expected_last_ordinal,
                    record["eventId"],
                    record["type"],
                    record["aggregateId"],
                    record["actor"],
                    record["occurredAt"],
                    record.get("correlationId"),
                    record.get("causationId"),
                    record.get("idempotencyKey"),
                    payload_text,
                    size,
                    self.notify,
                ),
            ).fetchone()
            assert row is not None
            outcome, ordinal = str(row[0]), int(row[1])
            stored = None
            if outcome == "duplicate":
                stored = self._stored_keyed(conn, record["idempotencyKey"], ordinal)
            return outcome, ordinal, stored

        result: tuple[str, int, Event | None] = self._retrying("appending", op)
        outcome, ordinal, stored = result
        if outcome == "conflict":
            assert expected_last_ordinal is not None
            raise OrchestrationConcurrencyError(expected_last_ordinal, ordinal)
        if outcome == "duplicate":
            assert stored is not None
            return stored
        record["ordinal"] = ordinal
        event = copy.deepcopy(record)
        if outcome == "appended":
            for listener in list(self._listeners):
                listener(copy.deepcopy(event))
        return event

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
                conn.execute(
                    "DELETE FROM leasegate.events WHERE session_id = %s AND ordinal <= %s",
                    (self.session_id, through_ordinal),
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
        host commits to this session, in ordinal order, each once.

        Fed by ``LISTEN leasegate_events`` on a dedicated connection; also
        reads every ``poll_s`` seconds, so a notification lost while the
        connection was down delays an event but never drops it. After a
        compaction passed the watch's position, it continues after the
        snapshot's ordinal (the compacted events are in the snapshot).

        Args:
            listener: called with a deep copy of each event.
            conninfo: the connection string (the pool's) for the LISTEN
                connection.
            after_ordinal: deliver events after this ordinal (default: the
                current H: only new events).
            poll_s: the safety poll interval, in seconds (> 0).

        Returns:
            The running :class:`EventWatch`; call :meth:`EventWatch.close`.
        """
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


class EventWatch:
    """A running :meth:`PostgresEventStore.watch`: a daemon thread that
    delivers another host's appends. Errors of the listener or the database
    stop nothing: a listener's exception is kept in :attr:`errors` (its
    type and message only) and the event counts as delivered; a database
    failure is retried on the next poll."""

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
        self._listener = listener
        self._conninfo = conninfo
        self._poll_s = float(poll_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasegate-watch", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait for it, at most ``timeout_s`` seconds."""
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

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                    self._deliver()
                    while not self._stop.is_set():
                        # Any notification (or the poll timeout) triggers one
                        # read after the position: a burst costs one query.
                        for _note in conn.notifies(timeout=self._poll_s, stop_after=1):
                            pass
                        self._deliver()
            except (psycopg.Error, OrchestrationEventStoreError):
                self._stop.wait(self._poll_s)
