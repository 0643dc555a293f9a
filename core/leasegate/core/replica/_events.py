"""Events the env replica takes and commands it emits.

Events subclass :class:`~leasegate.core._base.Event` (every one carries
``now_ms``, milliseconds since the Unix epoch; the replica itself never needs
the time: readiness deadlines are timers the shell runs). Commands subclass
:class:`~leasegate.core._base.Command`. A read command carries a ``cmd_id``;
the shell answers it with exactly one :class:`ValueReadCompleted` or
:class:`ValueReadFailed` carrying that id, *including* for a read it gave up
on (answer it as failed), or the task's frame lane stays blocked.

Reference: ``ProjectEnvTaskReplicaManager`` in
``host/lib/project-env-task-replica.ts`` (catalog ``env-replica.md``, "Notes
for a sans-I/O port" 2, 3, 5 and 6).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .._base import Command, Event
from .._secret import Secret
from ..wire.env import EnvAck

__all__ = [
    "ActivateAssignment",
    "ActivationOutcome",
    "ActivationToken",
    "AwaitReady",
    "CancelTimer",
    "DropAll",
    "DropAssignment",
    "Dropped",
    "EnvFrameReceived",
    "ExpectActivation",
    "FrameRejected",
    "NotifyChange",
    "ReadLegacyValue",
    "ReadStagedValue",
    "ReadinessDeadline",
    "RejectWaiter",
    "ResolveWaiter",
    "SendAck",
    "SettleActivation",
    "StartTimer",
    "ValueReadCompleted",
    "ValueReadFailed",
]


# ---------------------------------------------------------------------------
# Events


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvFrameReceived(Event):
    """A frame for the replica arrived (``handleFrame``, ER-024–ER-027).

    ``frame``: the frame's JSON text as received (``str``, or UTF-8
    ``bytes``/``bytearray``), the JSON value as parsed (``dict``), or an
    already decoded :data:`~leasegate.core.wire.env.EnvFrame`. Text is the
    fastest input: an apply in the wire's compact form is decoded in one
    match (:func:`~leasegate.core.wire.decode_apply_text`); other text is
    parsed with :func:`~leasegate.core.loads` (``JSON.parse`` semantics)
    and decoded like a value. Text that is not JSON (or not UTF-8), and a
    value that is not a valid begin/page/apply/commit frame, yield
    :class:`FrameRejected` and nothing else (ER-024).
    """

    frame: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ValueReadCompleted(Event):
    """A value read finished (the awaited ``readStaged``/``readLegacy``).

    ``raw``: the raw envelope text (a :class:`Secret`), or ``None`` when the
    parameter does not exist. ``version``: for a legacy read, the SSM version
    that was returned (``None`` for a staged read).
    """

    cmd_id: int
    raw: Secret | None
    version: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ValueReadFailed(Event):
    """A value read raised, was cancelled or went through a closed reader.

    Always maps to ``value_unavailable`` (ER-101). No error text is taken:
    it could quote a secret.
    """

    cmd_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ActivateAssignment(Event):
    """``activateAssignment``: install or refresh the run's value reader.

    ``reader``: an opaque, identity-compared handle for the grant's "value
    reader generation" (any object except ``None``); read commands carry it
    back so the shell routes them to that grant. Answered by
    :class:`ActivationOutcome` (ER-005–ER-013, ER-020).
    """

    task_id: str
    run_epoch: int
    org_id: str
    reader: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExpectActivation(Event):
    """``expectActivation``: refuse the run's frames until it activates.

    Answered by :class:`ActivationToken` (ER-017, ER-018).
    """

    task_id: str
    run_epoch: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SettleActivation(Event):
    """``settleActivation``: remove token ``token`` of ``task_id`` (ER-017, ER-021)."""

    task_id: str
    token: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DropAssignment(Event):
    """``dropAssignment``: drop exactly run ``run_epoch`` of the task (ER-015)."""

    task_id: str
    run_epoch: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DropAll(Event):
    """``dropAll``: drop every replica and pending token (ER-016)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaitReady(Event):
    """``awaitReady``: settle waiter ``waiter_id`` once the run is ready.

    ``timeout_ms``: a safe integer in 1 … :data:`MAX_READY_TIMEOUT_MS`
    milliseconds. ``waiter_id`` is chosen by the caller and echoed by
    :class:`ResolveWaiter` / :class:`RejectWaiter` (ER-122, ER-123).
    """

    waiter_id: int
    task_id: str
    run_epoch: int
    timeout_ms: object


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadinessDeadline(Event):
    """Timer ``timer_id`` (from :class:`StartTimer`) fired (ER-123)."""

    timer_id: int


# ---------------------------------------------------------------------------
# Commands


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendAck(Command):
    """Send ``ack`` (encode it with ``encode_frame``) to the cloud."""

    ack: EnvAck


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FrameRejected(Command):
    """An invalid frame was refused without an ack (ER-024).

    ``error`` is ``"invalid task project environment replica frame"``;
    ``field`` names the offending wire field (never its value).
    """

    error: str
    field: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadStagedValue(Command):
    """Read the staged v2 envelope of ``(project_id, key, staging_id)`` via ``reader``.

    The parameter is ``/uai/projects/{project_id}/env-values/{sha256(key)}/
    {staging_id}`` (``project_env_staged_parameter``). Answer with one
    :class:`ValueReadCompleted` or :class:`ValueReadFailed` for ``cmd_id``.
    """

    cmd_id: int
    reader: object
    task_id: str
    run_epoch: int
    project_id: str
    key: str
    staging_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReadLegacyValue(Command):
    """Read legacy ``/uai/projects/{project_id}/env/{key}:{version}`` via ``reader``.

    Answer with one :class:`ValueReadCompleted` (``version`` = the version
    SSM returned) or :class:`ValueReadFailed` for ``cmd_id``.
    """

    cmd_id: int
    reader: object
    task_id: str
    run_epoch: int
    project_id: str
    key: str
    version: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ActivationOutcome(Command):
    """The answer to :class:`ActivateAssignment`.

    ``outcome`` is ``"created"``, ``"retained"`` or ``"replaced"``, or ``None``
    with ``error`` one of ``"invalid task assignment"``, ``"task assignment
    run epoch is stale"``, ``"task replica requires a runner restart"``,
    ``"task assignment organization cannot change"`` (what the reference
    throws).
    """

    task_id: str
    run_epoch: int
    outcome: Literal["created", "retained", "replaced"] | None
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ActivationToken(Command):
    """The token :class:`ExpectActivation` registered (one counter, from 1)."""

    task_id: str
    run_epoch: int
    token: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Dropped(Command):
    """The answer to :class:`DropAssignment`: whether a replica was dropped."""

    task_id: str
    run_epoch: int
    dropped: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StartTimer(Command):
    """Fire :class:`ReadinessDeadline` ``timer_id`` after ``delay_ms`` milliseconds.

    The timer must not keep the process alive.
    """

    timer_id: int
    delay_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelTimer(Command):
    """Cancel timer ``timer_id`` (a late firing is ignored anyway)."""

    timer_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResolveWaiter(Command):
    """Waiter ``waiter_id`` is settled: the run is ready."""

    waiter_id: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RejectWaiter(Command):
    """Waiter ``waiter_id`` is rejected with ``reason`` (a reference message)."""

    waiter_id: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NotifyChange(Command):
    """``onChange(task_id)``: the task's replica changed (ER-129).

    Emitted after the change and after waiter commands; nothing the host
    does with it can roll the change back (ER-130).
    """

    task_id: str
