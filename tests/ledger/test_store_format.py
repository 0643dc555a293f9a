"""Pure format rules of the event store (core): names, records, digests, decisions."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from leasegate.core.ledger import (
    DEFAULT_MAX_IDEMPOTENCY_EVENTS,
    DEFAULT_MAX_TAIL_BYTES,
    DEFAULT_MAX_TAIL_EVENTS,
    ORCHESTRATION_SCHEMA_VERSION,
    Baseline,
    Cursor,
    OrchestrationConcurrencyError,
    OrchestrationEventStoreError,
    OrchestrationSnapshotRequiredError,
    check_tail,
    compaction_due,
    cursor_probe,
    event_file_name,
    file_ordinal,
    idempotency_marker_name,
    is_orchestration_event,
    merge_retained,
    parse_baseline,
    parse_cursor,
    parse_event_file,
    parse_marker,
    parse_snapshot,
    plan_reconciliation,
    positive_safe_integer,
    prelock_skip,
    serialize,
    session_directory_name,
    snapshot_digest,
    snapshot_record,
)

NOW = "2026-01-01T00:00:00.000Z"


def event(
    ordinal: int = 1, key: str | None = None, payload: Any = None, **kw: Any
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "schemaVersion": 1,
        "ordinal": ordinal,
        "eventId": f"e{ordinal}",
        "type": "task.created",
        "aggregateId": "a",
        "actor": "runtime",
        "occurredAt": NOW,
    }
    if key is not None:
        e["idempotencyKey"] = key
    e["payload"] = {} if payload is None else payload
    e.update(kw)
    return e


@pytest.mark.parametrize(
    ("session", "name"),
    [
        ("abc", "abc-ba7816bf8f01cfea"),
        ("", "session-e3b0c44298fc1c14"),
        ("run 1/ü", "run_201_2F_C3_BC-35e2c4dbd795762a"),
        ("../..", ".._2F..-0cfd1c96cbc0c0e0"),
        ("x" * 100, "x" * 80 + "-09ecb6ebc8bcefc7"),
    ],
)
def test_ES_001_session_directory_name_vectors(session: str, name: str) -> None:
    assert session_directory_name(session) == name


def test_ES_001_lone_surrogate_session_id_is_an_error() -> None:
    assert isinstance(session_directory_name("a\ud800"), OrchestrationEventStoreError)


@pytest.mark.parametrize(
    ("name", "ordinal"),
    [
        ("0000000000000007.json", 7),
        ("9007199254740991.json", 2**53 - 1),
        ("5.json", None),
        ("00000000000000005.json", None),
        ("0000000000000005.json.tmp", None),
        ("0000000000000005.json\n", None),
        ("000000000000000٥.json", None),
        ("0000000000000005.json.1234.abcdef.tmp", None),
    ],
)
def test_ES_003_file_name_pattern_is_sixteen_ascii_digits(name: str, ordinal: int | None) -> None:
    assert file_ordinal(name) == ordinal
    if ordinal is not None:
        assert event_file_name(ordinal) == name


def test_ES_004_serialized_form_and_172_byte_vector() -> None:
    e = event(type="task.created")
    e["type"] = "t"  # the catalog's vector uses type "t"
    data = serialize(e)
    assert len(data) == 172
    assert data.endswith(b"}\n")
    assert not data.endswith(b"\n\n")
    assert b'\n\t"ordinal": 1,' in data
    assert list(json.loads(data)) == [
        "schemaVersion",
        "ordinal",
        "eventId",
        "type",
        "aggregateId",
        "actor",
        "occurredAt",
        "payload",
    ]
    assert "ü".encode() in serialize({"v": "ü"})


def test_ES_005_marker_name_is_sha256_of_key() -> None:
    assert (
        idempotency_marker_name("k1")
        == "6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0.json"
    )
    assert idempotency_marker_name("ü") == hashlib.sha256("ü".encode()).hexdigest() + ".json"


def test_ES_010_tail_bytes_count_utf8_bytes_not_characters() -> None:
    e = event(payload={"v": "ü"})
    e["type"] = "t"
    data = serialize(e)
    assert len(data) == 186
    assert len(data.decode()) == 185


def test_ES_017_marker_validation() -> None:
    good = json.dumps({"version": 1, "key": "k1", "ordinal": 3}).encode()
    assert parse_marker(good, "k1") == 3
    assert parse_marker(json.dumps({"version": 1, "key": "k1", "ordinal": 3.0}).encode(), "k1") == 3
    err = parse_marker(b"{not json", "k1")
    assert isinstance(err, OrchestrationEventStoreError)
    assert str(err).startswith("Failed to parse orchestration idempotency marker: ")
    for bad in (
        [],
        {"version": 2, "key": "k1", "ordinal": 3},
        {"version": 1, "key": "k2", "ordinal": 3},
        {"version": 1, "key": "k1", "ordinal": 0},
        {"version": 1, "key": "k1", "ordinal": True},
        {"version": 1, "key": "k1", "ordinal": 2**53},
    ):
        err = parse_marker(json.dumps(bad).encode(), "k1")
        assert isinstance(err, OrchestrationEventStoreError)
        assert str(err) == "Invalid orchestration idempotency marker."


def test_ES_026_event_file_errors_name_the_file() -> None:
    name = "0000000000000003.json"
    err = parse_event_file(name, b'{"schemaVersion": 1, ')
    assert isinstance(err, OrchestrationEventStoreError)
    assert str(err).startswith(f"Failed to parse orchestration event {name}: ")
    assert err.file == name
    err = parse_event_file(name, json.dumps(event(3, type="nope")).encode())
    assert str(err) == f"Invalid orchestration event record: {name}"
    assert parse_event_file(name, serialize(event(3))) == event(3)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.update(type="unknown.type"),
        lambda e: e.update(aggregateId=""),
        lambda e: e.update(actor="robot"),
        lambda e: e.update(ordinal=0),
        lambda e: e.update(ordinal=True),
        lambda e: e.update(schemaVersion=2),
        lambda e: e.update(payload=[]),
        lambda e: e.update(payload={"x": float("nan")}),
        lambda e: e.update(idempotencyKey=""),
        lambda e: e.update(extra=1),
        lambda e: e.pop("eventId"),
        lambda e: e.update(payload={"x": "\ud800"}),
    ],
)
def test_ES_013_is_orchestration_event_refuses_invalid_records(mutate: Any) -> None:
    e = event()
    mutate(e)
    assert is_orchestration_event(e) is None


def test_ES_013_integral_float_ordinal_counts_and_is_normalized() -> None:
    e = event(4)
    e["ordinal"] = 4.0
    out = is_orchestration_event(e)
    assert out is not None
    assert out["ordinal"] == 4
    assert type(out["ordinal"]) is int


def test_ES_033_tail_gap_vectors() -> None:
    err = check_tail([1, 3, 4], 0, None)
    assert isinstance(err, OrchestrationEventStoreError)
    assert str(err) == "Missing orchestration event ordinal 2 before 0000000000000003.json."
    err = check_tail([2, 3], 0, None)
    assert str(err) == "Missing orchestration event ordinal 1 before 0000000000000002.json."
    # files at or below T are skipped, gaps there are fine
    assert check_tail([1, 5, 6], 4, None) == 6
    assert check_tail([], 4, None) == 4


def test_ES_034_cursor_ahead_vector() -> None:
    err = check_tail([1, 2, 3], 0, Cursor(4, 10))
    assert isinstance(err, OrchestrationEventStoreError)
    assert str(err) == "Orchestration cursor 4 is ahead of the last committed event 3."
    assert check_tail([1, 2, 3], 0, Cursor(2, 10)) == 3


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"not json",
        b"[]",
        b'{"version": 2, "lastOrdinal": 1}',
        b'{"version": 1, "lastOrdinal": -1}',
        b'{"version": 1, "lastOrdinal": 1.5}',
        b'{"version": 1, "lastOrdinal": 1, "tailBytes": null}',
        b'{"version": 1, "lastOrdinal": 1, "tailBytes": -3}',
        b'{"version": true, "lastOrdinal": 1}',
    ],
)
def test_ES_035_invalid_cursor_counts_as_absent(data: bytes | None) -> None:
    assert parse_cursor(data) is None


def test_ES_035_valid_cursor_tail_bytes_optional() -> None:
    assert parse_cursor(b'{"version": 1, "lastOrdinal": 3}') == Cursor(3, None)
    assert parse_cursor(b'{"version": 1, "lastOrdinal": 3, "tailBytes": 9}') == Cursor(3, 9)


def test_ES_036_compaction_boundaries_with_defaults() -> None:
    assert not compaction_due(255, 100, DEFAULT_MAX_TAIL_EVENTS, DEFAULT_MAX_TAIL_BYTES)
    assert compaction_due(256, 100, DEFAULT_MAX_TAIL_EVENTS, DEFAULT_MAX_TAIL_BYTES)
    assert not compaction_due(1, 4_194_303, DEFAULT_MAX_TAIL_EVENTS, DEFAULT_MAX_TAIL_BYTES)
    assert compaction_due(1, 4_194_304, DEFAULT_MAX_TAIL_EVENTS, DEFAULT_MAX_TAIL_BYTES)


def test_ES_038_prelock_skip_rule() -> None:
    assert prelock_skip(Cursor(5, 100), 0, 5, 256, 1000)
    assert not prelock_skip(Cursor(5, None), 0, 5, 256, 1000)
    assert not prelock_skip(Cursor(4, 100), 0, 5, 256, 1000)
    assert not prelock_skip(Cursor(5, 1000), 0, 5, 256, 1000)
    assert not prelock_skip(Cursor(300, 10), 0, 300, 256, 1000)
    assert prelock_skip(Cursor(300, 10), 100, 300, 256, 1000)
    assert not prelock_skip(None, 0, 0, 256, 1000)


def test_ES_041_snapshot_and_baseline_records() -> None:
    rec = snapshot_record(7, NOW, {"a": 1}, [event(7, key="k")])
    assert list(rec) == [
        "version",
        "schemaVersion",
        "throughOrdinal",
        "createdAt",
        "projection",
        "idempotencyEvents",
        "digest",
    ]
    assert rec["digest"] == snapshot_digest(7, NOW, {"a": 1}, [event(7, key="k")])
    from leasegate.core.ledger import baseline_record

    assert baseline_record(7, rec["digest"]) == {
        "version": 1,
        "throughOrdinal": 7,
        "digest": rec["digest"],
        "snapshotFile": "0000000000000007.json",
    }


def test_ES_042_snapshot_digest_vector_and_nested_order() -> None:
    assert (
        snapshot_digest(2, NOW, {"a": 1}, [])
        == "d1163a5648180a1c051331d6cfa9415722aa5d272729a8a3300349b920864dad"
    )
    assert snapshot_digest(2, NOW, {"a": 1, "b": 2}, []) != snapshot_digest(
        2, NOW, {"b": 2, "a": 1}, []
    )


def test_ES_043_retained_merge_vector() -> None:
    retained = [event(4, key="c"), event(5, key="d"), event(6, key="e")]
    out = merge_retained(retained, [event(7, key="a")], 3)
    assert [(e["idempotencyKey"], e["ordinal"]) for e in out] == [("d", 5), ("e", 6), ("a", 7)]
    # a tail event replaces an older one with the same key; unkeyed never retained
    out = merge_retained([event(2, key="x")], [event(3), event(8, key="x")], 5)
    assert [(e["idempotencyKey"], e["ordinal"]) for e in out] == [("x", 8)]


def _baseline_bytes(**over: Any) -> bytes:
    rec: dict[str, Any] = {
        "version": 1,
        "throughOrdinal": 2,
        "digest": "d",
        "snapshotFile": "0000000000000002.json",
    }
    rec.update(over)
    return json.dumps(rec).encode()


def test_ES_050_baseline_validation() -> None:
    assert parse_baseline(_baseline_bytes()) == Baseline(2, "d", "0000000000000002.json")
    err = parse_baseline(b"{oops")
    assert str(err).startswith("Failed to parse orchestration snapshot baseline: ")
    for over in (
        {"version": 2},
        {"throughOrdinal": 0},
        {"throughOrdinal": True},
        {"digest": ""},
        {"digest": 5},
        {"snapshotFile": "2.json"},
        {"snapshotFile": "0000000000000003.json"},
    ):
        err = parse_baseline(_baseline_bytes(**over))
        assert isinstance(err, OrchestrationEventStoreError), over
        assert str(err) == "Invalid orchestration snapshot baseline."
    assert str(parse_baseline(b"[]")) == "Invalid orchestration snapshot baseline."


def _snapshot(**over: Any) -> tuple[bytes, Baseline]:
    rec = snapshot_record(2, NOW, {"a": 1}, [event(2, key="k")])
    base = Baseline(2, rec["digest"], "0000000000000002.json")
    rec.update(over)
    return json.dumps(rec).encode(), base


def test_ES_051_snapshot_validation() -> None:
    data, base = _snapshot()
    snap = parse_snapshot(data, base)
    assert not isinstance(snap, OrchestrationEventStoreError)
    assert snap.through_ordinal == 2
    assert snap.projection == {"a": 1}
    assert str(parse_snapshot(b"{", base)).startswith(
        "Failed to parse orchestration projection snapshot: "
    )
    for over in (
        {"version": 2},
        {"schemaVersion": 2},
        {"throughOrdinal": 3},
        {"createdAt": 5},
        {"projection": []},
        {"idempotencyEvents": {}},
        {"idempotencyEvents": [event(3, key="k")]},
        {"idempotencyEvents": [event(1)]},
        {"idempotencyEvents": [event(1, key="k"), event(2, key="k")]},
        {"digest": 7},
    ):
        data, base = _snapshot(**over)
        assert str(parse_snapshot(data, base)) == "Invalid orchestration projection snapshot.", over
    assert str(parse_snapshot(b"[]", base)) == "Invalid orchestration projection snapshot."


def test_ES_052_content_change_is_digest_mismatch_digest_change_is_invalid() -> None:
    data, base = _snapshot(projection={"a": 2})
    err = parse_snapshot(data, base)
    assert str(err) == "Orchestration projection snapshot digest mismatch."
    data, base = _snapshot(digest="0" * 64)
    assert str(parse_snapshot(data, base)) == "Invalid orchestration projection snapshot."


def test_ES_042_top_level_key_order_of_the_file_does_not_matter() -> None:
    rec = snapshot_record(2, NOW, {"a": 1}, [])
    base = Baseline(2, rec["digest"], "0000000000000002.json")
    shuffled = dict(reversed(list(rec.items())))
    assert not isinstance(parse_snapshot(json.dumps(shuffled).encode(), base), Exception)


@pytest.mark.parametrize(
    ("cursor", "fast", "start"),
    [
        (Cursor(3, 50), True, 4),
        (Cursor(1, 50), False, 2),
        (Cursor(1, None), False, 2),
        (None, False, 1),
        (Cursor(3, None), False, 4),
    ],
)
def test_ES_056_057_reconciliation_plan(cursor: Cursor | None, fast: bool, start: int) -> None:
    plan = plan_reconciliation([1, 2, 3], 0, cursor)
    assert not isinstance(plan, Exception)
    assert plan.highest == 3
    assert plan.fast is fast
    if not fast:
        assert plan.rebuild_from == start


def test_ES_057_cursor_below_baseline_rebuilds_from_T_plus_one() -> None:
    plan = plan_reconciliation([5, 6], 4, Cursor(2, 10))
    assert not isinstance(plan, Exception)
    assert not plan.fast
    assert plan.rebuild_from == 5


def test_ES_059_cursor_at_T_with_bytes_is_repaired() -> None:
    plan = plan_reconciliation([], 4, Cursor(4, 99))
    assert not isinstance(plan, Exception)
    assert not plan.fast
    plan = plan_reconciliation([], 4, Cursor(4, 0))
    assert not isinstance(plan, Exception)
    assert plan.fast


def test_ES_064_defaults() -> None:
    assert (DEFAULT_MAX_TAIL_EVENTS, DEFAULT_MAX_TAIL_BYTES, DEFAULT_MAX_IDEMPOTENCY_EVENTS) == (
        256,
        4 * 1024 * 1024,
        512,
    )
    assert positive_safe_integer(None, 256, "maxTailEvents") == 256


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 2**53])
def test_ES_065_limit_must_be_positive_safe_integer(bad: Any) -> None:
    err = positive_safe_integer(bad, 256, "maxTailBytes")
    assert isinstance(err, OrchestrationEventStoreError)
    assert str(err) == "maxTailBytes must be a positive safe integer."


def test_ES_066_error_classes_and_constants() -> None:
    oce = OrchestrationConcurrencyError(3, 5)
    assert isinstance(oce, OrchestrationEventStoreError)
    assert str(oce) == "Orchestration event cursor changed: expected 3, actual 5."
    assert (oce.expected, oce.actual) == (3, 5)
    sre = OrchestrationSnapshotRequiredError(9)
    assert isinstance(sre, OrchestrationEventStoreError)
    assert sre.through_ordinal == 9
    assert str(sre) == "Orchestration projection snapshot through ordinal 9 is required."
    assert type(oce).__name__ == "OrchestrationConcurrencyError"
    assert type(sre).__name__ == "OrchestrationSnapshotRequiredError"
    assert ORCHESTRATION_SCHEMA_VERSION == 1


def _probe_confirms(cursor: Cursor | None, ordinals: list[int], baseline: int) -> bool:
    probe = cursor_probe(cursor, baseline)
    if probe is None:
        return False
    present = probe.present is None or probe.present in ordinals
    return present and probe.absent not in ordinals


@pytest.mark.parametrize("baseline", [0, 3])
def test_ES_055_cursor_probe_agrees_with_the_fast_path_on_contiguous_tails(
    baseline: int,
) -> None:
    # every layout a crash can leave: a contiguous tail T+1..H (with leftover
    # files at or below T after a crashed pruning), any cursor
    cursors: list[Cursor | None] = [None]
    for last in range(0, 8):
        cursors += [Cursor(last, None), Cursor(last, 0), Cursor(last, 40)]
    checked = 0
    for highest in range(baseline, 7):
        for leftovers in ([], [1, 2, 3][:baseline]):
            ordinals = leftovers + list(range(baseline + 1, highest + 1))
            for cursor in cursors:
                plan = plan_reconciliation(ordinals, baseline, cursor)
                confirmed = _probe_confirms(cursor, ordinals, baseline)
                fast = not isinstance(plan, OrchestrationEventStoreError) and plan.fast
                assert confirmed is fast, (ordinals, cursor)
                if confirmed:
                    probe = cursor_probe(cursor, baseline)
                    assert probe is not None
                    assert not isinstance(plan, Exception)
                    assert (probe.highest, probe.tail_bytes) == (plan.highest, plan.tail_bytes)
                checked += 1
    assert checked > 100


def test_ES_034_056_cursor_probe_checks_for_a_cursor_ahead_or_behind() -> None:
    probe = cursor_probe(Cursor(4, 10), 2)
    assert probe is not None
    assert (probe.present, probe.absent, probe.highest, probe.tail_bytes) == (4, 5, 4, 10)
    # at T there is no tail file to confirm, only the next one to rule out
    probe = cursor_probe(Cursor(2, 0), 2)
    assert probe is not None
    assert (probe.present, probe.absent) == (None, 3)
    # untrusted cursors: list instead
    assert cursor_probe(None, 0) is None
    assert cursor_probe(Cursor(4, None), 0) is None
    assert cursor_probe(Cursor(1, 10), 2) is None  # below T
    assert cursor_probe(Cursor(2, 10), 2) is None  # at T with bytes: crashed compaction
