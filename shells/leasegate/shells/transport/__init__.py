"""Transports: JSON text frames between a runner host and the cloud bridge.

* :func:`memory_pair` (anyio, asyncio or trio) and :func:`thread_memory_pair`
  (thread-safe): connected in-memory ends for tests and in-process hosts.
* :class:`WebSocketClient`: the cloud bridge over ``websockets`` (asyncio),
  reconnecting with bounded, jittered exponential backoff.
* :class:`AnyioWebSocketClient`: the same contract on anyio streams and the
  ``websockets`` sans-I/O protocol: asyncio **and** trio.
* :class:`AnyioWebSocketTransport`: that client behind the async shell's
  ``send``/``receive``/``aclose`` (re-authentications as markers in order).
* :class:`ThreadWebSocketClient`: the same contract for threads
  (``websockets.sync``), a blocking transport for the threading shell.

Every end parses incoming text with :func:`leasegate.core.loads` (JavaScript
``JSON.parse`` semantics); a frame that is not valid JSON, or not text, is
dropped and counted in ``dropped``, never fatal.
"""

from ._frames import Reauthenticated, dumps_frame, parse_frame
from .anyio_ws import AnyioWebSocketClient
from .memory import MemoryFrameEnd, ThreadFrameEnd, memory_pair, thread_memory_pair
from .thread_ws import ThreadWebSocketClient
from .websocket import Backoff, NotConnected, WebSocketClient
from .ws_adapter import AnyioWebSocketTransport

__all__ = [
    "AnyioWebSocketClient",
    "AnyioWebSocketTransport",
    "Backoff",
    "MemoryFrameEnd",
    "NotConnected",
    "Reauthenticated",
    "ThreadFrameEnd",
    "ThreadWebSocketClient",
    "WebSocketClient",
    "dumps_frame",
    "memory_pair",
    "parse_frame",
    "thread_memory_pair",
]
