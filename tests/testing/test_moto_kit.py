"""The kit's moto server: no ambient proxies or credentials, quiet by default.

* A client of :class:`MotoServer` ignores ``HTTP_PROXY``/``HTTPS_PROXY``/
  ``ALL_PROXY`` (set here to a dead address): botocore reads them only when a
  client's ``proxies`` is ``None``, and the kit passes ``{}``. A plain
  botocore client in the same environment goes to the dead proxy and fails
  (the check can fail).
* Ambient AWS keys and config (canaries here) are never used.
* werkzeug's per-request log line is dropped unless ``quiet=False``.
"""

from __future__ import annotations

import logging

import botocore.session
import pytest
from botocore.exceptions import ProxyConnectionError

from leasegate.testing.moto import DUMMY_ACCESS_KEY_ID, MotoServer, start_moto

pytestmark = pytest.mark.integration

DEAD_PROXY = "http://127.0.0.1:9"


@pytest.fixture
def dead_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, DEAD_PROXY)
        monkeypatch.setenv(name.lower(), DEAD_PROXY)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


@pytest.fixture
def ambient_canaries(monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACANARYAMBIENT000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "CANARY-ambient-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "CANARY-ambient-token")
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_PROXY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-canary-1")


def test_kit_clients_ignore_proxy_environment_variables(
    moto_server: MotoServer, dead_proxies: None
) -> None:
    moto_server.reset()  # the kit's own HTTP calls go direct too
    version = moto_server.put_secure("/kit/proxy", "CANARY-proxy")
    assert version == 1
    ssm = moto_server.client("ssm")
    out = ssm.get_parameter(Name="/kit/proxy", WithDecryption=True)
    assert out["Parameter"]["Value"] == "CANARY-proxy"
    assert moto_server.sts_client().get_caller_identity()["Account"]


def test_a_client_without_explicit_proxies_uses_the_dead_proxy(
    moto_server: MotoServer, dead_proxies: None
) -> None:
    plain = botocore.session.Session().create_client(
        "sts",
        region_name=moto_server.region,
        endpoint_url=moto_server.url,
        aws_access_key_id=DUMMY_ACCESS_KEY_ID,
        aws_secret_access_key="dummy",
    )
    with pytest.raises(ProxyConnectionError):
        plain.get_caller_identity()


def test_kit_clients_never_use_ambient_aws_configuration(
    moto_server: MotoServer, ambient_canaries: None
) -> None:
    client = moto_server.client("sts")
    assert client.meta.endpoint_url == moto_server.url
    assert client.meta.region_name == moto_server.region
    creds = client._request_signer._credentials
    assert creds.access_key == DUMMY_ACCESS_KEY_ID
    assert creds.token is None
    assert client.get_caller_identity()["Account"]


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "werkzeug" and r.levelno < logging.WARNING]


def test_the_request_log_is_dropped_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="werkzeug")
    with start_moto() as quiet:
        quiet.client("sts").get_caller_identity()
    assert _request_lines(caplog) == []
    with start_moto(quiet=False) as loud:
        loud.client("sts").get_caller_identity()
    assert _request_lines(caplog)  # the same request, logged when asked


def test_an_iam_enforced_server_refuses_a_reset() -> None:
    server = MotoServer(url="http://127.0.0.1:9", region="us-east-1", iam_enforced=True, _stop=list)
    with pytest.raises(RuntimeError):
        server.reset()
    server.stop()
    server.stop()  # idempotent
