"""Group commit of the PostgreSQL backend (PostgreSQL-only: the file store
serializes appends with ``flock``).

Concurrent appends of one process to one session commit in one
transaction (one WAL flush), each still checked in arrival order: its
idempotency key, its ``expected_last_ordinal``. The tests hold the session's
head row from another connection so the appends queue up behind a first
one, then read the committing transaction of each event row (``xmin``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import wait_kit

from leasegate.core.ledger import OrchestrationConcurrencyError, OrchestrationEventStoreError

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from psycopg import sql  # noqa: E402

from leasegate.shells.store import OrchestrationStoreUnavailableError  # noqa: E402
from leasegate.shells.store.postgres import (  # noqa: E402
    PostgresEventStore,
    _group_commit,
)

WAIT_S = 20.0


def _queued_behind_a_held_head(
    pool: Any,
    conninfo: str,
    session: str,
    calls: list[Callable[[PostgresEventStore], Any]],
) -> list[Any]:
    """Run ``calls[0]`` (the leader, blocked on the head row another
    connection holds), queue the others behind it, release the row; each
    call's result or exception, in order."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        store = PostgresEventStore(pool, session)
        try:
            results[i] = calls[i](store)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc

    group = _group_commit(pool, (session, 10.0))
    with psycopg.connect(conninfo) as holder:  # a transaction: the lock is held
        holder.execute(
            "SELECT 1 FROM leasegate.sessions WHERE session_id = %s FOR UPDATE", (session,)
        )
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
        threads[0].start()
        wait_kit.wait_until(lambda: group.busy and not group.queue, timeout_s=WAIT_S)
        for k, t in enumerate(threads[1:], start=1):  # one at a time: queue order is call order
            t.start()
            wait_kit.wait_until(lambda k=k: len(group.queue) == k, timeout_s=WAIT_S)
        holder.rollback()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    return results


def _appending(payload: dict[str, Any]) -> Callable[[PostgresEventStore], Any]:
    return lambda store: store.append(ev(payload=payload))


def _xmins(conninfo: str, session: str) -> dict[int, str]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT ordinal, xmin::text FROM leasegate.events WHERE session_id = %s",
            (session,),
        ).fetchall()
    return {int(n): str(x) for n, x in rows}


def test_pg_concurrent_appends_of_one_process_commit_in_one_transaction(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str]
) -> None:
    session = pg_session("group")
    PostgresEventStore(pg_pool, session).append(ev())
    n = 8
    calls = [_appending({"i": i}) for i in range(n)]
    results = _queued_behind_a_held_head(pg_pool, pg_conninfo, session, calls)
    assert [r["payload"]["i"] for r in results] == list(range(n))
    ordinals = [r["ordinal"] for r in results]
    assert ordinals == list(range(2, n + 2))  # in queue order, no gap
    xmins = _xmins(pg_conninfo, session)
    assert sorted(xmins) == list(range(1, n + 2))
    queued = {xmins[o] for o in ordinals[1:]}
    assert len(queued) == 1, "the queued appends did not commit together"
    assert xmins[ordinals[0]] not in queued
    events = PostgresEventStore(pg_pool, session).read_all()
    assert [e["ordinal"] for e in events] == list(range(1, n + 2))
    assert {e["eventId"]: e["ordinal"] for e in events} == {
        r["eventId"]: r["ordinal"] for r in [events[0], *results]
    }


def test_pg_a_group_checks_each_key_and_expected_ordinal_in_turn(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str]
) -> None:
    session = pg_session("group-checks")
    PostgresEventStore(pg_pool, session).append(ev())  # H = 1
    calls: list[Callable[[PostgresEventStore], Any]] = [
        lambda s: s.append(ev(payload={"lead": 1}), expected_last_ordinal=1),  # -> 2
        lambda s: s.append(ev(payload={"occ": 0}), expected_last_ordinal=2),  # -> 3
        lambda s: s.append(ev(payload={"occ": 1}), expected_last_ordinal=2),  # conflict
        lambda s: s.append(ev("k", {"key": 0})),  # -> 4
        lambda s: s.append(ev("k", {"key": 1})),  # the stored event of "k"
        lambda s: s.append(ev(payload={"occ": 2}), expected_last_ordinal=4),  # -> 5
    ]
    results = _queued_behind_a_held_head(pg_pool, pg_conninfo, session, calls)
    lead, occ0, occ1, key0, key1, occ2 = results
    assert lead["ordinal"] == 2
    assert occ0["ordinal"] == 3
    assert isinstance(occ1, OrchestrationConcurrencyError)
    assert (occ1.expected, occ1.actual) == (2, 3)
    assert key0["ordinal"] == 4
    assert key1 == key0  # the duplicate key answers with the stored event
    assert occ2["ordinal"] == 5
    events = PostgresEventStore(pg_pool, session).read_all()
    assert [e["payload"] for e in events[1:]] == [{"lead": 1}, {"occ": 0}, {"key": 0}, {"occ": 2}]
    xmins = _xmins(pg_conninfo, session)
    assert len({xmins[3], xmins[4], xmins[5]}) == 1


def test_pg_an_append_the_server_refuses_fails_alone_in_its_group(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str]
) -> None:
    session = pg_session("group-refused")
    PostgresEventStore(pg_pool, session).append(ev())
    # A trigger refusing one aggregate id stands for any statement error
    # the server raises for one append (not a lost connection).
    with psycopg.connect(pg_conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION public.leasegate_test_refuse() RETURNS trigger"
                " LANGUAGE plpgsql AS $$ BEGIN IF NEW.session_id = {} AND"
                " NEW.aggregate_id = 'refused' THEN RAISE EXCEPTION 'refused'; END IF;"
                " RETURN NEW; END $$"
            ).format(sql.Literal(session))
        )
        conn.execute(
            "CREATE TRIGGER leasegate_test_refuse BEFORE INSERT ON leasegate.events"
            " FOR EACH ROW EXECUTE FUNCTION public.leasegate_test_refuse()"
        )
    try:
        calls: list[Callable[[PostgresEventStore], Any]] = [
            lambda s: s.append(ev(payload={"i": 0})),
            lambda s: s.append(ev(payload={"i": 1})),
            lambda s: s.append(ev(payload={"i": 2}, aggregate="refused")),
            lambda s: s.append(ev(payload={"i": 3})),
        ]
        results = _queued_behind_a_held_head(pg_pool, pg_conninfo, session, calls)
    finally:
        with psycopg.connect(pg_conninfo, autocommit=True) as conn:
            conn.execute("DROP TRIGGER leasegate_test_refuse ON leasegate.events")
            conn.execute("DROP FUNCTION public.leasegate_test_refuse()")
    assert isinstance(results[2], OrchestrationStoreUnavailableError)
    assert results[2].sqlstate == "P0001"
    assert "refused" not in str(results[2])  # the server's message is not quoted
    assert [results[i]["payload"] for i in (0, 1, 3)] == [{"i": 0}, {"i": 1}, {"i": 3}]
    events = PostgresEventStore(pg_pool, session).read_all()
    assert [e["ordinal"] for e in events] == [1, 2, 3, 4]
    assert [e["payload"] for e in events[1:]] == [{"i": 0}, {"i": 1}, {"i": 3}]


def test_pg_a_nul_in_a_text_field_is_refused_before_any_statement(
    pg_pool: Any, pg_session: Callable[[str], str]
) -> None:
    store = PostgresEventStore(pg_pool, pg_session("nul"))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev(aggregate="a\x00b"))
    assert not isinstance(info.value, OrchestrationStoreUnavailableError)
    with pytest.raises(OrchestrationEventStoreError):
        store.append(ev("key\x00"))
    stored = store.append(ev(payload={"text": "a\x00b"}))  # a JSON payload may hold one
    assert store.read_all() == [stored]
    assert stored["ordinal"] == 1
