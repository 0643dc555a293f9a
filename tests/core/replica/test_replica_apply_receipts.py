"""The env replica's apply receipt store and hot path.

Commits 03f8b73 and 0068d9b changed the apply path for speed (issue #4):
receipts became tuples of atomic fields (the fingerprint compared as
canonical JSON text, a replayed ``ok`` ack's ``result`` decoded back from
stored JSON), the receipt's ledger cost is summed by ``_receipt_cost``, the
apply's entry is never put in flight, ``state_json`` is one f-string and
``staged_envelope_value`` is a positional twin of ``parse_staged_envelope``.

How it was attacked (the differential harness itself lives outside the
repository, next to the pre-change worktree it imports): 7,000 random event
sequences of 150 or 300 events (frames with replays of earlier applies, identical and altered in
attempt id, project, record version, op id and every state field, withhold
reasons with quotes, backslashes, non-ASCII text and lone surrogates,
legacy/row/null references, deliveries on another stream, begins that switch
streams, small ledger limits that refuse receipts, read completions in every
order and outcome, reader changes, drops) were driven through the code before
and after the change in two processes; every command (acks encoded) and the
ledger counters (process and per task) were compared after every event. No
difference was found (a planted one-byte cost mutant differed on 179 of 300
sequences, so the comparison sees such changes).

Mutants of the new code run against this module: fingerprint without the
state, attempt id, project or the frame's record version (``_same_apply``),
a replay's materialization always ``installed``, one byte off the
fingerprint's or the result's cost (``_receipt_cost``), a replay result
decoded from the frame's state instead of the result's (``_receipt_result``),
``v`` of 2.0 refused (``staged_envelope_value``): all killed. Equivalent:
not scrubbing the apply's entry when the ledger refuses its receipt (the
entry is referenced by nothing afterwards, so no value stays reachable);
the fingerprint without the delivery's stream (a frame on another stream is
``stream_mismatch`` first, the codec makes the delivery's stream the frame's,
and a stream switch releases every receipt).

What this module pins, with oracles independent of the replica:

* ER-114 receipt costs against a JavaScript-exact canonical JSON writer
  (``js_canonical``: ``JSON.stringify``'s escapes, lone surrogates as
  ``\\udxxx``), on single applies and along seeded random walks, including
  the exact ledger-limit boundary at receipt time;
* ER-055 a replay's ack (rebuilt from the receipt's JSON) equals the first
  ack for generated states (huge integers, every reference kind, free-text
  reasons with lone surrogates): the decode asserts in ``_receipt_result``
  are never reached;
* ER-056 exactly the fingerprint fields make a replay a conflict;
* ER-098 ``v`` checks of the staged envelope (the rewritten condition);
* no plaintext value in receipts, the ledger or acks (canaries).

Finding (pre-existing, not introduced by the change; fixed since):
a lone surrogate in a withhold reason is charged one byte too few per
surrogate in the receipt's fingerprint (the reference writes ``\\udxxx``
inside the fingerprint string, whose backslash is escaped again in the
evidence: 7 bytes; ``_receipt_cost`` counts 6). Cross-checked against Node
running the reference's ``canonicalJson`` on the same frames.

Driven by events only: no clock, no sleeps, no AWS.
"""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replica_kit import (
    TASK,
    Driver,
    FakeReader,
    acks,
    apply,
    begin,
    commit,
    generic_apply_cost,
    js_canonical,
    page,
    reachable_values,
    reads,
    sid,
    staged_envelope,
    staged_ref,
    state,
)

from leasegate.core import Secret, encode
from leasegate.core.replica import (
    ActivateAssignment,
    DropAssignment,
    EnvFrameReceived,
    ReplicaLimits,
    SendAck,
    ValueReadCompleted,
    ValueReadFailed,
)
from leasegate.core.replica._receipts import _receipt_bytes

# The independent oracle (the reference's canonicalJson and ledger cost) is
# the kit's ``generic_apply_cost`` (first written for these tests).
_reference_apply_cost = generic_apply_cost
_LONE = re.compile("[\ud800-\udfff]")


def _withhold(key: str, reason: str, **kw: Any) -> dict[str, Any]:
    return state(key, binding={"kind": "withhold", "reason": reason}, **kw)


def _live(limits: ReplicaLimits | None = None) -> Driver:
    d = Driver(limits=limits)
    d.activate()
    d.ready_snapshot()
    return d


def _bytes(d: Driver) -> int:
    got = d.m.task_ledger(TASK)
    assert got is not None
    return got[1]


_ESCAPING_REASONS = [
    "plain",
    'say "no"',
    "back\\slash",
    '"\\"',
    "\\u0041",
    "é",
    "日本",
    "\U0001f600",
    "\u2028",
    "\x80",
]
_LONE_SURROGATE_REASONS = ["\ud800", "x\udfffy\udfff", "a\ud83d", "\ude00b"]


# ---------------------------------------------------------------------------
# ER-114: receipt costs


@pytest.mark.parametrize("reason", _ESCAPING_REASONS)
@pytest.mark.parametrize("kind", ["withheld", "installed", "consumed_error", "absorbed"])
def test_ER_114_receipt_cost_equals_the_reference_bytes(reason: str, kind: str) -> None:
    """Every receipt shape, the state's reason needing every kind of escape."""
    d = _live()
    if kind == "absorbed":
        # Absorbed (not newer): the result is the current state, not the frame's.
        assert d.one(apply(_withhold("C", reason), 1, version=2))["ok"]
        f = apply(_withhold("C", reason + "x", lg=0), 2, version=2)
    elif kind == "installed":
        # Read and installed; the reason only in another field's place.
        f = apply(state("C", binding={"kind": "env"}, ref=staged_ref(3)), 1, version=2)
        f["opId"] = "op-" + str(len(reason))
    elif kind == "withheld":
        f = apply(_withhold("C", reason), 1, version=2)
    else:
        f = apply(_withhold("C", reason), 1, project="p-nope", version=2)
    before = _bytes(d)
    ack = d.one(f)
    assert ack["ok"] is (kind != "consumed_error"), ack
    assert _bytes(d) - before == _reference_apply_cost(f, ack)


@pytest.mark.parametrize("reason", ["plain", 'q"\\"', "é\U0001f600"])
def test_ER_114_receipt_refused_exactly_past_the_byte_limit(reason: str) -> None:
    """The task byte limit admits a receipt costing exactly what is left and
    refuses one byte less (ER-114, ER-119 at receipt time)."""
    f = apply(_withhold("C", reason), 1, version=2)
    probe = _live()
    used = _bytes(probe)
    cost = _reference_apply_cost(f, probe.one(copy.deepcopy(f)))
    fits = _live(ReplicaLimits(max_task_bytes=used + cost))
    assert fits.one(copy.deepcopy(f))["ok"]
    assert _bytes(fits) == used + cost
    short = _live(ReplicaLimits(max_task_bytes=used + cost - 1))
    ack = short.one(copy.deepcopy(f))
    assert ack["code"] == "replica_restart_required"
    assert short.m.ledger_totals == (0, 0)


@pytest.mark.parametrize("reason", _LONE_SURROGATE_REASONS)
def test_ER_114_lone_surrogate_in_fingerprint_costs_seven_bytes(reason: str) -> None:
    """The fingerprint is canonical JSON held as a JSON string: JavaScript
    first writes a lone surrogate as the six characters ``\\udxxx``, then the
    evidence escapes that backslash (seven bytes); in the result state the
    same surrogate is written once (six bytes)."""
    d = _live()
    f = apply(_withhold("C", reason), 1, version=2)
    before = _bytes(d)
    ack = d.one(f)
    assert ack["ok"]
    assert _bytes(d) - before == _reference_apply_cost(f, ack)


# ---------------------------------------------------------------------------
# ER-055 / ER-056: replays answered from the receipt


_REASONS = st.one_of(
    st.sampled_from([*_ESCAPING_REASONS, *_LONE_SURROGATE_REASONS]),
    st.text(
        alphabet=st.characters(
            blacklist_categories=("Cc",), blacklist_characters="\x7f", max_codepoint=0x10FFFF
        ),
        min_size=1,
        max_size=30,
    ),
)
_REFS = st.one_of(
    st.none(),
    st.integers(1, 3).map(staged_ref),
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
_BIG = st.one_of(st.integers(0, 3), st.just(2**53 - 1), st.integers(0, 2**53 - 1))


@st.composite
def _states(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "key": draw(st.sampled_from(["A", "B", "C", "Z_9"])),
        "head": {
            "revision": draw(_BIG),
            "generation": draw(_BIG),
            "tombstone": draw(st.booleans()),
            "valueRef": draw(_REFS),
        },
        "binding": draw(_BINDINGS),
        "policyEpoch": draw(st.one_of(st.none(), st.sampled_from([1, 2]), _BIG.filter(bool))),
        "listingGeneration": draw(_BIG),
    }


def _same_answer(again: dict[str, Any], first: dict[str, Any], cursor: dict[str, Any]) -> None:
    assert again == {**first, "opId": again["opId"], "appliedThrough": cursor}


@settings(max_examples=120, deadline=None)
@given(
    st_=_states(),
    version=st.sampled_from([0, 1, 2]),
    project=st.sampled_from(["p1", "p1", "p9"]),
)
def test_ER_055_replay_ack_rebuilt_from_the_receipt_equals_the_first(
    st_: dict[str, Any], version: int, project: str
) -> None:
    """Installed, withheld, unavailable, absorbed and consumed-error answers:
    a replay (same fingerprint, another op id) gets the first answer again at
    the current cursor, before and after the cursor moves on and the reader
    changes. Never raises (the receipt's JSON always decodes)."""
    d = _live()
    f = apply(st_, 1, project=project, version=version)
    first = d.one(copy.deepcopy(f))
    assert first["appliedThrough"] == {"streamId": "S1", "sequence": 1}
    replay = copy.deepcopy(f) | {"opId": "op-replay"}
    _same_answer(d.one(replay), first, f["delivery"])
    # Move the cursor on (a consumed error is enough) and change the reader.
    assert d.one(apply(state("Q"), 2, project="p-nope"))["code"] == "project_not_in_replica"
    d.activate(reader=FakeReader("r2"))
    _same_answer(d.one(copy.deepcopy(replay)), first, {"streamId": "S1", "sequence": 2})
    receipts = d.m._replicas[TASK].apply_receipts
    assert reachable_values(receipts) == []
    assert "CANARY" not in repr(receipts)


@pytest.mark.parametrize("reason", [*_LONE_SURROGATE_REASONS, 'q"\\\u2028\U0001f600'])
def test_ER_055_absorbed_replay_rebuilds_the_current_state(reason: str) -> None:
    """An absorbed apply (not newer) answers with the *current* state, whose
    canonical JSON the receipt stores apart from the frame's; its replay
    decodes that text back to the same state (reasons with lone surrogates,
    quotes, backslashes, line separators)."""
    d = Driver()
    d.activate()
    d.ready_snapshot([state("A"), _withhold("B", reason)])
    f = apply(_withhold("B", "other"), 1, version=1)  # version not +1: absorbed
    first = d.one(copy.deepcopy(f))
    assert first["ok"]
    assert first["result"]["state"]["binding"] == {"kind": "withhold", "reason": reason}
    assert first["result"]["materialization"] == {"kind": "withheld", "reason": reason}
    _same_answer(d.one(copy.deepcopy(f) | {"opId": "op-again"}), first, f["delivery"])


def _altered(f: dict[str, Any], how: str) -> dict[str, Any]:
    g = copy.deepcopy(f)
    s = g["state"]
    if how == "attempt":
        g["attemptId"] = "A1"
    elif how == "project":
        g["projectId"] = "p2"
    elif how == "record_version":
        g["recordVersion"] += 1
    elif how == "revision":
        s["head"]["revision"] += 1
    elif how == "generation":
        s["head"]["generation"] += 1
    elif how == "tombstone":
        s["head"]["tombstone"] = True
    elif how == "ref_row":
        s["head"]["valueRef"] = {"kind": "row", "rowId": "R1"}
    elif how == "ref_legacy":
        s["head"]["valueRef"] = {"kind": "legacy", "ssmVersion": 1}
    elif how == "ref_null":
        s["head"]["valueRef"] = None
    elif how == "ref_staging_id":
        s["head"]["valueRef"] = staged_ref(9)
    elif how == "binding_null":
        s["binding"] = None
    elif how.startswith("reason:"):
        s["binding"] = {"kind": "withhold", "reason": how[len("reason:") :]}
    elif how == "epoch":
        s["policyEpoch"] = None
    elif how == "listing_generation":
        s["listingGeneration"] += 1
    elif how == "op_id":
        g["opId"] = "op-other"
    else:
        raise AssertionError(how)
    return g


_BASE_REASON = 'a"\\\ud800é'
_ALTERATIONS = [
    "attempt",
    "project",
    "record_version",
    "revision",
    "generation",
    "tombstone",
    "ref_row",
    "ref_legacy",
    "ref_null",
    "ref_staging_id",
    "binding_null",
    "reason:" + _BASE_REASON + " ",
    "reason:" + _BASE_REASON.replace("\ud800", "\udc00"),
    "reason:" + _BASE_REASON.replace('"', "'"),
    "reason:" + _BASE_REASON.replace("\\", "/"),
    "epoch",
    "listing_generation",
    "op_id",
]


@pytest.mark.parametrize("how", _ALTERATIONS)
def test_ER_056_exactly_the_fingerprint_fields_conflict(how: str) -> None:
    """A replayed sequence is answered again iff attempt, project, record
    version, state and delivery are unchanged (the reference's fingerprint,
    compared here through its canonical JSON): ``delivery_conflict`` otherwise.
    The op id is not part of it."""
    d = _live()
    f = apply(_withhold("C", _BASE_REASON), 1, version=2)
    first = d.one(copy.deepcopy(f))
    assert first["ok"]
    g = _altered(f, how)
    same = js_canonical({k: v for k, v in g.items() if k != "opId"}) == js_canonical(
        {k: v for k, v in f.items() if k != "opId"}
    )
    again = d.one(g)
    if same:
        _same_answer(again, first, f["delivery"])
    else:
        assert again["ok"] is False
        assert again["code"] == "delivery_conflict"
        assert "result" not in again


# ---------------------------------------------------------------------------
# Secrets: no value in a receipt, the ledger or an ack


def test_ER_114_receipts_ledger_and_acks_hold_no_plaintext() -> None:
    """Installed applies (values read through the reader, each a canary),
    their replays, an absorbed apply that keeps the current value, and a
    refused receipt: no receipt field, ack or ledger counter shows a value,
    and no Secret is reachable from the receipt store."""
    d = _live()
    out: list[Any] = []
    frames = [
        apply(state("A", gen=2, ref=staged_ref(2)), 1, version=2),
        apply(state("B", gen=2, ref={"kind": "legacy", "ssmVersion": 1}), 2, version=3),
        apply(state("A", gen=2, ref=staged_ref(2)), 3, version=3),  # absorbed
    ]
    for f in frames:
        cmds = d.raw(f)
        out.extend(cmds)
        for cmd in reads(cmds):
            out.extend(d.send(cmd.reader.answer(cmd)))
    for f in frames:
        out.extend(d.raw(copy.deepcopy(f)))
    got = acks(out)
    assert [a["ok"] for a in got] == [True] * 6
    assert d.value("A") == "CANARY-p1-A-" + sid(2)  # the values are installed
    r = d.m._replicas[TASK]
    assert len(r.apply_receipts) == 3
    assert reachable_values(r.apply_receipts) == []
    for rec in r.apply_receipts.values():
        assert "CANARY" not in rec
    assert "CANARY" not in repr(r.apply_receipts)
    for c in out:
        assert "CANARY" not in repr(c)
        if isinstance(c, SendAck):
            assert "CANARY" not in json.dumps(encode(c.ack))
    assert "CANARY" not in repr(d.m.ledger_totals) + repr(d.m.task_ledger(TASK))


def test_ER_072_receipt_refused_after_a_read_scrubs_the_read_value() -> None:
    """The apply's entry is never in flight now: when the ledger refuses its
    receipt right after the read, the value just read and the replaced one
    are both unreachable, and the replica is exhausted (ER-072, ER-119)."""
    probe = _live()
    used = _bytes(probe)
    d = _live(ReplicaLimits(max_task_bytes=used + 100))  # no receipt fits
    (read,) = reads(d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1, version=2)))
    assert d.value("A") is not None  # the current value is live meanwhile
    out = d.send(
        ValueReadCompleted(
            now_ms=0,
            cmd_id=read.cmd_id,
            raw=Secret(staged_envelope("p1", "A", sid(2), "CANARY-new")),
        )
    )
    (ack,) = acks(out)
    assert ack["code"] == "replica_restart_required"
    assert reachable_values(d.m) == []
    assert d.m.ledger_totals == (0, 0)
    assert "CANARY" not in repr(out)


def test_ER_103_apply_read_fenced_by_a_drop_leaves_nothing() -> None:
    """An apply waiting on its read when the assignment is dropped: the late
    completion is fenced, stores no receipt and leaves no value (ER-103)."""
    d = _live()
    (read,) = reads(d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1, version=2)))
    d.send(DropAssignment(now_ms=0, task_id=TASK, run_epoch=1))
    out = d.send(read.reader.answer(read))
    (ack,) = acks(out)
    assert ack["code"] == "replica_state_changed"
    assert reachable_values(d.m) == []
    assert d.m.ledger_totals == (0, 0)


# ---------------------------------------------------------------------------
# ER-098: the staged envelope's version, as rewritten


@pytest.mark.parametrize(
    ("v", "installed"),
    [
        (2, True),
        (2.0, True),
        (True, False),
        (False, False),
        ("2", False),
        (None, False),
        (2.5, False),
        (1, False),
        (3, False),
        ([2], False),
        ({"v": 2}, False),
    ],
)
def test_ER_098_staged_envelope_version_is_the_number_two(v: Any, installed: bool) -> None:
    d = _live()
    (read,) = reads(d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1, version=2)))
    raw = staged_envelope("p1", "A", sid(2), "CANARY-v", v=v)
    (ack,) = acks(d.send(ValueReadCompleted(now_ms=0, cmd_id=read.cmd_id, raw=Secret(raw))))
    mat = ack["result"]["materialization"]
    if installed:
        assert mat == {"kind": "installed"}
    else:
        assert mat == {"kind": "unavailable", "reason": "value_envelope_mismatch"}


def test_ER_098_staged_envelope_version_infinity_is_a_mismatch() -> None:
    """``1e400`` reads as Infinity (``JSON.parse``): a number, but not 2."""
    d = _live()
    (read,) = reads(d.raw(apply(state("A", gen=2, ref=staged_ref(2)), 1, version=2)))
    raw = staged_envelope("p1", "A", sid(2), "CANARY-v").replace('"v": 2', '"v": 1e400')
    assert '"v": 1e400' in raw
    (ack,) = acks(d.send(ValueReadCompleted(now_ms=0, cmd_id=read.cmd_id, raw=Secret(raw))))
    assert ack["result"]["materialization"]["reason"] == "value_envelope_mismatch"


# ---------------------------------------------------------------------------
# Random walks: every receipt's cost and every replay, against the oracle


def _walk_state(rng: random.Random, key: str, n: int) -> dict[str, Any]:
    refs: list[Any] = [
        staged_ref(rng.randint(1, 3)),
        {"kind": "legacy", "ssmVersion": 1},
        {"kind": "row", "rowId": "R1"},
        None,
    ]
    bindings: list[Any] = [
        None,
        None,
        {"kind": "env"},
        {"kind": "omit"},
        {"kind": "withhold", "reason": rng.choice(_ESCAPING_REASONS)},
    ]
    ref = rng.choice(refs)
    binding = rng.choice(bindings)
    advancing = rng.random() < 0.7
    return state(
        key,
        rev=n if advancing else rng.randint(0, 3),
        gen=n // 2 + 1 if advancing else rng.randint(0, 3),
        tomb=rng.random() < 0.1,
        ref=ref,
        binding=binding,
        epoch=rng.choice([1, 1, 2, None]),
        lg=rng.randint(0, 1),
    )


_WALK_STATS: list[tuple[int, int, int]] = []
# Every alteration, lone surrogates included (their cost was one byte short
# before its fix).
_WALK_ALTERATIONS = [
    *_ALTERATIONS,
    'reason:a"\\é',
    "reason:\U0001f600\u2028",
]
_CONSUMED = ("project_not_in_replica", "record_version_conflict")
_NOT_A_REPLAY = ("delivery_conflict", "stream_mismatch", "replica_restart_required")


@pytest.mark.parametrize("seed", range(30))
def test_ER_114_random_walk_receipt_costs_and_replays(seed: int) -> None:
    """Seeded walks of live and staged applies, replays (identical and
    altered), stream switches, read completions in any order and reader
    changes, under small ledger limits: after every step, the receipts held
    are exactly those of the applies answered ``ok`` or with a consumed error
    on the current stream, each costing the reference's bytes for its frame
    and first answer, and every replay answered from a receipt repeats that
    first answer (ER-055, ER-114, ER-117)."""
    rng = random.Random(seed)
    limits = [None, ReplicaLimits(max_task_bytes=9_000), ReplicaLimits(max_task_entries=14)][
        seed % 3
    ]
    d = _live(limits)
    first: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # seq -> frame, answer
    ops: dict[str, dict[str, Any]] = {}
    sent: list[dict[str, Any]] = []
    pending: list[Any] = []
    replays = 0
    checked = 0

    def feed(ev: Any) -> None:
        nonlocal replays
        cmds = d.send(ev)
        pending.extend(reads(cmds))
        for c in cmds:
            assert "CANARY" not in repr(c)
            if not isinstance(c, SendAck) or c.ack.phase != "applied":
                continue
            a = encode(c.ack)
            f = ops[a["opId"]]
            seq = f["delivery"]["sequence"]
            prior = first.get(seq)
            if prior is not None and a.get("code") not in _NOT_A_REPLAY:
                _same_answer(a, prior[1], a["appliedThrough"])
                replays += 1
            elif prior is None and (a["ok"] or a["code"] in _CONSUMED):
                first[seq] = (f, a)

    def frame(f: dict[str, Any]) -> None:
        f["opId"] = f"op-{len(ops)}"
        ops[f["opId"]] = f
        feed(EnvFrameReceived(now_ms=0, frame=f))

    for n in range(1, 81):
        r = d.m._replicas[TASK]
        stream = r.stream_id
        assert stream is not None
        x = rng.random()
        if x < 0.45:
            a = r.attempt
            pid = "p1" if rng.random() < 0.9 else "p2"
            proj = r.live.get(pid) if a is None else a.projects.get(pid)
            rv = 0 if proj is None else proj.record_version
            f = apply(
                _walk_state(rng, rng.choice(["A", "B", "C"]), n),
                r.sequence + (1 if rng.random() < 0.95 else 2),
                project=pid,
                version=rv + rng.choice([1, 1, 1, 0]),
                attempt=None if a is None else a.attempt_id,
                stream=stream,
            )
            sent.append(f)
            frame(f)
        elif x < 0.7 and sent:
            g = copy.deepcopy(rng.choice(sent[-4:]))
            frame(_altered(g, rng.choice(_WALK_ALTERATIONS)) if rng.random() < 0.3 else g)
        elif x < 0.88 and pending:
            cmd = pending.pop(rng.randrange(len(pending)))
            if rng.random() < 0.8:
                feed(cmd.reader.answer(cmd))
            else:
                feed(ValueReadFailed(now_ms=0, cmd_id=cmd.cmd_id))
        elif x < 0.94:
            # A new attempt on this or another stream, usually committed.
            to = rng.choice([stream, stream, "S2", "S3"])
            att = f"A{n + 10}"
            live = r.live.get("p1")
            version = 1 if live is None else live.record_version + 1
            frame(begin(att, stream=to))
            frame(page([state("A"), _withhold("B", "w")], attempt=att, stream=to, version=version))
            r = d.m._replicas[TASK]
            if rng.random() < 0.7 and r.attempt is not None and not r.restart_required:
                frame(commit([("p1", version)], seq=r.sequence, attempt=att, stream=to))
        else:
            reader = rng.choice([FakeReader("r1"), d.readers[TASK]])
            feed(
                ActivateAssignment(
                    now_ms=0, task_id=TASK, run_epoch=1, org_id="org1", reader=reader
                )
            )
        r = d.m._replicas[TASK]
        if r.restart_required:
            break
        if r.stream_id != stream:
            first.clear()  # receipts are released on a stream switch (ER-117)
        assert set(r.apply_receipts) == set(first), (sorted(r.apply_receipts), sorted(first))
        for seq, rec in r.apply_receipts.items():
            f, a = first[seq]
            assert _receipt_bytes(rec) == _reference_apply_cost(f, a), (seq, f)
            checked += 1
        assert reachable_values(r.apply_receipts) == []
        assert "CANARY" not in repr(r.apply_receipts)
    # The walk exercised receipts (exhaustion may end it early).
    assert checked > 0
    _WALK_STATS.append((len(ops), checked, replays))
