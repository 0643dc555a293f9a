"""The PostgreSQL backend under faults, on a real throwaway server
(PostgreSQL-only: the file store's crash tests are test_store_crash.py).

* the server SIGKILLed and restarted during appends and compactions;
* connections cut mid-transaction (``pg_terminate_backend``);
* two "hosts" (separate processes, separate pools) appending with the same
  expected ordinal.

Invariants checked each time: every ordinal won exactly once (no gap, no
duplicate), no acknowledged append lost, every client error typed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.ledger import OrchestrationConcurrencyError, OrchestrationEventStoreError

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from leasegate.shells.store.postgres import PostgresEventStore, create_pool  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _all_events(conninfo: str, session: str) -> tuple[int, list[dict[str, Any]]]:
    pool = create_pool(conninfo, max_size=1)
    try:
        store = PostgresEventStore(pool, session)
        snap = store.read_projection_snapshot()
        return (snap.through_ordinal if snap else 0), store.read_all()
    finally:
        pool.close()


def _check_log(through: int, events: list[dict[str, Any]], acked: list[tuple[str, int]]) -> None:
    ordinals = [e["ordinal"] for e in events]
    assert ordinals == list(range(through + 1, through + 1 + len(events)))  # no gap, no dup
    ids = [e["eventId"] for e in events]
    assert len(ids) == len(set(ids))
    by_id = {e["eventId"]: e["ordinal"] for e in events}
    acked_ordinals = [n for _, n in acked]
    assert len(acked_ordinals) == len(set(acked_ordinals))  # each ordinal won once
    for event_id, ordinal in acked:
        if ordinal > through:
            assert by_id.get(event_id) == ordinal, (event_id, ordinal)  # not lost


def test_pg_sigkill_and_restart_during_appends_and_compactions_loses_no_ack(
    pg_server: Any, pg_conninfo: str
) -> None:
    pool = create_pool(pg_conninfo, max_size=6, timeout_s=30)
    acked: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        store = PostgresEventStore(pool, "fleet", retry_timeout_s=30, max_tail_events=25)
        while not stop.is_set():
            try:
                e = store.append(ev(payload={"w": n}))
                with lock:
                    acked.append((e["eventId"], e["ordinal"]))
                store.compact_if_needed(e["ordinal"], lambda: {"w": n})
            except OrchestrationEventStoreError:
                continue  # typed: a lost race or an unavailable store
            except BaseException as exc:  # noqa: BLE001 - any untyped error fails the test
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(4)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(acked) < 60 and time.monotonic() < deadline:
            time.sleep(0.02)
        before = len(acked)
        pg_server.kill()
        pg_server.start()
        deadline = time.monotonic() + 30
        while len(acked) < before + 60 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join(40)
    finally:
        stop.set()
        pool.close()
    assert not errors, [type(e).__name__ for e in errors]
    assert len(acked) >= before + 60, "appends did not resume after the restart"
    through, events = _all_events(pg_conninfo, "fleet")
    _check_log(through, events, acked)


def test_pg_connections_cut_mid_transaction_are_retried_or_typed(pg_conninfo: str) -> None:
    pool = create_pool(pg_conninfo, max_size=4)
    store = PostgresEventStore(pool, "cut", retry_timeout_s=20, max_tail_events=10)
    stop = threading.Event()
    kills = [0]

    def cutter() -> None:
        with psycopg.connect(pg_conninfo, autocommit=True) as conn:
            me = conn.info.backend_pid
            while not stop.is_set() and kills[0] < 25:  # bounded: appends must progress
                row = conn.execute(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM"
                    " pg_stat_activity WHERE datname = current_database() AND pid <> %s"
                    " AND state = 'active' AND query LIKE '%%leasegate.%%') x",
                    (me,),
                ).fetchone()
                kills[0] += int(row[0]) if row else 0
                time.sleep(0.01)

    acked: list[tuple[str, int]] = []
    typed = 0
    t = threading.Thread(target=cutter, daemon=True)
    t.start()
    try:
        for i in range(80):
            try:
                e = store.append(ev(f"k{i}", {"i": i}))
                acked.append((e["eventId"], e["ordinal"]))
                store.compact_if_needed(e["ordinal"], lambda: {"i": len(acked)})
            except OrchestrationEventStoreError:
                typed += 1
    finally:
        stop.set()
        t.join(10)
    # Every key is in the log exactly once, whatever was cut.
    through, events = _all_events(pg_conninfo, "cut")
    _check_log(through, events, acked)
    for i in range(80):
        again = store.append(ev(f"k{i}", {"i": -1}))
        assert again["payload"] == {"i": i} or again["ordinal"] > through
    pool.close()
    assert kills[0] > 0, "no backend was terminated: the test did not cut anything"


_HOST = textwrap.dedent(
    """
    import json, sys
    from leasegate.core.ledger import OrchestrationConcurrencyError, OrchestrationEventStoreError
    from leasegate.shells.store import AppendEventInput
    from leasegate.shells.store.postgres import PostgresEventStore, create_pool

    conninfo, host, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pool = create_pool(conninfo, max_size=2)
    store = PostgresEventStore(pool, "occ")
    won, lost, other = [], 0, []
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    while len(won) < count:
        events = store.read_all()
        h = events[-1]["ordinal"] if events else 0
        try:
            e = store.append(
                AppendEventInput(type="task.created", aggregate_id=host, actor="runtime",
                                 payload={"host": host, "n": len(won)}),
                expected_last_ordinal=h,
            )
        except OrchestrationConcurrencyError:
            lost += 1
            continue
        except OrchestrationEventStoreError as exc:
            other.append(type(exc).__name__)
            continue
        assert e["ordinal"] == h + 1
        won.append([e["eventId"], e["ordinal"]])
    pool.close()
    print(json.dumps({"won": won, "lost": lost, "other": other}))
    """
)


@pytest.mark.slow
def test_pg_two_hosts_with_separate_pools_race_on_the_same_expected_ordinal(
    pg_conninfo: str,
) -> None:
    path = [str(REPO / "core"), str(REPO / "shells"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    hosts = 3
    per_host = 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HOST, pg_conninfo, f"host{i}", str(per_host)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(hosts)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        for p in procs:  # start together
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.communicate(timeout=90)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs)
    acked = [(i, n) for r in results for i, n in r["won"]]
    assert sorted(n for _, n in acked) == list(range(1, hosts * per_host + 1))
    assert all(r["other"] == [] for r in results)
    assert sum(r["lost"] for r in results) > 0, "no race happened: nothing was tested"
    through, events = _all_events(pg_conninfo, "occ")
    assert through == 0
    assert len(events) == hosts * per_host
    _check_log(through, events, acked)


def test_pg_unreachable_server_is_a_typed_error(pg_server: Any) -> None:
    from leasegate.shells.store import OrchestrationStoreUnavailableError

    closed = f"host=127.0.0.1 port={pg_server.port + 1} user=postgres dbname=nope"
    with pytest.raises(OrchestrationStoreUnavailableError) as info:
        create_pool(closed, timeout_s=0.5)
    assert "password" not in str(info.value)


def test_pg_concurrency_error_is_the_contract_type(pg_pool: Any) -> None:
    store = PostgresEventStore(pg_pool, "typed")
    store.append(ev())
    with pytest.raises(OrchestrationConcurrencyError):
        store.append(ev(), expected_last_ordinal=5)


def test_pg_an_append_whose_answer_was_lost_is_returned_and_heard_once(
    pg_pool: Any, pg_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost after the commit, before the answer: the retry
    (same event id) returns the committed event, appends nothing, and the
    listeners hear it once (ES-060)."""
    store = PostgresEventStore(pg_pool, pg_session("lost-answer"))
    heard: list[dict[str, Any]] = []
    store.subscribe(heard.append)
    real = store._retrying_raw

    def answer_lost_once(op: Any) -> Any:
        real(op)  # committed; the answer never arrives
        return real(op)  # the retry on a fresh connection

    monkeypatch.setattr(store, "_retrying_raw", answer_lost_once)
    event = store.append(ev("k", {"n": 1}), expected_last_ordinal=0)
    monkeypatch.undo()
    assert event["ordinal"] == 1
    assert store.read_all() == [event]
    assert heard == [event]
