"""The registry's dispatch tables: one handler per exported event class, frames by class.

``LeaseRegistry.handle`` looks an event's type up in ``_HANDLERS`` (and a
received frame's in ``_FRAME_HANDLERS``) instead of an ``isinstance`` chain.
These tests keep the table and the exported vocabulary in step, and check
what the table does not list: an unknown event is ignored, an event of a
subclass is handled as its class.
"""

from __future__ import annotations

import dataclasses
import inspect

from registry_kit import TASK, Driver, kinds

import leasegate.core.registry as registry
from leasegate.core._base import Event
from leasegate.core.registry import CloseGate, GateCallbackDone, StartRun, TimerFired
from leasegate.core.registry._machine import _FRAME_HANDLERS, _HANDLERS
from leasegate.core.wire import lease as wire_lease


def _exported_event_classes() -> list[type[Event]]:
    return [
        obj
        for name in registry.__all__
        if inspect.isclass(obj := getattr(registry, name)) and issubclass(obj, Event)
    ]


def test_every_exported_event_class_has_exactly_one_handler() -> None:
    exported = _exported_event_classes()
    assert exported, "the registry exports no event class"
    assert len(exported) == len(set(exported))
    missing = [cls.__name__ for cls in exported if cls not in _HANDLERS]
    assert missing == []
    assert all(callable(_HANDLERS[cls]) for cls in exported)


def test_no_handler_is_for_a_class_the_registry_does_not_export() -> None:
    exported = set(_exported_event_classes())
    extra = [cls.__name__ for cls in _HANDLERS if cls not in exported]
    assert extra == []
    assert len(_HANDLERS) == len(exported)


def test_frame_handlers_are_for_the_cloud_frames_the_registry_answers() -> None:
    answered = {
        wire_lease.LeaseGrant,
        wire_lease.LeaseUnavailable,
        wire_lease.LeaseDeny,
        wire_lease.LeaseStale,
        wire_lease.CredentialChanged,
        wire_lease.CredentialRefreshResult,
    }
    assert set(_FRAME_HANDLERS) == answered
    # The registry's own requests are frames it sends, never answers.
    assert wire_lease.LeaseRequest not in _FRAME_HANDLERS
    assert wire_lease.CredentialRefresh not in _FRAME_HANDLERS


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _NotARegistryEvent(Event):
    cmd_id: int


def test_an_event_of_a_class_without_a_handler_is_ignored() -> None:
    d = Driver()
    d.usable()
    before = d.reg.status(TASK)
    assert d.reg.handle(_NotARegistryEvent(now_ms=d.now, cmd_id=1)) == []
    assert d.reg.handle(object()) == []  # type: ignore[arg-type]
    assert d.reg.internal_errors == 0
    assert d.reg.status(TASK) == before


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _ShellStartRun(StartRun):
    """A shell's own subclass of an exported event."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _ShellGateDone(GateCallbackDone):
    pass


def test_an_event_of_a_subclass_is_handled_as_its_class() -> None:
    plain, sub = Driver(), Driver()
    first = plain.reg.handle(
        StartRun(now_ms=plain.now, call_id=1, task_id=TASK, run_epoch=1, recovery=False)
    )
    again = sub.reg.handle(
        _ShellStartRun(now_ms=sub.now, call_id=1, task_id=TASK, run_epoch=1, recovery=False)
    )
    assert repr(again) == repr(first)
    assert kinds(again) == ["close:starting"]
    close, plain_close = again[0], first[0]
    assert isinstance(close, CloseGate)
    assert isinstance(plain_close, CloseGate)
    out = sub.reg.handle(_ShellGateDone(now_ms=sub.now, cmd_id=close.cmd_id))
    expected = plain.reg.handle(GateCallbackDone(now_ms=plain.now, cmd_id=plain_close.cmd_id))
    assert repr(out) == repr(expected)
    assert "send:lease.request" in kinds(out)
    assert sub.reg.internal_errors == plain.reg.internal_errors == 0


def test_a_timer_fire_for_no_armed_timer_is_ignored() -> None:
    d = Driver()
    d.usable()
    assert d.reg.handle(TimerFired(now_ms=d.now, timer_id=10_000)) == []
    assert d.reg.internal_errors == 0
