"""The consumer interfaces and the neutral material a consumer installs."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from leasegate.core import Secret
from leasegate.core.registry import Assignment, Identity

from ._fs import ensure_private_dir, remove_below, rmdir_below, safe_segment, sweep_temp_files

__all__ = [
    "Consumer",
    "ConsumerError",
    "Gate",
    "Material",
    "TaskRoot",
]

CredentialClass = Literal["engine", "mcp", "github", "ssh"]


class ConsumerError(Exception):
    """A consumer could not do its work. The message is a fixed text: it never
    holds a secret, a path component from input, or an exception's text."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Material:
    """What one credential identity puts on disk: the neutral input of a consumer.

    Attributes:
        identity: ``(class, credentialId, revision)``, the unit of selective cleanup.
        auth_kind: the credential's auth kind (``env``, ``config-dir``,
            ``oauth``, ``token``, or ``key`` for SSH).
        env: environment variables (engine ``env``), name → value.
        files: relative path → content (engine ``config-dir``/``oauth``/``token``).
        headers: HTTP header name → value (MCP).
        token: a single token (GitHub).
        private_key: an SSH private key (SSH).

    Every value is a :class:`Secret`; ``repr`` shows none. Build one from the
    core's wire values with :func:`leasegate.shells.consumers.material_from_value`.
    """

    identity: Identity
    auth_kind: str
    env: Mapping[str, Secret] = dataclasses.field(default_factory=dict)
    files: Mapping[str, Secret] = dataclasses.field(default_factory=dict)
    headers: Mapping[str, Secret] = dataclasses.field(default_factory=dict)
    token: Secret | None = None
    private_key: Secret | None = None


class TaskRoot:
    """The per-task directory layout under one base directory.

    ``<base>/<task>/<class>/<credentialId>/<revision>/…``: each identity owns
    exactly one directory, so a selective cleanup removes exactly what an
    identity owns. Every directory is 0700, every file 0600. Segments that
    are not plain names (``[A-Za-z0-9_.-]``) are replaced by their SHA-256
    (a ``None`` revision is ``_``).

    Args:
        base: the base directory (created 0700 when missing).
    """

    def __init__(self, base: Path | str) -> None:
        self.base = Path(base)

    def task_dir(self, task_id: str) -> Path:
        """The task's root directory (not created)."""
        return self.base / safe_segment(task_id, what="task")

    def identity_parts(self, task_id: str, identity: Identity) -> tuple[str, str, str, str]:
        """The four plain segments of ``identity``'s directory below :attr:`base`."""
        return (
            safe_segment(task_id, what="task"),
            safe_segment(identity.credential_class, what="class"),
            safe_segment(identity.credential_id, what="credential"),
            safe_segment(identity.revision, what="revision"),
        )

    def identity_dir(self, task_id: str, identity: Identity) -> Path:
        """The directory ``identity`` owns in the task (not created)."""
        return self.base.joinpath(*self.identity_parts(task_id, identity))

    def make_identity_dir(self, task_id: str, identity: Identity) -> Path:
        """Create (0700) and return the identity's directory.

        Every directory from the base down is opened without following a
        symlink and set to 0700 (see :func:`ensure_private_dir`).

        Raises:
            UnsafePath: a directory on the way is a symlink or not a directory.
            OSError: the file system refused.
        """
        path = self.identity_dir(task_id, identity)
        ensure_private_dir(path, below=self.base)
        return path

    def remove_identity(self, task_id: str, identity: Identity) -> bool:
        """Remove what ``identity`` owns, then its empty parents up to the task root.

        Never follows a symlink below the base: a symlink planted on the way
        means nothing of the identity is in the root, and nothing is removed
        (:func:`remove_below`).

        Raises:
            OSError: the file system refused.
        """
        return remove_below(self.base, self.identity_parts(task_id, identity), prune=2)

    def remove_credential(self, task_id: str, credential_id: str, classes: Sequence[str]) -> bool:
        """Remove every revision of ``credential_id`` in each of ``classes``,
        then the emptied class directories (symlinks never followed).

        Raises:
            OSError: the file system refused.
        """
        task = safe_segment(task_id, what="task")
        cid = safe_segment(credential_id, what="credential")
        removed = False
        for cls in classes:
            parts = (task, safe_segment(cls, what="class"), cid)
            removed = remove_below(self.base, parts, prune=1) or removed
        return removed

    def remove_classes(self, task_id: str, classes: Sequence[str]) -> bool:
        """Remove the task's directories of ``classes``, then the task root if empty.

        Symlinks below the base are never followed (a planted one is
        removed itself, or, on the way, leaves nothing to remove).

        Raises:
            OSError: the file system refused.
        """
        task = safe_segment(task_id, what="task")
        removed = False
        for cls in classes:
            removed = remove_below(self.base, (task, safe_segment(cls, what="class"))) or removed
        rmdir_below(self.base, (task,))  # only when empty
        return removed

    def sweep_orphans(self) -> int:
        """Remove every orphaned temporary file under the base: what a process
        killed inside :func:`~leasegate.shells.consumers.atomic_write` left
        behind, in any task directory. Call it at boot, before the runtime
        runs (:class:`~leasegate.shells.ports.ConsumerSet` does on
        construction); the files of writes in flight in this process are
        kept (:func:`~leasegate.shells.consumers._fs.sweep_temp_files`).

        Returns:
            How many temporary files were removed (0 when the base is missing).

        Raises:
            OSError: the file system refused.
        """
        return sweep_temp_files(self.base)

    def sweep_identity(self, task_id: str, identity: Identity) -> int:
        """Remove the orphaned temporary files in ``identity``'s directory and
        below it (every install of the identity does, before it writes).
        Symlinks below the base are never followed.

        Returns:
            How many temporary files were removed.

        Raises:
            OSError: the file system refused.
        """
        return sweep_temp_files(self.base, self.identity_parts(task_id, identity))

    def remove_task(self, task_id: str) -> bool:
        """Remove the task's whole root directory (a symlink there: the link itself).

        Raises:
            OSError: the file system refused.
        """
        return remove_below(self.base, (safe_segment(task_id, what="task"),))


class Gate:
    """Admission per task run: ``open`` admits a run, ``close`` closes it and
    every older run of the task (reference ``openEngineGate``/``closeEngineGate``).

    No I/O; thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._closed_upto: dict[str, int] = {}

    def open(self, assignment: Assignment) -> None:
        """Admit ``assignment``'s run (a run closed already stays closed).

        Raises:
            ConsumerError: the run or a newer one was closed.
        """
        with self._lock:
            if assignment.run_epoch <= self._closed_upto.get(assignment.task_id, -1):
                raise ConsumerError("this task run was already closed")
            self._open[assignment.task_id] = assignment.run_epoch

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older. Never raises."""
        with self._lock:
            prev = self._closed_upto.get(assignment.task_id, -1)
            self._closed_upto[assignment.task_id] = max(prev, assignment.run_epoch)
            if self._open.get(assignment.task_id, -1) <= assignment.run_epoch:
                self._open.pop(assignment.task_id, None)

    def closed(self, assignment: Assignment) -> bool:
        """Whether ``assignment``'s run (or a newer one) was closed."""
        with self._lock:
            return assignment.run_epoch <= self._closed_upto.get(assignment.task_id, -1)

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment``'s run is admitted now."""
        with self._lock:
            return self._open.get(assignment.task_id) == assignment.run_epoch


class Consumer(Protocol):
    """A credential consumer: what a host replaces to put credentials elsewhere.

    ``install`` writes (or replaces) the given identities' material for the
    run; ``open``/``close`` flip admission without I/O; ``cleanup`` removes
    exactly what the ``removed`` identities own, or, with ``removed=None``,
    everything of the task. Any exception is reported by the runtime as
    ``"a credential consumer failed"`` (its text is not shown).
    """

    def install(self, assignment: Assignment, materials: Sequence[Material]) -> None:
        """Write ``materials`` for ``assignment``'s run (atomically per file)."""

    def open(self, assignment: Assignment) -> None:
        """Admit work of ``assignment``'s run."""

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older."""

    def cleanup(self, task_id: str, removed: Sequence[Identity] | None) -> None:
        """Remove what ``removed`` own (selective) or the task's whole root (``None``)."""
