"""Durable appends per second: the file store, PostgreSQL, raw sqlite3.

For 1, 4 and 16 concurrent writers (threads, each with its own store
instance or connection), each case appends for ``--seconds`` seconds:

* ``file``: :class:`OrchestrationEventStore`, all writers on one session;
* ``postgres-shared``: :class:`PostgresEventStore`, all writers on one
  session (ordinals serialize on the session's head row);
* ``postgres-sessions``: one session per writer (a fleet of runner hosts,
  each with its own journal, on one database);
* ``sqlite3``: raw ``INSERT`` + commit in WAL mode with
  ``synchronous=FULL`` on one table (the embedded floor's anchor).

PostgreSQL runs with ``synchronous_commit = on`` and ``fsync = on`` on a
throwaway server (tests/ledger/pg_server.py) on the same disk. Also
reported: the time another host needs to take over 50 owed cleanups of a
dead host (``CleanupJournal.take_over``). Ratios are against sqlite3 at the
same writer count, measured in the same run.

Usage: ``python3 benchmarks/bench_store_backends.py [--seconds S] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leasegate.shells.store import AppendEventInput, CleanupJournal, OrchestrationEventStore
from leasegate.shells.store.postgres import PostgresEventStore, create_pool

HERE = Path(__file__).resolve().parent
WRITERS = (1, 4, 16)


def _pg_server_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "pg_server", HERE.parent / "tests" / "ledger" / "pg_server.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(n: int) -> AppendEventInput:
    return AppendEventInput(
        type="task.created", aggregate_id=f"w{n}", actor="runtime", payload={"n": n}
    )


def run_case(
    make_writer: Callable[[int], Callable[[], None]], writers: int, seconds: float
) -> float:
    """Appends per second of ``writers`` threads, each calling its writer."""
    fns = [make_writer(i) for i in range(writers)]
    counts = [0] * writers
    stop = threading.Event()

    def loop(i: int) -> None:
        while not stop.is_set():
            fns[i]()
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    return sum(counts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    pg = _pg_server_module()
    bin_dir = pg.find_pg_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL server binaries")
    server = pg.PgServer(bin_dir)
    cases: list[dict[str, Any]] = []
    try:
        server.init()
        server.start()
        pool = create_pool(server.conninfo, max_size=20)
        with tempfile.TemporaryDirectory(dir=server.root) as tmp:
            rates: dict[tuple[str, int], float] = {}
            for w in WRITERS:
                db = Path(tmp) / f"anchor{w}.sqlite"
                setup = sqlite3.connect(db)
                setup.execute("PRAGMA journal_mode=WAL")
                setup.execute("CREATE TABLE ev (id INTEGER PRIMARY KEY, body TEXT)")
                setup.commit()
                setup.close()

                def sqlite_writer(i: int, db: Path = db) -> Callable[[], None]:
                    conn = sqlite3.connect(db, timeout=30, check_same_thread=False)
                    conn.execute("PRAGMA synchronous=FULL")

                    def append() -> None:
                        conn.execute("INSERT INTO ev (body) VALUES (?)", (json.dumps({"n": i}),))
                        conn.commit()

                    return append

                def file_writer(i: int, w: int = w) -> Callable[[], None]:
                    store = OrchestrationEventStore(Path(tmp) / f"file{w}", "bench")
                    return lambda: store.append(_event(i)) and None

                def pg_shared(i: int, w: int = w) -> Callable[[], None]:
                    store = PostgresEventStore(pool, f"bench-shared-{w}", notify=False)
                    return lambda: store.append(_event(i)) and None

                def pg_sessions(i: int, w: int = w) -> Callable[[], None]:
                    store = PostgresEventStore(pool, f"bench-{w}-{i}", notify=False)
                    return lambda: store.append(_event(i)) and None

                for name, make in (
                    ("sqlite3", sqlite_writer),
                    ("file", file_writer),
                    ("postgres-shared", pg_shared),
                    ("postgres-sessions", pg_sessions),
                ):
                    rates[(name, w)] = run_case(make, w, args.seconds)
                    print(f"{name} x{w}: {rates[(name, w)]:.0f}/s", flush=True)
            for (name, w), rate in rates.items():
                cases.append(
                    {
                        "case": f"{name} x{w} writers",
                        "appends_per_s": round(rate),
                        "ratio_to_sqlite3": round(rate / rates[("sqlite3", w)], 3),
                        "ratio_to_sqlite3_x1": round(rate / rates[("sqlite3", 1)], 3),
                    }
                )
            dead = CleanupJournal(
                "unused",
                "bench-host-a",
                store=PostgresEventStore(pool, "cleanup-journal:bench-host-a"),
                host_id="host-a",
            )
            for i in range(50):
                dead.record_owed(f"t{i}", i, "run_started")
            start = time.perf_counter()
            taker = CleanupJournal(
                "unused",
                "bench-host-a",
                store=PostgresEventStore(pool, "cleanup-journal:bench-host-a"),
                host_id="host-b",
            )
            done = taker.take_over(lambda item: None, dead_host_id="host-a")
            elapsed = time.perf_counter() - start
            assert len(done) == 50
            cases.append(
                {
                    "case": "take over 50 owed cleanups of a dead host (postgres)",
                    "seconds": round(elapsed, 3),
                }
            )
        pool.close()
    finally:
        server.stop()
    doc = {"benchmark": "store backends", "cases": cases}
    text = json.dumps(doc)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
