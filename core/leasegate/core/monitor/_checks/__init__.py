"""The monitor's checkers: one per property of ``docs/monitor.md``.

Each checker (a :class:`~._base.Checker` subclass, one module each) judges
exactly one property over every item of the stream (``_stream``), from the
shared mirror (``_mirror``) and state of its own, and is the only place that
property is flagged. :data:`CHECKERS` is the monitor: it runs them in this
order on each item, which is the order a step's violations are reported in
when one item breaks several properties (an ``open`` port call: first
``open-after-close``, then ``foreign-env-snapshot``, then
``view-below-floor-or-expired``; a ``ReadParameters``: ``read-on-closed-reader``
before ``foreign-env-snapshot``; an answer: the served view's properties
before ``timer-armed-after-end``; at the step's end ``gate-open-during-cleanup``
before ``secret-in-error``).
"""

from __future__ import annotations

from typing import Final

from ._base import Checker, Flag
from ._cleanup import GateOpenDuringCleanup
from ._close import OpenAfterClose
from ._env import ForeignEnvSnapshot
from ._readers import ReadOnClosedReader
from ._secrets import MAX_SECRETS, MIN_SECRET_CHARS, SecretInError
from ._timers import TimerArmedAfterEnd
from ._views import ViewBelowFloorOrExpired

__all__ = [
    "CHECKERS",
    "MAX_SECRETS",
    "MIN_SECRET_CHARS",
    "Checker",
    "Flag",
    "ForeignEnvSnapshot",
    "GateOpenDuringCleanup",
    "OpenAfterClose",
    "ReadOnClosedReader",
    "SecretInError",
    "TimerArmedAfterEnd",
    "ViewBelowFloorOrExpired",
]

#: The checkers, in the order they see each item.
CHECKERS: Final[tuple[type[Checker], ...]] = (
    GateOpenDuringCleanup,
    ReadOnClosedReader,
    OpenAfterClose,
    ForeignEnvSnapshot,
    ViewBelowFloorOrExpired,
    SecretInError,
    TimerArmedAfterEnd,
)
