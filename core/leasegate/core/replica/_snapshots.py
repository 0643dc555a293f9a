"""Snapshots: a reconciliation attempt's begin, pages and commit.

A begin starts an attempt on a stream (ER-028–ER-036), pages stage each
project's records (ER-037–ER-053), and a commit makes the staged projects
the live snapshot and opens the gate (ER-086–ER-094).
"""

from __future__ import annotations

from .._model import encode
from ..wire.env import (
    MAX_PROJECT_ENV_ACK_PAGE_BYTES,
    EnvBegin,
    EnvCommit,
    EnvPage,
    Installed,
    RecordResult,
)
from ._events import CancelTimer, ResolveWaiter, SendAck
from ._ledger import canonical, compact_utf8_len
from ._order import desired_withheld
from ._phases import LIVE, STAGING, enter
from ._state import (
    PROJECT_ENV_READER_CHANGED,
    _Attempt,
    _Entry,
    _Op,
    _PageReceipt,
    _Project,
    _Replica,
    _scrub_attempt,
    _scrub_project,
    _Staged,
)
from ._values import _Values


class _Snapshots(_Values):
    """Begin, page and commit frames."""

    # ------------------------------------------------------------------
    # Begin

    def _begin(self, r: _Replica, frame: EnvBegin) -> None:
        fp = (frame.stream_id, frame.attempt_id, frame.project_ids)
        # ER-029: a retired stream is refused first.
        if frame.stream_id in r.retired_streams:
            return self._error(frame, r, "stream_retired")
        # ER-030: a retired attempt id is refused, even for an identical begin.
        if frame.attempt_id in r.retired_attempts:
            return self._error(frame, r, "reconciliation_attempt_retired")
        a = r.attempt
        if r.stream_id == frame.stream_id and a is not None and a.attempt_id == frame.attempt_id:
            # ER-031: an identical begin replays with phase begun and changes nothing; ER-032:
            # other projectIds for the same attempt conflict.
            if a.fp == fp:
                return self._ack(frame, self._cursor(r, frame.stream_id), True)
            return self._error(frame, r, "reconciliation_attempt_conflict")
        # ER-034: a begin on another stream releases its receipts, retires the stream, then the
        # attempt; ER-035: a retirement the ledger cannot hold exhausts the replica (_exhaust).
        if r.stream_id is not None and r.stream_id != frame.stream_id:
            # A stream switch releases every apply receipt at once.
            self._release(r, len(r.apply_receipts), r.receipt_bytes)
            r.apply_receipts.clear()
            r.receipt_bytes = 0
            if not self._retire_stream(r, r.stream_id):
                return self._exhaust(r, frame)
            r.sequence = 0
        # ER-033: a new attempt id retires and scrubs the old attempt, closes the gate and starts
        # the new attempt.
        if a is not None and not self._retire_attempt(r, a.attempt_id):
            return self._exhaust(r, frame)
        if a is not None:
            _scrub_attempt(a)
        r.stream_id = frame.stream_id
        enter(r, STAGING)
        r.fence += 1
        r.attempt = _Attempt(frame.attempt_id, fp, frame.project_ids, r.reader_generation)
        self._notify(r.task_id)
        return self._ack(frame, self._cursor(r, frame.stream_id), True)

    # ------------------------------------------------------------------
    # Page

    def _page(self, r: _Replica, frame: EnvPage) -> None:
        a = r.attempt
        if (
            r.stream_id != frame.stream_id
            or a is None
            or a.attempt_id != frame.attempt_id
            or r.phase is LIVE
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-038: reader_changed comes before the receipt replay, so even an exact page replay gets
        # it.
        if a.reader_generation != r.reader_generation:
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        staged = a.projects.get(frame.project_id)
        if staged is None:
            # ER-039: the page's project is not among the begin's projectIds.
            return self._error(frame, r, "project_not_in_attempt")
        fp = (frame.project_id, frame.after, frame.record_version, frame.records, frame.complete)
        rec = staged.pages.get(frame.after)
        if rec is not None:
            # ER-040 (same fingerprint: the recorded ack is returned); ER-041 (another fingerprint
            # at that after: snapshot_page_conflict).
            if rec.fp != fp:
                return self._error(frame, r, "snapshot_page_conflict")
            self._out.append(SendAck(ack=self._page_ack(frame, rec)))
            return None
        # ER-042: pages chain by after (null first, then the last key); ER-043: an empty incomplete
        # page leaves no last key, so every continuation is a mismatch; ER-047: the page rules run
        # in the catalog order, one check after another below.
        if (frame.after is None and staged.started) or (
            frame.after is not None
            and (not staged.started or staged.complete or staged.last_key != frame.after)
        ):
            return self._error(frame, r, "snapshot_page_mismatch")
        # ER-044: every page of a project in one attempt has one record version.
        if staged.started and staged.record_version != frame.record_version:
            return self._error(frame, r, "snapshot_version_conflict")
        live = r.live.get(frame.project_id)
        # ER-045: a first page below the live version is stale.
        if not staged.started and live is not None and frame.record_version < live.record_version:
            return self._error(frame, r, "record_version_stale")
        # ER-046: a page at exactly the live version must equal the live snapshot.
        if live is not None and frame.record_version == live.record_version:
            conflicts = False
            for s in frame.records:
                le = live.entries.get(s.key)
                if le is None or le.state != s:
                    conflicts = True
                    break
            if not conflicts and frame.complete:
                keys = set(staged.entries) | {s.key for s in frame.records}
                conflicts = keys != live.entries.keys()
            if conflicts:
                return self._error(frame, r, "snapshot_version_conflict")
        op = _Op(frame, r)
        op.entries = []
        op.index = 0
        op.fp = fp
        op.project = staged
        op.live_project = live
        return self._page_continue(op)

    def _page_continue(self, op: _Op) -> None:
        frame = op.frame
        assert isinstance(frame, EnvPage)
        r = op.replica
        a = op.attempt
        assert a is not None
        live = op.live_project
        records = frame.records
        # ER-048: records are materialized one at a time, in frame order, through the reader held
        # when the page was accepted.
        while op.index < len(records):
            s = records[op.index]
            le = live.entries.get(s.key) if live is not None else None
            withheld = desired_withheld(s, self._epoch_set)
            if (
                le is not None
                # ER-049: keep-installed rule (live entry installed under the attempt's generation,
                # same state, not withheld) reuses the live value; ER-050: otherwise the record is
                # read again.
                and r.snapshot_generation == a.reader_generation
                and type(le.mat) is Installed
                and le.state == s
                and withheld is None
            ):
                entry = _Entry(s, le.mat, le.value)
            else:
                entry_or_read = self._materialize_start(op, frame.project_id, s, withheld)
                if entry_or_read is None:
                    return None  # waiting on a read
                entry = entry_or_read
            r.in_flight.add(entry)
            op.entries.append(entry)
            op.index += 1
        self._page_finish(op)
        return None

    def _page_finish(self, op: _Op) -> None:
        frame = op.frame
        assert isinstance(frame, EnvPage)
        r = op.replica
        staged: _Staged = op.project
        results = tuple(RecordResult(state=e.state, materialization=e.mat) for e in op.entries)
        rec = _PageReceipt(
            op.fp,
            frame.after,
            frame.record_version,
            results,
            frame.complete,
            self._cursor(r, frame.stream_id),
        )
        ack = self._page_ack(frame, rec)
        if compact_utf8_len(encode(ack)) > MAX_PROJECT_ENV_ACK_PAGE_BYTES:
            for e in op.entries:
                e.value = None
                r.in_flight.discard(e)
            op.entries.clear()
            return self._error(frame, r, "ack_page_too_large")
        # ER-052: an accepted page stages its entries by key, starts the project at its version and
        # sets lastKey and complete; no ledger entry, no notify.
        for e in op.entries:
            r.in_flight.discard(e)
            staged.entries[e.state.key] = e
        staged.started = True
        staged.record_version = frame.record_version
        staged.last_key = frame.records[-1].key if frame.records else None
        staged.complete = frame.complete
        staged.pages[frame.after] = rec
        self._out.append(SendAck(ack=ack))
        return None

    # ------------------------------------------------------------------
    # Commit

    def _commit(self, r: _Replica, frame: EnvCommit) -> None:
        fp = (frame.stream_id, frame.attempt_id, frame.high_water, frame.versions)
        done = r.completed.get(frame.attempt_id)
        if done is not None:
            # ER-087: a committed attempt's commit with another fingerprint conflicts.
            if done[0] != fp:
                return self._error(frame, r, "reconciliation_attempt_conflict")
            return self._ack(frame, done[1], True, high_water=done[1])
        a = r.attempt
        if (
            r.stream_id != frame.stream_id
            or a is None
            or a.attempt_id != frame.attempt_id
            # ER-088: a commit for another stream, without an attempt, for another attempt or with
            # the gate open is a mismatch.
            or r.phase is LIVE
        ):
            return self._error(frame, r, "reconciliation_attempt_mismatch")
        # ER-089: a commit of an attempt begun under an older reader generation gets
        # reader_changed; nothing is committed.
        if a.reader_generation != r.reader_generation:
            return self._error(frame, r, PROJECT_ENV_READER_CHANGED)
        if frame.high_water.sequence != r.sequence:
            # ER-090: highWater.sequence must equal the cursor's sequence.
            return self._error(frame, r, "delivery_incomplete")
        if len(frame.versions) != len(a.project_ids) or any(
            v.project_id != pid
            or not a.projects[pid].complete
            or a.projects[pid].record_version != v.record_version
            for v, pid in zip(frame.versions, a.project_ids, strict=False)
        ):
            # ER-091: versions must match the attempt exactly (length, order, completeness,
            # versions).
            return self._error(frame, r, "record_version_changed")
        fp_json = canonical(
            {
                "streamId": frame.stream_id,
                "attemptId": frame.attempt_id,
                "highWater": encode(frame.high_water),
                "versions": [encode(v) for v in frame.versions],
            }
        )
        if frame.attempt_id not in r.completed:
            evidence = [
                "completed_attempt",
                frame.attempt_id,
                {"fingerprint": fp_json, "highWater": encode(frame.high_water)},
            ]
            # ER-093: a commit whose records cannot be stored exhausts the replica, nothing
            # committed.
            if self._reserve(r, evidence) is None:
                return self._exhaust(r, frame)
            r.completed[frame.attempt_id] = (fp, frame.high_water)
        if not self._retire_attempt(r, frame.attempt_id):
            return self._exhaust(r, frame)
        # ER-092: the live snapshot becomes exactly the attempt's staged projects; the previous
        # live entries are scrubbed.
        old = r.live
        r.live = {
            pid: _Project(a.projects[pid].record_version, a.projects[pid].entries)
            for pid in a.project_ids
        }
        for st in a.projects.values():
            st.entries = {}
            st.pages = {}
        r.attempt = None
        r.snapshot_generation = a.reader_generation
        enter(r, LIVE)
        r.fence += 1
        for proj in old.values():
            _scrub_project(proj)
        waiters, r.waiters = r.waiters, {}
        for wid, tid in waiters.items():
            self._timers.pop(tid, None)
            self._out.append(CancelTimer(timer_id=tid))
            self._out.append(ResolveWaiter(waiter_id=wid))
        self._notify(r.task_id)
        return self._ack(frame, frame.high_water, True, high_water=frame.high_water)
