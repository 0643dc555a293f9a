"""leasegate's sans-I/O core: pure, deterministic protocol machines.

Events in, commands out: no clock, no threads, no I/O, and the standard
library alone. See ``docs/index.md`` for the theory of operation,
``docs/protocol.md`` for the wire format and ``docs/api.md`` for the public
names of every module.

This top level gives the shared vocabulary (JSON, models, :class:`Secret`,
the :class:`Event`/:class:`Command` bases), the three machines
(:class:`LeaseRegistry`, :class:`ReplicaManager`, :class:`CredentialRuntime`)
and the values a runner author handles. A name that means different things
in different machines (``StartTimer``, ``CancelTimer``, ``SendAck``: the
registry's, the replica's and the runtime's) is **not** exported here;
import it from its machine's module (``leasegate.core.registry``,
``leasegate.core.replica``, ``leasegate.core.runtime``), where each keeps its
class name (traces record it).
"""

from ._base import Command, Event, OpIdSource
from ._json import JsonError, canonical_dumps, is_safe_int, loads, sha256_hex, utf16_len
from ._model import DecodeError, JsonValue, Model, decode, encode, spec
from ._secret import REDACTED, Secret
from .registry import (
    Assignment,
    CleanupRequest,
    CredentialEntry,
    Identity,
    InstallRequest,
    LeaseRegistry,
    RunStatus,
    TaskView,
)
from .replica import ReplicaLimits, ReplicaManager, ReplicaView, ViewEntry, ViewProject
from .runtime import (
    ConsumerWork,
    CredentialFailure,
    CredentialRuntime,
    CredentialUnavailable,
    EnginesPort,
    FilesPort,
    GitHold,
    HoldInfo,
    McpPort,
    MemoryJournal,
    Notify,
    OwedCleanup,
    PersonPort,
    ReplicaPort,
    RunSetup,
    TaskCleanupRequest,
)

__all__ = [
    "REDACTED",
    "Assignment",
    "CleanupRequest",
    "Command",
    "ConsumerWork",
    "CredentialEntry",
    "CredentialFailure",
    "CredentialRuntime",
    "CredentialUnavailable",
    "DecodeError",
    "EnginesPort",
    "Event",
    "FilesPort",
    "GitHold",
    "HoldInfo",
    "Identity",
    "InstallRequest",
    "JsonError",
    "JsonValue",
    "LeaseRegistry",
    "McpPort",
    "MemoryJournal",
    "Model",
    "Notify",
    "OpIdSource",
    "OwedCleanup",
    "PersonPort",
    "ReplicaLimits",
    "ReplicaManager",
    "ReplicaPort",
    "ReplicaView",
    "RunSetup",
    "RunStatus",
    "Secret",
    "TaskCleanupRequest",
    "TaskView",
    "ViewEntry",
    "ViewProject",
    "canonical_dumps",
    "decode",
    "encode",
    "is_safe_int",
    "loads",
    "sha256_hex",
    "spec",
    "utf16_len",
]
