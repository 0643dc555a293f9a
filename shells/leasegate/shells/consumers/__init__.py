"""Reference credential consumers: put a task's credentials on disk, take them away.

A host can replace any consumer with its own implementation of
:class:`Consumer` (``install``, ``open``, ``close``, ``cleanup``). Guide and
file formats: ``docs/consumers.md``.
"""

from ._base import Consumer, ConsumerError, Gate, Material, TaskRoot
from ._fs import UnsafePath, atomic_write, ensure_private_dir
from .reference import (
    EngineConsumer,
    FileConsumer,
    McpConsumer,
    PersonConsumer,
    material_from_value,
)

__all__ = [
    "Consumer",
    "ConsumerError",
    "EngineConsumer",
    "FileConsumer",
    "Gate",
    "Material",
    "McpConsumer",
    "PersonConsumer",
    "TaskRoot",
    "UnsafePath",
    "atomic_write",
    "ensure_private_dir",
    "material_from_value",
]
