"""The reference cloud against the real runner core, over a moto server.

A small synchronous shell drives ``leasegate.core.runtime.CredentialRuntime``
(the real lease registry and the real env replica inside) with fake
consumers: frames go to and from the reference cloud, Parameter Store reads
go to the moto server through a boto3 client built from exactly the lease
session's keys. Time is the cloud's ManualClock; nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest
from shell_kit import Port

from leasegate.core import Secret
from leasegate.core.registry import (
    CancelTimer,
    OpenReader,
    ReadCompleted,
    ReadParameters,
    SsmParameter,
    StartTimer,
    TimerFired,
)
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import (
    Answer,
    AwaitLaunchReady,
    BeginStart,
    ConsumerWork,
    CredentialRuntime,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    MemoryJournal,
    SendAck,
    WorkDone,
)
from leasegate.core.wire import encode_frame
from leasegate.testing import ManualClock, MotoServer, ReferenceCloud

pytestmark = pytest.mark.integration

BOOT = "boot-runner-1"
TASK = "task-e2e"


class Runner:
    """A synchronous shell: the runtime core, the cloud, moto, a virtual clock."""

    def __init__(self, cloud: ReferenceCloud, clock: ManualClock, moto: MotoServer) -> None:
        self.cloud = cloud
        self.clock = clock
        self.moto = moto
        self.log: list[tuple[str, str]] = []
        self.engines = Port("engines", self.log)
        # Built through this module's ``CredentialRuntime`` name: the monitor's
        # whole-run tests (tests/core/monitor/test_monitor_reference_cloud.py) patch it.
        self.rt = CredentialRuntime(
            runner_kind="owned",
            op_id_seed="e2e",
            engines=self.engines,
            mcp=Port("mcp", self.log),
            person=Port("person", self.log),
            replica=ReplicaManager(boot_id=BOOT),
        )
        self.journal = MemoryJournal()
        self.readers: dict[int, Any] = {}
        self.timers: dict[int, int] = {}
        self.results: dict[int, Any] = {}
        self.sent: list[str] = []  # kinds the runner sent
        self.ack_codes: list[str | None] = []  # env ack codes (None: ok)
        self.reads: list[tuple[str, ...]] = []
        self._call = 0

    def call(self, make: Any) -> int:
        self._call += 1
        call_id = self._call
        self.feed(make(call_id))
        return call_id

    def feed(self, event: Any) -> None:
        queue = [event]
        while queue:
            for cmd in self.rt.handle(queue.pop(0)):
                queue.extend(self._do(cmd))
            if not queue:
                queue.extend(self._from_cloud())

    def _from_cloud(self) -> list[Any]:
        events = []
        for value in self.cloud.take_outgoing():
            self._call += 1
            events.append(HandleFrame(now_ms=self.clock(), call_id=self._call, frame=value))
        return events

    def _do(self, cmd: Any) -> list[Any]:
        now = self.clock()
        frame = getattr(cmd, "frame", None)
        if frame is not None and type(cmd).__name__ in ("SendFrame", "SendAck"):
            value = encode_frame(frame)
            self.sent.append(value["kind"])
            if isinstance(cmd, SendAck):
                self.ack_codes.append(value.get("code"))
            self.cloud.receive(value)
        elif isinstance(cmd, StartTimer):
            self.timers[cmd.timer_id] = now + cmd.delay_ms
        elif isinstance(cmd, CancelTimer):
            self.timers.pop(cmd.timer_id, None)
        elif isinstance(cmd, OpenReader):
            s = cmd.session
            self.readers[cmd.reader_id] = self.moto.client(
                "ssm",
                access_key_id=s.access_key_id,
                secret_access_key=s.secret_access_key.reveal(),
                session_token=s.session_token.reveal(),
            )
        elif isinstance(cmd, ReadParameters):
            self.reads.append(cmd.selectors)
            out = self.readers[cmd.reader_id].get_parameters(
                Names=list(cmd.selectors), WithDecryption=True
            )
            params = tuple(
                SsmParameter(
                    name=p["Name"], type=p["Type"], value=Secret(p["Value"]), version=p["Version"]
                )
                for p in out.get("Parameters", [])
            )
            return [
                ReadCompleted(
                    now_ms=now,
                    cmd_id=cmd.cmd_id,
                    parameters=params,
                    invalid=tuple(out.get("InvalidParameters", [])),
                )
            ]
        elif isinstance(cmd, (JournalRecord, JournalSettle)):
            self.journal.apply(cmd)
            return [WorkDone(now_ms=now, cmd_id=cmd.cmd_id)]
        elif isinstance(cmd, ConsumerWork):
            self.log.append((cmd.consumer, cmd.op))
            return [WorkDone(now_ms=now, cmd_id=cmd.cmd_id)]
        elif isinstance(cmd, (Answer, Failed)):
            self.results[cmd.call_id] = cmd
        return []

    def advance(self, ms: int) -> None:
        """Move virtual time: fire due runner timers and the cloud's resends."""
        end = self.clock() + ms
        while True:
            due = [t for t in self.timers.values() if t <= end]
            cloud_due = self.cloud.next_deadline_ms()
            if cloud_due is not None and cloud_due <= end:
                due.append(cloud_due)
            if not due:
                break
            self.clock.now_ms = max(self.clock.now_ms, min(due))
            fired = sorted((t, tid) for tid, t in self.timers.items() if t <= self.clock())
            if fired:
                del self.timers[fired[0][1]]
                self.feed(TimerFired(now_ms=self.clock(), timer_id=fired[0][1]))
            else:
                self.feed_cloud()
        self.clock.now_ms = end

    def feed_cloud(self) -> None:
        for ev in self._from_cloud():
            self.feed(ev)

    def env(self, *projects: str) -> dict[str, dict[str, str | None]] | None:
        view: Any = self.rt.env_snapshot(TASK, 1, projects)
        if view is None:
            return None
        return {
            p.project_id: {
                e.state.key: None if e.value is None else e.value.reveal() for e in p.entries
            }
            for p in view.projects
        }


@pytest.fixture
def runner(moto_server: MotoServer) -> Runner:
    moto_server.reset()
    clock = ManualClock()
    cloud = ReferenceCloud(
        ssm=moto_server.ssm_client(),
        sts=moto_server.sts_client(),
        clock=clock,
        region=moto_server.region,
    )
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "CANARY-1"})
    cloud.add_engine_credential("alice", "codex", engine="codex", env={"OPENAI_API_KEY": "c"})
    cloud.set_env_value("web", "DATABASE_URL", "CANARY-db")
    cloud.assign(TASK, 1, "acme", "alice", ["web"], runner_boot_id=BOOT)
    return Runner(cloud, clock, moto_server)


def _start(r: Runner) -> int:
    start = r.call(lambda c: BeginStart(now_ms=r.clock(), call_id=c, task_id=TASK, run_epoch=1))
    assert isinstance(r.results[start], Answer)
    start_id = r.results[start].value
    return r.call(lambda c: AwaitLaunchReady(now_ms=r.clock(), call_id=c, start_id=start_id))


def test_RT_009_ER_018_a_real_runner_becomes_ready_on_the_clouds_grant_and_env(
    runner: Runner,
) -> None:
    r = runner
    wait = _start(r)
    # The grant was read; the env stream met activation_pending or waits on it.
    assert r.sent[0] == "lease.request"
    assert r.reads
    assert r.results.get(wait) is None  # the install waits for the env snapshot
    # The grant is being installed: its env frames are refused until activation.
    assert r.ack_codes == ["activation_pending"]
    r.advance(5_000)
    assert isinstance(r.results.get(wait), Answer), r.results.get(wait)
    view = r.results[wait].value
    assert [e.manifest.credential_id for e in view.engines] == ["claude", "codex"]
    assert all(e.availability == "available" for e in view.engines)
    assert r.env("web") == {"web": {"DATABASE_URL": "CANARY-db"}}
    assert ("engines", "open") in r.log
    assert r.cloud.delivery_errors == []
    # The cloud resent the same begin after its delay; then page and commit.
    assert r.cloud.transcript.count(("out", "env.replica.v1.begin")) == 2
    assert r.ack_codes == ["activation_pending", None, None, None]
    # Every credential read was pinned to the manifest's versions.
    for selectors in r.reads:
        assert all(":" in s for s in selectors if s.startswith("/uai/orgs/"))


def test_LR_091_RT_078_rotation_and_env_changes_reach_the_running_task(runner: Runner) -> None:
    r = runner
    wait = _start(r)
    r.advance(5_000)
    assert isinstance(r.results.get(wait), Answer)
    version = r.cloud.rotate("claude", env={"ANTHROPIC_API_KEY": "CANARY-2"})
    r.cloud.set_env_value("web", "DATABASE_URL", "CANARY-db-2")
    r.cloud.set_env_value("web", "NEW_KEY", "fresh")
    r.feed_cloud()
    r.advance(1_000)
    assert f"{r.cloud.credential_parameter('claude')}:{version}" in [
        s for sel in r.reads for s in sel
    ]
    assert r.env("web") == {"web": {"DATABASE_URL": "CANARY-db-2", "NEW_KEY": "fresh"}}
    assert r.sent.count("env.replica.v1.ack") >= 5
    assert r.cloud.delivery_state(TASK, 1)["next_sequence"] == 3


def test_LR_081_LR_112_narrow_and_deny_from_the_cloud_close_the_task(runner: Runner) -> None:
    r = runner
    wait = _start(r)
    r.advance(5_000)
    assert isinstance(r.results.get(wait), Answer)
    r.cloud.narrow(TASK, 1, remove=["codex"])
    r.feed_cloud()
    r.advance(5_000)
    latest = r.engines.views[-1]
    assert [e.manifest.credential_id for e in latest.engines] == ["claude"]
    assert latest.manifest_revision == r.cloud.manifest_revision(TASK, 1)
    n = len(r.log)
    r.cloud.deny(TASK, 1, "revoked")
    r.feed_cloud()
    r.advance(1_000)
    assert "lease.deny" in [k for d, k in r.cloud.transcript if d == "out"]
    assert ("engines", "close") in r.log[n:]
    assert r.rt.open_run(TASK) is None


def test_LR_115_LR_118_renewal_grants_stream_a_fresh_snapshot(runner: Runner) -> None:
    r = runner
    wait = _start(r)
    r.advance(5_000)
    assert isinstance(r.results.get(wait), Answer)
    first = r.cloud.granted_lease(TASK, 1)
    assert first is not None
    stream = r.cloud.delivery_state(TASK, 1)["stream_id"]
    # Renewal fires 10 minutes before expiry (15-minute leases).
    r.advance(6 * 60_000)
    second = r.cloud.granted_lease(TASK, 1)
    assert second is not None
    assert second.lease_id != first.lease_id
    assert second.manifest_revision == first.manifest_revision
    assert second.manifest_digest == first.manifest_digest
    state = r.cloud.delivery_state(TASK, 1)
    assert state["stream_id"] != stream
    assert state["live"] is True
    assert r.cloud.delivery_errors == []
    assert r.env("web") == {"web": {"DATABASE_URL": "CANARY-db"}}
    assert r.engines.views[-1].lease_id == second.lease_id
