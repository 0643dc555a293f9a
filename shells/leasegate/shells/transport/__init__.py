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

The WebSocket clients bound what they hold for a slow consumer
(:data:`DEFAULT_MAX_INBOX_FRAMES` frames; reading stops while it is full),
refuse messages over :data:`DEFAULT_MAX_FRAME_BYTES` (the connection fails with
1009 and is reconnected), and never use a proxy taken from the environment
(``docs/transport.md``, WS-001 to WS-006).
"""

from ._frames import Reauthenticated, dumps_frame, parse_frame
from .anyio_ws import AnyioWebSocketClient
from .memory import MemoryFrameEnd, ThreadFrameEnd, memory_pair, thread_memory_pair
from .thread_ws import ThreadWebSocketClient
from .websocket import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_INBOX_FRAMES,
    DEFAULT_SEND_TIMEOUT_S,
    Backoff,
    NotConnected,
    WebSocketClient,
)
from .ws_adapter import AnyioWebSocketTransport

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_INBOX_FRAMES",
    "DEFAULT_SEND_TIMEOUT_S",
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
