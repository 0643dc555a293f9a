"""The runtime core on the durable cleanup journal (issue #8, item 5).

A compact in-test runner (:class:`Runner`) drives the real
``leasegate.core.runtime.CredentialRuntime`` (with its real lease registry):
it answers Parameter Store reads from canned envelopes, answers consumer
work at once (unless a test holds or fails it), carries out the journal
commands through :class:`RuntimeJournal` on a temporary directory, and keeps
an ordered trace of what it executed. Time does not move (no timer fires).

The runner "dies" by being dropped mid-cleanup (in-process) or by SIGKILL
(a child process running this file as a script). A new ``RuntimeJournal``
over the same directory and a new runtime then recover.

Secrets contain ``CANARY``; none may reach the journal's files, its rows, an
error or the trace.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core import Secret, decode, sha256_hex
from leasegate.core._base import Command, Event
from leasegate.core.registry import (
    Assignment,
    ReadCompleted,
    ReadParameters,
    SendFrame,
    SsmParameter,
    TaskView,
)
from leasegate.core.runtime import (
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    CredentialRuntime,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    OwedCleanup,
    WorkDone,
)
from leasegate.core.wire.credentials import (
    EngineValue,
    credential_parameter_name,
    encode_leased_value,
    parse_parameter_name,
)
from leasegate.core.wire.lease import TaskLease, canonical_manifest_json
from leasegate.shells.store import (
    CleanupJournal,
    FsOps,
    OrchestrationEventStore,
    RuntimeJournal,
    RuntimeJournalError,
)
from leasegate.shells.store.runtime_journal import RECORD_FAILED, SETTLE_FAILED

ORG, USER = "org-1", "user-1"
A, B = "task-a", "task-b"
T0 = 1_800_000_000_000
HOUR = 3_600_000
RUNNER = "runner-1"


# ---------------------------------------------------------------------------
# Grants and envelopes


def _param(cid: str) -> str:
    return credential_parameter_name(ORG, USER, "engine", cid)


def _engine(i: int) -> dict[str, Any]:
    cid = f"engine-{i}"
    return {
        "credentialId": cid,
        "engine": "claude-code",
        "revision": f"rev-{i}",
        "parameter": _param(cid),
        "version": 3,
        "sessionId": "s1",
        "authKind": "env",
    }


def grant_frame(op_id: str, task: str, run: int, engines: int = 2, revision: int = 4) -> Any:
    """A ``lease.grant.v1`` frame (JSON) for ``task``/``run`` with canary STS secrets."""
    body: dict[str, Any] = {
        "taskId": task,
        "runEpoch": run,
        "leaseId": f"lease-{task}-{run}-{revision}",
        "orgId": ORG,
        "userId": USER,
        "region": "us-east-1",
        "manifestRevision": revision,
        "manifestDigest": "0" * 64,
        "manifest": {
            "engines": [_engine(i) for i in range(engines)],
            "mcp": [],
            "github": None,
            "ssh": None,
            "projects": [],
        },
        "sessions": [
            {
                "id": "s1",
                "purpose": "credentials",
                "accessKeyId": "ASIAEXAMPLEEXAMPLE01",
                "secretAccessKey": "CANARY-sts-secret",
                "sessionToken": "CANARY-sts-token",
                "expiresAt": T0 + 2 * HOUR,
            }
        ],
        "files": None,
        "expiresAt": T0 + 2 * HOUR,
    }
    lease = decode(TaskLease, body)
    assert isinstance(lease, TaskLease), lease
    body["manifestDigest"] = sha256_hex(canonical_manifest_json(lease.manifest))
    return {"kind": "lease.grant.v1", "opId": op_id, "lease": body}


def _read(cmd: ReadParameters, now: int) -> ReadCompleted:
    params = []
    for sel in cmd.selectors:
        name, _, ver = sel.rpartition(":")
        loc = parse_parameter_name(name)
        assert loc is not None
        raw = encode_leased_value(
            EngineValue(
                location=loc,
                auth_kind="env",
                env={"API_KEY": Secret(f"CANARY-value-{name}")},
                files=None,
            )
        )
        params.append(
            SsmParameter(name=name, type="SecureString", value=Secret(raw), version=int(ver))
        )
    return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=tuple(params))


# ---------------------------------------------------------------------------
# Ports and the runner


class Gate:
    """Every consumer port at once (engines, MCP, person): in-memory, never fails."""

    def __init__(self) -> None:
        self.records: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.records[assignment.task_id] = assignment

    def close(self, assignment: Assignment) -> None:
        pass

    def forget(self, assignment: Assignment) -> None:
        self.records.pop(assignment.task_id, None)

    def leased_run(self, task_id: str) -> Assignment | None:
        return self.records.get(task_id)

    def install(self, request: Any) -> None:
        pass

    def hold_git(self, assignment: Assignment) -> Any:
        raise AssertionError("no hold is taken in these tests")


class Runner:
    """A minimal executor of the runtime's commands over a :class:`RuntimeJournal`.

    ``trace`` lists, in order, every command executed and every completion
    fed back, as short strings (``"work engines cleanup task-a#1"``,
    ``"journal record task-a#1 stop"``, ``"done journal settle task-a"``,
    ``"send lease.request task-a#2"``, ``"answer 7"``).
    """

    def __init__(
        self,
        journal: RuntimeJournal,
        *,
        seed: str,
        hold: Callable[[ConsumerWork], bool] = lambda c: False,
        fail: Callable[[ConsumerWork], bool] = lambda c: False,
        after_journal: Callable[[Command], None] = lambda c: None,
    ) -> None:
        self.journal = journal
        gate = Gate()
        self.rt = CredentialRuntime(
            runner_kind="owned",
            op_id_seed=seed,
            engines=gate,
            mcp=gate,
            person=gate,
            files=None,
            replica=None,
        )
        self.hold = hold
        self.fail = fail
        self.after_journal = after_journal
        self.now = T0
        self.trace: list[str] = []
        self.out: list[Command] = []
        self.results: dict[int, Command] = {}
        self.held: list[ConsumerWork] = []
        self._call = 0

    def feed(self, event: Event) -> None:
        queue: list[Event] = [event]
        while queue:
            ev = queue.pop(0)
            got = self.rt.handle(ev)
            assert self.rt.internal_errors == 0
            self.out.extend(got)
            for cmd in got:
                queue.extend(self._execute(cmd))

    def _execute(self, cmd: Command) -> list[Event]:
        if isinstance(cmd, ReadParameters):
            return [_read(cmd, self.now)]
        if isinstance(cmd, (JournalRecord, JournalSettle)):
            if isinstance(cmd, JournalRecord):
                self.trace.append(f"journal record {cmd.task_id}#{cmd.run_epoch} {cmd.reason}")
            else:
                self.trace.append(f"journal settle {cmd.task_id} {list(cmd.runs)}")
            done = self.journal.complete(cmd, now_ms=self.now)
            self.after_journal(cmd)
            ok = "done" if done.error is None else "failed"
            self.trace.append(f"{ok} journal {type(cmd).__name__} {cmd.cmd_id}")
            return [done]
        if isinstance(cmd, ConsumerWork):
            req: Any = cmd.request
            a = req.assignment if hasattr(req, "assignment") else req
            self.trace.append(f"work {cmd.consumer} {cmd.op} {a.task_id}#{a.run_epoch}")
            if self.hold(cmd):
                self.held.append(cmd)
                return []
            err = CredentialFailure(message=f"{cmd.consumer} {cmd.op} failed")
            return [
                WorkDone(now_ms=self.now, cmd_id=cmd.cmd_id, error=err if self.fail(cmd) else None)
            ]
        if isinstance(cmd, SendFrame):
            f: Any = cmd.frame
            if type(f).__name__ == "LeaseRequest":
                self.trace.append(f"send lease.request {f.task_id}#{f.run_epoch}")
        elif isinstance(cmd, (Answer, Failed)):
            self.trace.append(f"{'answer' if isinstance(cmd, Answer) else 'failed'} {cmd.call_id}")
            self.results[cmd.call_id] = cmd
        return []

    # -- host calls
    def call(self, make: Callable[[int], Event]) -> int:
        self._call += 1
        self.feed(make(self._call))
        return self._call

    def value(self, call_id: int) -> Any:
        r = self.results.get(call_id)
        assert isinstance(r, Answer), r
        return r.value

    def recover(self, admitted: tuple[tuple[str, int], ...] = ()) -> int:
        return self.call(
            lambda c: self.journal.recover_event(now_ms=self.now, call_id=c, admitted=admitted)
        )

    def op_id(self, task: str, run: int) -> str:
        for c in reversed(self.out):
            f: Any = getattr(c, "frame", None)
            if type(f).__name__ == "LeaseRequest" and (f.task_id, f.run_epoch) == (task, run):
                return str(f.op_id)
        raise AssertionError("no lease.request sent")

    def open_run(self, task: str, run: int, **grant: Any) -> None:
        """start → grant → open; asserts the launch wait resolved with the run's view."""
        start = self.value(
            self.call(lambda c: BeginStart(now_ms=self.now, call_id=c, task_id=task, run_epoch=run))
        )
        wait = self.call(lambda c: AwaitLaunchReady(now_ms=self.now, call_id=c, start_id=start))
        frame = grant_frame(self.op_id(task, run), task, run, **grant)
        self.value(self.call(lambda c: HandleFrame(now_ms=self.now, call_id=c, frame=frame)))
        view = self.value(wait)
        assert (view.assignment.task_id, view.assignment.run_epoch) == (task, run)
        assert self.rt.open_run(task) == run

    def regrant(self, task: str, run: int, **grant: Any) -> None:
        """A renewal of the open run (a new start of the same run and its grant)."""
        self.call(lambda c: BeginStart(now_ms=self.now, call_id=c, task_id=task, run_epoch=run))
        frame = grant_frame(self.op_id(task, run), task, run, **grant)
        self.value(self.call(lambda c: HandleFrame(now_ms=self.now, call_id=c, frame=frame)))

    def stop(self, task: str, run: int) -> int:
        return self.call(
            lambda c: CloseAssignment(now_ms=self.now, call_id=c, task_id=task, run_epoch=run)
        )


def _index(trace: list[str], prefix: str) -> int:
    return next(i for i, line in enumerate(trace) if line.startswith(prefix))


def _indices(trace: list[str], prefix: str) -> list[int]:
    return [i for i, line in enumerate(trace) if line.startswith(prefix)]


def _files_text(root: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*") if p.is_file()
    )


def _quiesce(c: ConsumerWork) -> bool:
    return c.op == "quiesce"


def _first_half(root: Path, after_journal: Callable[[Command], None] = lambda c: None) -> Runner:
    """Boot, open run 1 of A and B, stop both; each cleanup is recorded and then
    stalls at ``quiesce`` (so nothing is settled)."""
    runner = Runner(
        RuntimeJournal(root, RUNNER), seed="boot-1", hold=_quiesce, after_journal=after_journal
    )
    boot = runner.recover()
    assert runner.value(boot) is None
    runner.open_run(A, 1)
    runner.open_run(B, 1)
    stops = [runner.stop(A, 1), runner.stop(B, 1)]
    assert all(s not in runner.results for s in stops)  # the cleanups are in flight
    return runner


def _assert_recovered_before_grant(runner: Runner, owed: list[tuple[str, int]], boot: int) -> None:
    trace = runner.trace
    first_request = _index(trace, "send lease.request")
    answered = trace.index(f"answer {boot}")
    assert answered < first_request
    for task, run in owed:
        for step in (
            "work engines cleanup",
            "work person cleanup",
            "work mcp cleanup",
            "work host quiesce",
            "work host remove-paths",
        ):
            assert _index(trace, f"{step} {task}#{run}") < answered, (step, task)
        settle = _index(trace, f"journal settle {task} ")
        assert settle < answered
        assert trace[settle + 1].startswith("done journal JournalSettle")


# ---------------------------------------------------------------------------
# (a) in-process death


def test_RT_100_durable_journal_recovers_every_owed_run_before_any_grant(tmp_path: Path) -> None:
    dead = _first_half(tmp_path)
    assert [(r.task_id, r.run_epoch, r.reason) for r in dead.journal.owed()] == [
        (A, 1, "stop"),
        (B, 1, "stop"),
    ]
    assert _indices(dead.trace, "journal settle") == []
    del dead  # the process dies before any settle

    journal = RuntimeJournal(tmp_path, RUNNER)  # reopened from disk
    assert journal.owed() == (OwedCleanup(A, 1, "stop"), OwedCleanup(B, 1, "stop"))
    runner = Runner(journal, seed="boot-2")
    boot = runner.recover(admitted=((A, 1), (B, 1)))
    assert runner.value(boot) is None
    assert journal.owed() == ()
    runner.open_run(A, 2)  # the first grant asked for after recovery
    _assert_recovered_before_grant(runner, [(A, 1), (B, 1)], boot)
    recovery_requests: list[Any] = [
        c.request for c in runner.out if isinstance(c, ConsumerWork) and c.op == "remove-paths"
    ]
    assert [(r.task_id, r.run_epoch, r.reason) for r in recovery_requests] == [
        (A, 1, "recovery"),
        (B, 1, "recovery"),
    ]
    assert RuntimeJournal(tmp_path, RUNNER).owed() == ()
    assert CleanupJournal(tmp_path, RUNNER).owed() == []
    text = _files_text(tmp_path) + "\n".join(runner.trace) + repr(runner.out)
    assert "CANARY" not in text
    assert "task-a" in _files_text(tmp_path)  # the files were read (the check is not vacuous)


def test_RT_100_recovery_cleans_up_at_the_admitted_run_when_newer(tmp_path: Path) -> None:
    dead = _first_half(tmp_path)
    del dead
    journal = RuntimeJournal(tmp_path, RUNNER)
    runner = Runner(journal, seed="boot-2")
    boot = runner.recover(admitted=((A, 3),))
    assert runner.value(boot) is None
    requests: list[Any] = [
        c.request for c in runner.out if isinstance(c, ConsumerWork) and c.op == "remove-paths"
    ]
    removed = [(r.task_id, r.run_epoch) for r in requests]
    assert removed == [(A, 3), (B, 1)]
    assert journal.owed() == ()


# ---------------------------------------------------------------------------
# (b) a real crash: SIGKILL right after the JournalRecord was durable


def _child_main(root: str) -> None:
    def after(cmd: Command) -> None:
        if isinstance(cmd, JournalRecord) and cmd.reason == "stop":
            print(f"recorded {cmd.task_id}#{cmd.run_epoch}", flush=True)
            time.sleep(60)  # the parent kills us here, before any cleanup step

    _first_half(Path(root), after_journal=after)
    print("not killed", flush=True)


def test_RT_100_sigkilled_runner_recovers_on_next_boot_before_any_grant(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "child", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 30)
        assert ready, "the child did not record its cleanup in time"
        line = child.stdout.readline().strip()
        assert line == f"recorded {A}#1", (line, child.stderr.read() if child.stderr else "")
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()

    journal = RuntimeJournal(tmp_path, RUNNER)
    assert journal.owed() == (OwedCleanup(A, 1, "stop"),)
    runner = Runner(journal, seed="boot-2")
    boot = runner.recover()
    assert runner.value(boot) is None
    runner.open_run(A, 2)
    _assert_recovered_before_grant(runner, [(A, 1)], boot)
    assert RuntimeJournal(tmp_path, RUNNER).owed() == ()
    assert "CANARY" not in _files_text(tmp_path)


# ---------------------------------------------------------------------------
# (c) a failing recovery cleanup stays owed and is retried on the next boot


def test_RT_100_failed_recovery_cleanup_stays_owed_and_is_retried_next_boot(
    tmp_path: Path,
) -> None:
    del_first = _first_half(tmp_path)
    del del_first

    failing = Runner(
        RuntimeJournal(tmp_path, RUNNER),
        seed="boot-2",
        fail=lambda c: c.op == "remove-paths" and c.request.task_id == A,  # type: ignore[attr-defined]
    )
    boot = failing.recover()
    result = failing.results.get(boot)
    assert isinstance(result, Failed), result
    assert result.error.message == "host remove-paths failed"
    # Every task was attempted before the failure was reported.
    answered = failing.trace.index(f"failed {boot}")
    assert _index(failing.trace, f"work host remove-paths {A}#1") < answered
    assert _index(failing.trace, f"work host remove-paths {B}#1") < answered
    assert _index(failing.trace, f"journal settle {B} ") < answered
    assert _indices(failing.trace, f"journal settle {A} ") == []
    del failing

    journal = RuntimeJournal(tmp_path, RUNNER)
    assert journal.owed() == (OwedCleanup(A, 1, "stop"),)  # B was settled, A stays owed
    runner = Runner(journal, seed="boot-3")
    boot = runner.recover()
    assert runner.value(boot) is None
    assert _index(runner.trace, f"work host remove-paths {A}#1") < runner.trace.index(
        f"answer {boot}"
    )
    assert _indices(runner.trace, f"work host remove-paths {B}") == []
    assert RuntimeJournal(tmp_path, RUNNER).owed() == ()


# ---------------------------------------------------------------------------
# A run recorded and settled, then recorded again (narrowing, then stop)


def test_RT_100_run_owed_again_after_a_settled_selective_cleanup_is_durable(
    tmp_path: Path,
) -> None:
    runner = Runner(RuntimeJournal(tmp_path, RUNNER), seed="boot-1")
    runner.open_run(A, 1, engines=2)
    runner.regrant(A, 1, engines=1, revision=5)  # narrowed: a selective cleanup of run 1
    selective = [
        c.request
        for c in runner.out
        if isinstance(c, ConsumerWork) and c.op == "cleanup" and c.request.mode == "selective"  # type: ignore[attr-defined]
    ]
    assert selective, "the narrowing made no selective cleanup"
    assert _index(runner.trace, f"journal settle {A} [1]") >= 0
    assert runner.journal.owed() == ()

    runner.hold = _quiesce
    stop = runner.stop(A, 1)
    assert stop not in runner.results
    del runner  # dies mid-stop

    # Without the adapter's re-owe the journal's key would have replayed and
    # nothing would be owed here.
    assert RuntimeJournal(tmp_path, RUNNER).owed() == (OwedCleanup(A, 1, "stop"),)
    runner2 = Runner(RuntimeJournal(tmp_path, RUNNER), seed="boot-2")
    assert runner2.value(runner2.recover()) is None
    assert RuntimeJournal(tmp_path, RUNNER).owed() == ()


def test_RT_100_reowe_and_resettle_round_trip_on_disk(tmp_path: Path) -> None:
    journal = RuntimeJournal(tmp_path, RUNNER)
    for round_ in range(3):
        assert journal.complete(
            JournalRecord(cmd_id=-1, task_id=A, run_epoch=4, reason="stop"), now_ms=T0
        ) == WorkDone(now_ms=T0, cmd_id=-1)
        assert RuntimeJournal(tmp_path, RUNNER).owed() == (OwedCleanup(A, 4, "stop"),), round_
        journal.apply(JournalRecord(cmd_id=-2, task_id=A, run_epoch=4, reason="teardown"))
        assert journal.owed() == (OwedCleanup(A, 4, "stop"),)  # idempotent: first reason kept
        assert journal.complete(
            JournalSettle(cmd_id=-3, task_id=A, runs=(4,)), now_ms=T0
        ) == WorkDone(now_ms=T0, cmd_id=-3)
        assert RuntimeJournal(tmp_path, RUNNER).owed() == (), round_
    journal.apply(JournalSettle(cmd_id=-4, task_id=A, runs=(4, 5)))  # nothing owed: no-op
    assert journal.owed() == ()


def test_RT_100_owed_rows_are_oldest_first(tmp_path: Path) -> None:
    journal = RuntimeJournal(tmp_path, RUNNER)
    for i, (task, run) in enumerate([(B, 2), (A, 7), (B, 1), (A, 3)]):
        journal.apply(JournalRecord(cmd_id=-i - 1, task_id=task, run_epoch=run, reason="stop"))
    journal.apply(JournalSettle(cmd_id=-9, task_id=A, runs=(7,)))
    expected = (OwedCleanup(B, 2, "stop"), OwedCleanup(B, 1, "stop"), OwedCleanup(A, 3, "stop"))
    assert RuntimeJournal(tmp_path, RUNNER).owed() == expected
    event = RuntimeJournal(tmp_path, RUNNER).recover_event(now_ms=T0, call_id=5, admitted=((A, 9),))
    assert (event.call_id, event.owed, event.admitted, event.now_ms) == (5, expected, ((A, 9),), T0)


# ---------------------------------------------------------------------------
# Failures and secrets


class _FailingFs(FsOps):
    """Every file write fails (a full or read-only disk)."""

    def write(self, path: str, data: bytes) -> int:
        raise OSError(28, "No space left on device CANARY-path")


def test_RT_100_journal_write_failure_fails_the_cleanup_before_anything_destructive(
    tmp_path: Path,
) -> None:
    store = OrchestrationEventStore(tmp_path, f"cleanup-journal:{RUNNER}", fs=_FailingFs())
    journal = RuntimeJournal(journal=CleanupJournal(tmp_path, RUNNER, store=store))
    cmd = JournalRecord(cmd_id=-5, task_id=A, run_epoch=1, reason="stop")
    with pytest.raises(RuntimeJournalError) as info:
        journal.apply(cmd)
    assert (info.value.message, info.value.cmd_id) == (RECORD_FAILED, -5)
    assert isinstance(info.value.__cause__, OSError)
    assert "CANARY" not in str(info.value)
    done = journal.complete(cmd, now_ms=T0)
    assert done == WorkDone(now_ms=T0, cmd_id=-5, error=CredentialFailure(message=RECORD_FAILED))
    settle = journal.complete(JournalSettle(cmd_id=-6, task_id=A, runs=(1,)), now_ms=T0)
    assert settle.error is None  # nothing owed on disk: settling changes nothing

    # Through the runtime: the stop's cleanup fails at its first step.
    runner = Runner(journal, seed="boot-1")
    runner.open_run(A, 1)
    before = len(runner.out)
    stop = runner.stop(A, 1)
    failed = runner.results.get(stop)
    assert isinstance(failed, Failed), failed  # the registry's fixed text for a failed close
    after = runner.out[before:]
    record = next(i for i, c in enumerate(after) if isinstance(c, JournalRecord))
    assert not any(isinstance(c, ConsumerWork) for c in after[record:])  # nothing destructive
    cmd_id = getattr(after[record], "cmd_id", None)
    assert runner.trace[-2:] == [f"failed journal JournalRecord {cmd_id}", f"failed {stop}"]
    assert "CANARY" not in repr(runner.out)


def test_RT_100_settle_failure_is_reported(tmp_path: Path) -> None:
    journal = RuntimeJournal(tmp_path, RUNNER)
    journal.apply(JournalRecord(cmd_id=-1, task_id=A, run_epoch=1, reason="stop"))
    broken = RuntimeJournal(
        journal=CleanupJournal(
            tmp_path,
            RUNNER,
            store=OrchestrationEventStore(tmp_path, f"cleanup-journal:{RUNNER}", fs=_FailingFs()),
        )
    )
    done = broken.complete(JournalSettle(cmd_id=-2, task_id=A, runs=(1,)), now_ms=T0)
    assert done == WorkDone(now_ms=T0, cmd_id=-2, error=CredentialFailure(message=SETTLE_FAILED))
    assert RuntimeJournal(tmp_path, RUNNER).owed() == (OwedCleanup(A, 1, "stop"),)


@pytest.mark.parametrize("field", ["task_id", "reason"])
def test_RT_100_a_secret_cannot_enter_the_journal(tmp_path: Path, field: str) -> None:
    fields: dict[str, Any] = {"task_id": A, "run_epoch": 1, "reason": "stop"}
    fields[field] = Secret("CANARY-secret-in-journal")
    journal = RuntimeJournal(tmp_path, RUNNER)
    cmd = JournalRecord(cmd_id=-1, **fields)
    with pytest.raises(RuntimeJournalError) as info:
        journal.apply(cmd)
    chain = f"{info.value!r} {info.value} {info.value.__cause__!r} {info.value.__cause__}"
    assert "CANARY" not in chain
    done = journal.complete(cmd, now_ms=T0)
    assert done.error == CredentialFailure(message=RECORD_FAILED)
    assert journal.owed() == ()
    assert "CANARY" not in _files_text(tmp_path)


def test_RT_100_apply_refuses_other_commands(tmp_path: Path) -> None:
    journal = RuntimeJournal(tmp_path, RUNNER)
    with pytest.raises(TypeError):
        journal.apply(ConsumerWork(cmd_id=-1, consumer="host", op="quiesce"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RuntimeJournal()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        with contextlib.suppress(KeyboardInterrupt):
            _child_main(sys.argv[2])
    else:
        sys.exit(os.EX_USAGE)
