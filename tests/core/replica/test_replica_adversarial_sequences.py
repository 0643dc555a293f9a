"""Breaker review of the env replica core (issue #4): mutant-killing and adversarial tests.

Each test is named after the catalog entry it pins, with ``_breaker_``. They
were written against mutants that survived the owner's suite. Driven by
events only: no clock, no sleeps, no AWS.

Mutation table (single mutants of ``replica/_state.py``, ``replica/_order.py``
and ``wire/env.py``'s envelope parsers, each run alone against
``tests/core/replica`` and ``tests/core/wire/test_env_*.py`` in a scratch copy;
83 valid mutants, one more (M45) was a broken edit and is not counted):

* 64 caught by the owner's tests, among them: whole post-read fence off
  (ER-103), fenced page keeps earlier values, exhaustion / destroy / dropAll /
  in-flight scrubs (ER-105, ER-119), every stateOrder / reachability flip
  tried except one, delivery gap and delivery_conflict (ER-056, ER-059), the
  four default limits (ER-001), lane serialization (ER-026), org change
  (ER-011), restart-required frames and re-activation (ER-007, ER-027), the
  retired-stream / retired-attempt / apply-receipt / completed-attempt
  reservations (ER-072, ER-034), per-task entry and byte limits, the
  process entry limit (ER-118), page / apply / commit reader-generation
  checks, staged v2 envelope field checks (ER-098), legacy extra keys / v /
  updatedAt (ER-100), ack page size boundary (ER-113).
* 9 survived and are now killed here: post-read fence-generation check
  removed (M02) and reader change without a fence bump (M43) ->
  ``test_ER_103_reader_swapped_back_still_fences``; stateOrder
  Δg = 0 tomb flip (M14) -> ``test_ER_083_...``; ``maxTotalBytes``
  ignored (M30) -> ``test_ER_118_...``; completion looked up but
  not consumed (M51, then a duplicate raises) -> ``test_ER_106_...``;
  boolean ``v`` accepted (E09) -> ``test_ER_098_...``; legacy
  ``projectId`` unchecked (E12) -> ``test_ER_100_...``; non-Secret
  ``raw`` accepted (S61, raises) -> ``test_ER_101_...``; live
  projects kept on exhaustion (S65) -> ``test_ER_119_...``.
* 10 judged equivalent: scrubbing an entry object that nothing references
  afterwards (M04 fenced read's own entry, M08 replaced apply entry, M09 old
  live snapshot at commit, M11 superseded attempt, M46 too-large page,
  M47 unstorable apply receipt): the Secret objects stay shared with no
  reachable holder, ``reachable_values`` finds nothing either way; the
  post-read reader-identity check alone (M01: every reader change also
  bumps the fence) and run/boot checks (M50: ``cur is r`` implies the run,
  the boot is constant); deadline for a cancelled timer (M52: timers and
  waiters are kept in sync); read command built with the current instead of
  the captured reader (S64: they are equal whenever a read is issued).

Real defects found are strict xfails at the end of this module.
"""

from __future__ import annotations

import copy
import itertools
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
    page,
    reachable_values,
    reads,
    staged_ref,
    state,
)

from leasegate.core import Secret
from leasegate.core._model import decode
from leasegate.core.replica import (
    AwaitReady,
    DropAll,
    DropAssignment,
    ExpectActivation,
    FrameRejected,
    ReadinessDeadline,
    ReplicaLimits,
    SendAck,
    SettleActivation,
    StartTimer,
    ValueReadCompleted,
    ValueReadFailed,
    state_order,
)
from leasegate.core.wire.env import BindingState

_HUGE = 10**30


def _bs(**kw: Any) -> BindingState:
    got = decode(BindingState, state("K", **kw))
    assert isinstance(got, BindingState)
    return got


def _ready(d: Driver, task: str = TASK) -> None:
    d.activate(task)
    d.ready_snapshot(task=task)


# ---------------------------------------------------------------------------
# Mutant killers


def test_ER_083_same_generation_tomb_flip_conflicts() -> None:
    """ER-083 step 3: Δg = 0 and the tomb flag differs is ``conflict`` even
    with equal valueRefs (mutant: only the valueRef was compared)."""
    cur = _bs(rev=1, gen=1, tomb=True, ref=staged_ref(1))
    inc = _bs(rev=2, gen=1, tomb=False, ref=staged_ref(1))
    assert state_order(inc, cur) == "conflict"
    assert state_order(_bs(rev=2, gen=1, ref=staged_ref(1)), _bs(rev=1, gen=1)) == "newer"


def test_ER_118_process_bytes_shared_by_tasks() -> None:
    """ER-115/ER-118: the process *byte* total is shared; a task under its own
    byte limit is exhausted when another task's evidence fills the total.
    (Mutant: the ``maxTotalBytes`` condition was ignored.)"""
    probe = Driver()
    _ready(probe, "t1")
    _ready(probe, "t2")
    t1 = probe.m.task_ledger("t1")
    t2 = probe.m.task_ledger("t2")
    assert t1 is not None
    assert t2 is not None
    assert t1[1] > 0
    big = 10**6
    lim = ReplicaLimits(
        max_task_entries=big,
        max_task_bytes=max(t1[1], t2[1]),
        max_total_entries=big,
        max_total_bytes=t1[1] + t2[1] - 1,
    )
    d = Driver(limits=lim)
    _ready(d, "t1")
    d.activate("t2")
    assert d.one(begin(task="t2"))["ok"]
    assert d.one(page([state("A"), state("B")], task="t2"))["ok"]
    ack = d.one(commit(task="t2"))
    assert ack["ok"] is False
    assert ack["code"] == "replica_restart_required"
    status = d.m.read_status("t2")
    assert status is not None
    assert status.restart_required
    assert d.m.task_ledger("t2") == (0, 0)
    assert d.m.ledger_totals == t1
    # t1 is untouched.
    assert d.m.is_ready("t1", 1)
    # Reaching the total exactly is allowed (ER-115).
    lim2 = ReplicaLimits(
        max_task_entries=big,
        max_task_bytes=max(t1[1], t2[1]),
        max_total_entries=big,
        max_total_bytes=t1[1] + t2[1],
    )
    d2 = Driver(limits=lim2)
    _ready(d2, "t1")
    _ready(d2, "t2")
    assert d2.m.ledger_totals == (t1[0] + t2[0], t1[1] + t2[1])


def test_ER_106_second_completion_and_unknown_ids_ignored() -> None:
    """A completion is consumed once: a duplicate, an unknown or ill-typed
    cmd id does nothing and never raises (mutant: the op was looked up
    without being removed, so a duplicate re-ran the frame and raised)."""
    d = Driver()
    _ready(d)
    cmds = d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    (rd,) = reads(cmds)
    ev = rd.reader.answer(rd)
    first = acks(d.send(ev))
    assert len(first) == 1
    assert first[0]["ok"] is True
    before = d.m.read_status(TASK)
    for dup in (
        ev,
        ValueReadFailed(now_ms=0, cmd_id=rd.cmd_id),
        ValueReadCompleted(now_ms=0, cmd_id=999_999, raw=Secret("CANARY-x")),
        ValueReadCompleted(now_ms=0, cmd_id="1", raw=Secret("CANARY-x")),  # type: ignore[arg-type]
        ValueReadFailed(now_ms=0, cmd_id=-1),
        ValueReadFailed(now_ms=0, cmd_id=_HUGE),
    ):
        assert d.send(dup) == []
    assert d.m.read_status(TASK) == before
    assert d.value("A") == f"CANARY-p1-A-{staged_ref(2)['stagingId']}"


def test_ER_103_reader_swapped_back_still_fences() -> None:
    """ER-103: a reader replaced and then restored to the original object
    while a read is in flight still fences the frame (the reader generation
    moved twice): nothing is installed and the ack is ``reader_changed``."""
    d = Driver()
    r1 = FakeReader("r1")
    d.activate(reader=r1)
    d.ready_snapshot()
    cmds = d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    (rd,) = reads(cmds)
    assert rd.reader is r1
    d.activate(reader=FakeReader("r2"))
    d.activate(reader=r1)
    got = acks(d.send(rd.reader.answer(rd)))
    assert len(got) == 1
    assert got[0]["code"] == "reader_changed"
    st = d.m.read_status(TASK)
    assert st is not None
    assert st.applied_through is not None
    assert st.applied_through.sequence == 0
    assert all(staged_ref(2)["stagingId"] not in v for v in reachable_values(d.m))


# ---------------------------------------------------------------------------
# Adversarial input


def _frames() -> list[dict[str, Any]]:
    return [
        begin(),
        page([state("A"), state("B", ref={"kind": "legacy", "ssmVersion": 3})]),
        apply(state("A", gen=2, ref=staged_ref(2)), 1),
        commit(),
    ]


_BAD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    _HUGE,
    -_HUGE,
    2**53,
    1.5,
    float("nan"),
    "",
    "x" * 5000,
    "CANARY\x00",
    [],
    {},
    ["CANARY"],
    {"k": "CANARY"},
]


def _mutations(frame: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for k in list(frame):
        for bad in _BAD_VALUES:
            f = copy.deepcopy(frame)
            f[k] = bad
            out.append(f)
        f = copy.deepcopy(frame)
        del f[k]
        out.append(f)
    f = copy.deepcopy(frame)
    f["extra"] = "CANARY"
    out.append(f)
    for path in (
        ("state", "head", "revision"),
        ("delivery", "sequence"),
        ("highWater", "sequence"),
    ):
        if path[0] in frame:
            for bad in (_HUGE, -1, "1", None, 2**53):
                f = copy.deepcopy(frame)
                f[path[0]][path[1]] = bad
                out.append(f)
    return out


def _drain(d: Driver, cmds: list[Any], sink: list[Any]) -> None:
    sink.extend(cmds)
    pending = reads(cmds)
    while pending:
        cmd = pending.pop(0)
        more = d.send(cmd.reader.answer(cmd))
        sink.extend(more)
        pending.extend(reads(more))


def test_ER_024_malformed_frames_rejected_never_raise_no_canary() -> None:
    """ER-024 (SEC): every frame kind with type swaps, huge ints, garbage,
    missing and extra fields gets ``FrameRejected`` naming a field (or, when
    still well-formed, an ack); nothing raises and no CANARY string reaches
    an ack, error, status or repr."""
    d = Driver()
    _ready(d)
    out: list[Any] = []
    rejected = 0
    for base in _frames():
        for f in _mutations(base):
            cmds = d.raw(f)
            rejects = [c for c in cmds if isinstance(c, FrameRejected)]
            if rejects:
                rejected += 1
                assert len(cmds) == 1
                assert rejects[0].error == "invalid task project environment replica frame"
                assert isinstance(rejects[0].field, str)
            _drain(d, cmds, out)
    for garbage in (None, 1, "CANARY", [], [begin()], b"CANARY", {"kind": "env.replica.v1.ack"}):
        cmds = d.raw(garbage)
        assert len(cmds) == 1
        assert isinstance(cmds[0], FrameRejected)
        out.extend(cmds)
    assert rejected > 100
    for c in out:
        assert "CANARY" not in repr(c)
    assert "CANARY" not in repr(d.m.read_status(TASK))
    assert "CANARY" not in repr(d.m)


def test_ER_027_frames_for_other_tasks_runs_boots_never_raise() -> None:
    """ER-027: frames for another boot / run / unknown task, duplicates and
    completions twice are answered with codes (in the reference's order) and
    leave the live replica and its values intact."""
    d = Driver()
    _ready(d)
    before = d.value("A")
    cases = [
        (begin(boot="boot2"), "runner_boot_mismatch"),
        (page([state("A")], run=2), "task_assignment_mismatch"),
        (apply(state("A", gen=2), 1, task="t9"), "task_assignment_mismatch"),
        (commit(run=_HUGE // 10**15), "task_assignment_mismatch"),
    ]
    for f, code in cases:
        got = d.one(f)
        assert got["ok"] is False
        assert got["code"] == code
        assert got["appliedThrough"]["sequence"] == 0
    # A duplicate commit is a replay with the recorded high water.
    again = d.one(commit())
    assert again["ok"] is True
    assert again["highWater"] == {"streamId": "S1", "sequence": 0}
    assert d.value("A") == before
    assert d.m.is_ready(TASK, 1)


def test_ER_123_deadlines_for_cancelled_or_unknown_timers_ignored() -> None:
    """ER-122/ER-123: a readiness deadline for a timer already cancelled (the
    waiter was resolved, re-registered or rejected) or never issued does
    nothing; a live one rejects exactly its waiter."""
    d = Driver()
    d.activate()
    (t1,) = [c for c in d.await_ready(7) if isinstance(c, StartTimer)]
    (t2,) = [c for c in d.await_ready(7) if isinstance(c, StartTimer)]  # replaces t1
    (t3,) = [c for c in d.await_ready(8) if isinstance(c, StartTimer)]
    for tid in (t1.timer_id, 12345, -1, "x", None, _HUGE):
        assert d.send(ReadinessDeadline(now_ms=0, timer_id=tid)) == []  # type: ignore[arg-type]
    got = d.send(ReadinessDeadline(now_ms=0, timer_id=t2.timer_id))
    assert [type(c).__name__ for c in got] == ["RejectWaiter"]
    assert got[0].waiter_id == 7
    assert d.send(ReadinessDeadline(now_ms=0, timer_id=t2.timer_id)) == []
    d.ready_snapshot()
    assert d.send(ReadinessDeadline(now_ms=0, timer_id=t3.timer_id)) == []


def test_ER_105_lifecycle_garbage_never_raises() -> None:
    """Lifecycle events with ill-typed fields never raise and keep the values
    of an unrelated ready replica (ER-005, ER-122, ER-105)."""
    d = Driver()
    _ready(d)
    before = d.value("A")
    bad: list[Any] = [None, -1, _HUGE, "", "CANARY", [], {}, 1.5, True]
    for a, b in itertools.product(bad, repeat=2):
        d.send(ExpectActivation(now_ms=0, task_id=a, run_epoch=b))
        d.send(SettleActivation(now_ms=0, task_id=a, token=b))
        d.send(DropAssignment(now_ms=0, task_id=a, run_epoch=b))
        d.send(AwaitReady(now_ms=0, waiter_id=a, task_id=a, run_epoch=b, timeout_ms=b))
        d.activate(a, b, org=a if type(a) is str else ORG, reader=FakeReader("rx"))
    assert d.value("A") == before
    assert d.m.is_ready(TASK, 1)
    for c in d.log:
        if not isinstance(c, SendAck):
            continue
        assert "CANARY" not in repr(c)
    d.send(DropAll(now_ms=0))
    assert reachable_values(d.m) == []


def test_ER_026_other_task_completions_out_of_order() -> None:
    """ER-026: two tasks' frames whose reads complete in reverse order are
    acked per task in each task's own order, with the reference's results;
    a task's second frame waits for its first."""
    d = Driver()
    _ready(d, "t1")
    _ready(d, "t2")
    a1 = d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1, task="t1", op="x1"))
    a1b = d.raw(apply(state("B", gen=2, ref=staged_ref(3)), 2, task="t1", op="x2", version=3))
    a2 = d.raw(apply(state("A", gen=2, ref=staged_ref(4)), 1, task="t2", op="y1"))
    assert a1b == []  # queued behind x1
    (r1,) = reads(a1)
    (r2,) = reads(a2)
    got2 = acks(d.send(r2.reader.answer(r2)))
    assert [a["opId"] for a in got2] == ["y1"]
    cmds = d.send(r1.reader.answer(r1))
    got1 = acks(cmds)
    assert [a["opId"] for a in got1] == ["x1"]
    (r1b,) = reads(cmds)
    got1b = acks(d.send(r1b.reader.answer(r1b)))
    assert [a["opId"] for a in got1b] == ["x2"]
    assert got1b[0]["appliedThrough"]["sequence"] == 2
    assert got1b[0]["result"]["materialization"] == {"kind": "installed"}
    assert d.value("B", task="t1") == f"CANARY-p1-B-{staged_ref(3)['stagingId']}"
    assert d.value("A", task="t2") == f"CANARY-p1-A-{staged_ref(4)['stagingId']}"


def test_ER_128_events_carry_no_value_into_status_or_repr() -> None:
    """ER-128 (SEC): after a full cycle (page, apply, commit, reader change,
    drop) no CANARY value is in any emitted command, status or the manager's
    repr, and a drop leaves no reachable plaintext."""
    d = Driver()
    _ready(d)
    d.feed(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    d.activate(reader=FakeReader("r2"))
    for c in d.log:
        assert "CANARY" not in repr(c)
    assert "CANARY" not in repr(d.m.read_status(TASK))
    assert any("CANARY" in v for v in reachable_values(d.m))
    d.send(DropAssignment(now_ms=0, task_id=TASK, run_epoch=1))
    assert reachable_values(d.m) == []


# ---------------------------------------------------------------------------
# Envelope and exhaustion killers (second round)


def _page_mat(d: Driver, rec: dict[str, Any]) -> Any:
    d.activate()
    assert d.one(begin())["ok"]
    ack = d.one(page([rec]))
    assert ack["ok"] is True
    (res,) = ack["results"]
    return res["materialization"]


def test_ER_100_legacy_other_project_is_mismatch() -> None:
    """ER-100 (SEC): a legacy envelope for another project is not installed
    (mutant: ``projectId`` was not compared)."""
    from replica_kit import legacy_envelope, legacy_ref

    d = Driver()
    r = d.readers.setdefault(TASK, FakeReader("r"))
    r.values[("legacy", "p1", "B", 3)] = (legacy_envelope("p2", "B", "CANARY-other"), 3)
    mat = _page_mat(d, state("B", ref=legacy_ref(3)))
    assert mat == {"kind": "unavailable", "reason": "value_envelope_mismatch"}
    assert "CANARY-other" not in reachable_values(d.m)


def test_ER_098_boolean_v_is_mismatch() -> None:
    """ER-098/ER-100 (SEC): ``v: true`` is not the number 2 / 1 (JSON
    booleans are not numbers; mutant: ``True == 1`` was accepted)."""
    from replica_kit import legacy_envelope, legacy_ref, staged_envelope

    d = Driver()
    r = d.readers.setdefault(TASK, FakeReader("r"))
    r.values[("legacy", "p1", "B", 3)] = (legacy_envelope("p1", "B", "CANARY-b", v=True), 3)
    sid1 = staged_ref(1)["stagingId"]
    r.values[("staged", "p1", "A", sid1)] = staged_envelope("p1", "A", sid1, "CANARY-a", v=True)
    d.activate()
    assert d.one(begin())["ok"]
    ack = d.one(page([state("A"), state("B", ref=legacy_ref(3))]))
    mats = [x["materialization"] for x in ack["results"]]
    assert mats == [{"kind": "unavailable", "reason": "value_envelope_mismatch"}] * 2
    assert reachable_values(d.m) == []


def test_ER_101_non_secret_raw_never_raises() -> None:
    """ER-101/ER-102: a completion whose ``raw`` is not a :class:`Secret`
    (a shell bug: plain str, bytes) never makes the replica raise; the
    record is unavailable and the frame gets its normal ack."""
    for bad in ("CANARY-plain", b"CANARY-bytes", 12):
        d = Driver()
        d.activate()
        assert d.one(begin())["ok"]
        (rd,) = reads(d.raw(page([state("A")])))
        got = acks(d.send(ValueReadCompleted(now_ms=0, cmd_id=rd.cmd_id, raw=bad)))  # type: ignore[arg-type]
        assert len(got) == 1
        (res,) = got[0]["results"]
        assert res["materialization"] == {"kind": "unavailable", "reason": "value_unavailable"}
        assert "CANARY" not in repr(got)


def test_ER_119_exhaustion_empties_live_projects() -> None:
    """ER-119 (SEC): exhaustion empties the live projects (``readStatus``
    lists none) while the stream id and cursor are kept."""
    probe = Driver()
    _ready(probe)
    probe.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))
    used = probe.m.task_ledger(TASK)
    assert used is not None
    lim = ReplicaLimits(
        max_task_entries=used[0],
        max_task_bytes=10**6,
        max_total_entries=10**6,
        max_total_bytes=10**6,
    )
    d = Driver(limits=lim)
    _ready(d)
    assert d.one(apply(state("A", gen=2, ref=staged_ref(2)), 1))["ok"] is True
    before = d.m.read_status(TASK)
    assert before is not None
    assert before.project_ids == ("p1",)
    ack = d.one(apply(state("B", gen=2, ref=staged_ref(3)), 2, version=3))
    assert ack["code"] == "replica_restart_required"
    st = d.m.read_status(TASK)
    assert st is not None
    assert st.restart_required
    assert st.project_ids == ()
    assert st.stream_id == "S1"
    assert st.applied_through is not None
    assert st.applied_through.sequence == 1
    assert reachable_values(d.m) == []


def test_ER_103_fenced_completion_payload_discarded_unseen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ER-103/ER-104 (SEC): the payload of a completion that arrives for a
    fenced operation (reader replaced, replica dropped) is never revealed."""
    d = Driver()
    _ready(d)
    (rd,) = reads(d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1)))
    d.activate(reader=FakeReader("r2"))  # fences the in-flight apply
    ev = rd.reader.answer(rd)
    revealed: list[str] = []
    original = Secret.reveal

    def spy(self: Secret) -> str:
        value = original(self)
        revealed.append(value)
        return value

    monkeypatch.setattr(Secret, "reveal", spy)
    got = acks(d.send(ev))
    monkeypatch.undo()
    assert [a["code"] for a in got] == ["reader_changed"]
    assert revealed == []


def test_ER_024_invalid_prebuilt_model_frames_rejected() -> None:
    """ER-024: a frame handed in as an already built model that does not
    satisfy the frame validators is rejected like any invalid value and
    never makes ``handle`` raise."""
    import dataclasses

    from leasegate.core._model import decode as _decode
    from leasegate.core.wire.env import EnvApply, EnvBegin

    b = _decode(EnvBegin, begin("A9", stream="S9"))
    a = _decode(EnvApply, apply(state("A", gen=2, ref=staged_ref(2)), 1))
    assert isinstance(b, EnvBegin)
    assert isinstance(a, EnvApply)
    bad = [
        dataclasses.replace(b, attempt_id=None),  # type: ignore[arg-type]
        dataclasses.replace(b, task_id=["x"]),  # type: ignore[arg-type]
        dataclasses.replace(a, delivery=None),  # type: ignore[arg-type]
    ]
    outcomes: list[Any] = []
    for frame in bad:
        d = Driver()
        _ready(d)
        try:
            cmds = d.raw(frame)
        except Exception as exc:  # noqa: BLE001 - recording the defect
            outcomes.append(type(exc).__name__)
            continue
        outcomes.append([type(c).__name__ for c in cmds])
    assert outcomes == [["FrameRejected"]] * len(bad)
