"""leasegate.testing: a reference cloud to test runners against.

:class:`ReferenceCloud` is a scriptable peer of the leasegate protocol: it
keeps orgs, users, projects, credentials and env values, writes every
parameter envelope into SSM through boto3, mints per-lease STS sessions,
answers ``lease.request`` with ``lease.grant.v1``, streams the env replica
frames, and on command rotates, narrows, denies, makes a lease unavailable
or changes env values. :class:`MemoryCloudLink` (in memory, for either
shell) and :class:`CloudWebSocketServer` carry its frames;
:mod:`leasegate.testing.moto` starts the local AWS endpoint (moto on
127.0.0.1); the pytest fixtures are in :mod:`leasegate.testing.pytest_plugin`
(registered through the ``pytest11`` entry point). Guide:
``docs/reference-cloud.md``.

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
from ._transport import (  # noqa: E402
    AsyncCloudEnd,
    CloudWebSocketServer,
    MemoryCloudLink,
    ThreadCloudEnd,
    dumps_frame,
)
from .moto import FaultProxy, MotoServer, start_moto, start_moto_iam  # noqa: E402

__all__ = [
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_RETRY_DELAY_MS",
    "DEFAULT_SESSION_TTL_MS",
    "AsyncCloudEnd",
    "CloudError",
    "CloudWebSocketServer",
    "DeliveryError",
    "FaultProxy",
    "ManualClock",
    "MemoryCloudLink",
    "MemoryParameterStore",
    "MotoServer",
    "ParameterWriter",
    "ReferenceCloud",
    "SessionMinter",
    "ThreadCloudEnd",
    "dumps_frame",
    "start_moto",
    "start_moto_iam",
]
