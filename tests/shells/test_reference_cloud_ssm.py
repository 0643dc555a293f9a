"""The reference cloud against a moto server on 127.0.0.1 (real HTTP, real boto3).

Envelopes the cloud writes are read back with boto3 exactly as the runner
reads them (``GetParameters``, ``WithDecryption``, pinned ``name:version``
selectors for credentials, through the lease's own STS session) and parsed
with the core's parsers.
"""

from __future__ import annotations

from typing import Any

import pytest

from leasegate.core.wire import decode_frame, encode_frame
from leasegate.core.wire.credentials import (
    EngineValue,
    GithubValue,
    McpValue,
    SshValue,
    parse_leased_value,
    parse_parameter_name,
    project_env_legacy_selector,
    project_env_staged_parameter,
)
from leasegate.core.wire.env import (
    ValueRefLegacy,
    ValueRefStaged,
    parse_legacy_envelope,
    parse_staged_envelope,
)
from leasegate.core.wire.lease import LeaseGrant, LeaseRequest, TaskLease, manifest_digest
from leasegate.testing import MotoServer, ReferenceCloud

pytestmark = pytest.mark.integration

TASK = "task-ssm"


def _setup(cloud: ReferenceCloud) -> TaskLease:
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "sk-live"})
    cloud.add_engine_credential(
        "alice", "codex", engine="codex", auth_kind="oauth", files={"auth/token.json": "{}"}
    )
    cloud.add_engine_credential("alice", "shared", env={"OPENAI_API_KEY": "org"}, org_wide=True)
    cloud.add_mcp("alice", "linear", server="linear", header=("Authorization", "Bearer x"))
    cloud.add_mcp("alice", "notion", server="notion", auth_kind="oauth", access_token="tok")
    cloud.set_github("alice", "gh", "ghp_abc")
    cloud.set_ssh("alice", "key", "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n")
    cloud.set_env_value("web", "DATABASE_URL", "postgres://db")
    cloud.set_env_value("web", "LEGACY", "old-style", legacy=True)
    cloud.assign(TASK, 1, "acme", "alice", ["web"], runner_boot_id="boot-ssm")
    cloud.receive(encode_frame(LeaseRequest(op_id="lease-1-m", task_id=TASK, run_epoch=1)))
    grant = decode_frame(cloud.take_outgoing()[0])
    assert isinstance(grant, LeaseGrant)
    return grant.lease


def _session_ssm(endpoint: MotoServer, lease: TaskLease) -> Any:
    (session,) = [s for s in lease.sessions if s.purpose == "credentials"]
    return endpoint.client(
        "ssm",
        access_key_id=session.access_key_id,
        secret_access_key=session.secret_access_key.reveal(),
        session_token=session.session_token.reveal(),
    )


def test_LR_156_sessions_are_minted_by_the_endpoints_sts(
    reference_cloud: ReferenceCloud, moto_server: MotoServer
) -> None:
    lease = _setup(reference_cloud)
    (session,) = lease.sessions
    assert session.access_key_id.startswith("ASIA")
    assert lease.manifest_digest == manifest_digest(lease.manifest)
    ident = _session_ssm(moto_server, lease)
    # The session's keys work against the endpoint.
    assert "Parameters" in ident.get_parameters(Names=["/nothing"], WithDecryption=True)
    # Every grant gets its own session.
    reference_cloud.receive(
        encode_frame(LeaseRequest(op_id="lease-2-m", task_id=TASK, run_epoch=1))
    )
    again = decode_frame(reference_cloud.take_outgoing()[0])
    assert isinstance(again, LeaseGrant)
    assert again.lease.sessions[0].access_key_id != session.access_key_id
    assert again.lease.sessions[0].session_token != session.session_token


def test_LR_029_LR_032_credential_envelopes_round_trip_through_ssm(
    reference_cloud: ReferenceCloud, moto_server: MotoServer
) -> None:
    lease = _setup(reference_cloud)
    ssm = _session_ssm(moto_server, lease)
    m = lease.manifest
    entries = [*m.engines, *m.mcp, m.github, m.ssh]
    selectors = [f"{e.parameter}:{e.version}" for e in entries if e is not None]
    assert len(selectors) == 7
    got = ssm.get_parameters(Names=selectors, WithDecryption=True)
    assert got["InvalidParameters"] == []
    by_name = {p["Name"]: p for p in got["Parameters"]}
    values = []
    for e in entries:
        assert e is not None
        param = by_name[e.parameter]
        assert param["Type"] == "SecureString"
        assert param["Version"] == e.version
        value = parse_leased_value(param["Value"], parse_parameter_name(e.parameter))
        assert value is not None
        values.append(value)
    claude, codex, shared, linear, notion, gh, key = values
    assert isinstance(claude, EngineValue)
    assert claude.env is not None
    assert claude.env["ANTHROPIC_API_KEY"].reveal() == "sk-live"
    assert isinstance(codex, EngineValue)
    assert codex.files is not None
    assert codex.files["auth/token.json"].reveal() == "{}"
    assert isinstance(shared, EngineValue)
    assert shared.location.user_id is None
    assert isinstance(linear, McpValue)
    assert linear.header is not None
    assert linear.header.value.reveal() == "Bearer x"
    assert isinstance(notion, McpValue)
    assert notion.access_token is not None
    assert notion.access_token.reveal() == "tok"
    assert isinstance(gh, GithubValue)
    assert gh.token.reveal() == "ghp_abc"
    assert isinstance(key, SshValue)
    assert key.private_key.reveal().startswith("-----BEGIN")


def test_LR_092_a_rotated_version_is_readable_at_its_pinned_selector(
    reference_cloud: ReferenceCloud, moto_server: MotoServer
) -> None:
    lease = _setup(reference_cloud)
    reference_cloud.take_outgoing()
    engine = lease.manifest.engines[0]
    version = reference_cloud.rotate("claude", env={"ANTHROPIC_API_KEY": "sk-next"})
    changed = decode_frame(reference_cloud.take_outgoing()[0])
    assert getattr(changed, "version", None) == version
    ssm = _session_ssm(moto_server, lease)
    old, new = (
        ssm.get_parameters(Names=[f"{engine.parameter}:{v}"], WithDecryption=True)["Parameters"][0]
        for v in (engine.version, version)
    )
    loc = parse_parameter_name(engine.parameter)
    old_value, new_value = (
        parse_leased_value(old["Value"], loc),
        parse_leased_value(new["Value"], loc),
    )
    assert isinstance(old_value, EngineValue)
    assert isinstance(new_value, EngineValue)
    assert old_value.env is not None
    assert new_value.env is not None
    assert old_value.env["ANTHROPIC_API_KEY"].reveal() == "sk-live"
    assert new_value.env["ANTHROPIC_API_KEY"].reveal() == "sk-next"


def test_LR_145_LR_150_ER_098_staged_env_values_read_by_name_parse(
    reference_cloud: ReferenceCloud, moto_server: MotoServer
) -> None:
    lease = _setup(reference_cloud)
    state = reference_cloud.env_record("web", "DATABASE_URL")
    assert state is not None
    ref = state.head.value_ref
    assert isinstance(ref, ValueRefStaged)
    name = project_env_staged_parameter("web", "DATABASE_URL", ref.staging_id)
    assert name == reference_cloud.env_parameter("web", "DATABASE_URL")
    ssm = _session_ssm(moto_server, lease)
    (param,) = ssm.get_parameters(Names=[name], WithDecryption=True)["Parameters"]
    assert param["Type"] == "SecureString"
    value = parse_staged_envelope(
        param["Value"],
        org_id=lease.org_id,
        project_id="web",
        key="DATABASE_URL",
        staging_id=ref.staging_id,
    )
    assert not isinstance(value, str)
    assert value.reveal() == "postgres://db"


def test_LR_146_LR_151_ER_100_legacy_env_values_read_by_version_parse(
    reference_cloud: ReferenceCloud, moto_server: MotoServer
) -> None:
    lease = _setup(reference_cloud)
    state = reference_cloud.env_record("web", "LEGACY")
    assert state is not None
    ref = state.head.value_ref
    assert isinstance(ref, ValueRefLegacy)
    selector = project_env_legacy_selector("web", "LEGACY", ref.ssm_version)
    assert selector is not None
    ssm = _session_ssm(moto_server, lease)
    (param,) = ssm.get_parameters(Names=[selector], WithDecryption=True)["Parameters"]
    assert param["Version"] == ref.ssm_version
    value = parse_legacy_envelope(param["Value"], org_id="acme", project_id="web", key="LEGACY")
    assert not isinstance(value, str)
    assert value.reveal() == "old-style"
