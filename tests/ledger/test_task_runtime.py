"""The durable task runtime (orchestration.md, "Undefined in the reference":
proposed design). Core projection tests feed events; shell tests use a real store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.ledger import DurableTaskRuntimeError
from leasegate.core.ledger._runtime import PlannedEvent, TaskRuntimeProjection, iso_from_ms
from leasegate.shells.store import DurableTaskRuntime, OrchestrationEventStore

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"id{self.n}"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_runtime(
    make_contract_store: Callable[..., Any], clock: Clock
) -> Callable[..., DurableTaskRuntime]:
    """A runtime on the backend under test (``store_backend``: file, PostgreSQL)."""
    ids = Ids()

    def make(**store_opts: Any) -> DurableTaskRuntime:
        return DurableTaskRuntime(make_contract_store("rt", **store_opts), now=clock, create_id=ids)

    return make


@pytest.fixture
def rt(make_runtime: Callable[..., DurableTaskRuntime]) -> DurableTaskRuntime:
    return make_runtime()


def task_spec(task_id: str = "t1", objective_id: str = "o1", **over: Any) -> dict[str, Any]:
    spec = {
        "taskId": task_id,
        "objectiveId": objective_id,
        "title": "T",
        "description": "D",
        "role": "implementer",
        "requiredCapabilities": [],
        "riskBudget": {},
    }
    spec.update(over)
    return spec


def dispatch(task_id: str = "t1") -> dict[str, Any]:
    return {"taskId": task_id, "profileId": "p", "instructions": "do", "resourcePointerIds": []}


def setup_task(rt: DurableTaskRuntime, **over: Any) -> None:
    rt.create_objective("o1", "Objective", "Desc")
    rt.create_task(task_spec(**over))


# -- core: the projection alone, driven by events --------------------------------


def _commit(proj: TaskRuntimeProjection, plan: Any) -> None:
    assert isinstance(plan, PlannedEvent), plan
    n = proj.last_ordinal + 1
    event = {
        "schemaVersion": 1,
        "ordinal": n,
        "eventId": f"e{n}",
        "type": plan.type,
        "aggregateId": plan.aggregate_id,
        "actor": plan.actor,
        "occurredAt": "x",
        "payload": plan.payload,
    }
    assert proj.apply(event) is None


def test_runtime_core_projection_is_driven_by_events_only() -> None:
    p = TaskRuntimeProjection()
    _commit(p, p.plan_create_objective(objective_id="o", title="t", description="d", now_ms=T0))
    _commit(p, p.plan_create_task(task_spec("t", "o"), T0))
    _commit(p, p.plan_queue_attempt("t", dispatch("t"), "a1", T0))
    _commit(p, p.plan_lease("a1", "w", 1000, "l1", T0))
    lease = p.attempt("a1")["lease"]  # type: ignore[index]
    assert (lease["fencingToken"], lease["expiresAt"]) == (1, iso_from_ms(T0 + 1000))
    assert isinstance(p.plan_start("a1", "l1", 0, T0), DurableTaskRuntimeError)
    _commit(p, p.plan_start("a1", "l1", 1, T0 + 1))
    assert p.task("t")["task"]["status"] == "running"  # type: ignore[index]
    assert p.last_ordinal == 5
    bad = {"ordinal": 6, "type": "attempt.started", "aggregateId": "nope", "payload": {}}
    assert isinstance(p.apply(bad), DurableTaskRuntimeError)


def test_runtime_iso_from_ms() -> None:
    assert iso_from_ms(T0) == "2026-01-01T00:00:00.000Z"
    assert iso_from_ms(T0 + 1234) == "2026-01-01T00:00:01.234Z"


# -- objectives ---------------------------------------------------------------------


def test_runtime_objective_lifecycle_and_errors(rt: DurableTaskRuntime) -> None:
    rt.create_objective("o1", "Objective", "Desc")
    with pytest.raises(DurableTaskRuntimeError, match=r"already exists"):
        rt.create_objective("o1", "Objective", "Desc")
    with pytest.raises(DurableTaskRuntimeError):
        rt.create_objective("o2", " ", "Desc")
    rt.create_task(task_spec())
    rt.pause_objective("o1")
    snap = rt.get_snapshot()
    assert snap["objectives"]["o1"]["objective"]["status"] == "paused"
    assert snap["tasks"]["t1"]["task"]["status"] == "blocked"
    before = snap["lastOrdinal"]
    rt.pause_objective("o1")  # current status: no-op
    assert rt.get_snapshot()["lastOrdinal"] == before
    rt.resume_objective("o1")
    assert rt.get_snapshot()["tasks"]["t1"]["task"]["status"] == "ready"
    rt.complete_objective_from_owner("o1", False)
    with pytest.raises(DurableTaskRuntimeError, match=r"Objective 'o1' is terminal\."):
        rt.cancel_objective("o1")


def test_runtime_ensure_objective_and_evidence(rt: DurableTaskRuntime) -> None:
    obj = {
        "objectiveId": "o1",
        "title": "A",
        "description": "B",
        "riskBudget": {},
        "acceptanceCriteria": [{"id": "c1", "description": "x", "required": True}],
    }
    rt.ensure_objective(obj)
    n = rt.get_snapshot()["lastOrdinal"]
    rt.ensure_objective(obj)
    assert rt.get_snapshot()["lastOrdinal"] == n
    rt.ensure_objective({**obj, "title": "A2"})
    assert rt.get_snapshot()["objectives"]["o1"]["objective"]["title"] == "A2"
    with pytest.raises(DurableTaskRuntimeError, match=r"lacks trusted evidence for criterion 'c1'"):
        rt.complete_objective_from_owner("o1", False)
    evidence = {"evidenceId": "e1", "criterionId": "c1", "trusted": True}
    rt.record_objective_evidence("o1", evidence)
    n = rt.get_snapshot()["lastOrdinal"]
    rt.record_objective_evidence("o1", evidence)
    assert rt.get_snapshot()["lastOrdinal"] == n
    with pytest.raises(DurableTaskRuntimeError, match=r"other content"):
        rt.record_objective_evidence("o1", {**evidence, "trusted": False})
    rt.complete_objective_from_owner("o1", False)
    snap = rt.get_snapshot()["objectives"]["o1"]["objective"]
    assert (snap["status"], snap["completionPolicy"]) == ("completed", "owner_evidence")


def test_runtime_cancel_objective_cascades(rt: DurableTaskRuntime) -> None:
    setup_task(rt)
    a = rt.queue_attempt("t1", dispatch())
    rt.cancel_objective("o1")
    snap = rt.get_snapshot()
    assert snap["tasks"]["t1"]["task"]["status"] == "cancelled"
    assert snap["attempts"][a["attemptId"]]["status"] == "cancelled"
    with pytest.raises(DurableTaskRuntimeError, match=r"Objective 'o1' is terminal\."):
        rt.complete_objective_from_owner("o1", True)


# -- tasks and attempts ---------------------------------------------------------------


def test_runtime_queue_preconditions_and_budget(rt: DurableTaskRuntime) -> None:
    setup_task(rt, riskBudget={"maxAttempts": 2})
    with pytest.raises(DurableTaskRuntimeError, match=r"Unknown task 'nope'"):
        rt.queue_attempt("nope", dispatch("nope"))
    a1 = rt.queue_attempt("t1", dispatch())
    assert a1["status"] == "queued"
    with pytest.raises(
        DurableTaskRuntimeError, match=f"already owns active attempt '{a1['attemptId']}'"
    ):
        rt.queue_attempt("t1", dispatch())
    rt.cancel_attempt(a1["attemptId"], "user")
    rt.queue_attempt("t1", dispatch())
    rt.cancel_attempt(rt.get_snapshot()["tasks"]["t1"]["attemptIds"][-1], "user")
    with pytest.raises(DurableTaskRuntimeError, match=r"exhausted its attempt budget"):
        rt.queue_attempt("t1", dispatch())


def test_runtime_fencing_tokens_strictly_increase_and_stale_tokens_refused(
    rt: DurableTaskRuntime, clock: Clock
) -> None:
    setup_task(rt)
    tokens = []
    for _ in range(3):
        a = rt.queue_attempt("t1", dispatch())
        lease = rt.lease_attempt(a["attemptId"], "worker", 1000)
        tokens.append(lease.fencing_token)
        with pytest.raises(DurableTaskRuntimeError, match=r"lease or fencing token is stale"):
            rt.start_attempt(a["attemptId"], lease.lease_id, lease.fencing_token - 1)
        with pytest.raises(DurableTaskRuntimeError, match=r"lease or fencing token is stale"):
            rt.start_attempt(a["attemptId"], "lease-other", lease.fencing_token)
        rt.start_attempt(a["attemptId"], lease.lease_id, lease.fencing_token)
        rt.recover_interrupted_unbound_attempts(lambda att: True)
        # the dead holder's token can do nothing any more
        with pytest.raises(DurableTaskRuntimeError, match=r"stale"):
            rt.finish_attempt(a["attemptId"], lease.lease_id, lease.fencing_token, "completed")
    assert tokens == [1, 2, 3]
    a = rt.queue_attempt("t1", dispatch())
    lease = rt.lease_attempt(a["attemptId"], "worker", 1000)
    assert lease.expires_at == iso_from_ms(T0 + 1000)
    assert lease.expires_at_ms == T0 + 1000
    clock.ms += 1000
    with pytest.raises(DurableTaskRuntimeError, match=r"lease expired"):
        rt.start_attempt(a["attemptId"], lease.lease_id, lease.fencing_token)
    assert rt.expire_leases() == [a["attemptId"]]
    snap = rt.get_snapshot()
    assert snap["attempts"][a["attemptId"]]["status"] == "expired"
    assert snap["attempts"][a["attemptId"]]["reasonCode"] == "lease_expired"


def test_runtime_lease_ttl_and_owner_checks(rt: DurableTaskRuntime) -> None:
    setup_task(rt)
    a = rt.queue_attempt("t1", dispatch())
    for ttl in (0, -1, 1.5, True):
        with pytest.raises(DurableTaskRuntimeError, match=r"Lease TTL must be positive\."):
            rt.lease_attempt(a["attemptId"], "w", ttl)  # type: ignore[arg-type]
    with pytest.raises(DurableTaskRuntimeError):
        rt.lease_attempt(a["attemptId"], "", 100)


def test_runtime_finish_and_fail_task(rt: DurableTaskRuntime) -> None:
    setup_task(rt)
    a = rt.queue_attempt("t1", dispatch())
    lease = rt.lease_attempt(a["attemptId"], "w", 10_000)
    rt.start_attempt(a["attemptId"], lease.lease_id, lease.fencing_token)
    rt.finish_attempt(a["attemptId"], lease.lease_id, lease.fencing_token, "failed", "boom")
    assert rt.get_snapshot()["tasks"]["t1"]["task"]["status"] == "ready"
    b = rt.queue_attempt("t1", dispatch())
    rt.fail_task("t1", "gave_up")
    snap = rt.get_snapshot()
    assert snap["tasks"]["t1"]["task"]["status"] == "failed"
    assert snap["attempts"][b["attemptId"]]["status"] == "cancelled"
    n = snap["lastOrdinal"]
    rt.fail_task("t1", "again")  # terminal: no-op
    assert rt.get_snapshot()["lastOrdinal"] == n
    with pytest.raises(DurableTaskRuntimeError, match=r"Unknown task 'x'\."):
        rt.fail_task("x", "r")
    with pytest.raises(DurableTaskRuntimeError, match=r"Unknown attempt 'x'\."):
        rt.cancel_attempt("x", "r")


def test_runtime_projection_rebuilt_from_snapshot_plus_tail(
    make_runtime: Callable[..., DurableTaskRuntime],
) -> None:
    rt = make_runtime(max_tail_events=4)
    setup_task(rt)
    for _ in range(4):
        a = rt.queue_attempt("t1", dispatch())
        lease = rt.lease_attempt(a["attemptId"], "w", 10_000)
        rt.start_attempt(a["attemptId"], lease.lease_id, lease.fencing_token)
        rt.cancel_attempt(a["attemptId"], "stop")
    live = rt.get_snapshot()
    assert rt.store.read_projection_snapshot() is not None  # compaction happened
    again = make_runtime(max_tail_events=4).get_snapshot()
    assert again == live
    assert again["tasks"]["t1"]["task"]["lastFencingToken"] == 4


def test_runtime_two_instances_refresh_and_retry(
    make_runtime: Callable[..., DurableTaskRuntime],
) -> None:
    a = make_runtime(max_tail_events=3)
    b = make_runtime(max_tail_events=3)
    a.create_objective("o1", "O", "D")
    b.create_task(task_spec())  # b refreshes and sees the objective
    for i in range(5):
        (a if i % 2 else b).create_task(task_spec(f"x{i}"))
    assert list(a.get_snapshot()["tasks"]) == ["t1", "x0", "x1", "x2", "x3", "x4"]
    assert a.get_snapshot() == b.get_snapshot()


def test_runtime_concurrency_error_refreshes_and_retries(agent_dir: Path, clock: Clock) -> None:
    from leasegate.core.ledger import OrchestrationConcurrencyError
    from leasegate.shells.store import AppendEventInput

    other = DurableTaskRuntime(OrchestrationEventStore(agent_dir, "rt"), now=clock)

    class RacyStore(OrchestrationEventStore):
        races = 0

        def append(self, item: AppendEventInput, **kw: Any) -> dict[str, Any]:
            if self.races:
                self.races -= 1
                other.create_objective(f"other{self.races}", "O", "D")  # a competing writer
            return super().append(item, **kw)

    store = RacyStore(agent_dir, "rt")
    rt = DurableTaskRuntime(store, now=clock, create_id=Ids())
    store.races = 2
    rt.create_objective("mine", "M", "D")
    assert list(rt.get_snapshot()["objectives"]) == ["other1", "other0", "mine"]
    store.races = 10
    with pytest.raises(OrchestrationConcurrencyError):
        rt.create_objective("late", "L", "D")
    assert "late" not in rt.get_snapshot()["objectives"]
