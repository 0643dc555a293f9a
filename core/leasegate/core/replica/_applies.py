"""Applies: one record's change, live or staged (ER-054–ER-072).

An apply is consumed at the delivery cursor's next sequence; its receipt
(:mod:`._receipts`) answers every replay of that sequence. Whether an apply
advances its record is decided by :mod:`._order` (ER-073–ER-085).
"""

from __future__ import annotations

from ..wire.env import EnvApply, Installed
from ._order import (
    desired_withheld,
    is_plain_value_advance,
    is_reachable_record_advance,
    state_order,
)
from ._phases import LIVE
from ._receipts import _new_result, _same_apply, state_json
from ._state import PROJECT_ENV_READER_CHANGED, _Entry, _Op, _Project, _Replica, _Staged
from ._values import _Values


class _Applies(_Values):
    """Apply frames."""

    def _apply(self, r: _Replica, frame: EnvApply, sj: str | None) -> None:
        assert sj is not None
        # ER-071: the apply rules run in the catalog order, one check after another below; ER-070:
        # an apply refused before it is consumed leaves the cursor and the receipts as they were.
        if r.stream_id != frame.stream_id:
            return self._error(frame, r, "stream_mismatch")
        seq = frame.delivery.sequence
        if seq <= r.sequence:
            rec = r.apply_receipts.get(seq)
            # ER-057 (reference `#apply`, `receipt_missing`): a sequence at or below the cursor
            # without a receipt.
            if rec is None:
                return self._error(frame, r, "receipt_missing")
            if not _same_apply(rec, frame, sj):
                return self._error(frame, r, "delivery_conflict")
            return self._apply_replay_ack(frame, r, rec)
        a = r.attempt
        if (
            # ER-058: with the gate open only applies with a null attemptId; with it closed only
            # the attempt in progress.
            (frame.attempt_id is not None or a is not None)
            if r.phase is LIVE
            else (a is None or frame.attempt_id != a.attempt_id)
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-059: a sequence above cursor + 1 is a delivery_gap, not consumed.
        if seq != r.sequence + 1:
            return self._error(frame, r, "delivery_gap")
        if (
            # ER-060: a live apply needs the snapshot's reader generation, a staged apply the
            # attempt's, to be the current one.
            r.snapshot_generation != r.reader_generation
            if a is None
            else a.reader_generation != r.reader_generation
        ):
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        project: _Project | _Staged | None = (
            r.live.get(frame.project_id) if a is None else a.projects.get(frame.project_id)
        )
        if project is None:
            # ER-061: a project not in the live snapshot (live apply) or the attempt (staged apply)
            # is consumed as an error.
            return self._consume_error(r, frame, "project_not_in_replica", sj)
        # ER-062: a staged apply needs a project whose pages are complete.
        if type(project) is _Staged and not project.complete:
            return self._error(frame, r, "snapshot_incomplete")
        # ER-063: record_version_gap, not consumed.
        if frame.record_version > project.record_version + 1:
            return self._error(frame, r, "record_version_gap")
        current = project.entries.get(frame.state.key)
        # ER-064: an apply advances only at version + 1, newer by stateOrder and reachable
        # (isReachableRecordAdvance).
        if frame.record_version != project.record_version + 1:
            advances = False
        elif current is not None and is_plain_value_advance(frame.state, current.state):
            advances = True  # the common case; implies the two rules below
        else:
            advances = (
                current is None or state_order(frame.state, current.state) == "newer"
            ) and is_reachable_record_advance(
                frame.state, current.state if current is not None else None
            )
        # ER-066: no entry and no advance: consumed as record_version_conflict.
        if not advances and current is None:
            return self._consume_error(r, frame, "record_version_conflict", sj)
        op = _Op(frame, r)
        op.project = project
        op.current = current
        op.advances = advances
        op.sjson = sj
        # ER-067: an entry and no advance: absorbed as a consumed success, state and version kept;
        # ER-068: an installed, not withheld entry is kept without a read, any other is
        # materialized again.
        if not advances:
            assert current is not None
            if (
                type(current.mat) is Installed
                and desired_withheld(current.state, self._epoch_set) is None
            ):
                return self._apply_finish(op, _Entry(current.state, current.mat, current.value))
            desired = current.state
        else:
            # ER-065: an advancing apply reads its state afresh through the current reader.
            desired = frame.state
        got = self._materialize_start(
            op, frame.project_id, desired, desired_withheld(desired, self._epoch_set)
        )
        if got is None:
            return None  # waiting on a read
        return self._apply_finish(op, got)

    def _apply_finish(self, op: _Op, entry: _Entry) -> None:
        """Install an apply's decided entry, remember its receipt, ack it.

        Runs in the same step as the decision (no event can come between),
        so the entry is never in flight: its value is scrubbed here when the
        ledger refuses the receipt.
        """
        frame = op.frame
        assert isinstance(frame, EnvApply)
        r = op.replica
        project = op.project
        version = frame.record_version if op.advances else project.record_version
        state = entry.state
        mat = entry.mat
        sj = op.sjson
        assert sj is not None
        result_sj = sj if state is frame.state else state_json(state)
        if not self._remember_receipt(r, frame, sj, None, version, result_sj, mat):
            entry.value = None
            return self._exhaust(r, frame)
        current = op.current
        # ER-065: the new entry replaces the old one, whose value is scrubbed.
        if current is not None and current is not entry:
            current.value = None
        project.entries[state.key] = entry
        project.record_version = version
        r.sequence = frame.delivery.sequence
        # ER-069: a live apply notifies once and is visible at once; a staged apply does not
        # notify.
        if r.phase is LIVE:
            self._out.append(r.notice)
        self._ack(
            frame,
            self._apply_cursor(frame, r),
            True,
            None,
            None,
            frame.project_id,
            version,
            _new_result(state, mat),
        )

    def _consume_error(self, r: _Replica, frame: EnvApply, code: str, sj: str) -> None:
        if not self._remember_receipt(r, frame, sj, code, None, None, None):
            return self._exhaust(r, frame)
        r.sequence = frame.delivery.sequence
        cur = self._apply_cursor(frame, r)
        return self._ack(frame, cur, False, code=code, error=code)
