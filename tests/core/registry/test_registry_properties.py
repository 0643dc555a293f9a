"""Whole-machine properties: determinism, canaries, malformed input, no raise."""

from __future__ import annotations

import contextlib
import random
from typing import Any

from registry_kit import TASK, Driver, engine, grant, manifest, mcp, static

from leasegate.core import Secret
from leasegate.core.registry import (
    BridgeAuthenticated,
    CleanupFailed,
    CleanupFinished,
    CloseRun,
    FrameReceived,
    GateCallbackDone,
    GateCallbackFailed,
    InstallFailed,
    InstallFinished,
    LaunchFenceFailed,
    LeaseRegistry,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    RefreshRequested,
    RunCleanup,
    Shutdown,
    SsmParameter,
    StartRun,
    TimerFired,
    WaitUsable,
)


def _scenario(seed: str) -> list[str]:
    d = Driver(seed=seed, runner_kind="task-machine")
    d.start(recovery=True)
    d.grant(
        files=True,
        m=manifest(engines=[engine(i) for i in range(12)], mcps=[mcp(0)], github=static("github")),
    )
    d.frame(
        {
            "kind": "credential.changed",
            "taskId": TASK,
            "runEpoch": 1,
            "credentialId": "engine-3",
            "revision": "rev-3",
            "version": 8,
        }
    )
    d.frame(
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 1,
            "wantedRevision": 6,
            "minRevision": 5,
            "removed": ["engine-1"],
        }
    )
    d.grant(files=True, revision=6, m=manifest(engines=[engine(i) for i in range(2, 12)]))
    d.advance(3 * 3_600_000)
    d.feed(CloseRun(now_ms=d.now, call_id=99, task_id=TASK, run_epoch=1))
    return [repr(c) for c in d.log]


def test_determinism_same_events_same_commands_byte_for_byte() -> None:
    a = _scenario("seed-a")
    b = _scenario("seed-a")
    assert len(a) > 50
    assert "\n".join(a).encode() == "\n".join(b).encode()
    assert a != _scenario("seed-b")  # op ids differ with the seed


def test_canaries_never_reach_reports_status_or_repr() -> None:
    d = Driver(runner_kind="task-machine")
    d.start()
    d.ssm.values[(engine(1)["parameter"], 3)] = '{"v":1,"secret":"CANARY-bad"}'
    d.grant(files=True, m=manifest(engines=[engine(0), engine(1)]))
    d.advance(30_000)
    d.grant(files=True)
    d.feed(
        RefreshRequested(
            now_ms=d.now,
            call_id=3,
            task_id=TASK,
            run_epoch=1,
            credential_id="engine-0",
            revision="rev-0",
        )
    )
    text = "\n".join(repr(c) for c in d.log)
    assert "CANARY" not in text
    assert "CANARY" not in repr(d.reg.status(TASK))
    assert "CANARY" not in repr(d.reg.current_view(TASK, 1, d.now))
    assert "CANARY" not in repr(d.reg.files_access(TASK, 1, d.now))
    view = d.reg.current_view(TASK, 1, d.now)
    assert view is not None
    assert view.engines[0].material is not None
    assert "CANARY" in view.engines[0].material.env["API_KEY"].reveal()  # type: ignore[union-attr]


def test_malformed_or_unexpected_frames_change_nothing() -> None:
    d = Driver()
    d.usable()
    d.start()
    before = d.reg.status(TASK)
    op = d.op_id()
    junk: list[Any] = [
        None,
        [],
        "lease.grant.v1",
        {"kind": "lease.grant.v1", "opId": op, "lease": {}},
        grant("wrong-op"),
        grant(op, epoch=7),
        grant(op, task="other"),
        {"kind": "lease.unavailable", "opId": "nope"},
        {"kind": "lease.deny", "opId": "nope", "error": "x"},
        {
            "kind": "lease.stale",
            "taskId": TASK,
            "runEpoch": 2,
            "wantedRevision": 9,
            "minRevision": 9,
            "removed": [],
        },
        {
            "kind": "credential.changed",
            "taskId": "other",
            "runEpoch": 1,
            "credentialId": "a",
            "revision": "b",
            "version": 9,
        },
        {
            "kind": "credential.refresh.result",
            "opId": "nope",
            "outcome": "fresh",
            "version": 2,
            "expiresAt": None,
        },
        {"kind": "lease.request", "opId": op, "taskId": TASK, "runEpoch": 1},
    ]
    for j in junk:
        assert d.frame(j) == []
    # stray completions and callback outcomes
    for ev in [
        TimerFired(now_ms=d.now, timer_id=10_000),
        GateCallbackDone(now_ms=d.now, cmd_id=10_001),
        GateCallbackFailed(now_ms=d.now, cmd_id=10_002),
        ReadCompleted(now_ms=d.now, cmd_id=10_003, parameters=()),
        ReadFailed(now_ms=d.now, cmd_id=10_004, access_denied=True),
        CleanupFinished(now_ms=d.now, cmd_id=10_005),
        CleanupFailed(now_ms=d.now, cmd_id=10_006),
        InstallFinished(now_ms=d.now, cmd_id=10_007),
    ]:
        assert d.feed(ev) == []
    assert d.reg.status(TASK) == before
    # answered twice: the second grant for the same op is ignored
    d.grant()
    assert d.frame(grant(op)) == []


def test_no_input_makes_the_core_raise() -> None:
    rng = random.Random(1234)
    for round_ in range(30):
        reg = LeaseRegistry(
            runner_kind=rng.choice(["owned", "task-machine"]), op_id_seed=str(round_)
        )
        now = 1_800_000_000_000
        ids: list[int] = []
        for _ in range(300):
            now += rng.choice([0, 1, 1000, 30_000])
            k = rng.randrange(14)
            ev: Any
            cid = rng.choice(ids) if ids and rng.random() < 0.8 else rng.randrange(500)
            if k == 0:
                ev = StartRun(
                    now_ms=now,
                    call_id=1,
                    task_id=rng.choice([TASK, "", 5, "t2"]),
                    run_epoch=rng.choice([1, 2, 0, None]),
                    recovery=rng.random() < 0.3,
                )
            elif k == 1:
                ev = FrameReceived(now_ms=now, frame=grant(f"lease-{rng.randrange(4)}-x"))
            elif k == 2:
                ev = GateCallbackDone(now_ms=now, cmd_id=cid)
            elif k == 3:
                ev = GateCallbackFailed(now_ms=now, cmd_id=cid)
            elif k == 4:
                ev = TimerFired(now_ms=now, timer_id=cid)
            elif k == 5:
                ev = ReadCompleted(
                    now_ms=now,
                    cmd_id=cid,
                    parameters=(
                        SsmParameter(
                            name="/x", type="SecureString", value=Secret("CANARY"), version=1
                        ),
                    ),
                )
            elif k == 6:
                ev = ReadFailed(now_ms=now, cmd_id=cid, access_denied=rng.random() < 0.5)
            elif k == 7:
                ev = (
                    CleanupFinished(now_ms=now, cmd_id=cid)
                    if rng.random() < 0.7
                    else CleanupFailed(now_ms=now, cmd_id=cid)
                )
            elif k == 8:
                ev = InstallFinished(now_ms=now, cmd_id=cid)
            elif k == 9:
                ev = CloseRun(now_ms=now, call_id=2, task_id=TASK, run_epoch=rng.choice([1, 2]))
            elif k == 10:
                ev = BridgeAuthenticated(now_ms=now)
            elif k == 11:
                ev = LaunchFenceFailed(now_ms=now, task_id=TASK, run_epoch=1)
            elif k == 12:
                ev = WaitUsable(now_ms=now, call_id=3, task_id=TASK, run_epoch=1)
            else:
                ev = (
                    Shutdown(now_ms=now, call_id=4)
                    if rng.random() < 0.1
                    else FrameReceived(
                        now_ms=now,
                        frame={
                            "kind": "lease.stale",
                            "taskId": TASK,
                            "runEpoch": 1,
                            "wantedRevision": rng.randrange(9),
                            "minRevision": rng.choice([None, rng.randrange(9)]),
                            "removed": ["engine-0"],
                        },
                    )
                )
            out = reg.handle(ev)
            for c in out:
                for name in ("cmd_id", "timer_id"):
                    v = getattr(c, name, None)
                    if isinstance(v, int):
                        ids.append(v)
                assert "CANARY" not in repr(c)
            ids = ids[-50:]
        assert reg.internal_errors == 0


def test_determinism_across_processes_and_hash_seeds() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parents[1] / 'support')!r}]\n"
        "from test_registry_properties import _scenario\n"
        "sys.stdout.write('\\n'.join(_scenario('seed-a')))\n"
    )
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert outs[0].decode() == "\n".join(_scenario("seed-a"))


def _walk(seed: int) -> Driver:
    rng = random.Random(seed)
    d = Driver(runner_kind=rng.choice(["owned", "task-machine"]), seed=str(seed))
    files = d.reg._runner_kind == "task-machine"
    d.gate_fail = lambda c: rng.random() < 0.05
    d.cleanup_fail = lambda c: rng.random() < 0.1
    d.install_fail = lambda c: rng.random() < 0.05
    epoch = 1
    revision = 4
    ended: set[int] = set()
    for _ in range(120):
        k = rng.randrange(12)
        if k == 0:
            epoch += rng.random() < 0.2
            d.start(epoch=epoch, recovery=rng.random() < 0.3)
        elif k in (1, 2):
            revision += rng.random() < 0.5
            engines = [engine(i) for i in range(rng.randrange(1, 4))]
            if rng.random() < 0.2:
                d.ssm.denied.add(engines[-1]["parameter"])
            else:
                d.ssm.denied.clear()
            try:
                op = d.op_id()
            except AssertionError:
                continue
            d.frame(
                grant(op, m=manifest(engines=engines), revision=revision, files=files, epoch=epoch)
            )
        elif k == 3:
            d.frame(_stale_frame(epoch, revision + 1, rng.choice([None, revision, revision + 1])))
        elif k == 4:
            d.frame(_changed_frame(epoch, rng.randrange(3, 9)))
        elif k == 5:
            with contextlib.suppress(AssertionError):
                d.frame(
                    {
                        "kind": rng.choice(["lease.deny", "lease.unavailable"]),
                        "opId": d.op_id(),
                        "error": "no",
                    }
                    if rng.random() < 0.5
                    else {"kind": "lease.unavailable", "opId": d.op_id()}
                )
        elif k == 6:
            d.feed(BridgeAuthenticated(now_ms=d.now))
        elif k == 7:
            d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=epoch))
        elif k == 8:
            d.feed(CloseRun(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=epoch))
        elif k == 9:
            d.advance(rng.choice([1_000, 20_000, 30_000, 60_000, 600_000]))
        elif k == 10:
            d.feed(
                RefreshRequested(
                    now_ms=d.now,
                    call_id=6,
                    task_id=TASK,
                    run_epoch=epoch,
                    credential_id="engine-0",
                    revision="rev-0",
                )
            )
        else:
            d.feed(WaitUsable(now_ms=d.now, call_id=7, task_id=TASK, run_epoch=epoch))
        st = d.reg.status(TASK)
        if st is None:
            ended.clear()  # the ended run was removed: the epoch may start afresh
            continue
        if st.gate_open:
            assert st.phase == "usable"
            assert not st.quarantined
            assert st.installed_revision is not None
        if st.phase == "ended":
            ended.add(st.assignment.run_epoch)
        else:
            assert st.assignment.run_epoch not in ended, "an ended run was revived"
    return d


def test_random_walks_keep_invariants_and_never_leak() -> None:
    for seed in range(25):
        d = _walk(seed)
        assert "CANARY" not in "\n".join(repr(c) for c in d.log)


def _stale_frame(epoch: int, wanted: int, minimum: int | None) -> dict[str, Any]:
    return {
        "kind": "lease.stale",
        "taskId": TASK,
        "runEpoch": epoch,
        "wantedRevision": wanted,
        "minRevision": minimum,
        "removed": ["engine-1"],
    }


def _changed_frame(epoch: int, version: int) -> dict[str, Any]:
    return {
        "kind": "credential.changed",
        "taskId": TASK,
        "runEpoch": epoch,
        "credentialId": "engine-0",
        "revision": "rev-0",
        "version": version,
    }


def _complete_one(d: Driver, rng: random.Random) -> None:
    pools = [p for p in (d.pending_reads, d.pending_cleanups, d.pending_installs) if p]
    if not pools:
        return
    pool: list[Any] = rng.choice(pools)
    cmd = pool.pop(rng.randrange(len(pool)))
    now = d.now
    if isinstance(cmd, ReadParameters):
        if rng.random() < 0.1:
            d.feed(ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=rng.random() < 0.5))
        else:
            d.feed(d.ssm.answer(cmd, now))
    elif isinstance(cmd, RunCleanup):
        ok = rng.random() < 0.85
        d.feed((CleanupFinished if ok else CleanupFailed)(now_ms=now, cmd_id=cmd.cmd_id))
    else:
        ok = rng.random() < 0.9
        d.feed((InstallFinished if ok else InstallFailed)(now_ms=now, cmd_id=cmd.cmd_id))


def _walk_out_of_order(seed: int) -> Driver:
    rng = random.Random(seed)
    d = Driver(seed=str(seed), auto_reads=False, auto_cleanups=False, auto_installs=False)
    d.gate_fail = lambda c: rng.random() < 0.05
    epoch, revision = 1, 4
    ended: set[int] = set()
    for _ in range(200):
        k = rng.randrange(14)
        if k == 0:
            epoch += rng.random() < 0.2
            d.start(epoch=epoch, recovery=rng.random() < 0.3)
        elif k == 1:
            revision += rng.random() < 0.5
            engines = [engine(i) for i in range(rng.randrange(1, 4))]
            try:
                op = d.op_id()
            except AssertionError:
                continue
            d.frame(grant(op, m=manifest(engines=engines), revision=revision, epoch=epoch))
        elif k == 2:
            d.frame(_stale_frame(epoch, revision + 1, rng.choice([None, revision, revision + 1])))
        elif k == 3:
            d.frame(_changed_frame(epoch, rng.randrange(3, 9)))
        elif k == 4:
            try:
                op = d.op_id()
            except AssertionError:
                continue
            if rng.random() < 0.5:
                d.frame({"kind": "lease.deny", "opId": op, "error": "no"})
            else:
                d.frame({"kind": "lease.unavailable", "opId": op})
        elif k == 5:
            d.feed(BridgeAuthenticated(now_ms=d.now))
        elif k == 6:
            d.feed(LaunchFenceFailed(now_ms=d.now, task_id=TASK, run_epoch=epoch))
        elif k == 7:
            d.feed(CloseRun(now_ms=d.now, call_id=5, task_id=TASK, run_epoch=epoch))
        elif k == 8:
            d.advance(rng.choice([1_000, 20_000, 30_000, 60_000, 600_000]))
        else:
            _complete_one(d, rng)
        _check_invariants(d, ended)
    assert "CANARY" not in "\n".join(repr(c) for c in d.log)
    return d


def _check_invariants(d: Driver, ended: set[int]) -> None:
    st = d.reg.status(TASK)
    if st is None:
        ended.clear()  # the ended run was removed: the epoch may start afresh
        return
    if st.gate_open:
        assert st.phase == "usable"
        assert not st.quarantined
        assert st.installed_revision is not None
    if st.phase == "ended":
        ended.add(st.assignment.run_epoch)
    else:
        assert st.assignment.run_epoch not in ended, "an ended run was revived"


def test_random_walks_with_out_of_order_completions() -> None:
    """Reads, cleanups and installs complete in random order, some fail; invariants hold."""
    for seed in range(20):
        _walk_out_of_order(seed)
