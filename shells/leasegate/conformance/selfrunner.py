"""leasegate's own shells as a runner command for the conformance kit.

``python -m leasegate.conformance.selfrunner --shell threads|asyncio|trio``
reads the kit's variables (``LEASEGATE_BRIDGE_URL``, ``LEASEGATE_SSM_ENDPOINT``,
``LEASEGATE_TASK_ID``, ``LEASEGATE_RUN_EPOCH``, ``LEASEGATE_BOOT_ID``;
``docs/conformance.md``), starts that one task run and serves it until
SIGTERM. Files go to a fresh temporary directory, removed at exit.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leasegate.shells import (
    AnyioWebSocketTransport,
    AsyncRunnerShell,
    ConsumerSet,
    ThreadRunnerShell,
    ThreadWebSocketClient,
    runner_runtime,
)

__all__ = ["main", "run_threads"]


def _config() -> tuple[str, str, str, int, str]:
    e = os.environ
    return (
        e["LEASEGATE_BRIDGE_URL"],
        e["LEASEGATE_SSM_ENDPOINT"],
        e["LEASEGATE_TASK_ID"],
        int(e["LEASEGATE_RUN_EPOCH"]),
        e["LEASEGATE_BOOT_ID"],
    )


def run_threads(transport_class: Callable[[str], Any] = ThreadWebSocketClient) -> None:
    """Serve the run on the threading shell until SIGTERM.

    ``transport_class(url)`` builds the transport (a ``ThreadWebSocketClient``
    or a subclass of it).
    """
    url, ssm, task, run, boot = _config()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with tempfile.TemporaryDirectory() as root:
        consumers = ConsumerSet(Path(root))
        runtime = runner_runtime(boot_id=boot, consumers=consumers)
        with (
            transport_class(url) as transport,
            ThreadRunnerShell(
                runtime, transport, region_endpoint_url=ssm, work=consumers.work_sync
            ) as shell,
        ):
            shell.begin_start(task, run)
            stop.wait()


async def _run_async() -> None:
    import anyio

    url, ssm, task, run, boot = _config()
    with tempfile.TemporaryDirectory() as root:
        consumers = ConsumerSet(Path(root))
        runtime = runner_runtime(boot_id=boot, consumers=consumers)
        async with (
            AnyioWebSocketTransport(url) as transport,
            AsyncRunnerShell(
                runtime, transport, region_endpoint_url=ssm, work=consumers.work
            ) as shell,
        ):
            await shell.begin_start(task, run)
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break


def main(argv: list[str] | None = None) -> int:
    """Parse ``--shell`` and serve until SIGTERM; return 0."""
    parser = argparse.ArgumentParser(prog="python -m leasegate.conformance.selfrunner")
    parser.add_argument("--shell", choices=("threads", "asyncio", "trio"), default="threads")
    args = parser.parse_args(argv)
    if args.shell == "threads":
        run_threads()
    else:
        import anyio

        anyio.run(_run_async, backend=args.shell)
    return 0


if __name__ == "__main__":
    sys.exit(main())
