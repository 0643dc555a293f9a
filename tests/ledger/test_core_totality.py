"""No input makes the ledger's pure parts raise (core rule), checked with
Hypothesis over arbitrary bytes and JSON values."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leasegate.core.ledger import (
    Baseline,
    DurableTaskRuntimeError,
    OrchestrationEventStoreError,
    is_orchestration_event,
    parse_baseline,
    parse_cursor,
    parse_event_file,
    parse_marker,
    parse_snapshot,
    session_directory_name,
)
from leasegate.core.ledger._runtime import PlannedEvent, TaskRuntimeProjection

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
anything = json_values | st.binary() | st.just(object())


def _bytes_of(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError):
        return b"\xff"


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(), json_values.map(_bytes_of)))
def test_ES_parsers_never_raise(data: bytes) -> None:
    base = Baseline(2, "d" * 64, "0000000000000002.json")
    for out in (
        parse_cursor(data),
        parse_marker(data, "k"),
        parse_baseline(data),
        parse_snapshot(data, base),
        parse_event_file("0000000000000001.json", data),
    ):
        assert (
            out is None
            or not isinstance(out, BaseException)
            or isinstance(out, OrchestrationEventStoreError)
        )


@settings(max_examples=150, deadline=None)
@given(json_values, st.text())
def test_ES_event_validator_and_names_never_raise(value: Any, text: str) -> None:
    assert is_orchestration_event(value) is None or isinstance(value, dict)
    name = session_directory_name(text)
    assert isinstance(name, str | OrchestrationEventStoreError)


@settings(max_examples=100, deadline=None)
@given(anything, anything, anything)
def test_runtime_planners_never_raise(a: Any, b: Any, c: Any) -> None:
    p = TaskRuntimeProjection()
    p.apply(
        {
            "ordinal": 1,
            "type": "objective.created",
            "aggregateId": "o",
            "payload": {
                "objective": {
                    "objectiveId": "o",
                    "status": "active",
                    "acceptanceCriteria": [],
                    "riskBudget": {},
                }
            },
        }
    )
    outs = [
        p.plan_create_objective(objective_id=a, title=b, description=c, now_ms=0),
        p.plan_ensure_objective(a, 0),
        p.plan_record_evidence("o", a, 0),
        p.plan_objective_status(a, "paused", 0),
        p.plan_complete_objective(a, bool(b), 0),
        p.plan_create_task(a, 0),
        p.plan_fail_task(a, b, 0),
        p.plan_queue_attempt(a, b, "x", 0),
        p.plan_lease(a, b, c, "l", 0),
        p.plan_start(a, b, c, 0),
        p.plan_finish(a, b, c, "completed", "r", 0),
        p.plan_cancel_attempt(a, b, 0),
    ]
    for out in outs:
        assert out is None or isinstance(out, PlannedEvent | DurableTaskRuntimeError)
    result = p.apply(a if isinstance(a, dict) else {"x": a})
    assert result is None or isinstance(result, DurableTaskRuntimeError)
