"""leasegate's shells: the I/O around the sans-I/O core.

Async shell (anyio: trio and asyncio), threading shell, boto3 SSM reader,
transports, file event store and the ``leasegate`` command. The shells move
bytes, run timers, call boto3 and consumers; they decide nothing.

Logging: every shell module logs to its own logger under ``leasegate``
(``docs/logging.md``); the package logger has a ``NullHandler``, so nothing is
printed unless the host configures logging (the ``leasegate`` command's
``-v``/``-q`` do). An optional part whose extra is missing raises
:class:`MissingExtraError` (an ``ImportError``) naming the extra.
"""

import logging as _logging

from ._extras import MissingExtraError

__all__ = ["MissingExtraError"]

_logging.getLogger("leasegate").addHandler(_logging.NullHandler())
