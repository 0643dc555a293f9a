"""pytest fixtures for the reference cloud.

Enable them in a ``conftest.py`` (or a test module)::

    pytest_plugins = ["leasegate.testing.pytest_plugin"]

Fixtures:

* ``moto_ssm_endpoint`` (session scope): a :class:`~leasegate.testing.MotoEndpoint`,
  a moto server on 127.0.0.1 serving SSM and STS, with clients built from
  dummy keys (never ambient credentials, never the internet).
* ``reference_cloud`` (function scope): a fresh
  :class:`~leasegate.testing.ReferenceCloud` writing into that endpoint's
  SSM and minting sessions from its STS, on the wall clock (milliseconds);
  the endpoint's state is reset first, so every test starts empty.
* ``reference_cloud_ws`` (function scope): ``reference_cloud`` served by a
  :class:`~leasegate.testing.CloudWebSocketServer` on 127.0.0.1; its ``url``
  is where the runner connects.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ._cloud import ReferenceCloud
from ._moto import MotoEndpoint, start_moto_endpoint
from ._transport import CloudWebSocketServer

__all__ = ["moto_ssm_endpoint", "reference_cloud", "reference_cloud_ws", "wall_clock_ms"]


def wall_clock_ms() -> int:
    """The wall clock in milliseconds since the epoch (the fixtures' clock)."""
    return time.time_ns() // 1_000_000


@pytest.fixture(scope="session")
def moto_ssm_endpoint() -> Iterator[MotoEndpoint]:
    """A moto server on 127.0.0.1 for the whole session (stopped at the end)."""
    endpoint = start_moto_endpoint()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def reference_cloud(moto_ssm_endpoint: MotoEndpoint) -> ReferenceCloud:
    """A fresh reference cloud on the (reset) moto endpoint, wall clock."""
    moto_ssm_endpoint.reset()
    return ReferenceCloud(
        ssm=moto_ssm_endpoint.ssm_client(),
        sts=moto_ssm_endpoint.sts_client(),
        region=moto_ssm_endpoint.region,
        clock=wall_clock_ms,
    )


@pytest.fixture
def reference_cloud_ws(reference_cloud: ReferenceCloud) -> Iterator[CloudWebSocketServer]:
    """``reference_cloud`` behind a WebSocket server on 127.0.0.1."""
    with CloudWebSocketServer(reference_cloud) as server:
        yield server
