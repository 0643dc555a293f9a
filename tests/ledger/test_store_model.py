"""A model-based property test of the store: random appends (keyed or not,
with right, wrong or no expected ordinal), compactions (current or stale),
reads and reopenings, checked against a few lines of model."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasegate.core.ledger import OrchestrationConcurrencyError, OrchestrationSnapshotRequiredError
from leasegate.shells.store import AppendEventInput, OrchestrationEventStore

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.sampled_from([None, "k1", "k2", "k3", "k4"]),
            st.sampled_from(["none", "right", "wrong"]),
        ),
        st.tuples(st.just("compact"), st.booleans(), st.none()),
        st.tuples(st.just("reopen"), st.none(), st.none()),
        st.tuples(st.just("read_after"), st.integers(0, 12), st.none()),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_ES_store_matches_a_simple_model(script: list[tuple[str, Any, Any]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        make = lambda: OrchestrationEventStore(d, "model", max_tail_events=3)  # noqa: E731
        store = make()
        highest = 0
        through = 0
        keys: dict[str, int] = {}
        for op, a, b in script:
            if op == "append":
                expected = {"none": None, "right": highest, "wrong": highest + 1}[b]
                item = AppendEventInput(
                    type="task.created",
                    aggregate_id="x",
                    actor="runtime",
                    payload={},
                    idempotency_key=a,
                )
                if a in keys:
                    assert store.append(item, expected_last_ordinal=expected)["ordinal"] == keys[a]
                elif b == "wrong":
                    with pytest.raises(OrchestrationConcurrencyError):
                        store.append(item, expected_last_ordinal=expected)
                else:
                    got = store.append(item, expected_last_ordinal=expected)["ordinal"]
                    highest += 1
                    assert got == highest
                    if a is not None:
                        keys[a] = got
            elif op == "compact":
                target = highest if a else highest - 1
                done = store.compact_if_needed(target, lambda h=highest: {"h": h})
                assert done == (a and highest - through >= 3)
                if done:
                    through = highest
            elif op == "reopen":
                store = make()
            else:
                if a < through:
                    with pytest.raises(OrchestrationSnapshotRequiredError):
                        store.read_after(a)
                else:
                    got_ordinals = [e["ordinal"] for e in store.read_after(a)]
                    assert got_ordinals == list(range(max(a, through) + 1, highest + 1))
            assert [e["ordinal"] for e in store.read_all()] == list(range(through + 1, highest + 1))
