"""The reference cloud's env replica stream, driven against the real replica core.

The cloud (``leasegate.testing.ReferenceCloud``) and the env replica
(``leasegate.core.replica.ReplicaManager``) are wired synchronously: every
frame the cloud queues is fed to the replica, every ack goes back to the
cloud, every value read is answered from the in-memory parameter store the
cloud wrote to. No sleeps: the cloud's clock is a ManualClock.
"""

from __future__ import annotations

from typing import Any

from leasegate.core import Secret
from leasegate.core.replica import (
    ActivateAssignment,
    EnvFrameReceived,
    ExpectActivation,
    ReadLegacyValue,
    ReadStagedValue,
    ReplicaManager,
    SendAck,
    ValueReadCompleted,
)
from leasegate.core.wire import decode_frame, encode_frame
from leasegate.core.wire.credentials import (
    project_env_legacy_parameter,
    project_env_staged_parameter,
)
from leasegate.core.wire.env import (
    BindingOmit,
    EnvAck,
    EnvApply,
    EnvBegin,
    EnvCommit,
    EnvPage,
    Installed,
    Withheld,
)
from leasegate.core.wire.lease import LeaseGrant, LeaseRequest
from leasegate.testing import ManualClock, MemoryParameterStore, ReferenceCloud

BOOT = "boot-1"
TASK = "task-1"


class Wire:
    """A synchronous harness: cloud <-> replica, recording every frame."""

    def __init__(self, *, page_size: int = 100) -> None:
        self.clock = ManualClock()
        self.store = MemoryParameterStore()
        self.cloud = ReferenceCloud(ssm=self.store, clock=self.clock, page_size=page_size)
        self.replica = ReplicaManager(boot_id=BOOT)
        self.frames: list[Any] = []  # decoded cloud -> runner frames
        self.acks: list[EnvAck] = []
        self.cloud.add_org("org1")
        self.cloud.add_user("org1", "alice")
        self.cloud.add_project("org1", "proj-a")
        self.cloud.add_project("org1", "proj-b")
        self.cloud.add_engine_credential("alice", "eng1", env={"API_KEY": "k1"})

    def assign_and_grant(self, projects: tuple[str, ...] = ("proj-a", "proj-b")) -> LeaseGrant:
        self.cloud.assign(TASK, 1, "org1", "alice", projects, runner_boot_id=BOOT)
        self.cloud.receive(encode_frame(LeaseRequest(op_id="lease-1-x", task_id=TASK, run_epoch=1)))
        out = self.cloud.take_outgoing()
        grant = decode_frame(out[0])
        assert isinstance(grant, LeaseGrant)
        self.frames.append(grant)
        self._deliver(out[1:])
        return grant

    def activate(self, reader: object) -> None:
        self.feed(
            ActivateAssignment(
                now_ms=self.clock(), task_id=TASK, run_epoch=1, org_id="org1", reader=reader
            )
        )

    def feed(self, event: Any) -> None:
        todo = list(self.replica.handle(event))
        while todo:
            cmd = todo.pop(0)
            if isinstance(cmd, SendAck):
                self.acks.append(cmd.ack)
                self.cloud.receive(encode_frame(cmd.ack))
            elif isinstance(cmd, ReadStagedValue):
                name = project_env_staged_parameter(cmd.project_id, cmd.key, cmd.staging_id)
                got = self.store.get_parameters(Names=[name], WithDecryption=True)
                raw = got["Parameters"][0]["Value"] if got["Parameters"] else None
                todo.extend(
                    self.replica.handle(
                        ValueReadCompleted(
                            now_ms=self.clock(),
                            cmd_id=cmd.cmd_id,
                            raw=None if raw is None else Secret(raw),
                        )
                    )
                )
            elif isinstance(cmd, ReadLegacyValue):
                name = project_env_legacy_parameter(cmd.project_id, cmd.key)
                got = self.store.get_parameters(
                    Names=[f"{name}:{cmd.version}"], WithDecryption=True
                )
                p = got["Parameters"][0] if got["Parameters"] else None
                todo.extend(
                    self.replica.handle(
                        ValueReadCompleted(
                            now_ms=self.clock(),
                            cmd_id=cmd.cmd_id,
                            raw=None if p is None else Secret(p["Value"]),
                            version=None if p is None else p["Version"],
                        )
                    )
                )

    def _deliver(self, values: list[Any]) -> None:
        for value in values:
            frame = decode_frame(value)
            assert not hasattr(frame, "reason"), frame
            self.frames.append(frame)
            self.feed(EnvFrameReceived(now_ms=self.clock(), frame=value))

    def pump(self, rounds: int = 1000) -> None:
        """Deliver until the cloud has nothing more to send now."""
        for _ in range(rounds):
            out = self.cloud.take_outgoing()
            if not out:
                return
            self._deliver(out)
        raise AssertionError("the cloud never went quiet")

    def view_values(self, *projects: str) -> dict[str, dict[str, str | None]]:
        view = self.replica.read_view(TASK, 1, list(projects))
        assert view is not None
        return {
            p.project_id: {
                e.state.key: None if e.value is None else e.value.reveal() for e in p.entries
            }
            for p in view.projects
        }

    def env_frames(self, cls: type) -> list[Any]:
        return [f for f in self.frames if isinstance(f, cls)]


def test_ER_028_ER_092_snapshot_begin_pages_commit_installs_values() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "A_ONE", "v1")
    w.cloud.set_env_value("proj-a", "B_TWO", "v2")
    w.cloud.set_env_value("proj-b", "C", "v3")
    w.activate(reader=object())
    w.assign_and_grant()
    w.pump()
    begins = w.env_frames(EnvBegin)
    pages = w.env_frames(EnvPage)
    commits = w.env_frames(EnvCommit)
    assert len(begins) == 1
    assert begins[0].project_ids == ("proj-a", "proj-b")
    assert [p.project_id for p in pages] == ["proj-a", "proj-b"]
    assert all(p.complete and p.after is None for p in pages)
    assert [r.key for r in pages[0].records] == ["A_ONE", "B_TWO"]
    assert len(commits) == 1
    commit = commits[0]
    assert commit.high_water.sequence == 0
    assert commit.high_water.stream_id == begins[0].stream_id
    assert [(v.project_id, v.record_version) for v in commit.versions] == [
        ("proj-a", 2),
        ("proj-b", 1),
    ]
    assert all(a.ok for a in w.acks)
    assert w.replica.is_ready(TASK, 1)
    assert w.view_values("proj-a", "proj-b") == {
        "proj-a": {"A_ONE": "v1", "B_TWO": "v2"},
        "proj-b": {"C": "v3"},
    }
    assert w.cloud.delivery_state(TASK, 1)["live"] is True


def test_ER_018_activation_pending_is_retried_after_the_delay() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "K", "v")
    # The runner accepted a grant but has not activated the replica yet.
    w.feed(ExpectActivation(now_ms=w.clock(), task_id=TASK, run_epoch=1))
    w.assign_and_grant()
    first = w.env_frames(EnvBegin)
    assert len(first) == 1
    assert w.acks[-1].code == "activation_pending"
    # Nothing is resent before the delay.
    w.clock.advance(w.cloud.retry_delay_ms - 1)
    assert w.cloud.take_outgoing() == []
    # After the delay the same frame (same opId) is resent.
    w.clock.advance(1)
    out = w.cloud.take_outgoing()
    assert len(out) == 1
    assert decode_frame(out[0]) == first[0]
    w._deliver(out)
    assert w.acks[-1].code == "activation_pending"
    # Activation settles the pending token; the next resend goes through.
    w.activate(reader=object())
    w.clock.advance(w.cloud.retry_delay_ms)
    w.pump()
    assert w.acks[-1].ok
    assert w.acks[-1].phase == "complete"
    assert w.view_values("proj-a", "proj-b") == {"proj-a": {"K": "v"}, "proj-b": {}}


def test_ER_054_ER_065_live_applies_carry_ordered_delivery_cursors() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "K", "v1")
    w.activate(reader=object())
    w.assign_and_grant()
    w.pump()
    stream = w.env_frames(EnvBegin)[0].stream_id
    w.cloud.set_env_value("proj-a", "K", "v2")
    w.cloud.set_env_value("proj-a", "NEW", "n1")
    w.cloud.set_env_value("proj-b", "OTHER", "o1")
    w.cloud.delete_env_value("proj-a", "K")
    w.pump()
    applies = w.env_frames(EnvApply)
    assert [a.delivery.sequence for a in applies] == [1, 2, 3, 4]
    assert {a.delivery.stream_id for a in applies} == {stream}
    assert all(a.attempt_id is None for a in applies)
    assert [(a.project_id, a.record_version) for a in applies] == [
        ("proj-a", 2),
        ("proj-a", 3),
        ("proj-b", 1),
        ("proj-a", 4),
    ]
    assert all(a.ok for a in w.acks)
    status = w.replica.read_status(TASK)
    assert status is not None
    assert status.applied_through is not None
    assert status.applied_through.sequence == 4
    values = w.view_values("proj-a", "proj-b")
    assert values == {"proj-a": {"K": None, "NEW": "n1"}, "proj-b": {"OTHER": "o1"}}
    view = w.replica.read_view(TASK, 1, ["proj-a", "proj-b"])
    assert view is not None
    k = next(e for e in view.projects[0].entries if e.state.key == "K")
    assert k.materialization == Withheld(reason="tombstone")


def test_ER_076_ER_078_changed_deleted_and_restored_values_stay_reachable() -> None:
    w = Wire()
    w.activate(reader=object())
    w.assign_and_grant(("proj-a",))
    w.pump()
    w.cloud.set_env_value("proj-a", "K", "one")
    w.cloud.set_env_value("proj-a", "K", "two")
    w.cloud.delete_env_value("proj-a", "K")
    w.cloud.set_env_value("proj-a", "K", "three")
    w.pump()
    heads = [(a.state.head.revision, a.state.head.generation) for a in w.env_frames(EnvApply)]
    assert heads == [(1, 1), (1, 2), (2, 3), (3, 4)]
    # Every apply advanced (none absorbed): the results are the frame's states.
    applied = [a for a in w.acks if a.phase == "applied"]
    assert all(a.ok for a in applied)
    assert [a.result.state for a in applied] == [f.state for f in w.env_frames(EnvApply)]
    assert w.view_values("proj-a") == {"proj-a": {"K": "three"}}


def test_ER_042_pages_chain_after_keys_in_ascending_order() -> None:
    w = Wire(page_size=2)
    for key in ["E", "A", "C", "B", "D"]:
        w.cloud.set_env_value("proj-a", key, key.lower())
    w.activate(reader=object())
    w.assign_and_grant(("proj-a",))
    w.pump()
    pages = w.env_frames(EnvPage)
    assert [[r.key for r in p.records] for p in pages] == [["A", "B"], ["C", "D"], ["E"]]
    assert [p.after for p in pages] == [None, "B", "D"]
    assert [p.complete for p in pages] == [False, False, True]
    assert all(a.ok for a in w.acks)
    assert w.view_values("proj-a") == {"proj-a": {k: k.lower() for k in "ABCDE"}}


def test_ER_099_legacy_values_are_read_by_version() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "OLD", "legacy-value", legacy=True)
    w.activate(reader=object())
    w.assign_and_grant(("proj-a",))
    w.pump()
    page = w.env_frames(EnvPage)[0]
    assert page.records[0].head.value_ref is not None
    assert w.view_values("proj-a") == {"proj-a": {"OLD": "legacy-value"}}
    result = next(a for a in w.acks if a.phase == "page").results
    assert result is not None
    assert result[0].materialization == Installed()


def test_ER_060_reader_change_makes_the_cloud_resync_on_a_new_stream() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "K", "v1")
    w.activate(reader=object())
    w.assign_and_grant(("proj-a",))
    w.pump()
    old_stream = w.env_frames(EnvBegin)[0].stream_id
    # A new grant's reader replaces the old one (ER-010): live applies are refused.
    w.activate(reader=object())
    w.cloud.set_env_value("proj-a", "K", "v2")
    w.pump()
    assert w.acks[-1].code == "reader_changed"
    w.clock.advance(w.cloud.retry_delay_ms)
    w.pump()
    begins = w.env_frames(EnvBegin)
    assert len(begins) == 2
    assert begins[1].stream_id != old_stream
    assert w.acks[-1].ok
    assert w.acks[-1].phase == "complete"
    assert w.view_values("proj-a") == {"proj-a": {"K": "v2"}}
    assert w.cloud.delivery_errors == []


def test_ER_027_boot_mismatch_stops_delivery_for_the_run() -> None:
    w = Wire()
    w.cloud.assign(TASK, 1, "org1", "alice", ("proj-a",), runner_boot_id="other-boot")
    w.cloud.receive(encode_frame(LeaseRequest(op_id="op-1", task_id=TASK, run_epoch=1)))
    out = w.cloud.take_outgoing()
    w._deliver(out[1:])
    assert w.acks[-1].code == "runner_boot_mismatch"
    assert [(e.task_id, e.code) for e in w.cloud.delivery_errors] == [
        (TASK, "runner_boot_mismatch")
    ]
    w.clock.advance(10_000)
    assert w.cloud.take_outgoing() == []


def test_ER_077_ER_095_binding_changes_are_metadata_advances() -> None:
    w = Wire()
    w.cloud.set_env_value("proj-a", "K", "v1", binding=BindingOmit())
    w.activate(reader=object())
    w.assign_and_grant(("proj-a",))
    w.pump()
    view = w.replica.read_view(TASK, 1, ["proj-a"])
    assert view is not None
    assert view.projects[0].entries[0].materialization == Withheld(reason="binding_omits")
    assert view.projects[0].entries[0].value is None
    # Same value, binding cleared: one metadata advance (revision + 1, generation kept) ...
    w.cloud.set_env_value("proj-a", "K", "v2")
    w.pump()
    heads = [
        (a.state.head.revision, a.state.head.generation, a.state.binding)
        for a in w.env_frames(EnvApply)
    ]
    assert heads == [(1, 2, BindingOmit()), (2, 2, None)]
    assert all(a.ok for a in w.acks)
    assert w.view_values("proj-a") == {"proj-a": {"K": "v2"}}
