"""Grants and scripted commands of the reference cloud (synchronous, no server).

Every frame is decoded with the core's ``decode_frame``; grants are checked
with the core's ``manifest_digest`` and ``lease_expires_at``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from leasegate.core import loads
from leasegate.core.wire import decode_frame, encode_frame
from leasegate.core.wire.credentials import parse_leased_value, parse_parameter_name
from leasegate.core.wire.lease import (
    CredentialChanged,
    CredentialRefresh,
    CredentialRefreshResult,
    LeaseDeny,
    LeaseFiles,
    LeaseGrant,
    LeaseRequest,
    LeaseStale,
    LeaseUnavailable,
    lease_expires_at,
    manifest_digest,
)
from leasegate.testing import CloudError, ManualClock, MemoryParameterStore, ReferenceCloud
from leasegate.testing._transport import dumps_frame

TASK = "task-7"
BOOT = "boot-7"


def make_cloud(**kwargs: Any) -> tuple[ReferenceCloud, ManualClock, MemoryParameterStore]:
    clock = ManualClock()
    store = MemoryParameterStore()
    cloud = ReferenceCloud(ssm=store, clock=clock, **kwargs)
    cloud.add_org("org1")
    cloud.add_user("org1", "alice")
    cloud.add_user("org1", "bob")
    cloud.add_project("org1", "proj-a")
    cloud.add_engine_credential("alice", "eng-env", env={"ANTHROPIC_API_KEY": "sk-1"})
    cloud.add_engine_credential(
        "alice",
        "eng-files",
        engine="codex",
        auth_kind="config-dir",
        files={"auth.json": "{}"},
    )
    cloud.add_engine_credential("bob", "eng-org", env={"K": "org"}, org_wide=True)
    cloud.add_engine_credential("bob", "eng-bob", env={"K": "bob"})
    cloud.add_mcp("alice", "mcp-tok", server="linear", header=("Authorization", "Bearer t"))
    cloud.add_mcp("alice", "mcp-oauth", server="notion", auth_kind="oauth", access_token="at")
    cloud.add_mcp("alice", "mcp-none", server="docs", auth_kind="none")
    cloud.set_github("alice", "gh", "ghp_token")
    cloud.set_ssh("alice", "ssh", "-----BEGIN KEY-----\nabc\n")
    return cloud, clock, store


def request(cloud: ReferenceCloud, op: str = "lease-1-a", run: int = 1) -> list[Any]:
    cloud.receive(encode_frame(LeaseRequest(op_id=op, task_id=TASK, run_epoch=run)))
    return [decode_frame(v) for v in cloud.take_outgoing()]


def grant_of(frames: list[Any]) -> LeaseGrant:
    grants = [f for f in frames if isinstance(f, LeaseGrant)]
    assert len(grants) == 1
    return grants[0]


def test_LR_018_LR_020_grant_decodes_echoes_the_op_and_its_digest_verifies() -> None:
    cloud, _clock, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", ["proj-a"], runner_boot_id=BOOT)
    frames = request(cloud, "lease-1-abc")
    grant = grant_of(frames)
    assert grant.op_id == "lease-1-abc"
    lease = grant.lease
    assert (lease.task_id, lease.run_epoch, lease.org_id, lease.user_id) == (
        TASK,
        1,
        "org1",
        "alice",
    )
    assert lease.manifest_digest == manifest_digest(lease.manifest)
    # The digest survives the text round trip a transport makes.
    again = decode_frame(loads(dumps_frame(encode_frame(grant))))
    assert again == grant
    assert isinstance(again, LeaseGrant)
    assert again.lease.manifest_digest == manifest_digest(again.lease.manifest)


def test_LR_038_manifest_lists_the_users_and_orgs_credentials_in_order() -> None:
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", ["proj-a"], runner_boot_id=BOOT)
    m = grant_of(request(cloud)).lease.manifest
    # alice's engines and the org-wide one, in the order added; not bob's own.
    assert [e.credential_id for e in m.engines] == ["eng-env", "eng-files", "eng-org"]
    assert [(e.engine, e.auth_kind) for e in m.engines] == [
        ("claude-code", "env"),
        ("codex", "config-dir"),
        ("claude-code", "env"),
    ]
    assert [(e.credential_id, e.auth_kind) for e in m.mcp] == [
        ("mcp-tok", "token"),
        ("mcp-oauth", "oauth"),
        ("mcp-none", "none"),
    ]
    none = m.mcp[2]
    assert (none.parameter, none.version, none.session_id) == (None, None, None)
    assert m.github is not None
    assert m.github.credential_id == "gh"
    assert m.ssh is not None
    assert m.ssh.credential_id == "ssh"
    assert [(p.project_id, p.session_id) for p in m.projects] == [("proj-a", "credentials")]
    for entry in (*m.engines, m.mcp[0], m.mcp[1], m.github, m.ssh):
        assert entry.version == cloud.credential_version(entry.credential_id)
        assert entry.parameter == cloud.credential_parameter(entry.credential_id)
        assert parse_parameter_name(entry.parameter) is not None


def test_LR_032_envelopes_written_parse_for_their_manifest_entries() -> None:
    cloud, _, store = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    m = grant_of(request(cloud)).lease.manifest
    entries = [*m.engines, m.mcp[0], m.mcp[1], m.github, m.ssh]
    for e in entries:
        assert e is not None
        got = store.get_parameters(Names=[f"{e.parameter}:{e.version}"], WithDecryption=True)
        (param,) = got["Parameters"]
        value = parse_leased_value(param["Value"], parse_parameter_name(e.parameter))
        assert value is not None
        assert value.location.credential_id == e.credential_id
        if hasattr(e, "auth_kind"):
            assert value.auth_kind == e.auth_kind


def test_LR_021_lease_and_sessions_expire_from_the_injected_clock() -> None:
    cloud, clock, _ = make_cloud(lease_ttl_ms=120_000, session_ttl_ms=90_000)
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    lease = grant_of(request(cloud)).lease
    assert lease.expires_at == clock.now_ms + 120_000
    assert [s.expires_at for s in lease.sessions] == [clock.now_ms + 90_000]
    assert lease_expires_at(lease) == clock.now_ms + 90_000
    assert [s.purpose for s in lease.sessions] == ["credentials"]
    assert lease.files is None


def test_LR_022_a_files_mount_adds_exactly_one_files_session() -> None:
    cloud, _, _ = make_cloud()
    files = LeaseFiles(bucket="task-files", prefix="t/7/", read_only=False)
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT, files=files)
    lease = grant_of(request(cloud)).lease
    assert [s.purpose for s in lease.sessions] == ["credentials", "files"]
    assert lease.files == files
    assert len({s.id for s in lease.sessions}) == 2


def test_LR_110_an_unknown_run_gets_lease_unavailable() -> None:
    cloud, _, _ = make_cloud()
    assert request(cloud, "op-x") == [LeaseUnavailable(op_id="op-x")]


def test_LR_091_rotate_sends_credential_changed_with_the_new_version() -> None:
    cloud, _, store = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    lease = grant_of(request(cloud)).lease
    old = lease.manifest.engines[0].version
    version = cloud.rotate("eng-env", env={"ANTHROPIC_API_KEY": "sk-2"})
    assert version == old + 1
    (frame,) = [decode_frame(v) for v in cloud.take_outgoing()]
    assert frame == CredentialChanged(
        task_id=TASK, run_epoch=1, credential_id="eng-env", revision="r1", version=version
    )
    # The new version holds the new material.
    param = lease.manifest.engines[0].parameter
    got = store.get_parameters(Names=[f"{param}:{version}"], WithDecryption=True)
    value = parse_leased_value(got["Parameters"][0]["Value"], parse_parameter_name(param))
    assert value is not None
    assert value.env["ANTHROPIC_API_KEY"].reveal() == "sk-2"
    # A credential no granted manifest names announces nothing.
    cloud.rotate("eng-bob")
    assert cloud.take_outgoing() == []


def test_LR_021_a_regrant_after_a_rotation_advances_the_manifest_revision() -> None:
    # The rotated version is part of the manifest, so its digest changes; the
    # registry refuses a changed manifest at the same revision (LR-021).
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    first = grant_of(request(cloud)).lease
    again = grant_of(request(cloud, "op-same")).lease
    assert again.manifest_revision == first.manifest_revision  # unchanged manifest: same
    cloud.rotate("eng-env", env={"ANTHROPIC_API_KEY": "sk-2"})
    cloud.rotate("eng-env", env={"ANTHROPIC_API_KEY": "sk-3"})
    cloud.take_outgoing()
    later = grant_of(request(cloud, "op-later")).lease
    assert later.manifest_digest != first.manifest_digest
    assert later.manifest_revision == first.manifest_revision + 1
    assert cloud.manifest_revision(TASK, 1) == later.manifest_revision


def test_LR_081_narrow_sends_stale_with_floor_and_removals_then_grants_without_them() -> None:
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    first = grant_of(request(cloud)).lease
    cloud.narrow(TASK, 1, remove=["eng-files", "gh"])
    (stale,) = [decode_frame(v) for v in cloud.take_outgoing()]
    assert stale == LeaseStale(
        task_id=TASK,
        run_epoch=1,
        wanted_revision=first.manifest_revision + 1,
        min_revision=first.manifest_revision + 1,
        removed=("eng-files", "gh"),
    )
    second = grant_of(request(cloud, "lease-2-b")).lease
    assert second.manifest_revision == stale.wanted_revision
    assert [e.credential_id for e in second.manifest.engines] == ["eng-env", "eng-org"]
    assert second.manifest.github is None
    assert second.manifest_digest == manifest_digest(second.manifest)
    assert second.manifest_digest != first.manifest_digest


def test_LR_080_narrow_without_floor_sends_a_null_min_revision() -> None:
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    request(cloud)
    cloud.narrow(TASK, 1, floor=None)
    (stale,) = [decode_frame(v) for v in cloud.take_outgoing()]
    assert isinstance(stale, LeaseStale)
    assert stale.min_revision is None
    assert stale.removed == ()


def test_LR_111_LR_112_deny_prompts_a_request_and_answers_it_with_deny() -> None:
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    rev = grant_of(request(cloud)).lease.manifest_revision
    cloud.deny(TASK, 1, "policy says no")
    (stale,) = [decode_frame(v) for v in cloud.take_outgoing()]
    assert isinstance(stale, LeaseStale)
    assert stale.wanted_revision == rev + 1
    assert stale.min_revision is None
    assert request(cloud, "lease-2-c") == [LeaseDeny(op_id="lease-2-c", error="policy says no")]
    # Denied until allowed; then the grant carries the raised revision.
    assert request(cloud, "lease-3-d") == [LeaseDeny(op_id="lease-3-d", error="policy says no")]
    cloud.allow(TASK, 1)
    assert grant_of(request(cloud, "lease-4-e")).lease.manifest_revision == rev + 1


def test_LR_110_make_unavailable_answers_requests_with_unavailable() -> None:
    cloud, _, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    request(cloud)
    cloud.make_unavailable(TASK, 1, prompt=False)
    assert cloud.take_outgoing() == []
    assert request(cloud, "lease-2-u") == [LeaseUnavailable(op_id="lease-2-u")]
    cloud.allow(TASK, 1)
    assert isinstance(request(cloud, "lease-3-u")[0], LeaseGrant)


@pytest.mark.parametrize(
    ("outcome", "version_delta"),
    [("fresh", 0), ("refreshed", 1), ("needs_sign_in", None), ("unavailable", None)],
)
def test_LR_107_LR_108_refresh_is_answered_with_the_scripted_outcome(
    outcome: Any, version_delta: int | None
) -> None:
    cloud, _clock, _ = make_cloud()
    cloud.assign(TASK, 1, "org1", "alice", [], runner_boot_id=BOOT)
    request(cloud)
    before = cloud.credential_version("mcp-oauth")
    assert before is not None
    cloud.set_refresh_outcome("mcp-oauth", outcome)
    cloud.receive(
        encode_frame(
            CredentialRefresh(
                op_id="refresh-2-a",
                task_id=TASK,
                run_epoch=1,
                credential_id="mcp-oauth",
                revision="r1",
            )
        )
    )
    (result,) = [decode_frame(v) for v in cloud.take_outgoing()]
    assert isinstance(result, CredentialRefreshResult)
    assert result.op_id == "refresh-2-a"
    assert result.outcome == outcome
    if version_delta is None:
        assert result.version is None
    else:
        assert result.version == before + version_delta
        assert result.version == cloud.credential_version("mcp-oauth")


def test_LR_018_invalid_frames_are_ignored_without_raising() -> None:
    cloud, _, _ = make_cloud()
    for junk in [None, 3, "x", [], {"kind": "lease.request"}, {"kind": "nope"}]:
        cloud.receive(junk)
    cloud.receive_text("{not json")
    cloud.receive_text('{"kind": "lease.request", "opId": "a", "taskId": "t", "runEpoch": 1.0}')
    assert cloud.take_outgoing() == []
    assert cloud.transcript.count(("in", "invalid")) == 7


def test_scripting_errors_name_the_problem() -> None:
    cloud, _, _ = make_cloud()
    with pytest.raises(CloudError, match="unknown user"):
        cloud.add_engine_credential("nobody", "x", env={"K": "v"})
    with pytest.raises(CloudError, match="credential exists"):
        cloud.add_engine_credential("alice", "eng-env", env={"K": "v"})
    with pytest.raises(CloudError, match="unknown project"):
        cloud.set_env_value("nope", "K", "v")
    with pytest.raises(CloudError, match="invalid env key"):
        cloud.set_env_value("proj-a", "1BAD", "v")
    with pytest.raises(CloudError, match="unknown assignment"):
        cloud.narrow("nope", 1)
    with pytest.raises(CloudError, match="invalid task assignment"):
        cloud.assign("bad\ntask", 1, "org1", "alice", runner_boot_id=BOOT)
    with pytest.raises(CloudError, match="invalid task assignment"):
        cloud.assign(TASK, 0, "org1", "alice", runner_boot_id=BOOT)
    with pytest.raises(CloudError, match="invalid runner boot id"):
        cloud.assign(TASK, 1, "org1", "alice", runner_boot_id="no spaces")
    cloud.assign(TASK, 1, "org1", "alice", runner_boot_id=BOOT)
    with pytest.raises(CloudError, match="deny error"):
        cloud.deny(TASK, 1, "x" * 513)
    with pytest.raises(CloudError, match="deny error"):
        cloud.deny(TASK, 1, "")


def test_SEC_canary_secrets_never_reach_logs_reprs_or_transcripts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="leasegate.testing")
    clock = ManualClock()
    store = MemoryParameterStore()
    cloud = ReferenceCloud(ssm=store, clock=clock)
    cloud.add_org("org1")
    cloud.add_user("org1", "alice")
    cloud.add_project("org1", "proj-a")
    cloud.add_engine_credential("alice", "e1", env={"K": "CANARY-env"})
    cloud.add_mcp("alice", "m1", server="s", header=("X-Key", "CANARY-header"))
    cloud.set_github("alice", "gh", "CANARY-gh")
    cloud.set_ssh("alice", "ssh", "CANARY-ssh")
    cloud.set_env_value("proj-a", "K", "CANARY-project")
    cloud.assign(TASK, 1, "org1", "alice", ["proj-a"], runner_boot_id=BOOT)
    out = request(cloud)
    cloud.rotate("e1", env={"K": "CANARY-rotated"})
    cloud.set_env_value("proj-a", "K", "CANARY-changed")
    cloud.receive({"kind": "lease.request", "opId": "CANARY", "secret": "CANARY"})
    # A grant waiting in the outbox does not show its session keys either.
    cloud.receive(encode_frame(LeaseRequest(op_id="lease-9-z", task_id=TASK, run_epoch=1)))
    queued = repr(cloud.__dict__)
    # The wire itself carries secrets (session keys too) ...
    grant = grant_of(out)
    assert "CANARY" not in repr(grant)
    secret_key = grant.lease.sessions[0].secret_access_key.reveal()
    # ... but nothing the cloud shows does.
    shown = [
        repr(cloud),
        repr(store),
        repr(cloud.transcript),
        repr(cloud.delivery_state(TASK, 1)),
        repr(cloud.env_record("proj-a", "K")),
        repr(cloud.granted_lease(TASK, 1)),
        repr(cloud.__dict__),
        queued,
        caplog.text,
    ]
    for text in shown:
        assert "CANARY" not in text
        assert secret_key not in text
    later = grant_of([decode_frame(v) for v in cloud.take_outgoing()])
    for session in later.lease.sessions:
        assert session.secret_access_key.reveal() not in queued
        assert session.session_token.reveal() not in queued
    assert caplog.records  # the cloud did log
