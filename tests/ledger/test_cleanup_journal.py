"""The runner's owed-cleanup journal on the event store (issue #8, item 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leasegate.core import Secret
from leasegate.core.ledger import OrchestrationEventStoreError
from leasegate.shells.store import CleanupJournal, OrchestrationEventStore, OwedCleanup

REPO = Path(__file__).resolve().parents[2]


def test_journal_record_settle_and_persistence(agent_dir: Path) -> None:
    j = CleanupJournal(agent_dir, "r1")
    j.record_owed("t1", 1, "run_started", fencing_token=4)
    j.record_owed("t2", 7, "run_started")
    j.record_owed("t1", 1, "run_started")  # idempotent
    assert j.owed() == [OwedCleanup("t1", 1, "run_started", 4), OwedCleanup("t2", 7, "run_started")]
    j.settle("t1", 1)
    j.settle("t1", 1)
    j.settle("nope", 3)  # owes nothing: appends nothing
    assert len(j.store.read_all()) == 3
    again = CleanupJournal(agent_dir, "r1")
    assert again.owed() == [OwedCleanup("t2", 7, "run_started")]
    assert CleanupJournal(agent_dir, "other-runner").owed() == []


def test_journal_run_recorded_again_after_settle_is_owed_again(agent_dir: Path) -> None:
    # A narrowing's selective cleanup of run 3 is recorded and settled; the
    # later stop of the same run records it again: it must be owed again,
    # durably, and settle again (a replayed idempotency key would drop it).
    journal = CleanupJournal(agent_dir, "r1")
    journal.record_owed("t", 3, "manifest-narrowed")
    journal.settle("t", 3)
    assert journal.owed() == []
    journal.record_owed("t", 3, "stop")
    journal.record_owed("t", 3, "again")  # already owed: first reason kept
    reopened = CleanupJournal(agent_dir, "r1")
    assert [(o.task_id, o.run_epoch, o.reason) for o in reopened.owed()] == [("t", 3, "stop")]
    reopened.settle("t", 3)
    reopened.settle("t", 3)  # settling what is not owed appends nothing
    assert CleanupJournal(agent_dir, "r1").owed() == []


def test_journal_survives_compaction(agent_dir: Path) -> None:
    store = OrchestrationEventStore(agent_dir, "cleanup-journal:r1", max_tail_events=3)
    j = CleanupJournal(agent_dir, store=store)
    for epoch in range(10):
        j.record_owed("t", epoch, "run_started")
        if epoch % 3:
            j.settle("t", epoch)
    assert store.read_projection_snapshot() is not None
    expected = [OwedCleanup("t", e, "run_started") for e in (0, 3, 6, 9)]
    assert j.owed() == expected
    assert (
        CleanupJournal(
            agent_dir, store=OrchestrationEventStore(agent_dir, "cleanup-journal:r1")
        ).owed()
        == expected
    )


def test_journal_recover_cleans_every_owed_run_in_order(agent_dir: Path) -> None:
    j = CleanupJournal(agent_dir)
    for t in ("a", "b", "c"):
        j.record_owed(t, 1, "run_started")
    cleaned: list[str] = []

    def cleanup(item: OwedCleanup) -> None:
        if item.task_id == "b" and not cleaned.count("b-fail"):
            cleaned.append("b-fail")
            raise RuntimeError("cleanup failed")
        cleaned.append(item.task_id)

    with pytest.raises(RuntimeError):
        j.recover(cleanup)
    assert [o.task_id for o in CleanupJournal(agent_dir).owed()] == ["b", "c"]
    done = CleanupJournal(agent_dir).recover(cleanup)
    assert [o.task_id for o in done] == ["b", "c"]
    assert cleaned == ["a", "b-fail", "b", "c"]
    assert CleanupJournal(agent_dir).owed() == []


def test_journal_refuses_secrets_and_stores_none(agent_dir: Path) -> None:
    j = CleanupJournal(agent_dir)
    canary = Secret("CANARY-token-value")
    with pytest.raises(OrchestrationEventStoreError) as info:
        j.record_owed("t", 1, canary)  # type: ignore[arg-type]
    assert "CANARY" not in str(info.value)
    assert "CANARY" not in repr(info.value)
    with pytest.raises(OrchestrationEventStoreError):
        j.record_owed(canary, 1, "x")  # type: ignore[arg-type]
    with pytest.raises(OrchestrationEventStoreError):
        j.record_owed("t", -1, "x")
    j.record_owed("t", 1, "run_started")
    for d, _, names in os.walk(agent_dir):
        for n in names:
            assert b"CANARY" not in Path(d, n).read_bytes()


CHILD = textwrap.dedent(
    """
    import sys, time
    from leasegate.shells.store import CleanupJournal
    j = CleanupJournal(sys.argv[1], "runner")
    j.record_owed("task-1", 5, "run_started", fencing_token=2)
    print("owed", flush=True)
    time.sleep(60)  # the run; killed before it can clean up
    """
)


def test_journal_runner_killed_mid_run_cleans_up_before_any_grant(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "core"), str(REPO / "shells")])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "owed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    order: list[str] = []
    journal = CleanupJournal(tmp_path, "runner")
    journal.recover(lambda item: order.append(f"cleanup {item.task_id}#{item.run_epoch}"))
    order.append("grant")  # the runner asks for grants only after recover returned
    assert order == ["cleanup task-1#5", "grant"]
    assert CleanupJournal(tmp_path, "runner").owed() == []
