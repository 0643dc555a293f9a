"""Timer heaps (issue #6): one sleeper, cancel, re-arm, order, 10,000 timers."""

from __future__ import annotations

import queue
import threading
import time

import anyio
import pytest

from leasegate.shells.timers import AsyncTimerHeap, ThreadTimerHeap, _Heap, wall_clock_ms


class ManualClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _drain(q: queue.Queue[int], n: int, timeout: float = 5.0) -> list[int]:
    return [q.get(timeout=timeout) for _ in range(n)]


def test_shell_thread_timers_fire_in_deadline_order_and_cancelled_never_fire() -> None:
    clock = ManualClock()
    fired: queue.Queue[int] = queue.Queue()
    heap = ThreadTimerHeap(fired.put, clock_ms=clock)
    heap.start()
    try:
        heap.arm(1, clock.now + 300)
        heap.arm(2, clock.now + 100)
        heap.arm(3, clock.now + 200)
        heap.arm(4, clock.now + 50)
        assert heap.cancel(4) is True
        assert heap.cancel(99) is False
        heap.arm(3, clock.now + 400)  # re-arm replaces
        time.sleep(0.05)
        assert fired.empty()  # the manual clock has not moved
        clock.now += 1_000
        heap.poke()
        assert _drain(fired, 3) == [2, 1, 3]
        time.sleep(0.05)
        assert fired.empty()
        assert heap.armed == 0
    finally:
        heap.stop()


def test_shell_thread_timers_wake_for_an_earlier_deadline() -> None:
    fired: queue.Queue[int] = queue.Queue()
    heap = ThreadTimerHeap(fired.put)
    heap.start()
    try:
        t0 = time.monotonic()
        heap.arm(1, wall_clock_ms() + 60_000)
        heap.arm(2, wall_clock_ms() + 30)
        assert fired.get(timeout=5) == 2
        assert time.monotonic() - t0 < 2.0
        assert heap.cancel(1)
    finally:
        heap.stop()


def test_shell_thread_timers_ten_thousand_timers_one_thread() -> None:
    fired: queue.Queue[int] = queue.Queue()
    heap = ThreadTimerHeap(fired.put)
    before = threading.active_count()
    heap.start()
    try:
        assert threading.active_count() == before + 1
        now = wall_clock_ms()
        for i in range(10_000):
            heap.arm(i, now + 1_000 + (i % 7))
        for i in range(0, 10_000, 2):
            assert heap.cancel(i)
        assert threading.active_count() == before + 1
        got = _drain(fired, 5_000)
        assert sorted(got) == list(range(1, 10_000, 2))
        time.sleep(0.05)
        assert fired.empty()
    finally:
        heap.stop()
    assert threading.active_count() == before


def test_shell_thread_timers_callback_may_cancel_and_rearm() -> None:
    clock = ManualClock()
    fired: list[int] = []
    done = threading.Event()
    heap: ThreadTimerHeap

    def on_fire(tid: int) -> None:
        fired.append(tid)
        if tid == 1:
            heap.cancel(2)
            heap.arm(3, clock.now)
        if tid == 3:
            done.set()

    heap = ThreadTimerHeap(on_fire, clock_ms=clock)
    heap.start()
    try:
        heap.arm(1, clock.now)
        heap.arm(2, clock.now + 1)
        clock.now += 5
        heap.poke()
        assert done.wait(5)
        assert fired == [1, 3]
    finally:
        heap.stop()


@pytest.mark.anyio
async def test_shell_async_timers_order_cancel_rearm(anyio_backend: str) -> None:
    clock = ManualClock()
    fired: list[int] = []
    heap = AsyncTimerHeap(fired.append, clock_ms=clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(heap.run)
        heap.arm(1, clock.now + 300)
        heap.arm(2, clock.now + 100)
        heap.arm(3, clock.now + 200)
        heap.arm(4, clock.now + 10)
        assert heap.cancel(4)
        heap.arm(3, clock.now + 400)
        await anyio.sleep(0.02)
        assert fired == []
        clock.now += 250
        heap.poke()
        await anyio.sleep(0.02)
        assert fired == [2]
        clock.now += 1_000
        heap.poke()
        await anyio.sleep(0.02)
        assert fired == [2, 1, 3]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_shell_async_timers_wall_clock_earlier_deadline_wakes(anyio_backend: str) -> None:
    fired: list[int] = []
    got = anyio.Event()

    def on_fire(tid: int) -> None:
        fired.append(tid)
        got.set()

    heap = AsyncTimerHeap(on_fire)
    async with anyio.create_task_group() as tg:
        tg.start_soon(heap.run)
        heap.arm(1, wall_clock_ms() + 60_000)
        await anyio.sleep(0.01)
        heap.arm(2, wall_clock_ms() + 20)
        with anyio.fail_after(5):
            await got.wait()
        assert fired == [2]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_shell_async_timers_ten_thousand_timers_one_task(anyio_backend: str) -> None:
    fired: list[int] = []
    heap = AsyncTimerHeap(fired.append)
    async with anyio.create_task_group() as tg:
        before = len(anyio.get_running_tasks())
        tg.start_soon(heap.run)
        await anyio.sleep(0)
        assert len(anyio.get_running_tasks()) == before + 1
        now = wall_clock_ms()
        for i in range(10_000):
            heap.arm(i, now + 1_000 + (i % 5))
        for i in range(0, 10_000, 2):
            assert heap.cancel(i)
        assert len(anyio.get_running_tasks()) == before + 1
        assert threading.active_count() >= 1
        with anyio.fail_after(5):
            while len(fired) < 5_000:
                await anyio.sleep(0.01)
        assert sorted(fired) == list(range(1, 10_000, 2))
        assert len(anyio.get_running_tasks()) == before + 1
        tg.cancel_scope.cancel()


def test_shell_timer_heap_keeps_at_most_a_quarter_more_entries_than_live_timers() -> None:
    # Cancelled and replaced entries are dropped lazily; the heap is compacted
    # once they exceed a quarter of the live timers (plus 64 entries), and
    # what fires is still every live timer once, in deadline order.
    heap = _Heap()
    for i in range(1_000):
        heap.arm(i, 10_000 + i)
    most = 0
    for i in range(1_000, 5_000):
        heap.arm(i, 10_000 + i)  # a new timer ...
        assert heap.cancel(i - 1_000)  # ... and an old one cancelled, as a grant does
        if i % 3 == 0:
            heap.arm(i, 20_000 + i)  # re-armed: its first entry is stale
        most = max(most, len(heap.heap))
        assert 4 * len(heap.heap) <= 5 * len(heap.live) + 4 * 64 + 4
    assert most > len(heap.live)  # stale entries were kept lazily in between
    fired = []
    while (tid := heap.pop_due(1_000_000)) is not None:
        fired.append(tid)
    expected = sorted(range(4_000, 5_000), key=lambda i: (20_000 if i % 3 == 0 else 10_000) + i)
    assert fired == expected
    assert heap.live == {}
