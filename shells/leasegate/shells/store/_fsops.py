"""The file-system seam of the event store.

Every file-system call the store makes goes through one :class:`FsOps`
object, so that tests can record the order of steps (ES-009, ES-046) and
inject a crash right after any write, fsync, rename, unlink or mkdir
(ES-069, ES-070): a subclass overrides :meth:`FsOps.step` hooks.

:func:`write_atomic` is the one way the store writes a file (ES-067):
exclusive-create a uniquely named temp file next to the target, write all
bytes, fsync it, rename it over the target, fsync the directory. A missing
parent directory is created and its parent fsynced. On failure the temp file
is removed (best effort).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat as stat_mod

__all__ = ["FsOps", "ensure_dir", "write_atomic"]

# One read of a whole cursor, baseline, marker or event file (they are far smaller).
_READ_CHUNK_BYTES = 1 << 16


class FsOps:
    """Thin wrappers over :mod:`os`; one method per step kind.

    Mutating steps: :meth:`write` (creates and writes a new file),
    :meth:`fsync_file`, :meth:`rename`, :meth:`fsync_dir`, :meth:`unlink`,
    :meth:`mkdir`. Read steps: :meth:`read`, :meth:`listdir`, :meth:`stat`.
    All raise :class:`OSError` as :mod:`os` does.
    """

    def write(self, path: str, data: bytes) -> int:
        """Create ``path`` exclusively (mode 0600), write all of ``data``;
        return the open descriptor (the caller fsyncs and closes it)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except BaseException:
            os.close(fd)
            raise
        return fd

    def fsync_file(self, fd: int) -> None:
        """``fsync`` an open file descriptor."""
        os.fsync(fd)

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` by ``src`` (same directory)."""
        os.replace(src, dst)

    def fsync_dir(self, path: str) -> None:
        """``fsync`` a directory, so that a rename or create in it is durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: str) -> None:
        """Remove a file."""
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        """Create one directory (mode 0700)."""
        os.mkdir(path, 0o700)

    def read(self, path: str) -> bytes:
        """Read a whole file.

        Unbuffered: ``open``, ``read`` until end of file, ``close`` (a file
        the size of a cursor or a baseline costs four system calls, where
        :func:`open` adds an ``fstat``, an ``ioctl`` and an ``lseek``).
        A directory raises :class:`IsADirectoryError`, as :func:`open` does.
        """
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks: list[bytes] = []
            while chunk := os.read(fd, _READ_CHUNK_BYTES):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def listdir(self, path: str) -> list[str]:
        """List a directory's entry names."""
        return os.listdir(path)

    def stat(self, path: str) -> os.stat_result:
        """``os.stat`` (follows symlinks)."""
        return os.stat(path)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a stat that does not raise)."""
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True


def ensure_dir(fs: FsOps, path: str) -> None:
    """Create ``path`` and missing parents; fsync each new directory's parent."""
    try:
        st = fs.stat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        ensure_dir(fs, parent)
    try:
        fs.mkdir(path)
    except FileExistsError:
        return
    fs.fsync_dir(parent or ".")


def write_atomic(fs: FsOps, path: str, data: bytes, *, directory_exists: bool = False) -> None:
    """Durably replace ``path`` with ``data`` (ES-067).

    Steps: ensure the directory (skipped when the caller passes
    ``directory_exists=True``: it made sure of it in the same lock hold);
    write ``<name>.<pid>.<random>.tmp`` exclusively; fsync it; rename it over
    ``path``; fsync the directory. When this returns, the new content is
    durable. Temp names never match the 16-digit pattern and never end in
    ``.json``.

    Raises:
        OSError: from any step; the temp file is removed first (best effort).
            A ``BaseException`` leaves the temp file behind (tolerated).
    """
    directory = os.path.dirname(path)
    if not directory_exists:
        ensure_dir(fs, directory)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        fd = fs.write(tmp, data)
    except FileExistsError:
        raise  # not ours to remove
    except Exception:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    renamed = False
    try:
        try:
            fs.fsync_file(fd)
        finally:
            fs.close(fd)
        fs.rename(tmp, path)
        renamed = True
        fs.fsync_dir(directory)
    except Exception:
        # A BaseException (KeyboardInterrupt, a simulated crash) leaves the
        # temp file, as a real crash would; every reader ignores it.
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
