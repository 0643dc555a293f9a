"""LR-041 … LR-052: observed-version preservation, narrowing and refusal cleanup."""

from __future__ import annotations

from registry_kit import TASK, Driver, engine, kinds, manifest, of, param, reads, reports

from leasegate.core.registry import CleanupRequest, Identity, RunCleanup


def _changed(d: Driver, cid: str = "engine-0", version: int = 5, rev: str = "rev-0") -> None:
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": cid,
            "revision": rev,
            "version": version,
        }
    )


def _usable_at_v5(d: Driver) -> None:
    d.usable()
    _changed(d)
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[0].observed_version == 5


def test_LR_041_newer_observed_version_is_preserved() -> None:
    d = Driver()
    _usable_at_v5(d)
    d.start()
    out = d.grant(revision=5)
    p = param("engine", "engine-0")
    assert reads(out) == [(f"{p}:3",), (f"{p}:5",)]
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.manifest_revision == 5


def test_LR_042_no_preservation_for_new_identity_or_lower_version() -> None:
    d = Driver()
    _usable_at_v5(d)
    d.start()
    p = param("engine", "engine-0")
    out = d.grant(revision=5, m=manifest(engines=[engine(0, rev="rev-new")]))
    assert reads(out) == [(f"{p}:3",)]
    d2 = Driver()
    _usable_at_v5(d2)
    d2.start()
    out = d2.grant(revision=5, m=manifest(engines=[engine(0, version=6)]))
    assert reads(out) == [(f"{p}:6",)]
    d3 = Driver()
    d3.start()
    assert reads(d3.grant()) == [(f"{p}:3",)]  # nothing committed: nothing preserved


def test_LR_043_preservation_without_candidate_reader_fails() -> None:
    # The candidate's entry names a session; with no reader the chunk read fails
    # first ("manifest names a missing session"), so LR-043's guard is a defense
    # in depth; assert the observable outcome: the grant fails, nothing opens.
    d = Driver()
    _usable_at_v5(d)
    d.start()
    out = d.grant(revision=5, m=manifest(engines=[engine(0, session="s9")]))
    assert reports(out) == ["manifest names a missing session"]


def test_LR_044_preserved_view_keeps_manifest_version_and_observed_version() -> None:
    d = Driver()
    _usable_at_v5(d)
    d.start()
    d.grant(revision=5)
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[0].manifest.version == 3
    assert view.engines[0].observed_version == 5
    # The known version is now 5: a change to 5 is ignored, to 6 is read.
    _changed(d, version=5)
    assert reads(d.log[-3:]) == []
    n = len(d.log)
    _changed(d, version=6)
    assert reads(d.log[n:]) == [(f"{param('engine', 'engine-0')}:6",)]


def test_LR_045_denied_preservation_read_becomes_a_refusal() -> None:
    d = Driver()
    _usable_at_v5(d)
    d.start()
    d.ssm.denied.add(param("engine", "engine-0"))
    d.auto_cleanups = False
    out = d.grant(revision=5)
    cleanups = of(out, RunCleanup)
    assert [c.request.removed for c in cleanups] == [(Identity("engine", "engine-0", "rev-0"),)]


def test_LR_046_removed_identities_include_changed_revisions() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    out = d.grant(revision=5, m=manifest(engines=[engine(0, rev="rev-x")]))
    req = of(out, RunCleanup)[0].request
    assert req == CleanupRequest(
        assignment=req.assignment,
        mode="selective",
        reason="lease-replaced",
        removed=(Identity("engine", "engine-0", "rev-0"), Identity("engine", "engine-1", "rev-1")),
        remove_files_session=False,
    )


def test_LR_047_refused_identities() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.ssm.denied.add(param("engine", "engine-1"))
    out = d.grant(revision=5, m=manifest(engines=[engine(0), engine(1)]))
    assert of(out, RunCleanup)[0].request.removed == (Identity("engine", "engine-1", "rev-1"),)


def test_LR_048_without_bundle_narrowing_uses_remembered_identities() -> None:
    d = Driver()
    d.start()
    out = d.grant()
    assert of(out, RunCleanup) == []  # first grant: nothing remembered
    # Drop the bundle below a floor after its selective cleanup (LR-086) …
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 6,
            "minRevision": 6,
            "removed": ["engine-0"],
        }
    )
    assert d.reg.status(TASK).installed_revision is None  # type: ignore[union-attr]
    # … a grant with engine-1 only: engine-0 was cleaned already, nothing to narrow.
    d.auto_cleanups = False
    out = d.grant(revision=6, m=manifest(engines=[engine(1)]))
    assert of(out, RunCleanup) == []


def test_LR_049_narrowing_closes_seals_holds_and_cleans_before_install() -> None:
    d = Driver(auto_cleanups=False, auto_installs=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.finish_install()
    d.start()
    out = d.grant(revision=5, m=manifest(engines=[engine(0)]))
    names = kinds(out)
    assert names[-2:] == ["close:manifest-narrowed", "cleanup:selective:lease-replaced"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.holds == 1
    assert not st.gate_open
    assert d.pending_installs == []
    d.finish_cleanup()
    assert len(d.pending_installs) == 1
    out = d.finish_install()
    assert kinds(out)[-2:] == ["OpenGate", "GrantSettled"]
    assert d.reg.status(TASK).holds == 0  # type: ignore[union-attr]


def test_LR_050_no_narrowing_keeps_gate_open_during_install() -> None:
    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    d.finish_install()
    d.start()
    out = d.grant(revision=5)
    assert not any(k.startswith("close:") or k.startswith("cleanup:") for k in kinds(out))
    assert d.reg.current_view(TASK, 1, d.now) is not None  # still open on the old view
    assert len(d.pending_installs) == 1


def test_LR_051_failed_narrowing_cleanup_escalates_without_retry() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0)]))
    out = d.finish_cleanup(ok=False)
    names = kinds(out)
    assert "close:manifest-narrowed" in names
    assert "cleanup:full:manifest-narrowed" in names
    assert names.index("cleanup:full:manifest-narrowed") < names.index(
        "report:credential lease operation failed"
    )
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert "retry" not in st.timers
    assert st.pending_op is None


def test_LR_052_narrowing_close_failure_still_cleans_then_escalates() -> None:
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "manifest-narrowed"
    out = d.grant(revision=5, m=manifest(engines=[engine(0)]))
    assert kinds(out)[-3:] == [
        "close:manifest-narrowed",
        "report:credential lease operation failed",
        "cleanup:selective:lease-replaced",
    ]
    d.gate_fail = lambda c: False
    out = d.finish_cleanup()
    assert "report:grant became stale while it was being read" in kinds(out)
    assert "cleanup:full:manifest-narrowed" in kinds(out)
