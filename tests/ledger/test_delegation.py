"""The delegation ledger (DL-001..DL-027) over the real store and runtime,
or over a recording fake runtime where the catalog says so."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.ledger import DurableTaskRuntimeError
from leasegate.core.ledger._delegation import (
    GoalEvidence,
    GoalRequirement,
    GoalState,
    derive_worker_task_label,
    goal_sync_call,
    select_objective_id,
)
from leasegate.shells.store import DelegationOrchestrationLedger

T0 = 1_767_225_600_000

Ledger = DelegationOrchestrationLedger


def contract(profile_id: str = "prof", role: str = "implementer", **budget: Any) -> dict[str, Any]:
    return {"worker": {"profile": {"profileId": profile_id, "role": role, "budget": dict(budget)}}}


@pytest.fixture
def clock() -> list[int]:
    return [T0]


@pytest.fixture
def make_ledger(
    agent_dir: Path, clock: list[int], make_contract_store: Callable[..., Any]
) -> Callable[..., Ledger]:
    """A ledger on the backend under test (``store_backend``: file, PostgreSQL)."""
    counter = itertools.count(1)

    def make(session: str = "s1") -> Ledger:
        return DelegationOrchestrationLedger(
            agent_dir,
            session,
            now=lambda: clock[0],
            create_id=lambda: f"id{next(counter)}",
            store=make_contract_store(
                session,
                now=lambda: "2026-01-01T00:00:00.000Z",
                create_event_id=lambda: f"ev{next(counter)}",
            ),
        )

    return make


@pytest.fixture
def ledger(make_ledger: Callable[..., Ledger]) -> Ledger:
    return make_ledger()


def prepare(ledger: Ledger, lane: str = "lane-a", **kw: Any) -> dict[str, Any]:
    kw.setdefault("instructions", "Do the thing")
    kw.setdefault("execution_contract", contract())
    kw.setdefault("required_capabilities", ["git"])
    return ledger.prepare(lane_id=lane, **kw)


def managed(ledger: Ledger, seq: Any = 3, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "lane_id": "lane-a",
        "dispatch_sequence": seq,
        "instructions": "run",
        "profile_id": "p",
        "provider": "prov",
        "authorization_id": "auth",
        "role": "implementer",
        "risk_budget": {"maxAttempts": 5},
    }
    args.update(kw)
    return ledger.prepare_managed(**args)


def n_events(ledger: Ledger) -> int:
    return int(ledger.runtime.get_snapshot()["lastOrdinal"])


def goal(status: str = "active", **kw: Any) -> GoalState:
    kw.setdefault("requirements", (GoalRequirement("r1", "works", ("ev1", "ev2")),))
    kw.setdefault(
        "evidence",
        (
            GoalEvidence("ev1", "test", "passed", "2026-01-01T00:00:00.000Z", True),
            GoalEvidence("ev2", "note", "claimed", "2026-01-01T00:00:00.000Z", False),
        ),
    )
    return GoalState(goal_id="g1", status=status, user_goal="Ship it", **kw)


class FakeRuntime:
    """A recording stand-in for the runtime (DL-015, DL-021, DL-025)."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def get_snapshot(self) -> dict[str, Any]:
        return self.snapshot

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> Any:
            self.calls.append((name, args))
            return {"attemptId": "new", "status": "queued", "dispatch": {}}

        return record


def test_DL_001_construction_and_shared_sessions(make_ledger: Callable[..., Ledger]) -> None:
    one = make_ledger()
    two = make_ledger()
    other = make_ledger("s2")
    a = prepare(one)
    assert two.runtime.get_snapshot()["attempts"][a["attemptId"]]["status"] == "queued"
    assert other.runtime.get_snapshot()["attempts"] == {}
    assert one.runtime.store.max_tail_events == 256


def test_DL_002_prepare_takes_profile_from_the_contract(ledger: Ledger) -> None:
    c = contract("prof-x", "verifier", maxAttempts=4)
    a = prepare(ledger, execution_contract=c, required_capabilities=["git", "net"])
    snap = ledger.runtime.get_snapshot()
    task = snap["tasks"]["lane-a"]["task"]
    assert (task["role"], task["riskBudget"], task["requiredCapabilities"]) == (
        "verifier",
        {"maxAttempts": 4},
        ["git", "net"],
    )
    assert a["dispatch"]["profileId"] == "prof-x"
    assert a["dispatch"]["executionContract"] == c
    assert "executionKind" not in a["dispatch"]


@pytest.mark.parametrize("seq", [0, -1, 1.5, float("nan"), True, 2**53])
def test_DL_003_managed_sequence_validation(ledger: Ledger, seq: Any) -> None:
    with pytest.raises(DurableTaskRuntimeError) as info:
        managed(ledger, seq)
    assert str(info.value) == "Managed dispatch sequence must be a positive integer."
    assert n_events(ledger) == 0


def test_DL_004_managed_task_id_and_dispatch(ledger: Ledger) -> None:
    a = managed(ledger, 3, worktree_lane_key="wt")
    assert a["taskId"] == "lane-a:turn:3"
    assert list(a["dispatch"]) == [
        "taskId",
        "profileId",
        "instructions",
        "resourcePointerIds",
        "executionKind",
        "logicalLaneId",
        "dispatchSequence",
        "provider",
        "authorizationId",
        "worktreeLaneKey",
    ]
    assert a["dispatch"]["executionKind"] == "managed-process"
    assert a["dispatch"]["logicalLaneId"] == "lane-a"
    task = ledger.runtime.get_snapshot()["tasks"]["lane-a:turn:3"]["task"]
    assert (task["requiredCapabilities"], task["riskBudget"]) == ([], {"maxAttempts": 5})
    b = managed(ledger, 4, worktree_lane_key="")
    assert "worktreeLaneKey" not in b["dispatch"]


def test_DL_005_unknown_verification_subject(ledger: Ledger) -> None:
    with pytest.raises(DurableTaskRuntimeError) as info:
        prepare(ledger, verification_of_task_id="ghost")
    assert str(info.value) == "Unknown verification subject 'ghost'."
    assert n_events(ledger) == 0


def test_DL_006_objective_selection_order() -> None:
    g = goal()
    assert select_objective_id(subject_objective_id="x", goal=g, goal_id="h", session_id="s") == "x"
    assert (
        select_objective_id(subject_objective_id=None, goal=g, goal_id="h", session_id="s")
        == "goal:g1"
    )
    assert (
        select_objective_id(subject_objective_id=None, goal=None, goal_id="h", session_id="s")
        == "goal:h"
    )
    assert (
        select_objective_id(subject_objective_id=None, goal=None, goal_id="", session_id="s")
        == "session:s"
    )


def test_DL_007_objective_created_once(ledger: Ledger) -> None:
    prepare(ledger, "l1")
    managed(ledger, 1, goal_id="g9")
    objs = ledger.runtime.get_snapshot()["objectives"]
    assert objs["session:s1"]["objective"]["title"] == "Session s1"
    assert objs["session:s1"]["objective"]["description"] == "Session-scoped delegated work"
    assert objs["goal:g9"]["objective"]["title"] == "Goal g9"
    assert objs["goal:g9"]["objective"]["description"] == "Externally managed goal work"
    n = n_events(ledger)
    prepare(ledger, "l2")
    types = [e["type"] for e in ledger.runtime.store.read_after(n)]
    assert "objective.created" not in types


def test_DL_008_goal_synchronized_on_every_prepare(ledger: Ledger) -> None:
    prepare(ledger, goal=goal())
    n = n_events(ledger)
    prepare(ledger, goal=goal("paused"))
    types = [e["type"] for e in ledger.runtime.store.read_after(n)]
    assert types == ["objective.paused"]
    obj = ledger.runtime.get_snapshot()["objectives"]["goal:g1"]
    assert obj["objective"]["title"] == "Goal g1"
    assert obj["objective"]["description"] == "Ship it"


def test_DL_009_subject_of_another_objective_wins_over_goal(ledger: Ledger) -> None:
    prepare(ledger, "subject")
    prepare(ledger, "check", goal=goal(), verification_of_task_id="subject")
    snap = ledger.runtime.get_snapshot()
    assert snap["tasks"]["check"]["task"]["objectiveId"] == "session:s1"
    assert "goal:g1" not in snap["objectives"]


def test_DL_010_task_created_with_derived_title(ledger: Ledger) -> None:
    prepare(ledger, instructions="  Fix\n the   bug  ")
    task = ledger.runtime.get_snapshot()["tasks"]["lane-a"]["task"]
    assert (task["title"], task["description"]) == ("Fix the bug", "  Fix\n the   bug  ")
    prepare(ledger, "l2", instructions="   ", execution_contract=contract(role="verifier"))
    assert (
        ledger.runtime.get_snapshot()["tasks"]["l2"]["task"]["title"] == "Delegated verifier work"
    )
    long = "x" * 200
    assert derive_worker_task_label(long, "f") == "x" * 119 + "…"
    assert derive_worker_task_label("y" * 120, "f") == "y" * 120


def test_DL_011_verification_task_copies_criteria(ledger: Ledger) -> None:
    ledger.runtime.create_objective("o", "O", "D")
    ledger.runtime.create_task(
        {
            "taskId": "subj",
            "objectiveId": "o",
            "title": "t",
            "description": "d",
            "role": "r",
            "requiredCapabilities": [],
            "riskBudget": {},
            "acceptanceCriterionIds": ["c1", "c2"],
        }
    )
    prepare(ledger, "verify", verification_of_task_id="subj")
    task = ledger.runtime.get_snapshot()["tasks"]["verify"]["task"]
    assert (task["verificationOfTaskId"], task["acceptanceCriterionIds"], task["objectiveId"]) == (
        "subj",
        ["c1", "c2"],
        "o",
    )
    prepare(ledger, "plain")
    prepare(ledger, "verify2", verification_of_task_id="plain")
    assert ledger.runtime.get_snapshot()["tasks"]["verify2"]["task"]["acceptanceCriterionIds"] == []


def test_DL_012_existing_task_never_updated(ledger: Ledger) -> None:
    a = prepare(ledger)
    ledger.cancel(a["attemptId"], "x")
    prepare(
        ledger, instructions="Other", execution_contract=contract(role="verifier", maxAttempts=1)
    )
    task = ledger.runtime.get_snapshot()["tasks"]["lane-a"]["task"]
    assert (task["title"], task["role"], task["riskBudget"]) == ("Do the thing", "implementer", {})


def test_DL_013_active_attempt_reused(ledger: Ledger) -> None:
    a = prepare(ledger)
    ledger.start(a["attemptId"], 60_000, owner_id="someone-else")
    n = n_events(ledger)
    again = prepare(ledger, instructions="different")
    assert again["attemptId"] == a["attemptId"]
    assert again["status"] == "running"
    assert n_events(ledger) == n


def test_DL_014_queue_new_attempt_with_ordered_dispatch(ledger: Ledger) -> None:
    a = prepare(ledger)
    assert list(a["dispatch"]) == [
        "taskId",
        "profileId",
        "instructions",
        "resourcePointerIds",
        "executionContract",
    ]
    ledger.cancel(a["attemptId"], "user")
    b = prepare(ledger)
    assert b["attemptId"] != a["attemptId"]
    assert b["status"] == "queued"


def test_DL_015_task_missing_after_create(agent_dir: Path) -> None:
    fake = FakeRuntime({"objectives": {"session:s": {}}, "tasks": {}, "attempts": {}})
    ledger = DelegationOrchestrationLedger(agent_dir, "s", runtime=fake)  # type: ignore[arg-type]
    with pytest.raises(DurableTaskRuntimeError) as info:
        prepare(ledger, "lane-z")
    assert str(info.value) == "Failed to create task 'lane-z'."
    assert [c[0] for c in fake.calls] == ["create_task"]


def test_DL_016_goal_sync_order(ledger: Ledger) -> None:
    ledger.synchronize_goal_state(goal())
    events = ledger.runtime.store.read_all()
    assert [e["type"] for e in events] == ["objective.created", "objective.evidence_recorded"]
    assert events[1]["payload"]["evidence"]["evidenceId"] == "goal-evidence:g1:r1:ev1"
    ledger.synchronize_goal_state(goal())  # unchanged goal: nothing appended
    assert len(ledger.runtime.store.read_all()) == 2


GOAL_TABLE = [
    ("active", "paused", "resume"),
    ("active", "active", None),
    ("active", None, None),
    *[(g, "active", "pause") for g in ("paused", "blocked", "usage_limited", "budget_limited")],
    *[(g, "paused", None) for g in ("paused", "blocked", "usage_limited", "budget_limited")],
    ("cancelled", "active", "cancel"),
    ("cancelled", "completed", "cancel"),
    ("cancelled", None, "cancel"),
    ("cancelled", "cancelled", None),
    ("completed", "active", "complete"),
    ("completed", "cancelled", "complete"),
    ("completed", "completed", None),
    ("weird", "active", None),
]


@pytest.mark.parametrize(("goal_status", "objective_status", "call"), GOAL_TABLE)
def test_DL_017_goal_status_table(
    goal_status: str, objective_status: str | None, call: str | None
) -> None:
    assert goal_sync_call(goal_status, objective_status) == call


def test_DL_017_applied_through_the_runtime(ledger: Ledger) -> None:
    ledger.synchronize_goal_state(goal("paused"))
    assert ledger.runtime.get_snapshot()["objectives"]["goal:g1"]["objective"]["status"] == "paused"
    ledger.synchronize_goal_state(goal("active"))
    assert ledger.runtime.get_snapshot()["objectives"]["goal:g1"]["objective"]["status"] == "active"
    ledger.synchronize_goal_state(goal("completed"))
    obj = ledger.runtime.get_snapshot()["objectives"]["goal:g1"]["objective"]
    assert (obj["status"], obj["completionPolicy"]) == ("completed", "owner_evidence")
    # the "cancelled over completed" row raises out of prepare (pinned)
    with pytest.raises(DurableTaskRuntimeError, match=r"Objective 'goal:g1' is terminal\."):
        prepare(ledger, goal=goal("cancelled"))


def test_DL_018_start_unknown_attempt_or_task(agent_dir: Path, ledger: Ledger) -> None:
    with pytest.raises(DurableTaskRuntimeError) as info:
        ledger.start("ghost", 1000)
    assert str(info.value) == "Unknown attempt 'ghost'."
    fake = FakeRuntime({"objectives": {}, "tasks": {}, "attempts": {"a": {"taskId": "t"}}})
    faked = DelegationOrchestrationLedger(agent_dir, "s", runtime=fake)  # type: ignore[arg-type]
    with pytest.raises(DurableTaskRuntimeError) as info:
        faked.start("a", 1000)
    assert str(info.value) == "Unknown task 't'."
    assert fake.calls == []


def test_DL_019_start_leases_then_starts(ledger: Ledger) -> None:
    a = prepare(ledger)
    n = n_events(ledger)
    started = ledger.start(a["attemptId"], 30_000)
    assert [e["type"] for e in ledger.runtime.store.read_after(n)] == [
        "attempt.leased",
        "attempt.started",
    ]
    assert (started.objective_id, started.task_id, started.attempt_id) == (
        "session:s1",
        "lane-a",
        a["attemptId"],
    )
    assert started.fencing_token == 1
    assert started.expires_at == "2026-01-01T00:00:30.000Z"
    att = ledger.runtime.get_snapshot()["attempts"][a["attemptId"]]
    assert att["status"] == "running"
    assert att["lease"]["ownerId"] == "in-process:s1"


def test_DL_020_start_failure_leaves_the_lease(ledger: Ledger, clock: list[int]) -> None:
    a = prepare(ledger)
    original = ledger.runtime.start_attempt

    def late_start(*args: Any) -> None:
        clock[0] += 10_000  # the lease expired between the two calls
        original(*args)

    ledger.runtime.start_attempt = late_start  # type: ignore[method-assign]
    with pytest.raises(DurableTaskRuntimeError, match=r"lease expired"):
        ledger.start(a["attemptId"], 5_000)
    assert ledger.runtime.get_snapshot()["attempts"][a["attemptId"]]["status"] == "leased"
    # boot-time recovery expires the stranded lease and queues a replacement
    [replacement] = ledger.recover_queued_dispatches()
    snap = ledger.runtime.get_snapshot()
    assert snap["attempts"][a["attemptId"]]["status"] == "expired"
    assert replacement["attemptId"] != a["attemptId"]
    assert replacement["dispatch"] == a["dispatch"]


def test_DL_021_cancel_delegates(agent_dir: Path) -> None:
    fake = FakeRuntime({})
    ledger = DelegationOrchestrationLedger(agent_dir, "s", runtime=fake)  # type: ignore[arg-type]
    ledger.cancel("a1", "why")
    assert fake.calls == [("cancel_attempt", ("a1", "why"))]


def test_DL_022_recovery_expires_in_process_attempts_only(ledger: Ledger) -> None:
    inproc = prepare(ledger, "l1")
    man = managed(ledger, 1)
    ledger.start(inproc["attemptId"], 60_000)
    ledger.start(man["attemptId"], 60_000)
    ledger.recover_queued_dispatches()
    atts = ledger.runtime.get_snapshot()["attempts"]
    assert atts[inproc["attemptId"]]["status"] == "expired"
    assert atts[inproc["attemptId"]]["reasonCode"] == "worker_process_interrupted"
    assert atts[man["attemptId"]]["status"] == "running"


def test_DL_023_no_requeue_for_task_with_active_attempt(ledger: Ledger) -> None:
    a = prepare(ledger)
    out = ledger.recover_queued_dispatches()
    assert [x["attemptId"] for x in out] == [a["attemptId"]]
    assert len(ledger.runtime.get_snapshot()["tasks"]["lane-a"]["attemptIds"]) == 1


def test_DL_024_requeue_with_newest_expired_dispatch(ledger: Ledger) -> None:
    a = prepare(ledger)
    ledger.start(a["attemptId"], 60_000)
    out = ledger.recover_queued_dispatches()
    assert len(out) == 1
    assert out[0]["attemptId"] != a["attemptId"]
    assert out[0]["dispatch"] == a["dispatch"]
    ledger.cancel(out[0]["attemptId"], "user")  # a later cancelled attempt
    again = ledger.recover_queued_dispatches()
    assert len(again) == 1
    assert again[0]["dispatch"] == a["dispatch"]
    # a task that is not ready (paused objective → blocked) is skipped
    ledger.cancel(again[0]["attemptId"], "user")
    ledger.runtime.pause_objective("session:s1")
    assert ledger.recover_queued_dispatches() == []


def test_DL_025_attempt_budget(ledger: Ledger) -> None:
    a = prepare(ledger, execution_contract=contract(maxAttempts=2))
    ledger.start(a["attemptId"], 60_000)
    [b] = ledger.recover_queued_dispatches()
    ledger.start(b["attemptId"], 60_000)
    assert ledger.recover_queued_dispatches() == []
    task = ledger.runtime.get_snapshot()["tasks"]["lane-a"]["task"]
    assert (task["status"], task["reasonCode"]) == ("failed", "attempt_budget_exhausted")


def test_DL_025_zero_budget_with_a_fake_runtime(agent_dir: Path) -> None:
    snap = {
        "objectives": {},
        "tasks": {
            "t": {
                "task": {"taskId": "t", "status": "ready", "riskBudget": {"maxAttempts": 0}},
                "attemptIds": ["a"],
            }
        },
        "attempts": {"a": {"attemptId": "a", "taskId": "t", "status": "expired", "dispatch": {}}},
    }
    fake = FakeRuntime(snap)
    ledger = DelegationOrchestrationLedger(agent_dir, "s", runtime=fake)  # type: ignore[arg-type]
    ledger.recover_queued_dispatches()
    assert [c[0] for c in fake.calls] == ["recover_interrupted_unbound_attempts", "fail_task"]
    assert fake.calls[1][1] == ("t", "attempt_budget_exhausted")


def test_DL_026_managed_replacement_queued_but_not_returned(
    ledger: Ledger, clock: list[int]
) -> None:
    m = managed(ledger, 1)
    ledger.start(m["attemptId"], 1_000)
    clock[0] += 2_000
    ledger.runtime.expire_leases()
    out = ledger.recover_queued_dispatches()
    assert out == []
    task = ledger.runtime.get_snapshot()["tasks"]["lane-a:turn:1"]
    assert len(task["attemptIds"]) == 2
    new = ledger.runtime.get_snapshot()["attempts"][task["attemptIds"][1]]
    assert new["status"] == "queued"
    assert new["dispatch"] == m["dispatch"]


def test_DL_027_returns_all_queued_in_process_attempts_and_is_stable(ledger: Ledger) -> None:
    a = prepare(ledger, "l1")
    b = prepare(ledger, "l2")
    managed(ledger, 1)
    first = ledger.recover_queued_dispatches()
    assert [x["attemptId"] for x in first] == [a["attemptId"], b["attemptId"]]
    n = n_events(ledger)
    assert ledger.recover_queued_dispatches() == first
    assert n_events(ledger) == n
