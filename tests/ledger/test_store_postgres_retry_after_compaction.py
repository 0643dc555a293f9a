"""An append whose answer was lost, retried after another host compacted
the session (PostgreSQL-only: the file store retries nothing).

The docs promise that a retried append (same event id) whose first try had
committed returns the committed event, appends nothing and is heard once.
Between the lost answer and the retry another host may compact: the first
try's event is then folded into the snapshot, its row is gone, and the
retry must still not append it again: the compaction keeps the pruned
events' ids (within ``max_pruned_event_ids`` ordinals of T), and the retry
finds its event there.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from leasegate.core.ledger import OrchestrationEventStoreError  # noqa: E402
from leasegate.shells.store.postgres import PostgresEventStore  # noqa: E402


def _answer_lost_then_compacted(
    store: PostgresEventStore, other: PostgresEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Make the next append's first try commit, lose its answer, let
    ``other`` compact the session, then retry."""
    real = store._retrying_raw

    def lost_then_compacted(op: Any) -> Any:
        real(op)  # committed; the answer never arrives
        head = other.read_all()[-1]["ordinal"]
        assert other.compact_if_needed(head, lambda: {"n": head})
        return real(op)  # the retry on a fresh connection

    monkeypatch.setattr(store, "_retrying_raw", lost_then_compacted)


def test_pg_a_retry_after_a_compaction_does_not_append_the_event_twice(
    pg_pool: Any, pg_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = pg_session("retry-compacted")
    store = PostgresEventStore(pg_pool, session, max_tail_events=1)
    other = PostgresEventStore(pg_pool, session, max_tail_events=1)
    store.append(ev())
    _answer_lost_then_compacted(store, other, monkeypatch)
    event = store.append(ev(payload={"n": 2}))
    monkeypatch.undo()
    snap = store.read_projection_snapshot()
    assert snap is not None
    head = snap.through_ordinal + len(store.read_all())
    assert head == 2, f"one call appended {head - 1} events"
    assert event["ordinal"] == 2


def test_pg_a_retry_after_a_compaction_with_an_expected_ordinal_returns_the_committed_event(
    pg_pool: Any, pg_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = pg_session("retry-compacted-occ")
    store = PostgresEventStore(pg_pool, session, max_tail_events=1)
    other = PostgresEventStore(pg_pool, session, max_tail_events=1)
    store.append(ev())
    _answer_lost_then_compacted(store, other, monkeypatch)
    event = store.append(ev(payload={"n": 2}), expected_last_ordinal=1)
    monkeypatch.undo()
    assert event["ordinal"] == 2


def test_pg_a_keyed_retry_after_a_compaction_is_heard_once_by_the_listeners(
    pg_pool: Any, pg_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = pg_session("retry-compacted-keyed")
    store = PostgresEventStore(pg_pool, session, max_tail_events=1)
    other = PostgresEventStore(pg_pool, session, max_tail_events=1)
    heard: list[dict[str, Any]] = []
    store.subscribe(heard.append)
    store.append(ev())
    _answer_lost_then_compacted(store, other, monkeypatch)
    event = store.append(ev("k-retried", {"n": 2}))
    monkeypatch.undo()
    assert event["ordinal"] == 2
    assert [e["ordinal"] for e in heard] == [1, 2]
    assert heard[1] == event
    assert store.append(ev("k-retried", {"n": 3})) == event  # the key still answers


def test_pg_a_compaction_keeps_the_pruned_event_ids_within_its_window(
    pg_pool: Any, pg_session: Any, pg_conninfo: str
) -> None:
    session = pg_session("pruned-window")
    store = PostgresEventStore(pg_pool, session, max_tail_events=1, max_pruned_event_ids=3)
    ids = [store.append(ev(payload={"n": n}))["eventId"] for n in range(1, 6)]
    assert store.compact_if_needed(5, lambda: {"n": 5})
    with psycopg.connect(pg_conninfo) as conn:
        rows = conn.execute(
            "SELECT event_id, ordinal FROM leasegate.pruned_events"
            " WHERE session_id = %s ORDER BY ordinal",
            (session,),
        ).fetchall()
    assert rows == [(ids[2], 3), (ids[3], 4), (ids[4], 5)]
    ids.append(store.append(ev(payload={"n": 6}))["eventId"])
    assert store.compact_if_needed(6, lambda: {"n": 6})
    with psycopg.connect(pg_conninfo) as conn:
        kept = conn.execute(
            "SELECT ordinal FROM leasegate.pruned_events WHERE session_id = %s ORDER BY ordinal",
            (session,),
        ).fetchall()
    assert kept == [(4,), (5,), (6,)]


def test_pg_a_retry_older_than_the_pruned_window_is_appended_again(
    pg_pool: Any, pg_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented edge of the window: an unkeyed first try pruned out
    of it before the retry is not found (the retry appends it again)."""
    session = pg_session("retry-past-window")
    store = PostgresEventStore(pg_pool, session, max_tail_events=1)
    # Another retry timeout: its append does not join the retried call's group.
    other = PostgresEventStore(
        pg_pool, session, max_tail_events=1, max_pruned_event_ids=1, retry_timeout_s=5.0
    )
    store.append(ev())
    real = store._retrying_raw

    def lost_then_compacted_past(op: Any) -> Any:
        real(op)
        other.append(ev(payload={"n": "later"}))
        assert other.compact_if_needed(3, lambda: {"n": 3})
        return real(op)

    monkeypatch.setattr(store, "_retrying_raw", lost_then_compacted_past)
    event = store.append(ev(payload={"n": 2}))
    monkeypatch.undo()
    assert event["ordinal"] == 4


def test_pg_max_pruned_event_ids_must_be_a_positive_safe_integer(pg_pool: Any) -> None:
    for bad in (0, -1, 1.5, True, 2**53):
        with pytest.raises(OrchestrationEventStoreError, match="maxPrunedEventIds"):
            PostgresEventStore(pg_pool, "s", max_pruned_event_ids=bad)
