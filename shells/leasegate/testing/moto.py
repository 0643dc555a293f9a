"""A local AWS endpoint for tests and the demo: moto on 127.0.0.1.

* :func:`start_moto` starts ``moto.server.ThreadedMotoServer`` in this
  process on a free loopback port (IAM not enforced).
* :func:`start_moto_iam` starts a moto server in a **child process** with IAM
  enforcement switched on (``POST /moto-api/reset-auth`` with ``0`` after the
  setup, moto's server-mode equivalent of ``INITIAL_NO_AUTH_ACTION_COUNT=0``).
  It runs in its own process because moto's auth switch and backends are
  process-global: enforcing IAM in this process would break every other moto
  user of the test session.
* :class:`MotoServer` builds clients, resets the server, seeds
  ``SecureString`` parameters, creates IAM roles and mints STS session
  credentials (``AssumeRole``) for a reader.
* :class:`FaultProxy`: a tiny threaded loopback HTTP proxy in front of the
  server that answers the first N requests with a scripted fault (400
  ``ThrottlingException``, 500, 503) and forwards the rest, to test retries.

Quiet by default: the in-process server logs no line per request (werkzeug's
request log) and the child process's output goes to ``/dev/null``, unless
``quiet=False``.

Nothing ambient is used: every client is built on an isolated botocore
session (no ``AWS_*`` variable, config or credentials file, profile or
instance metadata) with explicit dummy keys, an ``endpoint_url`` and
``proxies={}`` (``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` are ignored:
botocore reads them only when a client's ``proxies`` is ``None``). Loopback
only; never the internet. ``moto`` is imported when a server starts, so this
module imports without it.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Self

from botocore.config import Config

from leasegate.core import Secret
from leasegate.shells.ssm import SessionCredentials, isolated_botocore_session

__all__ = [
    "ACCOUNT_ID",
    "ADMIN_USER",
    "DEFAULT_REGION",
    "DUMMY_ACCESS_KEY_ID",
    "DUMMY_SECRET_ACCESS_KEY",
    "Fault",
    "FaultProxy",
    "LoopbackServer",
    "MotoServer",
    "forward_request",
    "start_moto",
    "start_moto_iam",
]

#: The region clients are built for unless told otherwise.
DEFAULT_REGION: Final = "us-east-1"
#: The dummy key id of the setup clients of a server without IAM enforcement.
DUMMY_ACCESS_KEY_ID: Final = "AKIALEASEGATETEST000"
#: The dummy secret key paired with :data:`DUMMY_ACCESS_KEY_ID` (not a secret).
DUMMY_SECRET_ACCESS_KEY: Final = "leasegate-test-not-a-secret"  # noqa: S105 - a dummy
#: moto's default account.
ACCOUNT_ID: Final = "123456789012"
#: The IAM user that owns the admin keys of an IAM-enforced server.
ADMIN_USER: Final = "leasegate-admin"

_TRUST: Final = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {
                    "AWS": [
                        f"arn:aws:iam::{ACCOUNT_ID}:root",
                        f"arn:aws:iam::{ACCOUNT_ID}:user/{ADMIN_USER}",
                    ]
                },
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: Loopback HTTP without proxies: proxy environment variables are never consulted.
_DIRECT: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(  # noqa: S310 - loopback
        url, data=body, method="POST", headers={"Content-Type": "text/plain"}
    )
    with _DIRECT.open(req, timeout=10) as resp:
        return bytes(resp.read())


@dataclasses.dataclass(slots=True)
class MotoServer:
    """A running moto server (SSM, STS, IAM, ...) on loopback.

    Use as a context manager (stopped on exit) or call :meth:`stop`.

    Attributes:
        url: ``http://127.0.0.1:<port>``.
        region: the region of the clients built here.
        iam_enforced: whether requests must be signed by a known IAM principal.
    """

    url: str
    region: str
    iam_enforced: bool
    _stop: Callable[[], None] = dataclasses.field(repr=False)
    _admin: tuple[str, str] = dataclasses.field(
        default=(DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY), repr=False
    )
    _stopped: bool = dataclasses.field(default=False, repr=False)

    def client(
        self,
        service: str,
        *,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        max_attempts: int = 1,
    ) -> Any:
        """A botocore client of ``service`` on this server, with explicit keys.

        Built on an isolated session (nothing ambient), with ``proxies={}``
        (proxy environment variables ignored) and ``max_attempts`` attempts
        per call (1: no retries).

        Args:
            service: ``"ssm"``, ``"sts"``, ``"iam"``, ...
            access_key_id: the key id to sign with (default: the admin keys,
                the dummies on a server without IAM enforcement); pass a lease
                session's keys to call as that session.
            secret_access_key: its secret key.
            session_token: its session token (``None``: none).
            max_attempts: total attempts per call (≥ 1).

        Raises:
            ValueError: ``max_attempts`` < 1.
        """
        ak, sk = self._admin
        session = isolated_botocore_session(region=self.region, max_attempts=max_attempts)
        return session.create_client(
            service,
            region_name=self.region,
            endpoint_url=self.url,
            aws_access_key_id=access_key_id or ak,
            aws_secret_access_key=secret_access_key or sk,
            aws_session_token=session_token,
            config=Config(
                proxies={},
                retries={"mode": "standard", "total_max_attempts": max_attempts},
            ),
        )

    def ssm_client(self) -> Any:
        """A ``ssm`` client with the admin keys (see :meth:`client`)."""
        return self.client("ssm")

    def sts_client(self) -> Any:
        """A ``sts`` client with the admin keys (see :meth:`client`)."""
        return self.client("sts")

    def reset(self) -> None:
        """Forget every resource moto holds (``POST /moto-api/reset``).

        Raises:
            RuntimeError: the server enforces IAM (a reset would drop the
                admin user whose keys every setup client signs with).
            OSError: the server did not answer within 10 seconds.
        """
        if self.iam_enforced:
            raise RuntimeError("an IAM-enforced moto server cannot be reset")
        _post(self.url + "/moto-api/reset", b"")

    def put_secure(self, name: str, value: str, *, overwrite: bool = True) -> int:
        """Write ``value`` as a ``SecureString`` parameter ``name``; return its new version."""
        out = self.client("ssm").put_parameter(
            Name=name, Value=value, Type="SecureString", Overwrite=overwrite
        )
        return int(out["Version"])

    def create_role(self, name: str, *, allow_read: bool) -> str:
        """Create an IAM role that may assume-role from the account; return its ARN.

        ``allow_read`` true: ``ssm:GetParameters``/``GetParameter`` allowed on
        ``*``; false: explicitly denied (moto evaluates SSM actions against
        resource ``*``, so a per-parameter deny is not enforceable there).
        """
        iam = self.client("iam")
        arn = str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=_TRUST)["Role"]["Arn"])
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow" if allow_read else "Deny",
                    "Action": ["ssm:GetParameters", "ssm:GetParameter"],
                    "Resource": "*",
                }
            ],
        }
        iam.put_role_policy(RoleName=name, PolicyName="read", PolicyDocument=json.dumps(policy))
        return arn

    def session_for(self, role_arn: str, session_name: str = "leasegate") -> SessionCredentials:
        """STS ``AssumeRole`` as the admin: the session's keys for a reader (secrets as
        :class:`~leasegate.core.Secret`)."""
        creds = self.client("sts").assume_role(RoleArn=role_arn, RoleSessionName=session_name)[
            "Credentials"
        ]
        return SessionCredentials(
            access_key_id=creds["AccessKeyId"],
            secret_access_key=Secret(creds["SecretAccessKey"]),
            session_token=Secret(creds["SessionToken"]),
            region=self.region,
        )

    def stop(self) -> None:
        """Stop the server (joins its thread or ends its process; idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop()

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_moto(region: str = DEFAULT_REGION, *, quiet: bool = True) -> MotoServer:
    """Start moto's server in this process on 127.0.0.1, free port (IAM not enforced).

    The server is the one ``moto.server.ThreadedMotoServer`` runs (moto's
    WSGI application on werkzeug, one thread per request), served by a
    daemon thread ``leasegate-moto``.

    Args:
        region: the region of the clients built on the server.
        quiet: drop this server's per-request log lines (werkzeug INFO);
            errors are still logged. ``False`` logs every request. Other
            werkzeug servers and the logging configuration are left alone.

    Returns:
        The running server; stop it with :meth:`MotoServer.stop` (or ``with``).

    Raises:
        OSError: it could not bind.
        ModuleNotFoundError: ``moto`` is not installed (the ``test`` or
            ``demo`` extra).
    """
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            return None

    app = DomainDispatcherApplication(create_backend_app)
    handler = QuietHandler if quiet else MotoRequestHandler
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
    thread = threading.Thread(target=server.serve_forever, name="leasegate-moto", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(10)

    port = int(server.server_address[1])
    return MotoServer(url=f"http://127.0.0.1:{port}", region=region, iam_enforced=False, _stop=stop)


def start_moto_iam(
    region: str = DEFAULT_REGION, *, timeout_s: float = 30.0, quiet: bool = True
) -> MotoServer:
    """Start a moto server in a child process and switch IAM enforcement on.

    Setup: an IAM user ``leasegate-admin`` with an allow-all policy and an
    access key is created while auth is off; then ``reset-auth 0`` makes every
    later request need a known principal with a policy that allows it. The
    returned server's admin keys are that user's. The child gets no ``AWS_*``
    variable of this process (config and credentials files: ``/dev/null``).

    Args:
        region: the region of the clients built on the server.
        timeout_s: how long to wait for the server to answer, in seconds.
        quiet: send the child's output to ``/dev/null`` (``False``: inherit
            this process's stdout and stderr).

    Raises:
        RuntimeError: the server did not come up within ``timeout_s`` seconds.
    """
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=out,
        stderr=out,
    )

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with _DIRECT.open(url + "/moto-api/data.json", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop()
                raise RuntimeError("the moto server did not start") from None
            time.sleep(0.1)
    server = MotoServer(url=url, region=region, iam_enforced=True, _stop=stop)
    try:
        iam = server.client("iam")
        iam.create_user(UserName=ADMIN_USER)
        iam.put_user_policy(
            UserName=ADMIN_USER,
            PolicyName="all",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        key = iam.create_access_key(UserName=ADMIN_USER)["AccessKey"]
        server._admin = (key["AccessKeyId"], key["SecretAccessKey"])
        _post(url + "/moto-api/reset-auth", b"0")
    except BaseException:
        server.stop()
        raise
    return server


# ---------------------------------------------------------------------------
# Fault-injecting proxy

#: A scripted fault: ``throttle`` (400 ``ThrottlingException``), ``500`` or ``503``.
Fault = Literal["throttle", "500", "503"]

_FAULT_BODY: Final = {
    "throttle": (400, "ThrottlingException", "Rate exceeded"),
    "500": (500, "InternalServerError", "injected"),
    "503": (503, "ServiceUnavailable", "injected"),
}


_HOP_BY_HOP: Final = ("connection", "keep-alive", "transfer-encoding", "content-length")


def forward_request(
    handler: http.server.BaseHTTPRequestHandler, upstream: tuple[str, int], body: bytes
) -> None:
    """Send ``handler``'s request (with ``body``) to ``upstream`` and write back its answer.

    For the loopback proxies of the tests (:class:`FaultProxy`, the
    conformance kit's SSM request log): one HTTP/1.1 exchange, hop-by-hop
    headers dropped, the answer's length recomputed; 30 s timeout.

    Raises:
        OSError: the upstream could not be reached or the client went away.
    """
    conn = http.client.HTTPConnection(*upstream, timeout=30)
    try:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP[:2]}
        conn.request(handler.command, handler.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        handler.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_BY_HOP:
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    finally:
        conn.close()


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 served from a daemon thread.

    The base of the tests' loopback proxies (:class:`FaultProxy`, the
    conformance kit's SSM request log): a subclass sets ``_server`` (an
    ``http.server.HTTPServer``) and ``_thread_name`` in its ``__init__``. Use
    as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    _server: http.server.HTTPServer
    _thread_name = "leasegate-loopback"
    _thread: threading.Thread | None = None

    def start(self) -> Self:
        """Serve in a daemon thread; return ``self``."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name=self._thread_name
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (the thread joined within 5 s)."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FaultProxy(LoopbackServer):
    """A loopback HTTP proxy that fails the first requests, then forwards.

    Args:
        upstream: the moto server's URL (``http://127.0.0.1:<port>``).
        max_threads: at most this many requests are served at once (bounded);
            more wait for a slot.

    :meth:`inject` queues faults; each incoming request takes the next queued
    fault (answered with an AWS JSON error body) or, when none is queued, is
    forwarded upstream unchanged. :attr:`requests` counts every request,
    :attr:`faulted` the faulted ones. Use as a context manager, or
    :meth:`start`/:meth:`stop`.
    """

    def __init__(self, upstream: str, *, max_threads: int = 8) -> None:
        host_port = upstream.removeprefix("http://").rstrip("/")
        host, _, port = host_port.partition(":")
        self._upstream = (host, int(port))
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_threads)
        self.requests = 0
        self.faulted = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                with proxy._slots:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                    fault = proxy._take()
                    if fault is not None:
                        status, code, msg = _FAULT_BODY[fault]
                        data = json.dumps({"__type": code, "message": msg}).encode()
                        self.send_response(status)
                        self.send_header("Content-Type", "application/x-amz-json-1.1")
                        self.send_header("x-amzn-ErrorType", code)
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    forward_request(self, proxy._upstream, body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread_name = "leasegate-fault-proxy"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` of the proxy."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def inject(self, faults: Sequence[Fault]) -> None:
        """Queue ``faults``; the next ``len(faults)`` requests get them in order."""
        with self._lock:
            self._faults.extend(faults)

    def _take(self) -> Fault | None:
        with self._lock:
            self.requests += 1
            if self._faults:
                self.faulted += 1
                return self._faults.pop(0)
            return None
