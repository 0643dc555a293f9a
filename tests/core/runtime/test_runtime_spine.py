"""Smoke: a start through to a hold."""

from __future__ import annotations

from runtime_kit import TASK, RtDriver

from leasegate.core.runtime import HoldInfo


def test_spine_smoke() -> None:
    d = RtDriver()
    s = d.begin()
    w = d.wait(s)
    d.grant()
    view = d.value(w)
    assert view.assignment.task_id == TASK
    h = d.hold(s)
    assert isinstance(h.value, HoldInfo)  # type: ignore[union-attr]
