"""leasegate's own shells as a runner command for the conformance kit.

``python -m leasegate.conformance.selfrunner --shell threads|asyncio|trio``
reads the kit's variables (``LEASEGATE_BRIDGE_URL``, ``LEASEGATE_SSM_ENDPOINT``,
``LEASEGATE_TASK_ID``, ``LEASEGATE_RUN_EPOCH``, ``LEASEGATE_BOOT_ID``, and for
the ``refresh`` cases ``LEASEGATE_REFRESH_CREDENTIAL`` and
``LEASEGATE_REFRESH_REQUESTS``; ``docs/conformance.md``), starts that one
task run and serves it until SIGTERM. Files go to a fresh temporary
directory, removed at exit.

With ``LEASEGATE_REFRESH_CREDENTIAL`` set, once the run is launch-ready
(``wait_launch_ready``) that many consumers (``LEASEGATE_REFRESH_REQUESTS``,
default 1) call ``refresh_credential`` for that credential at its revision
in the view, all at once, once.
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
    LaunchReady,
    ThreadRunnerShell,
    ThreadWebSocketClient,
    runner_runtime,
)

from ._world import (
    ENV_BOOT_ID,
    ENV_BRIDGE_URL,
    ENV_REFRESH_CREDENTIAL,
    ENV_REFRESH_REQUESTS,
    ENV_RUN_EPOCH,
    ENV_SSM_ENDPOINT,
    ENV_TASK_ID,
)

__all__ = ["main", "run_threads"]


def _config() -> tuple[str, str, str, int, str]:
    e = os.environ
    return (
        e[ENV_BRIDGE_URL],
        e[ENV_SSM_ENDPOINT],
        e[ENV_TASK_ID],
        int(e[ENV_RUN_EPOCH]),
        e[ENV_BOOT_ID],
    )


def _refresh_asked() -> tuple[str, int] | None:
    """``(credentialId, requests)`` when the kit asks for refreshes, else ``None``."""
    credential = os.environ.get(ENV_REFRESH_CREDENTIAL)
    if not credential:
        return None
    return credential, max(1, int(os.environ.get(ENV_REFRESH_REQUESTS) or "1"))


def _revision(ready: LaunchReady, credential_id: str) -> str | None:
    """The credential's revision in the ready view (``None`` if it is not there)."""
    v = ready.view
    for entry in (*v.engines, *v.mcp, v.github, v.ssh):
        if entry is not None and entry.manifest.credential_id == credential_id:
            return entry.manifest.revision
    return None


def _report(what: str, e: BaseException) -> None:
    # The shells' errors carry fixed texts; only the type is printed anyway.
    print(f"selfrunner: {what}: {type(e).__name__}", file=sys.stderr, flush=True)


def _refresh_threads(shell: ThreadRunnerShell, start_id: int, task: str, run: int) -> None:
    asked = _refresh_asked()
    if asked is None:
        return
    credential, requests = asked

    def consumer(barrier: threading.Barrier, revision: str | None) -> None:
        try:
            barrier.wait(10)
            shell.refresh_credential(task, run, credential, revision)
        except Exception as e:  # noqa: BLE001 - a consumer's failure is reported, not fatal
            _report("refresh_credential", e)

    def ask() -> None:
        try:
            revision = _revision(shell.wait_launch_ready(start_id), credential)
        except Exception as e:  # noqa: BLE001
            _report("wait_launch_ready", e)
            return
        barrier = threading.Barrier(requests)
        for _ in range(requests):
            threading.Thread(target=consumer, args=(barrier, revision), daemon=True).start()

    threading.Thread(target=ask, name="selfrunner-refresh", daemon=True).start()


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
            start_id = shell.begin_start(task, run)
            _refresh_threads(shell, start_id, task, run)
            stop.wait()


async def _refresh_async(shell: AsyncRunnerShell, start_id: int, task: str, run: int) -> None:
    import anyio

    asked = _refresh_asked()
    if asked is None:
        return
    credential, requests = asked
    try:
        revision = _revision(await shell.wait_launch_ready(start_id), credential)
    except Exception as e:  # noqa: BLE001
        _report("wait_launch_ready", e)
        return

    async def consumer() -> None:
        try:
            await shell.refresh_credential(task, run, credential, revision)
        except Exception as e:  # noqa: BLE001 - a consumer's failure is reported, not fatal
            _report("refresh_credential", e)

    async with anyio.create_task_group() as tg:
        for _ in range(requests):
            tg.start_soon(consumer)


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
            anyio.create_task_group() as tg,
        ):
            start_id = await shell.begin_start(task, run)
            tg.start_soon(_refresh_async, shell, start_id, task, run)
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()


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
