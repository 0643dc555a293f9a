"""The SSM Parameter Store reader: one boto3 client per lease session.

The registry core asks for readers with :class:`~leasegate.core.registry.OpenReader`
(one per ``credentials`` session), reads with
:class:`~leasegate.core.registry.ReadParameters` and destroys them with
:class:`~leasegate.core.registry.CloseReader` once their reads drained. This
module is the I/O behind those commands.

Guarantees:

* A client is built from exactly the session's access key id, secret access
  key, session token and region. No environment variable, config file,
  credentials file, profile or instance metadata is consulted: every botocore
  configuration variable is pinned to a constant (:func:`isolated_botocore_session`).
  Clients are made by one such isolated session per (region, attempts): it
  holds no credentials (an empty resolver), so sharing it only shares
  botocore's parsed service models, not keys; each client gets its own copy
  of the event hooks.
* No ambient network configuration either: ``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY``, ``NO_PROXY`` (and their lowercase forms) are ignored; a
  client connects directly unless the caller passes ``proxies``
  (:data:`NO_PROXIES`, :func:`client_proxies`).
* ``GetParameters(Names=…, WithDecryption=True)``, at most
  :data:`MAX_NAMES_PER_CALL` names a call (more is refused before any I/O).
* Throttling and 5xx answers are retried by botocore's ``standard`` retry
  mode, at most ``max_attempts`` attempts in all.
* Failures are values (:class:`ReadFailure`) classified as the reference's
  ``#isAccessDenied`` does (LR-034); their message is a fixed text plus the
  AWS error code, never an exception's text, a parameter value or a key.
* Seal → drain → close: after :meth:`SsmReader.seal` new reads are refused
  (``kind="sealed"``) and the client is closed as soon as the reads in flight
  finished.
* Blocking calls run in worker threads: :meth:`SsmReader.submit` on a shared
  bounded :class:`concurrent.futures.ThreadPoolExecutor`,
  :meth:`SsmReader.read` (async, asyncio or trio) through
  ``anyio.to_thread.run_sync`` with a caller-supplied capacity limiter.

Reference: ``host/lib/cloud-credential-leases.ts`` ``defaultSessionReaderFactory``,
``#isAccessDenied``; catalog LR-026, LR-033, LR-034, LR-156.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import re
import threading
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

import anyio
import anyio.to_thread
import botocore.configprovider
import botocore.credentials
import botocore.retries.standard
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from leasegate.core import Secret
from leasegate.core.registry import ReadCompleted, ReadFailed, SsmParameter
from leasegate.core.wire.lease import LeaseSession

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_BACKOFF_S",
    "MAX_NAMES_PER_CALL",
    "NO_PROXIES",
    "FailureKind",
    "ReadFailure",
    "ReadOk",
    "ReadResult",
    "SessionCredentials",
    "SsmReader",
    "TooManyNames",
    "client_proxies",
    "completion_event",
    "is_access_denied",
    "isolated_botocore_session",
]

#: ``GetParameters`` accepts at most this many names a call (the chunk size of LR-032).
MAX_NAMES_PER_CALL: Final = 10
#: botocore ``standard`` retry mode: total attempts per call, the first included.
DEFAULT_MAX_ATTEMPTS: Final = 4

#: botocore's own cap on the delay between two attempts, in seconds.
DEFAULT_MAX_BACKOFF_S: Final = 20.0

#: ``access-denied`` (LR-034), ``sealed`` (the reader refuses new reads) or ``other``.
FailureKind = Literal["access-denied", "sealed", "other"]

_ACCESS_DENIED_CODES: Final = frozenset({"AccessDenied", "AccessDeniedException"})
_ACCESS_DENIED_WORD: Final = re.compile(r"\bAccessDenied\b", re.IGNORECASE | re.ASCII)
_CODE_SHAPE: Final = re.compile(r"[A-Za-z0-9.:_-]{1,64}")
_INCOMPLETE: Final = "Parameter Store returned an incomplete parameter"


#: The ``proxies`` of a botocore ``Config`` that uses no proxy. botocore reads
#: the proxy environment variables (``urllib.request.getproxies``) only when
#: ``Config.proxies`` is ``None``; an empty mapping means "connect directly".
NO_PROXIES: Final[Mapping[str, str]] = types.MappingProxyType({})


def client_proxies(proxies: Mapping[str, str] | None) -> dict[str, str]:
    """The ``Config(proxies=...)`` for an explicit proxy choice, never the environment's.

    Args:
        proxies: URL scheme (``"http"``, ``"https"``) -> proxy URL, as botocore's
            ``Config.proxies``; ``None`` or empty: no proxy (direct connections).

    Returns:
        a fresh ``dict`` (empty for no proxy) to pass as ``Config(proxies=...)``;
        botocore then never falls back to ``HTTP_PROXY``/``HTTPS_PROXY``/
        ``ALL_PROXY``/``NO_PROXY``.

    Raises:
        TypeError: a key or value is not a ``str``.
    """
    out = dict(proxies or NO_PROXIES)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in out.items()):
        raise TypeError("proxies maps a URL scheme to a proxy URL (both str)")
    return out


class TooManyNames(ValueError):  # noqa: N818 - reads as the refusal it is
    """More than :data:`MAX_NAMES_PER_CALL` names were passed to one read.

    A programming error of the caller (the core chunks by ten, LR-032); the
    message carries the count only.
    """


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SessionCredentials:
    """The STS session a reader is built from (one ``credentials`` lease session).

    Attributes:
        access_key_id: the access key id (not a secret: it names the key).
        secret_access_key: the secret access key.
        session_token: the session token.
        region: the AWS region of the lease (e.g. ``"us-east-1"``).

    Reference: ``LeaseSession``; build one from a wire
    :class:`~leasegate.core.wire.lease.LeaseSession` with :meth:`from_lease`.
    """

    access_key_id: str
    secret_access_key: Secret
    session_token: Secret
    region: str

    @classmethod
    def from_lease(cls, session: LeaseSession, region: str) -> SessionCredentials:
        """From a wire :class:`~leasegate.core.wire.lease.LeaseSession` and the
        lease's region (what the registry's ``OpenReader`` carries)."""
        return cls(
            access_key_id=session.access_key_id,
            secret_access_key=session.secret_access_key,
            session_token=session.session_token,
            region=region,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadOk:
    """A ``GetParameters`` call answered.

    Attributes:
        parameters: the returned parameters, values as :class:`Secret`, in SSM's order.
        invalid: the names SSM reported as ``InvalidParameters``, in its order.
    """

    parameters: tuple[SsmParameter, ...]
    invalid: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadFailure:
    """A ``GetParameters`` call failed.

    Attributes:
        kind: ``access-denied`` per LR-034, ``sealed`` when the reader was
            sealed or closed, else ``other``.
        message: a sanitized, fixed text (at most the AWS error code and HTTP
            status are added); never a key, token, parameter value or an
            exception's own text.
    """

    kind: FailureKind
    message: str

    @property
    def access_denied(self) -> bool:
        """Whether this failure is access-denied (what ``ReadFailed.access_denied`` carries)."""
        return self.kind == "access-denied"


#: What a read returns.
ReadResult = ReadOk | ReadFailure


def completion_event(result: ReadResult, *, cmd_id: int, now_ms: int) -> ReadCompleted | ReadFailed:
    """The registry event that answers a ``ReadParameters(cmd_id)`` with ``result``.

    :class:`ReadOk` → ``ReadCompleted(parameters, invalid)``; :class:`ReadFailure`
    → ``ReadFailed(access_denied=kind == "access-denied")`` (a ``sealed`` read is
    not access-denied, LR-034). ``now_ms``: milliseconds since the epoch.
    """
    if isinstance(result, ReadOk):
        return ReadCompleted(
            now_ms=now_ms, cmd_id=cmd_id, parameters=result.parameters, invalid=result.invalid
        )
    return ReadFailed(now_ms=now_ms, cmd_id=cmd_id, access_denied=result.access_denied)


def is_access_denied(error: BaseException) -> bool:
    """Whether a botocore error counts as access-denied (LR-034, ``#isAccessDenied``).

    True exactly when the error code is ``AccessDenied`` or
    ``AccessDeniedException``, or the HTTP status is 403, or the message
    matches ``/\\bAccessDenied\\b/i`` with ASCII word boundaries. Never raises.
    """
    try:
        if isinstance(error, ClientError):
            err = error.response.get("Error", {}) or {}
            if err.get("Code") in _ACCESS_DENIED_CODES:
                return True
            meta = error.response.get("ResponseMetadata", {}) or {}
            if meta.get("HTTPStatusCode") == 403:
                return True
            msg = err.get("Message")
            if isinstance(msg, str) and _ACCESS_DENIED_WORD.search(msg):
                return True
        return bool(_ACCESS_DENIED_WORD.search(str(error)))
    except Exception:  # noqa: BLE001 - a hostile error object must not escape
        return False


def _sanitized(error: BaseException) -> str:
    if isinstance(error, ClientError):
        err = error.response.get("Error", {}) or {}
        meta = error.response.get("ResponseMetadata", {}) or {}
        code = err.get("Code")
        status = meta.get("HTTPStatusCode")
        details = []
        if isinstance(code, str) and _CODE_SHAPE.fullmatch(code):
            details.append(f"code {code}")
        if isinstance(status, int):
            details.append(f"HTTP {status}")
        if details:
            return "Parameter Store read failed (" + ", ".join(details) + ")"
        return "Parameter Store read failed"
    if isinstance(error, BotoCoreError):
        return f"Parameter Store read failed ({type(error).__name__})"
    return "Parameter Store read failed"


def isolated_botocore_session(*, region: str, max_attempts: int) -> botocore.session.Session:
    """A botocore session that consults nothing ambient.

    Every configuration variable botocore knows is pinned to its built-in
    default, so no ``AWS_*`` environment variable, ``~/.aws/config`` or
    ``~/.aws/credentials`` file, profile, or instance metadata is read; the
    config and credentials file paths point at :data:`os.devnull`. Then
    ``region``, ``retry_mode=standard`` and ``max_attempts`` are set.

    Args:
        region: the AWS region.
        max_attempts: total attempts per call (≥ 1).

    Raises:
        ValueError: ``max_attempts`` < 1.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    session = botocore.session.Session()
    store = session.get_component("config_store")
    pinned: dict[str, object] = {}
    for name, spec in botocore.configprovider.BOTOCORE_DEFAUT_SESSION_VARIABLES.items():
        pinned[name] = spec[2]
    pinned.update(
        {
            "config_file": os.devnull,
            "credentials_file": os.devnull,
            "profile": None,
            "region": region,
            "retry_mode": "standard",
            "max_attempts": max_attempts,
            "metadata_service_num_attempts": 0,
            # AWS_ENDPOINT_URL[_SSM] and endpoint_url in a config file are read
            # by a separate provider, unless configured endpoints are ignored.
            "ignore_configured_endpoint_urls": True,
            "ec2_metadata_service_endpoint": "http://127.0.0.1:9",
        }
    )
    for name, value in pinned.items():
        store.set_config_provider(name, botocore.configprovider.ConstantProvider(value))
    # Nothing may resolve credentials from the default chain: an empty resolver.
    session.register_component(
        "credential_provider", botocore.credentials.CredentialResolver(providers=[])
    )
    return session


#: Logger name prefixes of the HTTP stack under a reader's client.
_QUIET_PREFIXES: Final = ("botocore", "urllib3", "boto3")
_quiet = threading.local()


class _NoDebugInReaderCalls(logging.Filter):
    """Drops DEBUG records of the AWS HTTP stack made inside a reader's own calls.

    botocore's DEBUG lines hold the signed request (``x-amz-security-token``)
    and the decrypted response body; they are dropped only in a thread that
    is inside an :class:`SsmReader` call, so other boto3 users of the host
    keep their DEBUG logs. INFO and above always pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG or not getattr(_quiet, "depth", 0)


_FILTER: Final = _NoDebugInReaderCalls()
_filtered: set[str] = set()
_loggers_seen = 0


@contextlib.contextmanager
def _quiet_aws_debug() -> Iterator[None]:
    """Within the block, this thread's AWS-stack DEBUG records are dropped."""
    # Loggers are attached as they appear (botocore creates some lazily);
    # the logger table is walked again only when it grew.
    global _loggers_seen
    known = logging.root.manager.loggerDict
    if len(known) != _loggers_seen:
        for name in list(known):
            if name not in _filtered and name.startswith(_QUIET_PREFIXES):
                logging.getLogger(name).addFilter(_FILTER)
                _filtered.add(name)
        _loggers_seen = len(known)
    _quiet.depth = getattr(_quiet, "depth", 0) + 1
    try:
        yield
    finally:
        _quiet.depth -= 1


#: Client factories: one isolated botocore session per (region, max_attempts).
_FACTORIES: dict[tuple[str, int], botocore.session.Session] = {}
_FACTORY_LOCK = threading.Lock()


def _cap_backoff(client: Any, max_attempts: int, max_backoff_s: float) -> None:
    """Re-register the client's ``standard`` retry handler with a capped backoff.

    botocore exposes no setting for the cap; the handler is replaced under its
    own unique id (``retry-config-<service>``) by one built with botocore's
    ``register_retry_handler`` whose backoff cap is then set.
    """
    if max_backoff_s == DEFAULT_MAX_BACKOFF_S:
        return
    name = client.meta.service_model.service_id.hyphenize()
    client.meta.events.unregister(f"needs-retry.{name}", unique_id=f"retry-config-{name}")
    handler = botocore.retries.standard.register_retry_handler(client, max_attempts=max_attempts)
    policy: Any = getattr(handler, "_retry_policy")  # noqa: B009 - private in botocore
    policy._retry_backoff._max_backoff = max_backoff_s


class SsmReader:
    """One lease session's SSM client (reference ``defaultSessionReaderFactory``).

    Args:
        credentials: the session's keys and region.
        endpoint_url: the SSM endpoint (``None``: AWS's regional endpoint).
        max_attempts: botocore ``standard`` retry mode total attempts (throttling
            and 5xx are retried with its jittered backoff).
        max_backoff_s: the longest delay between two attempts, in seconds
            (botocore's ``standard`` backoff is ``random() * 2**attempt``
            capped here; tests use a small cap).
        connect_timeout_s, read_timeout_s: socket timeouts in seconds.
        executor: the shared bounded executor :meth:`submit` uses.
        proxies: the proxy to reach SSM through, as botocore's
            ``Config.proxies`` (``{"https": "http://proxy:3128"}``); ``None``
            (the default): connect directly. The proxy environment variables
            (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, any
            case) are never read.

    Raises:
        ValueError: ``max_attempts`` < 1.
        TypeError: ``proxies`` holds a key or value that is not a ``str``.

    Thread-safe. Reads are counted in flight; :meth:`seal` refuses new reads
    and closes the client once the count reaches zero (LR-026's "destroyed
    after its reads in flight finished"). The secret key and token are handed
    to botocore and kept by nobody else; ``repr`` shows the key id only.
    """

    def __init__(
        self,
        credentials: SessionCredentials,
        *,
        endpoint_url: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 10.0,
        executor: concurrent.futures.Executor | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> None:
        config = Config(
            region_name=credentials.region,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=4,
            proxies=client_proxies(proxies),
        )
        with _FACTORY_LOCK, _quiet_aws_debug():
            # One isolated botocore session per (region, attempts) is only a
            # client factory: it holds no credentials (an empty resolver), each
            # client gets its own copy of the event hooks and exactly this
            # lease session's keys. Sharing it keeps botocore's parsed service
            # models across readers (a fresh session re-reads them: 100-300 ms).
            # botocore sessions are not thread-safe: creation is serialized.
            key = (credentials.region, max_attempts)
            session = _FACTORIES.get(key)
            if session is None:
                session = isolated_botocore_session(
                    region=credentials.region, max_attempts=max_attempts
                )
                _FACTORIES[key] = session
            self._client: Any = session.create_client(
                "ssm",
                region_name=credentials.region,
                endpoint_url=endpoint_url,
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key.reveal(),
                aws_session_token=credentials.session_token.reveal(),
                config=config,
            )
        _cap_backoff(self._client, max_attempts, max_backoff_s)
        self._key_id = credentials.access_key_id
        self._executor = executor
        self._lock = threading.Lock()
        self._in_flight = 0
        self._sealed = False
        self._closed = threading.Event()

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else "sealed" if self._sealed else "open"
        return f"SsmReader(access_key_id={self._key_id!r}, state={state})"

    # -- state -------------------------------------------------------------

    @property
    def sealed(self) -> bool:
        """Whether new reads are refused."""
        return self._sealed

    @property
    def closed(self) -> bool:
        """Whether the client was closed (sealed and drained)."""
        return self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Reads admitted and not finished."""
        with self._lock:
            return self._in_flight

    @property
    def client(self) -> Any:
        """The botocore client (for tests and diagnostics)."""
        return self._client

    def seal(self) -> None:
        """Refuse new reads; close the client once the reads in flight finished.

        Idempotent; never raises.
        """
        with self._lock:
            self._sealed = True
            drained = self._in_flight == 0
        if drained:
            self._close()

    def wait_closed(self, timeout_s: float | None = None) -> bool:
        """Block until closed (or ``timeout_s`` seconds); return whether it is closed."""
        return self._closed.wait(timeout_s)

    def _close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        with contextlib.suppress(Exception):  # closing is best effort
            self._client.close()

    def _admit(self) -> bool:
        with self._lock:
            if self._sealed:
                return False
            self._in_flight += 1
            return True

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            drained = self._sealed and self._in_flight == 0
        if drained:
            self._close()

    # -- reads -------------------------------------------------------------

    @staticmethod
    def _check_names(names: Sequence[str]) -> tuple[str, ...]:
        if isinstance(names, str):
            raise TypeError("names must be a sequence of str, not a str")
        out = tuple(names)
        if len(out) > MAX_NAMES_PER_CALL:
            raise TooManyNames(f"at most {MAX_NAMES_PER_CALL} names a call, got {len(out)}")
        if not all(isinstance(n, str) for n in out):
            raise TypeError("names must be str")
        return out

    def read_blocking(self, names: Sequence[str]) -> ReadResult:
        """``GetParameters(Names=names, WithDecryption=True)`` in the calling thread.

        Args:
            names: 0–10 parameter names or ``name:version`` selectors.

        Returns:
            :class:`ReadOk`, or :class:`ReadFailure` (``sealed`` when the reader
            is sealed; ``access-denied`` per LR-034; ``other`` for anything
            else, incl. an incomplete parameter, LR-156).

        Raises:
            TooManyNames: more than 10 names (checked before admission).
            TypeError: ``names`` is not a sequence of ``str``.
        """
        selectors = self._check_names(names)
        if not self._admit():
            return ReadFailure(kind="sealed", message="the parameter reader is sealed")
        try:
            return self._call(selectors)
        finally:
            self._release()

    def _call(self, selectors: tuple[str, ...]) -> ReadResult:
        if not selectors:
            return ReadOk(parameters=(), invalid=())
        try:
            with _quiet_aws_debug():
                output = self._client.get_parameters(Names=list(selectors), WithDecryption=True)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a value
            kind: FailureKind = "access-denied" if is_access_denied(exc) else "other"
            return ReadFailure(kind=kind, message=_sanitized(exc))
        return _normalize(output)

    def submit(self, names: Sequence[str]) -> concurrent.futures.Future[ReadResult]:
        """Run :meth:`read_blocking` on the shared bounded executor.

        Raises:
            TooManyNames, TypeError: as :meth:`read_blocking` (before submitting).
            RuntimeError: the reader was built without an executor.
        """
        selectors = self._check_names(names)
        if self._executor is None:
            raise RuntimeError("this reader has no executor")
        return self._executor.submit(self.read_blocking, selectors)

    async def read(
        self, names: Sequence[str], *, limiter: anyio.CapacityLimiter | None = None
    ) -> ReadResult:
        """Async :meth:`read_blocking` in a worker thread (asyncio or trio).

        Args:
            names: as :meth:`read_blocking`.
            limiter: the shell's shared capacity limiter bounding worker
                threads (``None``: anyio's default limiter).

        Raises:
            TooManyNames, TypeError: as :meth:`read_blocking`.
        """
        selectors = self._check_names(names)
        if not self._admit():
            return ReadFailure(kind="sealed", message="the parameter reader is sealed")
        try:
            return await anyio.to_thread.run_sync(self._call, selectors, limiter=limiter)
        finally:
            self._release()


def _normalize(output: Any) -> ReadResult:
    try:
        raw_params: Iterable[Any] = output.get("Parameters") or []
        raw_invalid: Iterable[Any] = output.get("InvalidParameters") or []
        params: list[SsmParameter] = []
        for p in raw_params:
            name, typ, value, version = (
                p.get("Name"),
                p.get("Type"),
                p.get("Value"),
                p.get("Version"),
            )
            if (
                not isinstance(name, str)
                or not isinstance(typ, str)
                or not isinstance(value, str)
                or not isinstance(version, int)
                or isinstance(version, bool)
            ):
                return ReadFailure(kind="other", message=_INCOMPLETE)
            params.append(SsmParameter(name=name, type=typ, value=Secret(value), version=version))
        invalid = tuple(raw_invalid)
        if not all(isinstance(n, str) for n in invalid):
            return ReadFailure(kind="other", message=_INCOMPLETE)
        return ReadOk(parameters=tuple(params), invalid=invalid)
    except Exception:  # noqa: BLE001 - a malformed answer is a failure value
        return ReadFailure(kind="other", message=_INCOMPLETE)
