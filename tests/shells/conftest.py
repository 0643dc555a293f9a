"""Shell test fixtures: an isolated AWS environment, asyncio and trio.

Every test here runs with the ambient AWS configuration replaced by canaries:
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` hold bogus ``CANARY`` keys and
``AWS_SHARED_CREDENTIALS_FILE``/``AWS_CONFIG_FILE`` point at files holding
canary keys, a bogus region and an unreachable endpoint. A reader that
consulted the default chain would sign with the canary key and fail.

The moto servers and the reference cloud come from the leasegate pytest
plugin (``moto_server``, ``moto_iam_server``, ``reference_cloud``, ...).
Tests taking ``anyio_backend`` run under asyncio and trio.
"""

from __future__ import annotations

import pytest

AMBIENT_KEY_ID = "AKIACANARYAMBIENT000"
AMBIENT_SECRET = "CANARY-ambient-secret"


@pytest.fixture(autouse=True)
def _no_ambient_aws(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    d = tmp_path_factory.mktemp("aws")
    creds = d / "credentials"
    creds.write_text(
        "[default]\naws_access_key_id = AKIACANARYFILE000000\n"
        "aws_secret_access_key = CANARY-file-secret\n"
    )
    conf = d / "config"
    conf.write_text(
        "[default]\nregion = eu-canary-1\nendpoint_url = http://127.0.0.1:9\n"
        "retry_mode = legacy\nmax_attempts = 1\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AMBIENT_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AMBIENT_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "CANARY-ambient-token")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-canary-2")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    already = any(
        "anyio_backend" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")
    )
    if "anyio_backend" in metafunc.fixturenames and not already:
        metafunc.parametrize("anyio_backend", ["asyncio", "trio"], indirect=True)
