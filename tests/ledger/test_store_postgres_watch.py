"""``PostgresEventStore.watch``: another host's appends reach this host's
listener (PostgreSQL-only: the file store has no cross-host feed; its
``subscribe`` is ES-060, in the contract suite).

"Another host" is a separate process with its own pool. What the watch
promises (``EventWatch``'s docstring, docs/ledger.md): each event after the
position, once, in ordinal order; a lost connection or a lost notification
delays events, never drops or repeats one; events a compaction folded into
the snapshot before the watch read them are skipped (the position jumps to
T).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import wait_kit

from leasegate.core.ledger import OrchestrationEventStoreError

from .conftest import ev

psycopg = pytest.importorskip("psycopg")

from leasegate.shells.store.postgres import (  # noqa: E402
    NOTIFY_CHANNEL,
    WATCH_APPLICATION_NAME,
    EventWatch,
    PostgresEventStore,
    notify_payload,
)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0

# Another host: its own process and pool; appends `count` events to
# `session`, numbered from `start`, then prints the ordinals it was given.
_HOST = textwrap.dedent(
    """
    import json, sys
    from leasegate.shells.store import AppendEventInput
    from leasegate.shells.store.postgres import PostgresEventStore, create_pool

    conninfo, session, start, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    pool = create_pool(conninfo, max_size=2)
    store = PostgresEventStore(pool, session)
    ordinals = [
        store.append(AppendEventInput(type="task.created", aggregate_id="other-host",
                                      actor="runtime", payload={"n": n}))["ordinal"]
        for n in range(start, start + count)
    ]
    pool.close()
    print(json.dumps(ordinals))
    """
)


def _other_host_appends(conninfo: str, session: str, start: int, count: int) -> str:
    path = [str(REPO / "core"), str(REPO / "shells"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    proc = subprocess.run(
        [sys.executable, "-c", _HOST, conninfo, session, str(start), str(count)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return proc.stdout.strip()


class Seen:
    """A listener recording what the watch delivered."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = WAIT_S) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.events) >= count, timeout_s):
                raise AssertionError(f"watch delivered {len(self.events)} of {count} events")

    def payloads(self) -> list[Any]:
        with self.cond:
            return [e["payload"]["n"] for e in self.events]

    def ordinals(self) -> list[int]:
        with self.cond:
            return [e["ordinal"] for e in self.events]


def _cut_watch_connections(conninfo: str) -> int:
    """``pg_terminate_backend`` every watch connection; how many it cut."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()) x",
            (WATCH_APPLICATION_NAME,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def watching(pg_pool: Any, pg_conninfo: str) -> Any:
    """``watching(store, listener, **opts)``: a started watch, closed after
    the test."""
    started: list[EventWatch] = []

    def start(store: PostgresEventStore, listener: Any, **opts: Any) -> EventWatch:
        watch = store.watch(listener, pg_conninfo, **opts)
        started.append(watch)
        wait_kit.wait_until(lambda: watch.connections >= 1, timeout_s=WAIT_S)
        return watch

    yield start
    for watch in started:
        watch.close()


def test_pg_watch_delivers_another_hosts_appends_in_order_by_notification(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str], watching: Any
) -> None:
    session = pg_session("watched")
    store = PostgresEventStore(pg_pool, session)
    store.append(ev(payload={"n": -1}))  # before the watch: not delivered
    seen = Seen()
    # The safety poll is far beyond the wait: only NOTIFY can deliver in time.
    watch = watching(store, seen, poll_s=300)
    started = time.monotonic()
    assert _other_host_appends(pg_conninfo, session, 0, 20) == str(list(range(2, 22)))
    seen.wait_for(20)
    assert time.monotonic() - started < 120
    assert seen.payloads() == list(range(20))
    assert seen.ordinals() == list(range(2, 22))
    assert {e["aggregateId"] for e in seen.events} == {"other-host"}
    assert watch.position == 21
    assert watch.connections == 1
    assert watch.errors == []


def test_pg_watch_ignores_other_sessions_notifications(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str], watching: Any
) -> None:
    mine = PostgresEventStore(pg_pool, pg_session("mine"))
    other = PostgresEventStore(pg_pool, pg_session("other"))
    seen = Seen()
    watching(mine, seen, poll_s=300)
    for n in range(5):
        other.append(ev(payload={"n": n}))
    mine.append(ev(payload={"n": 100}))
    seen.wait_for(1)
    assert seen.payloads() == [100]


def test_pg_watch_resumes_after_its_connection_is_cut_without_loss_or_duplicate(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str], watching: Any
) -> None:
    session = pg_session("cut")
    store = PostgresEventStore(pg_pool, session)
    seen = Seen()
    watch = watching(store, seen, poll_s=300, after_ordinal=0)
    _other_host_appends(pg_conninfo, session, 0, 10)
    seen.wait_for(10)
    # Cut, then append while the watch is (probably) reconnecting: those
    # events are read after the position once it listens again.
    assert _cut_watch_connections(pg_conninfo) == 1
    _other_host_appends(pg_conninfo, session, 10, 10)
    wait_kit.wait_until(lambda: watch.connections >= 2, timeout_s=WAIT_S)
    seen.wait_for(20)
    # Cut again while idle, then append: delivered by notification on the
    # new connection.
    assert _cut_watch_connections(pg_conninfo) == 1
    wait_kit.wait_until(lambda: watch.connections >= 3, timeout_s=WAIT_S)
    _other_host_appends(pg_conninfo, session, 20, 10)
    seen.wait_for(30)
    time.sleep(0.5)  # room for a duplicate to show up
    assert seen.payloads() == list(range(30))
    assert seen.ordinals() == list(range(1, 31))
    assert watch.position == 30
    assert watch.errors == []


def test_pg_watch_catches_up_by_polling_when_a_notification_is_lost(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str], watching: Any
) -> None:
    session = pg_session("silent")
    quiet = PostgresEventStore(pg_pool, session, notify=False)  # a host that died before NOTIFY
    seen = Seen()
    watching(quiet, seen, poll_s=0.2)
    for n in range(3):
        quiet.append(ev(payload={"n": n}))
    seen.wait_for(3, timeout_s=10)
    assert seen.payloads() == [0, 1, 2]


def test_pg_watch_skips_to_the_snapshot_when_a_compaction_passed_its_position(
    pg_pool: Any, pg_session: Callable[[str], str], watching: Any
) -> None:
    store = PostgresEventStore(pg_pool, pg_session("compacted"), max_tail_events=3)
    for n in range(4):
        store.append(ev(payload={"n": n}))
    assert store.compact_if_needed(4, lambda: {"through": 4})
    for n in range(4, 6):
        store.append(ev(payload={"n": n}))
    seen = Seen()
    watch = watching(store, seen, poll_s=300, after_ordinal=1)  # 2..4 are in the snapshot
    seen.wait_for(2)
    assert seen.ordinals() == [5, 6]
    assert watch.position == 6


def test_pg_watch_keeps_delivering_after_a_listener_raises(
    pg_pool: Any, pg_session: Callable[[str], str], watching: Any
) -> None:
    store = PostgresEventStore(pg_pool, pg_session("raising"))
    seen = Seen()

    def listener(event: dict[str, Any]) -> None:
        seen(event)
        if event["payload"]["n"] == 1:
            raise ValueError("CANARY-listener-secret")

    watch = watching(store, listener, poll_s=300)
    for n in range(3):
        store.append(ev(payload={"n": n}))
    seen.wait_for(3)
    time.sleep(0.3)
    assert seen.payloads() == [0, 1, 2]  # the failed event is not delivered again
    assert watch.errors == ["ValueError"]  # the type only, never the message


def test_pg_watch_refuses_a_bad_position_or_interval(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str]
) -> None:
    store = PostgresEventStore(pg_pool, pg_session("bad"))
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(OrchestrationEventStoreError):
            store.watch(lambda e: None, pg_conninfo, after_ordinal=bad)  # type: ignore[arg-type]
    for poll in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(OrchestrationEventStoreError):
            store.watch(lambda e: None, pg_conninfo, after_ordinal=0, poll_s=poll)


def test_pg_notify_payload_stays_under_the_server_limit(
    pg_pool: Any, pg_conninfo: str, pg_session: Callable[[str], str], watching: Any
) -> None:
    assert notify_payload("s1", 7) == "s1 7"
    long_id = pg_session("x" * 9000)
    payload = notify_payload(long_id, 7)
    assert payload.startswith("sha256:")
    assert payload.endswith(" 7")
    assert len(payload.encode()) < 8000
    # The server accepts it, and a watch of that session wakes on it.
    with psycopg.connect(pg_conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, payload))
    store = PostgresEventStore(pg_pool, long_id)
    seen = Seen()
    watching(store, seen, poll_s=300)
    store.append(ev(payload={"n": 0}))
    seen.wait_for(1)
    assert seen.payloads() == [0]
