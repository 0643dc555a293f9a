"""The replica's dispatch table: one handler per exported event class.

:meth:`ReplicaManager.handle` looks the event's exact type up in
``_manager._HANDLERS``; these tests check that table against the event
classes ``leasegate.core.replica`` exports, and that an event outside it is
ignored (no commands, no exception).
"""

from __future__ import annotations

import dataclasses

from replica_kit import TASK, Driver

from leasegate.core import replica
from leasegate.core._base import Event
from leasegate.core.replica import DropAll, NotifyChange, ReplicaManager
from leasegate.core.replica._manager import _HANDLERS

EXPORTED_EVENTS: frozenset[type[Event]] = frozenset(
    obj
    for obj in (getattr(replica, name) for name in replica.__all__)
    if isinstance(obj, type) and issubclass(obj, Event)
)


def test_the_replica_exports_its_ten_event_classes() -> None:
    names = sorted(cls.__name__ for cls in EXPORTED_EVENTS)
    assert names == [
        "ActivateAssignment",
        "AwaitReady",
        "DropAll",
        "DropAssignment",
        "EnvFrameReceived",
        "ExpectActivation",
        "ReadinessDeadline",
        "SettleActivation",
        "ValueReadCompleted",
        "ValueReadFailed",
    ]


def test_every_exported_event_class_has_exactly_one_handler() -> None:
    keys = list(_HANDLERS)
    for cls in EXPORTED_EVENTS:
        assert keys.count(cls) == 1, cls.__name__


def test_no_handler_is_for_a_class_the_replica_does_not_export() -> None:
    extra = [cls.__name__ for cls in _HANDLERS if cls not in EXPORTED_EVENTS]
    assert extra == []


def test_every_handler_is_a_method_of_the_manager() -> None:
    for cls, handler in _HANDLERS.items():
        assert callable(handler), cls.__name__
        assert getattr(ReplicaManager, handler.__name__) is handler, cls.__name__


def test_an_event_the_table_does_not_hold_is_ignored() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Unknown(Event):
        pass

    d = Driver()
    d.activate()
    d.ready_snapshot()
    assert d.m.handle(Unknown(now_ms=0)) == []
    assert d.m.is_ready(TASK, 1)


def test_a_subclass_of_an_exported_event_is_not_its_parent() -> None:
    """The lookup is by the event's exact type, as ``handle`` always did."""

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class DropAllLater(DropAll):
        pass

    d = Driver()
    d.activate()
    assert d.m.handle(DropAllLater(now_ms=0)) == []
    assert d.m.read_status(TASK) is not None
    assert d.m.handle(DropAll(now_ms=0)) == [NotifyChange(task_id=TASK)]
    assert d.m.read_status(TASK) is None
