"""The vocabulary every core machine shares: events, commands, ids.

Events are what happened (a frame arrived, a timer fired, a read completed,
the host called an API); commands are what the shell must do. Both are
frozen, keyword-only dataclasses with a repr that never shows a secret
(secrets are :class:`~leasegate.core.Secret` values).

* Every event carries ``now_ms``: the current time in milliseconds since the
  Unix epoch, as read by the shell. It is the only clock the core has.
* A command that expects a completion carries ``cmd_id``, an integer the core
  chose; the completion event echoes it. Ids increase by one per machine and
  are never reused, so a completion of a cancelled or superseded operation
  is recognized and ignored.
* Op ids sent on the wire come from an :class:`OpIdSource` built from a seed
  given at construction, never from a random source, so that the same
  construction and the same events give the same commands, byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Final

__all__ = ["Command", "Event", "OpIdSource"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event fed to a core machine.

    Attributes:
        now_ms: the time at which the event happened, in milliseconds since
            the Unix epoch (an ``int``).
    """

    now_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Base of every command a core machine emits."""


class OpIdSource:
    """Deterministic op ids (``[A-Za-z0-9_-]{1,128}``) from a seed.

    The reference draws op ids from ``randomUUID``; the core draws them from
    this source so that runs replay exactly. Ids are the first 32 hex digits of
    SHA-256 over ``seed`` and a counter: unique per source, unpredictable to a
    peer that does not know the seed, and valid ``OP_ID`` values.

    Args:
        seed: any text; the shells pass random bytes (hex) at construction
            and record the seed in the trace header.
    """

    __slots__ = ("_counter", "_seed")

    def __init__(self, seed: str) -> None:
        self._seed: Final = seed.encode("utf-8", "surrogatepass")
        self._counter = 0

    def next(self) -> str:
        """Return the next op id."""
        self._counter += 1
        h = hashlib.sha256(self._seed + b"\x00" + str(self._counter).encode())
        return h.hexdigest()[:32]
