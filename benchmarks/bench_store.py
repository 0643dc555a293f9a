"""Benchmarks of the orchestration event store (not tests).

Measures, on the disk holding ``--dir`` (default: a temp dir under the
current directory, so the same disk as the repository):

1. durable appends per second (each append: event, cursor; every write
   temp+fsync+rename+dir fsync) against Python's ``sqlite3`` in WAL mode with
   ``synchronous=FULL`` inserting one row per transaction, on the same disk,
   and their ratio (from one run);
2. open-and-replay time of a full 4 MiB tail (a new store instance and
   ``read_all()``);
3. compaction time for a 10,000-event tail (``compact_if_needed``: read and
   validate the tail, write and publish the snapshot, prune 10,000 files).
   The tail for (3) is laid down directly with the store's own record format
   (no fsync) so that the setup does not take minutes; only the compaction
   is timed.

Prints a table and writes JSON (``--out``, default
``$TMPDIR/bench_store.json``; ``benchmarks/run_all.py`` passes its own).
The default run takes well under a minute; ``--appends`` and ``--events``
scale it.

Usage: ``python benchmarks/bench_store.py [--appends 300] [--events 10000]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from leasegate.core.ledger import cursor_record, event_file_name, serialize
from leasegate.shells.store import AppendEventInput, OrchestrationEventStore

NOW = "2026-01-01T00:00:00.000Z"


def bench_appends(base: Path, n: int) -> dict[str, Any]:
    """``n`` durable appends vs ``n`` sqlite WAL/FULL single-row transactions."""
    store = OrchestrationEventStore(base / "appends", "bench")
    item = AppendEventInput(
        type="task.created", aggregate_id="a", actor="runtime", payload={"i": 1, "s": "x" * 100}
    )
    store.append(item)  # create directories outside the timing
    t0 = time.perf_counter()
    for _ in range(n):
        store.append(item)
    store_s = time.perf_counter() - t0

    db = sqlite3.connect(str(base / "bench.sqlite3"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE events (ordinal INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = json.dumps({"type": "task.created", "payload": {"i": 1, "s": "x" * 100}})
    t0 = time.perf_counter()
    for i in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO events (ordinal, body) VALUES (?, ?)", (i + 1, body))
        db.execute("COMMIT")
    sqlite_s = time.perf_counter() - t0
    db.close()
    store_rate = n / store_s
    sqlite_rate = n / sqlite_s
    return {
        "appends": n,
        "store_appends_per_s": round(store_rate, 1),
        "sqlite_wal_full_inserts_per_s": round(sqlite_rate, 1),
        "ratio_store_over_sqlite": round(store_rate / sqlite_rate, 3),
    }


def bench_replay(base: Path) -> dict[str, Any]:
    """Open a new store over a >= 4 MiB tail and ``read_all()`` it (seconds)."""
    store = OrchestrationEventStore(base / "replay", "bench")
    blob = "y" * 16_000
    n = 0
    while True:
        store.append(
            AppendEventInput(
                type="task.created", aggregate_id="a", actor="runtime", payload={"blob": blob}
            )
        )
        n += 1
        cursor = json.loads(Path(store.cursor_path).read_text())
        if cursor["tailBytes"] >= 4 * 1024 * 1024:
            break
    t0 = time.perf_counter()
    fresh = OrchestrationEventStore(base / "replay", "bench")
    events = fresh.read_all()
    replay_s = time.perf_counter() - t0
    assert len(events) == n
    return {
        "tail_events": n,
        "tail_bytes": cursor["tailBytes"],
        "open_and_replay_s": round(replay_s, 4),
    }


def bench_compaction(base: Path, n: int) -> dict[str, Any]:
    """Compact an ``n``-event keyed tail (seconds); setup writes files directly."""
    store = OrchestrationEventStore(base / "compact", "bench", max_tail_events=n)
    os.makedirs(store.events_dir)
    total = 0
    for i in range(1, n + 1):
        record: dict[str, Any] = {
            "schemaVersion": 1,
            "ordinal": i,
            "eventId": f"e{i}",
            "type": "task.created",
            "aggregateId": f"t{i % 50}",
            "actor": "runtime",
            "occurredAt": NOW,
            "idempotencyKey": f"k{i}",
            "payload": {"i": i},
        }
        data = serialize(record)
        total += len(data)
        Path(store.events_dir, event_file_name(i)).write_bytes(data)
    Path(store.cursor_path).write_bytes(serialize(cursor_record(n, total)))
    projection = {"tasks": {f"t{j}": {"n": n // 50} for j in range(50)}, "lastOrdinal": n}
    t0 = time.perf_counter()
    done = store.compact_if_needed(n, lambda: projection)
    compact_s = time.perf_counter() - t0
    assert done
    return {"events": n, "tail_bytes": total, "compaction_s": round(compact_s, 3)}


def main() -> None:
    """Run the three benchmarks, print them and write JSON to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--dir", default=".", help="a directory on the disk to measure")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "bench_store.json"),
        help="where to write the JSON report (default: the system temp dir)",
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        results: dict[str, Any] = {
            "benchmark": "orchestration event store",
            "durable_appends": bench_appends(base, args.appends),
            "replay_4mib_tail": bench_replay(base),
            "compaction": bench_compaction(base, args.events),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, values in results.items():
        if not isinstance(values, dict):
            continue
        print(name)
        for k, v in values.items():
            print(f"  {k:32} {v}")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
