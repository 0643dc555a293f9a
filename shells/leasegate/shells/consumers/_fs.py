"""Private-file primitives: 0700 directories, atomic 0600 files, bounded removal."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "atomic_write",
    "ensure_private_dir",
    "is_temp_name",
    "remove_below",
    "remove_tree",
    "rmdir_below",
    "safe_segment",
    "sweep_temp_files",
]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
_DIR_OPEN: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: Opening a directory entry that must itself be a directory, never a symlink.
_DIR_OPEN_NOFOLLOW: Final = _DIR_OPEN | os.O_NOFOLLOW
#: What ``open(O_DIRECTORY | O_NOFOLLOW)`` fails with for a missing entry, a
#: non-directory or a symlink (ELOOP).
_NOT_A_DIR: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
_SEGMENT: Final = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,128}")
#: The name of an :func:`atomic_write` temporary file:
#: ``.<name>~tmp~<pid>~<8 hex digits>``. ``~`` is in no plain segment
#: (:data:`_SEGMENT`, :func:`safe_segment`), so no credential file or
#: directory of a :class:`~leasegate.shells.consumers.TaskRoot` is ever
#: named like one.
_TEMP: Final = re.compile(r"\..*~tmp~[0-9]+~[0-9a-f]{8}\Z", re.DOTALL)

#: Names of the temporary files :func:`atomic_write` is writing now in this
#: process (any thread): :func:`sweep_temp_files` never removes one of them.
_in_flight: set[str] = set()
_in_flight_lock = threading.Lock()


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


#: At most this many segments in a credential's own file path (material).
MAX_PARTS: Final = 16


def check_relative(path: str, *, max_parts: int = MAX_PARTS) -> tuple[str, ...]:
    """Split a relative file path into plain segments.

    Args:
        path: ``/``-separated relative path.
        max_parts: the most segments allowed (a consumer's rendered path may
            add one directory of its own, e.g. ``config/``, to a material's).

    Raises:
        UnsafePath: absolute, empty, ``.``/``..`` segments, other characters,
            or more than ``max_parts`` segments.
    """
    parts = tuple(path.split("/"))
    if not parts or len(parts) > max_parts or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise UnsafePath("a credential file path is not a safe relative path")
    return parts


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_below(base: Path, parts: Sequence[str]) -> int | None:
    """A directory fd of ``base/parts…``, opened component by component
    without following a symlink anywhere below ``base`` (``base`` itself is
    the caller's and is followed).

    Returns ``None`` when ``base`` or a component is missing, is not a
    directory, or is a symlink: then nothing of the root lies at that path.

    Raises:
        OSError: any other refusal of the file system.
    """
    try:
        fd = os.open(base, _DIR_OPEN)
    except OSError as e:
        if e.errno in _NOT_A_DIR:
            return None
        raise
    for part in parts:
        try:
            nfd = os.open(part, _DIR_OPEN_NOFOLLOW, dir_fd=fd)
        except OSError as e:
            os.close(fd)
            if e.errno in _NOT_A_DIR:
                return None
            raise
        os.close(fd)
        fd = nfd
    return fd


def _ensure_dir_tree(path: Path) -> None:
    """Create ``path`` and missing parents 0700 (the root of a layout: no
    symlink check above it, as the caller chose it)."""
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


def ensure_private_dir(path: Path, *, below: Path | None = None) -> None:
    """Create ``path`` (and parents below an existing one) with mode 0700.

    Without ``below``: missing directories are created 0700 and ``path`` is
    re-chmodded 0700; a symlink or non-directory at ``path`` is refused.

    With ``below`` (an ancestor of ``path``, created 0700 when missing):
    every component from ``below`` down to ``path`` is created (0700) or
    opened **by file descriptor, never following a symlink**, and each one —
    created or already there — is set to 0700 (``fchmod``), so a directory
    left with looser permissions is tightened and a symlink planted anywhere
    under ``below`` is refused (no gap between that check and the ``chmod``;
    a later path-based write is still the caller's: :func:`atomic_write`).

    Raises:
        UnsafePath: a component is a symlink or not a directory.
        OSError: the file system refused (``FileNotFoundError`` when a
            directory was removed concurrently).
    """
    if below is None:
        _ensure_dir_tree(path)
        return
    parts = path.relative_to(below).parts
    if not os.path.isdir(below):
        _ensure_dir_tree(below)
    fd = os.open(below, _DIR_OPEN)
    try:
        for part in parts:
            created = False
            try:
                os.mkdir(part, DIR_MODE, dir_fd=fd)
                created = True
            except FileExistsError:
                pass
            try:
                nfd = os.open(part, _DIR_OPEN_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP):  # ENOENT: removed meanwhile
                    raise UnsafePath(
                        "a credential directory is a symlink or not a directory"
                    ) from None
                raise
            try:
                os.fchmod(nfd, DIR_MODE)
                if created:
                    os.fsync(fd)
            except BaseException:
                os.close(nfd)
                raise
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600.

    A temporary file in the same directory (``O_EXCL``, 0600) is written,
    ``fsync``-ed, renamed over ``path``, and the directory is ``fsync``-ed: a
    reader sees the old file or the new one, never a part.

    The temporary file is named ``.<name>~tmp~<pid>~<8 hex digits>``
    (:func:`is_temp_name`); while this call writes it, it is registered as in
    flight so that :func:`sweep_temp_files` leaves it alone. One killed
    inside this call (``SIGKILL``) stays behind until a sweep removes it.

    Raises:
        OSError: the file system refused (the temporary file is removed).
    """
    name = f".{path.name}~tmp~{os.getpid()}~{os.urandom(4).hex()}"
    with _in_flight_lock:
        _in_flight.add(name)
    try:
        _write_replace(path, path.with_name(name), data)
    finally:
        with _in_flight_lock:
            _in_flight.discard(name)
    _fsync_dir(path.parent)


def _write_replace(path: Path, tmp: Path, data: bytes) -> None:
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


def is_temp_name(name: str) -> bool:
    """Whether ``name`` (one directory entry's name) is an :func:`atomic_write`
    temporary file's: ``.<name>~tmp~<pid>~<8 hex digits>``."""
    return _TEMP.fullmatch(name) is not None


def _raise_unless_missing(err: OSError) -> None:
    """``fwalk`` error handler: a directory removed concurrently is fine."""
    if not isinstance(err, FileNotFoundError):
        raise err


def sweep_temp_files(base: Path, parts: Sequence[str] = ()) -> int:
    """Remove the orphaned :func:`atomic_write` temporary files in
    ``base/parts…`` and every directory below it.

    An orphan is what a process killed inside :func:`atomic_write` left
    behind: a 0600 file holding (part of) the material it was writing. Every
    entry that :func:`is_temp_name` recognises and that no
    :func:`atomic_write` of this process is writing now is unlinked; nothing
    else is touched. The walk never follows a symlink below ``base`` (the
    directories are opened by file descriptor, as in :func:`remove_below`);
    a directory on the way that is missing, a symlink or not a directory
    means there is nothing to sweep. A directory that had an orphan is
    ``fsync``-ed.

    The temporary files of *another live process* writing into the same
    directories would be removed too (its write then fails): one process
    owns a task root.

    Args:
        base: the root (followed: the caller's own directory).
        parts: plain path segments below ``base`` (``()``: ``base`` itself).

    Returns:
        How many temporary files were removed.

    Raises:
        OSError: the file system refused (a directory that cannot be read,
            an entry that cannot be removed); never for an entry or a
            directory removed concurrently.
    """
    fd = _open_below(base, parts)
    if fd is None:
        return 0
    removed = 0
    try:
        walk = os.fwalk(".", dir_fd=fd, follow_symlinks=False, onerror=_raise_unless_missing)
        for _path, _dirs, files, dir_fd in walk:
            hit = False
            for name in files:
                if not is_temp_name(name):
                    continue
                with _in_flight_lock:
                    if name in _in_flight:
                        continue
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                removed += 1
                hit = True
            if hit:
                with contextlib.suppress(OSError):
                    os.fsync(dir_fd)
    finally:
        os.close(fd)
    return removed


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


def _rmtree_at(name: str, dir_fd: int) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(name, dir_fd=dir_fd, onexc=_ignore_missing)
    else:
        shutil.rmtree(
            name, dir_fd=dir_fd, onerror=lambda f, p, info: _ignore_missing(f, p, info[1])
        )


def remove_below(base: Path, parts: Sequence[str], *, prune: int = 0) -> bool:
    """Remove ``base/parts…`` without following a symlink anywhere below ``base``.

    The parent directories are opened by file descriptor with ``O_NOFOLLOW``;
    a directory is removed with ``shutil.rmtree`` relative to its parent's
    descriptor (symlink-attack safe: links inside are unlinked, never
    followed); a file or symlink at ``parts[-1]`` is unlinked itself. When a
    component on the way is a symlink or not a directory, nothing of the
    root lies there and nothing is removed (a planted link is never
    followed out of the root). Then up to ``prune`` parents, nearest first,
    are removed when empty (never ``base`` itself).

    Args:
        base: the root (followed: the caller's own directory).
        parts: plain path segments below ``base`` (at least one).
        prune: how many empty parents of the removed entry to remove.

    Returns:
        ``True`` when an entry was there and was removed.

    Raises:
        ValueError: ``parts`` is empty or ``prune`` reaches ``base``.
        OSError: the file system refused.
    """
    if not parts or prune >= len(parts):
        raise ValueError("remove_below needs a path below the root")
    fd = _open_below(base, parts[:-1])
    if fd is None:
        return False
    removed = False
    try:
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(parts[-1], fd)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(parts[-1], dir_fd=fd)
            removed = True
            with contextlib.suppress(OSError):
                os.fsync(fd)
    finally:
        os.close(fd)
    for depth in range(len(parts) - 1, len(parts) - 1 - prune, -1):
        if not rmdir_below(base, parts[:depth]):
            break
    return removed


def rmdir_below(base: Path, parts: Sequence[str]) -> bool:
    """Remove the directory ``base/parts…`` if it is empty, without following
    a symlink below ``base``; ``False`` when it is not there, not empty, or a
    component is a symlink or not a directory. Never raises for those."""
    if not parts:
        return False
    fd = _open_below(base, parts[:-1])
    if fd is None:
        return False
    try:
        os.rmdir(parts[-1], dir_fd=fd)
    except OSError:
        return False
    else:
        with contextlib.suppress(OSError):
            os.fsync(fd)
        return True
    finally:
        os.close(fd)
