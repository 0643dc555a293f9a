"""Private-file primitives: 0700 directories, atomic 0600 files, bounded removal."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import sys
from pathlib import Path
from typing import Final

__all__ = ["atomic_write", "ensure_private_dir", "remove_tree", "safe_segment"]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
_SEGMENT: Final = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,128}")


class UnsafePath(ValueError):  # noqa: N818 - reads as the refusal it is
    """A path segment or relative path is not allowed (the message never quotes it)."""


def safe_segment(value: str | None, *, what: str) -> str:
    """A directory name for ``value``: itself when it is a plain segment
    (``[A-Za-z0-9_.-]{1,128}``, not ``.``/``..``), ``"_"`` for ``None``, else
    ``"h-"`` + its SHA-256 hex (so any revision string maps to one safe name)."""
    if value is None:
        return "_"
    if _SEGMENT.fullmatch(value) and not value.startswith("h-") and value != "_":
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def check_relative(path: str) -> tuple[str, ...]:
    """Split a relative file path into plain segments.

    Raises:
        UnsafePath: absolute, empty, ``.``/``..`` segments, or other characters.
    """
    parts = tuple(path.split("/"))
    if not parts or len(parts) > 16 or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise UnsafePath("a credential file path is not a safe relative path")
    return parts


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_private_dir(path: Path, *, below: Path | None = None) -> None:
    """Create ``path`` (and parents below an existing one) with mode 0700.

    An existing directory is re-chmodded 0700; a symlink or non-directory is
    refused. With ``below`` (an ancestor of ``path``), every existing
    component between ``below`` and ``path`` is checked too, so a symlink
    anywhere under ``below`` is refused.

    Raises:
        UnsafePath: ``path`` exists and is a symlink or not a directory.
        OSError: the file system refused.
    """
    if below is not None:
        rel = path.relative_to(below)
        p = below
        for part in rel.parts:
            p = p / part
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                break
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                raise UnsafePath("a credential directory is a symlink or not a directory")
    missing: list[Path] = []
    p = path
    while True:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            missing.append(p)
            p = p.parent
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise UnsafePath("a credential directory is a symlink or not a directory")
        break
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, DIR_MODE)
        os.chmod(d, DIR_MODE)
        _fsync_dir(d.parent)
    os.chmod(path, DIR_MODE)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600.

    A temporary file in the same directory (``O_EXCL``, 0600) is written,
    ``fsync``-ed, renamed over ``path``, and the directory is ``fsync``-ed: a
    reader sees the old file or the new one, never a part.

    Raises:
        OSError: the file system refused (the temporary file is removed).
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, FILE_MODE)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _ignore_missing(func: object, path: str, exc: BaseException) -> None:
    """``rmtree`` error handler: an entry already gone (removed concurrently) is fine."""
    if not isinstance(exc, FileNotFoundError):
        raise exc


def remove_tree(path: Path) -> bool:
    """Remove ``path`` (a directory tree, or a file/symlink itself, never its
    target) and ``fsync`` its parent; ``False`` when it did not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=_ignore_missing)
        else:
            shutil.rmtree(path, onerror=lambda f, p, info: _ignore_missing(f, p, info[1]))
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        _fsync_dir(path.parent)
    return True
