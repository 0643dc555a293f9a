"""Test kit for the runtime core: fakes of every port and a driver.

The :class:`RtDriver` feeds events to a :class:`CredentialRuntime` and records
every command. It answers Parameter Store reads from a fake store, consumer
work and journal commands at once (unless a test holds them), and moves
virtual time only when a test calls :meth:`RtDriver.advance`. Nothing sleeps,
no clock is mocked, no AWS is touched.

:class:`FakeReplica` honours the replica's contract as the runtime catalog
states it ("Siblings"): expectations make frames get ``activation_pending``;
activation bumps the reader generation; ``read_view_at`` answers only the
committed snapshot of exactly that project set produced under that generation.

Secrets contain ``CANARY``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from core_kit import *  # noqa: F403 - lease_kit's builders, re-exported for the tests
from core_kit import ORG, TASK, EventDriver, FakeSsm, grant

from leasegate.core import Secret
from leasegate.core._base import Command
from leasegate.core.registry import (
    Assignment,
    ReadParameters,
    SendFrame,
    TaskView,
)
from leasegate.core.replica import (
    ActivateAssignment,
    ActivationOutcome,
    ActivationToken,
    DropAll,
    DropAssignment,
    EnvFrameReceived,
    ExpectActivation,
    NotifyChange,
    ReplicaManager,
    SendAck,
    SettleActivation,
)
from leasegate.core.runtime import (
    Abort,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    CredentialRuntime,
    CredentialUnavailable,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    MemoryJournal,
    ReleaseHold,
    RunSetup,
    WorkDone,
)
from leasegate.core.wire.credentials import (
    project_env_staged_parameter,
)


class Boom(Exception):
    """A consumer failure whose text holds a canary (it must never be shown)."""


class FakeGate:
    """A consumer gate recording ``open``/``close`` into a shared log; can raise."""

    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name = name
        self.log = log
        self.fail_open = False
        self.fail_close: Exception | None = None
        self.forgot: list[Any] = []
        self.installed: list[Any] = []

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.log.append((self.name, "open", assignment.task_id, str(assignment.run_epoch)))
        if self.fail_open:
            raise Boom("CANARY-open")

    def close(self, assignment: Assignment) -> None:
        self.log.append((self.name, "close", assignment.task_id, str(assignment.run_epoch)))
        if self.fail_close is not None:
            raise self.fail_close

    def forget(self, what: Any) -> None:
        self.forgot.append(what)

    def install(self, request: Any) -> None:
        self.log.append((self.name, "install", request.assignment.task_id))
        self.installed.append(request)


class FakeMcp(FakeGate):
    def __init__(self, log: list[tuple[str, ...]]) -> None:
        super().__init__("mcp", log)
        self.records: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        super().open(assignment, view)
        self.records[assignment.task_id] = assignment

    def leased_run(self, task_id: str) -> Assignment | None:
        return self.records.get(task_id)


@dataclasses.dataclass
class FakeGit:
    released: int = 0
    token: Secret = dataclasses.field(default_factory=lambda: Secret("CANARY-git"))

    def release(self) -> None:
        self.released += 1


class FakePerson(FakeGate):
    def __init__(self, log: list[tuple[str, ...]]) -> None:
        super().__init__("person", log)
        self.unreadable = False
        self.holds: list[FakeGit] = []

    def hold_git(self, assignment: Assignment) -> FakeGit:
        if self.unreadable:
            raise CredentialUnavailable("the task's GitHub sign-in could not be read")
        g = FakeGit()
        self.holds.append(g)
        return g


@dataclasses.dataclass(frozen=True)
class FakeAck:
    """The fake replica's ack (the real one is ``wire.env.EnvAck``)."""

    task_id: str
    ok: bool
    error: str | None = None


class FakeReplica:
    """The replica's contract (runtime catalog, "Siblings"), in the replica's own events.

    ``handle`` takes ``ExpectActivation``, ``SettleActivation``,
    ``ActivateAssignment``, ``EnvFrameReceived`` (a commit commits its
    ``versions``' project set through the current generation),
    ``DropAssignment`` and ``DropAll``, and answers with the real replica's
    command types (``ActivationToken``, ``ActivationOutcome``, ``SendAck``,
    ``NotifyChange``).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.gen: dict[tuple[str, int], int] = {}
        self.pending: dict[str, dict[int, int]] = {}
        self.snaps: dict[tuple[str, int], tuple[int, tuple[str, ...], object]] = {}
        self.refuse_activation = False
        self.no_generation = False
        self._tok = 0
        self._g = 0

    def handle(self, event: Any) -> list[Any]:
        if isinstance(event, ExpectActivation):
            self._tok += 1
            self.pending.setdefault(event.task_id, {})[self._tok] = event.run_epoch
            self.calls.append(("expect", event.task_id, event.run_epoch, self._tok))
            return [
                ActivationToken(task_id=event.task_id, run_epoch=event.run_epoch, token=self._tok)
            ]
        if isinstance(event, SettleActivation):
            self.pending.get(event.task_id, {}).pop(event.token, None)
            self.calls.append(("settle", event.task_id, event.token))
            return []
        if isinstance(event, ActivateAssignment):
            t, r = event.task_id, event.run_epoch
            self.calls.append(("activate", t, r, event.org_id, event.reader))
            if self.refuse_activation:
                return [
                    ActivationOutcome(
                        task_id=t,
                        run_epoch=r,
                        outcome=None,
                        error="task assignment run epoch is stale",
                    )
                ]
            if not self.no_generation:
                self._g += 1
                self.gen[(t, r)] = self._g
            self.pending.pop(t, None)
            return [ActivationOutcome(task_id=t, run_epoch=r, outcome="created", error=None)]
        if isinstance(event, EnvFrameReceived):
            f = event.frame
            task, run = f.task_id, f.run_epoch
            kind = type(f).__name__
            self.calls.append(("frame", kind, task, run))
            if any(x == run for x in self.pending.get(task, {}).values()):
                return [SendAck(ack=FakeAck(task, False, "activation_pending"))]  # type: ignore[arg-type]
            if kind == "EnvCommit" and (task, run) in self.gen:
                self.commit(task, run, tuple(v.project_id for v in f.versions))
                return [
                    SendAck(ack=FakeAck(task, True)),  # type: ignore[arg-type]
                    NotifyChange(task_id=task),
                ]
            return [SendAck(ack=FakeAck(task, True))]  # type: ignore[arg-type]
        if isinstance(event, DropAssignment):
            self.calls.append(("drop", event.task_id, event.run_epoch))
            self.snaps.pop((event.task_id, event.run_epoch), None)
            self.gen.pop((event.task_id, event.run_epoch), None)
            return []
        if isinstance(event, DropAll):
            self.calls.append(("drop_all",))
            self.snaps.clear()
            self.gen.clear()
            return []
        return []

    def reader_generation(self, task_id: str, run_epoch: int) -> int | None:
        return self.gen.get((task_id, run_epoch))

    def read_view_at(
        self, task_id: str, run_epoch: int, project_ids: tuple[str, ...], generation: int
    ) -> object | None:
        snap = self.snaps.get((task_id, run_epoch))
        if snap is None or snap[0] != generation or snap[1] != tuple(project_ids):
            return None
        if len(set(project_ids)) != len(project_ids):
            return None
        return snap[2]

    def commit(self, task_id: str, run_epoch: int, project_ids: tuple[str, ...]) -> object:
        """Commit a snapshot through the run's current reader generation."""
        g = self.gen[(task_id, run_epoch)]
        value = {"gen": g, "projects": project_ids, "API": Secret("CANARY-env")}
        self.snaps[(task_id, run_epoch)] = (g, tuple(project_ids), value)
        return value


_BOOT = "boot1"


def env_frame(kind: str, task: str, run: int, **fields: Any) -> dict[str, Any]:
    """A valid ``env.replica.v1.<kind>`` frame's common part plus ``fields``."""
    f: dict[str, Any] = {
        "kind": f"env.replica.v1.{kind}",
        "opId": f"op-{kind}",
        "taskId": task,
        "runEpoch": run,
        "runnerBootId": _BOOT,
        "streamId": "S1",
    }
    f.update(fields)
    return f


def commit_frame(task: str, run: int, projects: tuple[str, ...], seq: int = 0) -> dict[str, Any]:
    """A valid commit frame naming ``projects`` (record version 1 each)."""
    return env_frame(
        "commit",
        task,
        run,
        attemptId="A1",
        highWater={"streamId": "S1", "sequence": seq},
        versions=[{"projectId": p, "recordVersion": 1} for p in projects],
    )


def begin_frame(task: str, run: int, projects: tuple[str, ...]) -> dict[str, Any]:
    return env_frame("begin", task, run, attemptId="A1", projectIds=list(projects))


class RtDriver(EventDriver):
    """Feeds events to a runtime, answers what is automatic, records commands."""

    def __init__(
        self,
        *,
        replica: bool = False,
        real_replica: bool = False,
        files: bool = False,
        runner_kind: str = "owned",
        journal: MemoryJournal | None = None,
        seed: str = "seed",
        **options: Any,
    ) -> None:
        self.log: list[tuple[str, ...]] = []
        self.engines = FakeGate("engines", self.log)
        self.mcp = FakeMcp(self.log)
        self.person = FakePerson(self.log)
        self.files = FakeGate("files", self.log) if files else None
        self.replica = FakeReplica() if replica else None
        self.real = ReplicaManager(boot_id=_BOOT, policy_epochs=(1,)) if real_replica else None
        self.journal = journal if journal is not None else MemoryJournal()
        self.rt = CredentialRuntime(
            runner_kind=runner_kind,  # type: ignore[arg-type]
            op_id_seed=seed,
            engines=self.engines,
            mcp=self.mcp,
            person=self.person,
            files=self.files,
            replica=self.real if self.real is not None else self.replica,
            **options,
        )
        self.reg_events: list[Any] = []
        real = self.rt.registry.handle

        def spy(event: Any) -> list[Command]:
            self.reg_events.append(event)
            return real(event)

        self.rt.registry.handle = spy  # type: ignore[method-assign]
        self.out: list[Command] = []  # every command, in order
        super().__init__(self.out)
        self.ssm = FakeSsm()
        self.hold_work: Callable[[ConsumerWork], bool] = lambda c: False
        self.work_fail: Callable[[ConsumerWork], bool] = lambda c: False
        self.pending_work: list[ConsumerWork] = []
        self.hold_reads = False
        self.pending_reads: list[ReadParameters] = []
        self.pending_setups: list[RunSetup] = []
        self.results: dict[int, Command] = {}
        self._call = 1000

    # -- feeding
    def _handle(self, event: Any) -> list[Command]:
        got = self.rt.handle(event)
        assert self.rt.internal_errors == 0, "the runtime contained an internal error"
        assert self.rt.registry.internal_errors == 0
        return got

    def _auto(self, cmd: Command) -> list[Any]:
        now = self.now
        if self._book_timer(cmd):
            return []
        if isinstance(cmd, ReadParameters):
            if self.hold_reads:
                self.pending_reads.append(cmd)
                return []
            return [self.ssm.answer(cmd, now)]
        elif isinstance(cmd, (JournalRecord, JournalSettle)):
            self.journal.apply(cmd)
            return [WorkDone(now_ms=now, cmd_id=cmd.cmd_id)]
        elif isinstance(cmd, ConsumerWork):
            if self.hold_work(cmd):
                self.pending_work.append(cmd)
                return []
            return [self._work_outcome(cmd)]
        elif isinstance(cmd, RunSetup):
            self.pending_setups.append(cmd)
        elif isinstance(cmd, (Answer, Failed)):
            self.results[cmd.call_id] = cmd
        return []

    def _work_outcome(self, cmd: ConsumerWork, ok: bool | None = None) -> WorkDone:
        fail = self.work_fail(cmd) if ok is None else not ok
        err = CredentialFailure(message=f"{cmd.consumer} {cmd.op} failed") if fail else None
        return WorkDone(now_ms=self.now, cmd_id=cmd.cmd_id, error=err)

    def finish_work(self, cmd: ConsumerWork | None = None, ok: bool = True) -> list[Command]:
        cmd = cmd or self.pending_work[0]
        self.pending_work.remove(cmd)
        return self.feed(self._work_outcome(cmd, ok))

    def finish_reads(self) -> list[Command]:
        start = len(self.out)
        self.hold_reads = False
        while self.pending_reads:
            self.feed(self.ssm.answer(self.pending_reads.pop(0), self.now))
        return self.out[start:]

    def finish_setup(self, error: str | None = None) -> list[Command]:
        cmd = self.pending_setups.pop(0)
        err = None if error is None else CredentialFailure(message=error)
        return self.feed(WorkDone(now_ms=self.now, cmd_id=cmd.cmd_id, error=err))

    def _timer_rank(self, timer_id: int) -> int:
        # Same due time: the larger |id| fires first (this driver's order since
        # it was written; the runtime's and its registry's timers share the map).
        return -abs(timer_id)

    # -- calls
    def cid(self) -> int:
        self._call += 1
        return self._call

    def call(self, make: Callable[[int], Any]) -> int:
        c = self.cid()
        self.feed(make(c))
        return c

    def result(self, call_id: int) -> Command | None:
        return self.results.get(call_id)

    def value(self, call_id: int) -> Any:
        r = self.results.get(call_id)
        assert isinstance(r, Answer), r
        return r.value

    def error(self, call_id: int) -> CredentialFailure:
        r = self.results.get(call_id)
        assert isinstance(r, Failed), r
        return r.error

    def begin(self, task: str = TASK, run: int = 1, recovery: bool = False) -> int:
        c = self.call(
            lambda c: BeginStart(
                now_ms=self.now, call_id=c, task_id=task, run_epoch=run, recovery=recovery
            )
        )
        return self.value(c)  # type: ignore[no-any-return]

    def begin_result(self, task: str = TASK, run: int = 1) -> Command | None:
        c = self.call(lambda c: BeginStart(now_ms=self.now, call_id=c, task_id=task, run_epoch=run))
        return self.result(c)

    def wait(self, start: int) -> int:
        return self.call(lambda c: AwaitLaunchReady(now_ms=self.now, call_id=c, start_id=start))

    def hold(self, start: int) -> Command | None:
        c = self.call(lambda c: AcquireHold(now_ms=self.now, call_id=c, start_id=start))
        return self.result(c)

    def close(self, task: str = TASK, run: int = 1, reason: str = "stop") -> int:
        return self.call(
            lambda c: CloseAssignment(
                now_ms=self.now,
                call_id=c,
                task_id=task,
                run_epoch=run,
                reason=reason,  # type: ignore[arg-type]
            )
        )

    def frame(self, value: Any) -> int:
        return self.call(lambda c: HandleFrame(now_ms=self.now, call_id=c, frame=value))

    def op_id(self, task: str = TASK, run: int | None = None) -> str:
        for c in reversed(self.out):
            if isinstance(c, SendFrame) and c.frame.__class__.__name__ == "LeaseRequest":
                f: Any = c.frame
                if f.task_id == task and (run is None or f.run_epoch == run):
                    return f.op_id  # type: ignore[no-any-return]
        raise AssertionError("no lease.request sent")

    def grant(self, task: str = TASK, run: int = 1, **kw: Any) -> int:
        return self.frame(grant(self.op_id(task, run), task=task, epoch=run, **kw))

    def usable(self, task: str = TASK, run: int = 1, **kw: Any) -> int:
        """Begin a start, grant it, and return the start id (gate open unless a replica waits)."""
        s = self.begin(task, run)
        self.grant(task, run, **kw)
        return s

    def close_hook(
        self, run: int, task: str = TASK
    ) -> tuple[list[CredentialFailure], list[Command]]:
        """Call the runtime's gate close hook once (RT-085 … RT-089); its failures and commands.

        Every public path runs this fan-out more than once and around other work (a
        close: the registry's gate close, then the cleanup's two), and its failures
        only reach the registry, so the close tests call the hook itself; its
        commands are flushed through the kit by a no-op event.
        """
        n = len(self.out)
        failures = self.rt._close(task, run)
        self.feed(ReleaseHold(now_ms=self.now, hold_id=0))
        return failures, self.out[n:]

    def reg_calls(self, cls: type) -> list[Any]:
        """The events of type ``cls`` the runtime fed its registry."""
        return [e for e in self.reg_events if isinstance(e, cls)]

    def stage(self, project: str, key: str, staging_id: str, value: str) -> None:
        """Put a staged project env value where the grant's reader finds it."""
        name = project_env_staged_parameter(project, key, staging_id)
        assert name is not None
        raw = json.dumps(
            {
                "v": 2,
                "kind": "project-env",
                "orgId": ORG,
                "projectId": project,
                "key": key,
                "stagingId": staging_id,
                "value": value,
            }
        )
        self.ssm.latest[name] = (1, raw)

    def snapshot(
        self, task: str, run: int, project: str = "proj-0", key: str = "API_KEY", n: int = 1
    ) -> list[Any]:
        """Stream one committed snapshot of ``project`` through the real replica; the acks."""
        staging = f"{n:08x}-0000-4000-8000-000000000000"
        self.stage(project, key, staging, f"CANARY-env-{n}")
        rec = {
            "key": key,
            "head": {
                "revision": n,
                "generation": 1,
                "tombstone": False,
                "valueRef": {"kind": "staged", "stagingId": staging},
            },
            "binding": None,
            "policyEpoch": 1,
            "listingGeneration": 0,
        }
        attempt = f"A{n}"
        start = len(self.out)
        self.frame(env_frame("begin", task, run, attemptId=attempt, projectIds=[project]))
        self.frame(
            env_frame(
                "page",
                task,
                run,
                attemptId=attempt,
                projectId=project,
                after=None,
                recordVersion=n,
                records=[rec],
                complete=True,
            )
        )
        assert self.real is not None
        st = self.real.read_status(task)
        seq = 0 if st is None else st.applied_through.sequence
        self.frame(
            env_frame(
                "commit",
                task,
                run,
                attemptId=attempt,
                highWater={"streamId": "S1", "sequence": seq},
                versions=[{"projectId": project, "recordVersion": n}],
            )
        )
        return [c.frame for c in self.out[start:] if type(c).__name__ == "SendAck"]

    def aborts(self, kind: str, ident: int) -> list[CredentialFailure]:
        return [
            c.reason for c in self.out if isinstance(c, Abort) and c.kind == kind and c.id == ident
        ]

    def gate_log(self, since: int = 0) -> list[tuple[str, ...]]:
        return self.log[since:]


def of(cmds: list[Command], cls: type) -> list[Any]:
    return [c for c in cmds if isinstance(c, cls)]


def all_texts(cmds: list[Command]) -> str:
    """Every command's repr (what a trace or log would show)."""
    return "\n".join(repr(c) for c in cmds)
