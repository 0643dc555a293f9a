"""The replica's hot-path shortcuts equal the generic forms they replace.

* ``state_json`` writes a decoded state's compact JSON in field order
  directly; it must equal ``js(encode(state))`` for every state, and hold
  exactly the characters of ``canonical(encode(state))`` (ER-084 compares
  states canonically: equal states, equal texts; ER-114 charges evidence by
  the length of its canonical JSON).
* Apply receipt costs are summed from their parts, never written out; each
  must equal ``evidence_bytes`` of the generic evidence (ER-114).
* An apply dispatched at once (no lane) acks like one that waited in a lane
  (ER-025: frames of one task apply in arrival order).
"""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from replica_kit import (
    TASK,
    Driver,
    apply,
    begin,
    commit,
    generic_apply_cost,
    page,
    sid,
    state,
)

from leasegate.core import decode, encode, loads
from leasegate.core.replica import EnvFrameReceived, ReadStagedValue, SendAck
from leasegate.core.replica._ledger import canonical, js
from leasegate.core.replica._receipts import _receipt_bytes, state_json
from leasegate.core.wire.env import BindingState

_REASONS = st.one_of(
    st.sampled_from(['say "no"', "back\\slash", "é", "\U0001f600", "\ud800", "x"]),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cc",), blacklist_characters="\x7f"),
        min_size=1,
        max_size=20,
    ),
)
_REFS = st.one_of(
    st.none(),
    st.integers(0, 2**32 - 1).map(lambda i: {"kind": "staged", "stagingId": sid(i)}),
    st.integers(1, 2**53 - 1).map(lambda v: {"kind": "legacy", "ssmVersion": v}),
    st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True).map(
        lambda r: {"kind": "row", "rowId": r}
    ),
)
_BINDINGS = st.one_of(
    st.none(),
    st.just({"kind": "env"}),
    st.just({"kind": "omit"}),
    _REASONS.map(lambda r: {"kind": "withhold", "reason": r}),
)


@st.composite
def states(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "key": draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)),
        "head": {
            "revision": draw(st.integers(0, 2**53 - 1)),
            "generation": draw(st.integers(0, 2**53 - 1)),
            "tombstone": draw(st.booleans()),
            "valueRef": draw(_REFS),
        },
        "binding": draw(_BINDINGS),
        "policyEpoch": draw(st.one_of(st.none(), st.integers(1, 2**53 - 1))),
        "listingGeneration": draw(st.integers(0, 2**53 - 1)),
    }


@settings(max_examples=200, deadline=None)
@given(value=states())
def test_ER_084_state_json_is_the_json_of_the_state_with_the_canonical_characters(
    value: dict[str, Any],
) -> None:
    decoded = decode(BindingState, value)
    assert isinstance(decoded, BindingState)
    text = state_json(decoded)
    assert text == js(value) == js(encode(decoded))
    # The same members as the canonical JSON, in another order: the same
    # characters, so the same length in every unit (ER-114 costs).
    assert sorted(text) == sorted(canonical(encode(decoded)))
    # Equal states, equal texts; a different state, a different text.
    assert state_json(decode(BindingState, loads(text))) == text  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    reason=_REASONS,
    seq_base=st.integers(0, 10**12),
    stream=st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    live=st.booleans(),
)
def test_ER_114_apply_receipt_costs_equal_the_generic_evidence(
    reason: str, seq_base: int, stream: str, live: bool
) -> None:
    """Installed, withheld (free-text reason), absorbed and consumed-error receipts."""
    d = Driver()
    d.activate()
    records = [state("A"), state("B", binding={"kind": "withhold", "reason": reason})]
    d.ready_snapshot(records)
    assert d.one(begin("A2", stream=stream))["ok"]
    # A staged attempt's applies carry an attempt id; a live stream's do not.
    assert d.one(page(records, attempt="A2", stream=stream, version=1))["ok"]
    if live:
        assert d.one(commit(attempt="A2", stream=stream))["ok"]
    att = None if live else "A2"
    a2 = {"kind": "staged", "stagingId": sid(2)}
    frames = [
        apply(state("A", gen=2, ref=a2), 1, version=2),  # installed
        apply(state("B", rev=2, binding={"kind": "withhold", "reason": reason}), 2, version=3),
        apply(state("A", gen=2, ref=a2), 3, version=3),  # absorbed: not newer
        apply(state("Z", rev=5), 4, version=3),  # consumed error
        apply(state("Q"), 5, project="nope", version=3),  # consumed error
    ]
    answers = []
    for f in frames:
        f["attemptId"] = att
        f["streamId"] = stream
        f["delivery"] = {"streamId": stream, "sequence": f["delivery"]["sequence"]}
        answers.append(d.one(f))
    r = d.m._replicas[TASK]
    assert len(r.apply_receipts) == len(frames)
    assert {a["ok"] for a in answers} == {True, False}
    for f, ack in zip(frames, answers, strict=True):
        rec = r.apply_receipts[f["delivery"]["sequence"]]
        assert _receipt_bytes(rec) == generic_apply_cost(f, ack), f
    # Receipts are strings: the dict holding them is never tracked by the
    # collector (so never walked), and their costs sum to what a stream
    # switch releases.
    assert all(type(rec) is str for rec in r.apply_receipts.values())
    assert not gc.is_tracked(r.apply_receipts)
    assert r.receipt_bytes == sum(_receipt_bytes(rec) for rec in r.apply_receipts.values())
    # A replay is answered from the receipt alone: the same ack, at the
    # current cursor (ER-055).
    last = frames[-1]["delivery"]
    for f, ack in zip(frames, answers, strict=True):
        assert d.one(f) == {**ack, "appliedThrough": last}


def test_ER_025_direct_dispatch_and_lane_give_the_same_acks() -> None:
    """A frame arriving while the task waits on a read is queued, then acked in order."""
    d = Driver()
    d.activate()
    d.ready_snapshot()
    first = d.raw(apply(state("A", gen=2, ref={"kind": "staged", "stagingId": sid(2)}), 1))
    (read,) = [c for c in first if isinstance(c, ReadStagedValue)]
    queued = d.send(
        EnvFrameReceived(
            now_ms=0,
            frame=apply(
                state("B", gen=2, ref={"kind": "staged", "stagingId": sid(3)}), 2, version=3
            ),
        )
    )
    assert queued == []  # waits behind the read
    out = d.send(read.reader.answer(read))
    acks = [c.ack for c in out if isinstance(c, SendAck)]
    assert [(a.ok, a.applied_through.sequence) for a in acks] == [(True, 1)]
    (read2,) = [c for c in out if isinstance(c, ReadStagedValue)]
    out2 = d.send(read2.reader.answer(read2))
    acks2 = [c.ack for c in out2 if isinstance(c, SendAck)]
    assert [(a.ok, a.applied_through.sequence, a.record_version) for a in acks2] == [(True, 2, 3)]
    assert d.m._lanes == {}
    assert d.m._busy == {}


@settings(max_examples=200, deadline=None)
@given(a=states(), b=states(), near=st.booleans())
def test_ER_080_plain_value_advance_implies_newer_and_reachable(
    a: dict[str, Any], b: dict[str, Any], near: bool
) -> None:
    from leasegate.core.replica._order import (
        is_plain_value_advance,
        is_reachable_record_advance,
        state_order,
    )

    if near:  # mostly plain advances of a, with one field perhaps changed
        b = {**a, "head": {**a["head"], "generation": a["head"]["generation"] + 1}}
    cur, inc = decode(BindingState, a), decode(BindingState, b)
    assert isinstance(cur, BindingState)
    assume(isinstance(inc, BindingState))  # generation + 1 may pass 2**53 - 1
    assert isinstance(inc, BindingState)
    if is_plain_value_advance(inc, cur):
        assert state_order(inc, cur) == "newer"
        assert is_reachable_record_advance(inc, cur)


class _HostileKey:
    """A key that collides with ``"kind"`` and, once armed, raises when compared."""

    armed = False

    def __hash__(self) -> int:
        return hash("kind")

    def __eq__(self, other: object) -> bool:
        if self.armed:
            raise RuntimeError("CANARY hostile key")
        return False


def test_ER_024_hostile_key_in_a_frame_value_is_rejected_not_raised() -> None:
    from leasegate.core.replica import FrameRejected

    d = Driver()
    d.activate()
    d.ready_snapshot()
    key = _HostileKey()
    frame: dict[Any, Any] = {key: 1}
    frame.update(apply(state("A", gen=2, ref={"kind": "staged", "stagingId": sid(2)}), 1))
    key.armed = True
    got = d.raw(frame)
    assert [type(c) for c in got] == [FrameRejected]
    assert "CANARY" not in repr(got)
