"""What the machine harnesses share: frame and completion builders, checks.

Used by ``registry_harness.py`` and ``runtime_harness.py`` (and the
stateful tests under ``tests/core/*/test_*_stateful.py``). Everything here
is driven by a :class:`~_harness.DataProvider` (or anything with the same
methods) and by events only: virtual time, no clock, no I/O.

* :func:`lease_frame` builds a lease frame for the registry from valid
  templates (``tests/support/lease_kit.py``): a grant answering an op id the
  machine sent (manifests of several shapes, revisions, expiries, Files or
  not), a deny, unavailable, stale, changed or refresh result, or junk; then
  optionally mutates it (:func:`_mutate.mutate`) with the digest recomputed.
* :func:`read_outcome` answers a ``ReadParameters``: the fake Parameter
  Store's answer, access denied, another failure, invalid selectors, a
  missing parameter, or a mutated envelope / wrong version / wrong type.
* :class:`Checks` holds the invariants every machine harness asserts after
  every step: host calls answered at most once (and only calls that were
  made), machine-chosen ids never reused, timers cancelled only while armed,
  reads only through open readers and each reader closed once, no error or
  log text with a canary, no canary secret in any command's ``repr`` (unless
  the input itself put a secret marker in a plain field), and no gate opened
  for a run after its close, during its cleanup, after shutdown, or on an
  expired view.
* :class:`MachineHarness` is the base of both machine harnesses: virtual
  time (:meth:`~MachineHarness.fire_next`, :meth:`~MachineHarness.advance`),
  the sent frames and lease ops, pending reads answered through
  :func:`read_outcome`, the end-of-input check; :func:`run` drives one input.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _harness import DataProvider
from _mutate import CANARY, mutate, refresh_digest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "core" / "replica"))

from lease_kit import (
    HOUR,
    T0,
    FakeSsm,
    engine,
    lease_json,
    manifest,
    mcp,
    session,
    static,
)
from replica_kit import BOOT, apply, begin, commit, legacy_ref, page, staged_ref, state

from leasegate.core import Secret
from leasegate.core.registry import (
    Assignment,
    CallDone,
    CancelTimer,
    CloseReader,
    OpenGate,
    OpenReader,
    ProjectValueDone,
    ReadCompleted,
    ReadFailed,
    ReadParameters,
    RefreshDone,
    RefreshRequested,
    ReportError,
    RunCleanup,
    RunInstall,
    SendFrame,
    SsmParameter,
    StartTimer,
    TimerFired,
    WaiterResolved,
)

__all__ = [
    "ENV_KEYS",
    "TASKS",
    "Checks",
    "MachineHarness",
    "env_frame",
    "error_texts",
    "lease_frame",
    "monitor_findings",
    "plain_canary",
    "read_outcome",
    "run",
    "weak_secret",
]

#: ``LEASEGATE_FUZZ_TRACE=1``: the machine harnesses print every event and its
#: commands (to read what a finding's input does).
TRACE = bool(os.environ.get("LEASEGATE_FUZZ_TRACE"))

#: Most timers one "advance" fires (retry timers re-arm every 30 s).
ADVANCE_FIRES = 12

#: Task ids the harnesses use (a third, unusual one on purpose).
TASKS: tuple[str, ...] = ("task-1", "task-2", "t:3")

#: Secret-bearing wire keys: a canary below one of these is a secret.
_SECRET_KEYS = frozenset({"secretAccessKey", "sessionToken", "value", "raw"})

#: Manifest shapes a grant may carry (index chosen by the provider).
_MANIFESTS: tuple[Any, ...] = (
    lambda: manifest(),
    lambda: manifest(engines=[engine(0), engine(1, auth="oauth")], mcps=[mcp(0)]),
    lambda: manifest(
        engines=[engine(0)], mcps=[mcp(0, auth="none")], github=static("github"), ssh=static("ssh")
    ),
    lambda: manifest(engines=[], projects=0),
    lambda: manifest(engines=[engine(0, version=4)], projects=2),
    lambda: manifest(engines=[engine(0, session="s2")]),
    lambda: manifest(engines=[engine(0, rev="rev-9")], github=static("github", version=3)),
)

_DELTAS_MS: tuple[int, ...] = (2 * HOUR, 10 * 60_000, 90_000, 30_000, 1_000, 0, -60_000, 26 * HOUR)


def plain_canary(value: Any, key: str | None = None, depth: int = 0) -> bool:
    """Whether a JSON value holds ``CANARY`` in a string that is not below a
    secret key (a mutation copied a secret into a plain field, or the
    provider wrote the marker): then the ``repr`` leak check is off for that
    run, since a plain field may legitimately show its own text."""
    if depth > 60:
        return False
    if isinstance(value, str):
        return CANARY in value and key not in _SECRET_KEYS
    if isinstance(value, dict):
        return any(
            plain_canary(k, None, depth + 1) or plain_canary(v, k, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(plain_canary(v, key, depth + 1) for v in value)
    return False


#: JSON keys whose string values count as secrets, and keys whose object
#: values map names to secrets (what the invariant monitor learns secrets
#: from, ``docs/monitor.md``).
_WEAK_KEYS = frozenset(
    {"secretAccessKey", "sessionToken", "value", "token", "accessToken", "privateKey", "raw"}
    | {"material"}
)
_WEAK_MAPS = frozenset({"env", "files"})


def weak_secret(value: Any, key: str | None = None, depth: int = 0) -> bool:
    """Whether a JSON value holds, in a secret position (:data:`_WEAK_KEYS`,
    or a value of an ``env``/``files`` map), a string without ``CANARY``: a
    mutation made a secret of an ordinary word, which may then occur by
    coincidence in a fixed error text (the monitor's ``secret-in-error`` is
    then not decisive; the harnesses' own canary checks still are)."""
    if depth > 60:
        return False
    if isinstance(value, str):
        return key in _WEAK_KEYS and CANARY not in value
    if isinstance(value, dict):
        for k, v in value.items():
            in_map = k in _WEAK_MAPS and isinstance(v, dict)
            if in_map and any(isinstance(x, str) and CANARY not in x for x in v.values()):
                return True
            if weak_secret(v, k if isinstance(k, str) else None, depth + 1):
                return True
        return False
    if isinstance(value, list):
        return any(weak_secret(v, key, depth + 1) for v in value)
    return False


def lease_frame(
    fdp: DataProvider,
    now: int,
    ops: list[tuple[str, str, int]],
    refresh_ops: list[str],
) -> tuple[Any, bool]:
    """A lease frame (JSON value) for the registry; ``(frame, tainted)``.

    Args:
        fdp: the choices.
        now: virtual time in ms (expiries are relative to it).
        ops: ``(op_id, task_id, run_epoch)`` of the ``lease.request`` frames
            sent, oldest first (grants and denials answer one of them).
        refresh_ops: op ids of the ``credential.refresh`` frames sent.

    Returns:
        The frame and whether it holds a canary in a plain field
        (:func:`plain_canary`).
    """
    kind = fdp.int_in_range(0, 7)
    pick = fdp.int_in_range(0, 7)
    if ops and pick < 5:
        op_id, task, epoch = ops[-1]
    elif ops and pick < 7:
        op_id, task, epoch = ops[-1 - fdp.int_in_range(0, len(ops) - 1)]
    else:
        op_id, task, epoch = "lease-9-unknown", fdp.pick(TASKS), fdp.int_in_range(1, 3)
    frame: Any
    if kind <= 2:  # grants are the interesting frames: three chances in eight
        m = fdp.pick(_MANIFESTS)()
        expires = now + fdp.pick(_DELTAS_MS)
        sessions = [session(expires_at=expires)]
        if any(e.get("sessionId") == "s2" for e in m["engines"]):
            sessions.append(session("s2", expires_at=expires))
        frame = {
            "kind": "lease.grant.v1",
            "opId": op_id,
            "lease": lease_json(
                m,
                revision=fdp.pick((4, 3, 5, 6, 1)),
                files=fdp.boolean(),
                sessions=sessions,
                expires_at=expires,
                task=task,
                epoch=epoch,
                lease_id=fdp.pick(("lease-1", "lease-2")),
            ),
        }
    elif kind == 3:
        frame = {"kind": fdp.pick(("lease.deny", "lease.unavailable")), "opId": op_id}
        if frame["kind"] == "lease.deny":
            frame["error"] = fdp.pick(("not allowed", "CANARY-deny-text"))
    elif kind == 4:
        wanted = fdp.pick((5, 4, 6, 3))
        frame = {
            "kind": "lease.stale",
            "taskId": task,
            "runEpoch": epoch,
            "wantedRevision": wanted,
            "minRevision": fdp.pick((wanted, 0, wanted - 1)),
            "removed": fdp.pick(([], ["engine-0"], ["engine-1", "mcp-0"], ["github-1"])),
        }
    elif kind == 5:
        frame = {
            "kind": "credential.changed",
            "taskId": task,
            "runEpoch": epoch,
            "credentialId": fdp.pick(("engine-0", "engine-1", "mcp-0", "github-1", "ssh-1")),
            "revision": fdp.pick(("rev-0", "rev-1", "rev-9", "rev-m0")),
            "version": fdp.pick((4, 3, 5, 2)),
        }
    elif kind == 6:
        op = refresh_ops[-1] if refresh_ops and fdp.boolean() else "refresh-9-unknown"
        outcome = fdp.pick(("refreshed", "fresh", "needs_sign_in", "unavailable", "failed"))
        frame = {
            "kind": "credential.refresh.result",
            "opId": op,
            "outcome": outcome,
            "version": None if outcome not in ("refreshed", "fresh") else fdp.pick((4, 5)),
            "expiresAt": now + fdp.pick(_DELTAS_MS),
        }
    else:
        frame = fdp.pick(([], None, "lease.grant.v1", {"kind": "lease.grant.v2"}, 1, {}))
    if fdp.int_in_range(0, 3) == 3:
        frame = mutate(fdp, frame)
        refresh_digest(frame)
    # The deny text is plain and not a secret: its canary does not taint.
    probe = frame
    if isinstance(frame, dict) and frame.get("error") == "CANARY-deny-text":
        probe = {k: v for k, v in frame.items() if k != "error"}
    return frame, plain_canary(probe)


#: Env keys the env frames use.
ENV_KEYS: tuple[str, ...] = ("A", "B", "_c")
_ENV_JUNK: tuple[Any, ...] = (None, "", 0, [], {}, {"kind": "env.replica.v1.ack"})


def _env_state(fdp: DataProvider) -> dict[str, Any]:
    ref = fdp.pick((staged_ref(fdp.int_in_range(1, 3)), legacy_ref(fdp.int_in_range(1, 2)), None))
    tomb = fdp.int_in_range(0, 4) == 4
    return state(
        fdp.pick(ENV_KEYS),
        rev=fdp.int_in_range(0, 3),
        gen=fdp.int_in_range(0, 3),
        tomb=tomb,
        ref=None if tomb else ref,
        binding=fdp.pick(
            (None, {"kind": "omit"}, {"kind": "env"}, {"kind": "withhold", "reason": "no"})
        ),
        epoch=fdp.pick((1, 2, None)),
        lg=fdp.int_in_range(0, 2),
    )


def env_frame(
    fdp: DataProvider,
    tasks: tuple[str, ...],
    projects: tuple[str, str],
    seq_hint: int,
    boot: str = BOOT,
) -> Any:
    """An ``env.replica.v1`` frame (JSON value) from the replica kit's valid
    builders: begin, page, apply or commit over ``tasks``, runs 1–2, two
    streams, three attempts, three keys, ``projects``, staged/legacy/no value
    refs, bindings, policy epochs and record versions (sequence numbers near
    ``seq_hint``); one in five is junk; a quarter are mutated field by
    field. One in sixteen carries another boot id."""
    task = fdp.pick(tasks)
    run = fdp.int_in_range(1, 2)
    stream = fdp.pick(("S1", "S2"))
    att = fdp.pick(("A1", "A2", "A3"))
    boot = boot if fdp.int_in_range(0, 15) != 15 else "other-boot"
    kind = fdp.int_in_range(0, 4)
    frame: Any
    if kind == 0:
        n = fdp.int_in_range(0, 2)
        projects = projects[:n] if fdp.boolean() else tuple(reversed(projects[:n]))
        frame = begin(att, projects, stream=stream, task=task, run=run, boot=boot)
    elif kind == 1:
        recs = sorted(
            (_env_state(fdp) for _ in range(fdp.int_in_range(0, 3))), key=lambda s: s["key"]
        )
        uniq = list({r["key"]: r for r in recs}.values())
        frame = page(
            uniq,
            project=fdp.pick(projects),
            after=fdp.pick((None, None, "A")),
            version=fdp.int_in_range(0, 3),
            complete=fdp.int_in_range(0, 3) != 3,
            attempt=att,
            stream=stream,
            task=task,
            run=run,
            boot=boot,
        )
    elif kind == 2:
        frame = apply(
            _env_state(fdp),
            seq_hint + fdp.int_in_range(0, 2),
            project=fdp.pick(projects),
            version=fdp.int_in_range(0, 4),
            attempt=fdp.pick((None, att)),
            stream=stream,
            task=task,
            run=run,
            boot=boot,
        )
    elif kind == 3:
        n = fdp.int_in_range(0, 2)
        frame = commit(
            [(p, fdp.int_in_range(0, 3)) for p in projects[:n]],
            seq=seq_hint + fdp.int_in_range(0, 1),
            attempt=att,
            stream=stream,
            task=task,
            run=run,
            boot=boot,
        )
    else:
        frame = fdp.pick(_ENV_JUNK)
    if fdp.int_in_range(0, 3) == 3:
        frame = mutate(fdp, frame)
    return frame


def _ssm_answer(ssm: FakeSsm, cmd: ReadParameters, now: int) -> ReadCompleted | ReadFailed:
    try:
        return ssm.answer(cmd, now)
    except (KeyError, ValueError):  # a selector the fake store has no value for
        return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=())


def read_outcome(
    fdp: DataProvider, ssm: FakeSsm, cmd: ReadParameters, now: int, checks: Checks | None = None
) -> ReadCompleted | ReadFailed:
    """One answer to ``cmd``: mostly the fake store's valid answer, else a
    failure (denied or not), invalid selectors, a missing parameter, or a
    parameter with a mutated envelope, another version, type or name."""
    choice = fdp.int_in_range(0, 15)
    if choice <= 8:
        return _ssm_answer(ssm, cmd, now)
    if choice == 9:
        return ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=True)
    if choice == 10:
        return ReadFailed(now_ms=now, cmd_id=cmd.cmd_id, access_denied=False)
    if choice == 11:
        return ReadCompleted(
            now_ms=now, cmd_id=cmd.cmd_id, parameters=(), invalid=cmd.selectors[:1]
        )
    if choice == 12:
        return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=())
    good = _ssm_answer(ssm, cmd, now)
    if not isinstance(good, ReadCompleted) or not good.parameters:
        return good
    if checks is not None and choice != 14:
        checks.weak = True  # a mutated or odd value: secrets without the canary
    params = list(good.parameters)
    i = fdp.int_in_range(0, len(params) - 1)
    p = params[i]
    if choice == 13:
        import json

        try:
            value: Any = json.loads(p.value.reveal())
        except ValueError:
            value = p.value.reveal()
        text = json.dumps(mutate(fdp, value))
        params[i] = SsmParameter(name=p.name, type=p.type, value=Secret(text), version=p.version)
    elif choice == 14:
        params[i] = SsmParameter(
            name=p.name, type=p.type, value=p.value, version=p.version + fdp.pick((1, -1, 10))
        )
    else:
        params[i] = SsmParameter(
            name=fdp.pick((p.name + "x", p.name)),
            type=fdp.pick(("String", "SecureString")),
            value=Secret(fdp.pick(("", "CANARY{", "null", '"CANARY"'))),
            version=p.version,
        )
    if fdp.boolean():
        params.append(copy.copy(params[i]))  # a duplicate
    return ReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, parameters=tuple(params))


def error_texts(cmd: object) -> Iterable[str]:
    """The free texts a command carries to a log or an error (never a secret)."""
    for name in ("message", "error", "reason"):
        value = getattr(cmd, name, None)
        if isinstance(value, str):
            yield value
        elif value is not None:
            msg = getattr(value, "message", None)
            if isinstance(msg, str):
                yield msg
            for cause in getattr(value, "causes", ()) or ():
                yield getattr(cause, "message", "")


#: ``LEASEGATE_FUZZ_SKIP_MONITOR=prop,prop``: monitor properties a fuzzing
#: campaign does not treat as findings (a known false positive of the monitor
#: that is already committed as a strict-xfail corpus input would otherwise
#: stop every run at once). Never set it for the regression replay.
SKIP_MONITOR: frozenset[str] = frozenset(
    p for p in os.environ.get("LEASEGATE_FUZZ_SKIP_MONITOR", "").split(",") if p
)


def monitor_findings(found: list[Any], checks: Checks) -> list[str]:
    """The decisive properties among the monitor's new violations: all but
    ``secret-in-error`` after a weak secret (:func:`weak_secret`) and the
    properties in :data:`SKIP_MONITOR`."""
    out = []
    for v in found:
        if v.property in SKIP_MONITOR:
            continue
        if v.property == "secret-in-error" and checks.weak:
            continue
        out.append(v.property)
    return out


def _reached(a: Assignment, task_id: str, run_epoch: int) -> bool:
    return a.task_id == task_id and a.run_epoch <= run_epoch


class Checks:
    """Invariants over the command stream of one machine, step by step.

    Call :meth:`call` when a host call is made, :meth:`step` with every
    batch of commands, :meth:`closed` when a close call was answered with
    success and :meth:`shutdown` when shutdown was called. Each check raises
    ``AssertionError`` with a message naming the property (never a value).

    Attributes:
        timers: armed timers, ``timer_id -> due time`` (ms).
        readers: open readers' ids.
        calls: host calls made and not answered yet, ``call_id -> label``.
        tainted: a canary reached a plain field of an input (the ``repr``
            leak check is off).
        weak: a secret without the canary was fed (:func:`weak_secret`):
            the monitor's ``secret-in-error`` is not decisive.
        reported: a ``ReportError`` was emitted or a gate, cleanup or
            install failed: a failed predecessor cleanup keeps its committed
            bundle, whose reader shutdown then never closes (LR-007, LR-127:
            shutdown destroys the bundles of the runs it removes, and the
            predecessor is not one of them), so the end-of-input "every
            reader closed" check applies only without failures.
    """

    def __init__(self) -> None:
        self.timers: dict[int, int] = {}
        self.readers: set[int] = set()
        self.closed_readers: set[int] = set()
        self.calls: dict[int, str] = {}
        self.answered: set[int] = set()
        self.ids: set[int] = set()
        self.cleanups: dict[int, RunCleanup] = {}
        self.closed_runs: set[tuple[str, int]] = set()
        self.start_counts: dict[tuple[str, int], int] = {}
        self.max_epoch: dict[str, int] = {}
        self.is_shut = False
        self.restarted: set[str] = set()
        self.orphans: set[int] = set()
        self.tainted = False
        self.weak = False
        self.reported = False

    def call(self, call_id: int, label: str) -> None:
        """A host call ``call_id`` was made."""
        self.calls[call_id] = label

    def closed(self, task_id: str, run_epoch: int, starts_then: int) -> None:
        """Run ``run_epoch`` of the task was closed by a host call (exactly
        that run: the machines keep no memory of closed epochs, so a later
        start of an older epoch is a fresh run). ``starts_then`` is
        :meth:`starts` when the close was called: a close answered after a
        new start of the same run no longer covers it."""
        if self.starts(task_id, run_epoch) == starts_then:
            self.closed_runs.add((task_id, run_epoch))

    def starts(self, task_id: str, run_epoch: int) -> int:
        """How many starts of exactly this run were made so far."""
        return self.start_counts.get((task_id, run_epoch), 0)

    def is_closed(self, task_id: str, run_epoch: int) -> bool:
        """Whether exactly this run was closed and not started again since."""
        return (task_id, run_epoch) in self.closed_runs

    def started(self, task_id: str, run_epoch: int) -> None:
        """A new start of ``task_id`` at ``run_epoch`` was made: that run is
        no longer closed."""
        self.closed_runs.discard((task_id, run_epoch))
        key = (task_id, run_epoch)
        self.start_counts[key] = self.start_counts.get(key, 0) + 1
        self.max_epoch[task_id] = max(self.max_epoch.get(task_id, 0), run_epoch)
        if self.is_shut:
            self.restarted.add(task_id)

    def goes_back(self, task_id: str, run_epoch: int, registered: bool) -> bool:
        """Whether starting ``run_epoch`` now would be a host going back in
        epochs: older than a run it already started, while the machine has
        no run of the task registered to refuse it as stale. A host's run
        epochs only rise (``runEpochForTask``), so the harnesses do not do
        that (a cleanup of the newer run may still be in flight and covers
        the older one)."""
        return not registered and run_epoch < self.max_epoch.get(task_id, 0)

    def shutdown(self) -> None:
        """Shutdown was called: nothing may open or install afterwards for a
        task that was not started again (the registry accepts new starts
        after shutdown, LR-128)."""
        self.is_shut = True
        self.restarted.clear()
        self.orphans = set(self.cleanups)

    def _shut(self, task_id: str) -> bool:
        return self.is_shut and task_id not in self.restarted

    def _new_id(self, what: str, ident: int) -> None:
        assert ident not in self.ids, f"{what} id reused"
        self.ids.add(ident)

    def answer(self, call_id: int) -> None:
        """A host call was answered: it must be outstanding."""
        assert call_id not in self.answered, "a host call was answered twice"
        assert call_id in self.calls, "an answer to a call never made"
        del self.calls[call_id]
        self.answered.add(call_id)

    def step(self, cmds: list[Any], now: int, *, own_timers: bool = True) -> None:
        """Check one batch of commands (emitted at virtual time ``now``)."""
        for cmd in cmds:
            for text in error_texts(cmd):
                assert CANARY not in text, "secret-in-error: a canary in an error or log text"
            if not self.tainted:
                assert CANARY not in repr(cmd), "secret-in-error: a canary in a command's repr"
            if isinstance(cmd, StartTimer) and own_timers:
                self._new_id("timer", cmd.timer_id)
                self.timers[cmd.timer_id] = now + cmd.delay_ms
            elif isinstance(cmd, CancelTimer) and own_timers:
                assert cmd.timer_id in self.timers, "a timer cancelled that is not armed"
                del self.timers[cmd.timer_id]
            elif isinstance(cmd, OpenReader):
                self._new_id("reader", cmd.reader_id)
                assert not self._shut(cmd.assignment.task_id), (
                    "open-after-close: a reader opened after shutdown"
                )
                self.readers.add(cmd.reader_id)
            elif isinstance(cmd, ReadParameters):
                self._new_id("read", cmd.cmd_id)
                assert cmd.reader_id in self.readers, "read-on-closed-reader"
            elif isinstance(cmd, CloseReader):
                assert cmd.reader_id in self.readers, "a reader closed twice or never opened"
                self.readers.discard(cmd.reader_id)
                self.closed_readers.add(cmd.reader_id)
            elif isinstance(cmd, RunCleanup):
                self._new_id("cleanup", cmd.cmd_id)
                self.cleanups[cmd.cmd_id] = cmd
            elif isinstance(cmd, RunInstall):
                self._new_id("install", cmd.cmd_id)
                a = cmd.request.assignment
                # An install queued behind a cleanup still runs after shutdown
                # (LR-128: operations in flight go on; its post-install fence
                # fails and nothing opens, LR-134), so only a closed run counts.
                assert not self.is_closed(a.task_id, a.run_epoch), (
                    "open-after-close: an install for a closed run"
                )
            elif isinstance(cmd, OpenGate):
                self._check_open(cmd, now)
            elif isinstance(cmd, CallDone | RefreshDone | ProjectValueDone | WaiterResolved):
                self.answer(cmd.call_id)
            elif isinstance(cmd, ReportError):
                self.reported = True

    def _check_open(self, cmd: OpenGate, now: int) -> None:
        a = cmd.assignment
        assert not self._shut(a.task_id), "open-after-close: a gate opened after shutdown"
        assert not self.is_closed(a.task_id, a.run_epoch), (
            "open-after-close: a gate opened for a closed run"
        )
        assert cmd.view.expires_at > now, "view-below-floor-or-expired: an expired view opened"
        for cid, c in self.cleanups.items():
            r = c.request
            if cid in self.orphans and a.task_id in self.restarted:
                # A cleanup queued before shutdown goes on (LR-128) while the
                # registry, which it does not close for good, takes a fresh
                # start of the same run with a queue of its own (the reference
                # does the same; only a registry reused after shutdown can).
                continue
            if r.mode == "full" and _reached(a, r.assignment.task_id, r.assignment.run_epoch):
                raise AssertionError("gate-open-during-cleanup: a full cleanup is in flight")

    def cleanup_done(self, cmd_id: int) -> None:
        """The cleanup ``cmd_id`` finished or failed."""
        self.cleanups.pop(cmd_id, None)


class MachineHarness:
    """What the registry and runtime harnesses share: virtual time, pending reads,
    the lease ops they sent, the end-of-input checks.

    A subclass sets :attr:`actions` and defines :meth:`feed` (one event in,
    its commands out, every check made) and :meth:`do` (one action). Time is
    :attr:`now` (ms since the epoch, from ``T0``); the armed timers are
    ``checks.timers`` (``timer_id -> due ms``). Nothing sleeps, nothing is
    real I/O. Used by ``registry_harness.py`` and ``runtime_harness.py``.
    """

    #: How many actions :meth:`do` knows (``0 … actions-1``).
    actions: int

    def __init__(self) -> None:
        self.now = T0
        self.ssm = FakeSsm()
        self.checks = Checks()
        self.reads: list[ReadParameters] = []
        self.sends: list[int] = []
        self.ops: list[tuple[str, str, int]] = []
        self.refresh_ops: list[str] = []
        self.closes: dict[int, tuple[str, int, int]] = {}
        self.next_call = 0

    def feed(self, event: Any) -> list[Any]:
        """Feed one event to the machine; check the step. Raises ``AssertionError``
        on a finding. Defined by each harness."""
        raise NotImplementedError

    def do(self, action: int, fdp: DataProvider) -> None:
        """Action ``action`` with choices from ``fdp`` (the stateful tests call this
        with a Hypothesis-backed provider): picks the task (:data:`TASKS`) and the
        run epoch (1–3) it is about, then :meth:`act`."""
        self.act(action, fdp, fdp.pick(TASKS), fdp.int_in_range(1, 3), self.now)

    def act(self, action: int, fdp: DataProvider, task: str, epoch: int, now: int) -> None:
        """Action ``action`` about run ``epoch`` of ``task`` at ``now`` (ms), more
        choices from ``fdp``. Defined by each harness."""
        raise NotImplementedError

    def call_id(self, label: str) -> int:
        """A fresh host call id, registered with ``checks`` under ``label``."""
        self.next_call += 1
        self.checks.call(self.next_call, label)
        return self.next_call

    def start_event(
        self, cls: Any, fdp: DataProvider, label: str, task: object, epoch: object, now: int
    ) -> Any:
        """A host call starting run ``epoch`` of ``task``: ``cls`` (``StartRun`` or
        ``BeginStart``) with a fresh call id labelled ``label``; a recovery start one
        time in four."""
        return cls(
            now_ms=now,
            call_id=self.call_id(label),
            task_id=task,
            run_epoch=epoch,
            recovery=fdp.int_in_range(0, 3) == 3,
        )

    def refresh_event(
        self,
        fdp: DataProvider,
        task: str,
        epoch: int,
        now: int,
        credentials: tuple[str, ...],
        revisions: tuple[str | None, ...],
    ) -> RefreshRequested:
        """A ``RefreshRequested`` host call for run ``epoch`` of ``task``: one of
        ``credentials`` at one of ``revisions`` (LR-091)."""
        return RefreshRequested(
            now_ms=now,
            call_id=self.call_id("refresh"),
            task_id=task,
            run_epoch=epoch,
            credential_id=fdp.pick(credentials),
            revision=fdp.pick(revisions),
        )

    def drain(self) -> None:
        """At the end of an input: shut the machine down, complete everything
        pending, then :meth:`check_drained`. Defined by each harness."""
        raise NotImplementedError

    def trace(self, event: Any, out: list[Any]) -> None:
        """With :data:`TRACE`: print ``event`` and its commands ``out`` to stderr."""
        if TRACE:
            print(f"@{self.now - T0} {event!r}\n   -> {out!r}", file=sys.stderr)

    def track_send(self, cmd: SendFrame) -> None:
        """Note a sent frame's ``cmd_id`` and, for a ``lease.request`` or a
        ``credential.refresh``, its op id (answers pick from them)."""
        self.sends.append(cmd.cmd_id)
        f: Any = cmd.frame
        name = type(f).__name__
        if name == "LeaseRequest":
            self.ops.append((f.op_id, f.task_id, f.run_epoch))
        elif name == "CredentialRefresh":
            self.refresh_ops.append(f.op_id)

    # -- time
    def fire_next(self) -> None:
        """Fire the earliest armed timer (ties: the lowest id), moving time to it."""
        if not self.checks.timers:
            return
        tid = min(self.checks.timers, key=lambda t: (self.checks.timers[t], t))
        due = self.checks.timers.pop(tid)
        self.now = max(self.now, due)
        self.feed(TimerFired(now_ms=self.now, timer_id=tid))

    def advance(self, ms: int) -> None:
        """Move time by ``ms``, firing the timers due by then (at most
        :data:`ADVANCE_FIRES`; if more are due, time stops at the last fired)."""
        end = self.now + ms
        for _ in range(ADVANCE_FIRES):
            if not any(t <= end for t in self.checks.timers.values()):
                self.now = end
                return
            self.fire_next()

    # -- one step
    def step(self, fdp: DataProvider) -> None:
        """One step: an action (``0 … actions-1``) and its own choices."""
        self.do(fdp.int_in_range(0, self.actions - 1), fdp)

    def next_lease_frame(self, fdp: DataProvider, now: int) -> Any:
        """A lease frame (:func:`lease_frame`) answering the ops sent so far; notes
        in ``checks`` whether it carries a canary in a plain field or a weak secret."""
        frame, tainted = lease_frame(fdp, now, self.ops, self.refresh_ops)
        self.checks.tainted |= tainted
        self.checks.weak |= weak_secret(frame)
        return frame

    def answer_read(self, fdp: DataProvider, now: int) -> bool:
        """Answer one pending read (``fdp`` picks which, and how: :func:`read_outcome`);
        ``False`` when no read is pending."""
        if not self.reads:
            return False
        cmd = self.reads.pop(fdp.int_in_range(0, len(self.reads) - 1))
        self.feed(read_outcome(fdp, self.ssm, cmd, now, self.checks))
        return True

    # -- the end of an input
    def check_drained(self) -> None:
        """After the drain: every host call answered and (when nothing failed, see
        :class:`Checks`) every reader closed. Raises ``AssertionError`` otherwise."""
        assert not self.checks.calls, f"calls never answered: {sorted(self.checks.calls.values())}"
        if not self.checks.reported:
            assert not self.checks.readers, "readers left open after shutdown"


def run(harness: MachineHarness, fdp: DataProvider, max_steps: int) -> None:
    """Drive ``harness`` for at most ``max_steps`` steps (fewer when ``fdp`` runs
    out), then drain it. Raises ``AssertionError`` on a finding."""
    for _ in range(max_steps):
        if fdp.remaining() == 0:
            break
        harness.step(fdp)
    harness.drain()
