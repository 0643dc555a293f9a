"""The lease registry core: task-scoped credential leases as a sans-I/O machine.

:class:`LeaseRegistry` ports the behavior of the reference's
``TaskCredentialLeaseRegistry`` (``host/lib/cloud-credential-leases.ts``;
catalog ``design/behaviors/lease-registry.md``, LR-001…LR-163). Feed it
events, carry out the commands it returns. Vocabulary:
``docs/events-and-commands.md``; design and quirk decisions:
``docs/registry.md``.
"""

from __future__ import annotations

from ._machine import LeaseRegistry
from ._records import (
    LEASE_MIN_REVISION_GRACE_MS,
    LEASE_RENEW_LEAD_MS,
    LEASE_REQUEST_TIMEOUT_MS,
    LEASE_RETRY_MS,
    RunStatus,
)
from ._vocab import *  # noqa: F403
from ._vocab import __all__ as _vocab_all

__all__ = [
    "LEASE_MIN_REVISION_GRACE_MS",
    "LEASE_RENEW_LEAD_MS",
    "LEASE_REQUEST_TIMEOUT_MS",
    "LEASE_RETRY_MS",
    "LeaseRegistry",
    "RunStatus",
    *_vocab_all,
]
