"""leasegate.testing: a reference cloud to test runners against.

:class:`ReferenceCloud` is a scriptable peer of the leasegate protocol: it
keeps orgs, users, projects, credentials and env values, writes every
parameter envelope into SSM through boto3, mints per-lease STS sessions,
answers ``lease.request`` with ``lease.grant.v1``, streams the env replica
frames, and on command rotates, narrows, denies, makes a lease unavailable
or changes env values. :class:`MemoryCloudLink` and
:class:`CloudWebSocketServer` carry its frames; the pytest fixtures are in
:mod:`leasegate.testing.pytest_plugin`. Guide: ``docs/reference-cloud.md``.

Needs the ``demo`` extra (moto and boto3): without it, importing this
package raises :class:`leasegate.shells.MissingExtraError` naming the extra.
"""

# (leasegate.shells, imported here, puts the NullHandler on the ``leasegate`` logger.)
from leasegate.shells._extras import require_extra as _require_extra

_require_extra("leasegate.testing", "demo", ("boto3", "moto"))

from ._cloud import (  # noqa: E402 - after the extra's check
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRY_DELAY_MS,
    DEFAULT_SESSION_TTL_MS,
    CloudError,
    DeliveryError,
    ManualClock,
    MemoryParameterStore,
    ParameterWriter,
    ReferenceCloud,
    SessionMinter,
)
from ._moto import MotoEndpoint, start_moto_endpoint  # noqa: E402
from ._transport import CloudWebSocketServer, MemoryCloudLink, dumps_frame  # noqa: E402

__all__ = [
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_RETRY_DELAY_MS",
    "DEFAULT_SESSION_TTL_MS",
    "CloudError",
    "CloudWebSocketServer",
    "DeliveryError",
    "ManualClock",
    "MemoryCloudLink",
    "MemoryParameterStore",
    "MotoEndpoint",
    "ParameterWriter",
    "ReferenceCloud",
    "SessionMinter",
    "dumps_frame",
    "start_moto_endpoint",
]
