"""A tiny deterministic scheduler: generator coroutines, futures, microtasks.

The reference registry is written with ``async``/``await``. This module lets
the core keep that structure without threads, clocks or an event loop:

* a *coroutine* is a generator; ``yield fut`` suspends it until the
  :class:`Future` settles, then it is resumed (with the value, or with the
  exception thrown in) from the microtask queue, as JavaScript resumes an
  ``await``;
* ``yield Sync(cmd_id)`` suspends it on a *synchronous callback* (a gate
  call): it is resumed directly, with ``True``/``False``, when the shell feeds
  that callback's outcome; while any such callback is outstanding no
  microtask runs (a JavaScript callback runs to completion before any
  microtask), but new events are still handled (they model calls the callback
  made into the registry, "re-entrancy");
* ``yield Join(task)`` suspends the caller while the coroutine it just
  started sits in a synchronous callback, so that starting an ``async``
  function runs its synchronous prefix to its first real ``await`` before the
  caller continues, as in JavaScript.

Everything is FIFO and keyed by integers: the same events give the same
order of resumptions, every time.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Co", "Future", "Join", "Scheduler", "Sync", "Task"]

T = TypeVar("T")

#: A coroutine returning ``T``.
Co = Generator[Any, Any, T]


class Future(Generic[T]):
    """A one-shot result: pending, then resolved with a value or rejected.

    Callbacks added with :meth:`add` run as microtasks once it settles (in
    the order added); their list is made by the first :meth:`add` before it
    settles and dropped when it settles (a settled future holds none).
    """

    __slots__ = ("_cbs", "_sched", "done", "error", "value")

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self._cbs: list[Callable[[], None]] | None = None

    def resolve(self, value: T) -> None:
        """Settle with ``value`` (no effect if already settled)."""
        if self.done:
            return
        self.done = True
        self.value = value
        self._flush()

    def reject(self, error: BaseException) -> None:
        """Settle with ``error`` (no effect if already settled)."""
        if self.done:
            return
        self.done = True
        self.error = error
        self._flush()

    def add(self, cb: Callable[[], None]) -> None:
        """Run ``cb`` as a microtask once settled."""
        if self.done:
            self._sched.micro(cb)
        elif self._cbs is None:
            self._cbs = [cb]
        else:
            self._cbs.append(cb)

    def _flush(self) -> None:
        cbs, self._cbs = self._cbs, None
        for cb in cbs or ():
            self._sched.micro(cb)


class Sync:
    """Yielded by a coroutine waiting on synchronous callback ``cmd_id``."""

    __slots__ = ("cmd_id",)

    def __init__(self, cmd_id: int) -> None:
        self.cmd_id = cmd_id


class Join:
    """Yielded by a caller waiting for ``task`` to leave its synchronous callback."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task


class Task:
    """A running coroutine; :attr:`future` settles with its result."""

    __slots__ = ("_gen", "_joiners", "_sched", "future", "in_sync")

    def __init__(self, sched: Scheduler, gen: Co[Any]) -> None:
        self._sched = sched
        self._gen = gen
        self.future: Future[Any] = Future(sched)
        self.in_sync = False
        self._joiners: list[Task] = []

    def step(self, value: Any = None, error: BaseException | None = None) -> None:
        """Resume the coroutine until its next suspension."""
        self.in_sync = False
        while True:
            try:
                got = self._gen.throw(error) if error is not None else self._gen.send(value)
            except StopIteration as stop:
                self.future.resolve(stop.value)
                self._release_joiners()
                return
            except Exception as exc:  # noqa: BLE001 - a coroutine's failure is its result
                self.future.reject(exc)
                self._release_joiners()
                return
            if isinstance(got, Join):
                if got.task.in_sync:
                    got.task._joiners.append(self)
                    self.in_sync = True
                    return
                value, error = got.task.future, None
                continue
            if isinstance(got, Sync):
                self.in_sync = True
                self._sched.sync[got.cmd_id] = self
                return
            fut: Future[Any] = got
            fut.add(functools.partial(self._resume, fut))
            self._release_joiners()
            return

    def _resume(self, fut: Future[Any]) -> None:
        if fut.error is not None:
            self.step(error=fut.error)
        else:
            self.step(fut.value)

    def _release_joiners(self) -> None:
        joiners, self._joiners = self._joiners, []
        for j in joiners:
            j.step(self.future)


class Scheduler:
    """Runs coroutines; see the module docstring."""

    __slots__ = ("_micro", "_none", "sync")

    def __init__(self) -> None:
        self._micro: collections.deque[Callable[[], None]] = collections.deque()
        self.sync: dict[int, Task] = {}
        #: The one future resolved with ``None`` (a settled future never changes).
        self._none: Future[Any] = Future(self)
        self._none.resolve(None)

    def micro(self, cb: Callable[[], None]) -> None:
        """Queue a microtask."""
        self._micro.append(cb)

    def spawn(self, gen: Co[Any]) -> Task:
        """Start a coroutine: run it now up to its first suspension."""
        task = Task(self, gen)
        task.step()
        return task

    def create(self, gen: Co[Any]) -> Task:
        """Make a task without running it (call :meth:`Task.step` to start it)."""
        return Task(self, gen)

    def resolved(self, value: Any = None) -> Future[Any]:
        """A future already resolved with ``value`` (one shared future for ``None``)."""
        if value is None:
            return self._none
        fut: Future[Any] = Future(self)
        fut.resolve(value)
        return fut

    def rejected(self, error: BaseException) -> Future[Any]:
        """A future already rejected with ``error``."""
        fut: Future[Any] = Future(self)
        fut.reject(error)
        return fut

    def gather(self, futs: list[Future[Any]]) -> Future[None]:
        """A future resolved once every one of ``futs`` settled (failures ignored)."""
        out: Future[None] = Future(self)
        left = [len(futs)]
        if not futs:
            out.resolve(None)
            return out

        def one() -> None:
            left[0] -= 1
            if left[0] == 0:
                out.resolve(None)

        for fut in futs:
            fut.add(one)
        return out

    def outcome(self, cmd_id: int, ok: bool) -> bool:
        """Resume the coroutine waiting on callback ``cmd_id``; False if none."""
        task = self.sync.pop(cmd_id, None)
        if task is None:
            return False
        task.step(ok)
        return True

    def drain(self) -> None:
        """Run microtasks until none is left or a synchronous callback is outstanding."""
        while self._micro and not self.sync:
            self._micro.popleft()()

    @property
    def idle(self) -> bool:
        """No microtask queued and no callback outstanding."""
        return not self._micro and not self.sync
