"""ER-095–ER-130: materialization, fences, acks, ledger, readiness, views, scrubbing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from replica_kit import (
    ORG,
    TASK,
    Driver,
    FakeReader,
    acks,
    apply,
    begin,
    commit,
    generic_apply_cost,
    legacy_envelope,
    legacy_ref,
    page,
    reachable_values,
    reads,
    sid,
    staged_envelope,
    staged_ref,
    state,
)

from leasegate.core import Secret
from leasegate.core.replica import (
    NotifyChange,
    ReadinessDeadline,
    RejectWaiter,
    ReplicaLimits,
    ResolveWaiter,
    StartTimer,
    ValueReadCompleted,
    ValueReadFailed,
    locale_key,
)
from leasegate.core.replica._receipts import _receipt_bytes
from leasegate.core.wire.env import MAX_PROJECT_ENV_ACK_PAGE_BYTES


def mat_of(d: Driver, st: dict[str, Any]) -> dict[str, Any]:
    d.one(begin())
    ack = d.one(page([st]))
    assert ack["ok"], ack
    return dict(ack["results"][0]["materialization"])


def fresh(epochs: tuple[int, ...] = (1,)) -> Driver:
    d = Driver(epochs=epochs)
    d.activate()
    return d


def test_ER_095_withheld_rules_in_order() -> None:
    cases = [
        (state("A", tomb=True, gen=0, binding={"kind": "omit"}, epoch=None), "tombstone"),
        (state("A", epoch=None, binding={"kind": "omit"}), "policy_epoch_unknown"),
        (state("A", epoch=7), "policy_epoch_unknown"),
        (state("A", binding={"kind": "omit"}), "binding_omits"),
        (state("A", binding={"kind": "withhold", "reason": "owner says no"}), "owner says no"),
    ]
    for st, reason in cases:
        d = fresh()
        assert mat_of(d, st) == {"kind": "withheld", "reason": reason}
        assert d.readers[TASK].calls == []


def test_ER_096_null_value_ref_invalid_without_read() -> None:
    d = fresh()
    assert mat_of(d, state("A", ref=None, binding={"kind": "env"})) == {
        "kind": "unavailable",
        "reason": "value_reference_invalid",
    }
    assert d.readers[TASK].calls == []


def test_ER_097_staged_read_args_and_missing() -> None:
    d = fresh()
    d.readers[TASK].values[("staged", "p1", "A", sid(3))] = None
    assert mat_of(d, state("A", ref=staged_ref(3)))["reason"] == "value_missing"
    assert d.readers[TASK].calls == [("staged", "p1", "A", sid(3))]


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({}, None),
        ({"v": 2.0}, None),
        ({"value": ""}, None),
        ({"v": 1}, "value_envelope_mismatch"),
        ({"v": True}, "value_envelope_mismatch"),
        ({"kind": "x"}, "value_envelope_mismatch"),
        ({"orgId": "other"}, "value_envelope_mismatch"),
        ({"projectId": "p2"}, "value_envelope_mismatch"),
        ({"key": "B"}, "value_envelope_mismatch"),
        ({"stagingId": sid(9)}, "value_envelope_mismatch"),
        ({"value": 5}, "value_envelope_mismatch"),
        ({"extra": 1}, "value_envelope_mismatch"),
    ],
)
def test_ER_098_staged_envelope_checked_field_by_field(
    over: dict[str, Any], reason: str | None
) -> None:
    d = fresh()
    d.readers[TASK].values[("staged", "p1", "A", sid(1))] = staged_envelope(
        "p1", "A", sid(1), "CANARY-x", **over
    )
    m = mat_of(d, state("A"))
    assert m == (
        {"kind": "installed"} if reason is None else {"kind": "unavailable", "reason": reason}
    )


def test_ER_098_invalid_json_is_unavailable() -> None:
    d = fresh()
    d.readers[TASK].values[("staged", "p1", "A", sid(1))] = "{not json CANARY"
    assert mat_of(d, state("A"))["reason"] == "value_unavailable"
    d2 = fresh()
    d2.readers[TASK].values[("staged", "p1", "A", sid(1))] = "[1]"
    assert mat_of(d2, state("A"))["reason"] == "value_envelope_mismatch"


def test_ER_099_legacy_read_missing_and_version_mismatch() -> None:
    d = fresh()
    d.readers[TASK].values[("legacy", "p1", "A", 4)] = None
    assert mat_of(d, state("A", ref=legacy_ref(4)))["reason"] == "value_missing"
    assert d.readers[TASK].calls == [("legacy", "p1", "A", 4)]
    d2 = fresh()
    d2.readers[TASK].values[("legacy", "p1", "A", 4)] = ("garbage", 5)
    assert mat_of(d2, state("A", ref=legacy_ref(4)))["reason"] == "value_version_mismatch"


@pytest.mark.parametrize(
    ("over", "drop", "ok"),
    [
        ({}, None, True),
        ({"orgId": ORG}, None, True),
        ({"v": 1.0}, None, True),
        ({"orgId": None}, None, False),
        ({"orgId": "x"}, None, False),
        ({"updatedAt": True}, None, False),
        ({"updatedAt": "1"}, None, False),
        ({"v": 2}, None, False),
        ({"extra": 1}, None, False),
        ({}, "updatedAt", False),
        ({"value": None}, None, False),
    ],
)
def test_ER_100_legacy_envelope_rules(over: dict[str, Any], drop: str | None, ok: bool) -> None:
    import json

    env = json.loads(legacy_envelope("p1", "A", "CANARY-l", **over))
    if drop:
        del env[drop]
    d = fresh()
    d.readers[TASK].values[("legacy", "p1", "A", 2)] = (json.dumps(env), 2)
    m = mat_of(d, state("A", ref=legacy_ref(2)))
    assert (m == {"kind": "installed"}) is ok, m


def test_ER_100_legacy_infinite_updated_at() -> None:
    d = fresh()
    raw = legacy_envelope("p1", "A", "CANARY-l").replace("1700000000000", "1e999")
    d.readers[TASK].values[("legacy", "p1", "A", 2)] = (raw, 2)
    assert mat_of(d, state("A", ref=legacy_ref(2)))["reason"] == "value_envelope_mismatch"


def test_ER_101_read_failure_is_unavailable() -> None:
    d = fresh()
    d.readers[TASK].values[("staged", "p1", "A", sid(1))] = "FAIL"
    assert mat_of(d, state("A"))["reason"] == "value_unavailable"


def test_ER_102_installed_keeps_only_value() -> None:
    d = fresh()
    d.readers[TASK].values[("staged", "p1", "A", sid(1))] = staged_envelope(
        "p1", "A", sid(1), "CANARY-only"
    )
    d.ready_snapshot([state("A")])
    assert reachable_values(d.m) == ["CANARY-only"]
    assert d.value("A") == "CANARY-only"


def test_ER_103_reader_change_fences_inflight_page_and_apply() -> None:
    d = fresh()
    d.one(begin())
    cmds = d.raw(page([state("A"), state("B")]))
    (r1,) = reads(cmds)
    out = d.send(r1.reader.answer(r1))
    (r2,) = reads(out)
    d.activate(reader=FakeReader("r2"))
    (ack,) = acks(d.send(r2.reader.answer(r2)))
    assert ack["code"] == "reader_changed"
    assert reachable_values(d.m) == []
    d2 = fresh()
    d2.ready_snapshot()
    cmds = d2.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    (rd,) = reads(cmds)
    d2.activate(reader=FakeReader("r2"))
    (ack,) = acks(d2.send(rd.reader.answer(rd)))
    assert ack["code"] == "reader_changed"
    assert ack["appliedThrough"]["sequence"] == 0
    assert not any("00000002" in v for v in reachable_values(d2.m))


def test_ER_104_drop_or_replace_fences_with_state_changed() -> None:
    for how in ("drop", "drop_all", "replace", "drop_recreate", "reader_then_drop"):
        d = fresh()
        d.ready_snapshot()
        cmds = d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1))
        (rd,) = reads(cmds)
        if how == "drop":
            d.drop()
        elif how == "drop_all":
            d.drop_all()
        elif how == "replace":
            d.activate(run=2)
        elif how == "drop_recreate":
            d.drop()
            d.activate()
        else:
            d.activate(reader=FakeReader("r2"))
            d.drop()
        (ack,) = acks(d.send(rd.reader.answer(rd)))
        assert ack["code"] == "replica_state_changed", how
        assert ack["appliedThrough"]["sequence"] == 0
        assert reachable_values(d.m) == []


def test_ER_105_destroy_scrubs_values_already_read() -> None:
    d = fresh()
    d.one(begin())
    cmds = d.raw(page([state("A"), state("B")]))
    (r1,) = reads(cmds)
    out = d.send(r1.reader.answer(r1))
    assert any("CANARY" in v for v in reachable_values(d.m))
    d.drop()
    assert reachable_values(d.m) == []
    (r2,) = reads(out)
    (ack,) = acks(d.send(r2.reader.answer(r2)))
    assert ack["code"] == "replica_state_changed"


def test_ER_106_unrelated_lifecycle_does_not_fence() -> None:
    d = fresh()
    d.activate("other")
    d.one(begin())
    cmds = d.raw(page([state("A")]))
    (rd,) = reads(cmds)
    d.activate()  # same reader
    t = d.expect(run=5)
    d.settle(t)
    d.drop("other")
    (ack,) = acks(d.send(rd.reader.answer(rd)))
    assert ack["ok"]


def test_ER_107_fenced_frame_keeps_lane() -> None:
    d = fresh()
    d.one(begin())
    cmds = d.raw(page([state("A")]))
    (rd,) = reads(cmds)
    assert acks(d.raw(page([state("A")], op="q1"))) == []
    d.activate(reader=FakeReader("r2"))
    out = acks(d.send(rd.reader.answer(rd)))
    assert [a["code"] for a in out] == ["reader_changed", "reader_changed"]
    d.one(begin("A2"))
    cmds = d.raw(page([state("A")], attempt="A2"))
    (rd,) = reads(cmds)
    d.raw(page([state("A")], attempt="A2", op="q2"))
    d.drop()
    out = acks(d.send(rd.reader.answer(rd)))
    assert [a["code"] for a in out] == ["replica_state_changed", "task_assignment_mismatch"]


def test_ER_108_common_fields() -> None:
    d = Driver(epochs=(3, 1))
    ack = d.one(apply(state("A"), 1, boot="zz"))
    assert ack["runnerBootId"] == "zz"
    assert ack["attemptId"] is None
    assert ack["policyEpochs"] == [3, 1]
    assert ack["kind"] == "env.replica.v1.ack"
    assert ack["appliedThrough"] == {"streamId": "S1", "sequence": 0}


def test_ER_109_error_phase_by_kind() -> None:
    d = Driver()
    got = [d.one(f) for f in (begin(), page([]), apply(state("A"), 1), commit())]
    assert [a["phase"] for a in got] == ["begun", "page", "applied", "complete"]
    assert all(a["code"] == a["error"] == "task_assignment_mismatch" for a in got)


def test_ER_110_error_cursor_rules() -> None:
    d = fresh()
    d.ready_snapshot()
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    assert d.one(apply(state("A"), 9))["appliedThrough"]["sequence"] == 1
    assert d.one(apply(state("A"), 9, stream="S2"))["appliedThrough"]["sequence"] == 0
    assert d.one(apply(state("A"), 9, boot="zz"))["appliedThrough"]["sequence"] == 0
    assert d.one(apply(state("A"), 9, run=2))["appliedThrough"]["sequence"] == 0


def test_ER_111_success_shapes() -> None:
    d = fresh()
    b = d.one(begin())
    assert set(b) - {
        "kind",
        "opId",
        "taskId",
        "runEpoch",
        "runnerBootId",
        "streamId",
        "attemptId",
        "policyEpochs",
        "appliedThrough",
    } == {"ok", "phase"}
    p = d.one(page([state("A")]))
    assert {"projectId", "after", "recordVersion", "results", "complete"} <= set(p)
    c = d.one(commit())
    assert c["highWater"] == c["appliedThrough"]
    a = d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    assert {"projectId", "recordVersion", "result"} <= set(a)
    assert "code" not in a


def test_ER_112_acks_share_nothing_with_receipts() -> None:
    d = fresh()
    d.ready_snapshot()
    a = d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    a["result"]["state"]["key"] = "ZZ"
    assert d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))["result"]["state"]["key"] == "A"


def _withheld_page(n: int, a: int, b: int) -> list[dict[str, Any]]:
    recs = [state(f"K{i:04d}", binding={"kind": "withhold", "reason": "r" * 128}) for i in range(n)]
    recs[-2]["key"] += "_" * a
    recs[-1]["key"] += "_" * b
    return recs


def _page_ack_size(recs: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    d = fresh()
    d.one(begin())
    ack = d.one(page(recs))
    return len(json.dumps(ack, separators=(",", ":")).encode()), ack


def test_ER_113_page_size_limit_exact_boundary() -> None:
    limit = MAX_PROJECT_ENV_ACK_PAGE_BYTES
    s10, _ = _page_ack_size(_withheld_page(10, 0, 0))
    s11, _ = _page_ack_size(_withheld_page(11, 0, 0))
    n = 10 + (limit - s10) // (s11 - s10)  # the most records whose ack fits
    assert not _page_ack_size(_withheld_page(n + 1, 0, 0))[1]["ok"]
    base, ack = _page_ack_size(_withheld_page(n, 0, 0))
    assert ack["ok"]
    deficit = limit - base
    a = min(deficit, 251)
    b = deficit - a
    assert 0 <= b <= 251
    size, ack = _page_ack_size(_withheld_page(n, a, b))
    assert size == limit
    assert ack["ok"]
    over = _withheld_page(n, a, b)
    over[-1]["key"] = over[-1]["key"][:-1] + "_" * 2 if b else over[-1]["key"] + "_"
    d = fresh()
    d.one(begin())
    assert d.one(page(over))["code"] == "ack_page_too_large"  # one byte over


def test_ER_114_evidence_costs_match_reference_example() -> None:
    ok = Driver(limits=ReplicaLimits(max_task_bytes=346))
    ok.activate()
    ok.one(begin("A1", (), stream="S"))
    assert ok.one(commit([], attempt="A1", stream="S"))["ok"]
    assert ok.m.task_ledger(TASK) == (2, 346)
    bad = Driver(limits=ReplicaLimits(max_task_bytes=345))
    bad.activate()
    bad.one(begin("A1", (), stream="S"))
    assert bad.one(commit([], attempt="A1", stream="S"))["code"] == "replica_restart_required"


def test_ER_115_limits_reached_exactly_allowed() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=3))
    d.activate()
    d.ready_snapshot()  # 2
    assert d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))["ok"]  # 3
    assert d.one(apply(state("B", gen=2, ref=staged_ref(2)), 2, version=3))["code"] == (
        "replica_restart_required"
    )


def test_ER_116_ledger_cost_per_frame() -> None:
    d = fresh()
    d.one(begin("A1"))
    assert d.m.task_ledger(TASK)[0] == 0  # type: ignore[index]
    d.one(begin("A2"))
    assert d.m.task_ledger(TASK)[0] == 1  # type: ignore[index]
    d.one(page([state("A")], attempt="A2"))
    d.one(commit(attempt="A2"))
    assert d.m.task_ledger(TASK)[0] == 3  # type: ignore[index]
    d.one(begin("A3"))
    assert d.m.task_ledger(TASK)[0] == 3  # type: ignore[index]
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1, attempt="A3"))  # snapshot_incomplete
    d.one(begin("A4", stream="S2"))  # stream + attempt
    assert d.m.task_ledger(TASK)[0] == 5  # type: ignore[index]


def test_ER_117_receipts_released_on_stream_switch_rest_kept() -> None:
    d = fresh()
    d.ready_snapshot()
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    d.one(apply(state("B", gen=2, ref=staged_ref(2)), 2, version=3))
    assert d.m.task_ledger(TASK)[0] == 4  # type: ignore[index]
    d.one(begin("A2", stream="S2"))
    assert d.m.task_ledger(TASK)[0] == 3  # type: ignore[index]
    d.drop()
    assert d.m.ledger_totals == (0, 0)


def test_ER_118_process_totals_shared() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=3, max_total_entries=4))
    d.activate("t")
    d.activate("u")
    d.ready_snapshot(task="t")
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1, task="t"))
    d.one(begin(task="u"))
    d.one(page([state("A")], task="u"))
    assert d.one(commit(task="u"))["code"] == "replica_restart_required"
    d.drop("t")
    d.activate("v")
    d.one(begin(task="v"))
    d.one(page([state("A")], task="v"))
    assert d.one(commit(task="v"))["ok"]


def test_ER_119_exhaustion_every_ledger_kind() -> None:
    # Each scenario's limit fails exactly one kind of evidence: retired
    # stream (87 bytes), retired attempt (88 bytes), apply receipt, completed attempt.
    scenarios: dict[str, tuple[ReplicaLimits, list[dict[str, Any]]]] = {
        "retired_stream": (
            ReplicaLimits(max_task_bytes=86),
            [begin("A1"), begin("A1", stream="S2")],
        ),
        "retired_attempt": (ReplicaLimits(max_task_bytes=87), [begin("A1"), begin("A2")]),
        "apply_receipt": (
            ReplicaLimits(max_task_entries=2),
            [begin("A1", ()), commit([]), apply(state("A"), 1)],
        ),
        "completed_attempt": (ReplicaLimits(max_task_bytes=257), [begin("A1", ()), commit([])]),
    }
    for name, (limits, frames) in scenarios.items():
        d = Driver(limits=limits)
        d.activate()
        *head, last = frames
        for f in head:
            assert d.one(f)["ok"], name
        d.await_ready(1, ms=50)
        d.log.clear()
        ack = d.one(last)
        assert ack["code"] == "replica_restart_required", name
        st = d.m.read_status(TASK)
        assert st is not None
        assert st.restart_required
        assert not st.gate_open
        assert st.project_ids == ()
        assert d.m.ledger_totals == (0, 0)
        assert reachable_values(d.m) == []
        assert NotifyChange(task_id=TASK) in d.log
        if name != "apply_receipt":  # (the run was ready there: resolved at once)
            assert [c.reason for c in d.log if isinstance(c, RejectWaiter)] == [
                "task replica requires a runner restart"
            ], name


def test_ER_119_exhaustion_rejects_waiters() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=1))
    d.activate()
    d.one(begin("A1"))
    d.await_ready(1)
    d.log.clear()
    d.one(begin("A2"))
    assert d.one(begin("A3"))["code"] == "replica_restart_required"
    assert [c.reason for c in d.log if isinstance(c, RejectWaiter)] == [
        "task replica requires a runner restart"
    ]
    assert [c for c in d.log if isinstance(c, NotifyChange)] == [NotifyChange(task_id=TASK)] * 2


def test_ER_120_exhausted_replica_refuses_everything() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=1))
    d.activate()
    d.one(begin())
    d.one(page([state("A")]))
    assert d.one(commit())["code"] == "replica_restart_required"  # needs 2 entries
    st = d.m.read_status(TASK)
    assert st is not None
    assert st.restart_required
    assert st.stream_id == "S1"
    assert d.one(page([]))["code"] == "replica_restart_required"
    cmds = d.await_ready(3)
    assert cmds == [RejectWaiter(waiter_id=3, reason="task replica requires a runner restart")]
    assert d.m.read_view(TASK, 1, ["p1"]) is None
    assert not d.m.is_ready(TASK, 1)


def test_ER_121_is_ready() -> None:
    d = fresh()
    assert not d.m.is_ready(TASK, 1)
    d.ready_snapshot()
    assert d.m.is_ready(TASK, 1)
    assert not d.m.is_ready(TASK, 2)
    d.one(begin("A2"))
    assert not d.m.is_ready(TASK, 1)


def test_ER_122_await_ready_immediate_cases() -> None:
    d = Driver()
    assert d.await_ready(1, ms=0)[0].reason == "invalid task replica readiness timeout"
    assert d.await_ready(1, ms=True)[0].reason == "invalid task replica readiness timeout"
    assert d.await_ready(1, ms=2**31)[0].reason == "invalid task replica readiness timeout"
    assert d.await_ready(1)[0].reason == "task replica assignment is unavailable"
    d.activate()
    d.ready_snapshot()
    assert d.await_ready(1) == [ResolveWaiter(waiter_id=1)]


def test_ER_123_waiter_settles_once() -> None:
    d = fresh()
    (t,) = d.await_ready(1, ms=500)
    assert isinstance(t, StartTimer)
    assert t.delay_ms == 500
    d.one(begin())
    assert not [c for c in d.log if isinstance(c, ResolveWaiter)]
    cmds = d.send(ReadinessDeadline(now_ms=0, timer_id=t.timer_id))
    assert cmds == [
        RejectWaiter(waiter_id=1, reason="task environment replica did not become ready in time")
    ]
    (t2,) = d.await_ready(2)
    d.one(page([state("A")]))
    d.one(commit())
    assert d.send(ReadinessDeadline(now_ms=0, timer_id=t2.timer_id)) == []
    assert ResolveWaiter(waiter_id=2) in d.log


def test_ER_124_read_view_exact_set() -> None:
    d = fresh()
    d.one(begin("A1", ("p1", "p2")))
    d.one(page([state("A")]))
    d.one(page([state("A")], project="p2"))
    d.one(commit([("p1", 1), ("p2", 1)]))
    assert d.m.read_view(TASK, 1, ["p1"]) is None
    assert d.m.read_view(TASK, 1, ["p1", "p2", "p3"]) is None
    assert d.m.read_view(TASK, 1, ["p1", "p2", "p2"]) is None
    assert d.m.read_view(TASK, 2, ["p1", "p2"]) is None
    assert d.m.read_view(TASK, 1, ["p2", "p1"]) is not None


def test_ER_125_view_order_and_locale_sort() -> None:
    assert sorted(["B", "b", "_a", "a1", "A"], key=locale_key) == ["_a", "A", "a1", "b", "B"]
    d = fresh()
    d.ready_snapshot([state("B"), state("_a"), state("b")])
    view = d.m.read_view(TASK, 1, ["p1"])
    assert view is not None
    assert view.runner_boot_id == "boot1"
    assert [e.state.key for e in view.projects[0].entries] == ["_a", "b", "B"]
    assert all(isinstance(e.value, Secret) for e in view.projects[0].entries)


def test_ER_126_read_view_at_generations() -> None:
    d = fresh()
    assert d.m.read_view_at(TASK, 1, ["p1"], 1) is None
    d.ready_snapshot()
    d.activate(reader=FakeReader("r2"))
    assert d.m.read_view_at(TASK, 1, ["p1"], 1) is not None
    assert d.m.read_view_at(TASK, 1, ["p1"], 2) is None
    d.one(begin("A2"))
    assert d.m.read_view_at(TASK, 1, ["p1"], 1) is None
    d.one(page([state("A")], version=2, attempt="A2"))
    d.one(commit([("p1", 2)], attempt="A2"))
    assert d.m.read_view_at(TASK, 1, ["p1"], 2) is not None
    assert d.m.read_view_at(TASK, 1, ["p1"], 1) is None


def test_ER_127_read_status_live_ids_sorted() -> None:
    d = fresh()
    st = d.m.read_status(TASK)
    assert st is not None
    assert st.applied_through is None
    assert st.project_ids == ()
    d.one(begin("A1", ("pb", "pa")))
    assert d.m.read_status(TASK).project_ids == ()  # type: ignore[union-attr]
    d.one(page([], project="pb"))
    d.one(page([], project="pa"))
    d.one(commit([("pb", 1), ("pa", 1)]))
    assert d.m.read_status(TASK).project_ids == ("pa", "pb")  # type: ignore[union-attr]


def test_ER_128_plaintext_scrubbed_everywhere() -> None:
    d = fresh()
    d.ready_snapshot([state("A"), state("B")])
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    vals = reachable_values(d.m)
    assert sorted(vals) == sorted([f"CANARY-p1-A-{sid(2)}", f"CANARY-p1-B-{sid(1)}"])
    d.one(begin("A2"))
    d.one(page([state("A", gen=2, ref=staged_ref(2))], version=3, attempt="A2"))
    d.one(commit([("p1", 3)], attempt="A2", seq=1))
    assert reachable_values(d.m) == [f"CANARY-p1-A-{sid(2)}"]  # removed key B gone
    for c in d.log:
        assert "CANARY" not in repr(c)
        assert "CANARY" not in str(c)


def test_ER_129_notify_exact_events() -> None:
    d = fresh()
    d.log.clear()
    d.activate()
    d.drop(run=9)
    d.one(begin())
    d.one(begin())  # replay
    d.one(page([state("A")]))
    d.one(commit())
    d.one(commit())  # replay
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    d.one(apply(state("A"), 5))  # gap
    n = [c for c in d.log if isinstance(c, NotifyChange)]
    assert len(n) == 3  # begin, commit, live apply


def test_ER_130_notify_is_fire_and_forget() -> None:
    d = fresh()
    cmds = d.raw(begin())
    assert isinstance(cmds[0], NotifyChange) or isinstance(cmds[-1], NotifyChange)
    assert acks(cmds)[0]["ok"]  # the ack does not depend on the host's handling


def test_unknown_completion_ignored() -> None:
    d = fresh()
    assert d.send(ValueReadCompleted(now_ms=0, cmd_id=999, raw=Secret("x"))) == []
    assert d.send(ValueReadFailed(now_ms=0, cmd_id=-1)) == []


def test_ER_114_apply_receipt_cost_equals_generic_canonical_form() -> None:
    d = fresh()
    d.ready_snapshot()
    frames = [
        apply(state("A", gen=2, ref=staged_ref(2)), 1),  # advance, installed
        apply(state("A", gen=2, ref=staged_ref(2)), 2, version=2),  # absorbed
        apply(state("Q", rev=3), 3),  # consumed error
    ]
    answers = [d.one(f) for f in frames]
    r = d.m._replicas[TASK]
    for f, ack in zip(frames, answers, strict=True):
        seq = f["delivery"]["sequence"]
        assert _receipt_bytes(r.apply_receipts[seq]) == generic_apply_cost(f, ack), seq
