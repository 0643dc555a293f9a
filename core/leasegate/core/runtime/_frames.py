"""Frames and the env replica link (RT-117 … RT-126).

``HandleFrame``: lease frames go to the registry and are answered at once; a
valid env replica frame (decided by the wire codec) goes to the replica as
``EnvFrameReceived`` and is answered when the replica acks or rejects it (acks
come per task, in order). :func:`rep` feeds the replica one event and routes
its commands: acks, rejections, value reads through the grant's reader (the
registry's ``ProjectValueRead``, LR-154) and its timers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._base import Command, Event
from .._json import JsonError, loads
from ..registry import FrameReceived, LegacyRef, ProjectValueDone, ProjectValueRead, StagedRef
from ..replica import CancelTimer as ReplicaCancelTimer
from ..replica import (
    EnvFrameReceived,
    FrameRejected,
    ReadinessDeadline,
    ReadLegacyValue,
    ReadStagedValue,
    ValueReadCompleted,
    ValueReadFailed,
)
from ..replica import SendAck as ReplicaSendAck
from ..replica import StartTimer as ReplicaStartTimer
from ..wire import decode_apply_text, decode_frame
from ..wire.env import EnvApply, EnvBegin, EnvCommit, EnvPage
from ._vocab import V1_FRAME_KINDS, Answer, ReaderRef, SendAck

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = ["REPLICA_FRAME_KINDS", "frame_answered", "handle_frame", "is_replica_frame", "rep"]

#: The four env replica frame kinds (RT-122).
REPLICA_FRAME_KINDS = (
    "env.replica.v1.begin",
    "env.replica.v1.page",
    "env.replica.v1.apply",
    "env.replica.v1.commit",
)

_ENV_FRAMES = (EnvBegin, EnvPage, EnvApply, EnvCommit)
EnvFrame = EnvBegin | EnvPage | EnvApply | EnvCommit


def is_replica_frame(frame: object) -> bool:
    """Whether ``frame`` is a valid ``env.replica.v1`` begin, page, apply or commit frame.

    The reference's four ``isProjectEnvReplicaV1…Frame`` predicates (RT-122,
    RT-124): decided by the wire codec (``leasegate.core.wire.decode_frame``),
    so a malformed frame is not a replica frame.
    """
    return _decode_replica_frame(frame) is not None


def _decode_replica_frame(frame: object) -> EnvFrame | None:
    if isinstance(frame, _ENV_FRAMES):
        return frame
    if not isinstance(frame, dict) or frame.get("kind") not in REPLICA_FRAME_KINDS:
        return None
    got = decode_frame(frame)
    return got if isinstance(got, _ENV_FRAMES) else None


def _frame_kind(frame: object) -> object:
    if isinstance(frame, dict):
        return frame.get("kind")
    tag = getattr(type(frame), "TAG", None)
    if isinstance(tag, tuple) and len(tag) == 2:
        return tag[1]
    return None


# Frames


def handle_frame(rt: CredentialRuntime, call_id: int, frame: object) -> None:
    # RT-118: a frame is answered without waiting for an install that waits for env frames;
    # RT-119: unavailable and stale reach the registry at once; RT-120: a deny runs in
    # background; RT-121: changed and refresh results reach the registry; RT-126: lease frames
    # reach the registry unmodified.
    text: str | None = None
    env: EnvFrame | None = None
    if type(frame) is str:
        # A frame received as text is the value its JSON text parses to; an
        # apply in the wire's compact form is decoded in one match and the
        # replica gets the text itself (its own fast path, ER-024).
        text = frame
        env = decode_apply_text(text)
        if env is None:
            text = None
            try:
                frame = loads(frame)
            except JsonError:
                frame = None
        else:
            frame = env
    kind = _frame_kind(frame)
    replica = rt._replica
    if env is None:
        env = _decode_replica_frame(frame)
    if rt._shut:
        handled = kind != "lease.deny" and (kind in V1_FRAME_KINDS or env is not None)
        rt._emit(Answer(call_id=call_id, value=handled))
        return
    if kind in V1_FRAME_KINDS or kind == "lease.deny":
        rt._reg(FrameReceived(now_ms=rt._now, frame=frame))
        rt._emit(Answer(call_id=call_id, value=kind != "lease.deny"))
        return
    if replica is not None and env is not None:
        wid = rt._track("replica-frame")
        rt._rec(env.task_id).frame_calls.append((call_id, wid))
        rep(rt, EnvFrameReceived(now_ms=rt._now, frame=env if text is None else text), env.task_id)
        return
    rt._emit(Answer(call_id=call_id, value=False))


def frame_answered(rt: CredentialRuntime, task_id: object, handled: bool) -> None:
    rec = rt._tasks.get(task_id) if isinstance(task_id, str) else None
    if rec is None or not rec.frame_calls:
        return
    call_id, wid = rec.frame_calls.pop(0)
    rt._untrack(wid)
    rt._emit(Answer(call_id=call_id, value=handled))


# The replica link


def rep(rt: CredentialRuntime, event: Event, frame_task: str | None = None) -> list[Command]:
    """Feed the replica one event; route its commands; return them.

    ``frame_task`` is the task of the env frame ``event`` carries (needed when
    the frame is text: a rejection answers that task's oldest pending call).
    """
    if rt._replica is None:
        return []
    cmds = rt._replica.handle(event)
    for cmd in cmds:
        if isinstance(cmd, ReplicaSendAck):
            ack = cmd.ack
            if not rt._shut:
                rt._emit(SendAck(frame=ack))
            frame_answered(rt, getattr(ack, "task_id", None), True)
        elif isinstance(cmd, FrameRejected):
            frame = getattr(event, "frame", None)
            task = frame_task if frame_task is not None else getattr(frame, "task_id", None)
            frame_answered(rt, task, False)
        elif isinstance(cmd, (ReadStagedValue, ReadLegacyValue)):
            _rep_read(rt, cmd)
        elif isinstance(cmd, ReplicaStartTimer):
            rid = cmd.timer_id
            tid = rt._set_timer(
                cmd.delay_ms,
                lambda rid=rid: _rep_timer_fired(rt, rid),  # type: ignore[misc]
            )
            rt._rep_timers[rid] = tid
        elif isinstance(cmd, ReplicaCancelTimer):
            rt._clear_timer(rt._rep_timers.pop(cmd.timer_id, None))
    return cmds


def _rep_timer_fired(rt: CredentialRuntime, rid: int) -> None:
    rt._rep_timers.pop(rid, None)
    rep(rt, ReadinessDeadline(now_ms=rt._now, timer_id=rid))


def _rep_read(rt: CredentialRuntime, cmd: ReadStagedValue | ReadLegacyValue) -> None:
    """A replica value read goes through the grant's reader: the registry (LR-154)."""
    cid = cmd.cmd_id
    reader = cmd.reader
    if not isinstance(reader, ReaderRef):
        rep(rt, ValueReadFailed(now_ms=rt._now, cmd_id=cid))
        return
    legacy = isinstance(cmd, ReadLegacyValue)
    ref: StagedRef | LegacyRef = (
        LegacyRef(ssm_version=cmd.version)
        if isinstance(cmd, ReadLegacyValue)
        else StagedRef(staging_id=cmd.staging_id)
    )

    def answered(done: Command) -> None:
        if isinstance(done, ProjectValueDone):
            r = done.result
            rep(
                rt,
                ValueReadCompleted(
                    now_ms=rt._now,
                    cmd_id=cid,
                    raw=None if r is None else r.raw_value,
                    version=r.version if (legacy and r is not None) else None,
                ),
            )
        else:
            rep(rt, ValueReadFailed(now_ms=rt._now, cmd_id=cid))

    rt._reg_call(
        lambda call_id: ProjectValueRead(
            now_ms=rt._now,
            call_id=call_id,
            task_id=cmd.task_id,
            run_epoch=cmd.run_epoch,
            project_id=cmd.project_id,
            key=cmd.key,
            ref=ref,
            install_cmd_id=reader.install_cmd_id,
        ),
        answered,
    )
