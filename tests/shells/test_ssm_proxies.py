"""The SSM reader never takes a proxy from the environment; an explicit one is used.

``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (and lowercase) point at a
loopback listener that counts the connections it gets (and at the dead
``http://127.0.0.1:9``); a read through :class:`SsmReader` against moto
still succeeds and the listener sees no connection. An explicit
``proxies=`` mapping routes the reads through a forwarding proxy
(:class:`FaultProxy`, which counts what it forwards).
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from leasegate.core import Secret
from leasegate.shells.ssm import NO_PROXIES, ReadOk, SessionCredentials, SsmReader, client_proxies
from leasegate.testing.moto import FaultProxy, MotoServer

pytestmark = pytest.mark.integration

DEAD: str = "http://127.0.0.1:9"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


class ConnectionCounter:
    """A loopback TCP listener that counts the connections it accepts and closes them."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._sock.close()


@pytest.fixture
def counter() -> Iterator[ConnectionCounter]:
    c = ConnectionCounter()
    try:
        yield c
    finally:
        c.close()


def _set_proxy_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    for name in PROXY_VARS:
        monkeypatch.setenv(name, url)
        monkeypatch.setenv(name.lower(), url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


@pytest.fixture(scope="module")
def session(moto_server: MotoServer) -> SessionCredentials:
    arn = moto_server.create_role(f"proxy-reader-{uuid.uuid4().hex[:6]}", allow_read=True)
    return moto_server.session_for(arn)


def _put(moto_server: MotoServer, value: str) -> str:
    name = f"/leasegate-test/proxy-{uuid.uuid4().hex[:8]}"
    moto_server.put_secure(name, value)
    return name


@pytest.mark.parametrize("where", ["listener", "dead"])
def test_ssm_reader_ignores_proxy_environment_variables(
    where: str,
    moto_server: MotoServer,
    session: SessionCredentials,
    counter: ConnectionCounter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _put(moto_server, "CANARY-direct")
    _set_proxy_env(monkeypatch, counter.url if where == "listener" else DEAD)
    reader = SsmReader(session, endpoint_url=moto_server.url, max_attempts=1)
    try:
        result = reader.read_blocking([name])
    finally:
        reader.seal()
    assert isinstance(result, ReadOk)
    assert result.parameters[0].value == Secret("CANARY-direct")
    assert counter.connections == 0
    # botocore's own view of the client's proxies: none at all.
    assert reader.client.meta.config.proxies == {}


def test_ssm_reader_no_proxy_list_changes_nothing(
    moto_server: MotoServer,
    session: SessionCredentials,
    counter: ConnectionCounter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A NO_PROXY that does not name the endpoint would let the environment's
    # proxy apply if it were read at all.
    name = _put(moto_server, "CANARY-noproxy")
    _set_proxy_env(monkeypatch, counter.url)
    monkeypatch.setenv("NO_PROXY", "example.invalid")
    monkeypatch.setenv("no_proxy", "example.invalid")
    reader = SsmReader(session, endpoint_url=moto_server.url, max_attempts=1)
    try:
        assert isinstance(reader.read_blocking([name]), ReadOk)
    finally:
        reader.seal()
    assert counter.connections == 0


def test_ssm_reader_uses_an_explicit_proxy(
    moto_server: MotoServer,
    session: SessionCredentials,
    counter: ConnectionCounter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _put(moto_server, "CANARY-proxied")
    _set_proxy_env(monkeypatch, counter.url)  # the environment's proxy still loses
    with FaultProxy(moto_server.url) as proxy:
        reader = SsmReader(
            session, endpoint_url=moto_server.url, max_attempts=1, proxies={"http": proxy.url}
        )
        try:
            result = reader.read_blocking([name])
        finally:
            reader.seal()
        assert isinstance(result, ReadOk)
        assert result.parameters[0].value == Secret("CANARY-proxied")
        assert proxy.requests == 1
    assert counter.connections == 0


def test_client_proxies_is_explicit_and_never_shared() -> None:
    assert client_proxies(None) == {}
    assert client_proxies({}) == {}
    out = client_proxies({"https": "http://proxy.invalid:3128"})
    assert out == {"https": "http://proxy.invalid:3128"}
    out["http"] = "x"
    assert dict(NO_PROXIES) == {}
    bad: Any = {"https": 3128}
    with pytest.raises(TypeError):
        client_proxies(bad)
