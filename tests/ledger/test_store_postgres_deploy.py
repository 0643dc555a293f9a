"""Running the PostgreSQL backend as on a managed server (PostgreSQL-only):
the schema's owner migrates, a least-privileged role runs the store with
exactly the grants docs/ledger.md lists, a pool refuses a schema version it
does not know and a role on which commits are not durable, and a database
at schema version 1 or 2 is migrated with its events and keys kept (and,
from version 3, a retry after a compaction finds its pruned event).

Each test uses its own database on the test server (and its own roles).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from leasegate.core.ledger import OrchestrationEventStoreError

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from psycopg import sql  # noqa: E402

from leasegate.shells.store import OrchestrationStoreUnavailableError, postgres  # noqa: E402
from leasegate.shells.store.postgres import (  # noqa: E402
    SCHEMA_VERSION,
    PostgresEventStore,
    create_pool,
    ensure_schema,
    list_sessions,
)

_names = itertools.count()

#: The runtime role's grants, as docs/ledger.md gives them ({db}, {role}).
RUNTIME_GRANTS = (
    "GRANT CONNECT ON DATABASE {db} TO {role}",
    "GRANT USAGE ON SCHEMA leasegate TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA leasegate TO {role}",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA leasegate TO {role}",
)


class Cluster:
    """Databases and roles of one test on the test server, dropped after."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.dbs: list[str] = []
        self.roles: list[str] = []

    def admin(self, db: str = "postgres") -> Any:
        return psycopg.connect(self.conninfo("postgres", db), autocommit=True)

    def conninfo(self, role: str, db: str) -> str:
        return f"host=127.0.0.1 port={self.server.port} user={role} dbname={db}"

    def database(self) -> str:
        name = f"leasegate_deploy_{os.getpid()}_{next(_names)}"
        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.dbs.append(name)
        return name

    def role(self) -> str:
        name = f"leasegate_runtime_{os.getpid()}_{next(_names)}"
        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        self.roles.append(name)
        return name

    def drop(self) -> None:
        with self.admin() as conn:
            for db in self.dbs:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db))
                )
            for role in self.roles:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def cluster(pg_server: Any) -> Iterator[Cluster]:
    c = Cluster(pg_server)
    try:
        yield c
    finally:
        c.drop()


def test_pg_a_least_privileged_role_runs_the_store_on_a_schema_its_owner_migrated(
    cluster: Cluster,
) -> None:
    db = cluster.database()
    owner = create_pool(cluster.conninfo("postgres", db), max_size=1)  # migrates
    owner.close()
    role = cluster.role()
    with cluster.admin(db) as conn:
        for grant in RUNTIME_GRANTS:
            conn.execute(sql.SQL(grant).format(db=sql.Identifier(db), role=sql.Identifier(role)))
    conninfo = cluster.conninfo(role, db)
    pool = create_pool(conninfo, max_size=2, migrate=False)
    try:
        store = PostgresEventStore(pool, "cleanup-journal:runner-1", max_tail_events=2)
        first = store.append(ev("k1", {"n": 1}))
        assert store.append(ev("k1", {"n": 9})) == first
        second = store.append(ev(payload={"n": 2}), expected_last_ordinal=1)
        assert store.compact_if_needed(2, lambda: {"n": 2})
        snap = store.read_projection_snapshot()
        assert snap is not None
        assert snap.through_ordinal == 2
        assert store.append(ev("k1", {"n": 9})) == first  # retained after compaction
        seen: list[int] = []
        got = threading.Event()

        def listener(event: dict[str, Any]) -> None:
            seen.append(event["ordinal"])
            got.set()

        watch = store.watch(listener, conninfo, poll_s=30)
        try:
            third = store.append(ev(payload={"n": 3}))
            assert got.wait(20)
        finally:
            watch.close()
        assert seen == [third["ordinal"]] == [second["ordinal"] + 1]
        assert list_sessions(pool, "cleanup-journal:") == [("cleanup-journal:runner-1", 3)]
        # The role can run the store, not change the schema.
        with pool.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DROP TABLE leasegate.events")
    finally:
        pool.close()


def test_pg_a_pool_without_migration_refuses_a_schema_at_another_version(
    cluster: Cluster,
) -> None:
    db = cluster.database()
    with pytest.raises(OrchestrationEventStoreError, match="version 0;") as info:
        create_pool(cluster.conninfo("postgres", db), max_size=1, migrate=False)
    assert not isinstance(info.value, OrchestrationStoreUnavailableError)
    create_pool(cluster.conninfo("postgres", db), max_size=1).close()
    with cluster.admin(db) as conn:
        conn.execute("UPDATE leasegate.schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(OrchestrationEventStoreError, match=f"version {SCHEMA_VERSION + 1};"):
        create_pool(cluster.conninfo("postgres", db), max_size=1, migrate=False)
    with pytest.raises(OrchestrationEventStoreError, match="knows up to"):
        create_pool(cluster.conninfo("postgres", db), max_size=1)


def test_pg_a_pool_refuses_a_role_on_which_commits_are_not_durable(cluster: Cluster) -> None:
    db = cluster.database()
    create_pool(cluster.conninfo("postgres", db), max_size=1).close()
    role = cluster.role()
    with cluster.admin(db) as conn:
        for grant in RUNTIME_GRANTS:
            conn.execute(sql.SQL(grant).format(db=sql.Identifier(db), role=sql.Identifier(role)))
        conn.execute(
            sql.SQL("ALTER ROLE {} SET synchronous_commit = off").format(sql.Identifier(role))
        )
    with pytest.raises(OrchestrationEventStoreError, match="synchronous_commit is off"):
        create_pool(cluster.conninfo(role, db), max_size=1, migrate=False)


@pytest.mark.parametrize("old_version", [1, 2])
def test_pg_an_older_schema_is_migrated_and_its_events_kept(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, old_version: int
) -> None:
    db = cluster.database()
    conninfo = cluster.conninfo("postgres", db)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        monkeypatch.setattr(postgres, "SCHEMA_VERSION", old_version)  # the previous library
        assert ensure_schema(conn) == old_version
        monkeypatch.undo()
        conn.execute(
            "SELECT leasegate.append_event('s', NULL, 'old-1', 'task.created', 'a', 'runtime',"
            " '2026-01-01T00:00:00.000Z', NULL, NULL, 'k-old', '{\"n\": 1}'::json, 200, false)"
        )
    pool = create_pool(conninfo, max_size=2)
    try:
        with pool.connection() as conn:
            row = conn.execute("SELECT version FROM leasegate.schema_version").fetchone()
        assert row is not None
        assert row[0] == SCHEMA_VERSION == 3
        store = PostgresEventStore(pool, "s", max_tail_events=1)
        assert store.append(ev("k-old", {"n": 9}))["eventId"] == "old-1"  # key kept
        new = store.append(ev(payload={"n": 2}), expected_last_ordinal=1)
        assert [e["eventId"] for e in store.read_all()] == ["old-1", new["eventId"]]
        assert new["ordinal"] == 2
        # Version 3: the ids of the events a compaction prunes stay findable.
        assert store.compact_if_needed(2, lambda: {"n": 2})
        retry = PostgresEventStore(pool, "s", create_event_id=lambda: new["eventId"])
        assert retry.append(ev(payload={"n": 2}))["ordinal"] == 2
        assert store.read_all() == []
    finally:
        pool.close()
