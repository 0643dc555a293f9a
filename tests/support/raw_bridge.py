"""A hand-made WebSocket bridge on 127.0.0.1 for transport tests.

:class:`RawBridge` speaks the WebSocket framing by hand (so it can misbehave
where ``websockets``' server would not: ignore a close frame, hold TCP open,
never read, reset the connection); :class:`RawConn` is its side of one
connection. Real time, on a thread per connection; shell tests only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["BINARY", "CLOSE", "CONT", "PING", "TEXT", "RawBridge", "RawConn", "encode_frame"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

TEXT, BINARY, CONT, CLOSE, PING = 0x1, 0x2, 0x0, 0x8, 0x9


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One unmasked (server to client) WebSocket frame."""
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        head = bytes([b0, n])
    elif n < 65536:
        head = bytes([b0, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([b0, 127]) + n.to_bytes(8, "big")
    return head + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class RawConn:
    """The server side of one hand-made WebSocket connection."""

    def __init__(self, sock: socket.socket, request: bytes) -> None:
        self.sock = sock
        self.request = request

    def send(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        self.sock.sendall(encode_frame(opcode, payload, fin=fin))

    def text(self, value: str | bytes) -> None:
        self.send(TEXT, value.encode() if isinstance(value, str) else value)

    def read_frame(self) -> tuple[int, bytes]:
        """The client's next frame (opcode, unmasked payload); EOFError at the end."""
        h = _recv_exact(self.sock, 2)
        n = h[1] & 0x7F
        if n == 126:
            n = int.from_bytes(_recv_exact(self.sock, 2), "big")
        elif n == 127:
            n = int.from_bytes(_recv_exact(self.sock, 8), "big")
        mask = _recv_exact(self.sock, 4) if h[1] & 0x80 else b"\0\0\0\0"
        data = _recv_exact(self.sock, n)
        return h[0] & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def read_close(self, timeout_s: float = 2.0) -> int | None:
        """Read until the client's close frame; its code (``None``: none came)."""
        self.sock.settimeout(timeout_s)
        try:
            while True:
                op, data = self.read_frame()
                if op == CLOSE:
                    return int.from_bytes(data[:2], "big") if len(data) >= 2 else 1005
        except (OSError, EOFError):
            return None


class RawBridge:
    """A TCP server on 127.0.0.1 that performs the opening handshake by hand and
    then runs ``script(conn, n)`` for connection ``n`` (1, 2, ...). The TCP
    connection stays open after the script returns (a hostile bridge never
    closes it) until the bridge is stopped, unless the script closed it.

    ``receive_buffer``: ``SO_RCVBUF`` of every connection, bytes, from its
    handshake on (set on the listener, which accepted sockets inherit), for a
    bridge that never reads: the client's sends back up after a few KiB.
    (Shrinking it on an open connection instead makes the kernel drop data
    it had advertised room for and ignore the client's window updates until
    a retransmission, so the bridge's own sends can stall for seconds.)"""

    def __init__(
        self,
        script: Callable[[RawConn, int], None],
        *,
        handshake_delay_s: float = 0.0,
        with_101: bytes = b"",
        receive_buffer: int | None = None,
    ) -> None:
        self._script = script
        self._delay = handshake_delay_s
        self._with_101 = with_101  # bytes sent in the same packet as the 101
        self._listener = socket.create_server(("127.0.0.1", 0))
        if receive_buffer is not None:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.port = self._listener.getsockname()[1]
        self.url = f"ws://127.0.0.1:{self.port}"
        self.connections = 0
        self.requests: list[bytes] = []
        self.errors: list[BaseException] = []
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                sock, _ = self._listener.accept()
                self._socks.append(sock)
                self.connections += 1
                threading.Thread(
                    target=self._serve, args=(sock, self.connections), daemon=True
                ).start()

    def _serve(self, sock: socket.socket, n: int) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(head)
            time.sleep(self._delay)
            key = re.search(rb"(?im)^sec-websocket-key:\s*(\S+)", head)
            assert key is not None
            accept = base64.b64encode(hashlib.sha1(key.group(1) + _GUID).digest())
            sock.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                + accept
                + b"\r\n\r\n"
                + (self._with_101 if n == 1 else b"")
            )
            self._script(RawConn(sock, head), n)
        except (OSError, EOFError):
            pass
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def __enter__(self) -> RawBridge:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
