"""The runtime core: the lease registry and the env replica composed (issue #5).

:class:`CredentialRuntime` ports the behavior of the reference's
``CloudCredentialRuntime`` (``host/lib/cloud-credential-runtime.ts``; catalog
``design/behaviors/runtime.md``, RT-001 … RT-141) as a sans-I/O machine. Its
design and vocabulary are in ``docs/runtime.md``.
"""

from __future__ import annotations

from ._journal import MemoryJournal
from ._machine import (
    REPLICA_FRAME_KINDS,
    CredentialRuntime,
    DetachConsumers,
    Settled,
    adapt_cleanup_request,
    consumer_cleanup_request,
    is_replica_frame,
)
from ._task import TaskStatus
from ._vocab import *  # noqa: F403
from ._vocab import __all__ as _vocab_all

__all__ = [
    "REPLICA_FRAME_KINDS",
    "CredentialRuntime",
    "DetachConsumers",
    "MemoryJournal",
    "Settled",
    "TaskStatus",
    "adapt_cleanup_request",
    "consumer_cleanup_request",
    "is_replica_frame",
    *_vocab_all,
]
