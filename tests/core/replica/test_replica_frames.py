"""ER-024–ER-053: intake, lanes, identity errors, begin and page."""

from __future__ import annotations

import copy

import pytest
from replica_kit import (
    TASK,
    Driver,
    FakeReader,
    acks,
    apply,
    begin,
    commit,
    page,
    reachable_values,
    reads,
    staged_ref,
    state,
)

from leasegate.core.replica import FrameRejected, NotifyChange, ReplicaLimits
from leasegate.core.wire.env import MAX_PROJECT_ENV_ACK_PAGE_BYTES


def ready() -> Driver:
    d = Driver()
    d.activate()
    return d


@pytest.mark.parametrize(
    "bad",
    [
        None,
        1,
        "x",
        [],
        {},
        {**begin(), "kind": "env.replica.v1.ack"},
        {**begin(), "extra": 1},
        {**begin(), "runEpoch": True},
        {**begin(), "projectIds": ["p", "p"]},
    ],
)
def test_ER_024_invalid_frame_rejected_without_ack(bad: object) -> None:
    d = ready()
    cmds = d.raw(bad)
    assert len(cmds) == 1
    assert isinstance(cmds[0], FrameRejected)
    assert cmds[0].error == "invalid task project environment replica frame"
    assert d.m.read_status(TASK).stream_id is None  # type: ignore[union-attr]


def test_ER_025_frame_copied_at_receipt() -> None:
    d = ready()
    d.one(begin())
    f = page([state("A")])
    cmds = d.raw(f)
    f["records"][0]["key"] = "Z"
    f["opId"] = "changed"
    (rd,) = reads(cmds)
    assert rd.key == "A"
    (ack,) = acks(d.send(rd.reader.answer(rd)))
    assert ack["opId"] == "op-p"
    assert ack["results"][0]["state"]["key"] == "A"


def test_ER_026_lanes_per_task_in_order() -> None:
    d = Driver()
    d.activate("a")
    d.activate("b")
    d.one(begin(task="a"))
    d.one(begin(task="b"))
    ca = d.raw(page([state("A")], task="a"))
    qa = d.raw(begin("A9", task="a", op="op-late"))
    assert acks(qa) == []  # queued behind the read
    cb = d.raw(page([state("A")], task="b"))  # other task: independent
    (rb,) = reads(cb)
    assert acks(d.send(rb.reader.answer(rb)))[0]["ok"]
    (ra,) = reads(ca)
    out = acks(d.send(ra.reader.answer(ra)))
    assert [x["opId"] for x in out] == ["op-p", "op-late"]
    # a lifecycle event fed before a frame is seen by it
    d.drop("a")
    assert d.one(begin(task="a"))["code"] == "task_assignment_mismatch"


def test_ER_026_reads_completing_in_reverse_order_ack_in_arrival_order() -> None:
    d = Driver()
    d.activate("a")
    d.activate("b")
    for t in ("a", "b"):
        d.one(begin(task=t))
    c1 = d.raw(page([state("A")], task="a", op="first", complete=False))
    c2 = d.raw(page([state("A")], task="b", op="other"))
    (r1,), (r2,) = reads(c1), reads(c2)
    # queue a second frame of task a; its read can only start after the first ack
    d.raw(page([state("B")], task="a", project="p1", after="A", complete=True, op="second"))
    # complete b's read first, then a's
    assert [x["opId"] for x in acks(d.send(r2.reader.answer(r2)))] == ["other"]
    out = d.send(r1.reader.answer(r1))
    assert [x["opId"] for x in acks(out)] == ["first"]
    (r3,) = reads(out)
    assert r3.key == "B"
    out2 = acks(d.send(r3.reader.answer(r3)))
    assert [x["opId"] for x in out2] == ["second"]
    assert out2[0]["ok"]


def test_ER_027_identity_check_order() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=1))
    assert d.one(begin(boot="other"))["code"] == "runner_boot_mismatch"
    assert d.one(begin())["code"] == "task_assignment_mismatch"
    d.activate(run=2)
    assert d.one(begin(run=1))["code"] == "task_assignment_mismatch"
    assert d.one(begin(run=3))["code"] == "task_assignment_mismatch"
    d.one(begin("A1", run=2))
    d.one(begin("A2", run=2))
    assert d.one(begin("A3", run=2))["code"] == "replica_restart_required"
    assert d.one(page([], attempt="A3", run=2))["code"] == "replica_restart_required"
    assert d.one(begin("A4", run=2, boot="zz"))["code"] == "runner_boot_mismatch"


def test_ER_028_first_begin_opens_attempt() -> None:
    d = ready()
    cmds = d.raw(begin("A1", ("p2", "p1")))
    (ack,) = acks(cmds)
    assert ack["ok"]
    assert ack["phase"] == "begun"
    assert ack["appliedThrough"] == {"streamId": "S1", "sequence": 0}
    assert [c for c in cmds if isinstance(c, NotifyChange)] == [NotifyChange(task_id=TASK)]
    st = d.m.read_status(TASK)
    assert st.attempt_id == "A1"
    assert st.stream_id == "S1"
    assert not st.gate_open
    assert d.m.task_ledger(TASK) == (0, 0)


def test_ER_029_retired_stream_refused_first() -> None:
    d = ready()
    d.one(begin("A1", stream="S1"))
    d.one(begin("A2", stream="S2"))
    assert d.one(begin("A1", stream="S1"))["code"] == "stream_retired"


def test_ER_030_retired_attempt_refused_even_identical() -> None:
    d = ready()
    d.one(begin("A1"))
    d.one(begin("A2"))
    assert d.one(begin("A1"))["code"] == "reconciliation_attempt_retired"
    d2 = ready()
    d2.ready_snapshot()
    assert d2.one(begin("A1"))["code"] == "reconciliation_attempt_retired"


def test_ER_031_identical_begin_replays_without_change() -> None:
    d = ready()
    d.one(begin())
    d.one(page([state("A")], complete=False))
    cmds = d.raw(begin())
    (ack,) = acks(cmds)
    assert ack["ok"]
    assert not [c for c in cmds if isinstance(c, NotifyChange)]
    assert d.one(page([state("A")], complete=False))["ok"]  # receipt kept: replay
    assert d.m.task_ledger(TASK) == (0, 0)


def test_ER_032_same_attempt_other_projects_conflict() -> None:
    d = ready()
    d.one(begin("A1", ("p1", "p2")))
    assert d.one(begin("A1", ("p2", "p1")))["code"] == "reconciliation_attempt_conflict"
    assert d.m.read_status(TASK).attempt_id == "A1"  # type: ignore[union-attr]


def test_ER_033_new_attempt_supersedes_and_scrubs() -> None:
    d = ready()
    d.ready_snapshot()
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    d.one(begin("A2"))
    d.one(page([state("B", ref=staged_ref(5))], complete=False, attempt="A2", version=3))
    assert any("00000005" in v for v in reachable_values(d.m))
    cmds = d.raw(begin("A3"))
    assert acks(cmds)[0]["appliedThrough"]["sequence"] == 1
    assert NotifyChange(task_id=TASK) in cmds
    assert not any("00000005" in v for v in reachable_values(d.m))
    assert d.m.read_view(TASK, 1, ["p1"]) is None
    assert not d.m.is_ready(TASK, 1)
    assert d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))["ok"]  # receipt kept


def test_ER_034_stream_switch_releases_receipts() -> None:
    d = ready()
    d.ready_snapshot()
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    used = d.m.task_ledger(TASK)
    assert used[0] == 3  # completed + retired A1 + 1 receipt  # type: ignore[index]
    d.one(begin("A2"))
    ack = d.one(begin("A3", stream="S2"))
    assert ack["ok"]
    assert ack["appliedThrough"] == {"streamId": "S2", "sequence": 0}
    assert d.m.task_ledger(TASK)[0] == 2 + 1 + 1  # type: ignore[index]
    assert d.one(commit([("p1", 1)], attempt="A1"))["ok"]  # completed record kept


def test_ER_035_failed_begin_exhausts_with_cursor_rule() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=2))
    d.activate()
    d.ready_snapshot()  # 2 entries
    assert (
        d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))["code"] == "replica_restart_required"
    )
    d2 = Driver(limits=ReplicaLimits(max_task_entries=2))
    d2.activate()
    d2.ready_snapshot()
    d2.one(begin("A2"))
    ack = d2.one(begin("A3", stream="S2"))
    assert ack["code"] == "replica_restart_required"
    assert ack["appliedThrough"] == {"streamId": "S2", "sequence": 0}


def test_ER_036_stream_switch_reuses_attempt_id() -> None:
    d = ready()
    d.one(begin("A1", stream="S1"))
    assert d.one(begin("A1", stream="S2"))["ok"]
    assert d.one(begin("A1", stream="S2"))["code"] == "reconciliation_attempt_retired"
    assert d.one(page([state("A")], stream="S2"))["ok"]
    assert d.one(commit(stream="S2"))["ok"]


def test_ER_037_page_mismatch_cases() -> None:
    d = ready()
    d.one(begin())
    assert d.one(page([], stream="S9"))["code"] == "reconciliation_attempt_mismatch"
    assert d.one(page([], attempt="A9"))["code"] == "reconciliation_attempt_mismatch"
    d.one(page([state("A")]))
    d.one(commit())
    assert d.one(page([state("A")]))["code"] == "reconciliation_attempt_mismatch"


def test_ER_038_reader_changed_before_receipt_replay() -> None:
    d = ready()
    d.one(begin())
    d.one(page([state("A")]))
    d.activate(reader=FakeReader("r2"))
    assert d.one(page([state("A")]))["code"] == "reader_changed"


def test_ER_039_project_not_in_attempt() -> None:
    d = ready()
    d.one(begin())
    assert d.one(page([], project="p9"))["code"] == "project_not_in_attempt"


def test_ER_040_page_replay_returns_recorded_ack() -> None:
    d = ready()
    d.one(begin("A1", ("p1", "p2")))
    first = d.one(page([state("A")], complete=False))
    d.one(page([state("B")], after="A", complete=True))
    d.one(page([state("C")], project="p2"))
    d.one(apply(state("C", gen=2, ref=staged_ref(2)), 1, project="p2", attempt="A1"))
    calls = len(d.readers[TASK].calls)
    again = d.one(page([state("A")], complete=False))
    assert again == first
    assert again["appliedThrough"]["sequence"] == 0
    assert len(d.readers[TASK].calls) == calls


def test_ER_041_same_after_other_fingerprint_conflicts() -> None:
    d = ready()
    d.one(begin())
    d.one(page([state("A")], complete=False))
    assert d.one(page([state("B")], complete=False))["code"] == "snapshot_page_conflict"


def test_ER_042_page_ordering() -> None:
    d = ready()
    d.one(begin())
    assert d.one(page([state("B")], after="A"))["code"] == "snapshot_page_mismatch"
    d.one(page([state("A")], complete=False))
    assert d.one(page([state("C")], after="B"))["code"] == "snapshot_page_mismatch"
    d.one(page([state("B")], after="A"))
    assert d.one(page([state("C")], after="B"))["code"] == "snapshot_page_mismatch"


def test_ER_043_empty_incomplete_page_strands_project() -> None:
    d = ready()
    d.one(begin())
    assert d.one(page([], complete=False))["ok"]
    assert d.one(page([state("B")], after="A"))["code"] == "snapshot_page_mismatch"
    assert d.one(page([state("A")]))["code"] == "snapshot_page_conflict"
    assert d.one(commit())["code"] == "record_version_changed"


def test_ER_044_version_fixed_within_attempt() -> None:
    d = ready()
    d.one(begin())
    d.one(page([state("A")], complete=False, version=3))
    assert d.one(page([state("B")], after="A", version=4))["code"] == "snapshot_version_conflict"


def test_ER_045_stale_first_page_version() -> None:
    d = ready()
    d.ready_snapshot(version=5)
    d.one(begin("A2"))
    assert d.one(page([state("A")], version=4, attempt="A2"))["code"] == "record_version_stale"


def test_ER_046_same_version_must_equal_live() -> None:
    d = ready()
    d.ready_snapshot([state("A"), state("B")], version=5)
    d.one(begin("A2"))
    assert d.one(page([state("A", lg=1)], version=5, attempt="A2", complete=False))["code"] == (
        "snapshot_version_conflict"
    )
    assert d.one(page([state("A")], version=5, attempt="A2"))["code"] == "snapshot_version_conflict"
    assert d.one(page([state("A"), state("B")], version=5, attempt="A2"))["ok"]
    d.one(begin("A3"))
    assert d.one(page([state("A", lg=1)], version=6, attempt="A3"))["ok"]


def test_ER_047_page_rule_order() -> None:
    d = ready()
    d.one(begin())
    d.one(page([state("A")], complete=False))
    d.activate(reader=FakeReader("r2"))
    # mismatch beats reader_changed; reader_changed beats project_not_in_attempt
    assert d.one(page([], attempt="A9"))["code"] == "reconciliation_attempt_mismatch"
    assert d.one(page([], project="p9"))["code"] == "reader_changed"


def test_ER_048_records_read_one_at_a_time_in_order() -> None:
    d = ready()
    d.one(begin())
    cmds = d.raw(page([state("A"), state("B"), state("C", tomb=True, gen=0)]))
    (r1,) = reads(cmds)
    assert r1.key == "A"
    assert acks(cmds) == []
    cmds = d.send(r1.reader.answer(r1))
    (r2,) = reads(cmds)
    assert r2.key == "B"
    assert r2.reader is r1.reader
    (ack,) = acks(d.send(r2.reader.answer(r2)))
    assert [x["state"]["key"] for x in ack["results"]] == ["A", "B", "C"]
    assert [x["materialization"]["kind"] for x in ack["results"]] == [
        "installed",
        "installed",
        "withheld",
    ]


def test_ER_049_keep_installed_reuses_live_value() -> None:
    d = ready()
    d.ready_snapshot([state("A")])
    calls = len(d.readers[TASK].calls)
    d.one(begin("A2"))
    d.one(page([state("A")], version=2, attempt="A2"))
    assert len(d.readers[TASK].calls) == calls
    d.one(commit([("p1", 2)], attempt="A2"))
    assert d.value("A") == "CANARY-p1-A-00000001-0000-4000-8000-000000000000"


def test_ER_050_reread_on_new_generation_unavailable_or_changed() -> None:
    d = ready()
    d.ready_snapshot([state("A"), state("B"), state("C")])
    r2 = FakeReader("r2")
    d.activate(reader=r2)
    d.one(begin("A2"))
    d.one(page([state("A"), state("B"), state("C")], version=2, attempt="A2"))
    assert [c[2] for c in r2.calls] == ["A", "B", "C"]  # the new grant reads all
    d2 = ready()
    d2.readers[TASK].values[("staged", "p1", "B", staged_ref(1)["stagingId"])] = None
    d2.ready_snapshot([state("A"), state("B"), state("C")])
    before = len(d2.readers[TASK].calls)
    d2.one(begin("A2"))
    d2.one(page([state("A"), state("B"), state("C", lg=1)], version=2, attempt="A2"))
    assert [c[2] for c in d2.readers[TASK].calls[before:]] == ["B", "C"]


def test_ER_051_ack_page_too_large_scrubs_and_retries() -> None:
    d = ready()
    d.one(begin())
    big = [
        state(f"K{i:04d}", binding={"kind": "withhold", "reason": "r" * 128}) for i in range(1000)
    ]
    recs = [state(f"A{i:04d}") for i in range(2)] + big
    ack = d.one(page(recs))
    assert ack["code"] == "ack_page_too_large"
    assert not any("CANARY" in v for v in reachable_values(d.m))
    n = len(d.readers[TASK].calls)
    assert d.one(page(recs))["code"] == "ack_page_too_large"
    assert len(d.readers[TASK].calls) == n + 2
    assert MAX_PROJECT_ENV_ACK_PAGE_BYTES == 262_144


def test_ER_052_accepted_page_stages_without_ledger_or_notify() -> None:
    d = ready()
    d.one(begin())
    cmds = d.raw(page([state("A", tomb=True, gen=0)], complete=False, version=3))
    assert not [c for c in cmds if isinstance(c, NotifyChange)]
    assert d.m.task_ledger(TASK) == (0, 0)
    assert d.one(page([state("B", tomb=True, gen=0)], after="A", version=3))["ok"]
    assert d.one(commit([("p1", 3)]))["ok"]


def test_ER_053_acks_never_hold_values() -> None:
    d = ready()
    d.ready_snapshot()
    d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    for c in d.log:
        assert "CANARY" not in repr(c)
    for a in acks(d.log):
        assert "CANARY" not in str(a)
    d.one(begin("A2"))
    d.one(page([state("A", ref=staged_ref(9))], version=3, attempt="A2"))
    assert d.m.read_view(TASK, 1, ["p1"]) is None
    assert "CANARY" not in repr(d.m.read_status(TASK))


def test_ER_053_deepcopy_of_acks_is_independent() -> None:
    d = ready()
    d.one(begin())
    a1 = d.one(page([state("A")]))
    mutated = copy.deepcopy(a1)
    a1["results"].clear()
    assert d.one(page([state("A")])) == mutated
