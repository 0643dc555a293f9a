"""Breaker tests: each kills a mutant of the registry that the other tests let live.

Issue #3's review: 237 small mutations were made to
``core/leasegate/core/registry`` one at a time and the registry tests run
against each. Every test here failed on a mutant that survived them (or on a
defect the review found) and passes on the real code; its docstring names the
mutant (M-/D-/X-numbers of the mutation table in
``tests/core/registry/COVERAGE.md``, section "Breaker review", which also
lists the equivalent mutants left alive and why). The last section feeds
adversarial input (malformed frames of every kind, duplicate and stray
completions, answers for other runs, host calls at odd moments, and a random
walk whose host calls are made from *inside* gate callbacks) and checks that
nothing raises, nothing changes, no ended run is served and no secret leaks.

Defects found and fixed in the registry (each with its failing-first test):

* a start of a newer epoch made from inside the "superseded" close callback
  of a superseding start was overwritten by the older epoch
  (``test_LR_005_…``);
* an install's project reader read for whatever assignment the
  ``ProjectValueRead`` named (``test_LR_154_install_reader_refuses_…``).
"""

from __future__ import annotations

from typing import Any

from registry_kit import (
    T0,
    TASK,
    Driver,
    engine,
    grant,
    kinds,
    manifest,
    of,
    param,
    reads,
    reports,
    sends,
    static,
)

from leasegate.core.registry import (
    BridgeAuthenticated,
    CloseRun,
    Identity,
    LaunchFenceFailed,
    OpenGate,
    ReadParameters,
    RunCleanup,
)


def _stale(wanted: int, minimum: int | None, removed: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": 1,
        "wantedRevision": wanted,
        "minRevision": minimum,
        "removed": list(removed),
    }


def _changed(cid: str, rev: str, version: int) -> dict[str, Any]:
    return {
        "kind": "credential.changed",
        "taskId": TASK,
        "runEpoch": 1,
        "credentialId": cid,
        "revision": rev,
        "version": version,
    }


# ---------------------------------------------------------------------------
# Lifecycle


def test_LR_005_reentrant_newer_start_during_supersession_is_not_overwritten() -> None:
    """A start of epoch 3 made from inside the close callback of a start of epoch 2.

    Found by the re-entrant random walk. The epoch-2 start ends epoch 1 with
    "superseded" and, while that close callback runs, the host starts epoch 3
    (which supersedes the still-registered epoch 1 and registers itself).
    When the callback returns, the epoch-2 start must not register epoch 2
    over epoch 3 (the reference would: an older epoch would become active
    again, request and open, while the host runs epoch 3). It re-decides
    against the run registered meanwhile: 2 < 3 is "stale task assignment"
    (LR-002), and epoch 3 goes on.
    """
    from leasegate.core.registry import StartRun
    from leasegate.core.wire.lease import LeaseRequest

    d = Driver()
    d.usable()

    def inner(cmd: Any) -> None:
        assert getattr(cmd, "reason", None) == "superseded"
        d.feed(StartRun(now_ms=d.now, call_id=31, task_id=TASK, run_epoch=3, recovery=False))

    d.on_gate = inner
    mark = len(d.log)
    d.feed(StartRun(now_ms=d.now, call_id=30, task_id=TASK, run_epoch=2, recovery=False))
    out = d.log[mark:]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.assignment.run_epoch == 3
    done = {c.call_id: c.error for c in out if type(c).__name__ == "CallDone"}
    assert done == {31: None, 30: "stale task assignment"}
    requested = [f.run_epoch for f in sends(out) if isinstance(f, LeaseRequest)]
    assert requested == [3]
    assert all(c.assignment.run_epoch != 2 for c in out if hasattr(c, "assignment"))


def test_LR_009_failed_recovery_close_runs_cleanup_failed_after_the_startup() -> None:
    """M196: a recovery start whose close failed runs "cleanup-failed" after its startup cleanup."""
    d = Driver()
    d.gate_fail = lambda c: getattr(c, "reason", "") == "recovery"
    out = d.start(recovery=True)
    names = kinds(out)
    assert names.index("cleanup:full:recovery") < names.index("cleanup:full:cleanup-failed")
    assert names.index("cleanup:full:cleanup-failed") < names.index("send:lease.request")
    st = d.reg.status(TASK)
    assert st is not None
    assert not st.quarantined
    assert st.phase == "waiting"


# ---------------------------------------------------------------------------
# Requests


def test_LR_011_no_request_while_lost_after_a_failed_full_cleanup() -> None:
    """M02: a run ``lost`` after its full cleanup failed sends no lease.request."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_cleanup(ok=False)
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert not st.full_cleanup
    assert not st.quarantined
    d.feed(BridgeAuthenticated(now_ms=d.now))  # drops the op and would request
    d.start()  # a same-assignment start attempts a request too
    assert sends(d.log[-10:]) == []
    assert d.reg.status(TASK).pending_op is None  # type: ignore[union-attr]


def test_LR_022_task_machine_needs_the_files_metadata_too() -> None:
    """X27: one Files session but ``lease.files`` null is refused for a task machine."""
    from registry_kit import session

    d = Driver(runner_kind="task-machine")
    d.start()
    out = d.grant(sessions=[session(), session("sf", "files")])
    assert reports(out) == ["task machine did not receive exactly one Files session"]
    assert of(out, ReadParameters) == []


# ---------------------------------------------------------------------------
# Reads


def test_LR_032_envelope_of_another_class_at_a_static_entry_is_refused() -> None:
    """M17: a github entry whose parameter is an ssh parameter holding an ssh envelope.

    The envelope matches its parameter, but not the manifest entry's class:
    "credential envelope does not match its manifest entry" (not a later
    completeness error).
    """
    d = Driver()
    d.start()
    gh = static("github")
    gh["parameter"] = param("ssh", "github-1")
    out = d.grant(m=manifest(github=gh))
    assert reports(out) == ["credential envelope does not match its manifest entry"]
    assert d.reg.current_view(TASK, 1, d.now) is None


# ---------------------------------------------------------------------------
# Candidate fence


def test_LR_039_no_preservation_read_after_the_fence_failed() -> None:
    """M29: the candidate fence runs right after materialization, before preservation reads."""
    d = Driver()
    d.usable()
    d.frame(_changed("engine-0", "rev-0", 7))  # known version of engine-0 is now 7
    d.auto_reads = False
    d.start()
    d.grant(revision=5)  # names engine-0 at version 3: a preservation read at 7 would follow
    d.feed(BridgeAuthenticated(now_ms=d.now))  # drops the grant's op during its read
    out = d.finish_read()
    assert reads(out) == []
    assert reports(out) == ["grant became stale while it was being read"]


# ---------------------------------------------------------------------------
# Narrowing identities


def test_LR_047_revision_change_is_removed_once_not_refused() -> None:
    """M34: a denied credential under a new revision is removed, not also refused."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.ssm.denied.add(param("engine", "engine-1"))
    out = d.grant(revision=5, m=manifest(engines=[engine(0), engine(1, rev="rev-new")]))
    assert [c.request.removed for c in of(out, RunCleanup)] == [
        (Identity("engine", "engine-1", "rev-1"),)
    ]


def test_LR_047_denied_before_and_after_is_no_refusal() -> None:
    """M35: a credential already access-denied in the committed bundle is not refused again."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.ssm.denied.add(param("engine", "engine-1"))
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    assert d.reg.current_view(TASK, 1, d.now) is not None
    d.start()
    out = d.grant(revision=5, m=manifest(engines=[engine(0), engine(1)]))
    assert of(out, RunCleanup) == []
    assert "close:manifest-narrowed" not in kinds(out)
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.manifest_revision == 5


def _dropped_below_floor(d: Driver) -> None:
    """engine-0 and engine-1 committed at rev 4; a floor at 5 removes engine-0 and drops it."""
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.frame(_stale(5, 5, ("engine-0",)))
    d.finish_cleanup()  # the floor's selective cleanup: engine-0 cleaned, bundle dropped
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision is None


def test_LR_048_remembered_identities_narrow_the_next_grant() -> None:
    """M38: with no committed bundle, remembered identities absent from the grant are removed."""
    d = Driver(auto_cleanups=False)
    _dropped_below_floor(d)
    out = d.grant(revision=5, m=manifest(engines=[engine(2)]))
    # engine-0 was cleaned by the floor; engine-1 is remembered and absent.
    assert [c.request.removed for c in of(out, RunCleanup)] == [
        (Identity("engine", "engine-1", "rev-1"),)
    ]
    assert kinds(out)[-2:] == ["close:manifest-narrowed", "cleanup:selective:lease-replaced"]


def test_LR_048_remembered_denied_identity_is_refused_unless_cleaned() -> None:
    """M37/M38: refused known identities skip the cleaned set."""
    d = Driver(auto_cleanups=False)
    _dropped_below_floor(d)
    d.ssm.denied.update({param("engine", "engine-0"), param("engine", "engine-1")})
    out = d.grant(revision=5, m=manifest(engines=[engine(0), engine(1)]))
    # both are denied with their remembered identity; engine-0 was cleaned already.
    assert [c.request.removed for c in of(out, RunCleanup)] == [
        (Identity("engine", "engine-1", "rev-1"),)
    ]


def test_LR_072_full_cleanup_forgets_remembered_identities() -> None:
    """M64: after a full cleanup nothing is remembered, so the next grant narrows nothing."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_cleanup()  # full cleanup "fence-failed": bundle dropped, request sent
    assert d.reg.status(TASK).phase == "waiting"  # type: ignore[union-attr]
    out = d.grant(revision=5, m=manifest(engines=[engine(2)]))
    assert of(out, RunCleanup) == []
    assert of(out, OpenGate)


# ---------------------------------------------------------------------------
# Failure path, open conditions


def test_LR_051_escalated_grant_arms_no_lease_retry() -> None:
    """M44: a grant that escalated arms no retry timer, even when the full cleanup failed."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0)]))  # narrowing: selective cleanup
    d.finish_cleanup(ok=False)  # -> full cleanup "manifest-narrowed"
    assert kinds(d.log[-12:]).count("cleanup:full:manifest-narrowed") == 1
    d.finish_cleanup(ok=False)  # the full cleanup fails too
    st = d.reg.status(TASK)
    assert st is not None
    assert st.phase == "lost"
    assert "retry" not in st.timers
    assert "cleanup-retry" in st.timers


def _committed_waiting_for_old_reader(d: Driver, **grant_kw: Any) -> ReadParameters:
    """Grant B (rev 5) committed while A's reader still has a change read in flight."""
    d.start()
    d.grant()
    d.finish_read()
    d.frame(_changed("engine-0", "rev-0", 7))
    change_read = d.pending_reads.pop(0)
    d.start()
    d.grant(revision=5, lease_id="lease-B", **grant_kw)
    d.finish_read()  # B commits, then waits for A's reader to drain
    st = d.reg.status(TASK)
    assert st is not None
    assert st.installed_revision == 5
    assert of(d.log[-4:], OpenGate) == []
    return change_read


def test_LR_117_committed_bundle_expired_before_its_open_is_not_opened() -> None:
    """M53: a bundle that expired while waiting for the old readers is never opened.

    No expiry timer fires here (the clock just moved past expiresAt); LR-117:
    opens are refused "also before the expiry timer has fired".
    """
    d = Driver(auto_reads=False)
    change_read = _committed_waiting_for_old_reader(d, expires_at=T0 + 100_000)
    d.now = T0 + 100_000
    out = d.finish_read(change_read)
    assert of(out, OpenGate) == []
    assert d.reg.current_view(TASK, 1, d.now) is None


def test_LR_135_newer_commit_while_waiting_skips_the_stale_open() -> None:
    """M50+M51: B waits for A's readers; a change commits B' meanwhile: B's view is not opened."""
    d = Driver(auto_reads=False)
    change_read = _committed_waiting_for_old_reader(d)
    # the gate is still open (renewal without narrowing): a change applies to B
    d.frame(_changed("engine-0", "rev-0", 9))
    d.finish_read(d.pending_reads[-1])  # B' committed (generation moved)
    assert d.reg.status(TASK).generation == 3  # type: ignore[union-attr]
    out = d.finish_read(change_read)
    assert [o.view.lease_id for o in of(out, OpenGate)] == []


def test_LR_060_lost_after_failed_full_cleanup_blocks_the_waiting_open() -> None:
    """M54: B waits for A's readers; a full cleanup fails meanwhile (phase ``lost``,

    bundle B still committed, no cleanup in flight, not quarantined): B is never opened.
    """
    d = Driver(auto_reads=False)
    change_read = _committed_waiting_for_old_reader(d)
    d.cleanup_fail = lambda c: True
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    st = d.reg.status(TASK)
    assert st is not None
    assert (st.phase, st.full_cleanup, st.quarantined, st.installed_revision) == (
        "lost",
        False,
        False,
        5,
    )
    out = d.finish_read(change_read)
    assert of(out, OpenGate) == []
    assert d.reg.current_view(TASK, 1, d.now) is None


def test_LR_067_release_with_another_hold_taken_opens_nothing() -> None:
    """M60: a refusal commits and releases its hold while a grant's narrowing holds the gate."""
    d = Driver(auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.ssm.denied.add(param("engine", "engine-1"))
    d.frame(_changed("engine-1", "rev-1", 9))  # refusal: close, hold, cleanup queued
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0)]))  # narrowing: second hold
    assert d.reg.status(TASK).holds == 2  # type: ignore[union-attr]
    d.finish_cleanup()  # the refusal's cleanup: its install waits behind the grant's
    out = d.finish_cleanup()  # the grant's cleanup; the refusal installs, commits, releases
    assert of(out, OpenGate) == []
    assert d.reg.current_view(TASK, 1, d.now) is None


# ---------------------------------------------------------------------------
# Changes, installs


def test_LR_093_change_read_completing_during_a_full_cleanup_installs_nothing() -> None:
    """M113: a change's read completing while a full cleanup runs (gate closed) fails its fence."""
    from leasegate.core.registry import RunInstall

    d = Driver(auto_reads=False, auto_cleanups=False)
    d.start()
    d.grant()
    d.finish_read()
    d.frame(_changed("engine-0", "rev-0", 7))
    change_read = d.pending_reads.pop(0)
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))  # bundle still committed
    out = d.finish_read(change_read)
    assert reports(out) == ["credential read crossed an assignment fence"]
    d.auto_cleanups = True
    out += d.finish_cleanup()
    assert of(out, RunInstall) == []


def test_LR_093_change_read_completing_during_a_refusal_installs_nothing() -> None:
    """M113: a change's read completing while another change's refusal holds the gate closed."""
    from leasegate.core.registry import RunInstall

    d = Driver(auto_reads=False, auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.finish_read()
    d.frame(_changed("engine-0", "rev-0", 7))
    first = d.pending_reads.pop(0)
    d.ssm.denied.add(param("engine", "engine-1"))
    d.auto_reads = True
    d.frame(_changed("engine-1", "rev-1", 9))  # refusal: close, hold, cleanup pending
    assert d.reg.status(TASK).holds == 1  # type: ignore[union-attr]
    out = d.finish_read(first)
    assert reports(out) == ["credential read crossed an assignment fence"]
    out += d.finish_cleanup()
    assert [c.request.reason for c in of(out, RunInstall)] == ["credential-change"]  # B's only
    assert [c.request.next.engines[0].observed_version for c in of(out, RunInstall)] == [3]


def test_LR_068_failed_refusal_install_never_reopens_the_old_view() -> None:
    """M120: a refusal whose install fails goes ``lost`` before releasing its hold: no open."""
    d = Driver()
    d.usable()
    d.ssm.denied.add(param("engine", "engine-0"))
    d.install_fail = lambda c: c.request.reason == "credential-change"
    out = d.frame(_changed("engine-0", "rev-0", 9))
    assert "cleanup:full:manifest-narrowed" in kinds(out)
    assert of(out, OpenGate) == []


def test_LR_055_install_behind_a_failed_full_cleanup_never_runs() -> None:
    """M127: a grant's install queued behind a full cleanup that fails is not run."""
    from leasegate.core.registry import RunInstall

    d = Driver(auto_reads=False, auto_cleanups=False)
    d.start()
    d.grant()
    d.finish_read()
    d.start()
    d.grant(revision=5)
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))  # full cleanup queued
    out = d.finish_read()  # the grant's install is queued behind it
    assert of(out, RunInstall) == []
    out = d.finish_cleanup(ok=False)
    assert of(out, RunInstall) == []
    assert of(out, OpenGate) == []


def test_LR_056_is_current_turns_false_on_reconnect_and_full_cleanup() -> None:
    """M131/M132: isCurrent() is false once the op is dropped, and during a full cleanup."""
    for disturb in ("reconnect", "fence"):
        d = Driver(auto_installs=False, auto_cleanups=False)
        d.start()
        d.grant()
        install = d.pending_installs[0]
        assert d.reg.install_is_current(install.cmd_id, d.now)
        if disturb == "reconnect":
            d.feed(BridgeAuthenticated(now_ms=d.now))
        else:
            d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
        assert not d.reg.install_is_current(install.cmd_id, d.now), disturb


def test_LR_020_grant_while_lost_after_failed_full_cleanup_is_refused() -> None:
    """M143: the op survives a failed full cleanup; its grant arriving in ``lost`` is refused."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.start()  # op pending
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_cleanup(ok=False)
    st = d.reg.status(TASK)
    assert st is not None
    assert (st.phase, st.full_cleanup) == ("lost", False)
    assert st.pending_op is not None
    out = d.grant(revision=5)
    assert reports(out) == ["task cleanup is in progress"]
    assert of(out, ReadParameters) == []


# ---------------------------------------------------------------------------
# Readers


def test_LR_155_reader_closed_once_when_shutdown_and_close_both_destroy() -> None:
    """M140: shutdown destroys the bundle, then the close's cleanup destroys it again."""
    from leasegate.core.registry import CloseReader, Shutdown

    d = Driver(auto_cleanups=False)
    d.usable()
    d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))  # cleanup pending
    d.feed(Shutdown(now_ms=d.now, call_id=10))
    d.finish_cleanup()
    closed = [c.reader_id for c in of(d.log, CloseReader)]
    assert len(closed) == 1


def test_LR_155_install_reader_refuses_reads_through_a_sealed_bundle() -> None:
    """M141: a sealed reader refuses new reads, and events do reach that refusal.

    Grant A commits while its predecessor's reader still has a change read in
    flight, so A is still "installing" (LR-056). Grant B then narrows: it
    closes the gate and seals A's readers. A project read through A's install
    (LR-154) goes to A's own sessions and must be refused, not read.
    """
    from leasegate.core.registry import CallDone, ProjectValueRead, RunInstall, StagedRef

    d = Driver(auto_reads=False, auto_cleanups=False)
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.finish_read()
    d.frame(_changed("engine-0", "rev-0", 7))
    change_read = d.pending_reads.pop(0)  # keeps the predecessor's reader busy
    d.start()
    d.grant(revision=5, lease_id="lease-A", m=manifest(engines=[engine(0), engine(1)]))
    d.finish_read()  # A commits and waits for the predecessor's reader
    install_a = of(d.log, RunInstall)[-1].cmd_id
    assert d.reg.install_is_current(install_a, d.now)
    d.feed(BridgeAuthenticated(now_ms=d.now))
    d.grant(revision=6, lease_id="lease-B", m=manifest(engines=[engine(0)]))
    d.finish_read()  # B narrows: close, seal A, hold, cleanup pending
    assert d.reg.status(TASK).holds == 1  # type: ignore[union-attr]
    out = d.feed(
        ProjectValueRead(
            now_ms=d.now,
            call_id=77,
            task_id=TASK,
            run_epoch=1,
            project_id="proj-0",
            key="API_KEY",
            ref=StagedRef(staging_id="0123abcd-0123-4abc-8def-0123456789ab"),
            install_cmd_id=install_a,
        )
    )
    assert of(out, ReadParameters) == []
    assert [(c.call_id, c.error) for c in of(out, CallDone)] == [
        (77, "credential reader is sealed")
    ]
    assert change_read.cmd_id not in [c.cmd_id for c in of(out, ReadParameters)]


def test_LR_154_install_reader_refuses_a_read_naming_another_assignment() -> None:
    """An install's project reader never reads for another task or epoch.

    The reference binds ``projectValues`` to its grant; the port names the
    install by ``install_cmd_id``, so a ``ProjectValueRead`` naming another
    assignment than that install's run must be refused before any read
    (found by the breaker review: it read through task-1's grant for
    "other-task").
    """
    from leasegate.core.registry import CallDone, ProjectValueRead, StagedRef

    d = Driver(auto_installs=False)
    d.start()
    d.grant()
    install = d.pending_installs[0].cmd_id
    assert d.reg.install_is_current(install, d.now)
    for task, epoch in (("other-task", 1), (TASK, 2), ("other-task", 9)):
        out = d.feed(
            ProjectValueRead(
                now_ms=d.now,
                call_id=77,
                task_id=task,
                run_epoch=epoch,
                project_id="proj-0",
                key="API_KEY",
                ref=StagedRef(staging_id="0123abcd-0123-4abc-8def-0123456789ab"),
                install_cmd_id=install,
            )
        )
        assert of(out, ReadParameters) == []
        assert [c.error for c in of(out, CallDone)] == ["task credentials are not usable"]


def _project_read(d: Driver, ref: Any, install: int | None = None) -> list[Any]:
    from leasegate.core.registry import ProjectValueRead

    return d.feed(
        ProjectValueRead(
            now_ms=d.now,
            call_id=88,
            task_id=TASK,
            run_epoch=1,
            project_id="proj-0",
            key="API_KEY",
            ref=ref,
            install_cmd_id=install,
        )
    )


def _answer_legacy(d: Driver, *, name: str, version: int) -> list[Any]:
    from test_project_reads import legacy_env

    from leasegate.core import Secret
    from leasegate.core.registry import ReadCompleted, SsmParameter

    cmd = d.pending_reads.pop(0)
    param_ = SsmParameter(
        name=name, type="SecureString", value=Secret(legacy_env()), version=version
    )
    return d.feed(ReadCompleted(now_ms=d.now, cmd_id=cmd.cmd_id, parameters=(param_,)))


def test_LR_149_legacy_read_refuses_another_version_or_name() -> None:
    """M179/M180: the legacy parameter returned must be the one asked for, at its version."""
    from test_project_reads import LEGACY

    from leasegate.core.registry import CallDone, LegacyRef, ProjectValueDone

    for name, version in ((LEGACY, 5), (LEGACY + "X", 4), ("/uai/projects/proj-1/env/API_KEY", 4)):
        d = Driver()
        d.usable()
        d.auto_reads = False
        _project_read(d, LegacyRef(ssm_version=4))
        out = _answer_legacy(d, name=name, version=version)
        assert of(out, ProjectValueDone) == [], (name, version)
        assert [c.error for c in of(out, CallDone)] == [
            "Parameter Store returned the wrong project parameter"
        ]
    d = Driver()  # the exact answer is accepted (the checks are not too strict)
    d.usable()
    d.auto_reads = False
    _project_read(d, LegacyRef(ssm_version=4))
    out = _answer_legacy(d, name=LEGACY, version=4)
    assert [c.result.version for c in of(out, ProjectValueDone)] == [4]


def test_LR_154_install_reader_still_reads_after_a_credential_change() -> None:
    """X11: a grant's reader reads through the committed bundle after a change committed."""
    from leasegate.core.registry import RunInstall, StagedRef

    d = Driver()
    d.usable()
    install = of(d.log, RunInstall)[-1].cmd_id
    d.frame(_changed("engine-0", "rev-0", 7))  # a second install; install records pruned
    assert [c.request.reason for c in of(d.log, RunInstall)][-1] == "credential-change"
    d.auto_reads = False
    out = _project_read(d, StagedRef(staging_id="0123abcd-0123-4abc-8def-0123456789ab"), install)
    assert len(of(out, ReadParameters)) == 1


def test_LR_102_refresh_refused_while_not_usable_and_for_null_revision() -> None:
    """M172/M169: a closed gate refuses refreshes; a credential with a null revision too."""
    from leasegate.core.registry import CallDone, RefreshRequested

    d = Driver(auto_cleanups=False)
    d.start()
    e = engine(0)
    e["revision"] = None
    d.grant(m=manifest(engines=[e, engine(1)]))
    assert d.reg.current_view(TASK, 1, d.now) is not None

    def refresh(cid: str, rev: str | None) -> list[Any]:
        return d.feed(
            RefreshRequested(
                now_ms=d.now, call_id=90, task_id=TASK, run_epoch=1, credential_id=cid, revision=rev
            )
        )

    out = refresh("engine-0", None)
    assert sends(out) == []
    assert [c.error for c in of(out, CallDone)] == ["credential is not in the active manifest"]
    d.frame(_stale(5, 5))  # narrowing: gate closed, bundle kept
    out = refresh("engine-1", "rev-1")
    assert sends(out) == []
    assert [c.error for c in of(out, CallDone)] == ["task credentials are not usable"]


def test_LR_044_fence_checked_after_each_preservation_read() -> None:
    """M165: the op dropped during the first preservation read: no second one is made."""
    d = Driver()
    d.start()
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    d.frame(_changed("engine-0", "rev-0", 7))
    d.frame(_changed("engine-1", "rev-1", 8))
    d.auto_reads = False
    d.start()
    d.grant(revision=5, m=manifest(engines=[engine(0), engine(1)]))  # names versions 3
    out = d.finish_read()  # the grant's chunk; the first preservation read follows
    assert reads(out) == [(f"{param('engine', 'engine-0')}:7",)]
    d.feed(BridgeAuthenticated(now_ms=d.now))
    out = d.finish_read()
    assert reads(out) == []
    assert reports(out) == ["grant became stale while it was being read"]


# ---------------------------------------------------------------------------
# Floors, ending


def test_LR_079_raised_floor_without_higher_wanted_is_not_ignored() -> None:
    """M101: wantedRevision not higher but minRevision above the handled floor: handled."""
    d = Driver(auto_cleanups=False)
    d.usable()  # revision 4, wanted 4
    out = d.frame(_stale(4, 5))
    assert closes_of(out) == ["minimum-revision"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.min_revision == 5
    assert st.phase == "narrowing"


def test_LR_082_a_frame_never_lowers_the_floor_or_the_wanted_revision() -> None:
    """X28/X29: a frame that is not ignored raises both revisions with max(), never lowers."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(_stale(8, None))  # wanted 8
    d.frame(_stale(6, 6))  # floor 6 (not ignored: above the handled floor)
    st = d.reg.status(TASK)
    assert st is not None
    assert (st.wanted_revision, st.min_revision) == (8, 6)
    d.frame(_stale(9, 5))  # wanted higher, floor lower: floor stays 6
    st = d.reg.status(TASK)
    assert st is not None
    assert (st.wanted_revision, st.min_revision) == (9, 6)


def test_LR_099_denied_again_is_no_refusal() -> None:
    """X31: a credential denied before and denied again at a newer version: no gate call."""
    from leasegate.core.registry import RunInstall

    d = Driver()
    d.start()
    d.ssm.denied.add(param("engine", "engine-1"))
    d.grant(m=manifest(engines=[engine(0), engine(1)]))
    assert d.reg.current_view(TASK, 1, d.now) is not None
    out = d.frame(_changed("engine-1", "rev-1", 9))
    assert closes_of(out) == []
    assert of(out, RunCleanup) == []
    assert [c.request.reason for c in of(out, RunInstall)] == ["credential-change"]
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[1].availability == "access-denied"


def test_LR_140_files_access_is_withdrawn_when_not_usable() -> None:
    """X41: the Files session's credentials are not handed out once the gate closed."""
    d = Driver(runner_kind="task-machine", auto_cleanups=False)
    d.start()
    d.grant(files=True)
    access = d.reg.files_access(TASK, 1, d.now)
    assert access is not None
    assert "CANARY" not in repr(access)
    d.frame(_stale(5, 5))  # narrowing: gate closed, bundle kept
    assert d.reg.files_access(TASK, 1, d.now) is None


def closes_of(out: list[Any]) -> list[str]:
    return [c.reason for c in out if type(c).__name__ == "CloseGate"]


def test_LR_074_full_cleanup_clears_the_floor_and_its_grace_timer() -> None:
    """M74: a successful full cleanup cancels the grace timer; it never fires afterwards."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(_stale(5, 5))  # narrowing below the floor: grace timer armed
    assert "floor" in d.reg.status(TASK).timers  # type: ignore[union-attr]
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))
    d.finish_cleanup()  # the fence's full cleanup succeeds
    st = d.reg.status(TASK)
    assert st is not None
    assert st.floor_deadline_ms is None
    assert "floor" not in st.timers
    out = d.advance(60_000)
    assert "cleanup:full:minimum-revision" not in kinds(out)


def test_LR_121_ending_cancels_grace_and_cleanup_retry_timers() -> None:
    """M77/M78: ending a run cancels its floor grace timer and its cleanup-retry timer."""
    from leasegate.core.registry import CancelTimer, StartTimer

    d = Driver(auto_cleanups=False)
    d.usable()
    out = d.frame(_stale(5, 5, ("engine-0",)))  # grace timer, selective cleanup
    grace = [c.timer_id for c in of(out, StartTimer) if c.delay_ms == 60_000]
    out = d.finish_cleanup(ok=False)  # selective retry armed
    retry = [c.timer_id for c in of(out, StartTimer) if c.delay_ms == 30_000]
    assert len(grace) == 1
    assert len(retry) == 1
    assert set(d.reg.status(TASK).timers) >= {"floor", "cleanup-retry"}  # type: ignore[union-attr]
    out = d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))
    cancelled = {c.timer_id for c in of(out, CancelTimer)}
    assert cancelled >= {grace[0], retry[0]}
    assert d.reg.status(TASK).timers == ()  # type: ignore[union-attr]


def test_LR_121_phase_is_ended_before_the_close_callback_runs() -> None:
    """M80: a reconnect made from inside the "stopped" close sends no request for the run."""
    d = Driver(auto_cleanups=False)
    d.usable()

    def inner(cmd: Any) -> None:
        assert cmd.reason == "stopped"
        d.feed(BridgeAuthenticated(now_ms=d.now))

    d.on_gate = inner
    out = d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=1))
    assert sends(out) == []
    assert d.reg.status(TASK).pending_op is None  # type: ignore[union-attr]


def test_LR_124_close_of_successor_waits_for_predecessor_cleanup() -> None:
    """M84: closing a run during its predecessor cleanup queues its own cleanup only after."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.feed(_start_event(d, 2))
    assert [c.request.assignment.run_epoch for c in d.pending_cleanups] == [1]
    out = d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=2))
    assert of(out, RunCleanup) == []
    out = d.finish_cleanup()  # the predecessor's "superseded" cleanup
    assert [(c.request.assignment.run_epoch, c.request.reason) for c in of(out, RunCleanup)] == [
        (2, "stopped")
    ]


def _start_event(d: Driver, epoch: int) -> Any:
    from leasegate.core.registry import StartRun

    return StartRun(now_ms=d.now, call_id=40 + epoch, task_id=TASK, run_epoch=epoch, recovery=False)


def test_LR_075_no_selective_retry_while_a_full_cleanup_is_in_flight() -> None:
    """M98: a floor cleanup failing while a full cleanup is in flight arms no selective retry."""
    d = Driver(auto_cleanups=False)
    d.usable()
    d.frame(_stale(5, 5, ("engine-0",)))  # selective cleanup pending
    d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=1))  # full cleanup queued
    out = d.finish_cleanup(ok=False)  # the selective cleanup fails
    assert reports(out) == ["credential lease operation failed"]
    st = d.reg.status(TASK)
    assert st is not None
    assert st.full_cleanup
    assert "cleanup-retry" not in st.timers


# ---------------------------------------------------------------------------
# Adversarial input


_GARBAGE: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    10**400,
    1.5,
    float("nan"),
    "",
    "CANARY-garbage",
    "x" * 100_000,
    [],
    {},
    [[[[["deep"]]]]],
    {"a": {"b": {"c": [1, {"d": None}]}}},
]


def _deep(n: int) -> Any:
    out: Any = "CANARY-deep"
    for _ in range(n):
        out = [out]
    return out


def _frames(op: str) -> list[dict[str, Any]]:
    """One valid frame of every kind the registry handles, aimed at the run."""
    return [
        grant(op, revision=5),
        {"kind": "lease.unavailable", "opId": op},
        {"kind": "lease.deny", "opId": op, "error": "CANARY-deny"},
        _stale(9, 9, ("engine-0",)),
        _changed("engine-0", "rev-0", 9),
        {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": "fresh",
            "version": 9,
            "expiresAt": None,
        },
    ]


def _variants(frame: dict[str, Any]) -> list[Any]:
    """Every key dropped, every value swapped for garbage, an extra key, nested too."""
    out: list[Any] = [[frame], (frame,), {"frame": frame}]
    for key in frame:
        out.append({k: v for k, v in frame.items() if k != key})
        out.extend({**frame, key: g} for g in _GARBAGE)
    out.append({**frame, "extra": 1})
    lease = frame.get("lease")
    if isinstance(lease, dict):
        for key in lease:
            out.append({**frame, "lease": {k: v for k, v in lease.items() if k != key}})
            out.extend({**frame, "lease": {**lease, key: g}} for g in _GARBAGE)
        m = lease["manifest"]
        for key in m:
            out.extend(
                {**frame, "lease": {**lease, "manifest": {**m, key: g}}} for g in _GARBAGE[:12]
            )
        sess = lease["sessions"][0]
        for key in sess:
            out.extend(
                {**frame, "lease": {**lease, "sessions": [{**sess, key: g}]}} for g in _GARBAGE[:12]
            )
    return out


def test_LR_018_malformed_frames_of_every_kind_change_nothing() -> None:
    """Type swaps, huge ints, NaN, nested garbage, missing and extra keys, deep nesting.

    A frame the wire codec refuses must cause no command and no state change;
    none may make ``handle`` raise (``internal_errors`` stays 0) or leak a
    canary. Runs against a usable run with a pending op, so a frame that did
    decode could match.
    """
    from leasegate.core import DecodeError
    from leasegate.core.wire import decode_frame

    d = Driver()
    d.usable()
    d.start()  # a pending op the frames name
    op = d.op_id()
    before = d.reg.status(TASK)
    view = d.reg.current_view(TASK, 1, d.now)
    refused = 0
    for frame in _frames(op):
        for bad in [*_variants(frame), _deep(5_000), {"kind": _deep(5_000)}]:
            if not isinstance(decode_frame(bad), DecodeError):
                continue  # a value swap the codec accepts is a different valid frame
            refused += 1
            assert d.frame(bad) == [], bad
    assert refused > 300
    assert d.reg.status(TASK) == before
    assert d.reg.current_view(TASK, 1, d.now) is view
    assert d.reg.internal_errors == 0
    assert "CANARY" not in "\n".join(repr(c) for c in d.log)


def test_LR_018_duplicate_and_stray_completions_change_nothing() -> None:
    """Completions answered twice, for unknown ids, for cancelled timers: ignored."""
    from leasegate.core.registry import (
        CleanupFailed,
        CleanupFinished,
        GateCallbackDone,
        GateCallbackFailed,
        GrantHookFailed,
        InstallFailed,
        InstallFinished,
        ReadCompleted,
        ReadFailed,
        SendFailed,
        StartTimer,
        TimerFired,
    )

    d = Driver()
    d.usable()
    used = [getattr(c, "cmd_id", None) for c in d.log] + [
        getattr(c, "timer_id", None) for c in d.log
    ]
    live = set(d.timers)  # armed renewal and expiry timers are not stray
    ids = sorted(({i for i in used if isinstance(i, int)} - live) | {0, -1, 10**12})
    d.start()  # a pending op, its timeout timer armed
    before = d.reg.status(TASK)
    timers = {c.timer_id for c in of(d.log, StartTimer)} - set(d.timers)
    assert timers  # some timers were cancelled or fired already
    for i in ids:
        for ev in (
            GateCallbackDone(now_ms=d.now, cmd_id=i),
            GateCallbackFailed(now_ms=d.now, cmd_id=i),
            ReadCompleted(now_ms=d.now, cmd_id=i, parameters=()),
            ReadFailed(now_ms=d.now, cmd_id=i, access_denied=True),
            CleanupFinished(now_ms=d.now, cmd_id=i),
            CleanupFailed(now_ms=d.now, cmd_id=i),
            InstallFinished(now_ms=d.now, cmd_id=i),
            InstallFailed(now_ms=d.now, cmd_id=i),
            GrantHookFailed(now_ms=d.now, cmd_id=i),
            TimerFired(now_ms=d.now, timer_id=i),
        ):
            assert d.feed(ev) == [], ev
    # a SendFailed for a frame sent earlier (its op was already answered)
    old_sends = [c.cmd_id for c in d.log if type(c).__name__ == "SendFrame"][:-1]
    for i in old_sends:
        assert d.feed(SendFailed(now_ms=d.now, cmd_id=i)) == []
    assert d.reg.status(TASK) == before
    assert d.reg.current_view(TASK, 1, d.now) is not None


def test_LR_018_answers_for_another_run_are_ignored() -> None:
    """A grant naming run B with run A's op id, and A's frames for epoch 2: ignored."""
    d = Driver()
    d.usable()
    d.start(task="task-2")
    d.start()
    op_a = [f.op_id for f in sends(d.log)][-1]
    op_b = [f.op_id for f in sends(d.log) if f.task_id == "task-2"][-1]
    before = (d.reg.status(TASK), d.reg.status("task-2"))
    for bad in (
        grant(op_a, task="task-2"),
        grant(op_b),
        grant(op_a, epoch=2),
        {**_stale(9, 9), "runEpoch": 2},
        {**_changed("engine-0", "rev-0", 9), "taskId": "task-2"},
    ):
        assert d.frame(bad) == [], bad
    assert (d.reg.status(TASK), d.reg.status("task-2")) == before


def test_LR_128_host_calls_at_odd_moments() -> None:
    """Shutdown during an install, start after shutdown, stop during a read, double shutdown."""
    from leasegate.core.registry import Shutdown, StartRun

    d = Driver(auto_installs=False, auto_reads=False)
    d.start()
    d.grant()
    d.finish_read()
    assert len(d.pending_installs) == 1
    out = d.feed(Shutdown(now_ms=d.now, call_id=50))
    assert d.reg.status(TASK) is None
    out += d.feed(Shutdown(now_ms=d.now, call_id=51))
    out += d.finish_install()
    assert of(out, OpenGate) == []
    assert "grant became stale while it was being read" in reports(out)
    assert [c.error for c in out if type(c).__name__ == "CallDone"] == [None, None]
    # start after shutdown: a fresh run
    d.feed(StartRun(now_ms=d.now, call_id=52, task_id=TASK, run_epoch=1, recovery=False))
    assert d.reg.status(TASK).phase == "waiting"  # type: ignore[union-attr]
    d.grant()
    d.feed(CloseRun(now_ms=d.now, call_id=53, task_id=TASK, run_epoch=1))  # stop during read
    out = d.finish_read()
    assert of(out, OpenGate) == []
    assert d.reg.status(TASK) is None
    assert d.reg.internal_errors == 0


def _reentrant_walk(seed: int, steps: int = 150) -> int:
    """One re-entrant random walk (see the test below); returns how many opens it saw."""
    import random

    from leasegate.core.registry import CloseGate, SendFrame, Shutdown, StartRun
    from leasegate.core.wire.lease import LeaseRequest

    rng = random.Random(seed)
    manual = rng.random() < 0.5  # complete reads, cleanups and installs out of order
    d = Driver(
        seed=str(seed),
        runner_kind="owned",
        install_external=rng.random() < 0.8,
        auto_reads=not manual,
        auto_cleanups=not manual,
        auto_installs=not manual,
    )
    d.gate_fail = lambda c: rng.random() < 0.08
    d.cleanup_fail = lambda c: rng.random() < 0.1
    d.install_fail = lambda c: rng.random() < 0.05
    state = {"epoch": 1, "rev": 4, "opens": 0}
    ended: set[int] = set()
    reg = d.reg
    handle = reg.handle

    def checked(ev: Any) -> Any:
        before = reg.status(TASK)
        out = handle(ev)
        st = reg.status(TASK)
        for c in out:
            assert "CANARY" not in repr(c)
            if isinstance(c, CloseGate) and c.reason in ("starting", "recovery"):
                # a fresh registration of this epoch: after its run was closed
                # and removed, or a start still in flight at a shutdown (LR-128)
                ended.discard(c.assignment.run_epoch)
            if isinstance(c, OpenGate):
                state["opens"] += 1
                assert c.assignment.run_epoch not in ended, "opened an ended run"
                assert c.view.expires_at > ev.now_ms, "opened an expired view"
                assert st is not None
                assert c.view.manifest_revision >= st.min_revision, "opened below floor"
            if isinstance(c, SendFrame) and isinstance(c.frame, LeaseRequest):
                assert c.frame.run_epoch not in ended, "requested for an ended run"
        registered = before is not None and before.assignment.run_epoch == getattr(
            ev, "run_epoch", None
        )
        if isinstance(ev, CloseRun) and registered:  # else ignored (LR-119)
            ended.add(ev.run_epoch)
        elif isinstance(ev, StartRun) and isinstance(ev.run_epoch, int):
            ended.update(range(1, ev.run_epoch))
        elif isinstance(ev, Shutdown) and before is not None:
            ended.update(range(1, before.assignment.run_epoch + 1))
        if st is not None and st.gate_open:
            assert st.phase == "usable"
            assert not st.quarantined
            assert st.installed_revision is not None
        return out

    reg.handle = checked  # type: ignore[method-assign]

    def complete_one() -> None:
        pools: list[list[Any]] = [
            p for p in (d.pending_reads, d.pending_cleanups, d.pending_installs) if p
        ]
        if not pools:
            return
        pool = rng.choice(pools)
        cmd = pool.pop(rng.randrange(len(pool)))
        if isinstance(cmd, ReadParameters):
            d.finish_read(cmd)
        else:
            pool.insert(0, cmd)
            if pool is d.pending_cleanups:
                d.finish_cleanup(ok=rng.random() < 0.9)
            else:
                d.finish_install(ok=rng.random() < 0.95)

    def act() -> None:
        k = rng.randrange(12)
        e = state["epoch"]
        if k == 0:
            d.feed(CloseRun(now_ms=d.now, call_id=9, task_id=TASK, run_epoch=e))
        elif k == 1:
            state["epoch"] = e + 1
            d.start(epoch=e + 1, recovery=rng.random() < 0.3)
        elif k == 2:
            d.feed(BridgeAuthenticated(now_ms=d.now))
        elif k == 3:
            state["rev"] += 1
            d.frame(_stale(state["rev"], state["rev"], ("engine-1",)) | {"runEpoch": e})
        elif k == 4:
            d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=e))
        elif k == 5:
            d.frame(_changed("engine-0", "rev-0", rng.randrange(3, 12)) | {"runEpoch": e})
        elif k in (6, 7):
            try:
                op = d.op_id()
            except AssertionError:
                return
            d.frame(
                grant(
                    op,
                    epoch=e,
                    revision=state["rev"] + rng.randrange(2),
                    m=manifest(engines=[engine(i) for i in range(rng.randrange(1, 3))]),
                )
            )
        elif k == 8:
            d.advance(rng.choice([1_000, 30_000, 60_000, 3_600_000]))
        elif k in (9, 10):
            complete_one()
        elif rng.random() < 0.1:
            d.feed(Shutdown(now_ms=d.now, call_id=8))
        else:
            d.start(epoch=e)

    def arm() -> None:
        def hook(cmd: Any) -> None:
            arm()
            if rng.random() < 0.4:
                act()

        d.on_gate = hook

    d.start()
    for _ in range(steps):
        arm()
        act()
    assert reg.internal_errors == 0
    return state["opens"]


def test_LR_064_reentrant_random_walk_never_opens_or_requests_for_ended_runs() -> None:
    """Random host calls and frames fed from *inside* gate callbacks (re-entrancy).

    Half the walks complete reads, cleanups and installs out of order, some
    without ``install_external``. Checked on every ``handle`` call: nothing
    raises; no ``OpenGate`` and no lease.request for an epoch stopped,
    superseded or shut down by an earlier event; every opened view is
    unexpired at the event's time and at or above the run's floor; an open
    gate means phase ``usable``, not quarantined, a bundle committed; no
    canary in any command. Found the re-entrant supersession bug of
    ``test_LR_005_…``.
    """
    opens = sum(_reentrant_walk(seed) for seed in range(30))
    assert opens > 50  # the walks do reach open gates
