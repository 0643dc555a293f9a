"""The kit's side of the wire: the SSM request log, the bridge, the runner process.

* :class:`SsmRequestLog`: a loopback HTTP proxy in front of moto that records
  every SSM call (action, parameter names, the signing access key id, time in
  milliseconds) and forwards it unchanged. Only names and key ids are kept:
  never a value, a secret key or a session token.
* :class:`Bridge`: one WebSocket connection to the runner (the kit listens, or
  dials a runner that listens) carrying a :class:`~leasegate.testing.ReferenceCloud`'s
  frames, with every frame in and out recorded and raw frames injectable.
* :class:`RunnerProcess`: the runner command, started with the bridge URL and
  the SSM endpoint in its environment (``docs/conformance.md``).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.sync.server import Server, ServerConnection, serve

from leasegate.shells.transport import dumps_frame
from leasegate.testing import ReferenceCloud
from leasegate.testing.moto import LoopbackServer, forward_request

__all__ = [
    "ENV_BOOT_ID",
    "ENV_BRIDGE_URL",
    "ENV_REFRESH_CREDENTIAL",
    "ENV_REFRESH_REQUESTS",
    "ENV_REGION",
    "ENV_RUN_EPOCH",
    "ENV_SSM_ENDPOINT",
    "ENV_TASK_ID",
    "Bridge",
    "Frame",
    "RunnerProcess",
    "SsmCall",
    "SsmRequestLog",
    "now_ms",
]

#: The runner's environment: where the bridge is (``ws://127.0.0.1:<port>``).
ENV_BRIDGE_URL = "LEASEGATE_BRIDGE_URL"
#: The SSM (and STS) endpoint every lease session's client must use.
ENV_SSM_ENDPOINT = "LEASEGATE_SSM_ENDPOINT"
#: The AWS region of the endpoint (the lease's ``region`` says the same).
ENV_REGION = "LEASEGATE_REGION"
#: The task to start (one run per runner process).
ENV_TASK_ID = "LEASEGATE_TASK_ID"
#: The run epoch to start (decimal).
ENV_RUN_EPOCH = "LEASEGATE_RUN_EPOCH"
#: The runner boot id the cloud addresses env frames to (``runnerBootId``).
ENV_BOOT_ID = "LEASEGATE_BOOT_ID"
#: Set only by the ``refresh`` cases: the ``credentialId`` the runner's
#: consumers ask to refresh once the run is usable (``docs/conformance.md``).
ENV_REFRESH_CREDENTIAL = "LEASEGATE_REFRESH_CREDENTIAL"
#: With :data:`ENV_REFRESH_CREDENTIAL`: how many refresh requests are made at
#: once, as that many consumers would (decimal, ≥ 1).
ENV_REFRESH_REQUESTS = "LEASEGATE_REFRESH_REQUESTS"


def now_ms() -> int:
    """Wall clock, milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


# ----------------------------------------------------------------- SSM log


@dataclass(frozen=True, slots=True)
class SsmCall:
    """One SSM request seen by :class:`SsmRequestLog`.

    ``action`` is the ``X-Amz-Target`` operation (``GetParameters``), ``names``
    the requested selectors (``Names``, or ``[Name]``), ``access_key_id`` the
    key id the request was signed with (``""`` if unsigned), ``at_ms`` when it
    arrived (ms since the epoch).
    """

    at_ms: int
    action: str
    names: tuple[str, ...]
    access_key_id: str


def _signing_key_id(authorization: str) -> str:
    marker = "Credential="
    at = authorization.find(marker)
    if at < 0:
        return ""
    return authorization[at + len(marker) :].split("/", 1)[0]


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that hung up (a runner process ended) is not the kit's error


class SsmRequestLog(LoopbackServer):
    """A loopback HTTP proxy in front of moto that records every SSM call.

    Args:
        upstream: moto's URL (``http://127.0.0.1:<port>``).

    :attr:`url` is where the runner's SSM clients must go. :meth:`calls`
    returns the recorded :class:`SsmCall` list (only SSM targets, in arrival
    order). Bodies are parsed only for their ``Names``/``Name``; nothing else
    of a request or an answer is kept. Context manager, or :meth:`start` /
    :meth:`stop`.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").rstrip("/").partition(":")
        self._upstream = (host, int(port))
        self._calls: list[SsmCall] = []
        self._lock = threading.Lock()
        log = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                log._record(self.headers, body)
                forward_request(self, log._upstream, body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread_name = "conformance-ssm-log"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` of the proxy."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _record(self, headers: Any, body: bytes) -> None:
        target = headers.get("X-Amz-Target") or ""
        if not target.startswith("AmazonSSM."):
            return
        names: tuple[str, ...] = ()
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = {}
        if isinstance(doc, dict):
            if isinstance(doc.get("Names"), list):
                names = tuple(str(n) for n in doc["Names"])
            elif isinstance(doc.get("Name"), str):
                names = (doc["Name"],)
        call = SsmCall(
            at_ms=now_ms(),
            action=target.removeprefix("AmazonSSM."),
            names=names,
            access_key_id=_signing_key_id(headers.get("Authorization") or ""),
        )
        with self._lock:
            self._calls.append(call)

    def calls(self) -> list[SsmCall]:
        """Every SSM call recorded so far, in arrival order."""
        with self._lock:
            return list(self._calls)

    def clear(self) -> None:
        """Forget the recorded calls (between cases)."""
        with self._lock:
            self._calls.clear()


# ------------------------------------------------------------------ bridge


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame on the bridge: ``direction`` ``"in"`` (runner → kit) or
    ``"out"``; ``text`` as sent (a binary message decoded as UTF-8);
    ``value`` the parsed JSON (``None`` if it is not JSON); ``at_ms`` when it
    crossed (ms since the epoch; an ``"out"`` frame is stamped just before it
    is sent); ``binary`` whether it came as a binary WebSocket message
    rather than a text message."""

    direction: str
    at_ms: int
    text: str
    value: Any
    binary: bool = False

    @property
    def kind(self) -> str | None:
        """The frame's ``kind`` if it is an object with a string kind."""
        v = self.value
        if isinstance(v, dict) and isinstance(v.get("kind"), str):
            return str(v["kind"])
        return None


Connection = ServerConnection | ClientConnection


@dataclass
class _State:
    frames: list[Frame] = field(default_factory=list)
    connection: Connection | None = None
    closed: bool = False


class Bridge:
    """The cloud's end of the runner's WebSocket, with every frame recorded.

    Args:
        cloud: the reference cloud whose frames are carried (its answers to
            the runner's frames and its scripted frames).
        runner_url: ``None``: listen on 127.0.0.1 (:attr:`url` is the bridge
            URL the runner dials); else dial this runner's own listening URL,
            with the run's assignment in the query string
            (``taskId``, ``runEpoch``, ``runnerBootId``, ``ssmEndpoint``, ``region``).
        query: those query parameters (dialing only).
        before_send: called with each cloud frame (a JSON value) before it is
            sent; it may write to SSM (the case's setup), never change the frame.

    One connection at a time. :meth:`inject` sends raw text or a JSON value
    ahead of nothing (in call order with the cloud's frames). :meth:`frames`
    is the record; :meth:`wait` blocks until a predicate holds over it.
    :meth:`detach` stops feeding the runner's frames to the cloud (the kit
    alone answers from then on); :meth:`withhold` keeps frames of some kinds
    from the cloud (the kit answers those itself).
    """

    def __init__(
        self,
        cloud: ReferenceCloud,
        *,
        runner_url: str | None = None,
        query: Mapping[str, str] | None = None,
        before_send: Callable[[Any], None] | None = None,
    ) -> None:
        self.cloud = cloud
        self._runner_url = runner_url
        self._query = dict(query or {})
        self._before_send = before_send
        self._state = _State()
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._server: Server | None = None
        self._threads: list[threading.Thread] = []
        self._feed_cloud = True
        self._withheld: frozenset[str] = frozenset()

    @property
    def url(self) -> str:
        """The bridge URL (listening mode): ``ws://127.0.0.1:<port>``."""
        if self._server is None:
            raise RuntimeError("the bridge is not listening")
        port = self._server.socket.getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    def start(self) -> Bridge:
        """Listen (or dial the runner); start the pump thread; return ``self``.

        Raises:
            OSError: the runner's URL cannot be reached (dialing mode).
        """
        if self._runner_url is None:
            self._server = serve(self._serve, "127.0.0.1", 0, max_size=2**22)
            self._spawn(self._server.serve_forever, "conformance-bridge")
        else:
            sep = "&" if "?" in self._runner_url else "?"
            url = self._runner_url + sep + urllib.parse.urlencode(self._query)
            conn = connect(url, open_timeout=10, max_size=2**22)

            def dialed() -> None:
                with conn:  # closes it when the runner or the kit ends it
                    self._serve(conn)

            self._spawn(dialed, "conformance-bridge")
        self._spawn(self._pump, "conformance-pump")
        return self

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        """Close the connection, stop listening, join the threads (bounded)."""
        self._stop.set()
        with self._cond:
            conn = self._state.connection
            self._cond.notify_all()
        if conn is not None:
            conn.close()
        if self._server is not None:
            self._server.shutdown()
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> Bridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def detach(self, detached: bool = True) -> None:
        """Stop (``detached``) or resume feeding the runner's frames to the cloud."""
        self._feed_cloud = not detached

    def withhold(self, *kinds: str) -> None:
        """Keep the runner's frames of these kinds from the cloud (they are
        still recorded); the kit answers them itself."""
        self._withheld = frozenset(kinds)

    def _record(
        self, direction: str, text: str, at_ms: int | None = None, *, binary: bool = False
    ) -> Frame:
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = None
        at = now_ms() if at_ms is None else at_ms
        frame = Frame(direction, at, text, value, binary)
        with self._cond:
            self._state.frames.append(frame)
            self._cond.notify_all()
        return frame

    def _serve(self, conn: Connection) -> None:
        with self._cond:
            if self._state.connection is not None:
                conn.close(1013, "one runner at a time")
                return
            self._state.connection = conn
            self._cond.notify_all()
        try:
            for message in conn:
                if isinstance(message, str):
                    text, binary = message, False
                else:
                    text, binary = message.decode("utf-8", "replace"), True
                frame = self._record("in", text, binary=binary)
                if self._feed_cloud and frame.kind not in self._withheld:
                    self.cloud.receive_text(text)
        except ConnectionClosed:
            pass
        finally:
            with self._cond:
                self._state.closed = True
                self._cond.notify_all()

    def _pump(self) -> None:
        while not self._stop.is_set():
            conn = self._state.connection
            if conn is not None and not self._state.closed:
                for value in self.cloud.take_outgoing():
                    if self._before_send is not None:
                        self._before_send(value)
                    self._send(dumps_frame(value))
            self._stop.wait(0.01)

    def _send(self, text: str) -> None:
        with self._send_lock:
            conn = self._state.connection
            if conn is None:
                return
            # Stamped before it leaves: the runner's answer (an SSM call, a
            # frame) may be recorded before this thread runs again.
            at = now_ms()
            try:
                conn.send(text)
            except ConnectionClosed:
                return
            self._record("out", text, at)

    def inject(self, frame: Any) -> None:
        """Send ``frame`` now: a ``str`` as is (raw text), else as compact JSON."""
        self._send(frame if isinstance(frame, str) else dumps_frame(frame))

    def connected(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the runner's connection."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state.connection is not None, timeout_s)

    def frames(self) -> list[Frame]:
        """Every frame so far, both directions, in order."""
        with self._cond:
            return list(self._state.frames)

    def wait(self, predicate: Callable[[list[Frame]], Any], timeout_s: float) -> Any:
        """Block until ``predicate(frames)`` is truthy (return it) or ``timeout_s``
        seconds pass (return ``None``)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                got = predicate(list(self._state.frames))
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self._cond.wait(min(left, 0.05))


# ------------------------------------------------------------------ runner


class RunnerProcess:
    """The runner under test, one process per case.

    Args:
        command: a shell-style command line (split with :func:`shlex.split`).
        env: the variables to add (``LEASEGATE_*``); ``AWS_*`` variables of the
            kit's own environment are removed, the AWS config and credentials
            files pointed at ``/dev/null``.
        log: where the runner's stdout and stderr go (a binary file).

    The process leads a session of its own, so :meth:`stop` reaches every
    process it started (a shell wrapper's child, a worker it forked): it
    sends SIGTERM to the process group, waits 5 s for the runner, then kills
    the group (bounded).

    Raises:
        OSError: the command cannot be started (not found, not executable).
    """

    def __init__(self, command: str, env: Mapping[str, str], log: IO[bytes]) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        base.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        base.update(env)
        argv: Sequence[str] = shlex.split(command)
        self._proc = subprocess.Popen(  # noqa: S603 - the user's own runner command
            argv, env=base, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )

    @property
    def returncode(self) -> int | None:
        """The exit status once it ended, else ``None``."""
        return self._proc.poll()

    def stop(self) -> None:
        """End the process and its group (SIGTERM, then SIGKILL after 5 s).

        The group is killed whether or not the runner itself ended on
        SIGTERM: a child it left behind (one that ignores SIGTERM) goes too.
        """
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5)

    def _signal(self, sig: int) -> None:
        """Send ``sig`` to the runner's process group (its own session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)
