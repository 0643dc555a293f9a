"""leasegate's shells: the I/O around the sans-I/O core.

Async shell (anyio: trio and asyncio), threading shell, boto3 SSM reader,
transports, consumers, file event store and the ``leasegate`` command. The
shells move bytes, run timers, call boto3 and consumers; they decide nothing.

Everything a runner author needs is importable from here (see
``docs/api.md``); each name is loaded from its module on first use, so
``import leasegate.shells`` imports neither anyio, boto3 nor websockets::

    from leasegate.shells import AsyncRunnerShell, ConsumerSet, new_boot_id, runner_runtime

    boot = new_boot_id()                       # the same id goes to the cloud's assignment
    consumers = ConsumerSet("/var/lib/runner/tasks")
    rt = runner_runtime(boot_id=boot, consumers=consumers)
    async with AsyncRunnerShell(rt, transport, work=consumers.work) as shell:
        ready = await shell.wait_launch_ready(await shell.begin_start(task, run))

Logging: every shell module logs to its own logger under ``leasegate``
(``docs/logging.md``); the package logger has a ``NullHandler``, so nothing is
printed unless the host configures logging (the ``leasegate`` command's
``-v``/``-q`` do). An optional part whose extra is missing raises
:class:`MissingExtraError` (an ``ImportError``) naming the extra.
"""

from __future__ import annotations

import importlib
import logging as _logging
from typing import TYPE_CHECKING, Any

from ._extras import MissingExtraError

_logging.getLogger("leasegate").addHandler(_logging.NullHandler())

if TYPE_CHECKING:
    from ._dispatch import CallFailed, ReaderFactory, ShellClosedError
    from ._recording import CoreRecorder, RecorderChain
    from .async_shell import AsyncRunnerShell, FrameTransport
    from .consumers import Consumer, ConsumerError, Material, TaskRoot
    from .diagnostics import LaunchTimeout, WaitTimeout
    from .launch import LaunchReady, launch_ready
    from .metrics import MetricsRecorder
    from .ports import (
        GIT_UNREADABLE,
        ConsumerSet,
        EngineFilesPort,
        HostWork,
        MaterializedPaths,
        McpFilesPort,
        PersonFilesPort,
        PersonGitHold,
        RuntimePorts,
    )
    from .runner import new_boot_id, runner_runtime
    from .ssm import SessionCredentials, SsmReader
    from .status import EnvCursor, PendingOps, RunnerStatus, TaskStatus
    from .store import CleanupJournal, RuntimeJournal
    from .thread_shell import BlockingFrameTransport, ThreadRunnerShell
    from .timers import wall_clock_ms
    from .transport import (
        AnyioWebSocketClient,
        AnyioWebSocketTransport,
        MemoryFrameEnd,
        Reauthenticated,
        ThreadFrameEnd,
        ThreadWebSocketClient,
        WebSocketClient,
        memory_pair,
        thread_memory_pair,
    )

#: Public name -> the module (relative to this package) that defines it.
_WHERE: dict[str, str] = {
    "AnyioWebSocketClient": ".transport",
    "AnyioWebSocketTransport": ".transport",
    "AsyncRunnerShell": ".async_shell",
    "BlockingFrameTransport": ".thread_shell",
    "CallFailed": "._dispatch",
    "CleanupJournal": ".store",
    "Consumer": ".consumers",
    "ConsumerError": ".consumers",
    "ConsumerSet": ".ports",
    "CoreRecorder": "._recording",
    "EngineFilesPort": ".ports",
    "EnvCursor": ".status",
    "FrameTransport": ".async_shell",
    "GIT_UNREADABLE": ".ports",
    "HostWork": ".ports",
    "LaunchReady": ".launch",
    "LaunchTimeout": ".diagnostics",
    "Material": ".consumers",
    "MaterializedPaths": ".ports",
    "McpFilesPort": ".ports",
    "MetricsRecorder": ".metrics",
    "MissingExtraError": "._extras",
    "MemoryFrameEnd": ".transport",
    "PersonFilesPort": ".ports",
    "PendingOps": ".status",
    "PersonGitHold": ".ports",
    "ReaderFactory": "._dispatch",
    "Reauthenticated": ".transport",
    "RecorderChain": "._recording",
    "RunnerStatus": ".status",
    "RuntimeJournal": ".store",
    "RuntimePorts": ".ports",
    "SessionCredentials": ".ssm",
    "ShellClosedError": "._dispatch",
    "SsmReader": ".ssm",
    "TaskRoot": ".consumers",
    "TaskStatus": ".status",
    "ThreadFrameEnd": ".transport",
    "ThreadRunnerShell": ".thread_shell",
    "ThreadWebSocketClient": ".transport",
    "WaitTimeout": ".diagnostics",
    "WebSocketClient": ".transport",
    "launch_ready": ".launch",
    "memory_pair": ".transport",
    "new_boot_id": ".runner",
    "runner_runtime": ".runner",
    "thread_memory_pair": ".transport",
    "wall_clock_ms": ".timers",
}

__all__ = [
    "GIT_UNREADABLE",
    "AnyioWebSocketClient",
    "AnyioWebSocketTransport",
    "AsyncRunnerShell",
    "BlockingFrameTransport",
    "CallFailed",
    "CleanupJournal",
    "Consumer",
    "ConsumerError",
    "ConsumerSet",
    "CoreRecorder",
    "EngineFilesPort",
    "EnvCursor",
    "FrameTransport",
    "HostWork",
    "LaunchReady",
    "LaunchTimeout",
    "Material",
    "MaterializedPaths",
    "McpFilesPort",
    "MemoryFrameEnd",
    "MetricsRecorder",
    "MissingExtraError",
    "PendingOps",
    "PersonFilesPort",
    "PersonGitHold",
    "ReaderFactory",
    "Reauthenticated",
    "RecorderChain",
    "RunnerStatus",
    "RuntimeJournal",
    "RuntimePorts",
    "SessionCredentials",
    "ShellClosedError",
    "SsmReader",
    "TaskRoot",
    "TaskStatus",
    "ThreadFrameEnd",
    "ThreadRunnerShell",
    "ThreadWebSocketClient",
    "WaitTimeout",
    "WebSocketClient",
    "launch_ready",
    "memory_pair",
    "new_boot_id",
    "runner_runtime",
    "thread_memory_pair",
    "wall_clock_ms",
]


if not TYPE_CHECKING:
    # Hidden from type checkers: a module ``__getattr__`` typed ``-> Any`` would
    # make ``from leasegate.shells import Misspelled`` type-check as ``Any``;
    # the names above under ``TYPE_CHECKING`` are what they see instead.

    def __getattr__(name: str) -> Any:
        """Load a public name from its module on first use (PEP 562).

        Raises:
            AttributeError: ``name`` is not a public name of this package.
        """
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names and the module's own attributes."""
    return sorted({*globals(), *__all__})
