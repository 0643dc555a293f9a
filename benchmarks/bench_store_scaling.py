"""Benchmark: event store append rate against the number of events in the store.

Measures durable appends per second (each one: event and cursor written with
temp+fsync+rename+directory fsync) into stores already holding 1,000,
10,000 and 100,000 events, and into the largest store compacted, from one
run. The goal rows: the rate at 100,000 events and at 100,000 events
compacted, each over the rate at 1,000 (``ratio_to_smallest``), ≥ 0.9.

The stores are laid down directly in the store's on-disk format
(``events/<16 digits>.json`` in the serialized event form, then
``cursor.json``), without fsync, so that the setup takes seconds rather than
100,000 durable appends; each laid-down store is read back once with
``read_all()`` (every file parsed and validated, the tail contiguous, the
cursor at H) before it is measured.

To keep the noise of a shared disk out of the ratio, the laid-down files
are synced before the timing and the sizes are measured round-robin:
``--rounds`` rounds of ``--appends`` appends per store; the reported rate per
store is the median of its rounds. The plain sizes are timed first, before
the compacted store is laid down and compacted; the compacted store is then
timed round-robin with the smallest one, and its ratio is to the smallest
store's rate in that second timing. Beside it: the CPU time per append (user
and system, from the scheduler's exact runtime) and the user part alone
(the kernel splits the runtime by 4 ms tick samples, so that part is an
estimate), with the ratio of the smallest store's CPU time over this one's.

On ext4 without a journal (this machine's ``/``) the kernel avoids reusing
an inode freed less than 60 s ago, 360 s while its inode-table block is dirty
(``recently_deleted()`` in ``fs/ext4/ialloc.c``): every inode allocation
scans past the recently freed inodes of its block group. After 100,000 event
files are removed, each file an append creates (two per plain append) costs
up to milliseconds of kernel CPU, in this store and in any other directory
of those groups, for minutes. The store makes the same calls before and
after the compaction (``FsOps`` counts, reported per case); the compacted
row therefore mixes the store's cost with that kernel state.
``--settle-s S`` times the stores a second time ``S`` seconds after the
compaction (the compacted row then comes from that timing, the first
timing of the compacted store is an extra row) to show how it decays. Each run removes
its stores at the end, so a run started within minutes of another one (or
of any mass deletion nearby) is slowed the same way in every row.

The store-level file-system calls of one plain and one keyed append (through
the ``FsOps`` seam) are counted on the smallest, the largest and the
compacted store after the timing.

Prints a table and writes JSON (``--out``, default
``$TMPDIR/bench_store_scaling.json``; ``benchmarks/run_all.py`` passes its
own). Takes about a minute and a half with the defaults.

Usage: ``python benchmarks/bench_store_scaling.py [--sizes 1000,10000,100000]
[--appends 40] [--rounds 5] [--settle-s 0] [--dir D] [--out F]``
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
GOAL_RATIO = 0.9
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


def count_calls(agent_dir: Path) -> dict[str, str]:
    """The ``FsOps`` calls of one plain and one keyed append on a store
    (after a first keyed append, so that ``idempotency/`` exists), each as
    ``"kind n, ..."``."""
    OrchestrationEventStore(agent_dir, "bench").append(
        AppendEventInput(
            type="task.created", aggregate_id="a", actor="runtime", payload={}, idempotency_key="k0"
        )
    )
    out: dict[str, str] = {}
    for label, key in (("plain", None), ("keyed", "k1")):
        fs = CountingFs()
        store = OrchestrationEventStore(agent_dir, "bench", fs=fs)
        store.append(ITEM)  # verifies the snapshot, if any (ES-053), outside the count
        fs.calls.clear()
        store.append(
            AppendEventInput(
                type="task.created",
                aggregate_id="a",
                actor="runtime",
                payload={},
                idempotency_key=key,
            )
        )
        out[label] = ", ".join(f"{k} {v}" for k, v in sorted(fs.calls.items()))
    return out


def time_rounds(
    stores: dict[str, OrchestrationEventStore], rounds: int, appends: int
) -> dict[str, dict[str, float]]:
    """Round-robin timing: per store, the median over ``rounds`` of appends/s,
    user CPU ms/append and CPU (user + system) ms/append."""
    rates: dict[str, list[float]] = {k: [] for k in stores}
    user: dict[str, list[float]] = {k: [] for k in stores}
    cpu: dict[str, list[float]] = {k: [] for k in stores}
    for _ in range(rounds):
        for label, store in stores.items():
            t0 = time.perf_counter()
            c0 = time.process_time()
            u0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
            for _ in range(appends):
                store.append(ITEM)
            user[label].append(
                (resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0) * 1000 / appends
            )
            cpu[label].append((time.process_time() - c0) * 1000 / appends)
            rates[label].append(appends / (time.perf_counter() - t0))
    return {
        label: {
            "appends_per_s": round(statistics.median(rates[label]), 1),
            "user_cpu_ms_per_append": round(statistics.median(user[label]), 3),
            "cpu_ms_per_append": round(statistics.median(cpu[label]), 3),
        }
        for label in stores
    }


def main() -> None:
    """Lay down the stores, time the appends round-robin, print, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--appends", type=int, default=40, help="appends per store per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--settle-s",
        type=float,
        default=0.0,
        help="also time the stores this many seconds after the compaction (default 0: once)",
    )
    parser.add_argument("--dir", default=".", help="a directory on the disk to measure")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "bench_store_scaling.json"),
        help="where to write the JSON report (default: the system temp dir)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    smallest, largest = min(sizes), max(sizes)
    base = Path(tempfile.mkdtemp(prefix="bench-store-scaling-", dir=args.dir))
    try:
        stores: dict[str, tuple[int, OrchestrationEventStore, Path]] = {}
        setup: dict[str, float] = {}
        for n in sizes:
            t0 = time.perf_counter()
            stores[f"{n} events"] = (n, lay_down(base / str(n), n), base / str(n))
            setup[f"{n} events"] = round(time.perf_counter() - t0, 2)
        small_label = f"{smallest} events"
        instances = {label: store for label, (_, store, _) in stores.items()}
        for store in instances.values():
            store.append(ITEM)  # warm the instance (snapshot verification) outside the timing
        os.sync()  # the laid-down files' writeback is not part of any append
        # The plain sizes are timed before anything is removed from the disk:
        # a mass deletion slows inode allocation nearby for minutes (module
        # docstring), which would be charged to the plain stores too.
        plain = time_rounds(instances, args.rounds, args.appends)
        appended = dict.fromkeys(stores, 1 + args.rounds * args.appends)
        compacted = base / "compacted"
        t0 = time.perf_counter()
        lay_down(compacted, largest)
        big = OrchestrationEventStore(compacted, "bench", max_tail_events=largest)
        if not big.compact_if_needed(largest, lambda: {"lastOrdinal": largest}):
            raise SystemExit("the compaction of the largest store did not run")
        compacted_at = time.monotonic()
        compacted_name = f"{largest} events, compacted"
        stores[compacted_name] = (largest, OrchestrationEventStore(compacted, "bench"), compacted)
        setup[compacted_name] = round(time.perf_counter() - t0, 2)
        stores[compacted_name][1].append(ITEM)  # warm, outside the timing
        os.sync()
        # The compacted store is timed round-robin with the smallest one, so
        # that its ratio comes from one timing under the same kernel state.
        pair = {small_label: instances[small_label], compacted_name: stores[compacted_name][1]}
        appended[compacted_name] = 1
        at_once_after_s = round(time.monotonic() - compacted_at, 1)
        timed = [time_rounds(pair, args.rounds, args.appends)]
        settled_after_s = at_once_after_s
        if args.settle_s > 0:
            time.sleep(max(0.0, compacted_at + args.settle_s - time.monotonic()))
            os.sync()
            settled_after_s = round(time.monotonic() - compacted_at, 1)
            timed.append(time_rounds(pair, args.rounds, args.appends))
        for label in pair:
            appended[label] += args.rounds * args.appends * len(timed)
        for label, (n, store, _) in stores.items():
            expected = n + appended[label]
            if store.read_after(expected - 1)[-1]["ordinal"] != expected:
                raise SystemExit(f"{label}: the appends did not land")
        calls = {
            label: count_calls(path)
            for label, (n, _, path) in stores.items()
            if n in (smallest, largest)
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def case(label: str, figures: dict[str, dict[str, float]], name: str) -> dict[str, Any]:
        row: dict[str, Any] = {"name": name, "events_in_store": stores[label][0]}
        row.update(figures[label])
        low = figures[f"{smallest} events"]
        row["ratio_to_smallest"] = round(row["appends_per_s"] / low["appends_per_s"], 3)
        row["cpu_ratio_smallest_over_this"] = round(
            low["cpu_ms_per_append"] / row["cpu_ms_per_append"], 3
        )
        row["setup_s"] = setup[label]
        if label in calls:
            row["fs_calls_plain_append"] = calls[label]["plain"]
            row["fs_calls_keyed_append"] = calls[label]["keyed"]
        return row

    cases = [case(label, plain, label) for label in stores if label != compacted_name]
    cases.append(case(compacted_name, timed[-1], compacted_name))
    for row in cases:
        if row["name"] in (f"{largest} events", compacted_name):
            row["goal"] = f"ratio_to_smallest >= {GOAL_RATIO}"
            row["goal_met"] = row["ratio_to_smallest"] >= GOAL_RATIO
    cases[-1]["name"] = f"{compacted_name}, timed {settled_after_s} s after compacting"
    if len(timed) > 1:
        cases.append(
            case(
                compacted_name,
                timed[0],
                f"{compacted_name}, timed {at_once_after_s} s after compacting",
            )
        )
    results: dict[str, Any] = {
        "benchmark": "event store append rate against store size",
        "appends_per_round": args.appends,
        "rounds": args.rounds,
        "goal": f"appends/s at {largest} events and at {largest} events compacted, each over "
        f"the rate at {smallest} events, >= {GOAL_RATIO}",
        "ratio_largest_over_smallest": cases[len(sizes) - 1]["ratio_to_smallest"],
        "ratio_largest_compacted_over_smallest": cases[len(sizes)]["ratio_to_smallest"],
        "seconds_from_compaction_to_main_timing": settled_after_s,
        "cases": cases,
    }
    for row in cases:
        goal = f"  goal {'met' if row['goal_met'] else 'NOT met'}" if "goal" in row else ""
        print(
            f"  {row['name']:62} {row['appends_per_s']:7.1f} appends/s"
            f"  ratio {row['ratio_to_smallest']:.3f}{goal}"
            f"  CPU {row['cpu_ms_per_append']:.3f} ms (user {row['user_cpu_ms_per_append']:.3f})"
            f"  setup {row['setup_s']} s"
        )
    for label, counted in calls.items():
        print(f"  fs calls per append, {label}: {json.dumps(counted)}")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
