"""Fuzz harness: the runtime machine (registry + env replica + consumer gates).

``TestOneInput(data)``: the first bytes pick the construction (runner kind,
a Files port or not, the real env replica or none, timing overrides among
the defaults, ``0`` and short values); then up to :data:`MAX_STEPS` steps,
each one event a :class:`~_harness.DataProvider` chooses:

* host calls at any moment: ``BeginStart`` (recovery or not),
  ``AwaitLaunchReady``, ``AcquireHold``, ``ReleaseHold``, ``EndStart``,
  ``AbandonStart`` (with or without a hold), ``Interrupt``,
  ``InterruptStarts``, ``InterruptRecovery``, ``CloseAssignment`` (each
  reason), ``Recover`` (the journal's rows or made-up ones; only before
  the first start, and no start until it is answered: the boot sweep),
  ``ResumeRecovered``, ``RuntimeShutdown``, registry pass-throughs
  (``RefreshRequested``, ``LaunchFenceFailed``, ``BridgeAuthenticated``,
  ``SendFailed``), start/hold ids that do not exist;
* frames through ``HandleFrame``: lease frames (:func:`_drive.lease_frame`:
  grants answering a sent op, deny, unavailable, stale, changed, refresh
  results, junk, mutated) and env replica frames (:func:`_drive.env_frame`);
* completions: consumer work, recovered setups and journal commands
  succeeding or failing (``WorkDone``), Parameter Store reads in every
  outcome (:func:`_drive.read_outcome`; staged and legacy project values are
  in the fake store), timers firing (runtime, registry and replica ones);
* consumer gate failures: each port's ``open``/``close`` may be set to raise
  (an exception whose text holds a canary), the person port's Git hold may
  be unreadable.

Checked after every step (an ``AssertionError`` is a finding):

* ``handle`` contains no unexpected exception (``internal_errors`` of the
  runtime and its registry stay 0);
* the :class:`_drive.Checks` invariants (answers at most once and only to
  calls made, ids, timers, readers, no canary in any error or log text nor in
  any command's ``repr``, no install for a closed run);
* each abort signal is aborted at most once (RT-026); a Git hold is released
  at most once (RT-043);
* no consumer gate is opened for a run after its close was answered, nor
  after shutdown was answered;
* the invariant monitor (``leasegate.core.monitor``) sees every step with
  the port calls made during it; any violation is a finding.

At the end of the input: ``RuntimeShutdown``, then every pending completion
is answered and timers fire (bounded); afterwards every host call has been
answered and every reader closed.

Reference behavior: ``design/behaviors/runtime.md`` (RT-001 … RT-141),
``docs/runtime.md``. Run: ``python3 fuzz/runtime_harness.py [libFuzzer
flags] [corpus dirs]``; ``docs/fuzzing.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core" / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core" / "replica"))

import _harness
from _harness import DataProvider

with _harness.instrument(__name__ == "__main__", _harness.MACHINES):
    from lease_kit import ORG, FakeSsm
    from replica_kit import BOOT, legacy_envelope, sid, staged_envelope
    from runtime_kit import Boom, FakeGate, FakeMcp, FakePerson

    import _drive
    from leasegate.core._base import Command, Event
    from leasegate.core.registry import (
        BridgeAuthenticated,
        CleanupFailed,
        GateCallbackFailed,
        InstallFailed,
        LaunchFenceFailed,
        ReadFailed,
        ReadParameters,
        SendFailed,
        SendFrame,
        TimerFired,
    )
    from leasegate.core.replica import ReplicaManager
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
        CredentialRuntime,
        EndStart,
        Failed,
        HandleFrame,
        HoldInfo,
        Interrupt,
        InterruptRecovery,
        InterruptStarts,
        JournalRecord,
        JournalSettle,
        MemoryJournal,
        OwedCleanup,
        Recover,
        ReleaseHold,
        ResumeRecovered,
        RunSetup,
        RuntimeShutdown,
        WorkDone,
    )
    from leasegate.core.wire.credentials import (
        project_env_legacy_parameter,
        project_env_staged_parameter,
    )

#: How many actions :meth:`Harness.do` knows.
ACTIONS = 28

#: Most steps one input drives (the final drain comes on top).
MAX_STEPS = 80

_MON: Any = None
try:  # the invariant monitor
    import leasegate.core.monitor as _MON
except ImportError:  # pragma: no cover - depends on the tree's state
    _MON = None

_PROJECTS = ("proj-0", "proj-1")
_TIMINGS: tuple[int | None, ...] = (None, None, 0, 1_000)
_ADVANCE_MS: tuple[int, ...] = (1_000, 20_000, 30_000, 60_000, 3 * 60_000, 2 * 3_600_000)
_FAILURE = CredentialFailure(message="a credential consumer failed")


def _stage(ssm: FakeSsm) -> None:
    """Put staged (ids 1–3) and legacy (versions 1–2) project values in the store."""
    for project in _PROJECTS:
        for key in _drive.ENV_KEYS:
            for i in (1, 2, 3):
                name = project_env_staged_parameter(project, key, sid(i))
                if name is not None:
                    text = staged_envelope(project, key, sid(i), f"CANARY-env-{i}", org=ORG)
                    ssm.latest[name] = (1, text)
            legacy = project_env_legacy_parameter(project, key)
            if legacy is not None:
                for v in (1, 2):
                    ssm.values[(legacy, v)] = legacy_envelope(project, key, f"CANARY-legacy-{v}")


class Harness(_drive.MachineHarness):
    """One runtime with fake ports, its pending work and the checks."""

    actions = ACTIONS

    def __init__(self, fdp: DataProvider) -> None:
        super().__init__()
        conf = fdp.byte()
        kind = "task-machine" if conf & 1 else "owned"
        self.gate_log: list[tuple[str, ...]] = []
        self.engines = FakeGate("engines", self.gate_log)
        self.mcp = FakeMcp(self.gate_log)
        self.person = FakePerson(self.gate_log)
        self.files = FakeGate("files", self.gate_log) if conf & 2 else None
        self.replica = ReplicaManager(boot_id=BOOT, policy_epochs=(1,)) if conf & 4 else None
        self.port_log: Any = None
        self.monitor: Any = None
        ports: tuple[Any, Any, Any, Any] = (self.engines, self.mcp, self.person, self.files)
        if _MON is not None:
            self.port_log = _MON.PortLog()
            self.monitor = _MON.InvariantMonitor()
            ports = _MON.wrap_ports(
                engines=self.engines,
                mcp=self.mcp,
                person=self.person,
                files=self.files,
                log=self.port_log,
            )
        self.rt = CredentialRuntime(
            runner_kind=kind,  # type: ignore[arg-type]
            op_id_seed="fuzz",
            engines=ports[0],
            mcp=ports[1],
            person=ports[2],
            files=ports[3],
            replica=self.replica,
            launch_deadline_ms=fdp.pick(_TIMINGS),
            env_ready_timeout_ms=fdp.pick(_TIMINGS),
            shutdown_drain_ms=fdp.pick(_TIMINGS),
            recovery_retry_base_ms=fdp.pick(_TIMINGS),
        )
        # See what the runtime feeds its registry: a failed gate, cleanup or
        # install there disables the end-of-input reader check (Checks.reported).
        reg_handle = self.rt.registry.handle

        def registry_spy(event: Event) -> list[Command]:
            if isinstance(event, CleanupFailed | GateCallbackFailed | InstallFailed):
                self.checks.reported = True
            return reg_handle(event)

        self.rt.registry.handle = registry_spy  # type: ignore[method-assign]
        _stage(self.ssm)
        self.journal = MemoryJournal()
        self.work: list[ConsumerWork | RunSetup | JournalRecord | JournalSettle] = []
        self.starts: list[int] = []
        self.holds: list[HoldInfo] = []
        self.aborted: set[tuple[str, int]] = set()
        self.shut_answered = False
        self.shutdown_calls: set[int] = set()
        self.gate_seen = 0
        self.calls_label: dict[int, str] = {}
        self.began = False

    # -- feeding
    def feed(self, event: Event) -> list[Command]:
        out = self.rt.handle(event)
        calls = self.port_log.take() if self.port_log is not None else ()
        self.trace(event, out)
        assert self.rt.internal_errors == 0, "handle contained an unexpected exception"
        assert self.rt.registry.internal_errors == 0, "the registry contained an exception"
        self._check_gates()
        self.checks.step(out, self.now)
        if self.monitor is not None:
            found = _drive.monitor_findings(self.monitor.observe(event, out, calls), self.checks)
            assert not found, f"monitor: {found}"
        for cmd in out:
            self._track(cmd)
        return out

    def _check_gates(self) -> None:
        for entry in self.gate_log[self.gate_seen :]:
            if entry[1] == "open":
                task, epoch = entry[2], int(entry[3])
                assert not self.shut_answered, "open-after-close: a gate opened after shutdown"
                assert not self.checks.is_closed(task, epoch), (
                    "open-after-close: a consumer gate opened for a closed run"
                )
        self.gate_seen = len(self.gate_log)
        for hold in self.holds:
            assert getattr(hold.git, "released", 0) <= 1, "a Git hold released twice (RT-043)"

    def _track(self, cmd: Command) -> None:
        if isinstance(cmd, Answer | Failed):
            self.checks.answer(cmd.call_id)
            if isinstance(cmd, Answer) and isinstance(cmd.value, HoldInfo):
                self.holds.append(cmd.value)
            if cmd.call_id in self.closes:
                task, epoch, starts = self.closes.pop(cmd.call_id)
                if isinstance(cmd, Answer):
                    self.checks.closed(task, epoch, starts)
            if cmd.call_id in self.shutdown_calls:
                self.shut_answered = True
            begun = isinstance(cmd, Answer) and self.calls_label.get(cmd.call_id) == "begin"
            if begun and isinstance(cmd.value, int):
                self.starts.append(cmd.value)
        elif isinstance(cmd, Abort):
            key = (cmd.kind, cmd.id)
            assert key not in self.aborted, "a signal aborted twice (RT-026)"
            self.aborted.add(key)
        elif isinstance(cmd, ReadParameters):
            self.reads.append(cmd)
        elif isinstance(cmd, ConsumerWork | RunSetup | JournalRecord | JournalSettle):
            self.work.append(cmd)
        elif isinstance(cmd, SendFrame):
            self.track_send(cmd)

    def call_id(self, label: str) -> int:
        cid = super().call_id(label)
        self.calls_label[cid] = label
        return cid

    # -- completions
    def complete(self, cmd: Any, ok: bool) -> None:
        if isinstance(cmd, JournalRecord | JournalSettle) and ok:
            self.journal.apply(cmd)
        self.feed(WorkDone(now_ms=self.now, cmd_id=cmd.cmd_id, error=None if ok else _FAILURE))

    def _start_id(self, fdp: DataProvider) -> int:
        if self.starts and fdp.int_in_range(0, 7) != 7:
            return self.starts[-1 - fdp.int_in_range(0, len(self.starts) - 1)]
        return fdp.pick((-1, 0, 10_000, -10_000))

    # -- one step
    def act(self, action: int, fdp: DataProvider, task: str, epoch: int, now: int) -> None:
        """Action ``action`` (``0 … ACTIONS-1``) about run ``epoch`` of ``task``."""
        if action <= 1:
            if self._sweeping() or self._goes_back(task, epoch):
                return
            self.began = True
            self.checks.started(task, epoch)
            self.feed(self.start_event(BeginStart, fdp, "begin", task, epoch, now))
        elif action == 2:
            self.feed(
                AwaitLaunchReady(
                    now_ms=now, call_id=self.call_id("wait"), start_id=self._start_id(fdp)
                )
            )
        elif action == 3:
            self.feed(
                AcquireHold(now_ms=now, call_id=self.call_id("hold"), start_id=self._start_id(fdp))
            )
        elif action == 4:
            if self.holds:
                hold = fdp.pick(self.holds)
                self.feed(ReleaseHold(now_ms=now, hold_id=hold.hold_id))
            else:
                self.feed(ReleaseHold(now_ms=now, hold_id=fdp.pick((-1, 0, 5))))
        elif action == 5:
            which = fdp.int_in_range(0, 2)
            if which == 0:
                self.feed(EndStart(now_ms=now, start_id=self._start_id(fdp)))
            elif which == 1:
                hold_id = fdp.pick(self.holds).hold_id if self.holds and fdp.boolean() else None
                self.feed(
                    AbandonStart(
                        now_ms=now,
                        call_id=self.call_id("abandon"),
                        start_id=self._start_id(fdp),
                        hold_id=hold_id,
                    )
                )
            else:
                self.feed(Interrupt(now_ms=now, start_id=self._start_id(fdp)))
        elif action == 6:
            which = fdp.int_in_range(0, 2)
            if which == 2:
                self.feed(InterruptRecovery(now_ms=now, task_id=task))
            else:
                exact = epoch if which == 0 else None
                below = fdp.pick((None, epoch, epoch + 1))
                self.feed(InterruptStarts(now_ms=now, task_id=task, exact=exact, below=below))
        elif action == 7:
            cid = self.call_id("close")
            if self.rt.open_run(task) == epoch:
                self.closes[cid] = (task, epoch, self.checks.starts(task, epoch))
            reason = fdp.pick(("stop", "park", "teardown", "superseded"))
            self.feed(
                CloseAssignment(
                    now_ms=now, call_id=cid, task_id=task, run_epoch=epoch, reason=reason
                )
            )
        elif action <= 11:
            frame = self.next_lease_frame(fdp, now)
            self.feed(HandleFrame(now_ms=now, call_id=self.call_id("frame"), frame=frame))
        elif action <= 13:
            seq = 0
            if self.replica is not None:
                st = self.replica.read_status(task)
                seq = st.applied_through.sequence if st and st.applied_through else 0
            frame = _drive.env_frame(fdp, _drive.TASKS, _PROJECTS, seq)
            self.checks.tainted |= _drive.plain_canary(frame)
            self.checks.weak |= _drive.weak_secret(frame)
            self.feed(HandleFrame(now_ms=now, call_id=self.call_id("frame"), frame=frame))
        elif action <= 15:
            self.answer_read(fdp, now)
        elif action <= 18:
            if self.work:
                w = self.work.pop(fdp.int_in_range(0, len(self.work) - 1))
                self.complete(w, fdp.int_in_range(0, 4) != 4)
        elif action <= 20:
            self.fire_next()
        elif action == 21:
            self.advance(fdp.pick(_ADVANCE_MS))
        elif action == 22:
            self._toggle_ports(fdp)
        elif action == 23:
            # ``recover`` is the boot sweep: the host calls it before any
            # grant is asked for (catalog "Undefined", ``recoverAll``); a
            # sweep racing a live install is outside the contract.
            if self.began:
                return
            owed = self.journal.owed()
            if fdp.boolean() or not owed:
                owed = (OwedCleanup(task, epoch, fdp.pick(("stop", "recovery", "teardown"))),)
            admitted = ((task, fdp.int_in_range(0, 3)),) if fdp.boolean() else ()
            self.feed(
                Recover(now_ms=now, call_id=self.call_id("recover"), owed=owed, admitted=admitted)
            )
        elif action == 24:
            if self._sweeping() or self._goes_back(task, epoch):
                return
            self.began = True
            self.checks.started(task, epoch)
            self.feed(
                ResumeRecovered(now_ms=now, task_id=task, run_epoch=epoch, has_setup=fdp.boolean())
            )
        elif action == 25:
            which = fdp.int_in_range(0, 3)
            if which == 0:
                credentials = ("engine-0", "engine-1", "mcp-0")
                revisions = ("rev-0", None, "rev-1")
                self.feed(self.refresh_event(fdp, task, epoch, now, credentials, revisions))
            elif which == 1:
                self.feed(LaunchFenceFailed(now_ms=now, task_id=task, run_epoch=epoch))
            elif which == 2:
                self.feed(BridgeAuthenticated(now_ms=now))
            elif self.sends:
                self.feed(SendFailed(now_ms=now, cmd_id=fdp.pick(self.sends)))
        elif action == 26:
            if fdp.int_in_range(0, 3) == 3:
                self.shutdown()
        else:
            n = fdp.int_in_range(-60, 60)
            self.feed(
                fdp.pick(
                    (
                        TimerFired(now_ms=now, timer_id=n),
                        WorkDone(now_ms=now, cmd_id=n),
                        ReadFailed(now_ms=now, cmd_id=n, access_denied=False),
                    )
                )
            )

    def _goes_back(self, task: str, epoch: int) -> bool:
        registered = self.rt.registry.status(task) is not None
        return self.checks.goes_back(task, epoch, registered)

    def _sweeping(self) -> bool:
        """Whether a ``Recover`` call is still unanswered: the host starts
        nothing until the boot sweep is done (``recoverAll`` runs "before
        any grant is asked for")."""
        return any(self.calls_label.get(c) == "recover" for c in self.checks.calls)

    def _toggle_ports(self, fdp: DataProvider) -> None:
        port = fdp.pick((self.engines, self.mcp, self.person, self.files))
        if port is None:
            return
        which = fdp.int_in_range(0, 2)
        if which == 0:
            port.fail_open = not port.fail_open
        elif which == 1:
            port.fail_close = None if port.fail_close else Boom("CANARY-close")
        elif isinstance(port, FakePerson):
            port.unreadable = not port.unreadable

    def shutdown(self) -> None:
        cid = self.call_id("shutdown")
        self.shutdown_calls.add(cid)
        self.feed(RuntimeShutdown(now_ms=self.now, call_id=cid))

    # -- the end of an input
    def drain(self) -> None:
        """Shutdown, release every hold, complete everything pending, fire
        timers; then every host call has been answered and (when nothing
        failed, see :class:`_drive.Checks`) every reader closed."""
        for port in (self.engines, self.mcp, self.person, self.files):
            if port is not None:
                port.fail_open = False
                port.fail_close = None
        self.shutdown()
        # The host's part: every hold it acquired is released (a cleanup
        # joins the release of the holds it aborted, RT-043).
        for hold in self.holds:
            self.feed(ReleaseHold(now_ms=self.now, hold_id=hold.hold_id))
        for _ in range(300):
            if self.reads:
                r = self.reads.pop(0)
                self.feed(ReadFailed(now_ms=self.now, cmd_id=r.cmd_id, access_denied=False))
            elif self.work:
                self.complete(self.work.pop(0), True)
            elif self.checks.timers:
                self.fire_next()
            else:
                break
        self.check_drained()


def TestOneInput(data: bytes) -> None:
    """Drive one runtime with the events ``data`` chooses; raise on a finding."""
    fdp = DataProvider(data)
    _drive.run(Harness(fdp), fdp, MAX_STEPS)


if __name__ == "__main__":
    _harness.main(TestOneInput)
