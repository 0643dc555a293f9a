"""The file event store: layout, append, idempotency, concurrency, reads, subscribers."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core import Secret
from leasegate.core.ledger import (
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
    idempotency_marker_name,
    serialize,
)
from leasegate.shells.store import OrchestrationEventStore

from .conftest import NOW, RecordingFs, ev

MakeStore = Callable[..., OrchestrationEventStore]


def files(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def E(n: int) -> str:
    return f"events/{n:016d}.json"


def cursor(store: OrchestrationEventStore) -> Any:
    return json.loads(Path(store.cursor_path).read_text())


def test_ES_002_paths_and_no_disk_effect_before_use(agent_dir: Path) -> None:
    store = OrchestrationEventStore(agent_dir, "abc")
    root = agent_dir / "state" / "orchestration" / "abc-ba7816bf8f01cfea"
    assert store.root_dir == str(root)
    assert store.events_dir == str(root / "events")
    assert store.idempotency_dir == str(root / "idempotency")
    assert store.snapshots_dir == str(root / "snapshots")
    assert store.cursor_path == str(root / "cursor.json")
    assert store.baseline_path == str(root / "projection-baseline.json")
    assert store.read_all() == []
    assert store.read_after(0) == []
    assert store.read_after(99) == []
    assert store.read_projection_snapshot() is None
    assert not agent_dir.exists()


def test_ES_006_first_append(store: OrchestrationEventStore) -> None:
    payload = {"x": [1, {"y": "ü"}]}
    got = store.append(ev(payload=payload))
    assert got == {
        "schemaVersion": 1,
        "ordinal": 1,
        "eventId": "e1",
        "type": "task.created",
        "aggregateId": "a",
        "actor": "runtime",
        "occurredAt": NOW,
        "payload": payload,
    }
    assert files(store.root_dir) == ["cursor.json", "cursor.json.lock", E(1)]
    data = Path(store.root_dir, E(1)).read_bytes()
    assert data == serialize(got)
    assert cursor(store) == {"version": 1, "lastOrdinal": 1, "tailBytes": len(data)}


def test_ES_007_optional_ids_present_only_when_non_empty(store: OrchestrationEventStore) -> None:
    a = store.append(ev(key="", correlation_id="c1", causation_id=""))
    assert a["correlationId"] == "c1"
    assert "causationId" not in a
    assert "idempotencyKey" not in a
    assert not os.path.exists(store.idempotency_dir)
    b = store.append(ev(key="k", causation_id="z"))
    assert list(b) == [
        "schemaVersion",
        "ordinal",
        "eventId",
        "type",
        "aggregateId",
        "actor",
        "occurredAt",
        "causationId",
        "idempotencyKey",
        "payload",
    ]


def test_ES_008_ordinal_after_a_crash_tail_is_H_plus_one(store: OrchestrationEventStore) -> None:
    store.append(ev())
    store.append(ev())
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 1, "tailBytes": 5}')
    assert store.append(ev())["ordinal"] == 3


def test_ES_009_write_order_event_marker_cursor(make_store: MakeStore) -> None:
    fs = RecordingFs()
    store = make_store(fs=fs)
    store.append(ev())
    fs.log.clear()
    store.append(ev(key="k1"))
    renames = [n for op, n in fs.log if op == "rename"]
    assert renames == [f"{2:016d}.json", idempotency_marker_name("k1"), "cursor.json"]
    # each rename is followed by an fsync of its directory; each temp fsynced first
    ops = [op for op, _ in fs.log if op in ("write", "fsync", "rename", "fsync_dir")]
    assert ops[:4] == ["write", "fsync", "rename", "fsync_dir"]
    assert ops[-4:] == ["write", "fsync", "rename", "fsync_dir"]


def test_ES_010_tail_bytes_accumulate(store: OrchestrationEventStore) -> None:
    sizes = []
    for i in range(3):
        store.append(ev(payload={"v": "ü" * i}))
        sizes.append(Path(store.root_dir, E(i + 1)).stat().st_size)
    assert cursor(store)["tailBytes"] == sum(sizes)


def test_ES_011_clock_and_id_once_per_commit_and_copies(
    store: OrchestrationEventStore, ids: Any
) -> None:
    payload: dict[str, Any] = {"a": {"b": 1}}
    got = store.append(ev(key="k", payload=payload))
    assert (ids.n, ids.now_calls) == (1, 1)
    payload["a"]["b"] = 2
    got["payload"]["a"]["b"] = 3
    assert store.read_all()[0]["payload"] == {"a": {"b": 1}}
    store.append(ev(key="k"))  # idempotent replay
    with pytest.raises(OrchestrationConcurrencyError):
        store.append(ev(), expected_last_ordinal=0)
    assert (ids.n, ids.now_calls) == (1, 1)


def test_ES_012_two_instances_on_threads_get_distinct_consecutive_ordinals(
    make_store: MakeStore,
) -> None:
    stores = [make_store(create_event_id=lambda: "x") for _ in range(2)]
    got: list[int] = []
    lock = threading.Lock()

    def run(s: OrchestrationEventStore) -> None:
        for _ in range(15):
            o = s.append(ev())["ordinal"]
            with lock:
                got.append(o)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 31))
    assert [e["ordinal"] for e in stores[0].read_all()] == list(range(1, 31))


def test_ES_012_lock_released_when_append_raises(make_store: MakeStore) -> None:
    store = make_store()
    store.append(ev())
    with pytest.raises(OrchestrationConcurrencyError):
        store.append(ev(), expected_last_ordinal=7)
    other = make_store(lock_timeout_s=0.2)
    assert other.append(ev())["ordinal"] == 2


@pytest.mark.parametrize(
    "bad",
    [
        ev(type="unknown.type"),
        ev(aggregate=""),
        ev(payload={"x": float("nan")}),
        ev(payload={"x": object()}),
        ev(actor="nobody"),
        ev(payload={"x": "\ud800"}),
    ],
)
def test_ES_013_invalid_input_writes_nothing(store: OrchestrationEventStore, bad: Any) -> None:
    store.append(ev())
    before = files(store.root_dir)
    with pytest.raises(OrchestrationEventStoreError, match="Invalid orchestration event input"):
        store.append(bad)
    assert files(store.root_dir) == before
    assert store.append(ev())["ordinal"] == 2


def test_ES_013_secret_payload_refused_without_showing_it(store: OrchestrationEventStore) -> None:
    canary = Secret("CANARY-secret-value")
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev(payload={"token": canary}))  # type: ignore[dict-item]
    assert "CANARY" not in str(info.value)
    assert "CANARY" not in repr(info.value)


def test_ES_014_idempotent_replay_returns_stored_event(store: OrchestrationEventStore) -> None:
    first = store.append(ev(key="k1", payload={"v": 1}))
    store.append(ev())
    before = cursor(store)
    seen: list[Any] = []
    store.subscribe(seen.append)
    again = store.append(ev(key="k1", payload={"v": 2}, type="task.failed", aggregate="other"))
    assert again == first
    assert cursor(store) == before
    assert seen == []
    assert len(store.read_all()) == 2


def test_ES_015_key_lookup_precedes_expected_check_and_follows_reconciliation(
    store: OrchestrationEventStore,
) -> None:
    first = store.append(ev(key="k1"))
    store.append(ev())
    assert store.append(ev(key="k1"), expected_last_ordinal=0) == first
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 9, "tailBytes": 1}')
    with pytest.raises(OrchestrationEventStoreError, match="ahead of the last committed event 2"):
        store.append(ev(key="k1"))


def test_ES_016_missing_marker_falls_back_to_snapshot_or_appends(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    assert store.compact_if_needed(2, lambda: {"p": 1})
    assert store.append(ev(key="k1"))["ordinal"] == 1  # retained in the snapshot
    assert store.append(ev(key="k9"))["ordinal"] == 3  # unknown: new event


def test_ES_018_marker_not_matching_its_event(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    marker = Path(store.idempotency_dir, idempotency_marker_name("k1"))
    marker.write_text(json.dumps({"version": 1, "key": "k1", "ordinal": 2}))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev(key="k1"))
    assert str(info.value) == "Orchestration idempotency marker does not match its event."


def test_ES_019_marker_whose_event_is_gone(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    store.compact_if_needed(2, lambda: {})
    # a stale marker of a retained key resolves to the retained event
    Path(store.idempotency_dir, idempotency_marker_name("k1")).write_text(
        json.dumps({"version": 1, "key": "k1", "ordinal": 1})
    )
    assert store.append(ev(key="k1"))["eventId"] == "e1"
    # a marker pointing at a vanished, unretained event fails for that key only
    Path(store.idempotency_dir, idempotency_marker_name("kx")).write_text(
        json.dumps({"version": 1, "key": "kx", "ordinal": 2})
    )
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev(key="kx"))
    assert str(info.value).startswith("Failed to parse orchestration event 0000000000000002.json: ")
    assert store.append(ev())["ordinal"] == 3


def test_ES_020_only_newest_m_keys_stay_deduplicated(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=4, max_idempotency_events=2)
    store.append(ev(key="k1"))
    store.append(ev())
    store.append(ev(key="k3"))
    store.append(ev(key="k4"))
    assert store.compact_if_needed(4, lambda: {})
    assert store.append(ev(key="k1"))["ordinal"] == 5
    assert store.append(ev(key="k3"))["ordinal"] == 3


def test_ES_021_concurrency_error(store: OrchestrationEventStore) -> None:
    store.append(ev())
    before = files(store.root_dir)
    with pytest.raises(OrchestrationConcurrencyError) as info:
        store.append(ev(), expected_last_ordinal=0)
    assert str(info.value) == "Orchestration event cursor changed: expected 0, actual 1."
    assert files(store.root_dir) == before


def test_ES_022_expected_equal_H_appends_also_after_compaction(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    assert store.append(ev(), expected_last_ordinal=0)["ordinal"] == 1
    store.append(ev(), expected_last_ordinal=1)
    assert store.compact_if_needed(2, lambda: {})
    with pytest.raises(OrchestrationConcurrencyError, match="expected 0, actual 2"):
        store.append(ev(), expected_last_ordinal=0)
    assert store.append(ev(), expected_last_ordinal=2)["ordinal"] == 3


def test_ES_024_read_all_skips_files_at_or_below_T(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    store.append(ev())
    store.append(ev())
    e2 = Path(store.root_dir, E(2)).read_bytes()
    store.compact_if_needed(2, lambda: {})
    store.append(ev())
    Path(store.root_dir, E(2)).write_bytes(e2)  # a leftover after a crash during pruning
    assert [e["ordinal"] for e in store.read_all()] == [3]


def test_ES_025_read_all_raises_snapshot_defects(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    store.append(ev())
    store.compact_if_needed(1, lambda: {"a": 1})
    snap = Path(store.snapshots_dir, "0000000000000001.json")
    rec = json.loads(snap.read_text())
    rec["projection"] = {"a": 2}
    snap.write_text(json.dumps(rec))
    with pytest.raises(OrchestrationEventStoreError, match="digest mismatch"):
        store.read_all()


def test_ES_026_read_reports_corrupt_files_by_name(store: OrchestrationEventStore) -> None:
    for _ in range(3):
        store.append(ev())
    p = Path(store.root_dir, E(2))
    good = p.read_bytes()
    p.write_bytes(good[:20])  # truncated JSON
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.read_all()
    assert str(info.value).startswith("Failed to parse orchestration event 0000000000000002.json: ")
    assert info.value.file == "0000000000000002.json"
    p.write_text(json.dumps({"nope": 1}))
    with pytest.raises(
        OrchestrationEventStoreError, match=r"Invalid orchestration event record: 0+2"
    ):
        store.read_all()
    rec = json.loads(good)
    rec["ordinal"] = 3
    p.write_text(json.dumps(rec))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.read_after(0)
    assert str(info.value) == "Non-monotonic orchestration event ordinal in 0000000000000002.json"


def test_ES_027_read_after_below_baseline_requires_snapshot(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=3)
    for _ in range(3):
        store.append(ev())
    store.compact_if_needed(3, lambda: {})
    with pytest.raises(OrchestrationSnapshotRequiredError) as info:
        store.read_after(2)
    assert info.value.through_ordinal == 3
    assert store.read_after(3) == []


def test_ES_028_read_after_returns_later_events_and_skips_lower_files(
    store: OrchestrationEventStore,
) -> None:
    for _ in range(4):
        store.append(ev())
    assert [e["ordinal"] for e in store.read_after(2)] == [3, 4]
    assert store.read_after(4) == []
    assert store.read_after(10) == []
    assert len(store.read_after(-5)) == 4
    Path(store.root_dir, E(1)).write_text("garbage")
    assert [e["ordinal"] for e in store.read_after(1)] == [2, 3, 4]


def test_ES_029_read_after_does_not_read_the_snapshot_payload(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    store.append(ev())
    store.compact_if_needed(1, lambda: {})
    store.append(ev())
    Path(store.snapshots_dir, "0000000000000001.json").write_text("corrupt")
    assert [e["ordinal"] for e in store.read_after(1)] == [2]
    Path(store.baseline_path).write_text("[]")
    with pytest.raises(
        OrchestrationEventStoreError, match=r"Invalid orchestration snapshot baseline\."
    ):
        store.read_after(1)


def test_ES_030_read_projection_snapshot(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    assert store.read_projection_snapshot() is None
    store.append(ev())
    store.compact_if_needed(1, lambda: {"k": [1]})
    snap = store.read_projection_snapshot()
    assert snap is not None
    assert (snap.through_ordinal, snap.projection) == (1, {"k": [1]})
    snap.projection["k"].append(2)
    again = store.read_projection_snapshot()
    assert again is not None
    assert again.projection == {"k": [1]}


def test_ES_031_reads_see_crash_tail_without_repairing(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 1, "tailBytes": 3}')
    os.unlink(os.path.join(store.idempotency_dir, idempotency_marker_name("k2")))
    assert [e["ordinal"] for e in store.read_all()] == [1, 2]
    assert [e["ordinal"] for e in store.read_after(1)] == [2]
    assert cursor(store) == {"version": 1, "lastOrdinal": 1, "tailBytes": 3}
    assert not os.path.exists(os.path.join(store.idempotency_dir, idempotency_marker_name("k2")))


def test_ES_032_reads_exclude_a_concurrent_compaction(make_store: MakeStore) -> None:
    writer = make_store(max_tail_events=2)
    reader = make_store()
    for i in range(40):
        writer.append(ev())
        if i % 2:
            writer.compact_if_needed(i + 1, lambda: {})
    stop = threading.Event()
    errors: list[BaseException] = []

    def read_loop() -> None:
        while not stop.is_set():
            try:
                reader.read_all()
                snap = reader.read_projection_snapshot()
                with contextlib.suppress(OrchestrationSnapshotRequiredError):
                    reader.read_after(snap.through_ordinal if snap else 0)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    t = threading.Thread(target=read_loop)
    t.start()
    try:
        for i in range(40, 120):
            writer.append(ev())
            writer.compact_if_needed(i + 1, lambda: {})
    finally:
        stop.set()
        t.join()
    assert errors == []


def test_ES_060_listeners_in_order_each_with_own_copy(store: OrchestrationEventStore) -> None:
    calls: list[tuple[str, Any]] = []

    def l1(e: dict[str, Any]) -> None:
        calls.append(("l1", e["payload"]["v"]))
        e["payload"]["v"] = "mutated"

    def l2(e: dict[str, Any]) -> None:
        calls.append(("l2", e["payload"]["v"]))

    store.subscribe(l1)
    store.subscribe(l2)
    got = store.append(ev(payload={"v": "orig"}))
    assert calls == [("l1", "orig"), ("l2", "orig")]
    assert got["payload"]["v"] == "orig"


def test_ES_060_listener_changes_during_notification_use_a_copy(
    store: OrchestrationEventStore,
) -> None:
    calls: list[str] = []
    unsubscribe_l2: list[Callable[[], bool]] = []

    def late(e: dict[str, Any]) -> None:
        calls.append("late")

    def l1(e: dict[str, Any]) -> None:
        calls.append("l1")
        store.subscribe(late)
        unsubscribe_l2[0]()

    def l2(e: dict[str, Any]) -> None:
        calls.append("l2")

    store.subscribe(l1)
    unsubscribe_l2.append(store.subscribe(l2))
    store.append(ev())
    assert calls == ["l1", "l2"]  # pinned: iteration over a copy
    calls.clear()
    store.append(ev())
    assert calls == ["l1", "late"]


def test_ES_061_listeners_only_for_own_committed_appends(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    other = make_store()
    seen: list[int] = []
    store.subscribe(lambda e: seen.append(e["ordinal"]))
    store.append(ev(key="k"))
    store.append(ev(key="k"))
    with pytest.raises(OrchestrationConcurrencyError):
        store.append(ev(), expected_last_ordinal=0)
    other.append(ev())
    store.compact_if_needed(2, lambda: {})
    assert seen == [1]


def test_ES_062_raising_listener_after_commit(store: OrchestrationEventStore) -> None:
    later: list[int] = []

    def boom(e: dict[str, Any]) -> None:
        if e["ordinal"] == 1:
            raise RuntimeError("listener failed")

    store.subscribe(boom)
    store.subscribe(lambda e: later.append(e["ordinal"]))
    with pytest.raises(RuntimeError, match="listener failed"):
        store.append(ev())
    assert cursor(store)["lastOrdinal"] == 1
    assert later == []
    store.append(ev())
    assert later == [2]


def test_ES_063_subscribe_twice_registers_once(store: OrchestrationEventStore) -> None:
    seen: list[int] = []

    def listener(e: dict[str, Any]) -> None:
        seen.append(e["ordinal"])

    unsub = store.subscribe(listener)
    store.subscribe(listener)
    store.append(ev())
    assert seen == [1]
    assert unsub() is True
    assert unsub() is False
    store.append(ev())
    assert seen == [1]


def test_ES_065_store_construction_checks_limits_in_order(agent_dir: Path) -> None:
    with pytest.raises(OrchestrationEventStoreError) as info:
        OrchestrationEventStore(agent_dir, "s", max_tail_events=0, max_tail_bytes=0)
    assert str(info.value) == "maxTailEvents must be a positive safe integer."
    with pytest.raises(OrchestrationEventStoreError, match="maxIdempotencyEvents"):
        OrchestrationEventStore(agent_dir, "s", max_idempotency_events=True)  # type: ignore[arg-type]
    assert not agent_dir.exists()


def test_ES_066_os_errors_propagate_unwrapped_listing_others_swallowed(
    store: OrchestrationEventStore,
) -> None:
    store.append(ev())
    events = Path(store.events_dir)
    events.rename(Path(store.root_dir, "moved"))
    events.write_text("not a directory")
    with pytest.raises(NotADirectoryError):
        store.read_all()
    events.unlink()
    Path(store.root_dir, "moved").rename(events)
    Path(store.idempotency_dir).write_text("not a directory")  # listing fails: counts as empty
    store2_events = store.read_all()
    assert len(store2_events) == 1


def test_ES_072_stray_temp_files_are_ignored(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k"))
    for d, name in (
        (store.events_dir, "0000000000000002.json.123.abc.tmp"),
        (store.idempotency_dir, "x.json.1.2.tmp"),
        (store.root_dir, "cursor.json.9.9.tmp"),
    ):
        Path(d, name).write_text("{")
    assert [e["ordinal"] for e in store.read_all()] == [1]
    assert store.append(ev())["ordinal"] == 2
    assert store.append(ev(key="k"))["ordinal"] == 1


def test_canary_values_never_reach_errors(store: OrchestrationEventStore) -> None:
    store.append(ev(payload={"note": "CANARY-not-a-secret-but-never-quoted"}))
    p = Path(store.root_dir, E(1))
    p.write_text(p.read_text().replace('"note"', '"note" "CANARY"'))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.read_all()
    assert "CANARY" not in str(info.value)


def test_ES_064_default_clock_and_event_ids(agent_dir: Path) -> None:
    import re

    from leasegate.shells.store import iso_now

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", iso_now())
    store = OrchestrationEventStore(agent_dir, "defaults")
    assert (store.max_tail_events, store.max_tail_bytes, store.max_idempotency_events) == (
        256,
        4 * 1024 * 1024,
        512,
    )
    e = store.append(ev())
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", e["eventId"]
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["occurredAt"])
    explicit_none = OrchestrationEventStore(agent_dir, "d2", max_tail_events=None)
    assert explicit_none.max_tail_events == 256
