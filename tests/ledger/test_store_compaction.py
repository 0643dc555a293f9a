"""Compaction, baseline verification and its cache, crash-tail reconciliation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.ledger import (
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
    idempotency_marker_name,
)
from leasegate.shells.store import FsOps, OrchestrationEventStore

from .conftest import RecordingFs, ev

MakeStore = Callable[..., OrchestrationEventStore]


def files(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def E(n: int) -> str:
    return f"events/{n:016d}.json"


def S(n: int) -> str:
    return f"snapshots/{n:016d}.json"


def cursor(store: OrchestrationEventStore) -> Any:
    return json.loads(Path(store.cursor_path).read_text())


def fill(store: OrchestrationEventStore, n: int, key: str | None = None) -> None:
    for i in range(n):
        store.append(ev(key=f"{key}{i}" if key else None))


def test_ES_036_compacts_at_the_event_threshold(make_store: MakeStore) -> None:
    store = make_store()
    fill(store, 255)
    assert store.compact_if_needed(255, lambda: {}) is False
    store.append(ev())
    assert store.compact_if_needed(256, lambda: {}) is True


def test_ES_036_compacts_at_the_byte_threshold(make_store: MakeStore) -> None:
    store = make_store()
    store.append(ev())
    size = cursor(store)["tailBytes"]
    small = make_store("s2", max_tail_bytes=size + 1)
    small.append(ev())
    assert small.compact_if_needed(1, lambda: {}) is False
    exact = make_store("s3", max_tail_bytes=size)
    exact.append(ev())
    assert exact.compact_if_needed(1, lambda: {}) is True


def test_ES_037_stale_or_ahead_through_ordinal(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    fill(store, 3)
    calls: list[int] = []

    def projection() -> dict[str, Any]:
        calls.append(1)
        return {}

    assert store.compact_if_needed(2, projection) is False
    assert store.compact_if_needed(4, projection) is False
    assert calls == []
    assert not os.path.exists(store.snapshots_dir)


def test_ES_038_prelock_check_returns_without_the_lock(make_store: MakeStore) -> None:
    store = make_store(lock_timeout_s=0.3)
    fill(store, 2)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time\n"
            f"fd=os.open({store.lock_path!r}, os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        assert store.compact_if_needed(2, lambda: {}) is False
        assert time.monotonic() - t0 < 0.2
        # a stale ordinal takes the lock (and times out while it is held)
        from leasegate.core.ledger import OrchestrationLockTimeoutError

        with pytest.raises(OrchestrationLockTimeoutError):
            store.compact_if_needed(1, lambda: {})
    finally:
        holder.kill()
        holder.wait()
    Path(store.baseline_path).write_text("{}")
    with pytest.raises(
        OrchestrationEventStoreError, match="Invalid orchestration snapshot baseline"
    ):
        store.compact_if_needed(2, lambda: {})


def test_ES_039_fresh_store_compaction_at_zero(store: OrchestrationEventStore) -> None:
    assert store.compact_if_needed(0, lambda: {}) is False
    assert files(store.root_dir) == ["cursor.json", "cursor.json.lock"]
    assert cursor(store) == {"version": 1, "lastOrdinal": 0, "tailBytes": 0}


def test_ES_040_projection_called_once_under_the_lock_and_copied(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    fill(store, 2)
    value = {"a": [1]}
    calls = []

    def projection() -> dict[str, Any]:
        calls.append(1)
        return value

    assert store.compact_if_needed(2, projection)
    value["a"].append(2)
    assert calls == [1]
    snap = store.read_projection_snapshot()
    assert snap is not None
    assert snap.projection == {"a": [1]}


def test_ES_041_snapshot_and_baseline_content(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=2)
    store.append(ev(key="k1"))
    store.append(ev())
    store.compact_if_needed(2, lambda: {"x": 1})
    snap = json.loads(Path(store.root_dir, S(2)).read_text())
    base = json.loads(Path(store.baseline_path).read_text())
    assert snap["version"] == 1
    assert snap["schemaVersion"] == 1
    assert snap["throughOrdinal"] == 2
    assert snap["createdAt"] == "2026-01-01T00:00:00.000Z"
    assert snap["projection"] == {"x": 1}
    assert [e["idempotencyKey"] for e in snap["idempotencyEvents"]] == ["k1"]
    assert base == {
        "version": 1,
        "throughOrdinal": 2,
        "digest": snap["digest"],
        "snapshotFile": "0000000000000002.json",
    }


def _compact_with_log(make_store: MakeStore) -> tuple[OrchestrationEventStore, list[Any]]:
    fs = RecordingFs()
    store = make_store(max_tail_events=3, fs=fs)
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    store.append(ev())
    store.compact_if_needed(3, lambda: {})
    store.append(ev(key="k4"))
    store.append(ev())
    store.append(ev())
    fs.log.clear()
    assert store.compact_if_needed(6, lambda: {})
    steps = [(op, n) for op, n in fs.log if op in ("fsync", "rename", "fsync_dir", "unlink")]
    return store, steps


def test_ES_044_snapshot_durable_before_the_baseline_is_published(make_store: MakeStore) -> None:
    store, steps = _compact_with_log(make_store)
    names = [n for _, n in steps]
    snap_rename = names.index(f"{6:016d}.json")
    base_rename = names.index("projection-baseline.json")
    assert steps[snap_rename - 1] == ("fsync", "")
    assert steps[snap_rename + 1] == ("fsync_dir", "snapshots")
    assert snap_rename < base_rename
    assert steps[base_rename + 1] == ("fsync_dir", Path(store.root_dir).name)
    first_unlink = next(i for i, (op, _) in enumerate(steps) if op == "unlink")
    assert first_unlink > base_rename + 1  # the baseline is durable before any unlink


def test_ES_045_prune_order_and_resulting_files(make_store: MakeStore) -> None:
    store, steps = _compact_with_log(make_store)
    unlinks = [n for op, n in steps if op == "unlink"]
    marker = idempotency_marker_name("k4")
    assert unlinks == [
        marker,
        f"{4:016d}.json",
        f"{5:016d}.json",
        f"{6:016d}.json",
        f"{3:016d}.json",
    ]
    names = [n for _, n in steps]
    assert names[-3:] == ["", "cursor.json", Path(store.root_dir).name]  # cursor write last
    assert files(store.root_dir) == [
        "cursor.json",
        "cursor.json.lock",
        "projection-baseline.json",
        S(6),
    ]
    assert cursor(store) == {"version": 1, "lastOrdinal": 6, "tailBytes": 0}


def test_ES_046_all_markers_removed_before_the_first_event_file(make_store: MakeStore) -> None:
    _, steps = _compact_with_log(make_store)
    unlinks = [n for op, n in steps if op == "unlink"]
    last_marker = max(i for i, n in enumerate(unlinks) if len(n) == 69)  # sha256 hex + .json
    first_event = min(i for i, n in enumerate(unlinks) if len(n) == 21)
    assert last_marker < first_event


def test_ES_047_unlink_missing_skipped_other_errors_propagate(make_store: MakeStore) -> None:
    class Fs(FsOps):
        mode = "missing"

        def unlink(self, path: str) -> None:
            if path.endswith(f"{1:016d}.json") and "events" in path:
                if self.mode == "missing":
                    super().unlink(path)  # already gone when the store gets to it
                    raise FileNotFoundError(2, "gone", path)
                raise PermissionError(13, "denied", path)
            super().unlink(path)

    fs = Fs()
    store = make_store(max_tail_events=2, fs=fs)
    fill(store, 2)
    assert store.compact_if_needed(2, lambda: {}) is True
    fs.mode = "denied"
    fill(store, 2)
    Path(store.root_dir, E(1)).write_text("{}")  # a leftover to prune
    with pytest.raises(PermissionError):
        store.compact_if_needed(4, lambda: {})
    snap = store.read_projection_snapshot()
    assert snap is not None
    assert snap.through_ordinal == 4
    assert store.append(ev())["ordinal"] == 5


def test_ES_048_state_after_compaction(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=3)
    seen: list[int] = []
    store.subscribe(lambda e: seen.append(e["ordinal"]))
    store.append(ev(key="k1"))
    fill(store, 2)
    seen.clear()
    assert store.compact_if_needed(3, lambda: {"p": 1})
    assert store.read_all() == []
    assert store.read_after(3) == []
    with pytest.raises(OrchestrationSnapshotRequiredError):
        store.read_after(2)
    snap = store.read_projection_snapshot()
    assert snap is not None
    assert (snap.through_ordinal, snap.projection) == (3, {"p": 1})
    assert seen == []
    assert store.append(ev(key="k1"))["ordinal"] == 1
    assert store.append(ev(), expected_last_ordinal=3)["ordinal"] == 4


@pytest.mark.parametrize("bad", [[], None, {"x": float("nan")}, {"x": object()}, "text"])
def test_ES_049_non_object_projection_refused_before_any_write(
    make_store: MakeStore, bad: Any
) -> None:
    store = make_store(max_tail_events=2)
    fill(store, 2)
    before = files(store.root_dir)
    with pytest.raises(OrchestrationEventStoreError, match="must be a JSON object"):
        store.compact_if_needed(2, lambda: bad)
    assert files(store.root_dir) == before
    assert len(store.read_all()) == 2


def test_ES_050_every_operation_reads_the_baseline(make_store: MakeStore) -> None:
    store = make_store()
    store.append(ev())
    Path(store.baseline_path).write_text("{broken")
    for call in (
        store.read_all,
        lambda: store.read_after(5),
        store.read_projection_snapshot,
        lambda: store.append(ev()),
        lambda: store.compact_if_needed(1, lambda: {}),
    ):
        with pytest.raises(OrchestrationEventStoreError) as info:
            call()
        assert str(info.value).startswith("Failed to parse orchestration snapshot baseline: ")


def test_ES_051_missing_snapshot_file(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    store.append(ev())
    store.compact_if_needed(1, lambda: {})
    os.unlink(Path(store.root_dir, S(1)))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.read_projection_snapshot()
    assert str(info.value).startswith("Failed to parse orchestration projection snapshot: ")


def test_ES_052_tampered_snapshot_detected_by_a_new_instance(make_store: MakeStore) -> None:
    store = make_store(max_tail_events=1)
    store.append(ev())
    store.compact_if_needed(1, lambda: {"v": 1})
    p = Path(store.root_dir, S(1))
    p.write_text(p.read_text().replace('"v": 1', '"v": 2'))
    with pytest.raises(OrchestrationEventStoreError, match="digest mismatch"):
        make_store().append(ev())


def test_ES_053_verified_baseline_cache(make_store: MakeStore) -> None:
    fs = RecordingFs()
    store = make_store(max_tail_events=2, fs=fs)
    fill(store, 2)
    store.compact_if_needed(2, lambda: {"v": 1})
    name = f"{2:016d}.json"
    fs.log.clear()
    store.append(ev())
    assert fs.reads_of(name) == 1
    store.append(ev())
    store.append(ev())
    assert fs.reads_of(name) == 1
    fs2 = RecordingFs()
    other = make_store(fs=fs2, max_tail_events=100)
    other.append(ev())
    other.append(ev())
    assert fs2.reads_of(name) == 1
    # rewrite after verification: ctime changes, the next append re-verifies
    p = Path(store.root_dir, S(2))
    time.sleep(0.01)
    p.write_text(p.read_text().replace('"v": 1', '"v": 7'))
    with pytest.raises(OrchestrationEventStoreError, match="digest mismatch"):
        store.append(ev())


def test_ES_054_snapshot_stat_checks(make_store: MakeStore) -> None:
    class Fs(FsOps):
        flip = False
        n = 0

        def stat(self, path: str) -> os.stat_result:
            st = super().stat(path)
            if self.flip and "snapshots" in path:
                self.n += 1
                if self.n % 2 == 0:  # the stat after verification differs
                    vals = list(st)
                    vals[6] += 1  # st_size
                    return os.stat_result(vals)
            return st

    fs = Fs()
    store = make_store(max_tail_events=1, fs=fs)
    store.append(ev())
    store.compact_if_needed(1, lambda: {})
    fs.flip = True
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev())
    assert str(info.value) == "Orchestration projection snapshot changed while being verified."
    fs.flip = False
    p = Path(store.root_dir, S(1))
    data = p.read_bytes()
    p.unlink()
    with pytest.raises(
        OrchestrationEventStoreError, match=r"Failed to parse orchestration projection"
    ):
        store.append(ev())
    p.mkdir()
    with pytest.raises(OrchestrationEventStoreError, match="is not a file"):
        store.append(ev())
    p.rmdir()
    p.write_bytes(data)
    assert store.append(ev())["ordinal"] == 2


def test_ES_055_fast_path_opens_no_event_file(make_store: MakeStore) -> None:
    fs = RecordingFs()
    store = make_store(fs=fs)
    fill(store, 3)
    Path(store.root_dir, E(3)).write_text("corrupt")
    fs.log.clear()
    assert store.append(ev())["ordinal"] == 4
    assert not any(op == "read" and n.endswith(".json") and n[0] == "0" for op, n in fs.log)
    with pytest.raises(OrchestrationEventStoreError, match=r"0000000000000003\.json"):
        store.read_all()


def test_ES_056_rebuild_from_cursor_plus_one(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    store.append(ev(key="k3"))
    for k in ("k1", "k2", "k3"):
        os.unlink(os.path.join(store.idempotency_dir, idempotency_marker_name(k)))
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 1}')
    store.append(ev())
    markers = sorted(os.listdir(store.idempotency_dir))
    assert markers == sorted(idempotency_marker_name(k) for k in ("k2", "k3"))
    assert cursor(store)["lastOrdinal"] == 4


def test_ES_057_invalid_cursor_rebuilds_whole_tail(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev())
    for name in os.listdir(store.idempotency_dir):
        os.unlink(os.path.join(store.idempotency_dir, name))
    Path(store.cursor_path).write_text("garbage")
    assert store.append(ev(key="k1"))["ordinal"] == 1
    assert cursor(store)["lastOrdinal"] == 2


def test_ES_058_rebuild_refuses_mismatched_ordinal_and_writes_nothing(
    store: OrchestrationEventStore,
) -> None:
    store.append(ev(key="k1"))
    store.append(ev())
    rec = json.loads(Path(store.root_dir, E(2)).read_text())
    rec["ordinal"] = 9
    Path(store.root_dir, E(2)).write_text(json.dumps(rec))
    os.unlink(os.path.join(store.idempotency_dir, idempotency_marker_name("k1")))
    Path(store.cursor_path).write_text("{}")
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(ev())
    assert str(info.value) == "Event ordinal does not match file name: 0000000000000002.json"
    assert os.listdir(store.idempotency_dir) == []
    assert Path(store.cursor_path).read_text() == "{}"


def test_ES_059_tail_bytes_recomputed_and_compaction_cursor_repaired(
    make_store: MakeStore,
) -> None:
    store = make_store(max_tail_events=2)
    fill(store, 2)
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 2}')
    store.append(ev())
    sizes = sum(Path(store.root_dir, E(n)).stat().st_size for n in (1, 2, 3))
    assert cursor(store)["tailBytes"] == sizes
    store.compact_if_needed(3, lambda: {})
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 3, "tailBytes": 77}')
    store.append(ev())  # reconciliation repairs {T, 77} to {T, 0} before appending
    assert cursor(store) == {
        "version": 1,
        "lastOrdinal": 4,
        "tailBytes": Path(store.root_dir, E(4)).stat().st_size,
    }


def test_ES_033_034_corrupt_layouts_are_reported_by_every_operation(
    store: OrchestrationEventStore,
) -> None:
    fill(store, 4)
    os.unlink(Path(store.root_dir, E(4)))
    for call in (store.read_all, lambda: store.append(ev())):
        with pytest.raises(OrchestrationEventStoreError) as info:
            call()
        assert str(info.value) == "Orchestration cursor 4 is ahead of the last committed event 3."
    os.unlink(Path(store.root_dir, E(2)))
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.read_all()
    assert str(info.value) == "Missing orchestration event ordinal 2 before 0000000000000003.json."


def test_ES_026_033_052_corrupt_files_are_typed_errors_naming_the_file(
    make_store: MakeStore,
) -> None:
    def fresh(name: str) -> OrchestrationEventStore:
        s = make_store(name, max_tail_events=2)
        fill(s, 2)
        s.compact_if_needed(2, lambda: {"v": 1})
        fill(s, 3)
        return s

    cases: list[tuple[str, Callable[[OrchestrationEventStore], None], str]] = [
        (
            "truncated",
            lambda s: Path(s.root_dir, E(4)).write_text('{"schemaVersion": 1,'),
            f"{4:016d}.json",
        ),
        (
            "digest",
            lambda s: Path(s.root_dir, S(2)).write_text(
                Path(s.root_dir, S(2)).read_text().replace('"v": 1', '"v": 5')
            ),
            f"{2:016d}.json",
        ),
        (
            "ordinal",
            lambda s: Path(s.root_dir, E(4)).write_text(Path(s.root_dir, E(5)).read_text()),
            f"{4:016d}.json",
        ),
        ("missing", lambda s: os.unlink(Path(s.root_dir, E(4))), f"{5:016d}.json"),
    ]
    for name, corrupt, bad_file in cases:
        store = fresh(name)
        corrupt(store)
        with pytest.raises(OrchestrationEventStoreError) as info:
            store.read_all()
        assert info.value.file == bad_file, name
        assert bad_file in str(info.value) or name == "digest"


class ListingFs(FsOps):
    """Counts directory listings and the files read, by bare name."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.read_names: list[str] = []

    def listdir(self, path: str) -> list[str]:
        self.listed.append(os.path.basename(path))
        return super().listdir(path)

    def read(self, path: str) -> bytes:
        self.read_names.append(os.path.basename(path))
        return super().read(path)


def test_ES_055_append_with_a_confirmed_cursor_lists_no_directory(
    make_store: MakeStore,
) -> None:
    fs = ListingFs()
    store = make_store(fs=fs, max_tail_events=40)
    fill(store, 40, key="k")
    assert store.compact_if_needed(40, lambda: {"v": 1})
    fill(store, 3)
    fs.listed.clear()
    fs.read_names.clear()
    # plain, new-key and replayed-key appends over a baseline: the cursor is
    # confirmed by two stats, the retained keys come from the verified
    # snapshot, nothing is listed and no event or snapshot file is parsed
    assert store.append(ev())["ordinal"] == 44
    assert store.append(ev(key="fresh"))["ordinal"] == 45
    assert store.append(ev(key="k39"))["ordinal"] == 40
    assert store.append(ev(key="fresh"))["ordinal"] == 45
    assert fs.listed == []
    assert sorted(set(fs.read_names)) == [
        "0000000000000045.json",  # the marker of "fresh" names it
        "cursor.json",
        idempotency_marker_name("fresh"),
        idempotency_marker_name("k39"),
        "projection-baseline.json",
    ]
    assert fs.read_names.count("0000000000000045.json") == 1


def test_ES_033_gap_below_a_confirmed_cursor_is_reported_by_reads_and_compaction(
    make_store: MakeStore,
) -> None:
    # no crash leaves a gap (only deleting a file does); an append that finds
    # its cursor confirmed does not list the tail to look for one, and every
    # operation that lists it refuses it
    store = make_store(max_tail_events=2)
    fill(store, 4)
    os.unlink(Path(store.root_dir, E(2)))
    assert store.append(ev())["ordinal"] == 5
    message = "Missing orchestration event ordinal 2 before 0000000000000003.json."
    for call in (store.read_all, lambda: store.compact_if_needed(5, lambda: {})):
        with pytest.raises(OrchestrationEventStoreError) as info:
            call()
        assert str(info.value) == message
    assert not os.path.exists(store.baseline_path)


def test_ES_037_compaction_below_the_newest_event_keeps_every_key_deduplicated(
    make_store: MakeStore,
) -> None:
    # compaction removes every marker, but only at T = H: a compaction asked
    # for below the newest event (a stale caller, or a crash tail the cursor
    # does not cover yet) returns False and leaves every marker
    store = make_store(max_tail_events=1)
    fill(store, 3, key="k")
    assert store.compact_if_needed(2, lambda: {}) is False
    e4 = store.append(ev(key="k3"))
    Path(store.cursor_path).write_text('{"version": 1, "lastOrdinal": 3, "tailBytes": 1}')
    assert store.compact_if_needed(3, lambda: {}) is False  # reconciliation finds H = 4
    assert len(os.listdir(store.idempotency_dir)) == 4
    for i in range(3):
        assert store.append(ev(key=f"k{i}"))["ordinal"] == i + 1
    assert store.append(ev(key="k3")) == e4
    assert cursor(store)["lastOrdinal"] == 4
    # at T = H every keyed event is compacted and retained (within the bound)
    assert store.compact_if_needed(4, lambda: {})
    for i in range(4):
        assert store.append(ev(key=f"k{i}"))["ordinal"] == i + 1
    assert store.append(ev())["ordinal"] == 5
