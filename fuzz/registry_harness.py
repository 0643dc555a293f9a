"""Fuzz harness: the lease registry machine driven by a chosen event sequence.

``TestOneInput(data)``: the first byte picks the runner kind (owned or task
machine); then up to :data:`MAX_STEPS` steps, each one event that a
:class:`~_harness.DataProvider` chooses:

* host calls at any moment: ``StartRun`` (valid, junk task id or epoch,
  recovery), ``CloseRun`` (each reason), ``WaitUsable``/``WaitCancelled``,
  ``RefreshRequested``, ``ProjectValueRead`` (staged, legacy, row; through
  an install's reader or not), ``LaunchFenceFailed``, ``BridgeAuthenticated``,
  ``Shutdown``;
* frames: grants answering a sent op (several manifest shapes, revisions,
  expiries, Files or not), deny, unavailable, stale, changed, refresh
  results, junk, each possibly mutated field by field
  (:func:`_drive.lease_frame`);
* completions: a pending read completed, denied, failed, with invalid
  selectors, a missing or mutated parameter (:func:`_drive.read_outcome`);
  a pending cleanup or install finishing or failing; a send failing; a grant
  hook failing; a timer firing (the earliest due, or time advancing past
  several); a completion for an id never issued.

Gate callbacks (``CloseGate``/``OpenGate``) are answered at once, as the
shell contract requires; one in eight fails.

Checked after every step (an ``AssertionError`` is a finding):

* ``handle`` never raises and contains no unexpected exception
  (``internal_errors`` stays 0);
* the :class:`_drive.Checks` invariants: each host call answered at most
  once and only calls made; ids never reused; timers cancelled only while
  armed; reads only through open readers; readers closed once; no canary in
  any error text, nor in any command's ``repr``; no gate opened on an
  expired view, for a closed run, during a full cleanup of the run, or
  after shutdown; no install for a closed run;
* ``status()`` of each task is consistent: a registered run's gate is never
  open while the run is ``ended`` or ``lost``;
* the invariant monitor (``leasegate.core.monitor``) sees each step when
  it is installed; any violation is a finding.

At the end of the input: shutdown, then every pending read, cleanup and
install is completed and every timer fired (bounded); afterwards every host
call has been answered and every reader closed.

Reference behavior: ``design/behaviors/lease-registry.md`` (LR-001 …
LR-163), ``docs/events-and-commands.md``. Run:
``python3 fuzz/registry_harness.py [libFuzzer flags] [corpus dirs]``;
``docs/fuzzing.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import _harness
from _harness import DataProvider

with _harness.instrument(__name__ == "__main__", _harness.MACHINES):
    import _drive
    from leasegate.core._base import Command, Event
    from leasegate.core.registry import (
        BridgeAuthenticated,
        CallDone,
        CleanupFailed,
        CleanupFinished,
        CloseGate,
        CloseRun,
        FrameReceived,
        GateCallbackDone,
        GateCallbackFailed,
        GrantAccepted,
        GrantHookFailed,
        InstallFailed,
        InstallFinished,
        LaunchFenceFailed,
        LeaseRegistry,
        LegacyRef,
        OpenGate,
        ProjectValueRead,
        ReadFailed,
        ReadParameters,
        RowRef,
        RunCleanup,
        RunInstall,
        SendFailed,
        SendFrame,
        Shutdown,
        StagedRef,
        StartRun,
        TimerFired,
        WaitCancelled,
        WaitUsable,
    )

#: How many actions :meth:`Harness.do` knows.
ACTIONS = 20

#: Most steps one input drives (the final drain comes on top).
MAX_STEPS = 80

_MONITOR: Any
try:  # the invariant monitor
    from leasegate.core.monitor import InvariantMonitor as _MONITOR
except ImportError:  # pragma: no cover - depends on the tree's state
    _MONITOR = None

_JUNK: tuple[Any, ...] = (None, "", 0, -1, True, 1.5, 2**53, "x" * 129, "a\nb", [])
_ADVANCE_MS: tuple[int, ...] = (1_000, 20_000, 30_000, 60_000, 5 * 60_000, 2 * 3_600_000)


class Harness(_drive.MachineHarness):
    """One registry, its pending work and the checks; driven step by step."""

    actions = ACTIONS

    def __init__(self, runner_kind: str) -> None:
        super().__init__()
        self.reg = LeaseRegistry(runner_kind=runner_kind, op_id_seed="fuzz")  # type: ignore[arg-type]
        self.monitor = _MONITOR() if _MONITOR is not None else None
        self.cleanups: list[RunCleanup] = []
        self.installs: list[RunInstall] = []
        self.hooks: list[int] = []
        self.waits: list[int] = []
        self.gate_fail = lambda: False

    # -- feeding
    def feed(self, event: Event) -> list[Command]:
        """Feed one event, check the step, answer gate callbacks at once."""
        out = self.reg.handle(event)
        self.trace(event, out)
        assert self.reg.internal_errors == 0, "handle contained an unexpected exception"
        self.checks.step(out, self.now)
        if self.monitor is not None:
            found = _drive.monitor_findings(self.monitor.observe(event, out, ()), self.checks)
            assert not found, f"monitor: {found}"
        for cmd in out:
            self._track(cmd)
        self._closed_if_done(out)
        for cmd in out:
            if isinstance(cmd, CloseGate | OpenGate):
                ok = not self.gate_fail()
                ev: Event = (
                    GateCallbackDone(now_ms=self.now, cmd_id=cmd.cmd_id)
                    if ok
                    else GateCallbackFailed(now_ms=self.now, cmd_id=cmd.cmd_id)
                )
                self.feed(ev)
        self._check_status()
        return out

    def _track(self, cmd: Command) -> None:
        if isinstance(cmd, ReadParameters):
            self.reads.append(cmd)
        elif isinstance(cmd, RunCleanup):
            self.cleanups.append(cmd)
        elif isinstance(cmd, RunInstall):
            self.installs.append(cmd)
        elif isinstance(cmd, GrantAccepted):
            self.hooks.append(cmd.cmd_id)
        elif isinstance(cmd, SendFrame):
            self.track_send(cmd)

    def _check_status(self) -> None:
        for task in _drive.TASKS:
            st = self.reg.status(task)
            if st is None:
                continue
            assert "CANARY" not in repr(st), "secret-in-error: a canary in a status"
            if st.phase in ("ended", "lost"):
                assert not st.gate_open, "gate open while the run is ended or lost"

    # -- one step
    def act(self, action: int, fdp: DataProvider, task: str, epoch: int, now: int) -> None:
        """Action ``action`` (``0 … ACTIONS-1``) about run ``epoch`` of ``task``."""
        if action <= 1:
            if fdp.int_in_range(0, 7) == 7:
                t: object = fdp.pick(_JUNK)
                e: object = fdp.pick(_JUNK)
            else:
                t, e = task, epoch
            if isinstance(t, str) and type(e) is int:
                if self.checks.goes_back(t, e, self.reg.status(t) is not None):
                    return
                self.checks.started(t, e)
            self.feed(self.start_event(StartRun, fdp, "start", t, e, now))
        elif action == 2:
            cid = self.call_id("close")
            reason = fdp.pick(("stop", "park", "teardown", "superseded"))
            st = self.reg.status(task)
            if st is not None and st.assignment.run_epoch == epoch:
                # A close of another epoch does nothing (LR-119).
                self.closes[cid] = (task, epoch, self.checks.starts(task, epoch))
            self.feed(
                CloseRun(now_ms=now, call_id=cid, task_id=task, run_epoch=epoch, reason=reason)
            )
        elif action <= 6:
            self.feed(FrameReceived(now_ms=now, frame=self.next_lease_frame(fdp, now)))
        elif action <= 8:
            if not self.answer_read(fdp, now):
                self.feed(
                    ReadFailed(now_ms=now, cmd_id=fdp.int_in_range(0, 99), access_denied=True)
                )
        elif action == 9:
            if self.cleanups:
                cmd = self.cleanups.pop(fdp.int_in_range(0, len(self.cleanups) - 1))
                ok = fdp.int_in_range(0, 3) != 3
                self.checks.cleanup_done(cmd.cmd_id)
                self.checks.reported |= not ok
                ev = CleanupFinished if ok else CleanupFailed
                self.feed(ev(now_ms=now, cmd_id=cmd.cmd_id))
        elif action == 10:
            if self.installs:
                icmd = self.installs.pop(fdp.int_in_range(0, len(self.installs) - 1))
                ok = fdp.int_in_range(0, 3) != 3
                iev = InstallFinished if ok else InstallFailed
                self.feed(iev(now_ms=now, cmd_id=icmd.cmd_id))
        elif action <= 12:
            self.fire_next()
        elif action == 13:
            self.advance(fdp.pick(_ADVANCE_MS))
        elif action == 14:
            if self.waits and fdp.boolean():
                wid = self.waits.pop(fdp.int_in_range(0, len(self.waits) - 1))
                self.feed(WaitCancelled(now_ms=now, call_id=wid))
            else:
                cid = self.call_id("wait")
                self.waits.append(cid)
                self.feed(WaitUsable(now_ms=now, call_id=cid, task_id=task, run_epoch=epoch))
        elif action == 15:
            credentials = ("engine-0", "engine-1", "mcp-0", "github-1")
            revisions = ("rev-0", "rev-1", None, "rev-m0")
            self.feed(self.refresh_event(fdp, task, epoch, now, credentials, revisions))
        elif action == 16:
            self._project_read(fdp, task, epoch)
        elif action == 17:
            which = fdp.int_in_range(0, 3)
            if which == 0:
                self.feed(LaunchFenceFailed(now_ms=now, task_id=task, run_epoch=epoch))
            elif which == 1:
                self.feed(BridgeAuthenticated(now_ms=now))
            elif which == 2 and self.sends:
                self.feed(SendFailed(now_ms=now, cmd_id=fdp.pick(self.sends)))
            elif self.hooks:
                self.feed(GrantHookFailed(now_ms=now, cmd_id=self.hooks.pop()))
        elif action == 18:
            if fdp.int_in_range(0, 3) == 3:
                self.checks.shutdown()
                self.feed(Shutdown(now_ms=now, call_id=self.call_id("shutdown")))
        else:
            # A completion for an id the registry never issued (or reissued).
            n = fdp.int_in_range(0, 200)
            self.feed(
                fdp.pick(
                    (
                        TimerFired(now_ms=now, timer_id=n),
                        CleanupFinished(now_ms=now, cmd_id=n),
                        InstallFailed(now_ms=now, cmd_id=n),
                        GateCallbackFailed(now_ms=now, cmd_id=n),
                    )
                )
            )

    def _closed_if_done(self, out: list[Command]) -> None:
        # Closing is awaited: the run counts as closed once its close call
        # is answered with success.
        for c in out:
            if isinstance(c, CallDone) and c.call_id in self.closes:
                task, epoch, starts = self.closes.pop(c.call_id)
                if c.error is None:
                    self.checks.closed(task, epoch, starts)

    def _project_read(self, fdp: DataProvider, task: str, epoch: int) -> None:
        ref: StagedRef | LegacyRef | RowRef = fdp.pick(
            (
                StagedRef(staging_id="00000001-0000-4000-8000-000000000000"),
                LegacyRef(ssm_version=fdp.pick((1, 2))),
                RowRef(),
                StagedRef(staging_id="not-a-uuid"),
            )
        )
        install = self.installs[-1].cmd_id if self.installs and fdp.boolean() else None
        self.feed(
            ProjectValueRead(
                now_ms=self.now,
                call_id=self.call_id("project-read"),
                task_id=task,
                run_epoch=epoch,
                project_id=fdp.pick(("proj-0", "proj-1", "../x")),
                key=fdp.pick(("API_KEY", "bad key", "")),
                ref=ref,
                install_cmd_id=install,
            )
        )

    # -- the end of an input
    def drain(self) -> None:
        """Shutdown, complete everything pending, fire every timer; then
        every host call has been answered and every reader closed."""
        self.gate_fail = lambda: False
        self.checks.shutdown()
        self.feed(Shutdown(now_ms=self.now, call_id=self.call_id("shutdown")))
        for _ in range(200):
            if self.reads:
                r = self.reads.pop(0)
                self.feed(ReadFailed(now_ms=self.now, cmd_id=r.cmd_id, access_denied=False))
            elif self.cleanups:
                c = self.cleanups.pop(0)
                self.checks.cleanup_done(c.cmd_id)
                self.feed(CleanupFinished(now_ms=self.now, cmd_id=c.cmd_id))
            elif self.installs:
                i = self.installs.pop(0)
                self.feed(InstallFinished(now_ms=self.now, cmd_id=i.cmd_id))
            elif self.checks.timers:
                self.fire_next()
            else:
                break
        for wid in list(self.waits):
            if wid in self.checks.calls:
                self.feed(WaitCancelled(now_ms=self.now, call_id=wid))
        self.check_drained()


def TestOneInput(data: bytes) -> None:
    """Drive one registry with the events ``data`` chooses; raise on a finding."""
    fdp = DataProvider(data)
    h = Harness("task-machine" if fdp.byte() & 1 else "owned")
    h.gate_fail = lambda: fdp.int_in_range(0, 7) == 7
    _drive.run(h, fdp, MAX_STEPS)


if __name__ == "__main__":
    _harness.main(TestOneInput)
