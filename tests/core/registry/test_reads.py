"""LR-026 … LR-040: readers, chunked exact reads, strict checks, access-denied isolation."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from registry_kit import (
    T0,
    TASK,
    Driver,
    engine,
    envelope,
    kinds,
    manifest,
    mcp,
    of,
    param,
    reads,
    reports,
    session,
    static,
)

from leasegate.core.registry import (
    CloseReader,
    CloseRun,
    OpenReader,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
)


def _sel(cls: str, cid: str, v: int) -> str:
    return f"{param(cls, cid)}:{v}"


def test_LR_026_one_reader_per_credentials_session_before_any_read() -> None:
    d = Driver(runner_kind="task-machine")
    d.start()
    sessions = [session("s1"), session("s2")]
    m = manifest(engines=[engine(0, session="s2")])
    out = d.grant(m=m, sessions=sessions, files=True)
    opened = of(out, OpenReader)
    assert [o.session.id for o in opened] == ["s1", "s2"]  # s1 is used by projects only
    assert all(o.region == "us-east-1" and o.assignment.task_id == TASK for o in opened)
    names = kinds(out)
    assert names.index("OpenReader") < names.index("ReadParameters")
    assert max(i for i, n in enumerate(names) if n == "OpenReader") < names.index("ReadParameters")


def test_LR_027_auth_kind_none_is_never_read() -> None:
    d = Driver()
    d.start()
    out = d.grant(m=manifest(engines=[engine(0)], mcps=[mcp(0, auth="none")]))
    assert reads(out) == [(_sel("engine", "engine-0", 3),)]
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    entry = view.mcp[0]
    assert (entry.availability, entry.material, entry.observed_version) == (
        "not-required",
        None,
        None,
    )


@pytest.mark.parametrize(
    "patch",
    [
        {"parameter": ""},
        {"version": 0},
        {"sessionId": ""},
        {"parameter": "/not/a/credential"},
    ],
)
def test_LR_028_incomplete_manifest_entry_fails_before_any_read(patch: dict[str, Any]) -> None:
    d = Driver()
    d.start()
    e = engine(0)
    e.update(patch)
    out = d.grant(m=manifest(engines=[e]))
    assert reads(out) == []
    assert reports(out) == ["manifest credential is incomplete"]


def test_LR_028_mcp_with_null_version_is_incomplete() -> None:
    d = Driver()
    d.start()
    m = mcp(0)
    m["version"] = None
    out = d.grant(m=manifest(engines=[engine(0)], mcps=[m]))
    assert reads(out) == []
    assert reports(out) == ["manifest credential is incomplete"]


def test_LR_029_grouped_by_session_chunked_by_ten_one_call_at_a_time() -> None:
    d = Driver(auto_reads=False)
    d.start()
    engines = [engine(i, session="s2" if i % 2 else "s1") for i in range(14)]
    m = manifest(engines=engines, mcps=[mcp(0, session="s2")], github=static("github"))
    out = d.grant(m=m, sessions=[session("s1"), session("s2")])
    s1 = [_sel("engine", f"engine-{i}", 3) for i in range(0, 14, 2)] + [
        _sel("github", "github-1", 2)
    ]
    s2 = [_sel("engine", f"engine-{i}", 3) for i in range(1, 14, 2)] + [_sel("mcp", "mcp-0", 1)]
    assert reads(out) == [tuple(s1)]  # one call at a time
    seen = [d.pending_reads[0].selectors]
    while d.pending_reads:
        out = d.finish_read()
        seen.extend(reads(out))
    assert seen == [tuple(s1), tuple(s2)]
    # 12 in one session: chunks of 10 then 2
    d2 = Driver()
    d2.start()
    out = d2.grant(m=manifest(engines=[engine(i) for i in range(12)]))
    assert [len(r) for r in reads(out)] == [10, 2]
    assert all(":" in s for r in reads(out) for s in r)


def test_LR_030_group_with_missing_session_fails_at_its_turn() -> None:
    d = Driver()
    d.start()
    m = manifest(engines=[engine(0), engine(1, session="nope")])
    out = d.grant(m=m)
    assert reads(out) == [(_sel("engine", "engine-0", 3),)]
    assert reports(out) == ["manifest names a missing session"]


def _answer(d: Driver, mutate: Any) -> list[str]:
    d2 = d
    out = d2.grant(m=manifest(engines=[engine(0), engine(1)]))
    cmd = of(out, ReadParameters)[0]
    good = d2.ssm.answer(cmd, d2.now)
    assert isinstance(good, ReadCompleted)
    out = d2.feed(mutate(good))
    return reports(out)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda r: dataclasses.replace(r, invalid=("x",)),
            "Parameter Store rejected a credential selector",
        ),
        (
            lambda r: dataclasses.replace(r, parameters=r.parameters[:1]),
            "Parameter Store omitted or added credential material",
        ),
        (
            lambda r: dataclasses.replace(r, parameters=(r.parameters[0], r.parameters[0])),
            "Parameter Store returned inexact credential material",
        ),
        (
            lambda r: dataclasses.replace(
                r, parameters=(dataclasses.replace(r.parameters[0], type="String"), r.parameters[1])
            ),
            "Parameter Store returned inexact credential material",
        ),
        (
            lambda r: dataclasses.replace(
                r, parameters=(dataclasses.replace(r.parameters[0], version=4), r.parameters[1])
            ),
            "Parameter Store returned inexact credential material",
        ),
        (
            lambda r: dataclasses.replace(
                r, parameters=(dataclasses.replace(r.parameters[0], name="/other"), r.parameters[1])
            ),
            "Parameter Store returned inexact credential material",
        ),
    ],
)
def test_LR_031_strict_batch_checks(mutate: Any, message: str) -> None:
    d = Driver(auto_reads=False)
    d.start()
    assert _answer(d, mutate) == [message]
    assert d.reg.current_view(TASK, 1, d.now) is None


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        envelope(param("engine", "engine-1")),  # another credential's envelope
        envelope(param("engine", "engine-0"), auth="config-dir"),  # another auth kind
    ],
)
def test_LR_032_envelope_must_match_its_entry(raw: str) -> None:
    d = Driver()
    d.start()
    d.ssm.values[(param("engine", "engine-0"), 3)] = raw
    out = d.grant(m=manifest(engines=[engine(0)]))
    assert reports(out) == ["credential envelope does not match its manifest entry"]


def test_LR_032_available_record_holds_material_and_observed_version() -> None:
    d = Driver()
    d.start()
    d.grant()
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    e = view.engines[0]
    assert e.availability == "available"
    assert e.observed_version == 3
    assert e.material is not None
    assert e.material.credential_class == "engine"


def test_LR_033_denied_chunk_is_isolated_by_singletons() -> None:
    d = Driver()
    d.start()
    d.ssm.denied.add(param("engine", "engine-1"))
    out = d.grant(m=manifest(engines=[engine(0), engine(1), engine(2)]))
    sels = [_sel("engine", f"engine-{i}", 3) for i in range(3)]
    assert reads(out) == [tuple(sels), (sels[0],), (sels[1],), (sels[2],)]
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert [e.availability for e in view.engines] == ["available", "access-denied", "available"]
    assert view.engines[1].material is None
    assert view.engines[1].observed_version is None


def test_LR_033_denied_single_selector_is_read_twice() -> None:
    d = Driver()
    d.start()
    d.ssm.denied.add(param("engine", "engine-0"))
    out = d.grant(m=manifest(engines=[engine(0)]))
    sel = _sel("engine", "engine-0", 3)
    assert reads(out) == [(sel,), (sel,)]


def test_LR_033_other_singleton_failure_fails_the_grant() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    first = d.pending_reads.pop(0)
    d.feed(ReadFailed(now_ms=d.now, cmd_id=first.cmd_id, access_denied=True))
    single = d.pending_reads.pop(0)
    out = d.feed(ReadFailed(now_ms=d.now, cmd_id=single.cmd_id, access_denied=False))
    assert reports(out) == ["credential lease operation failed"]
    assert reads(out) == []


def test_LR_034_only_access_denied_failures_are_isolated() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    first = d.pending_reads.pop(0)
    out = d.feed(ReadFailed(now_ms=d.now, cmd_id=first.cmd_id, access_denied=False))
    assert reads(out) == []  # throttling etc.: no singleton retries
    assert reports(out) == ["credential lease operation failed"]


def test_LR_035_failed_grant_destroys_its_readers_after_reads_drain() -> None:
    d = Driver(auto_reads=False)
    d.start()
    out = d.grant(m=manifest(engines=[engine(0)]), sessions=[session("s1"), session("s2")])
    readers = [o.reader_id for o in of(out, OpenReader)]
    cmd = d.pending_reads.pop(0)
    out = d.feed(ReadFailed(now_ms=d.now, cmd_id=cmd.cmd_id, access_denied=False))
    assert sorted(c.reader_id for c in of(out, CloseReader)) == sorted(readers)
    names = kinds(out)
    assert names.index("CloseReader") < names.index("report:credential lease operation failed")
    assert "StartTimer" in names  # retry


def test_LR_036_view_completeness() -> None:
    d = Driver()
    d.start()
    out = d.grant(m=manifest(engines=[engine(0, auth="none")]))
    assert reports(out) == ["engine material is incomplete"]


def test_LR_037_mcp_completeness() -> None:
    d = Driver()
    d.start()
    # An MCP token entry whose envelope is of another class: envelope mismatch first.
    d.ssm.values[(param("mcp", "mcp-0"), 1)] = envelope(param("engine", "engine-0"))
    out = d.grant(m=manifest(engines=[engine(0)], mcps=[mcp(0)]))
    assert reports(out) == ["credential envelope does not match its manifest entry"]
    d.advance(30_000)
    d.ssm.values.clear()
    out = d.grant(m=manifest(engines=[engine(0)], mcps=[mcp(0)]))
    assert reports(out) == []
    assert d.reg.current_view(TASK, 1, d.now).mcp[0].availability == "available"  # type: ignore[union-attr]


def test_LR_038_view_contents_in_manifest_order_without_sts() -> None:
    d = Driver()
    d.start()
    m = manifest(
        engines=[engine(2), engine(0), engine(1)],
        mcps=[mcp(0)],
        github=static("github"),
        ssh=static("ssh"),
        projects=2,
    )
    d.grant(m=m, lease_id="lease-77")
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert [e.manifest.credential_id for e in view.engines] == ["engine-2", "engine-0", "engine-1"]
    assert view.lease_id == "lease-77"
    assert view.manifest_revision == 4
    assert view.project_ids == ("proj-0", "proj-1")
    assert view.github is not None
    assert view.ssh is not None
    assert view.expires_at == T0 + 7_200_000
    assert "CANARY-secret" not in repr(view)
    assert "CANARY-token" not in repr(view)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.lease_id = "x"  # type: ignore[misc]


def test_LR_039_candidate_fence_after_materialization() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant()
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
    # expiry of the candidate also fails the fence
    e = Driver(auto_reads=False)
    e.start()
    e.grant(expires_at=T0 + 1000)
    e.now = T0 + 1000
    out = e.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]


def test_LR_040_remaining_chunks_are_read_after_a_fence_moved() -> None:
    d = Driver(auto_reads=False)
    d.start()
    d.grant(m=manifest(engines=[engine(i) for i in range(12)]))
    d.auto_cleanups = False
    d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))
    out = d.finish_read()
    assert [len(r) for r in reads(out)] == [2]  # the second chunk is still read
    out = d.finish_read()
    assert reports(out) == ["grant became stale while it was being read"]
