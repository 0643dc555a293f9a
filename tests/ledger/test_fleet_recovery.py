"""Fleet recovery: a surviving host lists and takes over the owed cleanups
of a dead host, fenced so two hosts never run the same cleanup. Runs on
both backends (``store_backend``); on PostgreSQL the hosts share nothing
but the database."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from leasegate.shells.store import CleanupClaimError, CleanupJournal, OwedCleanup

MakeStore = Callable[..., Any]


def journal(make_contract_store: MakeStore, host: str, runner: str = "host-a") -> CleanupJournal:
    """Host ``host``'s view of runner ``runner``'s cleanup journal."""
    store = make_contract_store(f"cleanup-journal:{runner}", max_tail_events=8)
    return CleanupJournal("unused", runner, store=store, host_id=host)


def test_fleet_owed_cleanups_are_recorded_with_the_host(make_contract_store: MakeStore) -> None:
    a = journal(make_contract_store, "host-a")
    a.record_owed("t1", 1, "run_started")
    a.record_owed("t2", 1, "run_started", fencing_token=4)
    seen = journal(make_contract_store, "host-b").owed()
    assert [(o.task_id, o.host_id, o.claimed_by) for o in seen] == [
        ("t1", "host-a", None),
        ("t2", "host-a", None),
    ]
    assert seen[1].fencing_token == 4


def test_fleet_take_over_runs_each_cleanup_once_across_racing_hosts(
    make_contract_store: MakeStore,
) -> None:
    dead = journal(make_contract_store, "host-a")
    for i in range(12):
        dead.record_owed(f"t{i}", i, "run_started")
    ran: list[tuple[str, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def host(name: str) -> None:
        def cleanup(item: OwedCleanup) -> None:
            with lock:
                ran.append((item.task_id, name))

        try:
            journal(make_contract_store, name).take_over(cleanup, dead_host_id="host-a")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(n,)) for n in ("host-b", "host-c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(task for task, _ in ran) == sorted(f"t{i}" for i in range(12))  # once each
    assert journal(make_contract_store, "host-d").owed() == []


def test_fleet_a_stale_claim_holder_cannot_settle(make_contract_store: MakeStore) -> None:
    dead = journal(make_contract_store, "host-a")
    dead.record_owed("t1", 1, "run_started")
    b = journal(make_contract_store, "host-b")
    token_b = b.claim("t1", 1, take_over_from="host-a")
    c = journal(make_contract_store, "host-c")
    with pytest.raises(CleanupClaimError, match="claimed by another host"):
        c.claim("t1", 1, take_over_from="host-a")  # b is alive: refused
    token_c = c.claim("t1", 1, take_over_from="host-b")  # b declared dead
    assert token_c == token_b + 1
    with pytest.raises(CleanupClaimError, match="claimed again"):
        b.settle("t1", 1, claim_token=token_b)
    c.settle("t1", 1, claim_token=token_c)
    assert journal(make_contract_store, "host-a").owed() == []


def test_fleet_a_restarted_host_recovers_its_own_claimed_cleanups(
    make_contract_store: MakeStore,
) -> None:
    a = journal(make_contract_store, "host-a")
    a.record_owed("t1", 1, "run_started")
    a.claim("t1", 1)  # host-a died mid-cleanup
    again = journal(make_contract_store, "host-a")  # on another machine
    done = again.recover(lambda item: None)
    assert [o.task_id for o in done] == ["t1"]
    assert again.owed() == []
