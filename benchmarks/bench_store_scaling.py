"""Benchmark: event store append rate against the number of events in the store.

Measures durable appends per second (each one: event and cursor written with
temp+fsync+rename+directory fsync) into stores already holding 1,000,
10,000 and 100,000 events, and the ratio of the rate at the largest size to
the rate at the smallest, from one run. An append is O(1) in the size of the
store when the ratio is near 1 (the goal is ≥ 0.9). A fourth case appends
after compacting the largest store (an ext4 directory keeps its size after
its files are removed, so a listing of ``events/`` stays as slow as before).

The stores are laid down directly in the store's on-disk format
(``events/<16 digits>.json`` in the serialized event form, then
``cursor.json``), without fsync, so that the setup takes seconds rather than
100,000 durable appends; each laid-down store is read back once with
``read_all()`` (every file parsed and validated, the tail contiguous, the
cursor at H) before it is measured.

To keep the noise of a shared disk out of the ratio, the laid-down files
are synced before the timing and the sizes are measured round-robin:
``--rounds`` rounds of ``--appends`` appends per store; the reported rate per
store is the median of its rounds. The user CPU time per append (the
interpreter's own work: no kernel time, so neither fsync nor the disk's
noise) is reported beside it, with its ratio (the smallest store's time
over this one's, 1 when it does not grow).

The store-level file-system calls of one plain and one keyed append (through
the ``FsOps`` seam) are counted on the largest store after the timing.

Prints a table and writes JSON (``--out``, default
``$TMPDIR/bench_store_scaling.json``; ``benchmarks/run_all.py`` passes its
own). Takes about a minute with the defaults.

Usage: ``python benchmarks/bench_store_scaling.py [--sizes 1000,10000,100000]
[--appends 40] [--rounds 5] [--dir D] [--out F]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from leasegate.core.ledger import cursor_record, event_file_name, serialize
from leasegate.shells.store import AppendEventInput, FsOps, OrchestrationEventStore

NOW = "2026-01-01T00:00:00.000Z"
ITEM = AppendEventInput(
    type="task.created", aggregate_id="a", actor="runtime", payload={"i": 1, "s": "x" * 100}
)


class CountingFs(FsOps):
    """Counts the store's file-system calls by kind (``write`` = temp files
    created, ``fsync`` = file fsyncs, ``fsync_dir``, ``rename``, ``read`` =
    files opened for reading, ``listdir``, ``stat``)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def write(self, path: str, data: bytes) -> int:
        self.calls["write"] += 1
        return super().write(path, data)

    def fsync_file(self, fd: int) -> None:
        self.calls["fsync"] += 1
        super().fsync_file(fd)

    def rename(self, src: str, dst: str) -> None:
        self.calls["rename"] += 1
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self.calls["fsync_dir"] += 1
        super().fsync_dir(path)

    def read(self, path: str) -> bytes:
        self.calls["read"] += 1
        return super().read(path)

    def listdir(self, path: str) -> list[str]:
        self.calls["listdir"] += 1
        return super().listdir(path)

    def stat(self, path: str) -> os.stat_result:
        self.calls["stat"] += 1
        return super().stat(path)


def lay_down(agent_dir: Path, n: int) -> OrchestrationEventStore:
    """A store holding events 1..n written directly in the on-disk format
    (no fsync), with its cursor ``{n, Σ sizes}``; validated by one
    ``read_all()`` that must return exactly ordinals 1..n."""
    store = OrchestrationEventStore(agent_dir, "bench")
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
            "payload": {"i": i, "s": "x" * 100},
        }
        data = serialize(record)
        total += len(data)
        Path(store.events_dir, event_file_name(i)).write_bytes(data)
    Path(store.cursor_path).write_bytes(serialize(cursor_record(n, total)))
    events = OrchestrationEventStore(agent_dir, "bench").read_all()
    if [e["ordinal"] for e in events] != list(range(1, n + 1)):
        raise SystemExit(f"the laid-down store of {n} events does not read back")
    return store


def count_calls(agent_dir: Path) -> dict[str, dict[str, int]]:
    """The ``FsOps`` calls of one plain and one keyed append on a store
    (after a first keyed append, so that ``idempotency/`` exists)."""
    OrchestrationEventStore(agent_dir, "bench").append(
        AppendEventInput(
            type="task.created", aggregate_id="a", actor="runtime", payload={}, idempotency_key="k0"
        )
    )
    out: dict[str, dict[str, int]] = {}
    for label, key in (("plain", None), ("keyed", "k1")):
        fs = CountingFs()
        store = OrchestrationEventStore(agent_dir, "bench", fs=fs)
        store.append(
            AppendEventInput(
                type="task.created",
                aggregate_id="a",
                actor="runtime",
                payload={},
                idempotency_key=key,
            )
        )
        out[label] = dict(sorted(fs.calls.items()))
    return out


def main() -> None:
    """Lay down the stores, time the appends round-robin, print, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--appends", type=int, default=40, help="appends per store per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=".", help="a directory on the disk to measure")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "bench_store_scaling.json"),
        help="where to write the JSON report (default: the system temp dir)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="bench-store-scaling-", dir=args.dir))
    try:
        stores: dict[str, tuple[int, OrchestrationEventStore, Path]] = {}
        setup: dict[str, float] = {}
        for n in sizes:
            t0 = time.perf_counter()
            stores[f"{n} events"] = (n, lay_down(base / str(n), n), base / str(n))
            setup[f"{n} events"] = round(time.perf_counter() - t0, 2)
        largest = max(sizes)
        compacted = base / "compacted"
        t0 = time.perf_counter()
        lay_down(compacted, largest)
        big = OrchestrationEventStore(compacted, "bench", max_tail_events=largest)
        if not big.compact_if_needed(largest, lambda: {"lastOrdinal": largest}):
            raise SystemExit("the compaction of the largest store did not run")
        name = f"{largest} events, compacted"
        stores[name] = (largest, OrchestrationEventStore(compacted, "bench"), compacted)
        setup[name] = round(time.perf_counter() - t0, 2)
        for _, store, _ in stores.values():
            store.append(ITEM)  # warm the instance (snapshot verification) outside the timing
        os.sync()  # the laid-down files' writeback is not part of any append
        rates: dict[str, list[float]] = {k: [] for k in stores}
        cpu: dict[str, list[float]] = {k: [] for k in stores}
        for _ in range(args.rounds):
            for label, (_, store, _) in stores.items():
                t0 = time.perf_counter()
                c0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                for _ in range(args.appends):
                    store.append(ITEM)
                user = resource.getrusage(resource.RUSAGE_SELF).ru_utime - c0
                cpu[label].append(user * 1000 / args.appends)
                rates[label].append(args.appends / (time.perf_counter() - t0))
        cases: list[dict[str, Any]] = []
        for label, (n, store, _) in stores.items():
            expected = n + 1 + args.rounds * args.appends
            if store.read_after(expected - 1)[-1]["ordinal"] != expected:
                raise SystemExit(f"{label}: the appends did not land")
            cases.append(
                {
                    "name": label,
                    "events_in_store": n,
                    "appends_per_s": round(statistics.median(rates[label]), 1),
                    "user_cpu_ms_per_append": round(statistics.median(cpu[label]), 3),
                    "setup_s": setup[label],
                }
            )
        smallest_rate = cases[0]["appends_per_s"]
        smallest_cpu = cases[0]["user_cpu_ms_per_append"]
        for case in cases:
            case["ratio_to_smallest"] = round(case["appends_per_s"] / smallest_rate, 3)
            case["user_cpu_ratio_smallest_over_this"] = round(
                smallest_cpu / case["user_cpu_ms_per_append"], 3
            )
        calls = count_calls(stores[f"{largest} events"][2])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results: dict[str, Any] = {
        "benchmark": "event store append rate against store size",
        "appends_per_round": args.appends,
        "rounds": args.rounds,
        "ratio_largest_over_smallest": cases[len(sizes) - 1]["ratio_to_smallest"],
        "cases": cases,
        "fs_calls_per_append": calls,
    }
    for case in cases:
        print(
            f"  {case['name']:28} {case['appends_per_s']:8.1f} appends/s"
            f"  ratio {case['ratio_to_smallest']:.3f}"
            f"  {case['user_cpu_ms_per_append']:.3f} ms user CPU"
            f"  (setup {case['setup_s']} s)"
        )
    print(f"  fs calls per append: {json.dumps(calls)}")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
