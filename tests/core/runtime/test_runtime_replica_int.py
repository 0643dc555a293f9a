"""(INT) entries with the real lease registry and the real env replica.

RT-009, RT-062, RT-118 and RT-123's asynchronous half: the replica is
``leasegate.core.replica.ReplicaManager``, its value reads go through the
grant's reader (the registry's ``ProjectValueRead(install_cmd_id)``) to the
fake Parameter Store.
"""

from __future__ import annotations

from runtime_kit import TASK, RtDriver, all_texts, of

from leasegate.core.registry import ProjectValueRead
from leasegate.core.runtime import RuntimeShutdown, SendAck

P0 = ("proj-0",)


def _open(d: RtDriver) -> int:
    s = d.begin()
    w = d.wait(s)
    d.grant()
    acks = d.snapshot(TASK, 1)
    assert [a.ok for a in acks] == [True, True, True], acks
    assert d.value(w).assignment.run_epoch == 1
    return s


def test_RT_118_INT_serial_dispatch_completes_the_install() -> None:
    d = RtDriver(real_replica=True)
    s = d.begin()
    w = d.wait(s)
    g = d.grant()
    assert d.value(g) is True  # answered while the install waits for env
    assert d.result(w) is None
    d.snapshot(TASK, 1)  # each frame answered before the next is fed
    assert d.value(w).assignment.run_epoch == 1
    snap = d.rt.env_snapshot(TASK, 1, P0)
    assert snap is not None
    assert "CANARY" not in repr(snap)
    assert "CANARY" not in all_texts(d.out)
    reads = d.reg_calls(ProjectValueRead)
    assert reads
    assert all(r.install_cmd_id is not None for r in reads)  # the grant's own reader


def test_RT_009_INT_activation_pending_until_the_new_grant_activates() -> None:
    d = RtDriver(real_replica=True)
    _open(d)
    d.hold_reads = True
    d.begin()  # same-run re-request; a renewal grant follows
    d.grant(lease_id="lease-2")
    assert d.pending_reads  # accepted, its credentials being read: not installed
    n = len(d.out)
    d.frame(
        {
            "kind": "env.replica.v1.begin",
            "opId": "op-x",
            "taskId": TASK,
            "runEpoch": 1,
            "runnerBootId": "boot1",
            "streamId": "S1",
            "attemptId": "A9",
            "projectIds": ["proj-0"],
        }
    )
    acks = [c.frame for c in of(d.out[n:], SendAck)]
    assert [(a.ok, a.code) for a in acks] == [(False, "activation_pending")]
    d.finish_reads()  # the install activates the new reader
    acks = d.snapshot(TASK, 1, n=2)
    assert all(a.ok for a in acks)


def test_RT_062_INT_renewal_snapshot_not_served_before_its_gate_opens() -> None:
    d = RtDriver(real_replica=True)
    _open(d)
    assert d.rt.env_snapshot(TASK, 1, P0) is not None
    d.hold_work = lambda c: c.op == "install" and c.consumer == "engines"
    d.begin()
    d.grant(lease_id="lease-2")
    d.snapshot(TASK, 1, n=2)  # committed through the renewal's reader (generation 2)
    assert d.real is not None
    assert d.real.reader_generation(TASK, 1) == 2
    assert d.rt.status(TASK).served_generation == 1  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is None  # not served under grant A
    d.hold_work = lambda c: False
    d.finish_work()
    assert d.rt.status(TASK).served_generation == 2  # type: ignore[union-attr]
    assert d.rt.env_snapshot(TASK, 1, P0) is not None


def test_RT_123_INT_shutdown_while_a_frame_reads_sends_no_ack() -> None:
    d = RtDriver(real_replica=True)
    s = d.begin()
    d.grant()
    d.hold_reads = True
    n = len(d.out)
    d.frame(
        {
            "kind": "env.replica.v1.begin",
            "opId": "op-b",
            "taskId": TASK,
            "runEpoch": 1,
            "runnerBootId": "boot1",
            "streamId": "S1",
            "attemptId": "A1",
            "projectIds": ["proj-0"],
        }
    )
    d.stage("proj-0", "API_KEY", "00000001-0000-4000-8000-000000000000", "CANARY-v")
    rec = {
        "key": "API_KEY",
        "head": {
            "revision": 1,
            "generation": 1,
            "tombstone": False,
            "valueRef": {"kind": "staged", "stagingId": "00000001-0000-4000-8000-000000000000"},
        },
        "binding": None,
        "policyEpoch": 1,
        "listingGeneration": 0,
    }
    c = d.frame(
        {
            "kind": "env.replica.v1.page",
            "opId": "op-p",
            "taskId": TASK,
            "runEpoch": 1,
            "runnerBootId": "boot1",
            "streamId": "S1",
            "attemptId": "A1",
            "projectId": "proj-0",
            "after": None,
            "recordVersion": 1,
            "records": [rec],
            "complete": True,
        }
    )
    assert d.result(c) is None  # the page's value read is pending
    assert "replica-frame" in d.rt.tracked()
    acks_before = len(of(d.out[n:], SendAck))
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=1))
    d.finish_reads()
    assert len(of(d.out[n:], SendAck)) == acks_before  # no ack after shutdown
    assert d.result(c) is not None
    assert s
