"""The event store contract (``leasegate.shells.store.EventStore``), run on
every backend: the file store and PostgreSQL (fixture ``store_backend``).

These are the ES- behaviors that are not about the file format. The file
format's own behaviors (paths, write order, markers, cursor, crash tails,
fsyncs, stray temp files) stay file-only in test_store_append.py,
test_store_compaction.py, test_store_crash.py and test_store_format.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from leasegate.core import Secret
from leasegate.core.ledger import (
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
)
from leasegate.shells.store import EventStore

from .conftest import ev

MakeStore = Callable[..., Any]


def test_contract_both_backends_implement_the_protocol(make_contract_store: MakeStore) -> None:
    assert isinstance(make_contract_store(), EventStore)


def test_ES_006_first_append_and_read_all(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    assert store.read_all() == []
    assert store.read_projection_snapshot() is None
    e = store.append(ev(payload={"x": [1, {"y": "ü"}]}))
    assert e == {
        "schemaVersion": 1,
        "ordinal": 1,
        "eventId": "e1",
        "type": "task.created",
        "aggregateId": "a",
        "actor": "runtime",
        "occurredAt": "2026-01-01T00:00:00.000Z",
        "payload": {"x": [1, {"y": "ü"}]},
    }
    assert store.read_all() == [e]
    assert make_contract_store().read_all() == [e]


def test_ES_007_optional_ids_present_only_when_non_empty(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    a = store.append(ev(correlation_id="c", causation_id="", key=""))
    assert a["correlationId"] == "c"
    assert "causationId" not in a
    assert "idempotencyKey" not in a
    assert store.read_all() == [a]


def test_ES_012_writers_on_threads_get_distinct_consecutive_ordinals(
    make_contract_store: MakeStore,
) -> None:
    stores = [make_contract_store() for _ in range(4)]
    got: list[int] = []
    lock = threading.Lock()

    def work(s: Any) -> None:
        for _ in range(10):
            n = s.append(ev())["ordinal"]
            with lock:
                got.append(n)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == list(range(1, 41))
    assert [e["ordinal"] for e in stores[0].read_all()] == list(range(1, 41))


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "nope"},
        {"aggregate_id": ""},
        {"actor": "robot"},
        {"payload": []},
        {"payload": {"n": float("nan")}},
    ],
)
def test_ES_013_invalid_input_writes_nothing(make_contract_store: MakeStore, bad: Any) -> None:
    store = make_contract_store()
    fields: dict[str, Any] = {"type": "task.created", "aggregate_id": "a", "actor": "runtime"}
    fields["payload"] = {}
    fields.update(bad)
    from leasegate.shells.store import AppendEventInput

    with pytest.raises(OrchestrationEventStoreError, match="Invalid orchestration event input"):
        store.append(AppendEventInput(**fields))
    assert store.read_all() == []
    assert store.append(ev())["ordinal"] == 1


def test_ES_014_idempotent_replay_returns_stored_event(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    first = store.append(ev("k", {"v": 1}))
    again = make_contract_store().append(ev("k", {"v": 2}))
    assert again == first
    assert [e["ordinal"] for e in store.read_all()] == [1]


def test_ES_015_key_lookup_precedes_the_expected_check(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    first = store.append(ev("k"))
    store.append(ev())
    assert store.append(ev("k"), expected_last_ordinal=0) == first


def test_ES_020_only_newest_m_keys_stay_deduplicated(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=3, max_idempotency_events=2)
    for k in ("k1", "k2", "k3"):
        store.append(ev(k))
    assert store.compact_if_needed(3, lambda: {"n": 3})
    assert store.append(ev("k3"))["ordinal"] == 3  # retained
    assert store.append(ev("k2"))["ordinal"] == 2  # retained
    assert store.append(ev("k1"))["ordinal"] == 4  # dropped: appended anew


def test_ES_021_concurrency_error(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    store.append(ev())
    with pytest.raises(OrchestrationConcurrencyError) as info:
        store.append(ev(), expected_last_ordinal=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert store.append(ev(), expected_last_ordinal=1)["ordinal"] == 2
    with pytest.raises(OrchestrationEventStoreError, match="expectedLastOrdinal"):
        store.append(ev(), expected_last_ordinal=1.5)
    assert len(store.read_all()) == 2


def test_ES_022_expected_equal_H_after_compaction(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=2)
    store.append(ev())
    store.append(ev())
    assert store.compact_if_needed(2, lambda: {"p": 1})
    assert store.read_all() == []
    assert store.append(ev(), expected_last_ordinal=2)["ordinal"] == 3


def test_ES_027_028_read_after_and_snapshot_required(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=2)
    for _ in range(3):
        store.append(ev())
    assert [e["ordinal"] for e in store.read_after(1)] == [2, 3]
    assert store.read_after(3) == []
    assert store.read_after(7) == []
    assert store.compact_if_needed(3, lambda: {"p": 1})
    store.append(ev())
    with pytest.raises(OrchestrationSnapshotRequiredError) as info:
        store.read_after(2)
    assert info.value.through_ordinal == 3
    assert [e["ordinal"] for e in store.read_after(3)] == [4]
    with pytest.raises(OrchestrationEventStoreError, match="integer"):
        store.read_after("1")


def test_ES_030_read_projection_snapshot_is_a_copy(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=1)
    store.append(ev())
    assert store.compact_if_needed(1, lambda: {"tasks": {"t": [1, 2]}})
    snap = store.read_projection_snapshot()
    assert snap is not None
    assert (snap.through_ordinal, snap.projection) == (1, {"tasks": {"t": [1, 2]}})
    snap.projection["tasks"] = None
    again = make_contract_store().read_projection_snapshot()
    assert again is not None
    assert again.projection == {"tasks": {"t": [1, 2]}}


def test_ES_036_thresholds_in_events_and_bytes(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=3)
    store.append(ev())
    store.append(ev())
    assert not store.compact_if_needed(2, lambda: {})
    store.append(ev())
    assert store.compact_if_needed(3, lambda: {})
    big = make_contract_store("s2", max_tail_bytes=400)
    big.append(ev(payload={"blob": "x" * 500}))
    assert big.compact_if_needed(1, lambda: {})


def test_ES_037_stale_or_ahead_through_ordinal(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=1)
    store.append(ev())
    store.append(ev())
    calls: list[int] = []
    assert not store.compact_if_needed(1, lambda: calls.append(1) or {})
    assert not store.compact_if_needed(3, lambda: calls.append(1) or {})
    assert calls == []
    assert len(store.read_all()) == 2


def test_ES_040_049_projection_called_once_and_checked(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=1)
    store.append(ev())
    with pytest.raises(OrchestrationEventStoreError, match="must be a JSON object"):
        store.compact_if_needed(1, lambda: ["not", "an", "object"])
    assert store.read_projection_snapshot() is None
    assert len(store.read_all()) == 1
    calls: list[int] = []
    value = {"a": [1]}

    def projection() -> dict[str, Any]:
        calls.append(1)
        return value

    assert store.compact_if_needed(1, projection)
    value["a"].append(2)  # the snapshot holds a copy
    snap = store.read_projection_snapshot()
    assert calls == [1]
    assert snap is not None
    assert snap.projection == {"a": [1]}


def test_ES_048_state_after_compaction(make_contract_store: MakeStore) -> None:
    store = make_contract_store(max_tail_events=2)
    a = store.append(ev("k1"))
    store.append(ev())
    assert store.compact_if_needed(2, lambda: {"n": 2})
    assert store.read_all() == []
    assert store.append(ev("k1")) == a  # retained keyed event
    assert not store.compact_if_needed(2, lambda: {"n": 2})  # nothing to do
    c = store.append(ev())
    assert store.read_all() == [c]
    assert c["ordinal"] == 3


def test_ES_060_061_listeners_for_own_commits_each_with_a_copy(
    make_contract_store: MakeStore,
) -> None:
    store = make_contract_store()
    other = make_contract_store()
    seen: list[tuple[str, dict[str, Any]]] = []

    def first(e: dict[str, Any]) -> None:
        seen.append(("first", e))
        e["payload"]["mutated"] = True

    store.subscribe(first)
    store.subscribe(lambda e: seen.append(("second", e)))
    other.append(ev())  # another instance: not notified here
    e = store.append(ev("k", {"v": 1}))
    store.append(ev("k"))  # a replay commits nothing: no call
    assert [name for name, _ in seen] == ["first", "second"]
    assert seen[1][1] == e
    assert "mutated" not in e["payload"]


def test_ES_062_raising_listener_after_commit(make_contract_store: MakeStore) -> None:
    store = make_contract_store()

    def boom(_: dict[str, Any]) -> None:
        raise RuntimeError("listener failed")

    store.subscribe(boom)
    with pytest.raises(RuntimeError, match="listener failed"):
        store.append(ev())
    assert len(store.read_all()) == 1


def test_ES_063_subscribe_twice_registers_once(make_contract_store: MakeStore) -> None:
    store = make_contract_store()
    calls: list[int] = []

    def listener(_: dict[str, Any]) -> None:
        calls.append(1)

    unsubscribe = store.subscribe(listener)
    store.subscribe(listener)
    store.append(ev())
    assert calls == [1]
    assert unsubscribe() is True
    assert unsubscribe() is False
    store.append(ev())
    assert calls == [1]


def test_ES_065_limits_checked(make_contract_store: MakeStore) -> None:
    with pytest.raises(OrchestrationEventStoreError, match="maxTailEvents"):
        make_contract_store(max_tail_events=0)
    with pytest.raises(OrchestrationEventStoreError, match="maxIdempotencyEvents"):
        make_contract_store(max_idempotency_events=-1)


CANARY = "canary-7f3a9c1e-secret-value"


def test_canary_secret_never_reaches_the_store_or_errors(
    make_contract_store: MakeStore, store_backend: str, request: pytest.FixtureRequest
) -> None:
    store = make_contract_store()
    store.append(ev(payload={"ok": 1}))
    for payload in ({"token": Secret(CANARY)}, {"nested": [{"v": Secret(CANARY)}]}):
        with pytest.raises(OrchestrationEventStoreError) as info:
            store.append(ev(payload=payload))
        assert CANARY not in str(info.value)
        assert CANARY not in repr(info.value)
    assert CANARY not in repr(store)
    assert CANARY not in repr(store.read_all())
    if store_backend == "postgres":
        import psycopg

        conninfo = request.getfixturevalue("pg_conninfo")
        with psycopg.connect(conninfo) as conn:
            dump = conn.execute(
                "SELECT coalesce(string_agg(t::text, ' '), '') FROM ("
                " SELECT e::text AS t FROM leasegate.events e WHERE session_id = %s"
                " UNION ALL SELECT s::text FROM leasegate.sessions s WHERE session_id = %s"
                " UNION ALL SELECT i::text FROM leasegate.idempotency i WHERE session_id = %s"
                " UNION ALL SELECT p::text FROM leasegate.pruned_events p"
                " WHERE session_id = %s) x",
                (store.session_id,) * 4,
            ).fetchone()
        assert dump is not None
        assert "ok" in dump[0]  # the dump does cover the stored payloads
        assert CANARY not in dump[0]
    else:
        import os

        root = store.root_dir
        for base, _dirs, files in os.walk(root):
            for name in files:
                with open(os.path.join(base, name), "rb") as fh:
                    assert CANARY.encode() not in fh.read()
