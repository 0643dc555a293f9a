"""Breaker tests for the foundation (issue #2) outside the wire codec.

A test marked ``xfail(strict=True)`` documents an open defect (its ``reason``
says what is wrong) and fails as soon as the defect is fixed, so whoever fixes
it removes the mark.
"""

from __future__ import annotations

import pytest

from leasegate.core import JsonError, loads
from leasegate.core.ledger import (
    OrchestrationEventStoreError,
    parse_baseline,
    parse_cursor,
    parse_event_file,
    parse_marker,
)

#: A JSON number Python's int parser refuses (more than 4300 digits);
#: JSON.parse reads it as Infinity.
HUGE_NUMBER = b"1" * 5000


def test_breaker_loads_refuses_bad_text_with_json_error_only() -> None:
    # The cases loads already turns into JsonError (the contract the rest relies on).
    for text in (b"\xff", "[" * 100_000, "NaN", "{", "\ufeff{}", "1 2"):
        with pytest.raises(JsonError):
            loads(text)


@pytest.mark.xfail(
    strict=True,
    reason="_json.loads raises a bare ValueError (int digit limit) for a >4300-digit number, "
    "and ledger/_format.py _parse_json catches only JsonError, so reading an event, "
    "cursor, marker or baseline file holding one raises instead of returning an "
    "OrchestrationEventStoreError / None",
)
def test_breaker_ledger_file_with_a_5000_digit_number_never_raises() -> None:
    assert isinstance(parse_event_file("00000001.json", HUGE_NUMBER), OrchestrationEventStoreError)
    assert parse_cursor(HUGE_NUMBER) is None
    assert isinstance(parse_marker(HUGE_NUMBER, "key"), OrchestrationEventStoreError)
    assert isinstance(parse_baseline(HUGE_NUMBER), OrchestrationEventStoreError)
