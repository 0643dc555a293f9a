"""The monitor's input as one ordered stream of items, and small readers of them.

One ``CredentialRuntime.handle`` call (a *step*, numbered from 0) becomes, in
the order things happened:

* :class:`Fed`: the event the runtime was fed;
* one :class:`Called` per gate-port call made during the handle, in call order;
* one :class:`Emitted` per command the handle returned, in command order;
* :class:`Returned`: the handle returned (the end of the step).

The runtime returns a step's commands together, so what a step *means* can
depend on them: whether a host call was answered in its own step, which run
the step is about. :class:`Fed` therefore carries the step's port calls and
commands as look-ahead; the items that follow it are still seen one by one.
Where within a step a command was built relative to a port call is not in the
stream (see ``docs/monitor.md``, "Ordering inside a step"). Items are never
changed once made (plain slotted dataclasses, cheap to build: one per port
call and command).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeAlias, TypeGuard

from ._ports import PortCall, ViewStamp

__all__ = [
    "Called",
    "Emitted",
    "Fed",
    "Item",
    "Returned",
    "Run",
    "frame_fields",
    "is_run",
    "opened_stamp",
    "request_run",
]

#: ``(task id, run epoch)``.
Run: TypeAlias = tuple[str, int]


@dataclasses.dataclass(slots=True)
class Fed:
    """The event a step's ``handle`` was fed.

    Attributes:
        step: the step's index (0 for the first ``observe``).
        event: the event (any object is accepted).
        calls: the step's port calls, in call order (look-ahead: they follow
            as :class:`Called` items).
        commands: the step's commands, in order (look-ahead: they follow as
            :class:`Emitted` items).
    """

    step: int
    event: object
    calls: Sequence[PortCall]
    commands: Sequence[object]


@dataclasses.dataclass(slots=True)
class Called:
    """A gate-port call the runtime made during a step (:class:`PortCall`)."""

    step: int
    call: PortCall


@dataclasses.dataclass(slots=True)
class Emitted:
    """A command a step's ``handle`` returned."""

    step: int
    command: object


@dataclasses.dataclass(slots=True)
class Returned:
    """A step's ``handle`` returned: every item of the step has been seen."""

    step: int


#: The monitor's step type: one item of the stream.
Item: TypeAlias = Fed | Called | Emitted | Returned


def is_run(x: object) -> TypeGuard[int]:
    """Whether ``x`` is a run epoch (an ``int`` ≥ 0, not a ``bool``)."""
    return type(x) is int and x >= 0


def frame_fields(frame: object) -> tuple[object, object, object]:
    """``(kind, taskId, runEpoch)`` of a JSON frame or a decoded frame model."""
    if isinstance(frame, dict):
        return frame.get("kind"), frame.get("taskId"), frame.get("runEpoch")
    tag = getattr(type(frame), "TAG", None)
    kind = tag[1] if isinstance(tag, tuple) and len(tag) == 2 else None
    return kind, getattr(frame, "task_id", None), getattr(frame, "run_epoch", None)


def request_run(req: object) -> tuple[object, object]:
    """``(task_id, run_epoch)`` a consumer request names (its assignment's, else its own)."""
    a = getattr(req, "assignment", None)
    if a is not None:
        return getattr(a, "task_id", None), getattr(a, "run_epoch", None)
    return getattr(req, "task_id", None), getattr(req, "run_epoch", None)


def opened_stamp(call: PortCall) -> ViewStamp | None:
    """The view a gate opened with: the stamp of an ``open`` that did not raise, else ``None``."""
    if call.method != "open" or call.raised or not isinstance(call.result, ViewStamp):
        return None
    return call.result
