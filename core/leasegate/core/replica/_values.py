"""Materialization: deciding one record's entry, reading its value (ER-095–ER-102).

A record is withheld without a read, or its value is read through the reader
held when its frame was dispatched (a read command, answered by
:class:`ValueReadCompleted` / :class:`ValueReadFailed`) and authenticated
field by field.
"""

from __future__ import annotations

from typing import Final

from .._base import Command
from .._model import constructor
from .._secret import Secret
from ..wire.env import (
    BindingState,
    Materialization,
    Unavailable,
    ValueRefLegacy,
    ValueRefStaged,
    _staged_envelope_fast,
    parse_legacy_envelope,
    staged_envelope_value,
)
from ._events import ReadLegacyValue, ReadStagedValue, ValueReadCompleted, ValueReadFailed
from ._lifecycle import _Lifecycle
from ._receipts import _INSTALLED
from ._state import _Entry, _Op

_UNAVAILABLE: Final[dict[str, Unavailable]] = {
    reason: Unavailable(reason=reason)
    for reason in (
        "value_reference_invalid",
        "value_missing",
        "value_envelope_mismatch",
        "value_version_mismatch",
        "value_unavailable",
    )
}

# A fast constructor (positional, in field order) for the staged read.
_new_read_staged: Final = constructor(ReadStagedValue)


class _Values(_Lifecycle):
    """Starting a record's materialization, and finishing it from a read's answer."""

    def _materialize_start(
        self, op: _Op, project_id: str, s: BindingState, withheld: Materialization | None
    ) -> _Entry | None:
        """An entry decided without a read, or ``None`` after emitting a read."""
        if withheld is not None:
            return _Entry(s, withheld, None)
        ref = s.head.value_ref
        if ref is None:
            return _Entry(s, _UNAVAILABLE["value_reference_invalid"], None)
        r = op.replica
        self._next_cmd += 1
        cid = self._next_cmd
        if type(ref) is ValueRefStaged:
            cmd: Command = _new_read_staged(
                cid, op.reader, r.task_id, r.run_epoch, project_id, s.key, ref.staging_id
            )
        elif type(ref) is ValueRefLegacy:
            cmd = ReadLegacyValue(
                cmd_id=cid,
                reader=op.reader,
                task_id=r.task_id,
                run_epoch=r.run_epoch,
                project_id=project_id,
                key=s.key,
                version=ref.ssm_version,
            )
        else:
            # A row reference: the registry's reader refuses it (decided: no read).
            return _Entry(s, _UNAVAILABLE["value_unavailable"], None)
        op.cmd_id = cid
        op.state = s
        self._ops[cid] = op
        self._busy[r.task_id] = op
        self._out.append(cmd)
        return None

    def _materialize_finish(self, op: _Op, ev: ValueReadCompleted | ValueReadFailed) -> _Entry:
        s = op.state
        assert s is not None
        frame = op.frame
        ref = s.head.value_ref
        if type(ev) is ValueReadFailed:
            return _Entry(s, _UNAVAILABLE["value_unavailable"], None)
        assert isinstance(ev, ValueReadCompleted)
        raw = ev.raw
        if raw is None or type(raw) is not Secret:
            return _Entry(
                s, _UNAVAILABLE["value_missing" if raw is None else "value_unavailable"], None
            )
        org = op.replica.org_id
        if type(ref) is ValueRefStaged:
            text = raw.reveal()
            # Project ids, keys and staging ids match patterns with nothing
            # to escape, so only the org id decides whether the fast path
            # may be taken without checking the ids (ER-098).
            got: Secret | str | None = (
                _staged_envelope_fast(text, org, frame.project_id, s.key, ref.staging_id)
                if op.replica.org_plain and type(text) is str
                else None
            )
            if got is None:
                got = staged_envelope_value(text, org, frame.project_id, s.key, ref.staging_id)
        else:
            assert type(ref) is ValueRefLegacy
            if type(ev.version) is not int or ev.version != ref.ssm_version:
                return _Entry(s, _UNAVAILABLE["value_version_mismatch"], None)
            got = parse_legacy_envelope(
                raw.reveal(), org_id=org, project_id=frame.project_id, key=s.key
            )
        if type(got) is Secret:
            return _Entry(s, _INSTALLED, got)
        assert isinstance(got, str)
        return _Entry(s, _UNAVAILABLE[got], None)
