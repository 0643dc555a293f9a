"""The SSM reader against a real moto server over HTTP (boto3/botocore)."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from leasegate.core import Secret
from leasegate.shells.ssm import (
    MAX_NAMES_PER_CALL,
    ReadFailure,
    ReadOk,
    SessionCredentials,
    SsmReader,
    TooManyNames,
    is_access_denied,
)
from leasegate.testing.moto import FaultProxy, MotoServer

pytestmark = pytest.mark.integration

_seq = itertools.count()


def _name(prefix: str = "p") -> str:
    return f"/leasegate-test/{prefix}-{uuid.uuid4().hex[:8]}-{next(_seq)}"


@pytest.fixture(scope="module")
def session(moto_server: MotoServer) -> SessionCredentials:
    arn = moto_server.create_role(f"reader-{uuid.uuid4().hex[:6]}", allow_read=True)
    return moto_server.session_for(arn)


def _reader(server_url: str, creds: SessionCredentials, **kw: Any) -> SsmReader:
    kw.setdefault("max_backoff_s", 0.02)
    return SsmReader(creds, endpoint_url=server_url, **kw)


def test_LR_156_exact_name_version_reads(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    name = _name()
    moto_server.put_secure(name, "CANARY-v1")
    moto_server.put_secure(name, "CANARY-v2")
    reader = _reader(moto_server.url, session)
    missing = _name("missing")
    result = reader.read_blocking([f"{name}:1", f"{name}:2", missing])
    assert isinstance(result, ReadOk)
    got = {(p.name, p.version): p for p in result.parameters}
    assert set(got) == {(name, 1), (name, 2)}
    assert got[(name, 1)].value == Secret("CANARY-v1")
    assert got[(name, 2)].value.reveal() == "CANARY-v2"
    assert all(p.type == "SecureString" for p in result.parameters)
    assert result.invalid == (missing,)
    assert "CANARY" not in repr(result)
    reader.seal()


def test_LR_156_client_built_from_the_session_only_never_ambient(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    # conftest put canary keys, files, region and endpoint into the environment.
    assert os.environ["AWS_ACCESS_KEY_ID"].startswith("AKIACANARY")
    reader = _reader(moto_server.url, session)
    creds = reader.client._request_signer._credentials.get_frozen_credentials()
    assert creds.access_key == session.access_key_id
    assert creds.secret_key == session.secret_access_key.reveal()
    assert creds.token == session.session_token.reveal()
    assert reader.client.meta.region_name == session.region
    assert reader.client.meta.endpoint_url == moto_server.url
    assert "CANARY" not in repr(creds.access_key)
    name = _name()
    moto_server.put_secure(name, "value")
    assert isinstance(reader.read_blocking([name]), ReadOk)
    reader.seal()


def test_LR_156_readers_share_a_factory_never_credentials() -> None:
    # Readers share one credential-less botocore session per region (a client
    # factory that keeps the parsed service models); each client signs with its
    # own lease session's keys and carries its own copy of the event hooks.
    a, b = (
        SessionCredentials(
            access_key_id=f"ASIAREADER{x}",
            secret_access_key=Secret(f"secret-{x.lower()}"),
            session_token=Secret(f"token-{x.lower()}"),
            region="eu-west-1",
        )
        for x in "AB"
    )
    ra = SsmReader(a, max_backoff_s=0.5)
    rb = SsmReader(b, max_backoff_s=0.5)
    try:
        fa = ra.client._request_signer._credentials.get_frozen_credentials()
        fb = rb.client._request_signer._credentials.get_frozen_credentials()
        assert (fa.access_key, fa.secret_key, fa.token) == ("ASIAREADERA", "secret-a", "token-a")
        assert (fb.access_key, fb.secret_key, fb.token) == ("ASIAREADERB", "secret-b", "token-b")
        assert ra.client.meta.events is not rb.client.meta.events
        from leasegate.shells import ssm as ssm_module

        factory = ssm_module._FACTORIES[("eu-west-1", ssm_module.DEFAULT_MAX_ATTEMPTS)]
        assert factory.get_credentials() is None
    finally:
        ra.seal()
        rb.seal()


def test_LR_156_no_endpoint_given_uses_aws_endpoint_not_the_ambient_one(
    session: SessionCredentials,
) -> None:
    reader = SsmReader(session)
    assert reader.client.meta.endpoint_url == "https://ssm.us-east-1.amazonaws.com"
    reader.seal()
    assert reader.closed


def test_LR_029_more_than_ten_names_refused_before_any_request(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    with FaultProxy(moto_server.url) as proxy:
        reader = _reader(proxy.url, session)
        names = [_name() for _ in range(MAX_NAMES_PER_CALL + 1)]
        with pytest.raises(TooManyNames):
            reader.read_blocking(names)
        with pytest.raises(TooManyNames):
            reader.submit(names)
        assert proxy.requests == 0
        assert reader.in_flight == 0
        ok = reader.read_blocking(names[:MAX_NAMES_PER_CALL])
        assert isinstance(ok, ReadOk)
        assert len(ok.invalid) == MAX_NAMES_PER_CALL
        assert proxy.requests == 1
        reader.seal()


def test_LR_034_access_denied_classified_with_real_iam_enforcement(
    moto_iam_server: MotoServer,
) -> None:
    name = _name()
    moto_iam_server.put_secure(name, "CANARY-denied-value")
    allowed = moto_iam_server.session_for(
        moto_iam_server.create_role(f"ok-{uuid.uuid4().hex[:6]}", allow_read=True)
    )
    denied = moto_iam_server.session_for(
        moto_iam_server.create_role(f"no-{uuid.uuid4().hex[:6]}", allow_read=False)
    )
    ok = SsmReader(allowed, endpoint_url=moto_iam_server.url).read_blocking([name])
    assert isinstance(ok, ReadOk)
    assert ok.parameters[0].value == Secret("CANARY-denied-value")
    failed = SsmReader(denied, endpoint_url=moto_iam_server.url).read_blocking([name])
    assert isinstance(failed, ReadFailure)
    assert failed.kind == "access-denied"
    assert failed.access_denied
    assert "CANARY" not in failed.message
    assert denied.secret_access_key.reveal() not in failed.message


def test_LR_034_unknown_key_is_not_access_denied(moto_iam_server: MotoServer) -> None:
    bogus = SessionCredentials(
        access_key_id="ASIABOGUSBOGUSBOGUS0",
        secret_access_key=Secret("CANARY-bogus-secret"),
        session_token=Secret("CANARY-bogus-token"),
        region="us-east-1",
    )
    result = SsmReader(bogus, endpoint_url=moto_iam_server.url).read_blocking([_name()])
    assert isinstance(result, ReadFailure)
    # moto answers an unknown key with 403 InvalidClientTokenId: a 403 counts (LR-034).
    assert result.kind == "access-denied"
    assert "CANARY" not in result.message
    assert "CANARY" not in repr(result)


def _client_error(code: str, status: int, message: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetParameters",
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("AccessDenied", 400, "x"), True),
        (_client_error("AccessDeniedException", 400, "x"), True),
        (_client_error("Other", 403, "x"), True),
        (_client_error("Other", 400, "user is accessdenied here"), True),
        (_client_error("Other", 400, "Access denied"), False),
        (_client_error("Other", 400, "only AccessDeniedException"), False),
        (_client_error("ThrottlingException", 400, "Rate exceeded"), False),
        (_client_error("InternalError", 500, "x"), False),
        (ValueError("AccessDenied"), True),
        (ConnectionError("network"), False),
    ],
)
def test_LR_034_access_denied_predicate(error: BaseException, expected: bool) -> None:
    assert is_access_denied(error) is expected


@pytest.mark.parametrize("faults", [["throttle"] * 3, ["500", "503", "500"], ["503"]])
def test_retry_throttling_and_5xx_recover(
    moto_server: MotoServer, session: SessionCredentials, faults: list[Any]
) -> None:
    name = _name()
    moto_server.put_secure(name, "CANARY-retry")
    with FaultProxy(moto_server.url) as proxy:
        reader = _reader(proxy.url, session, max_attempts=4)
        proxy.inject(faults)
        result = reader.read_blocking([name])
        assert isinstance(result, ReadOk)
        assert result.parameters[0].value == Secret("CANARY-retry")
        assert proxy.faulted == len(faults)
        assert proxy.requests == len(faults) + 1
        reader.seal()


def test_retry_attempts_are_bounded(moto_server: MotoServer, session: SessionCredentials) -> None:
    with FaultProxy(moto_server.url) as proxy:
        reader = _reader(proxy.url, session, max_attempts=3)
        proxy.inject(["503"] * 10)
        result = reader.read_blocking([_name()])
        assert isinstance(result, ReadFailure)
        assert result.kind == "other"
        assert result.message == "Parameter Store read failed (code ServiceUnavailable, HTTP 503)"
        assert proxy.requests == 3
        reader.seal()


def test_LR_026_reads_after_seal_refused_and_client_closed_after_drain(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    name = _name()
    moto_server.put_secure(name, "v")
    reader = _reader(moto_server.url, session)
    entered = threading.Event()
    release = threading.Event()
    closed_calls: list[int] = []
    real_close = reader.client.close

    def hold(**kwargs: Any) -> None:
        entered.set()
        release.wait(10)

    def close() -> None:
        closed_calls.append(reader.in_flight)
        real_close()

    reader.client.meta.events.register("before-send.ssm.GetParameters", hold)
    reader.client.close = close
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        reader._executor = pool
        fut = reader.submit([name])
        assert entered.wait(10)
        assert reader.in_flight == 1
        reader.seal()
        assert reader.sealed
        assert not reader.closed
        refused = reader.read_blocking([name])
        assert refused == ReadFailure(kind="sealed", message="the parameter reader is sealed")
        assert closed_calls == []
        release.set()
        assert isinstance(fut.result(10), ReadOk)
    assert reader.wait_closed(5)
    assert closed_calls == [0]
    assert isinstance(reader.read_blocking([name]), ReadFailure)
    reader.seal()  # idempotent
    assert closed_calls == [0]


@pytest.mark.anyio
async def test_LR_156_async_read_in_worker_thread(
    moto_server: MotoServer, session: SessionCredentials, anyio_backend: str
) -> None:
    import anyio

    name = _name()
    moto_server.put_secure(name, "CANARY-async")
    reader = _reader(moto_server.url, session)
    seen: list[str] = []
    main = threading.get_ident()
    reader.client.meta.events.register(
        "before-send.ssm.GetParameters",
        lambda **kw: seen.append("worker" if threading.get_ident() != main else "main"),
    )
    limiter = anyio.CapacityLimiter(2)
    result = await reader.read([name], limiter=limiter)
    assert isinstance(result, ReadOk)
    assert result.parameters[0].value == Secret("CANARY-async")
    assert seen == ["worker"]
    reader.seal()
    assert reader.closed
    assert (await reader.read([name])).kind == "sealed"  # type: ignore[union-attr]


def test_LR_156_incomplete_parameter_fails(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    reader = _reader(moto_server.url, session)

    def strip_version(parsed: dict[str, Any], **kwargs: Any) -> None:
        for p in parsed.get("Parameters", []):
            p.pop("Version", None)

    reader.client.meta.events.register("after-call.ssm.GetParameters", strip_version)
    name = _name()
    moto_server.put_secure(name, "CANARY-incomplete")
    result = reader.read_blocking([name])
    assert result == ReadFailure(
        kind="other", message="Parameter Store returned an incomplete parameter"
    )
    reader.seal()


def test_canary_reader_repr_and_credentials_repr_hold_no_secret(
    session: SessionCredentials,
) -> None:
    creds = SessionCredentials(
        access_key_id="ASIAEXAMPLEEXAMPLE00",
        secret_access_key=Secret("CANARY-secret"),
        session_token=Secret("CANARY-token"),
        region="us-east-1",
    )
    reader = SsmReader(creds, endpoint_url="http://127.0.0.1:9")
    assert "CANARY" not in repr(creds)
    assert "CANARY" not in repr(reader)
    reader.seal()


def test_blocking_reads_are_bounded_by_the_shared_executor(
    moto_server: MotoServer, session: SessionCredentials
) -> None:
    name = _name()
    moto_server.put_secure(name, "v")
    shared = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    readers = [_reader(moto_server.url, session, executor=shared) for _ in range(3)]
    lock = threading.Lock()
    active = 0
    peak = 0
    gate = threading.Event()

    def hold(**kwargs: Any) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        gate.wait(0.3)
        with lock:
            active -= 1

    for r in readers:
        r.client.meta.events.register("before-send.ssm.GetParameters", hold)
    with shared:
        futures = [r.submit([name]) for r in readers for _ in range(2)]
        results = [f.result(20) for f in futures]
    assert all(isinstance(x, ReadOk) for x in results)
    assert peak == 2
    for r in readers:
        r.seal()
        assert r.closed


def test_LR_026_credentials_from_the_wire_lease_session() -> None:
    from leasegate.core import decode
    from leasegate.core.wire.lease import LeaseSession

    wire = {
        "id": "s1",
        "purpose": "credentials",
        "accessKeyId": "ASIAEXAMPLEEXAMPLE00",
        "secretAccessKey": "CANARY-secret",
        "sessionToken": "CANARY-token",
        "expiresAt": 1_800_000_000_000,
    }
    session = decode(LeaseSession, wire)
    assert isinstance(session, LeaseSession), session
    creds = SessionCredentials.from_lease(session, "eu-west-1")
    assert creds.access_key_id == "ASIAEXAMPLEEXAMPLE00"
    assert creds.secret_access_key == Secret("CANARY-secret")
    assert creds.session_token == Secret("CANARY-token")
    assert creds.region == "eu-west-1"
    reader = SsmReader(creds, endpoint_url="http://127.0.0.1:9")
    assert reader.client.meta.region_name == "eu-west-1"
    assert "CANARY" not in repr(creds) + repr(reader)
    reader.seal()


def test_LR_034_completion_events_for_the_registry() -> None:
    from leasegate.core.registry import ReadCompleted, ReadFailed, SsmParameter
    from leasegate.shells.ssm import completion_event

    param = SsmParameter(name="/p", type="SecureString", value=Secret("CANARY"), version=3)
    ok = completion_event(ReadOk(parameters=(param,), invalid=("/q",)), cmd_id=7, now_ms=5)
    assert ok == ReadCompleted(now_ms=5, cmd_id=7, parameters=(param,), invalid=("/q",))
    for kind, denied in (("access-denied", True), ("other", False), ("sealed", False)):
        ev = completion_event(ReadFailure(kind=kind, message="m"), cmd_id=8, now_ms=6)  # type: ignore[arg-type]
        assert ev == ReadFailed(now_ms=6, cmd_id=8, access_denied=denied)
    assert "CANARY" not in repr(ok)


def test_LR_026_aws_debug_records_are_dropped_only_inside_reader_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Other boto3 users of the host keep botocore's DEBUG lines; a reader's own
    # calls (signed requests, decrypted bodies) never reach a handler.
    import logging

    from leasegate.shells import ssm as ssm_module

    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("botocore.parsers")
    with ssm_module._quiet_aws_debug():
        log.debug("inside CANARY-body")
        log.info("inside info")
    log.debug("outside debug")
    lines = [r.getMessage() for r in caplog.records if r.name == "botocore.parsers"]
    assert lines == ["inside info", "outside debug"]
