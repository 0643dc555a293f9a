"""Frames: intake, per-task lanes, dispatch and the resumption of a read.

A valid frame joins its task's FIFO lane (ER-026); the head of an idle lane
is dispatched inside the same ``handle`` call, through the identity checks
(ER-027), to its kind's rules. A read's completion resumes its page or apply
after the fence (ER-103–ER-107).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from .._json import JsonError, loads
from .._model import DecodeError, decoder, encode
from ..wire._env_text import _decode_apply_match
from ..wire.env import APPLY_KIND, EnvApply, EnvBegin, EnvCommit, EnvPage
from ._applies import _Applies
from ._events import EnvFrameReceived, FrameRejected, ValueReadCompleted, ValueReadFailed
from ._phases import EXHAUSTED
from ._receipts import state_json
from ._snapshots import _Snapshots
from ._state import (
    _EXHAUSTED,
    _INVALID_FRAME,
    PROJECT_ENV_ACTIVATION_PENDING,
    PROJECT_ENV_READER_CHANGED,
    _Frame,
)

_decode_frame: Final = decoder(EnvBegin | EnvPage | EnvApply | EnvCommit)
# The same decision for a value whose kind is already known to be an apply
# (the union dispatches on ``kind`` to exactly this decoder).
_decode_apply: Final = decoder(EnvApply)


class _Lanes(_Snapshots, _Applies):
    """Frame intake and lanes, dispatch by kind, and read completions."""

    def _on_frame(self, ev: EnvFrameReceived) -> None:
        value: Any = ev.frame
        tv = type(value)
        if tv is str or tv is bytes or tv is bytearray:
            # The frame's text as received: an apply in the wire's compact
            # form is decoded in one match (decode_apply_text, which accepts
            # only what the full path would decode to the same frame), its
            # state's JSON sliced from the text; any other text is parsed,
            # then decoded as a JSON value.
            if tv is not str:
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                    return
            fast = _decode_apply_match(value)
            if fast is not None:
                return self._intake(*fast)
            try:
                value = loads(value)
            except JsonError:
                self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                return
        elif tv in (EnvBegin, EnvPage, EnvApply, EnvCommit):
            # A pre-built frame is trusted no more than JSON (ER-024): it is
            # encoded (its fields may hold anything, so encoding may fail)
            # and the result goes through the same decoder as a JSON value,
            # which also deep-copies it (ER-025). Env frames hold no secrets.
            try:
                value = encode(value)
            except Exception:  # noqa: BLE001 - any failure means "not a frame"
                self._out.append(FrameRejected(error=_INVALID_FRAME, field=""))
                return
        kind: object = None
        if type(value) is dict:
            try:
                kind = value.get("kind")
            except Exception:  # noqa: BLE001 - a hostile key; the decoder decides
                kind = None
        frame: Any = (
            _decode_apply(value)
            if type(kind) is str and kind == APPLY_KIND
            else _decode_frame(value)
        )
        if isinstance(frame, DecodeError):
            self._out.append(FrameRejected(error=_INVALID_FRAME, field=frame.field))
            return
        # An apply's state as JSON (state_json), taken now: its fingerprint
        # and ledger cost are computed from it (the caller's value may change).
        # (Written from the decoded, frozen state, which is exact.)
        self._intake(frame, state_json(frame.state) if type(frame) is EnvApply else None)

    # ER-026: one lane per task: frames of a task run one at a time in arrival
    # order, each with its reads finished before the next; lanes of different tasks are
    # independent.
    def _intake(self, frame: _Frame, sj: str | None) -> None:
        """Dispatch a decoded frame, or queue it behind its task's lane."""
        task_id = frame.task_id
        lane = self._lanes.get(task_id)
        if lane is None:
            if task_id not in self._busy:
                # Nothing queued and nothing running: dispatch at once.
                self._dispatch(frame, sj)
                return
            lane = self._lanes[task_id] = deque()
        lane.append((frame, sj))
        if task_id not in self._busy:
            self._pump(task_id)

    def _pump(self, task_id: str) -> None:
        lane = self._lanes.get(task_id)
        while lane and task_id not in self._busy:
            self._dispatch(*lane.popleft())
        if lane is not None and not lane and task_id not in self._busy:
            del self._lanes[task_id]

    def _dispatch(self, frame: _Frame, sj: str | None) -> None:
        r = self._replicas.get(frame.task_id)
        if frame.runner_boot_id != self._boot_id:
            return self._error(frame, r, "runner_boot_mismatch")
        # ER-023: the pending-activation check runs at dispatch, not at receipt; ER-019: tokens
        # pending only for another run have no effect on this frame.
        pending = self._pending.get(frame.task_id)
        if pending is not None and frame.run_epoch in pending.values():
            return self._error(frame, r, PROJECT_ENV_ACTIVATION_PENDING)
        if r is None or r.run_epoch != frame.run_epoch:
            return self._error(frame, r, "task_assignment_mismatch")
        if r.phase is EXHAUSTED:
            return self._error(frame, r, _EXHAUSTED)
        t = type(frame)
        if t is EnvApply:
            return self._apply(r, frame, sj)  # type: ignore[arg-type]
        if t is EnvPage:
            return self._page(r, frame)  # type: ignore[arg-type]
        if t is EnvBegin:
            return self._begin(r, frame)  # type: ignore[arg-type]
        return self._commit(r, frame)  # type: ignore[arg-type]

    def _on_read(self, ev: ValueReadCompleted | ValueReadFailed) -> None:
        op = self._ops.pop(ev.cmd_id, None) if type(ev.cmd_id) is int else None
        if op is None:
            return
        r = op.replica
        task_id = r.task_id
        frame = op.frame
        del self._busy[task_id]
        cur = self._replicas.get(task_id)
        # ER-106 (#readFenceCurrent): lifecycle calls that change none of these fields leave the
        # frame to complete normally; ER-107: a fenced frame keeps its lane until its read returns
        # (the pump below runs after it).
        # The fence runs before the completion is looked at: a fenced
        # payload is discarded unseen (never revealed nor parsed; ER-103/104).
        if not (
            cur is r
            and r.run_epoch == frame.run_epoch
            and frame.runner_boot_id == self._boot_id
            and r.fence == op.fence
            and r.reader is op.reader
            and r.stream_id == frame.stream_id
            and r.attempt is op.attempt
            and (
                frame.attempt_id is None
                if op.attempt is None
                else frame.attempt_id == op.attempt.attempt_id
            )
        ):
            op.state = None
            for e in op.entries if type(frame) is EnvPage else ():
                e.value = None
                r.in_flight.discard(e)
            code = (
                PROJECT_ENV_READER_CHANGED
                if cur is r and r.reader_generation != op.reader_generation
                else "replica_state_changed"
            )
            self._error(frame, cur, code)
        else:
            entry = self._materialize_finish(op, ev)
            op.state = None
            if type(frame) is EnvPage:
                # Held until the page settles (scrubbed if the replica is).
                r.in_flight.add(entry)
                op.entries.append(entry)
                op.index += 1
                self._page_continue(op)
            else:
                self._apply_finish(op, entry)
        if task_id in self._lanes:
            self._pump(task_id)
