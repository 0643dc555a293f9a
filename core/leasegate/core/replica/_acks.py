"""The manager's shared state and the acks every operation writes.

:class:`_Acks` is the base of the manager's parts (:mod:`._accounting`,
:mod:`._lifecycle`, :mod:`._values`, :mod:`._snapshots`, :mod:`._applies`,
:mod:`._lanes`, :mod:`._manager`): it holds the manager's state and builds
the acks (ER-108–ER-113): every ack echoes the frame's identity and carries
the manager's policy epochs and an ``appliedThrough`` cursor.
"""

from __future__ import annotations

from collections import deque
from typing import Final, Literal

from .._base import Command
from .._model import constructor
from ..wire._env_text import _new_cursor
from ..wire.env import DeliveryCursor, EnvAck, EnvApply, EnvBegin, EnvCommit, EnvPage, RecordResult
from ._events import SendAck
from ._receipts import _ApplyReceipt, _receipt_fields, _receipt_result
from ._state import ReplicaLimits, _Frame, _new_notify, _Op, _PageReceipt, _Replica

# Fast constructors (positional, in field order) for values built on the hot
# path from fields that are valid by construction.
_new_ack: Final = constructor(EnvAck)
_new_send_ack: Final = constructor(SendAck)
#: An ack's ``phase`` per frame kind.
_ACK_PHASES: Final[dict[type, Literal["begun", "page", "applied", "complete"]]] = {
    EnvBegin: "begun",
    EnvPage: "page",
    EnvApply: "applied",
    EnvCommit: "complete",
}


class _Acks:
    """The manager's state and its acks (the base of its parts).

    ``boot_id``, ``epochs`` and ``limits`` are the validated constructor
    arguments of :class:`~._manager.ReplicaManager`.
    """

    def __init__(self, boot_id: str, epochs: tuple[int, ...], limits: ReplicaLimits) -> None:
        self._boot_id: Final = boot_id
        self._epochs: Final = epochs
        self._epoch_set: Final = frozenset(epochs)
        self._limits: Final = limits
        self._replicas: dict[str, _Replica] = {}
        self._floors: dict[str, int] = {}
        self._restart_marks: dict[str, int] = {}
        self._pending: dict[str, dict[int, int]] = {}
        self._token = 0
        self._total_entries = 0
        self._total_bytes = 0
        self._lanes: dict[str, deque[tuple[_Frame, str | None]]] = {}
        self._busy: dict[str, _Op] = {}
        self._ops: dict[int, _Op] = {}
        self._next_cmd = 0
        self._next_timer = 0
        self._timers: dict[int, tuple[_Replica, int]] = {}
        self._out: list[Command] = []

    def _notify(self, task_id: str) -> None:
        self._out.append(_new_notify(task_id))

    def _cursor(self, r: _Replica | None, stream_id: str) -> DeliveryCursor:
        seq = r.sequence if r is not None and r.stream_id == stream_id else 0
        return _new_cursor(stream_id, seq)

    # ER-110: error acks and begin successes carry the cursor only for the
    # manager's boot, the frame's run and the replica's stream, else sequence 0.
    def _common(self, frame: _Frame, r: _Replica | None) -> DeliveryCursor:
        matched = (
            r
            if frame.runner_boot_id == self._boot_id
            and r is not None
            and r.run_epoch == frame.run_epoch
            else None
        )
        return self._cursor(matched, frame.stream_id)

    def _ack(
        self,
        frame: _Frame,
        applied_through: DeliveryCursor,
        ok: bool,
        code: str | None = None,
        error: str | None = None,
        project_id: str | None = None,
        record_version: int | None = None,
        result: RecordResult | None = None,
        high_water: DeliveryCursor | None = None,
    ) -> None:
        # Built positionally (EnvAck field order) from values that are valid
        # by construction: frame fields were decoded strictly.
        self._out.append(
            _new_send_ack(
                _new_ack(
                    frame.op_id,
                    frame.task_id,
                    frame.run_epoch,
                    frame.runner_boot_id,
                    frame.stream_id,
                    frame.attempt_id,
                    self._epochs,
                    applied_through,
                    ok,
                    _ACK_PHASES[type(frame)],
                    code,
                    error,
                    project_id,
                    None,
                    record_version,
                    None,
                    None,
                    result,
                    high_water,
                )
            )
        )

    def _error(self, frame: _Frame, r: _Replica | None, code: str) -> None:
        self._ack(frame, self._common(frame, r), False, code=code, error=code)

    def _page_ack(self, frame: EnvPage, rec: _PageReceipt) -> EnvAck:
        return EnvAck(
            op_id=frame.op_id,
            task_id=frame.task_id,
            run_epoch=frame.run_epoch,
            runner_boot_id=frame.runner_boot_id,
            stream_id=frame.stream_id,
            attempt_id=frame.attempt_id,
            policy_epochs=self._epochs,
            applied_through=rec.applied_through,
            ok=True,
            phase="page",
            code=None,
            error=None,
            project_id=frame.project_id,
            after=rec.after,
            record_version=rec.record_version,
            results=rec.results,
            complete=rec.complete,
            result=None,
            high_water=None,
        )

    def _apply_cursor(self, frame: EnvApply, r: _Replica | None) -> DeliveryCursor:
        d = frame.delivery
        # The frame's own cursor when the replica stands exactly there (the
        # usual case after an apply): equal to a fresh one, and frozen.
        if r is not None and r.sequence == d.sequence and r.stream_id == d.stream_id:
            return d
        return self._cursor(r, frame.stream_id)

    def _apply_replay_ack(self, frame: EnvApply, r: _Replica, rec: _ApplyReceipt) -> None:
        """The ack of an apply already answered: its receipt's answer again."""
        # ER-112: every ack is built afresh from the receipt's fields, so a caller changing an ack
        # changes no later replay.
        cur = self._apply_cursor(frame, r)
        f = _receipt_fields(rec)
        if f[0] != "1":
            self._ack(frame, cur, False, code=f[6], error=f[6])
            return
        self._ack(
            frame,
            cur,
            True,
            project_id=f[4],
            record_version=int(f[6]),
            result=_receipt_result(f),
        )
