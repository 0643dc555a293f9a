"""The runtime's dispatch is data: one handler per event class it exports."""

from __future__ import annotations

import inspect

import leasegate.core.registry as registry
import leasegate.core.runtime as runtime
from leasegate.core._base import Event
from leasegate.core.runtime._machine import _HANDLERS, _REGISTRY_HANDLERS


def _events(module: object) -> set[type[Event]]:
    names = getattr(module, "__all__", ())
    found = {getattr(module, n) for n in names}
    return {c for c in found if inspect.isclass(c) and issubclass(c, Event)}


def test_every_exported_runtime_event_has_exactly_one_handler() -> None:
    exported = _events(runtime)
    assert exported, "the runtime exports events"
    assert set(_HANDLERS) == exported
    assert not set(_HANDLERS) & set(_REGISTRY_HANDLERS)


def test_registry_events_looked_at_first_are_registry_events() -> None:
    reg = _events(registry)
    assert set(_REGISTRY_HANDLERS) <= reg
    assert not set(_REGISTRY_HANDLERS) & _events(runtime)
