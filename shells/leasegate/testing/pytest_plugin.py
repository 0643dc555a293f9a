"""pytest fixtures for testing a runner against the reference cloud.

Registered through the ``pytest11`` entry point ``leasegate`` once leasegate
is installed: a test file uses the fixtures by naming them, with no
``conftest.py`` line and no ``pytest_plugins``. (Do not also list this module
in ``pytest_plugins``: pytest refuses a plugin registered twice.) Disable it
with ``-p no:leasegate``.

Async tests: every fixture here is a plain (synchronous) fixture, so it
works under any async test plugin and event loop. The tests of this project
use **anyio's pytest plugin** (installed with anyio): mark the test
``@pytest.mark.anyio`` and parametrize ``anyio_backend`` over ``"asyncio"``
and ``"trio"``. ``pytest-trio`` (``@pytest.mark.trio`` or ``trio_mode``)
works as well. This module imports nothing heavy until a fixture is used
(``moto`` only when a moto server starts).

Fixtures:

* ``moto_server`` (session): a :class:`~leasegate.testing.moto.MotoServer`,
  moto on 127.0.0.1 in this process (SSM, STS, IAM; IAM not enforced),
  quiet, its clients built with dummy keys and no proxies. Stopped at the
  end of the session.
* ``moto_iam_server`` (session): a moto server with IAM enforcement, in a
  child process (:func:`~leasegate.testing.moto.start_moto_iam`). Stopped
  (the process ended) at the end of the session.
* ``reference_cloud`` (function): a fresh
  :class:`~leasegate.testing.ReferenceCloud` on ``moto_server`` (reset
  first, so every test starts empty), on the wall clock (milliseconds).
* ``cloud_link`` (function): a :class:`~leasegate.testing.MemoryCloudLink`
  to ``reference_cloud``: ``cloud_link.async_end()`` is a transport for
  ``AsyncRunnerShell``, ``cloud_link.thread_end()`` one for
  ``ThreadRunnerShell``. Its open end is closed at teardown.
* ``reference_cloud_ws`` (function): ``reference_cloud`` served by a
  :class:`~leasegate.testing.CloudWebSocketServer` on 127.0.0.1; connect a
  WebSocket transport to its ``url``. Stopped (thread joined) at teardown.
* ``consumers_root`` (function): a :class:`~leasegate.shells.consumers.TaskRoot`
  on a fresh 0700 directory under ``tmp_path``, for the consumers' files.
* ``wall_clock_ms`` is the clock of these fixtures (a function, not a fixture).

Nothing here reads ambient AWS credentials, proxies or the internet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from leasegate.shells.consumers import TaskRoot

    from ._cloud import ReferenceCloud
    from ._transport import CloudWebSocketServer, MemoryCloudLink
    from .moto import MotoServer

__all__ = [
    "cloud_link",
    "consumers_root",
    "moto_iam_server",
    "moto_server",
    "reference_cloud",
    "reference_cloud_ws",
    "wall_clock_ms",
]


def wall_clock_ms() -> int:
    """The wall clock in milliseconds since the epoch (the fixtures' clock)."""
    return time.time_ns() // 1_000_000


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A quiet moto server on 127.0.0.1 in this process for the whole session.

    Yields:
        A :class:`~leasegate.testing.moto.MotoServer` (``url``, ``region``,
        ``client(service, ...)``, ``reset()``, ``put_secure(name, value)``,
        ``create_role``, ``session_for``), IAM not enforced.

    Cleanup: the server is stopped (its thread joined) at the end of the session.
    """
    from .moto import start_moto

    with start_moto() as server:
        yield server


@pytest.fixture(scope="session")
def moto_iam_server() -> Iterator[MotoServer]:
    """A moto server with IAM enforcement, in a child process, for the whole session.

    Yields:
        A :class:`~leasegate.testing.moto.MotoServer` whose admin keys are an
        allow-all IAM user's; every other caller needs a known principal with
        a policy (``create_role`` + ``session_for``). It cannot be reset.

    Cleanup: the child process is ended at the end of the session.
    """
    from .moto import start_moto_iam

    with start_moto_iam() as server:
        yield server


@pytest.fixture
def reference_cloud(moto_server: MotoServer) -> ReferenceCloud:
    """A fresh reference cloud writing to ``moto_server``'s SSM and minting from its STS.

    The moto server is reset first (every test starts with no parameter,
    role or session); the cloud's clock is :func:`wall_clock_ms`
    (milliseconds since the epoch). It has no org, user, project or
    assignment yet: add them (``add_org``, ``add_user``, ``add_project``,
    ``add_engine_credential``, ``set_env_value``, ``assign``).

    Cleanup: nothing to stop (the cloud holds no thread); the next test's
    reset drops what it wrote to moto.
    """
    from ._cloud import ReferenceCloud

    moto_server.reset()
    return ReferenceCloud(
        ssm=moto_server.ssm_client(),
        sts=moto_server.sts_client(),
        region=moto_server.region,
        clock=wall_clock_ms,
    )


@pytest.fixture
def cloud_link(reference_cloud: ReferenceCloud) -> Iterator[MemoryCloudLink]:
    """An in-memory link to ``reference_cloud``, for either shell.

    Yields:
        A :class:`~leasegate.testing.MemoryCloudLink`: ``async_end()`` gives
        the async shell's transport (asyncio or trio), ``thread_end()`` the
        threading shell's; one open end at a time.

    Cleanup: the open end, if any, is closed at teardown.
    """
    from ._transport import MemoryCloudLink

    link = MemoryCloudLink(reference_cloud)
    try:
        yield link
    finally:
        link.close()


@pytest.fixture
def reference_cloud_ws(reference_cloud: ReferenceCloud) -> Iterator[CloudWebSocketServer]:
    """``reference_cloud`` behind a WebSocket server on 127.0.0.1 (one runner at a time).

    Yields:
        A running :class:`~leasegate.testing.CloudWebSocketServer`; its
        ``url`` (``ws://127.0.0.1:<port>``) is where a runner's WebSocket
        transport connects, its ``cloud`` is ``reference_cloud``.

    Cleanup: the server is stopped and its thread joined (within 10 s) at teardown.
    """
    from ._transport import CloudWebSocketServer

    with CloudWebSocketServer(reference_cloud) as server:
        yield server


@pytest.fixture
def consumers_root(tmp_path: Path) -> TaskRoot:
    """A throwaway consumers root: a :class:`~leasegate.shells.consumers.TaskRoot`
    on ``tmp_path / "consumers"`` (created 0700, empty).

    Pass it to the reference consumers (``EngineConsumer(consumers_root)``,
    ...); its ``base`` is the directory.

    Cleanup: pytest's ``tmp_path`` retention removes it with the test's
    temporary directory.
    """
    from leasegate.shells.consumers import TaskRoot

    base = tmp_path / "consumers"
    base.mkdir(mode=0o700)
    return TaskRoot(base)
