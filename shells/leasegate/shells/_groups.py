"""Leave a task group's ``__aexit__`` with the host's own exception, not a group around it."""

from __future__ import annotations

from typing import Any

__all__ = ["exit_task_group"]


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
        if host is None or _only_leaf(group) is not host:
            raise
    else:
        return result
    raise host
