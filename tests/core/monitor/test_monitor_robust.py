"""The monitor never raises, never shows a secret, and its port wrappers are faithful.

* ``observe`` on garbage (hypothesis): events and commands of every type
  with fields of any type, raw non-event objects, port calls and junk in
  the port-call list: it returns a list, never raises, and contains no
  internal error.
* Canary: secrets (``CANARY``) placed in every secret-carrying position,
  and leaked into error texts so that ``secret-in-error`` fires: no
  violation's message or repr, and no monitor repr, contains one.
* ``wrap_ports``: every call recorded in order (also on raise, which is
  re-raised), results as agreed, other attributes delegated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasegate.core import Secret
from leasegate.core.monitor import (
    InvariantMonitor,
    MonitorRecorder,
    PortCall,
    PortLog,
    ViewStamp,
    wrap_ports,
)
from leasegate.core.registry import (
    Assignment,
    CallDone,
    CancelTimer,
    CloseReader,
    FrameReceived,
    OpenReader,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    ReportError,
    SendFrame,
    SsmParameter,
    StartTimer,
    TaskView,
    TimerFired,
)
from leasegate.core.runtime import (
    AbandonStart,
    Abort,
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialFailure,
    CredentialUnavailable,
    Failed,
    HandleFrame,
    JournalRecord,
    JournalSettle,
    Log,
    Notify,
    Recover,
    ReleaseHold,
    ResumeRecovered,
    RunSetup,
    RuntimeShutdown,
    SendAck,
    WorkDone,
)

EVENTS: list[type] = [
    BeginStart,
    AwaitLaunchReady,
    AcquireHold,
    ReleaseHold,
    AbandonStart,
    CloseAssignment,
    HandleFrame,
    FrameReceived,
    Recover,
    ResumeRecovered,
    RuntimeShutdown,
    WorkDone,
    TimerFired,
    ReadCompleted,
    ReadFailed,
]
COMMANDS: list[type] = [
    Answer,
    Failed,
    Abort,
    ConsumerWork,
    RunSetup,
    Notify,
    SendAck,
    Log,
    JournalRecord,
    JournalSettle,
    SendFrame,
    StartTimer,
    CancelTimer,
    OpenReader,
    ReadParameters,
    CloseReader,
    ReportError,
    CallDone,
]

_KINDS = [
    "lease.grant.v1",
    "lease.stale",
    "env.replica.v1.page",
    "env.replica.v1.commit",
    "lease.deny",
]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.integers(),
    st.floats(allow_nan=True),
    st.sampled_from(["t", "task-1", "x", "", "/uai/projects/p/env-values/a/b", "stop"]),
    st.text(max_size=8),
    st.builds(Secret, st.text(max_size=12)),
)


def _junk() -> st.SearchStrategy[Any]:
    return st.recursive(
        _scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(
                st.sampled_from(
                    ["kind", "taskId", "runEpoch", "minRevision", "lease", "leaseId", "value"]
                ),
                st.one_of(inner, st.sampled_from(_KINDS)),
                max_size=4,
            ),
            st.builds(Assignment, inner, inner),
            st.builds(CredentialFailure, message=inner, causes=st.lists(inner).map(tuple)),
            st.builds(ViewStamp, inner, inner, inner, inner, inner, inner),
        ),
        max_leaves=4,
    )


def _instance(cls: type) -> st.SearchStrategy[Any]:
    fields = {f.name: _junk() for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


_events = st.one_of(st.sampled_from(EVENTS).flatmap(_instance), _junk())
_commands = st.lists(st.one_of(st.sampled_from(COMMANDS).flatmap(_instance), _junk()), max_size=5)
_calls = st.lists(
    st.one_of(
        st.builds(
            PortCall,
            st.sampled_from(["engines", "mcp", "person", "files"]),
            st.sampled_from(["open", "close", "install", "forget", "hold_git", "leased_run"]),
            _junk(),
            _junk(),
            _junk(),
            _junk(),
        ),
        _junk(),
    ),
    max_size=5,
)
_steps = st.lists(st.tuples(_events, _calls, _commands), max_size=25)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_steps)
def test_observe_never_raises_on_garbage(steps: list[tuple[Any, Any, Any]]) -> None:
    mon = InvariantMonitor()
    for ev, calls, cmds in steps:
        got = mon.observe(ev, cmds, calls)
        assert isinstance(got, list)
    assert mon.internal_errors == 0
    assert mon.steps == len(steps)
    repr(mon)


def test_observe_accepts_non_sequences() -> None:
    mon = InvariantMonitor()
    assert mon.observe(None, None, None) == []  # type: ignore[arg-type]
    assert mon.observe(object(), "abc", b"xy") == []  # type: ignore[arg-type]
    assert mon.internal_errors == 0


# ---------------------------------------------------------------------------
# Canary


def _leak_steps(secret: str) -> list[tuple[Any, list[Any], list[Any]]]:
    """A trace whose steps carry ``secret`` in every secret position, then leak it."""
    frame = {
        "kind": "lease.grant.v1",
        "opId": "op",
        "lease": {
            "leaseId": "L1",
            "taskId": "task-1",
            "runEpoch": 1,
            "sessions": [{"secretAccessKey": secret, "sessionToken": secret + "-tok"}],
        },
    }
    env = '{"v":2,"kind":"project-env","key":"K","value":"' + secret + '-env"}'
    param = SsmParameter(name="/uai/x", type="SecureString", value=Secret(env), version=1)
    fail = CredentialFailure(message="x " + secret, causes=(CredentialFailure(message=secret),))
    return [
        (HandleFrame(now_ms=1, call_id=1, frame=frame), [], [Answer(call_id=1, value=True)]),
        (ReadCompleted(now_ms=1, cmd_id=2, parameters=(param,)), [], []),
        (
            WorkDone(now_ms=1, cmd_id=3, error=CredentialFailure(message=secret)),
            [],
            [
                Log(message="[credentials] " + secret + "-env"),
                Failed(call_id=4, error=fail),
                Abort(kind="start", id=-1, reason=fail),
                ReportError(assignment=Assignment("task-1", 1), message=secret),
                CallDone(call_id=5, error=secret + "-tok"),
            ],
        ),
    ]


@pytest.mark.parametrize("secret", ["CANARY-abcdef", "CANARY-" + "z" * 300, "CANARY-ünï-\u2028"])
def test_no_secret_in_any_violation_message_or_repr(secret: str) -> None:
    mon = InvariantMonitor()
    for ev, calls, cmds in _leak_steps(secret):
        mon.observe(ev, cmds, calls)
    assert [v.property for v in mon.violations] == ["secret-in-error"]
    assert "CANARY" not in repr(mon.violations)
    assert "CANARY" not in repr(mon)
    assert all("CANARY" not in v.message for v in mon.violations)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    secret=st.text(min_size=1, max_size=20).map(lambda s: "CANARY" + s),
    steps=st.lists(st.tuples(_events, _calls, _commands), max_size=8),
)
def test_no_canary_in_violations_whatever_else_happens(
    secret: str, steps: list[tuple[Any, Any, Any]]
) -> None:
    mon = InvariantMonitor()
    for ev, calls, cmds in _leak_steps(secret) + steps:
        mon.observe(ev, cmds, calls)
    # Junk steps never carry "CANARY" in a non-secret position (task ids, ids).
    assert all("CANARY" not in v.message for v in mon.violations)
    assert "CANARY" not in repr(mon.violations)
    assert mon.internal_errors == 0


def test_short_secrets_are_not_searched() -> None:
    mon = InvariantMonitor()
    param = SsmParameter(name="/uai/x", type="SecureString", value=Secret("run"), version=1)
    mon.observe(ReadCompleted(now_ms=1, cmd_id=2, parameters=(param,)), [], [])
    assert mon.observe(WorkDone(now_ms=1, cmd_id=3), [Log(message="task t run 1")], []) == []


# ---------------------------------------------------------------------------
# wrap_ports


class _Port:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.extra = "delegated"
        self.record = Assignment("t", 1)

    def open(self, assignment: Any, view: Any) -> None:
        self.seen.append(("open", assignment))

    def close(self, assignment: Any) -> None:
        self.seen.append(("close", assignment))
        if assignment.run_epoch == 99:
            raise CredentialUnavailable("fixed text")

    def forget(self, assignment: Any) -> None:
        self.seen.append(("forget", assignment))

    def install(self, request: Any) -> None:
        self.seen.append(("install", request))

    def leased_run(self, task_id: str) -> Any:
        self.seen.append(("leased_run", task_id))
        return self.record

    def hold_git(self, assignment: Any) -> Any:
        self.seen.append(("hold_git", assignment))
        return {"token": Secret("CANARY-git")}


def _view() -> TaskView:
    return TaskView(
        assignment=Assignment("t", 1),
        lease_id="L9",
        manifest_revision=7,
        manifest_digest="d",
        expires_at=123,
        project_ids=(),
        engines=(),
        mcp=(),
        github=None,
        ssh=None,
    )


def test_wrap_ports_records_every_call_in_order_and_delegates() -> None:
    log = PortLog()
    e, m, p, f = _Port(), _Port(), _Port(), _Port()
    we, wm, wp, wf = wrap_ports(engines=e, mcp=m, person=p, files=f, log=log)
    a = Assignment("t", 1)
    we.open(a, _view())
    wm.install(type("R", (), {"assignment": a})())
    assert wm.leased_run("t") == Assignment("t", 1)
    hold = wp.hold_git(a)
    wf.close(a)
    we.forget(a)
    with pytest.raises(CredentialUnavailable):
        wp.close(Assignment("t", 99))
    assert we.extra == "delegated"
    assert hold["token"] == Secret("CANARY-git")
    calls = log.take()
    assert calls == [
        PortCall("engines", "open", "t", 1, False, ViewStamp("t", 1, "L9", 7, "d", 123)),
        PortCall("mcp", "install", "t", 1, False, None),
        PortCall("mcp", "leased_run", "t", None, False, Assignment("t", 1)),
        PortCall("person", "hold_git", "t", 1, False, None),
        PortCall("files", "close", "t", 1, False, None),
        PortCall("engines", "forget", "t", 1, False, None),
        PortCall("person", "close", "t", 99, True, None),
    ]
    assert log.take() == []
    assert [s[0] for s in e.seen] == ["open", "forget"]
    assert "CANARY" not in repr(calls)
    assert wrap_ports(engines=e, mcp=m, person=p, log=log)[3] is None


def test_monitor_recorder_feeds_the_monitor_with_the_logs_calls() -> None:
    log = PortLog()
    mon = InvariantMonitor()
    rec = MonitorRecorder(mon, log)
    we, _, _, _ = wrap_ports(engines=_Port(), mcp=_Port(), person=_Port(), log=log)
    rec.record(RuntimeShutdown(now_ms=1, call_id=1), [])
    we.open(Assignment("t", 1), _view())
    rec.record(WorkDone(now_ms=1, cmd_id=1), [])
    assert [v.property for v in mon.violations] == ["open-after-close"]
    assert log.calls == []
    assert mon.steps == 2


def test_view_stamp_of_anything() -> None:
    assert ViewStamp.of(None) == ViewStamp("", -1, "", -1, "", -1)
    assert ViewStamp.of(_view()) == ViewStamp("t", 1, "L9", 7, "d", 123)
    # fields of the wrong type are not taken
    odd = type("V", (), {"assignment": Assignment(5, "x"), "lease_id": 3, "expires_at": True})()  # type: ignore[arg-type]
    assert ViewStamp.of(odd) == ViewStamp("", -1, "", -1, "", -1)
