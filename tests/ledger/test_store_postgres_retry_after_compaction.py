"""An append whose answer was lost, retried after another host compacted
the session (PostgreSQL-only: the file store retries nothing).

The docs promise that a retried append (same event id) whose first try had
committed returns the committed event, appends nothing and is heard once.
Between the lost answer and the retry another host may compact: the first
try's event is then folded into the snapshot, its row is gone, and the
retry must still not append it again.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

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


@pytest.mark.xfail(
    strict=True,
    reason="the retry finds the first try's event id only among the rows above T; a "
    "compaction in between pruned it, so an unkeyed append is committed twice",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="the retry finds the first try's event id only among the rows above T; after a "
    "compaction in between it compares expected_last_ordinal with the moved head",
)
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
