"""``CredentialRuntime.startup_status``: a pure, read-only snapshot of one start.

Hosts build their launch-ready diagnosis from it (docs/runtime.md, "Queries");
reading it emits no command and changes no state, so feeding the same events
with or without the query yields the same commands.
"""

from __future__ import annotations

from runtime_kit import TASK, RtDriver

from leasegate.core.runtime import StartupStatus


def _status(d: RtDriver, start: int) -> StartupStatus:
    got = d.rt.startup_status(start)
    assert got is not None
    return got


def test_startup_status_follows_a_start_from_begin_to_the_env_wait_to_usable() -> None:
    d = RtDriver(real_replica=True)
    s = d.begin()
    w = d.wait(s)
    before = len(d.out)
    st = _status(d, s)
    assert len(d.out) == before  # the query emits nothing
    assert st.start_id == s
    assert (st.assignment.task_id, st.assignment.run_epoch) == (TASK, 1)
    assert st.live
    assert st.aborted is None
    assert st.startup == "done"
    assert st.launch_waits == 1
    assert not st.env_waiting
    assert not st.gate_open
    assert st.registry is not None
    assert st.registry.installed_revision is None
    assert st.registry.pending_op is not None  # the lease.request is in flight
    assert d.real is not None
    assert st.replica_boot_id == d.real.boot_id
    d.grant()
    st = _status(d, s)
    assert st.env_waiting  # granted; the env snapshot is not committed yet
    assert not st.gate_open
    d.snapshot(TASK, 1)
    assert d.value(w).assignment.run_epoch == 1
    st = _status(d, s)
    assert not st.env_waiting
    assert st.gate_open
    assert st.launch_waits == 0
    assert st.registry is not None
    assert st.registry.phase == "usable"


def test_startup_status_of_an_unknown_start_is_none_and_a_replaced_start_is_not_live() -> None:
    d = RtDriver()
    assert d.rt.startup_status(-12345) is None
    first = d.begin()
    d.begin(TASK, 2)  # takeover: the first start is aborted
    st = _status(d, first)
    assert not st.live
    assert st.aborted is not None
    assert st.registry is None  # the registry now holds run 2, not the start's run
    assert st.replica_boot_id is None  # no replica configured


def test_startup_status_changes_no_command_the_runtime_emits() -> None:
    def drive(query: bool) -> list[str]:
        d = RtDriver(real_replica=True)
        s = d.begin()
        if query:
            d.rt.startup_status(s)
        d.wait(s)
        if query:
            d.rt.startup_status(s)
        d.grant()
        if query:
            d.rt.startup_status(s)
        d.snapshot(TASK, 1)
        return [repr(c) for c in d.out]

    assert drive(True) == drive(False)
