"""How the conformance kit judges an env ack's text and value: the protocol
fixes the ack's JSON value (every key, type and value), that it is a text
message, and that each key is written once; it leaves key order and
whitespace free (docs/protocol-env.md, "Acks on the wire"). No runner here."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("moto")

from leasegate.conformance import CASES, CaseFailed, Context, expected_ack
from leasegate.conformance._suite import duplicate_key, first_difference
from leasegate.conformance._world import Frame

APPLY = {
    "kind": "env.replica.v1.apply",
    "opId": "conformance-apply-1-K",
    "taskId": "conformance-task",
    "runEpoch": 1,
    "runnerBootId": "boot-1",
    "streamId": "stream-1",
    "attemptId": None,
    "projectId": "web",
    "recordVersion": 4,
    "state": {
        "key": "K",
        "head": {
            "revision": 1,
            "generation": 1,
            "tombstone": False,
            "valueRef": {"kind": "row", "rowId": "row-K"},
        },
        "binding": None,
        "policyEpoch": 1,
        "listingGeneration": 1,
    },
    "delivery": {"streamId": "stream-1", "sequence": 1},
}
EXPECTED = expected_ack(APPLY, sequence=1)


class _NoBridge:
    def frames(self) -> list[Frame]:
        return []


def _ctx() -> Context:
    return Context(
        CASES[3],
        None,
        _NoBridge(),
        None,
        None,
        "boot-1",
        time.monotonic() + 5,  # type: ignore[arg-type]
    )


def _frame(text: str, *, binary: bool = False) -> Frame:
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None
    return Frame("in", 0, text, value, binary)


def _judge(text: str, *, binary: bool = False) -> str | None:
    try:
        _ctx().expect_ack(EXPECTED, _frame(text, binary=binary))
    except CaseFailed as e:
        return str(e)
    return None


def test_an_ack_in_any_key_order_and_spacing_is_the_same_ack() -> None:
    compact = json.dumps(EXPECTED, separators=(",", ":"))
    reordered = json.dumps(dict(reversed(list(EXPECTED.items()))), indent=2)
    assert _judge(compact) is None
    assert _judge(reordered) is None


def test_a_different_value_fails_with_both_texts_and_the_first_difference() -> None:
    seen = json.loads(json.dumps(EXPECTED))
    seen["appliedThrough"]["sequence"] = 2
    detail = _judge(json.dumps(seen))
    assert detail is not None
    assert '"sequence":1' in detail
    assert '"sequence":2' in detail
    assert detail.endswith("(first difference: appliedThrough.sequence)")


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda a: a.update(runEpoch=1.0), "runEpoch"),
        (lambda a: a.update(ok=1), "ok"),
        (lambda a: a.pop("policyEpochs"), "policyEpochs (missing)"),
        (lambda a: a.update(extra=None), "extra (unexpected)"),
        (lambda a: a["result"]["state"]["head"].update(tombstone=0), "result.state.head.tombstone"),
        (lambda a: a.update(policyEpochs=[1, 2]), "policyEpochs (length)"),
    ],
)
def test_a_type_a_missing_or_an_extra_key_is_a_difference(change: Any, where: str) -> None:
    seen = json.loads(json.dumps(EXPECTED))
    change(seen)
    assert first_difference(EXPECTED, seen) == where
    assert _judge(json.dumps(seen)) is not None


def test_a_key_written_twice_fails_even_when_its_last_value_is_right() -> None:
    text = json.dumps(EXPECTED, separators=(",", ":"))
    doubled = text.replace('"ok":true', '"ok":false,"ok":true')
    assert json.loads(doubled) == EXPECTED  # JSON.parse keeps the last value
    assert duplicate_key(doubled) == "ok"
    assert (
        _judge(doubled) == "start: expected each key once per object; seen ok twice in one object"
    )


def test_an_ack_in_a_binary_message_fails() -> None:
    detail = _judge(json.dumps(EXPECTED), binary=True)
    assert detail == "start: expected the ack as a text message; seen a binary message"


def test_an_unsafe_key_is_never_quoted() -> None:
    assert duplicate_key('{"a\\n b":1,"a\\n b":2}') == "<key>"
    assert first_difference({"k": 1}, {"k": 1, "secret value\n": 2}) == "<key> (unexpected)"
    assert first_difference(1, 1) is None
