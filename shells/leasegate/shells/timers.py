"""Timer heaps: one heap and one sleeper per shell, whatever the number of timers.

The core asks for timers by id and deadline (``ArmTimer``-style commands with
``timer_id`` and a deadline in milliseconds since the epoch) and cancels them
by id; the shell feeds ``TimerFired(timer_id)`` back. Both heaps here keep
every armed timer in one binary heap and sleep in **one** place until the
earliest deadline:

* :class:`ThreadTimerHeap`: one daemon thread waiting on a
  :class:`threading.Condition`, notified when an earlier deadline is armed.
* :class:`AsyncTimerHeap`: one anyio task (asyncio or trio) sleeping until the
  earliest deadline, woken by an event when an earlier deadline is armed.

Guarantees (both): re-arming an id replaces its deadline; a timer whose
:meth:`cancel` returned ``True`` never fires; each armed timer fires at most
once, in deadline order (ties in arming order), at or after its deadline on
the injected clock; arming 10,000 timers adds no thread or task.

Cancelled and replaced entries are dropped lazily (a generation check), and
the heap is compacted when stale entries exceed a quarter of the live ones,
so memory is bounded by 1.25 times the live timers (plus 64 entries); the
compaction's cost, linear in the heap, is amortized over the quarter of the
live timers cancelled or replaced since the last one.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Final

import anyio

__all__ = ["AsyncTimerHeap", "Clock", "ThreadTimerHeap", "wall_clock_ms"]

#: A clock: milliseconds since the Unix epoch.
Clock = Callable[[], int]

#: Longest single sleep, in seconds (a safety net against a clock that jumps).
_MAX_SLEEP_S: Final = 60.0


def wall_clock_ms() -> int:
    """The wall clock in milliseconds since the Unix epoch (the default clock)."""
    return time.time_ns() // 1_000_000


class _Heap:
    """The shared bookkeeping: a heap of ``(deadline_ms, seq, timer_id)`` plus live seqs."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, int]] = []
        self.live: dict[int, int] = {}
        self.seq = itertools.count()

    def arm(self, timer_id: int, deadline_ms: int) -> bool:
        """Arm; return whether the new deadline is now the earliest."""
        seq = next(self.seq)
        self.live[timer_id] = seq
        heapq.heappush(self.heap, (deadline_ms, seq, timer_id))
        self._compact()
        return self.heap[0][1] == seq

    def cancel(self, timer_id: int) -> bool:
        return self.live.pop(timer_id, None) is not None

    def _compact(self) -> None:
        if len(self.heap) > 64 and 4 * len(self.heap) > 5 * len(self.live):
            self.heap = [e for e in self.heap if self.live.get(e[2]) == e[1]]
            heapq.heapify(self.heap)

    def earliest(self) -> int | None:
        while self.heap:
            deadline, seq, tid = self.heap[0]
            if self.live.get(tid) == seq:
                return deadline
            heapq.heappop(self.heap)
        return None

    def pop_due(self, now_ms: int) -> int | None:
        """Remove and return the earliest live timer due at ``now_ms``, if any."""
        while self.heap and self.heap[0][0] <= now_ms:
            _, seq, tid = heapq.heappop(self.heap)
            if self.live.get(tid) == seq:
                del self.live[tid]
                return tid
        return None


class ThreadTimerHeap:
    """Timers on one thread and a :class:`threading.Condition`.

    Args:
        on_fire: called with each fired ``timer_id`` on the timer thread (for
            example ``queue.put``); an exception it raises is swallowed so the
            thread keeps running (the callback must report its own errors).
        clock_ms: the clock (milliseconds since the epoch); the thread sleeps
            ``deadline - clock_ms()`` real milliseconds, so a manual clock must
            call :meth:`poke` after it moves.

    Call :meth:`start` once and :meth:`stop` at the end (joins the thread).
    :meth:`arm` and :meth:`cancel` may be called from any thread, including
    from ``on_fire``.
    """

    def __init__(self, on_fire: Callable[[int], None], *, clock_ms: Clock = wall_clock_ms) -> None:
        self._on_fire = on_fire
        self._clock = clock_ms
        self._heap = _Heap()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="leasegate-timers", daemon=True)

    def start(self) -> None:
        """Start the timer thread.

        Raises:
            RuntimeError: started twice.
        """
        self._thread.start()

    def stop(self, timeout_s: float | None = 5.0) -> None:
        """Stop the thread (no timer fires after this returns) and join it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def arm(self, timer_id: int, deadline_ms: int) -> None:
        """Arm (or re-arm) ``timer_id`` to fire at ``deadline_ms`` (epoch milliseconds)."""
        with self._cond:
            if self._heap.arm(timer_id, deadline_ms):
                self._cond.notify()

    def cancel(self, timer_id: int) -> bool:
        """Cancel ``timer_id``; ``True`` when it was armed (it will then never fire)."""
        with self._cond:
            return self._heap.cancel(timer_id)

    def poke(self) -> None:
        """Re-read the clock now (after a manual clock moved)."""
        with self._cond:
            self._cond.notify()

    @property
    def armed(self) -> int:
        """How many timers are armed."""
        with self._cond:
            return len(self._heap.live)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = self._clock()
                    due = self._heap.pop_due(now)
                    if due is not None:
                        break
                    earliest = self._heap.earliest()
                    wait = None if earliest is None else min(_MAX_SLEEP_S, (earliest - now) / 1000)
                    self._cond.wait(wait)
            try:
                self._on_fire(due)
            except Exception:  # noqa: BLE001, S112 - the callback reports its own errors
                continue


class AsyncTimerHeap:
    """Timers on one anyio task (asyncio or trio).

    Args:
        on_fire: called with each fired ``timer_id`` in the event loop (for
            example a memory stream's ``send_nowait``); an exception it raises
            propagates out of :meth:`run` (the shell decides).
        clock_ms: the clock; the task sleeps ``deadline - clock_ms()`` real
            milliseconds, so a manual clock must call :meth:`poke` after it moves.

    Start :meth:`run` in a task group (``tg.start_soon(heap.run)``) and cancel
    the group to stop it. :meth:`arm`, :meth:`cancel` and :meth:`poke` are
    synchronous and must be called from the event loop's thread.
    """

    def __init__(self, on_fire: Callable[[int], None], *, clock_ms: Clock = wall_clock_ms) -> None:
        self._on_fire = on_fire
        self._clock = clock_ms
        self._heap = _Heap()
        self._wake: anyio.Event | None = None

    def arm(self, timer_id: int, deadline_ms: int) -> None:
        """Arm (or re-arm) ``timer_id`` to fire at ``deadline_ms`` (epoch milliseconds)."""
        if self._heap.arm(timer_id, deadline_ms):
            self.poke()

    def cancel(self, timer_id: int) -> bool:
        """Cancel ``timer_id``; ``True`` when it was armed (it will then never fire)."""
        return self._heap.cancel(timer_id)

    def poke(self) -> None:
        """Wake the sleeper to re-read the clock and the earliest deadline."""
        if self._wake is not None:
            self._wake.set()

    @property
    def armed(self) -> int:
        """How many timers are armed."""
        return len(self._heap.live)

    async def run(self) -> None:
        """Sleep until the earliest deadline, fire what is due, repeat; runs until cancelled."""
        while True:
            self._wake = anyio.Event()
            due = self._heap.pop_due(self._clock())
            while due is not None:
                self._on_fire(due)
                due = self._heap.pop_due(self._clock())
            earliest = self._heap.earliest()
            if earliest is None:
                await self._wake.wait()
                continue
            delay = (earliest - self._clock()) / 1000
            if delay <= 0:
                await anyio.lowlevel.checkpoint()
                continue
            with anyio.move_on_after(min(delay, _MAX_SLEEP_S)):
                await self._wake.wait()
