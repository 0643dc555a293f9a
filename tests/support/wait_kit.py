"""Bounded waits for shell tests that watch another thread or task.

Real time, briefly (shell tests only; core tests drive events instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio


def wait_until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``cond`` every 2 ms; fail the test after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


async def await_until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """:func:`wait_until` inside an event loop (anyio: asyncio or trio)."""
    with anyio.fail_after(timeout_s):
        while not cond():
            await anyio.sleep(0.002)
