"""Durable appends per second: the file store, PostgreSQL, raw sqlite3.

For 1, 4 and 16 concurrent writers (threads, each with its own store
instance or connection), each case appends for ``--seconds`` seconds:

* ``file``: :class:`OrchestrationEventStore`, all writers on one session;
* ``postgres-shared``: :class:`PostgresEventStore`, all writers on one
  session (ordinals serialize on the session's head row; concurrent appends
  of the process commit together, see ``postgres.py``'s group commit);
* ``postgres-sessions``: one session per writer (a fleet of runner hosts,
  each with its own journal, on one database);
* ``sqlite3``: raw ``INSERT`` + commit in WAL mode with
  ``synchronous=FULL``, one insert per transaction, on one table (the
  embedded floor's anchor).

PostgreSQL runs a throwaway server (tests/ledger/pg_server.py) on the same
disk as sqlite3, with ``synchronous_commit = on``, ``fsync = on`` and
``full_page_writes = on`` (checked before measuring), the stores' default
options (``NOTIFY`` on) and otherwise the server's default settings (the
tuning advice of docs/ledger.md is not applied). Ratios are against sqlite3
at the same writer count and against sqlite3's single writer, measured in
the same run; the ``goal``
rows compare PostgreSQL with 16 writers against sqlite3's single writer
(at least 0.7) with the file store's single-writer figure beside it.

Also reported: the time another host needs to take over a dead host's work
on PostgreSQL: 50 owed cleanups (``CleanupJournal.take_over``) and 50
leased attempts (a fresh ``DurableTaskRuntime`` on the dead host's session
after the leases ran out: ``expire_leases``, then queue and lease each
task again under the new host; the dead holder's fencing tokens are then
stale).

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

from leasegate.shells.store import (
    AppendEventInput,
    CleanupJournal,
    DurableTaskRuntime,
    OrchestrationEventStore,
)
from leasegate.shells.store.postgres import PostgresEventStore, create_pool

HERE = Path(__file__).resolve().parent
WRITERS = (1, 4, 16)
#: The goal: PostgreSQL with 16 writers over sqlite3's single writer.
GOAL_RATIO = 0.7
#: Settings that must hold while measuring (the durability promise).
PG_DURABLE = {"synchronous_commit": "on", "fsync": "on", "full_page_writes": "on"}


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


def _sqlite_anchor(db: Path) -> Callable[[int], Callable[[], None]]:
    """Writers of the anchor: WAL, ``synchronous=FULL`` (checked), one
    insert per transaction."""
    setup = sqlite3.connect(db)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE ev (id INTEGER PRIMARY KEY, body TEXT)")
    setup.commit()
    setup.close()

    def writer(i: int) -> Callable[[], None]:
        conn = sqlite3.connect(db, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL

        def append() -> None:
            conn.execute("INSERT INTO ev (body) VALUES (?)", (json.dumps({"n": i}),))
            conn.commit()

        return append

    return writer


def _take_over_cleanups(pool: Any) -> float:
    """Seconds for host B to take over 50 owed cleanups of dead host A."""
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
    return elapsed


def _take_over_attempts(pool: Any) -> float:
    """Seconds for host B to take over 50 attempts dead host A had leased:
    open the session, expire the run-out leases, queue and lease each task
    again as B."""
    clock = [1_767_225_600_000]
    session = "bench-attempts"
    dead = DurableTaskRuntime(PostgresEventStore(pool, session), now=lambda: clock[0])
    dead.create_objective("o", "Objective", "Benchmark")
    old: dict[str, Any] = {}
    for i in range(50):
        task = f"t{i}"
        dead.create_task(
            {
                "taskId": task,
                "objectiveId": "o",
                "title": "T",
                "description": "D",
                "role": "implementer",
                "requiredCapabilities": [],
                "riskBudget": {},
            }
        )
        attempt = dead.queue_attempt(task, _dispatch(task))
        old[task] = dead.lease_attempt(attempt["attemptId"], "host-a", 1_000)
    clock[0] += 2_000  # host A is gone; its leases ran out
    start = time.perf_counter()
    taker = DurableTaskRuntime(PostgresEventStore(pool, session), now=lambda: clock[0])
    expired = taker.expire_leases()
    leases = {}
    for i in range(50):
        task = f"t{i}"
        attempt = taker.queue_attempt(task, _dispatch(task))
        leases[task] = taker.lease_attempt(attempt["attemptId"], "host-b", 60_000)
    elapsed = time.perf_counter() - start
    assert len(expired) == 50
    assert all(leases[t].fencing_token > old[t].fencing_token for t in leases)
    return elapsed


def _dispatch(task: str) -> dict[str, Any]:
    return {"taskId": task, "profileId": "p", "instructions": "do", "resourcePointerIds": []}


def _goal_rows(rates: dict[tuple[str, int], float]) -> list[dict[str, Any]]:
    """PostgreSQL with 16 writers against sqlite3's single writer, the file
    store's single writer beside it."""
    anchor = rates[("sqlite3", 1)]
    rows = []
    for name in ("postgres-shared", "postgres-sessions"):
        ratio = rates[(name, 16)] / anchor
        rows.append(
            {
                "name": f"goal: {name} x16 / sqlite3 x1 >= {GOAL_RATIO}",
                "appends_per_s": round(rates[(name, 16)]),
                "sqlite3_x1_per_s": round(anchor),
                "file_x1_per_s": round(rates[("file", 1)]),
                "file_x1_ratio_to_sqlite3_x1": round(rates[("file", 1)] / anchor, 3),
                "ratio_to_sqlite3_x1": round(ratio, 3),
                "goal_met": ratio >= GOAL_RATIO,
            }
        )
    return rows


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
    settings: dict[str, str] = {}
    try:
        server.init()
        server.start()
        pool = create_pool(server.conninfo, max_size=20)
        with pool.connection() as conn:
            for name in ("server_version", *PG_DURABLE, "commit_delay", "wal_sync_method"):
                row = conn.execute(f"SHOW {name}").fetchone()
                assert row is not None
                settings[name] = str(row[0])
        for name, value in PG_DURABLE.items():
            if settings[name] != value:
                raise SystemExit(f"PostgreSQL {name} is {settings[name]}, not {value}")
        with tempfile.TemporaryDirectory(dir=server.root) as tmp:
            rates: dict[tuple[str, int], float] = {}
            for w in WRITERS:
                sqlite_writer = _sqlite_anchor(Path(tmp) / f"anchor{w}.sqlite")

                def file_writer(i: int, w: int = w) -> Callable[[], None]:
                    store = OrchestrationEventStore(Path(tmp) / f"file{w}", "bench")
                    return lambda: store.append(_event(i)) and None

                def pg_shared(i: int, w: int = w) -> Callable[[], None]:
                    store = PostgresEventStore(pool, f"bench-shared-{w}")
                    return lambda: store.append(_event(i)) and None

                def pg_sessions(i: int, w: int = w) -> Callable[[], None]:
                    store = PostgresEventStore(pool, f"bench-{w}-{i}")
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
                        "name": f"{name} x{w} writers",
                        "appends_per_s": round(rate),
                        "ratio_to_sqlite3": round(rate / rates[("sqlite3", w)], 3),
                        "ratio_to_sqlite3_x1": round(rate / rates[("sqlite3", 1)], 3),
                    }
                )
            cases += _goal_rows(rates)
            cases.append(
                {
                    "name": "take over 50 owed cleanups of a dead host (postgres)",
                    "seconds": round(_take_over_cleanups(pool), 3),
                }
            )
            cases.append(
                {
                    "name": "take over 50 leased attempts of a dead host (postgres)",
                    "seconds": round(_take_over_attempts(pool), 3),
                }
            )
        pool.close()
    finally:
        server.stop()
    doc = {"benchmark": "store backends", "postgres_settings": settings, "cases": cases}
    text = json.dumps(doc)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
