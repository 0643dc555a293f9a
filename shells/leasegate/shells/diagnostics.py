"""Bounded host waits: their default deadlines, the error they raise, and why they waited.

Every blocking host call of both runner shells (and the WebSocket
transports' ``wait_connected``) has a finite default deadline, one constant
per wait below, in seconds. When it elapses the call raises
:class:`WaitTimeout` (:class:`LaunchTimeout` for ``wait_launch_ready``), a
:class:`TimeoutError`, whose message says why the answer has not come, from
facts the shell and the core can see without any secret:

* the shell's :class:`WireLog` — frames sent and received (by kind only),
  failed sends, the transport's connected state, ``lease.unavailable`` /
  ``lease.deny`` answers per run, env frames per task and the env acks the
  replica refused, with their codes;
* the runtime's pure queries — :meth:`CredentialRuntime.startup_status
  <leasegate.core.runtime.CredentialRuntime.startup_status>` (startup, env
  wait, gate, the registry's ``RunStatus``, the replica's boot id) and
  ``tracked()``.

The same facts give the WARNING records the shells log as soon as a
mis-setup shows (:meth:`WireLog.send_failed`, :meth:`WireLog.received`,
:meth:`WireLog.ack`). Texts hold identifiers (task ids, run epochs, boot
ids, revisions, frame kinds, ack codes), counts and times, never a frame's
contents, a value or a header. Guide: ``docs/shells.md`` ("Waits and their
deadlines") and ``docs/troubleshooting.md``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from leasegate.core.registry import LEASE_RETRY_MS
from leasegate.core.runtime import StartupStatus

__all__ = [
    "ABANDON_START_TIMEOUT_S",
    "ACQUIRE_HOLD_TIMEOUT_S",
    "BEGIN_START_TIMEOUT_S",
    "BOOT_ID_MISMATCH",
    "CLOSE_TIMEOUT_S",
    "CLOUD_SILENT",
    "CONNECT_TIMEOUT_S",
    "ENV_INCOMPLETE",
    "ENV_REFUSED",
    "INSTALLING",
    "LAUNCH_READY_TIMEOUT_S",
    "LEASE_DENIED",
    "LEASE_UNAVAILABLE",
    "NOT_CURRENT",
    "NO_ENV_FRAME",
    "NO_REQUEST",
    "RECOVER_TIMEOUT_S",
    "RESENT_ACK_CODES",
    "RUNTIME_BUSY",
    "SHUTDOWN_TIMEOUT_S",
    "STARTUP_PENDING",
    "TRANSPORT_DISCONNECTED",
    "TRANSPORT_NEVER_CONNECTED",
    "TRANSPORT_NEVER_STARTED",
    "LaunchTimeout",
    "RunWire",
    "WaitTimeout",
    "WireFacts",
    "WireLog",
    "diagnose_call",
    "diagnose_connect",
    "diagnose_launch",
]

# ---------------------------------------------------------------- deadlines

#: ``begin_start``: the runtime answers at once; seconds.
BEGIN_START_TIMEOUT_S: Final = 30.0
#: ``wait_launch_ready``: grant, reads, env snapshot, consumers; seconds. Shorter
#: than the runtime's own launch deadline (3 min, ``launch_deadline_ms``) so a
#: mis-setup is reported with its cause within a minute; a host that expects
#: slower starts passes a larger ``timeout_s``.
LAUNCH_READY_TIMEOUT_S: Final = 60.0
#: ``acquire_hold``: the runtime answers at once; seconds.
ACQUIRE_HOLD_TIMEOUT_S: Final = 30.0
#: ``abandon_start``: the run's close and its cleanup; seconds.
ABANDON_START_TIMEOUT_S: Final = 60.0
#: ``close``: the gate close and the cleanup procedure; seconds.
CLOSE_TIMEOUT_S: Final = 60.0
#: ``recover``: every owed whole-task cleanup; seconds.
RECOVER_TIMEOUT_S: Final = 120.0
#: ``shutdown``: the runtime's drain (bounded; never raises); seconds.
SHUTDOWN_TIMEOUT_S: Final = 15.0
#: The WebSocket transports' ``wait_connected``; seconds.
CONNECT_TIMEOUT_S: Final = 30.0

# ------------------------------------------------------------------- causes

#: The transport reports it was never started (client not entered / started).
TRANSPORT_NEVER_STARTED: Final = "transport-never-started"
#: Sends failed and the transport has never been connected.
TRANSPORT_NEVER_CONNECTED: Final = "transport-never-connected"
#: Sends fail now; the transport was connected before.
TRANSPORT_DISCONNECTED: Final = "transport-disconnected"
#: The cloud answered the run's lease requests with ``lease.unavailable``.
LEASE_UNAVAILABLE: Final = "lease-unavailable"
#: The cloud answered the run's lease requests with ``lease.deny``.
LEASE_DENIED: Final = "lease-denied"
#: Lease requests went out; nothing came back since.
CLOUD_SILENT: Final = "cloud-silent"
#: No ``lease.request`` was sent for the run.
NO_REQUEST: Final = "no-request"
#: The replica refused env frames whose ``runnerBootId`` is not its boot id.
BOOT_ID_MISMATCH: Final = "boot-id-mismatch"
#: The replica refused env frames (another error ack code).
ENV_REFUSED: Final = "env-refused"
#: Granted, and no env frame arrived for the task.
NO_ENV_FRAME: Final = "no-env-frame"
#: Granted, env frames arrived, the snapshot is not complete.
ENV_INCOMPLETE: Final = "env-incomplete"
#: The runtime's startup of the run (``StartRun``) has not finished.
STARTUP_PENDING: Final = "startup-pending"
#: Granted and committed; the consumers' install has not finished.
INSTALLING: Final = "installing"
#: The start is unknown or no longer current.
NOT_CURRENT: Final = "not-current"
#: Another call: the runtime's tracked work has not settled.
RUNTIME_BUSY: Final = "runtime-busy"

#: Lease op ids remembered to attribute answers to runs (oldest forgotten first).
_MAX_OPS: Final = 256
#: Runs and tasks whose wire facts are kept (oldest forgotten first).
_MAX_RUNS: Final = 1024

#: Env ack codes a cloud answers by re-sending the same frame as a matter of
#: course (ER-018: the run's grant is still being installed, or its assignment
#: not yet known): logged at DEBUG, not as a refusal that needs a look.
RESENT_ACK_CODES: Final = frozenset({"activation_pending", "task_assignment_mismatch"})

_ACK_KIND: Final = "env.replica.v1.ack"
_ENV_PREFIX: Final = "env.replica.v1."


class WaitTimeout(TimeoutError):  # noqa: N818 - named like TimeoutError, the outcome it reports
    """A host wait reached its deadline; the message says why (no secret in it).

    Attributes:
        wait: the call, e.g. ``"wait_launch_ready"``, ``"close"``.
        timeout_s: the deadline that elapsed, seconds.
        causes: the diagnosis codes, most specific first (the constants of
            :mod:`leasegate.shells.diagnostics`, e.g. :data:`BOOT_ID_MISMATCH`).
        diagnosis: the text after the wait's name and deadline.

    A subclass of :class:`TimeoutError`: ``except TimeoutError`` catches it.
    The shell keeps no waiter behind for the call (the runtime's own wait,
    if any, stays registered and ends by its own rules).
    """

    def __init__(
        self, wait: str, timeout_s: float, diagnosis: str, causes: tuple[str, ...] = ()
    ) -> None:
        super().__init__(f"{wait}: {diagnosis}")
        self.wait = wait
        self.timeout_s = timeout_s
        self.causes = causes
        self.diagnosis = diagnosis


class LaunchTimeout(WaitTimeout):
    """``wait_launch_ready`` reached its deadline (see :func:`diagnose_launch`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunWire:
    """Wire facts of one run ``(task_id, run_epoch)`` (counts and epoch-ms times).

    Attributes:
        requests: ``lease.request`` frames sent; ``last_request_ms`` the latest.
        unavailable: ``lease.unavailable`` answers since the last grant;
            ``first_unavailable_ms`` the first of them.
        denied: ``lease.deny`` answers since the last grant; ``first_denied_ms``.
        grants: ``lease.grant.v1`` answers; ``grant_revision`` the latest
            one's ``manifestRevision`` when it is an integer.
    """

    requests: int = 0
    last_request_ms: int | None = None
    unavailable: int = 0
    first_unavailable_ms: int | None = None
    denied: int = 0
    first_denied_ms: int | None = None
    grants: int = 0
    grant_revision: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class WireFacts:
    """A snapshot of a :class:`WireLog` (counts; times in ms since the epoch).

    Attributes:
        now_ms: when the snapshot was taken.
        sent, send_failures: frames handed to the transport / refused by it.
        first_send_failure_ms, last_sent_ms: times, or ``None``.
        failures_since_sent: send failures since the last successful send.
        received: frames received (valid JSON); ``last_received_ms``.
        connections: ``Reauthenticated`` markers seen (a WebSocket transport's
            handshakes).
        runs: :class:`RunWire` by ``(task_id, run_epoch)``.
        env_frames: env frames received by task id; ``last_env_ms`` by task.
        refused: by task id, ``(code, count)`` of env frames the replica
            answered with an error ack.
        boot_mismatch: by task id, ``(frame boot id, runner boot id or None)``
            of the latest ``runner_boot_mismatch``.
    """

    now_ms: int
    sent: int
    send_failures: int
    failures_since_sent: int
    first_send_failure_ms: int | None
    last_sent_ms: int | None
    received: int
    last_received_ms: int | None
    connections: int
    runs: dict[tuple[str, int], RunWire]
    env_frames: dict[str, int]
    last_env_ms: dict[str, int]
    refused: dict[str, tuple[tuple[str, int], ...]]
    boot_mismatch: dict[str, tuple[str, str | None]]


def _bounded_put(d: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    d.pop(key, None)
    d[key] = value
    while len(d) > limit:
        del d[next(iter(d))]


def _str(value: object) -> str | None:
    return value if type(value) is str else None


class WireLog:
    """What a runner shell saw on the wire, for diagnoses and WARNING records.

    Args:
        clock_ms: the clock (milliseconds since the epoch).

    Thread-safe (one lock): the threading shell's sender, receiver and
    drainer all report to it. Keeps kinds, ids, codes, counts and times
    only, never a frame's contents; bounded (:data:`_MAX_OPS` op ids,
    :data:`_MAX_RUNS` runs and tasks). Each ``send_failed``/``received``/
    ``ack`` returns the WARNING text the shell logs at once, or ``None``:
    the first failed send while the transport has never connected, the
    first ``lease.unavailable`` of a run never granted, the first
    ``lease.deny`` of a run, the first env frame the replica refuses for a
    task and run with a code the cloud does not simply resend on (naming
    both boot ids on ``runner_boot_mismatch``); ``ack`` also gives the
    level, DEBUG for a code of :data:`RESENT_ACK_CODES`.
    """

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock = clock_ms
        self._lock = threading.Lock()
        self._sent = 0
        self._failures = 0
        self._failures_since_sent = 0
        self._first_failure_ms: int | None = None
        self._last_sent_ms: int | None = None
        self._received = 0
        self._last_received_ms: int | None = None
        self._connections = 0
        self._warned_never_connected = False
        self._ops: dict[str, tuple[str, int]] = {}
        self._runs: dict[tuple[str, int], RunWire] = {}
        self._env: dict[str, int] = {}
        self._last_env: dict[str, int] = {}
        self._refused: dict[str, dict[str, int]] = {}
        #: ``(task, run, "")`` of each run whose WARNING was given.
        self._refused_warned: dict[tuple[str, int, str], None] = {}
        #: ``(task, run, code)`` of each re-sent code logged at DEBUG.
        self._refused_noted: dict[tuple[str, int, str], None] = {}
        self._boot: dict[str, tuple[str, str | None]] = {}

    # ------------------------------------------------------------ reports

    def sent(self) -> None:
        """A frame was handed to the transport."""
        with self._lock:
            self._sent += 1
            self._failures_since_sent = 0
            self._last_sent_ms = self._clock()

    def send_failed(self, transport: object, kind: str) -> str | None:
        """The transport refused a ``kind`` frame; the WARNING text to log once, or ``None``.

        The text is given the first time a send fails while the transport
        has never been connected (no handshake marker, no frame received,
        no send succeeded).
        """
        with self._lock:
            now = self._clock()
            self._failures += 1
            self._failures_since_sent += 1
            if self._first_failure_ms is None:
                self._first_failure_ms = now
            never = self._sent == 0 and self._received == 0 and self._connections == 0
            if not never or self._warned_never_connected:
                return None
            self._warned_never_connected = True
        return f"could not send a {kind} frame: {_transport_text(transport)}"

    def connected(self) -> None:
        """The transport reported a (re)connection (a ``Reauthenticated`` marker)."""
        with self._lock:
            self._connections += 1

    def outgoing(self, frame: object) -> None:
        """A frame the core asked to send (a wire model): remember a ``lease.request``'s run."""
        op = _str(getattr(frame, "op_id", None))
        task = _str(getattr(frame, "task_id", None))
        run = getattr(frame, "run_epoch", None)
        if op is None or task is None or type(run) is not int:
            return
        if type(frame).__name__ != "LeaseRequest":
            return
        with self._lock:
            _bounded_put(self._ops, op, (task, run), _MAX_OPS)
            w = self._runs.get((task, run), RunWire())
            w = dataclasses.replace(w, requests=w.requests + 1, last_request_ms=self._clock())
            _bounded_put(self._runs, (task, run), w, _MAX_RUNS)

    def received(self, value: object) -> str | None:
        """A frame arrived (its JSON value); the WARNING text to log at once, or ``None``."""
        kind = _str(value.get("kind")) if isinstance(value, dict) else None
        with self._lock:
            now = self._clock()
            self._received += 1
            self._last_received_ms = now
            if kind is None or not isinstance(value, dict):
                return None
            if kind.startswith(_ENV_PREFIX):
                task = _str(value.get("taskId"))
                if task is not None:
                    _bounded_put(self._env, task, self._env.get(task, 0) + 1, _MAX_RUNS)
                    _bounded_put(self._last_env, task, now, _MAX_RUNS)
                return None
            op = _str(value.get("opId"))
            run = self._ops.get(op) if op is not None else None
            if run is None:
                return None
            w = self._runs.get(run, RunWire())
            warn: str | None = None
            if kind == "lease.grant.v1":
                lease = value.get("lease")
                rev = lease.get("manifestRevision") if isinstance(lease, dict) else None
                w = dataclasses.replace(
                    w,
                    grants=w.grants + 1,
                    grant_revision=rev if type(rev) is int else None,
                    unavailable=0,
                    first_unavailable_ms=None,
                    denied=0,
                    first_denied_ms=None,
                )
            elif kind == "lease.unavailable":
                if w.unavailable == 0 and w.grants == 0:
                    warn = (
                        f"the cloud answered lease.unavailable for task {run[0]!r} run {run[1]} "
                        f"(no grant yet; the registry retries every {LEASE_RETRY_MS // 1000} s): "
                        "is the run assigned to this runner?"
                    )
                w = dataclasses.replace(
                    w,
                    unavailable=w.unavailable + 1,
                    first_unavailable_ms=w.first_unavailable_ms or now,
                )
            elif kind == "lease.deny":
                if w.denied == 0:
                    warn = (
                        f"the cloud denied the lease for task {run[0]!r} run {run[1]} "
                        f"(the registry retries every {LEASE_RETRY_MS // 1000} s)"
                    )
                w = dataclasses.replace(
                    w, denied=w.denied + 1, first_denied_ms=w.first_denied_ms or now
                )
            _bounded_put(self._runs, run, w, _MAX_RUNS)
        return warn

    def ack(self, ack: object, runner_boot_id: str | None) -> tuple[int, str] | None:
        """The replica's ack for an env frame (an ``EnvAck``): ``(level, text)`` or ``None``.

        Args:
            ack: the ``SendAck`` command's frame.
            runner_boot_id: this runner's replica boot id, when known.

        A ``WARNING`` text is given for the first error ack of each task and
        run whose code is not in :data:`RESENT_ACK_CODES`
        (``runner_boot_mismatch`` names the frame's and the runner's boot
        id). A code of :data:`RESENT_ACK_CODES` (the cloud re-sends the frame
        as a matter of course, ER-018) gives a ``DEBUG`` text, the first time
        per task, run and code, and leaves the run's WARNING to a later
        code. Every error ack is counted in the facts.
        """
        if getattr(ack, "ok", True) is not False:
            return None
        task = _str(getattr(ack, "task_id", None))
        run = getattr(ack, "run_epoch", None)
        code = _str(getattr(ack, "code", None))
        if task is None or type(run) is not int or code is None:
            return None
        frame_boot = _str(getattr(ack, "runner_boot_id", None))
        resent = code in RESENT_ACK_CODES
        with self._lock:
            codes = self._refused.get(task, {})
            codes[code] = codes.get(code, 0) + 1
            _bounded_put(self._refused, task, codes, _MAX_RUNS)
            if code == "runner_boot_mismatch" and frame_boot is not None:
                _bounded_put(self._boot, task, (frame_boot, runner_boot_id), _MAX_RUNS)
            seen = self._refused_noted if resent else self._refused_warned
            key = (task, run, code if resent else "")
            first = key not in seen
            if first:
                _bounded_put(seen, key, None, _MAX_RUNS)
        if not first:
            return None
        text = f"the env replica refused an env frame for task {task!r} run {run}: {code}"
        if resent:
            return logging.DEBUG, text + " (the cloud resends it)"
        if code == "runner_boot_mismatch" and frame_boot is not None:
            text = f"task {task!r} run {run}: " + _boot_text(frame_boot, runner_boot_id)
        return logging.WARNING, text

    # -------------------------------------------------------------- facts

    def facts(self) -> WireFacts:
        """A consistent snapshot (:class:`WireFacts`)."""
        with self._lock:
            return WireFacts(
                now_ms=self._clock(),
                sent=self._sent,
                send_failures=self._failures,
                failures_since_sent=self._failures_since_sent,
                first_send_failure_ms=self._first_failure_ms,
                last_sent_ms=self._last_sent_ms,
                received=self._received,
                last_received_ms=self._last_received_ms,
                connections=self._connections,
                runs=dict(self._runs),
                env_frames=dict(self._env),
                last_env_ms=dict(self._last_env),
                refused={t: tuple(c.items()) for t, c in self._refused.items()},
                boot_mismatch=dict(self._boot),
            )


# --------------------------------------------------------------- diagnoses


def _at(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "never"
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%H:%M:%S")
    return f"{t} UTC ({max(0, now_ms - ms) / 1000:.1f} s ago)"


def _transport_state(transport: object) -> tuple[bool | None, bool | None]:
    """``(started, connected)`` as the transport reports them (``None``: it does not say)."""
    started = getattr(transport, "started", None)
    connected = getattr(transport, "connected", None)
    return (
        started if type(started) is bool else None,
        connected if type(connected) is bool else None,
    )


def _transport_text(transport: object) -> str:
    started, _ = _transport_state(transport)
    if started is False:
        return (
            "the transport was never started (is the WebSocket client started? "
            "enter it with `with` / `async with`, or call start())"
        )
    return "the transport has never connected (is the WebSocket client started?)"


def _boot_text(frame_boot: str, runner_boot: str | None) -> str:
    mine = f"this runner's boot id is {runner_boot!r}" if runner_boot else "this runner's differs"
    return (
        f"env frames for boot id {frame_boot!r} were refused because {mine} "
        "(the replica's boot id must equal the runner_boot_id the cloud was given at assignment)"
    )


def _wire_suffix(w: WireFacts) -> str:
    return (
        f" [frames sent {w.sent}, send failures {w.send_failures}, received {w.received}, "
        f"last received {_at(w.last_received_ms, w.now_ms)}]"
    )


def _no_grant(w: WireFacts, run: RunWire, transport: object) -> tuple[str, str]:
    """Why a run has no grant yet: ``(text, cause)``."""
    started, connected = _transport_state(transport)
    if started is False:
        return ("no grant yet: " + _transport_text(transport), TRANSPORT_NEVER_STARTED)
    never = w.sent == 0 and w.received == 0 and w.connections == 0
    if never and w.send_failures:
        return (
            f"no grant yet: the transport has never connected ({w.send_failures} sends failed "
            f"since {_at(w.first_send_failure_ms, w.now_ms)}; is the WebSocket client started?)",
            TRANSPORT_NEVER_CONNECTED,
        )
    if w.failures_since_sent and connected is not True:
        return (
            f"no grant yet: the transport is disconnected ({w.failures_since_sent} sends failed "
            f"since the last one sent, {_at(w.last_sent_ms, w.now_ms)})",
            TRANSPORT_DISCONNECTED,
        )
    if run.unavailable:
        return (
            f"no grant yet: the cloud has answered lease.unavailable {run.unavailable} "
            f"time{'s' if run.unavailable != 1 else ''} since "
            f"{_at(run.first_unavailable_ms, w.now_ms)} (is the run assigned to this runner?)",
            LEASE_UNAVAILABLE,
        )
    if run.denied:
        return (
            f"no grant yet: the cloud has denied the lease {run.denied} "
            f"time{'s' if run.denied != 1 else ''} since {_at(run.first_denied_ms, w.now_ms)}",
            LEASE_DENIED,
        )
    if run.requests == 0:
        return ("no grant yet: no lease.request was sent for the run", NO_REQUEST)
    if w.last_received_ms is None:
        return (
            f"no grant yet: the cloud has never sent a frame ({run.requests} lease.request "
            f"sent, the last {_at(run.last_request_ms, w.now_ms)})",
            CLOUD_SILENT,
        )
    return (
        f"no grant yet: the cloud has been silent since {_at(w.last_received_ms, w.now_ms)} "
        f"(lease.request sent {_at(run.last_request_ms, w.now_ms)}, unanswered)",
        CLOUD_SILENT,
    )


def _no_env(w: WireFacts, task: str) -> tuple[str, str]:
    """Why a granted run's env snapshot is not committed: ``(text, cause)``."""
    boot = w.boot_mismatch.get(task)
    if boot is not None:
        return (_boot_text(*boot), BOOT_ID_MISMATCH)
    refused = w.refused.get(task)
    if refused:
        codes = ", ".join(f"{code} x{n}" for code, n in refused)
        return (f"the env replica refused env frames ({codes})", ENV_REFUSED)
    n = w.env_frames.get(task, 0)
    if n == 0:
        return ("no env frame received for the task", NO_ENV_FRAME)
    return (
        f"{n} env frame{'s' if n != 1 else ''} received, the last "
        f"{_at(w.last_env_ms.get(task), w.now_ms)}; the snapshot is not complete",
        ENV_INCOMPLETE,
    )


def diagnose_launch(
    start_id: int,
    timeout_s: float,
    status: StartupStatus | None,
    wire: WireFacts,
    transport: object,
    tracked: tuple[str, ...] = (),
) -> LaunchTimeout:
    """The :class:`LaunchTimeout` of a ``wait_launch_ready`` that reached its deadline.

    Args:
        start_id: the start waited for.
        timeout_s: the deadline, seconds.
        status: the runtime's ``startup_status(start_id)``.
        wire: the shell's :meth:`WireLog.facts`.
        transport: the shell's transport (its ``started`` / ``connected``
            attributes are read when it has them).
        tracked: the runtime's ``tracked()`` labels.

    The message names the first cause that applies, in the order of the
    startup: start not current, startup pending, no grant (transport never
    started / never connected / disconnected, ``lease.unavailable``,
    ``lease.deny``, no request, cloud silent), granted but the env snapshot
    not committed (boot id mismatch, other refusals, no env frame, snapshot
    incomplete), consumers installing; then the wire counts.
    """
    head = f"not launch-ready after {timeout_s:.1f} s"
    if status is None or not status.live:
        text, cause = "the start is no longer current (ended, replaced or aborted)", NOT_CURRENT
        return LaunchTimeout("wait_launch_ready", timeout_s, f"{head}: {text}", (cause,))
    a = status.assignment
    head += f" (task {a.task_id!r} run {a.run_epoch})"
    reg = status.registry
    revision = reg.installed_revision if reg is not None else None
    if status.startup == "pending":
        text, cause = (
            "the runtime's startup of the run has not finished (an earlier run's close or "
            "a recovery of the task is still settling)",
            STARTUP_PENDING,
        )
    elif status.env_waiting:
        why, cause = _no_env(wire, a.task_id)
        rev = wire.runs.get((a.task_id, a.run_epoch), RunWire()).grant_revision
        what = "granted" if rev is None else f"granted (revision {rev})"
        text = f"{what} but the env snapshot is not committed: {why}"
    elif revision is None or reg is None or reg.phase in ("waiting", "recovering"):
        text, cause = _no_grant(wire, wire.runs.get((a.task_id, a.run_epoch), RunWire()), transport)
    else:
        work = ", ".join(tracked) or "none"
        text, cause = (
            f"granted (revision {revision}, phase {reg.phase}) and the env snapshot is in; "
            f"the consumers' install has not finished (runtime work outstanding: {work})",
            INSTALLING,
        )
    return LaunchTimeout(
        "wait_launch_ready", timeout_s, f"{head}: {text}{_wire_suffix(wire)}", (cause,)
    )


def diagnose_call(
    wait: str, timeout_s: float, tracked: tuple[str, ...], wire: WireFacts
) -> WaitTimeout:
    """The :class:`WaitTimeout` of another host call (``close``, ``recover``, ...).

    Args:
        wait: the call's name.
        timeout_s: the deadline, seconds.
        tracked: the runtime's ``tracked()`` labels (work not settled).
        wire: the shell's :meth:`WireLog.facts`.
    """
    work = ", ".join(tracked) or "none"
    return WaitTimeout(
        wait,
        timeout_s,
        f"no answer after {timeout_s:.1f} s: the runtime's work has not settled "
        f"(outstanding: {work}; consumer work, a durable journal or a cleanup may be "
        f"blocked){_wire_suffix(wire)}",
        (RUNTIME_BUSY,),
    )


def diagnose_connect(
    timeout_s: float, *, started: bool, connections: int, attempts: int
) -> WaitTimeout:
    """The :class:`WaitTimeout` of a WebSocket transport's ``wait_connected``.

    Args:
        timeout_s: the deadline, seconds.
        started: whether the client's connect loop runs.
        connections: handshakes that succeeded so far.
        attempts: connection attempts that failed so far (backoff delays taken).
    """
    if not started:
        return WaitTimeout(
            "wait_connected",
            timeout_s,
            f"not connected after {timeout_s:.1f} s: the WebSocket client was never started "
            "(enter it with `with` / `async with`, or call start())",
            (TRANSPORT_NEVER_STARTED,),
        )
    return WaitTimeout(
        "wait_connected",
        timeout_s,
        f"not connected after {timeout_s:.1f} s: {attempts} connection attempt"
        f"{'s' if attempts != 1 else ''} failed, {connections} succeeded "
        "(is the bridge URL right and the bridge up? are the handshake headers accepted?)",
        (TRANSPORT_NEVER_CONNECTED,),
    )
