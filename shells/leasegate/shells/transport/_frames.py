"""Frame text <-> JSON value."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import re
import socket
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final, Protocol

from websockets.datastructures import Headers
from websockets.exceptions import InvalidProxy, InvalidURI
from websockets.proxy import parse_proxy
from websockets.uri import WebSocketURI, parse_uri

from leasegate.core import JsonError, Secret, loads

__all__ = [
    "UNSENT_LOW_WATER_BYTES",
    "WIRE_LOGGER",
    "Reauthenticated",
    "check_headers",
    "check_proxy",
    "check_url",
    "dumps_frame",
    "limit_unsent",
    "parse_frame",
    "safe_proxy_url",
    "safe_url",
]

_MISSING: Any = object()

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def dumps_frame(value: Any) -> str:
    """One frame's JSON text: compact, non-ASCII as itself.

    Raises:
        ValueError: ``value`` holds a non-finite float or a non-JSON object
            (the message names the type only).
    """
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"frame is not JSON-serializable ({type(exc).__name__})") from None


#: How many bytes of its sends a client leaves in the kernel untransmitted
#: (``TCP_NOTSENT_LOWAT``, where the platform has it): past that a send waits
#: for the bridge to take bytes, so ``send_timeout_s`` measures the bridge
#: (WS-009) rather than how much a loopback or LAN send buffer holds (on
#: Linux it grows to megabytes).
UNSENT_LOW_WATER_BYTES: Final = 64 * 1024


class _SocketOptions(Protocol):
    def setsockopt(self, level: int, optname: int, value: int, /) -> None: ...


def limit_unsent(sock: _SocketOptions | None) -> None:
    """Keep at most :data:`UNSENT_LOW_WATER_BYTES` of ``sock``'s sends untransmitted.

    ``sock``: a TCP socket (or asyncio's wrapper of one). Sets
    ``TCP_NOTSENT_LOWAT`` (Linux, macOS); does nothing where the platform
    lacks it, for ``None`` (no socket), or when the socket refuses it (never
    raises).
    """
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if sock is None or option is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_LOW_WATER_BYTES)


def parse_frame(message: object) -> tuple[bool, Any]:
    """Parse one received message: ``(True, value)``, or ``(False, None)`` when
    it is not text or not valid JSON (``JSON.parse`` semantics). Never raises."""
    if not isinstance(message, str):
        return False, None
    try:
        return True, loads(message)
    except JsonError:
        return False, None
    except Exception:  # noqa: BLE001 - never fatal
        return False, None


@dataclasses.dataclass(frozen=True, slots=True)
class Reauthenticated:
    """A marker a transport's ``receive`` returns after each authenticated (re)connect.

    It is delivered before the first frame of connection number ``connection``
    (1, 2, …), so the shells see it in order with the frames. The shells
    feed the core ``BridgeAuthenticated`` (LR-010, the reference's
    ``CloudCredentialRuntime.bridgeAuthenticated``) for a reconnect
    (``connection > 1``), or for the first connect when a send had already
    failed for want of a connection.
    """

    connection: int


def safe_proxy_url(url: object) -> str:
    """A proxy URL for reprs and errors: scheme, host and port only.

    A proxy's path means nothing to the client, so it is dropped with the
    user info, query and fragment (shown as ``/…`` when present): nothing
    the host put in a proxy URL beyond its address reaches a message. Never
    raises.
    """
    shown = safe_url(url)
    if shown == "<unparsable URL>":
        return shown
    head, sep, rest = shown.partition("://")
    host, slash, _tail = rest.partition("/")
    return head + sep + host + ("/…" if slash and _tail else "")


def safe_url(url: object) -> str:
    """``url`` without what may carry a credential, for reprs and errors.

    Keeps the scheme, host, port and path; drops user info, query and
    fragment (shown as ``?…`` / ``#…`` when present), so a bridge token put in
    the URL never reaches a repr, log or error message. Never raises.
    """
    try:
        parts = urllib.parse.urlsplit(str(url))
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable URL>"
    tail = ("?…" if parts.query else "") + ("#…" if parts.fragment else "")
    return f"{parts.scheme}://{host}{port}{parts.path}{tail}"


def check_url(url: str) -> WebSocketURI:
    """Parse a ``ws://`` / ``wss://`` URL.

    Raises:
        InvalidURI: not a WebSocket URL; the message holds :func:`safe_url`
            of it, never its user info or query.
    """
    try:
        return parse_uri(url)
    except Exception:  # noqa: BLE001, S110 - raised below, outside this block
        pass
    # Raised here, not in the except block: the library's exception (the
    # full URL in its message) must not ride along as __context__.
    raise InvalidURI(safe_url(url), "not a WebSocket URL")


def check_proxy(proxy: str | None) -> str | None:
    """Validate an explicit proxy URL (``None``: no proxy) and return it.

    Accepted: ``http://`` and ``https://`` proxies (HTTP ``CONNECT``), and
    ``socks5h://``, ``socks5://``, ``socks4a://``, ``socks4://`` when the
    optional ``python-socks`` package is installed (``websockets``' proxy
    support). Proxy environment variables are never read here or elsewhere.

    Raises:
        InvalidProxy: not a supported proxy URL, or a SOCKS proxy without
            ``python-socks``; the message holds :func:`safe_proxy_url` of it (never
            its user info).
    """
    if proxy is None:
        return None
    try:
        parsed = parse_proxy(proxy)
    except Exception:  # noqa: BLE001 - also a malformed URL (e.g. a bad port)
        parsed = None
    if parsed is None:
        # Raised outside the except block: the library's exception (the URL
        # with its password in its message) must not ride along as __context__.
        raise InvalidProxy(safe_proxy_url(proxy), "not a supported proxy URL")
    if parsed.scheme.startswith("socks") and importlib.util.find_spec("python_socks") is None:
        raise InvalidProxy(safe_proxy_url(proxy), "a SOCKS proxy needs the python-socks package")
    return proxy


def check_headers(headers: Mapping[str, str | Secret] | None) -> dict[str, str | Secret]:
    """The handshake headers, checked: a copy of ``headers`` (values kept as given).

    Each name must be an HTTP token and each value (a :class:`Secret` is
    revealed for the check only) a valid HTTP header value: no CR, LF or
    NUL, as ``websockets`` requires when it builds the request. Checked here
    because ``websockets`` refuses a bad value with an exception quoting it.

    Raises:
        ValueError: a bad name or value; the message names the header,
            never its value.
    """
    checked = dict(headers or {})
    bad: str | None = None
    for name, value in checked.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            bad = name if isinstance(name, str) else "<invalid name>"
            break
        try:  # websockets checks values (not names) when it builds the request
            Headers()[name] = value.reveal() if isinstance(value, Secret) else value
        except Exception:  # noqa: BLE001 - raised below, outside this block
            bad = name
            break
    if bad is not None:  # outside the except block: no __context__ quoting the value
        shown = bad if _TOKEN.fullmatch(bad) and len(bad) <= 64 else "<invalid name>"
        raise ValueError(f"handshake header {shown!r} has an invalid name or value")
    return checked


class InboxStats:
    """The inbox figures a bounded-inbox client reports (WS-001).

    Mixed into a client whose ``_inbox`` has ``len()``, ``peak`` and
    ``discarded_at_close`` (the thread and anyio clients' inboxes).
    """

    _inbox: Any

    @property
    def inbox_size(self) -> int:
        """Items (frames and markers) in the inbox now, not yet received."""
        return len(self._inbox)

    @property
    def inbox_peak(self) -> int:
        """The most items the inbox ever held (at most ``max_inbox_frames``,
        one more only for a marker queued while closing)."""
        return int(self._inbox.peak)

    @property
    def discarded_at_close(self) -> int:
        """Frames not delivered because the client was closing: read after
        ``close()``/``aclose()`` they found the inbox full, or (anyio) they
        arrived after :meth:`receive` reported the end."""
        return int(self._inbox.discarded_at_close)


class _NoDebugLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger for the ``websockets`` library that never logs at ``DEBUG``.

    At ``DEBUG`` websockets logs the opening handshake line by line: the
    request path with its query and every header, ``Authorization`` included,
    revealed. Our clients hand it this logger instead of ``websockets.client``,
    so those lines are never produced whatever the host's log level; its
    ``INFO`` and higher records go to ``leasegate.shells.transport.websockets``.
    """

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level > logging.DEBUG:
            super().log(level, msg, *args, **kwargs)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        return None


#: The logger every WebSocket client passes to ``websockets`` (no handshake lines, no secrets).
WIRE_LOGGER: Final = _NoDebugLogger(logging.getLogger("leasegate.shells.transport.websockets"), {})
