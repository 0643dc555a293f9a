"""ER-054–ER-094: apply, the advance rules, commit."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from replica_kit import (
    TASK,
    Driver,
    FakeReader,
    acks,
    apply,
    begin,
    commit,
    legacy_ref,
    page,
    reachable_values,
    reads,
    staged_ref,
    state,
)

from leasegate.core._model import decode
from leasegate.core.replica import (
    NotifyChange,
    ReplicaLimits,
    is_reachable_record_advance,
    state_order,
)
from leasegate.core.wire.env import BindingState


def live(d: Driver | None = None, recs: list[dict[str, Any]] | None = None) -> Driver:
    d = d or Driver()
    d.activate()
    d.ready_snapshot(recs)
    return d


def bs(**kw: Any) -> BindingState:
    got = decode(BindingState, state("K", **kw))
    assert isinstance(got, BindingState)
    return got


A2 = state("A", gen=2, ref=staged_ref(2))


def test_ER_054_stream_mismatch_first() -> None:
    d = Driver()
    d.activate()
    assert d.one(apply(A2, 1))["code"] == "stream_mismatch"
    d.ready_snapshot()
    assert d.one(apply(A2, 1, stream="S9"))["code"] == "stream_mismatch"


def test_ER_055_replay_returns_recorded_outcome_with_current_cursor() -> None:
    d = live()
    first = d.one(apply(A2, 1))
    d.one(apply(state("B", gen=2, ref=staged_ref(2)), 2, version=3))
    d.activate(reader=FakeReader("r2"))  # reader change does not stop replays
    again = d.one(apply(A2, 1))
    assert again["result"] == first["result"]
    assert again["recordVersion"] == 2
    assert again["appliedThrough"]["sequence"] == 2


def test_ER_056_different_fingerprint_conflicts() -> None:
    d = live()
    d.one(apply(A2, 1))
    assert d.one(apply(A2, 1, op="x", version=3))["code"] == "delivery_conflict"


def test_ER_057_receipt_missing_after_stream_switch_cannot_happen_sequence_validated() -> None:
    # delivery.sequence >= 1 is enforced by the codec; a consumed sequence
    # without a receipt arises after a stream switch keeps no receipts but
    # resets the cursor, so it is unreachable: the rule is still checked.
    d = live()
    d.one(apply(A2, 1))
    r = d.m._replicas[TASK]
    r.apply_receipts.clear()
    assert d.one(apply(A2, 1))["code"] == "receipt_missing"


def test_ER_058_target_depends_on_gate() -> None:
    d = live()
    assert d.one(apply(A2, 1, attempt="A1"))["code"] == "reconciliation_attempt_mismatch"
    d.one(begin("A2"))
    assert d.one(apply(A2, 1))["code"] == "reconciliation_attempt_mismatch"
    assert d.one(apply(A2, 1, attempt="A1"))["code"] == "reconciliation_attempt_mismatch"


def test_ER_059_gap_not_consumed() -> None:
    d = live()
    assert d.one(apply(A2, 2))["code"] == "delivery_gap"
    assert d.m.read_status(TASK).applied_through.sequence == 0  # type: ignore[union-attr]


def test_ER_060_reader_changed_for_live_and_staged() -> None:
    d = live()
    d.activate(reader=FakeReader("r2"))
    assert d.one(apply(A2, 1))["code"] == "reader_changed"
    d.one(begin("A2"))
    d.activate(reader=FakeReader("r3"))
    assert d.one(apply(A2, 1, attempt="A2"))["code"] == "reader_changed"


def test_ER_061_project_not_in_replica_consumed() -> None:
    d = live()
    ack = d.one(apply(A2, 1, project="p9"))
    assert ack["code"] == "project_not_in_replica"
    assert ack["appliedThrough"]["sequence"] == 1
    assert d.one(apply(A2, 1, project="p9")) == ack


def test_ER_062_staged_apply_needs_complete_project() -> None:
    d = Driver()
    d.activate()
    d.one(begin())
    assert d.one(apply(A2, 1, attempt="A1"))["code"] == "snapshot_incomplete"
    d.one(page([state("A")], complete=False))
    assert d.one(apply(A2, 1, attempt="A1"))["code"] == "snapshot_incomplete"


def test_ER_063_record_version_gap_not_consumed() -> None:
    d = live()
    assert d.one(apply(A2, 1, version=3))["code"] == "record_version_gap"
    assert d.one(apply(A2, 1, version=2))["ok"]


def test_ER_064_advance_needs_next_version_and_reachable() -> None:
    d = live()
    ack = d.one(apply(state("A", rev=2, gen=1), 1, version=2))  # reachable, Δr=1
    assert ack["recordVersion"] == 2
    assert ack["result"]["state"]["head"]["revision"] == 2
    ack = d.one(apply(state("A", rev=4, gen=1), 2, version=3))  # Δr=2: absorbed
    assert ack["recordVersion"] == 2
    assert ack["result"]["state"]["head"]["revision"] == 2


def test_ER_065_advance_reads_afresh_and_scrubs_old() -> None:
    d = live()
    cmds = d.raw(apply(A2, 1))
    (rd,) = reads(cmds)
    assert rd.staging_id == staged_ref(2)["stagingId"]
    d.send(rd.reader.answer(rd))
    vals = reachable_values(d.m)
    assert not any("A-00000001" in v for v in vals)
    assert any("A-00000002" in v for v in vals)
    assert d.m.read_view(TASK, 1, ["p1"]).projects[0].record_version == 2  # type: ignore[union-attr]


def test_ER_066_new_key_not_initial_conflicts_consumed() -> None:
    d = live()
    ack = d.one(apply(state("Z", rev=2, gen=2), 1))
    assert ack["code"] == "record_version_conflict"
    assert ack["appliedThrough"]["sequence"] == 1
    assert d.one(apply(state("Z", rev=1, gen=1), 2, version=2))["ok"]


def test_ER_067_absorbed_apply_keeps_state_and_version() -> None:
    d = live()
    ack = d.one(apply(state("A", rev=1, gen=1, lg=0), 1, version=1))
    assert ack["ok"]
    assert ack["recordVersion"] == 1
    assert ack["result"]["state"] == state("A")
    assert d.m.read_status(TASK).applied_through.sequence == 1  # type: ignore[union-attr]
    ack = d.one(apply(state("A", rev=9, gen=9), 2, version=2))  # v+1 not reachable
    assert ack["ok"]
    assert ack["recordVersion"] == 1
    assert d.one(apply(A2, 3, version=3))["code"] == "record_version_gap"


def test_ER_068_absorb_rereads_unavailable_only() -> None:
    d = Driver()
    d.activate()
    d.readers[TASK].values[("staged", "p1", "B", staged_ref(1)["stagingId"])] = None
    d.ready_snapshot()
    n = len(d.readers[TASK].calls)
    d.one(apply(state("A"), 1, version=1))  # installed: no read
    assert len(d.readers[TASK].calls) == n
    del d.readers[TASK].values[("staged", "p1", "B", staged_ref(1)["stagingId"])]
    ack = d.one(apply(state("B"), 2, version=1))
    assert ack["result"]["materialization"] == {"kind": "installed"}
    assert len(d.readers[TASK].calls) == n + 1


def test_ER_069_live_apply_notifies_staged_does_not() -> None:
    d = live()
    cmds = d.raw(apply(A2, 1))
    cmds += d.send(reads(cmds)[0].reader.answer(reads(cmds)[0]))
    assert NotifyChange(task_id=TASK) in cmds
    assert d.m.read_view(TASK, 1, ["p1"]).applied_through.sequence == 1  # type: ignore[union-attr]
    d.one(begin("A2"))
    d.one(page([state("A", gen=2, ref=staged_ref(2))], version=3, attempt="A2"))
    d.log.clear()
    d.feed(apply(state("A", gen=3, ref=staged_ref(3)), 2, version=4, attempt="A2"))
    assert not [c for c in d.log if isinstance(c, NotifyChange)]
    assert d.one(commit([("p1", 3)], attempt="A2", seq=2))["code"] == "record_version_changed"
    assert d.one(commit([("p1", 4)], attempt="A2", seq=2))["ok"]


def test_ER_070_unconsumed_leaves_no_receipt() -> None:
    d = live()
    d.one(apply(A2, 2))  # gap
    d.one(apply(A2, 1, version=5))  # version gap
    assert d.one(apply(A2, 1))["ok"]  # same sequence processed from scratch


def test_ER_071_apply_rule_order() -> None:
    d = live()
    d.one(apply(A2, 1))
    # replay check precedes gate/attempt checks
    assert d.one(apply(A2, 1, attempt="A1"))["code"] == "delivery_conflict"
    # attempt mismatch precedes gap
    assert d.one(apply(A2, 5, attempt="A1"))["code"] == "reconciliation_attempt_mismatch"
    d.activate(reader=FakeReader("r2"))
    # gap precedes reader_changed, reader_changed precedes project checks
    assert d.one(apply(A2, 5))["code"] == "delivery_gap"
    assert d.one(apply(A2, 2, project="p9"))["code"] == "reader_changed"


def test_ER_072_receipt_not_storable_scrubs_and_exhausts() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=2))
    d.activate()
    d.ready_snapshot()
    ack = d.one(apply(A2, 1))
    assert ack["code"] == "replica_restart_required"
    assert reachable_values(d.m) == []
    st = d.m.read_status(TASK)
    assert st.applied_through.sequence == 0
    assert st.restart_required


# --- stateOrder / isReachableRecordAdvance truth table -------------------


def _expected_reach(i: BindingState, c: BindingState | None) -> bool:
    """The catalog's table (section 8), independently written."""
    if c is None:
        h = i.head
        return h.revision == 1 and (h.generation, h.tombstone) in ((1, False), (0, True))
    if i.listing_generation < c.listing_generation:
        return False
    dr = i.head.revision - c.head.revision
    dg = i.head.generation - c.head.generation
    same_bp = i.binding == c.binding and i.policy_epoch == c.policy_epoch
    table = {
        (0, 0): i.head == c.head and same_bp and i.listing_generation > c.listing_generation,
        (0, 1): not c.head.tombstone and not i.head.tombstone and same_bp,
        (1, 0): not c.head.tombstone
        and not i.head.tombstone
        and i.head.value_ref == c.head.value_ref,
        (1, 1): (c.head.tombstone and not i.head.tombstone)
        if c.head.generation == 0
        else (c.head.tombstone != i.head.tombstone and same_bp),
    }
    return table.get((dr, dg), False)


_VARIANTS = [
    bs(**kw)
    for kw in (
        dict(zip(("rev", "gen", "tomb", "ref", "binding", "epoch", "lg"), combo, strict=True))
        for combo in itertools.product(
            (1, 2, 3),
            (0, 1, 2),
            (False, True),
            (None, staged_ref(1), legacy_ref(2)),
            (None, {"kind": "omit"}),
            (1, None),
            (0, 1),
        )
    )
]


@pytest.mark.parametrize("seed", range(4))
def test_ER_073_to_ER_079_reachability_truth_table(seed: int) -> None:
    sub = _VARIANTS[seed::4]
    for i in sub:
        assert is_reachable_record_advance(i, None) == _expected_reach(i, None)
        for c in _VARIANTS[::7]:
            assert is_reachable_record_advance(i, c) == _expected_reach(i, c), (i, c)


def test_ER_073_initial_heads() -> None:
    assert is_reachable_record_advance(bs(rev=1, gen=1), None)
    assert is_reachable_record_advance(bs(rev=1, gen=0, tomb=True), None)
    assert is_reachable_record_advance(bs(rev=1, gen=1, ref=None), None)
    assert not is_reachable_record_advance(bs(rev=1, gen=0), None)
    assert not is_reachable_record_advance(bs(rev=2, gen=1), None)


def test_ER_074_lower_listing_generation_never_reachable() -> None:
    assert not is_reachable_record_advance(bs(rev=2, lg=0), bs(rev=1, lg=1))


def test_ER_075_listing_only_advance() -> None:
    assert is_reachable_record_advance(bs(lg=2), bs(lg=1))
    assert not is_reachable_record_advance(bs(lg=1), bs(lg=1))
    assert not is_reachable_record_advance(bs(lg=2, epoch=None), bs(lg=1))


def test_ER_076_value_advance_keeps_binding() -> None:
    assert is_reachable_record_advance(bs(gen=2, ref=staged_ref(2)), bs(gen=1))
    assert not is_reachable_record_advance(bs(gen=2, binding={"kind": "omit"}), bs(gen=1))


def test_ER_077_metadata_advance_keeps_value_ref() -> None:
    assert is_reachable_record_advance(bs(rev=2, binding={"kind": "omit"}), bs(rev=1))
    assert not is_reachable_record_advance(bs(rev=2, ref=staged_ref(3)), bs(rev=1))


def test_ER_078_delete_and_restore() -> None:
    assert is_reachable_record_advance(bs(rev=2, gen=1), bs(rev=1, gen=0, tomb=True))
    assert is_reachable_record_advance(bs(rev=2, gen=2, tomb=True), bs(rev=1, gen=1))
    assert not is_reachable_record_advance(bs(rev=2, gen=2), bs(rev=1, gen=1))


def test_ER_079_other_deltas_never() -> None:
    for r, g in ((2, 0), (0, 2), (2, 2), (-1, 0)):
        assert not is_reachable_record_advance(bs(rev=2 + r, gen=1 + g), bs(rev=2, gen=1))


def test_ER_080_older() -> None:
    assert state_order(bs(rev=1, gen=1), bs(rev=2, gen=1)) == "older"
    assert state_order(bs(rev=2, gen=0), bs(rev=2, gen=1)) == "older"


def test_ER_081_mixed_signs_conflict() -> None:
    assert state_order(bs(rev=1, gen=2), bs(rev=2, gen=1)) == "conflict"


def test_ER_082_equal_heads() -> None:
    assert state_order(bs(ref=staged_ref(2)), bs()) == "conflict"
    assert state_order(bs(epoch=None), bs()) == "conflict"
    assert state_order(bs(lg=0), bs(lg=1)) == "older"
    assert state_order(bs(), bs()) == "same"
    assert state_order(bs(lg=2), bs(lg=1)) == "newer"


def test_ER_083_forward_deltas() -> None:
    assert state_order(bs(rev=2, lg=0), bs(rev=1, lg=1)) == "conflict"
    assert state_order(bs(gen=2, binding={"kind": "omit"}), bs()) == "conflict"
    assert state_order(bs(rev=2, ref=staged_ref(3)), bs()) == "conflict"
    assert state_order(bs(rev=5, gen=7), bs()) == "newer"


def test_ER_084_key_order_irrelevant_absent_binding_normalized() -> None:
    a = state("K")
    b = dict(reversed(list(a.items())))
    b["head"] = dict(reversed(list(a["head"].items())))
    x, y = decode(BindingState, a), decode(BindingState, b)
    assert isinstance(x, BindingState)
    assert isinstance(y, BindingState)
    assert state_order(x, y) == "same"
    no_binding = {k: v for k, v in a.items() if k != "binding"}
    assert not isinstance(decode(BindingState, no_binding), BindingState)


def test_ER_085_reachable_implies_newer() -> None:
    for i in _VARIANTS[::3]:
        for c in _VARIANTS[::5]:
            if is_reachable_record_advance(i, c):
                assert state_order(i, c) == "newer"


# --- commit ---------------------------------------------------------------


def test_ER_086_commit_replay_uses_recorded_high_water() -> None:
    d = live()
    d.one(apply(A2, 1))
    d.one(begin("A2", stream="S2"))
    d.activate(reader=FakeReader("r2"))
    ack = d.one(commit())
    assert ack["ok"]
    assert ack["highWater"] == {"streamId": "S1", "sequence": 0}
    assert ack["appliedThrough"] == ack["highWater"]


def test_ER_087_commit_replay_conflict() -> None:
    d = live()
    assert d.one(commit([("p1", 9)]))["code"] == "reconciliation_attempt_conflict"


def test_ER_088_commit_mismatch() -> None:
    d = Driver()
    d.activate()
    assert d.one(commit())["code"] == "reconciliation_attempt_mismatch"
    d.one(begin())
    assert d.one(commit(stream="S2"))["code"] == "reconciliation_attempt_mismatch"
    assert d.one(commit(attempt="A9"))["code"] == "reconciliation_attempt_mismatch"


def test_ER_089_commit_reader_changed() -> None:
    d = Driver()
    d.activate()
    d.one(begin())
    d.one(page([state("A")]))
    d.activate(reader=FakeReader("r2"))
    assert d.one(commit())["code"] == "reader_changed"
    assert not d.m.is_ready(TASK, 1)


def test_ER_090_high_water_must_equal_cursor() -> None:
    d = live()
    d.one(apply(A2, 1))
    d.one(begin("A2"))
    d.one(page([state("A", gen=2, ref=staged_ref(2))], version=3, attempt="A2"))
    assert d.one(commit([("p1", 3)], attempt="A2", seq=0))["code"] == "delivery_incomplete"
    assert d.one(commit([("p1", 3)], attempt="A2", seq=2))["code"] == "delivery_incomplete"
    assert d.one(commit([("p1", 3)], attempt="A2", seq=1))["ok"]


def test_ER_091_versions_must_match_attempt() -> None:
    d = Driver()
    d.activate()
    d.one(begin("A1", ("p1", "p2")))
    d.one(page([state("A")], project="p1", version=3))
    d.one(page([state("A")], project="p2", version=4))
    for vs in ([("p1", 3)], [("p2", 4), ("p1", 3)], [("p1", 3), ("p2", 5)]):
        assert d.one(commit(vs))["code"] == "record_version_changed"
    assert d.one(commit([("p1", 3), ("p2", 4)]))["ok"]


def test_ER_092_commit_installs_exactly_the_attempt() -> None:
    d = live(recs=[state("A"), state("B")])
    d.await_ready(1)
    d.one(begin("A2", ("p1", "p2")))
    d.await_ready(2)
    d.one(page([state("A")], version=2, attempt="A2"))
    d.one(page([state("C")], project="p2", attempt="A2"))
    cmds = d.raw(commit([("p1", 2), ("p2", 1)], attempt="A2"))
    kinds = [type(c).__name__ for c in cmds]
    assert kinds == ["CancelTimer", "ResolveWaiter", "NotifyChange", "SendAck"]
    vals = reachable_values(d.m)
    assert not any("-B-" in v for v in vals)
    view = d.m.read_view(TASK, 1, ["p2", "p1"])
    assert view is not None
    assert [p.project_id for p in view.projects] == ["p2", "p1"]
    assert d.m.read_view_at(TASK, 1, ["p1", "p2"], 1) is not None
    assert d.m.task_ledger(TASK)[0] == 4  # type: ignore[index]


def test_ER_093_commit_records_not_storable_exhausts() -> None:
    d = Driver(limits=ReplicaLimits(max_task_entries=1))
    d.activate()
    d.one(begin())
    d.one(page([state("A")]))
    assert d.one(commit())["code"] == "replica_restart_required"
    assert not d.m.is_ready(TASK, 1)
    assert reachable_values(d.m) == []


def test_ER_094_empty_begin_commits() -> None:
    d = Driver()
    d.activate()
    d.one(begin("A1", ()))
    assert d.one(commit([]))["ok"]
    view = d.m.read_view(TASK, 1, [])
    assert view is not None
    assert view.projects == ()


def test_apply_absorb_or_advance_never_leaks_to_acks() -> None:
    d = live()
    d.feed(apply(A2, 1))
    assert all("CANARY" not in str(a) for a in acks(d.log))
