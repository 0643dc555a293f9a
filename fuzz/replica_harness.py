"""Fuzz harness: the env replica manager driven by a chosen event sequence.

``TestOneInput(data)``: the first byte picks the replay-ledger limits (the
default, or tiny ones so exhaustion is reachable); then up to
:data:`MAX_STEPS` steps, each one event a :class:`~_harness.DataProvider`
chooses:

* frames (``EnvFrameReceived``) built from valid templates
  (``tests/core/replica/replica_kit.py``): begin, page, apply, commit over two
  tasks, two runs, two streams, three attempts, three keys, two projects,
  staged/legacy/no value refs, bindings, policy epochs and record versions,
  each possibly mutated field by field (:func:`_mutate.mutate`), or junk;
* read completions for a pending read: the fake reader's valid envelope,
  a failure, a missing value, a canary value that is not an envelope, a
  mutated envelope, a wrong legacy version;
* lifecycle calls: ``ActivateAssignment`` (two readers, two orgs, junk),
  ``ExpectActivation``, ``SettleActivation``, ``DropAssignment``,
  ``DropAll``; readiness: ``AwaitReady`` (valid and junk timeouts) and
  ``ReadinessDeadline`` for an armed or unknown timer.

Checked after every step (an exception from ``handle`` or an
``AssertionError`` is a finding):

* ``handle`` never raises (the replica has no internal catch: any exception
  is a finding);
* no command's ``repr`` shows a value (``CANARY``), nor does ``read_status``
  or ``read_view``'s ``repr`` (unless the input wrote the marker into a plain
  field);
* an invalid frame is refused with ``FrameRejected`` and nothing else in
  that step (ER-024); acks plus refusals never outnumber frames, and once
  every read is answered each frame has exactly one ack or refusal (ER-026);
* read and timer ids are never reused; ``CancelTimer`` only for an armed
  timer; every waiter is settled at most once, and only waiters registered;
* ``is_ready(T, N)`` implies ``read_view(T, N, live ids)`` is served
  (ER-121, ER-124);
* at the end: every read answered (failed), ``DropAll``; then every waiter
  settled, no plaintext reachable from the manager (ER-128) and the ledger
  totals back to zero.

Reference behavior: ``design/behaviors/env-replica.md`` (ER-001 … ER-130).
Run: ``python3 fuzz/replica_harness.py [libFuzzer flags] [corpus dirs]``;
``docs/fuzzing.md``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core" / "replica"))

import _harness
from _harness import DataProvider

with _harness.instrument(__name__ == "__main__", _harness.MACHINES):
    from replica_kit import BOOT, FakeReader, reachable_values

    from _drive import env_frame, plain_canary
    from _mutate import CANARY, mutate
    from leasegate.core import Secret
    from leasegate.core._base import Command, Event
    from leasegate.core.replica import (
        ActivateAssignment,
        AwaitReady,
        CancelTimer,
        DropAll,
        DropAssignment,
        EnvFrameReceived,
        ExpectActivation,
        FrameRejected,
        ReadinessDeadline,
        ReadLegacyValue,
        ReadStagedValue,
        RejectWaiter,
        ReplicaLimits,
        ReplicaManager,
        ResolveWaiter,
        SendAck,
        SettleActivation,
        StartTimer,
        ValueReadCompleted,
        ValueReadFailed,
    )

#: How many actions :meth:`Harness.do` knows.
ACTIONS = 16

#: Most steps one input drives (the final drain comes on top).
MAX_STEPS = 100

_TRACE = bool(os.environ.get("LEASEGATE_FUZZ_TRACE"))

_TASKS = ("t1", "t2")
_PROJECTS = ("p1", "p2")
_JUNK: tuple[Any, ...] = (None, "", 0, -1, True, 1.5, 2**53, "x" * 129, [], {})
_LIMITS: tuple[ReplicaLimits | None, ...] = (
    None,
    ReplicaLimits(max_task_entries=2, max_task_bytes=2_000, max_total_entries=3),
    ReplicaLimits(max_task_entries=1, max_task_bytes=600, max_total_entries=1, max_total_bytes=600),
)


class Harness:
    """One replica manager, its pending reads, waiters and timers; checked per step."""

    def __init__(self, limits: ReplicaLimits | None) -> None:
        self.m = ReplicaManager(boot_id=BOOT, policy_epochs=(1,), limits=limits)
        self.readers = (FakeReader("r1"), FakeReader("r2"))
        self.reads: list[ReadStagedValue | ReadLegacyValue] = []
        self.read_ids: set[int] = set()
        self.timers: set[int] = set()
        self.timer_ids: set[int] = set()
        self.waiters: set[int] = set()
        self.next_waiter = 0
        self.frames = 0
        self.replies = 0
        self.tokens: list[tuple[str, int]] = []
        self.tainted = False

    def feed(self, event: Event) -> list[Command]:
        out = self.m.handle(event)
        if _TRACE:
            print(f"{event!r}\n   -> {out!r}", file=sys.stderr)
        for cmd in out:
            if not self.tainted:
                assert CANARY not in repr(cmd), "secret-in-error: a value in a command's repr"
            if isinstance(cmd, ReadStagedValue | ReadLegacyValue):
                assert cmd.cmd_id not in self.read_ids, "read id reused"
                self.read_ids.add(cmd.cmd_id)
                self.reads.append(cmd)
            elif isinstance(cmd, StartTimer):
                assert cmd.timer_id not in self.timer_ids, "timer id reused"
                self.timer_ids.add(cmd.timer_id)
                self.timers.add(cmd.timer_id)
            elif isinstance(cmd, CancelTimer):
                assert cmd.timer_id in self.timers, "a timer cancelled that is not armed"
                self.timers.discard(cmd.timer_id)
            elif isinstance(cmd, ResolveWaiter | RejectWaiter):
                assert cmd.waiter_id in self.waiters, "a waiter settled twice or never registered"
                self.waiters.discard(cmd.waiter_id)
            elif isinstance(cmd, SendAck | FrameRejected):
                self.replies += 1
        if isinstance(event, EnvFrameReceived):
            rejected = [c for c in out if isinstance(c, FrameRejected)]
            if rejected:
                assert out == rejected, "a refused frame caused other commands (ER-024)"
                assert len(rejected) == 1, "one frame refused twice"
        assert self.replies <= self.frames, "more acks and refusals than frames"
        self._check_views()
        return out

    def _check_views(self) -> None:
        for task in _TASKS:
            st = self.m.read_status(task)
            if st is None:
                continue
            if not self.tainted:
                assert CANARY not in repr(st), "a value in read_status"
            for run in (1, 2):
                if self.m.is_ready(task, run):
                    view = self.m.read_view(task, run, st.project_ids)
                    assert view is not None, "ready but the live snapshot is not served"
                    assert CANARY not in repr(view), "a value in a view's repr"

    def answer(self, fdp: DataProvider, cmd: ReadStagedValue | ReadLegacyValue) -> None:
        now = 0
        choice = fdp.int_in_range(0, 9)
        ev: Event
        if choice <= 4 and isinstance(cmd.reader, FakeReader):
            ev = cmd.reader.answer(cmd, now)
        elif choice == 5:
            ev = ValueReadFailed(now_ms=now, cmd_id=cmd.cmd_id)
        elif choice == 6:
            ev = ValueReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, raw=None)
        elif choice == 7:
            ev = ValueReadCompleted(
                now_ms=now,
                cmd_id=cmd.cmd_id,
                raw=Secret(fdp.pick(("CANARY{", "", "null", '"CANARY"'))),
                version=fdp.pick((None, 1, 2)),
            )
        else:
            good = FakeReader().answer(cmd, now)
            raw = good.raw.reveal() if isinstance(good, ValueReadCompleted) and good.raw else "{}"
            value = mutate(fdp, json.loads(raw))
            version = good.version if isinstance(good, ValueReadCompleted) else None
            if choice == 9 and isinstance(version, int):
                version += 1
            ev = ValueReadCompleted(
                now_ms=now, cmd_id=cmd.cmd_id, raw=Secret(json.dumps(value)), version=version
            )
        self.feed(ev)

    def step(self, fdp: DataProvider) -> None:
        """One step: an action (``0 … ACTIONS-1``) and its own choices."""
        self.do(fdp.int_in_range(0, ACTIONS - 1), fdp)

    def do(self, action: int, fdp: DataProvider) -> None:
        """Action ``action`` with choices from ``fdp`` (the stateful tests
        call this with a Hypothesis-backed provider)."""
        task = fdp.pick(_TASKS)
        run = fdp.int_in_range(1, 2)
        if action <= 5:
            st = self.m.read_status(task)
            seq = st.applied_through.sequence if st and st.applied_through else 0
            frame = env_frame(fdp, _TASKS, _PROJECTS, seq)
            self.tainted |= plain_canary(frame)
            self.frames += 1
            self.feed(EnvFrameReceived(now_ms=0, frame=frame))
        elif action <= 8:
            if self.reads:
                self.answer(fdp, self.reads.pop(fdp.int_in_range(0, len(self.reads) - 1)))
        elif action == 9:
            junk = fdp.int_in_range(0, 7) == 7
            self.feed(
                ActivateAssignment(
                    now_ms=0,
                    task_id=fdp.pick(_JUNK) if junk else task,
                    run_epoch=run,
                    org_id=fdp.pick(("org1", "org1", "org2")),
                    reader=fdp.pick((*self.readers, None)) if not junk else self.readers[0],
                )
            )
        elif action == 10:
            out = self.feed(ExpectActivation(now_ms=0, task_id=task, run_epoch=run))
            for c in out:
                tok = getattr(c, "token", None)
                if isinstance(tok, int):
                    self.tokens.append((task, tok))
        elif action == 11:
            if self.tokens and fdp.boolean():
                t, tok = self.tokens.pop(fdp.int_in_range(0, len(self.tokens) - 1))
            else:
                t, tok = task, fdp.int_in_range(0, 5)
            self.feed(SettleActivation(now_ms=0, task_id=t, token=tok))
        elif action == 12:
            if fdp.int_in_range(0, 3) == 3:
                self.feed(DropAll(now_ms=0))
            else:
                self.feed(DropAssignment(now_ms=0, task_id=task, run_epoch=run))
        elif action == 13:
            self.next_waiter += 1
            self.waiters.add(self.next_waiter)
            out = self.feed(
                AwaitReady(
                    now_ms=0,
                    waiter_id=self.next_waiter,
                    task_id=task,
                    run_epoch=run,
                    timeout_ms=fdp.pick((1000, 1, 60_000, 0, -5, 1.5, True, 2**53, None)),
                )
            )
            del out
        elif action == 14:
            if self.timers:
                tid = sorted(self.timers)[fdp.int_in_range(0, len(self.timers) - 1)]
                self.timers.discard(tid)
            else:
                tid = fdp.int_in_range(0, 50)
            self.feed(ReadinessDeadline(now_ms=0, timer_id=tid))
        else:
            # A completion for a read id never issued or already answered.
            self.feed(ValueReadFailed(now_ms=0, cmd_id=fdp.int_in_range(0, 60)))

    def drain(self) -> None:
        """Fail every pending read, drop everything; then check the ends."""
        for _ in range(500):
            if not self.reads:
                break
            cmd = self.reads.pop(0)
            self.feed(ValueReadFailed(now_ms=0, cmd_id=cmd.cmd_id))
        assert not self.reads, "reads keep coming"
        assert self.replies == self.frames, "a frame got no ack (ER-026)"
        self.feed(DropAll(now_ms=0))
        assert not self.waiters, "a waiter left unsettled after dropAll (ER-016)"
        assert reachable_values(self.m) == [], "plaintext reachable after dropAll (ER-128)"
        assert self.m.ledger_totals == (0, 0), "ledger totals not zero after dropAll"


def TestOneInput(data: bytes) -> None:
    """Drive one replica manager with the events ``data`` chooses; raise on a finding."""
    fdp = DataProvider(data)
    h = Harness(_LIMITS[fdp.byte() % len(_LIMITS)])
    for _ in range(MAX_STEPS):
        if fdp.remaining() == 0:
            break
        h.step(fdp)
    h.drain()


if __name__ == "__main__":
    _harness.main(TestOneInput)
