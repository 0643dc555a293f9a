"""The reference consumers: engines, MCP, and the owner's Git credentials and SSH key.

Each writes under a shared :class:`TaskRoot`
(``<base>/<task>/<class>/<credentialId>/<revision>/``):

* :class:`EngineConsumer` (class ``engine``): ``auth_kind`` ``env`` → one
  ``engine.env`` file of ``export NAME='value'`` lines (POSIX-shell quoting);
  ``config-dir``/``oauth``/``token`` → the files under ``config/<path>``.
* :class:`McpConsumer` (class ``mcp``): ``headers.json``, an object of header
  name → value (``oauth``: ``Authorization: Bearer <token>``).
* :class:`PersonConsumer` (classes ``github`` and ``ssh``): ``git-credentials``
  (``https://x-access-token:<token>@github.com``, for ``credential.helper
  store``) plus a ``gitconfig`` pointing at it; ``id_key``, the SSH private key.

Reference: ``host/lib/credential-consumers/*`` (engines, MCP, github); the
file formats are this port's (documented in ``docs/consumers.md``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from leasegate.core.registry import Assignment, Identity

from ._base import ConsumerError, Gate, Material, TaskRoot
from ._fs import MAX_PARTS, UnsafePath, atomic_write, check_relative, ensure_private_dir

__all__ = [
    "EngineConsumer",
    "FileConsumer",
    "McpConsumer",
    "PersonConsumer",
    "material_from_value",
]

_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as strict UTF-8 (no lone surrogate).

    Checked before encoding so that the refusal is a fixed-text
    :class:`ConsumerError` raised outside any ``except`` block: a
    ``UnicodeEncodeError`` carries the whole string (``.object``), and
    would ride along as ``__context__`` of an error raised while handling it.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class FileConsumer:
    """Base of the reference consumers: a gate plus files under a :class:`TaskRoot`.

    Args:
        root: the shared task-root layout.
        classes: the credential classes this consumer owns.

    Subclasses implement :meth:`render` (material → relative path → bytes).
    Implements the :class:`~leasegate.shells.consumers.Consumer` protocol.
    """

    classes: tuple[str, ...] = ()

    def __init__(self, root: TaskRoot) -> None:
        self.root = root
        self.gate = Gate()

    def render(self, material: Material) -> Mapping[str, bytes]:
        """The files of ``material``: relative path → content.

        Raises:
            ConsumerError: the material is not usable (fixed message).
        """
        raise NotImplementedError

    def render_at(self, material: Material, directory: Path) -> Mapping[str, bytes]:
        """:meth:`render` for a material whose files go to ``directory`` (its
        identity's directory); a consumer whose files name their own location
        overrides this. Raises as :meth:`render`."""
        return self.render(material)

    def install(self, assignment: Assignment, materials: Sequence[Material]) -> None:
        """Write each material's files (0600, atomic) in its identity's directory (0700).

        All materials are rendered (validated) before anything is written.
        Each identity's directory is swept of orphaned temporary files (a
        write killed before) before its files are written.

        Raises:
            ConsumerError: a material of another class, an unusable material,
                an unsafe path, or the run was closed.
            OSError: the file system refused.
        """
        if self.gate.closed(assignment):
            raise ConsumerError("this task run was already closed")
        plans: list[tuple[Identity, Mapping[str, bytes]]] = []
        for m in materials:
            if m.identity.credential_class not in self.classes:
                raise ConsumerError("material of another credential class")
            files = self.render_at(m, self.root.identity_dir(assignment.task_id, m.identity))
            for rel in files:
                try:
                    check_relative(rel, max_parts=MAX_PARTS + 1)  # + the consumer's own dir
                except UnsafePath:
                    raise ConsumerError("a credential file path is not safe") from None
            plans.append((m.identity, files))
        for identity, files in plans:
            base = self.root.make_identity_dir(assignment.task_id, identity)
            self.root.sweep_identity(assignment.task_id, identity)
            for rel, data in files.items():
                target = base.joinpath(*rel.split("/"))
                ensure_private_dir(target.parent, below=base)
                atomic_write(target, data)

    def path_of(self, task_id: str, identity: Identity, rel: str) -> Path:
        """Where file ``rel`` of ``identity`` lives (for the engine launcher)."""
        return self.root.identity_dir(task_id, identity).joinpath(
            *check_relative(rel, max_parts=MAX_PARTS + 1)
        )

    def open(self, assignment: Assignment) -> None:
        """Admit work of ``assignment``'s run (no I/O).

        Raises:
            ConsumerError: the run (or a newer one) was closed.
        """
        self.gate.open(assignment)

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older (no I/O)."""
        self.gate.close(assignment)

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment``'s run is admitted."""
        return self.gate.admits(assignment)

    def cleanup(self, task_id: str, removed: Sequence[Identity] | None) -> None:
        """Selective: remove exactly the directories of the ``removed``
        identities of this consumer's classes. Full (``None``): remove this
        consumer's classes' directories of the task, then the task root if
        that left it empty (consumers sharing a root clean up concurrently;
        none removes another's files).

        Raises:
            OSError: the file system refused.
        """
        if removed is None:
            self.root.remove_classes(task_id, self.classes)
            return
        for identity in removed:
            if identity.credential_class in self.classes:
                self.root.remove_identity(task_id, identity)


class EngineConsumer(FileConsumer):
    """Engine credentials: an env file, or config-dir files (class ``engine``)."""

    classes = ("engine",)

    def render(self, material: Material) -> Mapping[str, bytes]:
        """``env`` → ``engine.env``; other kinds → ``config/<path>`` per file."""
        if material.auth_kind == "env":
            if not material.env:
                raise ConsumerError("engine env material is empty")
            lines = []
            for name, value in material.env.items():
                text = value.reveal()
                if not _ENV_NAME.fullmatch(name) or "\x00" in text:
                    raise ConsumerError("engine env material is not usable")
                lines.append(f"export {name}={_shell_quote(text)}\n")
            return {"engine.env": "".join(lines).encode("utf-8", "surrogatepass")}
        if not material.files:
            raise ConsumerError("engine file material is empty")
        out: dict[str, bytes] = {}
        for rel, value in material.files.items():
            try:
                check_relative(rel)
            except UnsafePath:
                raise ConsumerError("a credential file path is not safe") from None
            out["config/" + rel] = value.reveal().encode("utf-8", "surrogatepass")
        return out

    def config_dir(self, task_id: str, identity: Identity) -> Path:
        """The config directory of a file-style engine identity."""
        return self.root.identity_dir(task_id, identity) / "config"


class McpConsumer(FileConsumer):
    """MCP headers (class ``mcp``): ``headers.json``."""

    classes = ("mcp",)

    def render(self, material: Material) -> Mapping[str, bytes]:
        """``headers.json``: ``{name: value}``; ``oauth`` → ``Authorization: Bearer``.

        Raises:
            ConsumerError: empty, a header name that is not a token, or a
                value with a control character or not encodable as UTF-8.
        """
        headers = {k: v.reveal() for k, v in material.headers.items()}
        if material.token is not None:
            headers["Authorization"] = "Bearer " + material.token.reveal()
        if not headers:
            raise ConsumerError("MCP material is empty")
        for name, value in headers.items():
            if (
                not _HEADER_NAME.fullmatch(name)
                or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value)
                or not _utf8(value)
            ):
                raise ConsumerError("MCP material is not usable")
        return {"headers.json": json.dumps(headers, ensure_ascii=False).encode("utf-8")}


class PersonConsumer(FileConsumer):
    """The owner's GitHub sign-in and SSH key (classes ``github`` and ``ssh``)."""

    classes = ("github", "ssh")

    def render_at(self, material: Material, directory: Path) -> Mapping[str, bytes]:
        """As :meth:`render`, with the ``gitconfig`` naming ``git-credentials``
        by its absolute path (git runs a credential helper in the repository's
        directory, so a relative ``--file`` would not be found).

        The helper is ``store --file=<path>``, the path shell-quoted and the
        whole value quoted for git's config syntax.

        Raises:
            ConsumerError: as :meth:`render`, or a directory path with a
                control character.
        """
        files = dict(self.render(material))
        if "gitconfig" in files:
            path = os.path.abspath(directory / "git-credentials")
            if any(ord(c) < 32 or ord(c) == 127 for c in path):
                raise ConsumerError("the credential directory path is not usable")
            helper = "store --file=" + shlex.quote(path)
            value = '"' + helper.replace("\\", "\\\\").replace('"', '\\"') + '"'
            files["gitconfig"] = f"[credential]\n\thelper = {value}\n".encode(
                "utf-8", "surrogatepass"
            )
        return files

    def render(self, material: Material) -> Mapping[str, bytes]:
        """GitHub → ``git-credentials`` + ``gitconfig``; SSH → ``id_key``.

        Raises:
            ConsumerError: empty material, or a GitHub token not encodable
                as UTF-8 (an SSH key is written byte for byte, surrogatepass).

        This ``gitconfig`` names ``git-credentials`` relatively (no directory
        known here); :meth:`install` writes the absolute one of :meth:`render_at`.
        """
        if material.identity.credential_class == "github":
            if material.token is None or not material.token.reveal():
                raise ConsumerError("github material is empty")
            if not _utf8(material.token.reveal()):
                raise ConsumerError("github material is not usable")
            token = urllib.parse.quote(material.token.reveal(), safe="")
            return {
                "git-credentials": f"https://x-access-token:{token}@github.com\n".encode(),
                "gitconfig": b"[credential]\n\thelper = store --file=git-credentials\n",
            }
        if material.private_key is None or not material.private_key.reveal():
            raise ConsumerError("ssh material is empty")
        key = material.private_key.reveal()
        if not key.endswith("\n"):
            key += "\n"
        return {"id_key": key.encode("utf-8", "surrogatepass")}


def material_from_value(value: Any, revision: str | None) -> Material:
    """Build the neutral :class:`Material` from a core wire value.

    Args:
        value: a :class:`~leasegate.core.wire.credentials.EngineValue`,
            ``McpValue``, ``GithubValue`` or ``SshValue``.
        revision: the identity's revision (the observed version as the
            runtime's cleanup identities carry it).

    Raises:
        ConsumerError: not one of those values.
    """
    cls = getattr(value, "credential_class", None)
    location = getattr(value, "location", None)
    cred_id = getattr(location, "credential_id", None)
    if cls not in ("engine", "mcp", "github", "ssh") or not isinstance(cred_id, str):
        raise ConsumerError("not a leased credential value")
    identity = Identity(credential_class=cls, credential_id=cred_id, revision=revision)
    if cls == "engine":
        return Material(
            identity=identity,
            auth_kind=value.auth_kind,
            env=dict(value.env or {}),
            files=dict(value.files or {}),
        )
    if cls == "mcp":
        header = value.header
        return Material(
            identity=identity,
            auth_kind=value.auth_kind,
            headers={header.name: header.value} if header is not None else {},
            token=value.access_token,
        )
    if cls == "github":
        return Material(identity=identity, auth_kind="token", token=value.token)
    return Material(identity=identity, auth_kind="key", private_key=value.private_key)
