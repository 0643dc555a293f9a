"""ER-001–ER-023: construction, activation, drops, pending activations."""

from __future__ import annotations

import pytest
from replica_kit import (
    BOOT,
    ORG,
    TASK,
    Driver,
    FakeReader,
    acks,
    begin,
    page,
    reachable_values,
    reads,
    state,
)

from leasegate.core.replica import (
    ActivateAssignment,
    ActivationOutcome,
    NotifyChange,
    RejectWaiter,
    ReplicaLimits,
    ReplicaManager,
)


def outcome(cmds: list[object]) -> ActivationOutcome:
    (o,) = [c for c in cmds if isinstance(c, ActivationOutcome)]
    return o


def notifies(cmds: list[object]) -> list[str]:
    return [c.task_id for c in cmds if isinstance(c, NotifyChange)]


def test_ER_001_defaults() -> None:
    m = ReplicaManager(boot_id=BOOT)
    assert m.policy_epochs == (1,)
    assert ReplicaLimits() == ReplicaLimits(
        max_task_entries=16_384,
        max_task_bytes=8 * 1024 * 1024,
        max_total_entries=65_536,
        max_total_bytes=64 * 1024 * 1024,
    )
    assert m.ledger_totals == (0, 0)


@pytest.mark.parametrize(
    "kw",
    [
        {"boot_id": "bad id"},
        {"boot_id": BOOT, "policy_epochs": []},
        {"boot_id": BOOT, "policy_epochs": [True]},
        {"boot_id": BOOT, "policy_epochs": [1, 1]},
        {"boot_id": BOOT, "limits": ReplicaLimits(max_task_entries=0)},
        {"boot_id": BOOT, "limits": ReplicaLimits(max_task_bytes=-1)},
        {"boot_id": BOOT, "limits": ReplicaLimits(max_total_entries=2**53)},
        {"boot_id": BOOT, "limits": ReplicaLimits(max_total_bytes=1.5)},  # type: ignore[arg-type]
        {"boot_id": BOOT, "limits": ReplicaLimits(max_task_entries=5, max_total_entries=4)},
        {"boot_id": BOOT, "limits": ReplicaLimits(max_task_bytes=5, max_total_bytes=4)},
    ],
)
def test_ER_002_invalid_identity_raises(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="invalid task replica manager identity"):
        ReplicaManager(**kw)  # type: ignore[arg-type]


def test_ER_002_equal_task_and_total_limits_allowed() -> None:
    ReplicaManager(boot_id=BOOT, limits=ReplicaLimits(max_task_entries=4, max_total_entries=4))


def test_ER_003_policy_epochs_are_copied() -> None:
    epochs = [1, 2]
    m = ReplicaManager(boot_id=BOOT, policy_epochs=epochs)
    epochs.append(3)
    assert m.policy_epochs == (1, 2)


def test_ER_004_new_managers_share_nothing() -> None:
    a, b = Driver(), Driver()
    a.activate()
    assert a.m.read_status(TASK) is not None
    assert b.m.read_status(TASK) is None
    assert b.m.ledger_totals == (0, 0)


@pytest.mark.parametrize(
    ("task", "run", "org", "reader"),
    [
        ("", 1, ORG, object()),
        ("t\x01", 1, ORG, object()),
        (TASK, 0, ORG, object()),
        (TASK, True, ORG, object()),
        (TASK, 1, "", object()),
        (TASK, 1, "x" * 129, object()),
        (TASK, 1, "o\x7f", object()),
        (TASK, 1, ORG, None),
    ],
)
def test_ER_005_invalid_assignment(task: str, run: int, org: str, reader: object) -> None:
    d = Driver()
    tok = d.expect(TASK, 1)
    o = outcome(
        d.send(ActivateAssignment(now_ms=0, task_id=task, run_epoch=run, org_id=org, reader=reader))
    )
    assert o.outcome is None
    assert o.error == "invalid task assignment"
    assert d.m.read_status(TASK) is None
    assert d.one(begin())["code"] == "activation_pending"
    assert tok == 1


@pytest.mark.parametrize("task", ["bad task", "t\u00e2che", "a/b", "x" * 129])
def test_ER_005_a_task_id_that_is_not_an_op_id_is_refused_and_notifies_nothing(task: str) -> None:
    d = Driver()
    cmds = d.send(
        ActivateAssignment(now_ms=0, task_id=task, run_epoch=1, org_id=ORG, reader=FakeReader())
    )
    o = outcome(cmds)
    assert (o.outcome, o.error) == (None, "invalid task assignment")
    assert notifies(cmds) == []
    assert d.m.read_status(task) is None
    # No floor was set: the same id, once valid, is still a fresh task.
    assert outcome(d.activate()).outcome == "created"


def test_ER_006_stale_run_refused_floor_never_lowers() -> None:
    d = Driver()
    d.activate(run=3)
    assert outcome(d.activate(run=2)).error == "task assignment run epoch is stale"
    assert outcome(d.activate(run=3)).outcome == "retained"
    d.drop(run=3)
    d.drop_all()
    assert outcome(d.activate(run=2)).error == "task assignment run epoch is stale"


def test_ER_007_restart_required_run_cannot_reactivate() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=1))
    d.activate(run=1)
    d.one(begin("A1"))
    d.one(begin("A2"))  # retires A1 (1 entry)
    assert d.one(begin("A3"))["code"] == "replica_restart_required"
    d.drop(run=1)
    assert outcome(d.activate(run=1)).error == "task replica requires a runner restart"
    d.drop_all()
    assert outcome(d.activate(run=1)).error == "task replica requires a runner restart"
    assert outcome(d.activate(run=2)).outcome == "created"


def test_ER_008_created_fresh_replica_and_notify() -> None:
    d = Driver()
    cmds = d.activate()
    assert outcome(cmds).outcome == "created"
    assert notifies(cmds) == [TASK]
    assert cmds.index(outcome(cmds)) < len(cmds) - 1  # notify after install
    st = d.m.read_status(TASK)
    assert st is not None
    assert not st.gate_open
    assert st.stream_id is None
    assert st.attempt_id is None
    assert st.project_ids == ()
    assert not st.restart_required
    assert d.m.reader_generation(TASK, 1) == 1
    assert d.m.task_ledger(TASK) == (0, 0)


def test_ER_009_same_reader_same_org_retained_untouched() -> None:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    before = d.m.read_view(TASK, 1, ["p1"])
    cmds = d.activate()
    assert outcome(cmds).outcome == "retained"
    assert notifies(cmds) == []
    assert d.m.reader_generation(TASK, 1) == 1
    assert d.m.read_view(TASK, 1, ["p1"]) == before


def test_ER_010_new_reader_bumps_generation_without_notify() -> None:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    cmds = d.activate(reader=FakeReader("r2"))
    assert outcome(cmds).outcome == "retained"
    assert notifies(cmds) == []
    assert d.m.reader_generation(TASK, 1) == 2
    assert d.m.read_view_at(TASK, 1, ["p1"], 1) is not None
    assert d.m.read_view_at(TASK, 1, ["p1"], 2) is None
    assert d.one(begin("A2"))["ok"]
    d.activate(reader=FakeReader("r3"))
    assert d.one(page([state("A")], attempt="A2"))["code"] == "reader_changed"


def test_ER_011_org_cannot_change() -> None:
    d = Driver()
    d.activate()
    tok = d.expect()
    o = outcome(d.activate(org="other", reader=FakeReader("r2")))
    assert o.error == "task assignment organization cannot change"
    assert d.m.reader_generation(TASK, 1) == 1
    assert d.one(begin())["code"] == "activation_pending"
    d.settle(tok)


def test_ER_012_newer_run_replaces_and_scrubs() -> None:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    wid_cmds = d.await_ready(7)  # ready: resolves at once
    d.one(begin("A2"))
    d.await_ready(8)
    assert any("CANARY" in v for v in reachable_values(d.m))
    cmds = d.activate(run=2)
    assert outcome(cmds).outcome == "replaced"
    assert [c.reason for c in cmds if isinstance(c, RejectWaiter)] == ["assignment replaced"]
    assert notifies(cmds) == [TASK]
    assert reachable_values(d.m) == []
    assert d.m.ledger_totals == (0, 0)
    assert d.m.read_status(TASK).run_epoch == 2  # type: ignore[union-attr]
    assert wid_cmds


def test_ER_013_recreated_after_drop_is_fresh() -> None:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    d.drop()
    assert outcome(d.activate()).outcome == "created"
    st = d.m.read_status(TASK)
    assert st is not None
    assert st.stream_id is None
    assert d.m.task_ledger(TASK) == (0, 0)
    assert d.one(begin("A1"))["ok"]  # A1 no longer retired


def test_ER_014_reader_generation_exact_run_only() -> None:
    d = Driver()
    assert d.m.reader_generation(TASK, 1) is None
    d.activate(run=2)
    assert d.m.reader_generation(TASK, 2) == 1
    assert d.m.reader_generation(TASK, 1) is None
    d.drop(run=2)
    assert d.m.reader_generation(TASK, 2) is None


def test_ER_015_drop_exact_run_only() -> None:
    d = Driver()
    d.activate(run=2)
    cmds = d.drop(run=1)
    assert not cmds[0].dropped
    assert notifies(cmds) == []
    assert d.m.read_status(TASK) is not None
    d.ready_snapshot(run=2)
    d.one(begin("A2", run=2))
    d.await_ready(1, run=2)
    tok = d.expect(run=2)
    cmds = d.drop(run=2)
    assert cmds[-1] == NotifyChange(task_id=TASK)
    assert [c.reason for c in cmds if isinstance(c, RejectWaiter)] == [
        "task credentials were dropped"
    ]
    assert d.m.read_status(TASK) is None
    assert reachable_values(d.m) == []
    assert outcome(d.activate(run=1)).error == "task assignment run epoch is stale"
    assert tok


def test_ER_016_drop_all_order_and_reasons() -> None:
    d = Driver()
    for t in ("a", "b", "c"):
        d.activate(t)
    d.activate("a", run=2)  # replaced keeps its position
    d.drop("b")
    d.activate("b")  # goes last
    d.expect("c", 5)
    d.await_ready(1, "c")
    cmds = d.drop_all()
    assert notifies(cmds) == ["a", "c", "b"]
    assert [c.reason for c in cmds if isinstance(c, RejectWaiter)] == ["runner process ended"]
    assert outcome(d.activate("c", 5)).outcome == "created"
    assert d.one(begin(task="c", run=5))["ok"]  # token cleared
    assert outcome(d.activate("a", 1)).error == "task assignment run epoch is stale"


def test_ER_017_tokens_one_counter_settle_exact() -> None:
    d = Driver()
    assert [d.expect("a"), d.expect("b"), d.expect("a", 2)] == [1, 2, 3]
    d.activate("a")
    d.settle(2, task="a")  # another task's token: no-op
    d.settle(99, task="zz")
    assert d.one(begin(task="b"))["code"] == "activation_pending"
    d.settle(2, task="b")
    assert d.one(begin(task="b"))["code"] == "task_assignment_mismatch"


def test_ER_018_pending_refuses_in_every_situation() -> None:
    d = Driver()
    d.expect(TASK, 1)
    assert d.one(begin())["code"] == "activation_pending"  # no replica
    d2 = Driver()
    d2.activate()
    d2.expect(TASK, 1)
    assert d2.one(begin())["code"] == "activation_pending"
    assert d2.one(begin(boot="other"))["code"] == "runner_boot_mismatch"
    d3 = Driver(limits=ReplicaLimits(max_task_entries=1))
    d3.activate()
    d3.one(begin("A1"))
    d3.one(begin("A2"))
    assert d3.one(begin("A3"))["code"] == "replica_restart_required"
    d3.expect(TASK, 1)
    assert d3.one(begin("A4"))["code"] == "activation_pending"


def test_ER_019_pending_for_other_run_has_no_effect() -> None:
    d = Driver()
    d.activate(run=1)
    d.expect(TASK, 2)
    assert d.one(begin())["ok"]


def test_ER_020_activation_clears_only_its_runs_tokens() -> None:
    d = Driver()
    d.expect(TASK, 1)
    d.expect(TASK, 2)
    d.activate(run=1)
    assert d.one(begin())["ok"]
    assert d.one(begin(run=2))["code"] == "activation_pending"


def test_ER_021_failed_activation_keeps_token_settle_all() -> None:
    d = Driver()
    d.activate()
    t1, t2 = d.expect(), d.expect()
    d.activate(org="other")  # throws
    assert d.one(begin())["code"] == "activation_pending"
    d.settle(t1)
    assert d.one(begin())["code"] == "activation_pending"
    d.settle(t2)
    assert d.one(begin())["ok"]
    cmds = d.raw(page([state("A")]))
    assert reads(cmds)[0].reader is d.readers[TASK]


def test_ER_022_drop_all_clears_tokens_drop_keeps_them() -> None:
    d2 = Driver()
    d2.activate()
    d2.expect()
    d2.drop()
    assert d2.one(begin())["code"] == "activation_pending"
    d2.drop_all()
    assert d2.one(begin())["code"] == "task_assignment_mismatch"


def test_ER_023_pending_checked_at_dispatch_not_receipt() -> None:
    d = Driver()
    d.activate()
    d.one(begin())
    first = d.raw(page([state("A")]))  # waits on a read
    (rd,) = reads(first)
    queued = d.raw(page([state("A")], op="op-q"))
    assert acks(queued) == []
    d.expect()
    out = d.send(rd.reader.answer(rd))
    got = acks(out)
    assert got[0]["ok"]
    assert got[0]["opId"] == "op-p"
    assert got[1]["code"] == "activation_pending"
