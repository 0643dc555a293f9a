"""Frames as text against frames as parsed values (ER-024, ER-055,
ER-098, ER-114), hostile inputs to ``handle``, and the replica benchmark's
checks.

* Differential: one replica fed every frame as ``json.loads`` of its text
  (a dict), another fed the same frame as text (``str``, ``bytes``,
  ``bytearray``; the wire form, sorted keys, whitespace, ``\\u`` escapes) or
  as a decoded model; replays of earlier applies in another form, or with
  another state. Every command, the ledger counters, the status and the
  served view must be equal at every step. Frames carry hostile fields:
  withhold reasons with quotes, backslashes, U+2028, C1 controls, astral
  characters and lone surrogates; 15- and 16-digit integers; keys of 256
  characters; task ids of 128 units with astral characters; org ids that
  need escaping.
* ER-114: each apply that is remembered costs exactly
  ``generic_apply_cost`` (the reference's ``64 + byteLength(canonicalJson)``
  from what crossed the wire), read from the public ledger counters.
* ``handle`` never raises, whatever the frame or read completion.
* ``benchmarks/bench_replica.py``: its checks fail when the core answers
  wrongly.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replica_kit import (
    Driver,
    FakeReader,
    apply,
    generic_apply_cost,
    legacy_envelope,
    reads,
    sid,
    staged_ref,
    state,
)

from leasegate.core import Secret, decode, encode
from leasegate.core.replica import (
    EnvFrameReceived,
    FrameRejected,
    ReadLegacyValue,
    ReadStagedValue,
    ReplicaManager,
    SendAck,
    ValueReadCompleted,
)
from leasegate.core.replica import _values as replica_values
from leasegate.core.wire import decode_apply_text
from leasegate.core.wire.env import EnvApply

_ASTRAL = "\U0001f600"
_LONE = re.compile("[\ud800-\udfff]")


def wire_text(
    value: Any, *, order: str = "wire", ascii_only: bool = False, indent: Any = None
) -> str:
    """``JSON.stringify`` of ``value`` (a lone surrogate escaped, as JS does)."""
    text = json.dumps(
        value,
        separators=None if indent is not None else (",", ":"),
        ensure_ascii=ascii_only,
        sort_keys=order == "sorted",
        indent=indent,
    )
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class EnvReader(FakeReader):
    """Staged reads: a compact envelope (insertion order for an even staging
    number, canonical order for an odd one) of value
    ``CANARY-{key}-{n}-é😀``, for ``org``; number 5 carries a value that
    needs an escape (full parse). Legacy reads: a v1 envelope."""

    def __init__(self, name: str, org: str) -> None:
        super().__init__(name)
        self.org = org

    def answer(self, cmd: Any, now: int = 0) -> Any:
        if isinstance(cmd, ReadStagedValue):
            n = int(cmd.staging_id[:8], 16)
            value = f"CANARY-{cmd.key}-{n}-é{_ASTRAL}" + ('"q"' if n == 5 else "")
            env = {
                "v": 2,
                "kind": "project-env",
                "orgId": self.org,
                "projectId": cmd.project_id,
                "key": cmd.key,
                "stagingId": cmd.staging_id,
                "value": value,
            }
            raw = wire_text(env, order="sorted" if n % 2 else "wire")
            return ValueReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, raw=Secret(raw))
        assert isinstance(cmd, ReadLegacyValue)
        raw = legacy_envelope(cmd.project_id, cmd.key, f"CANARY-legacy-{cmd.version}")
        return ValueReadCompleted(
            now_ms=now, cmd_id=cmd.cmd_id, raw=Secret(raw), version=cmd.version
        )


def _norm(cmds: list[Any]) -> list[str]:
    """Commands as text: their ``repr`` (commands hold no secret; readers
    show their names; an ack's ``repr`` tells ``True`` from ``1``)."""
    return [repr(c) for c in cmds]


def _observe(d: Driver, task: str) -> Any:
    """Everything the replica shows: status, ledger counters, readiness and
    the served view with its values revealed."""
    status = d.m.read_status(task)
    projects = () if status is None else status.project_ids
    view = d.m.read_view(task, 1, projects)
    served = (
        None
        if view is None
        else [
            (
                repr(view.applied_through),
                p.project_id,
                p.record_version,
                repr(e.state),
                repr(e.materialization),
                None if e.value is None else e.value.reveal(),
            )
            for p in view.projects
            for e in p.entries
        ]
    )
    return (
        repr(status),
        served,
        d.m.ledger_totals,
        d.m.task_ledger(task),
        d.m.is_ready(task, 1),
    )


# ---------------------------------------------------------------------------
# Differential: value vs text, with ER-114 costs

# Task ids are op ids (ER-005); the text escapes are exercised by orgs and reasons.
_TASKS = ["t1", "T" * 128, "t-_9Z"]
_ORGS = ["org1", 'o"rg', "o\\rg", "ørg", "o\ud800", "o" + _ASTRAL]
_REASONS = [
    'say "no"',
    "back\\slash",
    "é\u2028ü\u2029",
    "\x85\x9f",
    _ASTRAL * 64,
    "\ud800",
    "\udfffx",
    "r" * 128,
    "é" * 128,
    "\uffff",
    "<\u2028>",
]
_BINDINGS = st.one_of(
    st.sampled_from([None, None, None, {"kind": "env"}, {"kind": "omit"}]),
    st.sampled_from(_REASONS).map(lambda r: {"kind": "withhold", "reason": r}),
)
_KEYS = ["A", "B", "C", "K" * 256]
_BIG = [10**15 - 1, 10**15, 2**53 - 1]
_FORMS = [
    "value",
    "wire",
    "wire",
    "wire_bytes",
    "wire_bytearray",
    "sorted",
    "spaced",
    "ascii",
    "ascii_bytes",
    "model",
]


def _form(frame: dict[str, Any], form: str) -> Any:
    if form == "value":
        return json.loads(wire_text(frame))
    if form == "model":
        got = decode(EnvApply, json.loads(wire_text(frame)))
        return got if isinstance(got, EnvApply) else json.loads(wire_text(frame))
    if form in ("wire", "wire_bytes", "wire_bytearray"):
        text = wire_text(frame)
    elif form == "sorted":
        text = wire_text(frame, order="sorted")
    elif form == "spaced":
        text = wire_text(frame, indent=1)
    else:
        text = wire_text(frame, ascii_only=True)
    if form.endswith("_bytes"):
        return text.encode()
    if form.endswith("_bytearray"):
        return bytearray(text.encode())
    return text


@st.composite
def runs(draw: st.DrawFn) -> tuple[str, str, list[tuple[dict[str, Any], str]]]:
    """A task, an org, and live applies with the form each is given in:
    mostly the next apply of a key (a new value generation, sometimes a
    16-digit one), sometimes off by one, sometimes a replay of an earlier
    apply in another form, or with its state changed (a conflict)."""
    task = draw(st.sampled_from(_TASKS))
    org = draw(st.sampled_from(_ORGS))
    steps: list[tuple[dict[str, Any], str]] = []
    heads: dict[str, list[Any]] = {}
    seq, version = 0, 1
    for _ in range(draw(st.integers(1, 14))):
        what = draw(st.integers(0, 9))
        applies = [f for f, _ in steps]
        if applies and what < 3:
            frame = json.loads(json.dumps(applies[draw(st.integers(0, len(applies) - 1))]))
            if what == 0:
                # The same sequence with another state: delivery_conflict.
                frame["state"]["listingGeneration"] += 1
            steps.append((frame, draw(st.sampled_from(_FORMS))))
            continue
        key = draw(st.sampled_from(_KEYS))
        h = heads.setdefault(key, [1, 1, draw(_BINDINGS), draw(st.sampled_from([1, None, 2]))])
        h[1] = draw(st.sampled_from([h[1] + 1] * 4 + [b for b in _BIG if b > h[1]]))
        ref = draw(
            st.sampled_from(
                [staged_ref(h[1] % 7), {"kind": "legacy", "ssmVersion": h[1]}, staged_ref(5)]
            )
        )
        if draw(st.integers(0, 5)) == 0:
            h[2] = draw(_BINDINGS)
        s = state(
            key,
            rev=h[0],
            gen=h[1],
            ref=ref,
            binding=h[2],
            epoch=h[3],
            lg=draw(st.sampled_from([0, 0, 10**15 - 1, 10**15])),
        )
        off = draw(st.sampled_from([(1, 1)] * 8 + [(2, 1), (1, 2), (1, 0)]))
        frame = apply(s, seq + off[0], version=version + off[1], task=task)
        if off == (1, 1):
            seq, version = seq + 1, version + 1
        steps.append((frame, draw(st.sampled_from(_FORMS))))
    return task, org, steps


def _driver(task: str, org: str) -> Driver:
    d = Driver()
    d.activate(task, org=org, reader=EnvReader(f"r-{task}", org))
    d.ready_snapshot([state("A"), state("B", ref=staged_ref(2))], task=task)
    return d


def _applied_through(d: Driver, task: str) -> int:
    status = d.m.read_status(task)
    assert status is not None
    assert status.applied_through is not None
    return status.applied_through.sequence


def test_er114_frames_as_text_equal_frames_as_values_and_cost_the_reference() -> None:
    seen = {"fast": 0, "receipts": 0, "replays": 0, "conflicts": 0, "installed": 0}

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(run=runs())
    def check(run: tuple[str, str, list[tuple[dict[str, Any], str]]]) -> None:
        task, org, steps = run
        ref, sut = _driver(task, org), _driver(task, org)
        assert _observe(sut, task) == _observe(ref, task)
        firsts: dict[int, dict[str, Any]] = {}
        for frame, form in steps:
            given_as = _form(frame, form)
            text = bytes(given_as).decode() if form.startswith("wire_") else given_as
            if isinstance(text, str) and decode_apply_text(text) is not None:
                seen["fast"] += 1
            before_seq = _applied_through(sut, task)
            before = sut.m.task_ledger(task)
            want = ref.step(json.loads(wire_text(frame)))
            got = sut.step(given_as)
            assert _norm(got) == _norm(want), (frame, form)
            assert _observe(sut, task) == _observe(ref, task), (frame, form)
            after = sut.m.task_ledger(task)
            assert before is not None
            assert after is not None
            answers = [encode(c.ack) for c in got if type(c) is SendAck]
            if not answers:
                # Refused (a generation past 2**53 - 1): nothing changed.
                assert [type(c) for c in got] == [FrameRejected], got
                assert after == before
                continue
            (ack,) = answers
            seq = frame["delivery"]["sequence"]
            if _applied_through(sut, task) != before_seq:
                # A new receipt: the reference's cost, from the wire only.
                assert _applied_through(sut, task) == seq
                cost = generic_apply_cost(json.loads(wire_text(frame)), ack)
                assert (after[0] - before[0], after[1] - before[1]) == (1, cost), (frame, ack)
                seen["receipts"] += 1
                firsts[seq] = ack
            else:
                assert after == before, (frame, form)
                if seq in firsts and ack["ok"]:
                    # A replay: the first answer again, at the current cursor.
                    seen["replays"] += 1
                    assert {**ack, "appliedThrough": None} == {
                        **firsts[seq],
                        "appliedThrough": None,
                    }
                seen["conflicts"] += ack.get("code") == "delivery_conflict"
        view = sut.m.read_view(task, 1, ["p1"])
        assert view is not None
        for p in view.projects:
            for e in p.entries:
                if e.value is not None:
                    seen["installed"] += 1
                    assert e.value.reveal().startswith("CANARY-")

    check()
    # Not vacuous: many applies took the fast path, many were remembered
    # (and costed), replayed in another form, or conflicted. Replays vary
    # most between random runs (70-150 of 400 examples seen, 41 once), so
    # their floor sits well below that spread.
    assert seen["fast"] >= 100, seen
    assert seen["receipts"] >= 200, seen
    assert seen["replays"] >= 20, seen
    assert seen["conflicts"] >= 20, seen
    assert seen["installed"] >= 300, seen


@pytest.mark.parametrize("form", ["wire", "wire_bytes", "sorted", "ascii", "model"])
def test_er025_queued_text_frames_equal_queued_values(form: str) -> None:
    """Frames that wait in the task's lane (a read pending) as text: a new
    apply, a replay of the pending one, a conflicting replay, an apply with
    a hostile reason; answered as the same frames given as values."""
    reason = {"kind": "withhold", "reason": 'é"\\\u2028' + _ASTRAL}
    first = apply(state("A", gen=2, ref=staged_ref(2)), 1)
    frames = [
        apply(state("B", gen=2, ref=staged_ref(4), binding=reason), 2, version=3),
        first,
        {**first, "state": state("A", gen=2, ref=staged_ref(2), lg=1)},
        apply(state("C", ref=None, tomb=True), 3, version=4),
        apply(state("B", gen=2, ref=staged_ref(4), binding=reason), 2, version=3),
    ]
    out = []
    for feed in ("value", form):
        d = _driver("t1", "org1")
        (rd,) = reads(d.raw(_form(first, feed)))
        cmds = [d.raw(_form(f, feed)) for f in frames]
        assert cmds == [[]] * len(frames)  # all queued
        got: list[Any] = []
        pending = [rd]
        while pending:
            r = pending.pop(0)
            more = d.send(r.reader.answer(r))
            got += more
            pending += reads(more)
        out.append((_norm(got), _observe(d, "t1")))
    assert out[1] == out[0]
    got_acks = [c for c in out[0][0] if c.startswith("SendAck(")]
    assert len(got_acks) == 1 + len(frames)


# ---------------------------------------------------------------------------
# handle() never raises


class _RaisingEq:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")


class _StrSub(str):
    pass


class _BytesSub(bytes):
    pass


class _HostileStr(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = str.__hash__

    def startswith(self, *a: Any) -> bool:  # type: ignore[override]
        raise RuntimeError("startswith")

    def encode(self, *a: Any, **k: Any) -> bytes:  # type: ignore[override]
        raise RuntimeError("encode")


def _wire_apply(**over: Any) -> str:
    return wire_text({**apply(state("A", gen=2, ref=staged_ref(2)), 1), **over})


_BASE = _wire_apply()
_HOSTILE: dict[str, Any] = {
    "10MB str": "x" * 10_000_000,
    "10MB JSON string": '"' + "x" * 10_000_000 + '"',
    "10MB bytes": b"{" * 10_000_000,
    "apply with 10MB of spaces": _BASE[:-2] + " " * 10_000_000 + "}}",
    "10MB reason": _BASE.replace(
        '"binding":null', '"binding":{"kind":"withhold","reason":"' + "y" * 10_000_000 + '"}'
    ),
    "deep list": "[" * 100_000 + "]" * 100_000,
    "deep object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep in the state": _BASE.replace(
        '"listingGeneration":0', '"listingGeneration":' + "[" * 5000 + "]" * 5000
    ),
    "5000-digit integer": _BASE.replace('"recordVersion":2', '"recordVersion":1' + "0" * 5000),
    "5000-digit integer bytes": _BASE.replace(
        '"recordVersion":2', '"recordVersion":1' + "0" * 5000
    ).encode(),
    "1e400": _BASE.replace('"recordVersion":2', '"recordVersion":1e400'),
    "str subclass": _StrSub(_BASE),
    "hostile str subclass": _HostileStr(_BASE),
    "bytes subclass": _BytesSub(_BASE.encode()),
    "memoryview": memoryview(_BASE.encode()),
    "object raising on ==": _RaisingEq(),
    "kind a hostile str": {**json.loads(_BASE), "kind": _HostileStr("env.replica.v1.apply")},
    "invalid UTF-8 bytearray": bytearray(b'{"kind":"\xff"}'),
    "encoded surrogate": _BASE.encode().replace(b"t1", b"\xed\xa0\x80"),
    "NUL": "\x00",
    "empty bytes": b"",
}


@pytest.mark.parametrize("name", list(_HOSTILE), ids=list(_HOSTILE))
def test_er024_hostile_frames_never_raise_and_change_nothing_when_refused(name: str) -> None:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    before = _observe(d, "t1")
    got = d.m.handle(EnvFrameReceived(now_ms=0, frame=_HOSTILE[name]))
    if name == "apply with 10MB of spaces":
        # Valid JSON of a valid apply (whitespace is JSON): taken, it waits
        # on its read.
        assert [type(c) for c in got] == [ReadStagedValue]
        return
    if name == "str subclass" and type(got[0]) is ReadStagedValue:
        # Undecided by the docs (``str``): taken as text is fine too.
        assert len(got) == 1
        return
    assert len(got) == 1, got
    assert type(got[0]) is FrameRejected, got
    assert _observe(d, "t1") == before
    # The lane is free: the next apply is answered.
    nxt = d.step(_wire_apply())
    assert any(type(c) is SendAck and c.ack.ok for c in nxt)


def _pending_read() -> tuple[Driver, ReadStagedValue]:
    d = Driver()
    d.activate()
    d.ready_snapshot()
    (rd,) = reads(d.raw(_wire_apply()))
    assert isinstance(rd, ReadStagedValue)
    return d, rd


def _valid_envelope(rd: ReadStagedValue) -> str:
    return wire_text(
        {
            "v": 2,
            "kind": "project-env",
            "orgId": "org1",
            "projectId": rd.project_id,
            "key": rd.key,
            "stagingId": rd.staging_id,
            "value": "CANARY-1",
        }
    )


def test_er098_envelope_in_a_plain_str_subclass_is_authenticated() -> None:
    d, rd = _pending_read()
    got = d.send(
        ValueReadCompleted(now_ms=0, cmd_id=rd.cmd_id, raw=Secret(_StrSub(_valid_envelope(rd))))
    )
    (ack,) = [c.ack for c in got if type(c) is SendAck]
    assert ack.ok
    assert d.value("A") == "CANARY-1"


_HOSTILE_RAWS: dict[str, Any] = {
    "None": None,
    "a str, not a Secret": "CANARY",
    "bytes, not a Secret": b"{}",
    "empty": Secret(""),
    "10MB value": Secret(
        '{"v":2,"kind":"project-env","orgId":"org1","projectId":"p1",'
        '"key":"A","stagingId":"' + sid(2) + '","value":"' + "v" * 10_000_000 + '"}'
    ),
    "10MB prefix of the head": Secret('{"v":2,' + " " * 10_000_000),
    "deep": Secret("[" * 100_000),
    "5000-digit v": Secret('{"v":2' + "0" * 5000 + "}"),
}


@pytest.mark.parametrize("name", list(_HOSTILE_RAWS), ids=list(_HOSTILE_RAWS))
def test_er098_hostile_read_completions_never_raise(name: str) -> None:
    d, rd = _pending_read()
    got = d.m.handle(ValueReadCompleted(now_ms=0, cmd_id=rd.cmd_id, raw=_HOSTILE_RAWS[name]))
    (ack,) = [c.ack for c in got if type(c) is SendAck]
    assert ack.ok
    assert ack.result is not None
    installed = name == "10MB value"
    assert (type(ack.result.materialization).__name__ == "Installed") is installed
    assert (d.value("A") is not None) is installed


def test_er098_hostile_str_subclass_envelope_never_raises() -> None:
    d, rd = _pending_read()
    raw = Secret(_HostileStr(_valid_envelope(rd)))
    got = d.m.handle(ValueReadCompleted(now_ms=0, cmd_id=rd.cmd_id, raw=raw))
    (ack,) = [c.ack for c in got if type(c) is SendAck]
    assert ack.ok
    # The text is a valid envelope of the record: the full parse (which
    # reads the string's characters, never its overridden methods)
    # authenticates it; the fast path is not taken for a str subclass.
    assert ack.result is not None
    assert type(ack.result.materialization).__name__ == "Installed"
    assert d.value("A") == "CANARY-1"


# ---------------------------------------------------------------------------
# Secrets on the error paths, both orders, plain and escaped org ids


@pytest.mark.parametrize("org", ["org1", 'o"rg', "ørg"])
def test_er098_canary_never_leaves_a_secret_on_error_paths(org: str) -> None:
    d = Driver()
    d.activate(org=org, reader=EnvReader("r", org))
    d.ready_snapshot()
    texts = []
    for order in ("wire", "sorted"):
        for env_org in (org, "other-org"):
            env = {
                "v": 2,
                "kind": "project-env",
                "orgId": env_org,
                "projectId": "p1",
                "key": "A",
                "stagingId": sid(9),
                "value": "CANARY-secret",
            }
            full = wire_text(env, order=order)
            texts += [full, full[:-1], full[:-2], full[: len(full) // 2], full + "x"]
    texts.append(texts[0])  # the last answer is the org's own envelope
    cmds: list[Any] = []
    for i, raw in enumerate(texts, start=1):
        frame = wire_text(apply(state("A", gen=1 + i, ref=staged_ref(9)), i, version=1 + i))
        (rd,) = reads(d.raw(frame))
        cmds += d.send(ValueReadCompleted(now_ms=0, cmd_id=rd.cmd_id, raw=Secret(raw)))
    # Frames carrying the canary, refused.
    for bad in (
        _wire_apply(taskId="CANARY-secret\x01"),
        _BASE + "CANARY-secret",
        b"CANARY-secret\xff",
    ):
        cmds += d.raw(bad)
    assert d.value("A") == "CANARY-secret"  # not vacuous: installed from a good text
    assert sum(type(c) is FrameRejected for c in cmds) == 3
    for c in cmds:
        assert "CANARY" not in repr(c)
        if type(c) is SendAck:
            assert "CANARY" not in json.dumps(encode(c.ack))
    assert "CANARY" not in repr(d.m.read_status("t1"))
    assert "CANARY" not in repr(d.m.read_view("t1", 1, ["p1"]))


# ---------------------------------------------------------------------------
# The benchmark's checks


def _bench() -> Any:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_replica.py"
    spec = importlib.util.spec_from_file_location("bench_replica_b8", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_replica_apply_check_catches_a_wrong_value() -> None:
    bench = _bench()
    bench.bench_apply(200)  # the unpatched core passes
    with (
        mock.patch.object(replica_values, "_staged_envelope_fast", return_value=Secret("WRONG")),
        pytest.raises(AssertionError),
    ):
        bench.bench_apply(200)


_real_ack = ReplicaManager._ack
_real_start = ReplicaManager._materialize_start


def _no_apply_ack(self: Any, frame: Any, *a: Any, **k: Any) -> None:
    if type(frame) is not EnvApply:
        _real_ack(self, frame, *a, **k)


def _error_apply_ack(self: Any, frame: Any, cur: Any, ok: bool, *a: Any, **k: Any) -> None:
    if type(frame) is EnvApply:
        _real_ack(self, frame, cur, False, "delivery_gap", "delivery_gap")
    else:
        _real_ack(self, frame, cur, ok, *a, **k)


def _no_apply_read(self: Any, op: Any, *a: Any) -> Any:
    got = _real_start(self, op, *a)
    if got is None and type(op.frame) is EnvApply and type(self._out[-1]) is ReadStagedValue:
        self._out.pop()  # the read command is lost; the core still waits for it
    return got


# Fixed: the apply case once checked only receipts and the
# view, so a core that sent no ack, an error ack or no read command passed.


@pytest.mark.parametrize(
    "patch",
    [
        ("_ack", _no_apply_ack),
        ("_ack", _error_apply_ack),
        ("_materialize_start", _no_apply_read),
    ],
    ids=["no_ack", "error_ack", "no_read_command"],
)
def test_bench_replica_apply_check_catches_a_wrong_answer(patch: tuple[str, Any]) -> None:
    bench = _bench()
    with (
        mock.patch.object(ReplicaManager, patch[0], patch[1]),
        pytest.raises(AssertionError),
    ):
        bench.bench_apply(200)
