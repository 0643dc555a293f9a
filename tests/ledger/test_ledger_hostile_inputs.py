"""Defects found by breaking the orchestration ledger as a newcomer (issue #8).

Each test reproduces one finding and fails on the code before its fix; the
fix is named in the test's docstring. What was attacked and what held is in
the breaker report (``docs/ledger.md``, "Adversarial review").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.ledger import (
    DurableTaskRuntimeError,
    OrchestrationEventStoreError,
)
from leasegate.core.ledger._runtime import TaskRuntimeProjection
from leasegate.shells.store import (
    AppendEventInput,
    CleanupJournal,
    DurableTaskRuntime,
    OrchestrationEventStore,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z


def _runtime(agent_dir: Path, **store_opts: Any) -> DurableTaskRuntime:
    counter = iter(range(1, 10**6))
    return DurableTaskRuntime(
        OrchestrationEventStore(agent_dir, "rt", **store_opts),
        now=lambda: T0,
        create_id=lambda: f"id{next(counter)}",
    )


def _task(task_id: str, objective_id: str = "o1", **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "taskId": task_id,
        "objectiveId": objective_id,
        "title": "title",
        "description": "description",
        "role": "implementer",
    }
    spec.update(over)
    return spec


def _nest(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


# --------------------------------------------------------------------------
# Finding 1: a lease TTL that runs past year 9999 made the pure core raise
# OverflowError (from the ISO formatting of expiresAt) out of plan_lease and
# out of DurableTaskRuntime.lease_attempt / DelegationOrchestrationLedger.start.
# Fix: plan_lease refuses an expiry past 9999-12-31T23:59:59.999Z with DTE
# "Lease TTL is too large."; _total and apply() also turn OverflowError into
# their typed error.


def test_DL_019_huge_lease_ttl_is_a_typed_error_not_overflow(agent_dir: Path) -> None:
    rt = _runtime(agent_dir)
    rt.create_objective("o1", "title", "description")
    rt.create_task(_task("t1"))
    attempt = rt.queue_attempt("t1", {"taskId": "t1"})
    n = len(rt.store.read_all())
    planned = rt._proj.plan_lease(attempt["attemptId"], "w", 10**15, "lease-x", T0)
    assert isinstance(planned, DurableTaskRuntimeError)
    assert str(planned) == "Lease TTL is too large."
    with pytest.raises(DurableTaskRuntimeError, match="Lease TTL is too large"):
        rt.lease_attempt(attempt["attemptId"], "w", 10**15)
    assert len(rt.store.read_all()) == n  # nothing appended
    # The largest TTL that still formats is accepted.
    lease = rt.lease_attempt(attempt["attemptId"], "w", 253_402_300_799_999 - T0)
    assert lease.expires_at == "9999-12-31T23:59:59.999Z"


def test_DL_019_projection_apply_never_raises_overflow() -> None:
    proj = TaskRuntimeProjection()
    event = {
        "type": "objective.paused",
        "aggregateId": "o",
        "ordinal": 1,
        "payload": {"atMs": float("inf")},
    }
    problem = proj.apply(event)
    assert isinstance(problem, DurableTaskRuntimeError)


# --------------------------------------------------------------------------
# Finding 2: idempotency keys joined ids with ":" without escaping, so two
# different requests could share a key and the second was silently answered
# with the first's event: fail_task("a:b", "c") made fail_task("a", "b:c") a
# no-op (task "a" stayed ready), and evidence "x:y" of objective "o" collided
# with evidence "y" of objective "o:x". Fix: every caller-chosen part of a
# multi-part key escapes "%" → "%25" and ":" → "%3A" (keys of ids without
# either character are unchanged).


def test_DL_025_fail_task_keys_do_not_collide(agent_dir: Path) -> None:
    rt = _runtime(agent_dir)
    rt.create_objective("o1", "title", "description")
    rt.create_task(_task("a:b"))
    rt.create_task(_task("a"))
    rt.fail_task("a:b", "c")
    rt.fail_task("a", "b:c")
    tasks = rt.get_snapshot()["tasks"]
    assert tasks["a:b"]["task"]["status"] == "failed"
    assert tasks["a"]["task"]["status"] == "failed"
    assert tasks["a"]["task"]["reasonCode"] == "b:c"


def test_DL_016_evidence_keys_do_not_collide(agent_dir: Path) -> None:
    rt = _runtime(agent_dir)
    rt.create_objective("o", "title", "description")
    rt.create_objective("o:x", "title", "description")
    evidence = {"criterionId": "c", "kind": "test", "summary": "s", "trusted": True}
    rt.record_objective_evidence("o:x", {"evidenceId": "y", **evidence})
    rt.record_objective_evidence("o", {"evidenceId": "x:y", **evidence})
    objectives = rt.get_snapshot()["objectives"]
    assert [e["evidenceId"] for e in objectives["o"]["evidence"]] == ["x:y"]
    assert [e["evidenceId"] for e in objectives["o:x"]["evidence"]] == ["y"]


def test_DL_016_keys_of_plain_ids_are_unchanged(agent_dir: Path) -> None:
    rt = _runtime(agent_dir)
    rt.create_objective("o1", "title", "description")
    rt.create_task(_task("t1"))
    rt.record_objective_evidence("o1", {"evidenceId": "e1", "criterionId": "c"})
    rt.fail_task("t1", "boom")
    keys = [e.get("idempotencyKey") for e in rt.store.read_all()]
    assert "task-failed:t1:boom" in keys
    assert "objective-evidence:o1:e1" in keys


# --------------------------------------------------------------------------
# Finding 3: the runtime accepted dispatches, tasks, objectives and evidence
# nested deep enough to fit an event payload (≤ 30 levels) but not the
# projection, where they sit 3-4 levels deeper. The append committed, then
# every later compaction raised "Orchestration projection must be a JSON
# object." after its own append had committed: each later mutation of the
# runtime raised although durable, and the tail was never compacted again.
# Fix: the planners check each caller-supplied JSON value at the depth it
# will have in the projection (is_json_object(..., depth=)).


@pytest.mark.parametrize("depth", [26, 27])
def test_ES_049_deep_dispatch_cannot_brick_compaction(agent_dir: Path, depth: int) -> None:
    rt = _runtime(agent_dir, max_tail_events=4)
    rt.create_objective("o1", "title", "description")
    rt.create_task(_task("t1"))
    with pytest.raises(DurableTaskRuntimeError):
        rt.queue_attempt("t1", {"taskId": "t1", "x": _nest(depth)})
    # The runtime keeps working and compacts.
    rt.create_task(_task("t2"))
    rt.create_task(_task("t3"))
    snapshot = rt.store.read_projection_snapshot()
    assert snapshot is not None
    assert snapshot.through_ordinal == 4


def test_ES_049_deepest_accepted_values_still_compact(agent_dir: Path) -> None:
    """The deepest value each planner accepts still fits the projection."""
    rt = _runtime(agent_dir, max_tail_events=1_000)

    def deepest(fn: Callable[[int], None]) -> int:
        best = 0
        for depth in range(1, 32):
            try:
                fn(depth)
            except (DurableTaskRuntimeError, OrchestrationEventStoreError):
                continue
            best = depth
        return best

    rt.create_objective("o1", "title", "description")
    counter = iter(range(10**6))

    def objective(depth: int) -> None:
        rt.create_objective(f"o{next(counter)}x", "t", "d", risk_budget={"x": _nest(depth)})

    def task(depth: int) -> None:
        rt.create_task(_task(f"t{next(counter)}", riskBudget={"x": _nest(depth)}))

    def evidence(depth: int) -> None:
        rt.record_objective_evidence("o1", {"evidenceId": f"e{next(counter)}", "x": _nest(depth)})

    def dispatch(depth: int) -> None:
        task_id = f"d{next(counter)}"
        rt.create_task(_task(task_id))
        rt.queue_attempt(task_id, {"taskId": task_id, "x": _nest(depth)})

    for fn in (objective, task, evidence, dispatch):
        assert deepest(fn) > 20
    state = rt.get_snapshot()
    assert _depth(state) <= 30
    last = state["lastOrdinal"]
    small = OrchestrationEventStore(agent_dir, "rt", max_tail_events=1)
    assert small.compact_if_needed(last, lambda: state) is True


# --------------------------------------------------------------------------
# Finding 4: the cleanup journal trusted its session's events and snapshot:
# a well-formed store event that is not a journal record (another type, a
# payload without taskId, a non-integer epoch) raised a bare KeyError or
# TypeError, or was silently absorbed, instead of the store's typed error
# naming the file. Fix: the journal validates every event and the snapshot
# projection and raises OrchestrationEventStoreError with ``.file``.


def test_ES_026_journal_reports_foreign_event_with_its_file(agent_dir: Path) -> None:
    store = OrchestrationEventStore(agent_dir, "cleanup-journal:r1")
    store.append(
        AppendEventInput(
            type="cleanup.owed",
            aggregate_id="t",
            actor="runtime",
            payload={"taskId": "t", "runEpoch": 1, "reason": "run_started"},
        )
    )
    store.append(
        AppendEventInput(
            type="cleanup.owed", aggregate_id="t", actor="runtime", payload={"CANARY": "x"}
        )
    )
    with pytest.raises(OrchestrationEventStoreError) as info:
        CleanupJournal(agent_dir, "r1")
    assert info.value.file == "0000000000000002.json"
    assert "CANARY" not in str(info.value)


@pytest.mark.parametrize(
    ("etype", "payload"),
    [
        ("task.created", {"taskId": "t", "runEpoch": 1}),
        ("cleanup.owed", {"taskId": "t", "runEpoch": "1", "reason": "r"}),
        ("cleanup.owed", {"taskId": "", "runEpoch": 1, "reason": "r"}),
        ("cleanup.owed", {"taskId": "t", "runEpoch": 1, "reason": "r", "fencingToken": True}),
        ("cleanup.settled", {"taskId": "t"}),
    ],
)
def test_ES_026_journal_rejects_malformed_records(
    agent_dir: Path, etype: str, payload: dict[str, Any]
) -> None:
    store = OrchestrationEventStore(agent_dir, "cleanup-journal:r1")
    store.append(AppendEventInput(type=etype, aggregate_id="t", actor="runtime", payload=payload))
    with pytest.raises(OrchestrationEventStoreError) as info:
        CleanupJournal(agent_dir, "r1")
    assert info.value.file == "0000000000000001.json"


def test_ES_051_journal_rejects_foreign_snapshot(agent_dir: Path) -> None:
    store = OrchestrationEventStore(agent_dir, "cleanup-journal:r1", max_tail_events=1)
    store.append(
        AppendEventInput(
            type="cleanup.settled",
            aggregate_id="t",
            actor="runtime",
            payload={"taskId": "t", "runEpoch": 1},
        )
    )
    assert store.compact_if_needed(1, lambda: {"lastOrdinal": 1, "owed": [{"CANARY": "x"}]})
    with pytest.raises(OrchestrationEventStoreError) as info:
        CleanupJournal(agent_dir, "r1")
    assert info.value.file == "0000000000000001.json"
    assert "CANARY" not in str(info.value)


# --------------------------------------------------------------------------
# Finding 5: compaction removed every marker and then the event files ≤ T
# without making the marker removals durable first. Unlinks in different
# directories reach the disk in no particular order, and the next append's
# fsync of events/ makes the event removals durable: after a power loss a
# marker of a key that fell out of the retained list could come back while
# its event stayed gone, and that key failed forever (the ES-046 hazard,
# reintroduced by power loss; docs/ledger.md promised the order). Fix:
# after removing markers, compaction fsyncs idempotency/ before the first
# event unlink.


def test_ES_046_marker_removals_durable_before_event_unlinks(agent_dir: Path, helpers: Any) -> None:
    fs = helpers.RecordingFs()
    store = OrchestrationEventStore(agent_dir, "s", max_tail_events=3, fs=fs)
    for i in range(3):
        store.append(
            AppendEventInput(
                type="task.created",
                aggregate_id="a",
                actor="runtime",
                payload={},
                idempotency_key=f"k{i}",
            )
        )
    fs.log.clear()
    assert store.compact_if_needed(3, lambda: {}) is True
    steps = fs.log
    marker_unlinks = [i for i, (op, n) in enumerate(steps) if op == "unlink" and len(n) == 69]
    event_unlinks = [i for i, (op, n) in enumerate(steps) if op == "unlink" and len(n) == 21]
    assert marker_unlinks
    assert event_unlinks
    between = steps[max(marker_unlinks) + 1 : min(event_unlinks)]
    assert ("fsync_dir", "idempotency") in between


# --------------------------------------------------------------------------
# Finding 6: a corrupt idempotency marker was reported with ``file=None``:
# docs/ledger.md promises ``.file`` names the corrupt file, and every other
# record's error does. Fix: the marker errors (ES-017, and an unreadable
# marker) carry ``file=<sha256 of key>.json``; the messages are unchanged.


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "Failed to parse orchestration idempotency marker: "),
        (b'{"version": 1, "key": "other", "ordinal": 1}', "Invalid orchestration idempotency"),
        (None, "Failed to parse orchestration idempotency marker: "),
    ],
)
def test_ES_017_marker_errors_name_the_marker_file(
    agent_dir: Path, content: bytes | None, message: str
) -> None:
    store = OrchestrationEventStore(agent_dir, "s")
    item = AppendEventInput(
        type="task.created", aggregate_id="a", actor="runtime", payload={}, idempotency_key="k1"
    )
    store.append(item)
    name = "6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0.json"
    marker = Path(store.idempotency_dir, name)
    if content is None:
        marker.unlink()
        marker.mkdir()  # unreadable: a directory
    else:
        marker.write_bytes(content)
    with pytest.raises(OrchestrationEventStoreError) as info:
        store.append(item)
    assert str(info.value).startswith(message)
    assert info.value.file == name


# --------------------------------------------------------------------------
# Finding 7: DelegationOrchestrationLedger.prepare trusted its input shapes:
# a contract without worker.profile raised a bare KeyError, Secret (or other
# non-string) instructions a bare TypeError from the label helper, and a
# string passed as required_capabilities was split into characters
# ("abc" → ["a", "b", "c"]) and recorded. Fix: prepare checks these shapes
# and raises DurableTaskRuntimeError before anything is read or appended.


_CONTRACT = {"worker": {"profile": {"profileId": "p", "role": "implementer", "budget": {}}}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"execution_contract": {}}, "Execution contract must carry worker.profile"),
        ({"execution_contract": {"worker": {"profile": {"role": "r"}}}}, "Execution contract"),
        ({"required_capabilities": "abc"}, "Required capabilities must be a list of strings."),
        ({"required_capabilities": [1]}, "Required capabilities must be a list of strings."),
        ({"instructions": None}, "Delegation instructions must be a string."),
    ],
)
def test_DL_002_malformed_prepare_input_is_a_typed_error(
    agent_dir: Path, overrides: dict[str, Any], message: str
) -> None:
    from leasegate.shells.store import DelegationOrchestrationLedger

    ledger = DelegationOrchestrationLedger(agent_dir, "s")
    args: dict[str, Any] = {
        "lane_id": "lane",
        "instructions": "do it",
        "execution_contract": _CONTRACT,
        "required_capabilities": [],
    }
    args.update(overrides)
    with pytest.raises(DurableTaskRuntimeError) as info:
        ledger.prepare(**args)
    assert str(info.value).startswith(message)
    assert ledger.runtime.store.read_all() == []


def test_DL_002_secret_instructions_refused_without_showing_it(agent_dir: Path) -> None:
    from leasegate.core import Secret
    from leasegate.shells.store import DelegationOrchestrationLedger

    ledger = DelegationOrchestrationLedger(agent_dir, "s")
    with pytest.raises(DurableTaskRuntimeError) as info:
        ledger.prepare(
            lane_id="lane",
            instructions=Secret("CANARY-instructions"),
            execution_contract=_CONTRACT,
            required_capabilities=[],
        )
    assert "CANARY" not in str(info.value)
    assert ledger.runtime.store.read_all() == []


# --------------------------------------------------------------------------
# Finding 8: lock_timeout_s was not checked: a NaN made every contended lock
# wait forever (NaN compares false with the deadline), although the docs
# promise a bounded wait; a string failed only under contention with a bare
# TypeError. Fix: the constructor refuses anything but a finite number ≥ 0.


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1, "5", True, None])
def test_ES_065_lock_timeout_must_be_finite_and_non_negative(agent_dir: Path, bad: Any) -> None:
    with pytest.raises(OrchestrationEventStoreError) as info:
        OrchestrationEventStore(agent_dir, "s", lock_timeout_s=bad)
    assert str(info.value) == "lockTimeout must be a finite, non-negative number of seconds."


def test_ES_065_zero_timeout_fails_fast_under_contention(agent_dir: Path) -> None:
    import fcntl
    import os

    from leasegate.core.ledger import OrchestrationLockTimeoutError

    store = OrchestrationEventStore(agent_dir, "s", lock_timeout_s=0)
    store.append(
        AppendEventInput(type="task.created", aggregate_id="a", actor="runtime", payload={})
    )
    fd = os.open(store.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(OrchestrationLockTimeoutError):
            store.read_all()
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# Finding 9: DurableTaskRuntime and CleanupJournal ran compaction after the
# append had committed and let its lock timeout escape: the caller saw an
# error for a mutation that was durable (lease_attempt lost the lease id and
# token it had just recorded; record_owed looked failed). Fix: a lock
# timeout of that housekeeping compaction is ignored; the next commit
# compacts.


class _ContendedStore(OrchestrationEventStore):
    def compact_if_needed(self, through_ordinal: int, projection: Callable[[], Any]) -> bool:
        from leasegate.core.ledger import OrchestrationLockTimeoutError

        raise OrchestrationLockTimeoutError("timed out")


def test_DL_020_compaction_timeout_does_not_fail_a_committed_lease(
    agent_dir: Path,
) -> None:
    counter = iter(range(1, 10**6))
    rt = DurableTaskRuntime(
        _ContendedStore(agent_dir, "rt"), now=lambda: T0, create_id=lambda: f"id{next(counter)}"
    )
    rt.create_objective("o1", "title", "description")
    rt.create_task(_task("t1"))
    attempt = rt.queue_attempt("t1", {"taskId": "t1"})
    lease = rt.lease_attempt(attempt["attemptId"], "w", 60_000)
    assert lease.fencing_token == 1
    rt.start_attempt(attempt["attemptId"], lease.lease_id, lease.fencing_token)
    assert rt.get_snapshot()["attempts"][attempt["attemptId"]]["status"] == "running"


def test_DL_020_compaction_timeout_does_not_fail_record_owed(agent_dir: Path) -> None:
    journal = CleanupJournal(agent_dir, store=_ContendedStore(agent_dir, "cleanup-journal:r"))
    journal.record_owed("t", 1, "run_started")
    assert [o.task_id for o in journal.owed()] == ["t"]


# --------------------------------------------------------------------------
# Finding 10: with the last event file *and* the cursor lost (deleted, or the
# cursor unparsable), the store reopened one event short, and the next
# append handed the lost, acknowledged ordinal out again (the reference
# treats an invalid cursor as absent, ES-035). The lost event's marker still
# named it. Fix: when the cursor is absent or invalid, reads and
# reconciliation check that no marker names an ordinal past H, and raise
# the typed error naming the marker instead of reusing the ordinal.


@pytest.mark.parametrize("cursor", [None, b"", b"{not json"])
def test_ES_034_lost_last_event_and_cursor_fail_closed(
    agent_dir: Path, cursor: bytes | None
) -> None:
    store = OrchestrationEventStore(agent_dir, "s")
    for i in range(3):
        store.append(
            AppendEventInput(
                type="task.created",
                aggregate_id="a",
                actor="runtime",
                payload={},
                idempotency_key=f"k{i}",
            )
        )
    Path(store.events_dir, f"{3:016d}.json").unlink()
    cursor_path = Path(store.cursor_path)
    if cursor is None:
        cursor_path.unlink()
    else:
        cursor_path.write_bytes(cursor)
    fresh = OrchestrationEventStore(agent_dir, "s")
    plain = AppendEventInput(type="task.created", aggregate_id="a", actor="runtime", payload={})
    for op in (fresh.read_all, lambda: fresh.read_after(0), lambda: fresh.append(plain)):
        with pytest.raises(OrchestrationEventStoreError) as info:
            op()
        assert str(info.value) == (
            "Orchestration idempotency marker names ordinal 3 past the last committed event 2."
        )
        assert info.value.file is not None
        assert info.value.file.endswith(".json")
    assert sorted(p.name for p in Path(store.events_dir).iterdir()) == [
        f"{1:016d}.json",
        f"{2:016d}.json",
    ]
