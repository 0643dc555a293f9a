"""Inputs longer than PostgreSQL's index can hold (PostgreSQL-only: the
file store hashes keys into marker names and has no such limit).

A btree index entry holds at most about 2.7 KB, and the session id and the
idempotency key (or the event id) share one entry. A longer (incompressible)
key or session id is invalid input for this backend: a typed
``OrchestrationEventStoreError`` that is not an "unavailable" error (a retry
cannot cure it), and nothing is stored.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from leasegate.core.ledger import OrchestrationEventStoreError
from leasegate.shells.store import OrchestrationStoreUnavailableError

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from leasegate.shells.store.postgres import PostgresEventStore  # noqa: E402


def test_pg_an_idempotency_key_too_long_for_the_index_is_refused_as_invalid_input(
    pg_pool: Any, pg_session: Any
) -> None:
    store = PostgresEventStore(pg_pool, pg_session("long-key"))
    store.append(ev("short"))
    with pytest.raises(OrchestrationEventStoreError) as raised:
        store.append(ev(secrets.token_hex(2000)))
    assert not isinstance(raised.value, OrchestrationStoreUnavailableError)
    assert "54000" in str(raised.value)
    assert [e["idempotencyKey"] for e in store.read_all()] == ["short"]
    assert store.append(ev())["ordinal"] == 2  # no ordinal was taken


def test_pg_a_session_id_too_long_for_the_index_is_refused_as_invalid_input(
    pg_pool: Any, pg_session: Any
) -> None:
    store = PostgresEventStore(pg_pool, pg_session(secrets.token_hex(2000)))
    with pytest.raises(OrchestrationEventStoreError) as raised:
        store.append(ev())
    assert not isinstance(raised.value, OrchestrationStoreUnavailableError)
    assert store.read_all() == []
