"""LR-143 … LR-154: project env value reads through the grant's own session."""

from __future__ import annotations

import json
from typing import Any

import pytest
from registry_kit import TASK, Driver, kinds, manifest, of, reads, reports, session

from leasegate.core import Secret, sha256_hex
from leasegate.core.registry import (
    CallDone,
    CloseRun,
    LegacyRef,
    OpenReader,
    ProjectValueDone,
    ProjectValueRead,
    ReadCompleted,
    ReadParameters,
    RowRef,
    RunInstall,
    SsmParameter,
    StagedRef,
)

SID = "0123abcd-0000-4000-8000-00000000abcd"
STAGED = f"/uai/projects/proj-0/env-values/{sha256_hex('API_KEY')}/{SID}"
LEGACY = "/uai/projects/proj-0/env/API_KEY"


def staged_env(**over: Any) -> str:
    body: dict[str, Any] = {
        "v": 2,
        "kind": "project-env",
        "orgId": "org-1",
        "projectId": "proj-0",
        "key": "API_KEY",
        "stagingId": SID,
        "value": "CANARY-project-value",
    }
    body.update(over)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def legacy_env(**over: Any) -> str:
    body: dict[str, Any] = {
        "v": 1,
        "kind": "project-env",
        "projectId": "proj-0",
        "key": "API_KEY",
        "value": "CANARY-legacy",
        "updatedAt": 1.5,
    }
    body.update(over)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def read(
    d: Driver,
    ref: Any,
    *,
    project: str = "proj-0",
    key: str = "API_KEY",
    install: int | None = None,
    call_id: int = 40,
) -> list[Any]:
    return d.feed(
        ProjectValueRead(
            now_ms=d.now,
            call_id=call_id,
            task_id=TASK,
            run_epoch=1,
            project_id=project,
            key=key,
            ref=ref,
            install_cmd_id=install,
        )
    )


def error(out: list[Any]) -> str | None:
    done = of(out, CallDone)
    return done[0].error if done else None


def value(out: list[Any]) -> Any:
    return of(out, ProjectValueDone)[0].result


@pytest.mark.parametrize(
    ("project", "key", "ref", "message"),
    [
        ("proj/0", "API_KEY", StagedRef(staging_id=SID), "invalid project env identity"),
        ("proj-0", "1KEY", StagedRef(staging_id=SID), "invalid project env identity"),
        ("proj-0", "KEY\n", StagedRef(staging_id=SID), "invalid project env identity"),
        ("proj-0", "API_KEY", RowRef(), "a cloud lease cannot read a row-backed value"),
        ("proj-0", "API_KEY", StagedRef(staging_id=SID), "task credentials are not usable"),
    ],
)
def test_LR_143_request_validation_before_run_lookup(
    project: str, key: str, ref: Any, message: str
) -> None:
    d = Driver()
    d.start()
    assert error(read(d, ref, project=project, key=key)) == message


def test_LR_144_project_session_rules() -> None:
    d = Driver()
    d.start()
    m = manifest(projects=2)
    m["projects"][1]["sessionId"] = "s-missing"
    d.grant(m=m)  # a missing project session does not fail the grant
    assert d.reg.current_view(TASK, 1, d.now) is not None
    assert (
        error(read(d, StagedRef(staging_id=SID), project="proj-9"))
        == "project is not in the active manifest"
    )
    assert (
        error(read(d, StagedRef(staging_id=SID), project="proj-1"))
        == "project credentials session is missing"
    )


def test_LR_144_read_goes_through_the_project_session_reader() -> None:
    d = Driver()
    d.start()
    m = manifest()
    m["projects"][0]["sessionId"] = "s2"
    out = d.grant(m=m, sessions=[session("s1"), session("s2")])
    readers = {o.session.id: o.reader_id for o in of(out, OpenReader)}
    d.ssm.latest[STAGED] = (3, staged_env())
    out = read(d, StagedRef(staging_id=SID))
    assert [c.reader_id for c in of(out, ReadParameters)] == [readers["s2"]]


def test_LR_145_staged_parameter_and_unversioned_selector() -> None:
    d = Driver()
    d.usable()
    assert error(read(d, StagedRef(staging_id=SID.upper()))) == "invalid project env staging id"
    d.ssm.latest[STAGED] = (7, staged_env())
    out = read(d, StagedRef(staging_id=SID))
    assert reads(out) == [(STAGED,)]
    v = value(out)
    assert v.version == 7
    assert v.parameter == STAGED


def test_LR_146_legacy_parameter_and_pinned_selector() -> None:
    d = Driver()
    d.usable()
    assert error(read(d, LegacyRef(ssm_version=0))) == "invalid legacy project env version"
    assert error(read(d, LegacyRef(ssm_version=True))) == "invalid legacy project env version"  # type: ignore[arg-type]
    d.ssm.values[(LEGACY, 4)] = legacy_env()
    out = read(d, LegacyRef(ssm_version=4))
    assert reads(out) == [(f"{LEGACY}:4",)]
    assert value(out).version == 4


def test_LR_147_one_call_no_isolation_errors_to_caller_not_reported() -> None:
    d = Driver()
    d.usable()
    d.ssm.denied.add(STAGED)
    d.ssm.latest[STAGED] = (1, staged_env())
    out = read(d, StagedRef(staging_id=SID))
    assert reads(out) == [(STAGED,)]
    assert error(out) == "credential lease operation failed"
    assert reports(out) == []


def test_LR_148_invalid_selector_is_absent_conflicts_fail() -> None:
    d = Driver()
    d.usable()
    d.ssm.invalid.add(STAGED)
    out = read(d, StagedRef(staging_id=SID))
    assert value(out) is None


def test_LR_148_conflicting_and_inexact_results() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    p = SsmParameter(name=STAGED, type="SecureString", value=Secret(staged_env()), version=1)
    cases = [
        ((p,), (STAGED,), "Parameter Store returned conflicting project results"),
        ((p, p), (), "Parameter Store returned an inexact project result"),
        ((), ("other",), "Parameter Store returned an inexact project result"),
        ((), (), "Parameter Store returned an inexact project result"),
    ]
    for i, (params, invalid, message) in enumerate(cases):
        read(d, StagedRef(staging_id=SID), call_id=100 + i)
        cmd = d.pending_reads.pop(0)
        out = d.feed(
            ReadCompleted(now_ms=d.now, cmd_id=cmd.cmd_id, parameters=params, invalid=invalid)
        )
        assert error(out) == message


def test_LR_149_wrong_parameter_is_refused() -> None:
    d = Driver()
    d.usable()
    d.ssm.values[(LEGACY, 4)] = legacy_env()
    # the fake returns the version asked; ask for 4 but store under another name
    d.ssm.latest[STAGED] = (0, staged_env())
    assert (
        error(read(d, StagedRef(staging_id=SID)))
        == "Parameter Store returned the wrong project parameter"
    )


@pytest.mark.parametrize(
    "raw",
    [
        staged_env(v=1),
        staged_env(kind="x"),
        staged_env(orgId="org-2"),
        staged_env(projectId="proj-1"),
        staged_env(key="OTHER"),
        staged_env(stagingId="0123abcd-0000-4000-8000-00000000ffff"),
        staged_env(value=5),
        staged_env(extra=1),
        staged_env(orgId=...),
        "not json",
        "[]",
    ],
)
def test_LR_150_staged_envelope_must_match(raw: str) -> None:
    d = Driver()
    d.usable()
    d.ssm.latest[STAGED] = (2, raw)
    assert (
        error(read(d, StagedRef(staging_id=SID)))
        == "project value envelope does not match its reference"
    )


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        (legacy_env(), True),
        (legacy_env(orgId="org-1"), True),
        (legacy_env(orgId="org-2"), False),
        (legacy_env(v=2), False),
        (legacy_env(v=True), False),
        (legacy_env(updatedAt="x"), False),
        (legacy_env(updatedAt=...), False),
        (legacy_env(extra=1), False),
        (legacy_env(key="B"), False),
    ],
)
def test_LR_151_legacy_envelope_rules(raw: str, ok: bool) -> None:
    d = Driver()
    d.usable()
    d.ssm.values[(LEGACY, 4)] = raw
    out = read(d, LegacyRef(ssm_version=4))
    if ok:
        assert of(out, ProjectValueDone)
    else:
        assert error(out) == "project value envelope does not match its reference"


def test_LR_152_result_is_the_raw_envelope() -> None:
    d = Driver()
    d.usable()
    raw = staged_env()
    d.ssm.latest[STAGED] = (9, raw)
    v = value(read(d, StagedRef(staging_id=SID)))
    assert v.raw_value.reveal() == raw
    assert v.version == 9
    assert v.parameter == STAGED
    assert "CANARY" not in repr(v)


def test_LR_153_reads_use_the_bundle_usable_at_call_time() -> None:
    d = Driver()
    d.usable()
    d.ssm.latest[STAGED] = (1, staged_env())
    assert of(read(d, StagedRef(staging_id=SID)), ProjectValueDone)
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=3, task_id=TASK, run_epoch=1))
    assert error(read(d, StagedRef(staging_id=SID))) == "task credentials are not usable"


def test_LR_154_grant_reader_reads_its_own_candidate_while_installing() -> None:
    d = Driver(auto_installs=False)
    d.start()
    out = d.grant()
    inst = of(out, RunInstall)[0]
    d.ssm.latest[STAGED] = (1, staged_env())
    out = read(d, StagedRef(staging_id=SID), install=inst.cmd_id)
    assert of(out, ProjectValueDone)  # through the candidate: the gate is not open yet
    d.finish_install()
    out = read(d, StagedRef(staging_id=SID), install=inst.cmd_id)
    assert of(out, ProjectValueDone)  # now the committed, usable grant
    d.start()
    d.grant(revision=5)
    d.finish_install()
    assert (
        error(read(d, StagedRef(staging_id=SID), install=inst.cmd_id))
        == "task credentials are not usable"
    )


def test_LR_137_project_read_in_flight_discarded_when_fence_moves() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    d.ssm.latest[STAGED] = (1, staged_env())
    read(d, StagedRef(staging_id=SID))
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 5,
            "minRevision": 5,
            "removed": [],
        }
    )
    out = d.finish_read()
    assert error(out) == "credential read crossed an assignment fence"
    assert kinds(out)
