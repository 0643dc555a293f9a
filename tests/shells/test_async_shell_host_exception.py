"""A host's exception leaves ``async with`` a shell or a WebSocket transport as itself.

The shell and the transport each hold an anyio task group; its ``__aexit__``
would re-raise an exception of the host's block inside an exception group
(one per level), so a runner's ``except ValueError`` or ``except
KeyboardInterrupt`` around the block (the quickstart's ``__main__``) would miss
it. The exception comes out bare, with the host's own frame in its
traceback, on asyncio and trio. No cloud: a memory pair and a closed-port
WebSocket URL are enough (nothing needs to be granted).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from leasegate.shells import (
    AnyioWebSocketTransport,
    AsyncRunnerShell,
    ConsumerSet,
    memory_pair,
    new_boot_id,
    runner_runtime,
)


class HostFailure(Exception):
    """The host's own failure inside the block."""


@pytest.mark.anyio
@pytest.mark.parametrize("kind", [HostFailure, KeyboardInterrupt])
async def test_a_host_exception_leaves_the_async_shell_block_bare(
    kind: type[BaseException], tmp_path: Path
) -> None:
    consumers = ConsumerSet(tmp_path / "tasks")
    runtime = runner_runtime(boot_id=new_boot_id(), consumers=consumers)
    end, _cloud = memory_pair()
    raised = kind("from the host")
    with pytest.raises(kind) as caught:
        async with AsyncRunnerShell(runtime, end, work=consumers.work, exit_timeout_s=5):
            raise raised
    assert caught.value is raised
    assert "raise raised" in "".join(traceback.format_tb(caught.value.__traceback__))


@pytest.mark.anyio
async def test_a_host_exception_leaves_the_transport_and_shell_blocks_bare(tmp_path: Path) -> None:
    consumers = ConsumerSet(tmp_path / "tasks")
    runtime = runner_runtime(boot_id=new_boot_id(), consumers=consumers)
    raised = HostFailure("from the host")
    with pytest.raises(HostFailure) as caught:
        async with (
            AnyioWebSocketTransport("ws://127.0.0.1:9/bridge") as transport,
            AsyncRunnerShell(runtime, transport, work=consumers.work, exit_timeout_s=5),
        ):
            raise raised
    assert caught.value is raised


def test_a_ctrl_c_that_reached_a_task_of_the_shell_leaves_as_a_bare_keyboard_interrupt() -> None:
    """Under trio a SIGINT can land in one of the shell's tasks: the block still sees Ctrl-C."""
    import asyncio

    from leasegate.shells._groups import exit_task_group

    class _Group:
        async def __aexit__(self, *exc: object) -> bool | None:
            raise BaseExceptionGroup("tasks", [BaseExceptionGroup("inner", [KeyboardInterrupt()])])

    cancelled = asyncio.CancelledError()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(exit_task_group(_Group(), (type(cancelled), cancelled, None)))


def test_the_shells_core_steps_and_tasks_are_protected_from_ctrl_c_under_trio() -> None:
    """trio defers a KeyboardInterrupt out of protected code to the host's task."""
    import trio

    from leasegate.shells._groups import ki_protected

    @ki_protected
    def step() -> bool:
        return bool(trio.lowlevel.currently_ki_protected())

    async def main() -> bool:
        return step()

    assert trio.run(main) is True
