"""An explicit HTTP ``CONNECT`` tunnel for the thread and anyio WebSocket clients.

``websockets`` tunnels its own connections (the asyncio client passes
``proxy=`` to it); :class:`~leasegate.shells.transport.ThreadWebSocketClient`
and :class:`~leasegate.shells.transport.AnyioWebSocketClient` open the TCP
connection themselves (so ``close`` can abort it), so they speak the
``CONNECT`` exchange here: the request from ``websockets.proxy``, the
response read by :class:`ConnectResponse`. Only ``http://`` proxies are
supported by those two clients; the environment is never consulted
(``docs/transport.md``, WS-005 and WS-006).
"""

from __future__ import annotations

import re
from typing import Final

from websockets.exceptions import InvalidProxy, ProxyError
from websockets.proxy import Proxy, parse_proxy, prepare_connect_request
from websockets.uri import WebSocketURI

from ._frames import check_proxy, safe_proxy_url

__all__ = ["ConnectResponse", "connect_request", "parse_http_proxy"]

#: Largest ``CONNECT`` response head accepted, bytes.
MAX_CONNECT_RESPONSE_BYTES: Final = 16 * 1024

_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")


def parse_http_proxy(proxy: str | None) -> Proxy | None:
    """Validate an explicit ``http://`` proxy URL (``None``: no proxy).

    Raises:
        InvalidProxy: not an ``http://`` proxy URL; the message holds
            :func:`~leasegate.shells.transport._frames.safe_proxy_url` of it, never
            its user info.
    """
    if check_proxy(proxy) is None:
        return None
    assert proxy is not None
    parsed = parse_proxy(proxy)
    if parsed.scheme != "http":
        raise InvalidProxy(safe_proxy_url(proxy), "this client supports http:// proxies only")
    return parsed


def connect_request(proxy: Proxy, uri: WebSocketURI) -> bytes:
    """The ``CONNECT host:port`` request for ``uri`` (with ``Proxy-Authorization``
    when the proxy URL has user info; no ``User-Agent``)."""
    return prepare_connect_request(proxy, uri, None)


class ConnectResponse:
    """Reads a proxy's answer to ``CONNECT``, fed in pieces.

    :meth:`feed` returns ``True`` once a ``2xx`` status line and its headers
    were read. A proxy must not send anything after them before the client
    speaks (a WebSocket server never speaks first).

    Raises (from :meth:`feed`):
        ProxyError: the proxy refused the tunnel (the message names the
            status code only), answered something that is not HTTP, closed
            the connection (``b""`` fed), or sent a head over 16 KiB.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> bool:
        """Add received bytes (``b""``: the proxy closed); ``True`` once tunnelled."""
        if not data:
            raise ProxyError("the proxy closed the connection")
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        head_bytes = len(self._buffer) if end < 0 else end + 4
        if head_bytes > MAX_CONNECT_RESPONSE_BYTES:  # even when its end came with it
            raise ProxyError("the proxy's response is too long")
        if end < 0:
            return False
        status_line = self._buffer.split(b"\r\n", 1)[0]
        match = _STATUS.fullmatch(status_line)
        if match is None:
            raise ProxyError("the proxy's response is not HTTP")
        status = int(match.group(1))
        if not 200 <= status < 300:
            raise ProxyError(f"the proxy refused the tunnel: HTTP {status}")
        if len(self._buffer) > end + 4:
            raise ProxyError("the proxy sent data before the WebSocket handshake")
        return True
