"""The store's cross-process lock: ``flock`` on ``<root>/cursor.json.lock``.

* ``flock`` locks belong to an open file description, so two store instances
  in one process (on different threads) exclude each other, and the kernel
  releases the lock when its holder dies (ES-072): a SIGKILLed appender never
  leaves a stale lock. POSIX record locks (``fcntl.lockf``) are per process
  and are not used.
* Writers take it exclusively; readers take it shared (ES-032), so a read
  never observes half of a compaction.
* The wait is bounded (5 s by default); then
  :class:`~leasegate.core.ledger.OrchestrationLockTimeoutError`.
* The lock file is a regular file, created when missing, never deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from leasegate.core.ledger import OrchestrationLockTimeoutError

__all__ = ["file_lock"]


@contextlib.contextmanager
def file_lock(path: str, *, shared: bool, timeout_s: float) -> Iterator[None]:
    """Hold ``flock`` on ``path`` for the ``with`` body.

    Args:
        path: the lock file (created, mode 0600, if missing; its directory
            must exist).
        shared: take ``LOCK_SH`` (readers) instead of ``LOCK_EX``.
        timeout_s: the longest wait, in seconds.

    Raises:
        OrchestrationLockTimeoutError: not obtained within ``timeout_s``.
        OSError: opening the lock file failed.

    The lock is released when the body raises, and by the kernel when the
    process dies.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, op)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OrchestrationLockTimeoutError(
                        f"Timed out after {timeout_s:g} s waiting for the orchestration store lock."
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
