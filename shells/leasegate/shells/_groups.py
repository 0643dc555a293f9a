"""Leave a task group's ``__aexit__`` with the host's own exception, not a group around it;
keep a Ctrl-C out of the core's steps under trio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["exit_task_group", "ki_protected"]

F = TypeVar("F", bound=Callable[..., Any])

_enable_ki_protection: Callable[[Any], Any] | None
try:  # trio delivers Ctrl-C to whatever code runs; protected code defers it to the host's task.
    from trio.lowlevel import enable_ki_protection as _enable_ki_protection
except ImportError:  # pragma: no cover - trio is the optional `trio` extra
    _enable_ki_protection = None


def ki_protected(fn: F) -> F:
    """``fn`` with trio's KeyboardInterrupt protection (unchanged without trio).

    Under trio a SIGINT raises ``KeyboardInterrupt`` in whatever Python code
    is running at that moment; inside ``runtime.handle`` that would leave a
    core step half done, and inside one of the shell's own tasks it would end
    that task instead of taking the host's way out (which closes and cleans
    up every run the host began). Protected code never receives it: trio
    delivers it to the main task at its next checkpoint. asyncio delivers
    Ctrl-C by cancelling the main task, so nothing is needed there.
    """
    if _enable_ki_protection is None:
        return fn
    protected: F = _enable_ki_protection(fn)
    return protected


def _only_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The single exception inside ``group`` (through nested groups), or ``None``."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup):
        if len(inner.exceptions) != 1:
            return None
        inner = inner.exceptions[0]
    return inner


async def exit_task_group(tg: Any, exc: tuple[object, ...]) -> bool | None:
    """``await tg.__aexit__(*exc)``; the host's exception ``exc[1]`` comes out as itself.

    An anyio task group re-raises an exception of the ``async with`` body
    inside an exception group (twice, for a shell inside a transport), so a
    host's ``except KeyboardInterrupt`` or ``except ValueError`` around the
    block would not catch it. When the group holds nothing but that exception,
    it is raised bare (its traceback kept); a group holding anything else (a
    task of the shell failed too) propagates unchanged.

    Raises:
        BaseException: the host's exception, or the task group's own group.
    """
    host = exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None
    try:
        result: bool | None = await tg.__aexit__(*exc)
    except BaseExceptionGroup as group:
        leaf = _only_leaf(group)
        if isinstance(leaf, KeyboardInterrupt) and leaf is not host:
            raise leaf from None  # Ctrl-C that reached a task of the shell: still Ctrl-C
        if host is None or leaf is not host:
            raise
    else:
        return result
    raise host
