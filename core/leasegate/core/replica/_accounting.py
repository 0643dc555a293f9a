"""The replay ledger's accounting (ER-114–ER-118).

Every piece of evidence a replica keeps (retired stream ids, retired
attempt ids, apply receipts, completed attempts) is reserved against the
task's and the process's limits before it is stored; a refused reservation
stores nothing, and the caller exhausts the replica (:mod:`._lifecycle`).
"""

from __future__ import annotations

from typing import Any

from ..wire.env import EnvApply, Materialization
from ._acks import _Acks
from ._ledger import evidence_bytes
from ._receipts import _mat_json, _receipt_cost, pack_error_receipt, pack_ok_receipt
from ._state import _Replica


class _Accounting(_Acks):
    """Reservations, releases and retirements of the replay ledger."""

    def _reserve(self, r: _Replica, evidence: Any) -> int | None:
        return self._reserve_cost(r, evidence_bytes(evidence))

    def _reserve_cost(self, r: _Replica, cost: int) -> int | None:
        lim = self._limits
        if (
            r.ledger_entries + 1 > lim.max_task_entries
            or r.ledger_bytes + cost > lim.max_task_bytes
            or self._total_entries + 1 > lim.max_total_entries
            or self._total_bytes + cost > lim.max_total_bytes
        ):
            return None
        r.ledger_entries += 1
        r.ledger_bytes += cost
        self._total_entries += 1
        self._total_bytes += cost
        return cost

    def _release(self, r: _Replica, entries: int, cost: int) -> None:
        """Give back ``entries`` ledger entries costing ``cost`` bytes in all."""
        r.ledger_entries -= entries
        r.ledger_bytes -= cost
        self._total_entries -= entries
        self._total_bytes -= cost
        assert min(r.ledger_entries, r.ledger_bytes, self._total_entries, self._total_bytes) >= 0, (
            "task replica replay ledger accounting underflow"
        )

    # ER-117: retired ids and completed attempts stay for the replica's life; all is released when
    # it is destroyed (#clearReplayLedger).
    def _clear_ledger(self, r: _Replica) -> None:
        self._total_entries -= r.ledger_entries
        self._total_bytes -= r.ledger_bytes
        assert min(self._total_entries, self._total_bytes) >= 0, (
            "task replica replay ledger accounting underflow"
        )
        r.retired_streams.clear()
        r.retired_attempts.clear()
        r.apply_receipts.clear()
        r.receipt_bytes = 0
        r.completed.clear()
        r.ledger_entries = 0
        r.ledger_bytes = 0

    # ER-116: recording an id already recorded costs nothing and succeeds.
    def _retire_stream(self, r: _Replica, stream_id: str) -> bool:
        if stream_id in r.retired_streams:
            return True
        if self._reserve(r, ["retired_stream", stream_id]) is None:
            return False
        r.retired_streams.add(stream_id)
        return True

    def _retire_attempt(self, r: _Replica, attempt_id: str) -> bool:
        if attempt_id in r.retired_attempts:
            return True
        if self._reserve(r, ["retired_attempt", attempt_id]) is None:
            return False
        r.retired_attempts.add(attempt_id)
        return True

    def _remember_receipt(
        self,
        r: _Replica,
        frame: EnvApply,
        sj: str,
        code: str | None,
        version: int | None,
        result_sj: str | None,
        mat: Materialization | None,
    ) -> bool:
        """Store an apply receipt, charging ``["apply", seq, receipt]`` (ER-114).

        ``code`` is a consumed error's code (then ``version``, ``result_sj``
        and ``mat`` are ``None``); otherwise the receipt is ``ok`` with the
        result's record version, state (as :func:`state_json` ``result_sj``) and
        materialization. The cost is :func:`_receipt_cost`. Returns ``False``
        (nothing stored) when a ledger limit refuses it.
        """
        seq = frame.delivery.sequence
        receipts = r.apply_receipts
        if seq in receipts:
            return True
        mat_json = None if mat is None else _mat_json(mat)
        cost = self._reserve_cost(r, _receipt_cost(frame, sj, code, version, result_sj, mat_json))
        if cost is None:
            return False
        receipts[seq] = (
            pack_ok_receipt(cost, frame, sj, version, mat_json, result_sj)
            if code is None
            else pack_error_receipt(cost, frame, sj, code)
        )
        r.receipt_bytes += cost
        return True
