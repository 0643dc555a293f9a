"""The gates: the synchronous close and open fan-outs (RT-080 … RT-091).

:func:`close` is the runtime's ``#close``: env serving first, holds, then every
consumer's fence, each attempted; it returns the failures in attempt order.
:func:`open_gate` opens the consumers in order and records the open run and
its served generation. Both run synchronously inside the registry's
``CloseGate``/``OpenGate`` (and the cleanup procedure's step 2, the shutdown).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import Assignment, TaskView
from . import _common, _recovery, _starts
from ._common import CLU_SHUTTING, CLU_WITHDRAWN
from ._vocab import ConsumerPort, CredentialFailure, Notify

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = ["close", "open_gate"]


def close(rt: CredentialRuntime, task: str, run: int) -> list[CredentialFailure]:
    """Close the gate of run ``run`` and older of ``task``; the fences' failures, in order."""
    # RT-089: a close with nothing open still calls every consumer fence; RT-090: the
    # registry's gate close, refuseNewWork and closeGate run this same close; RT-091: a newer
    # start closes the older run's gate, holds and env.
    failures: list[CredentialFailure] = []
    a = Assignment(task, run)
    t = rt._rec(task)
    opened = t.open_run
    if opened is not None and opened <= run:
        t.open_run = None
        t.served_gen = None
        rt._sync_phase(t)
        rt._emit(Notify(what="env-served", task_id=task))
    for h in list(t.holds.values()):
        if h.run <= run:
            _starts.abort_hold(rt, h, CredentialFailure(message=CLU_WITHDRAWN))
    try:
        rt._engines.close(a)
    except Exception as e:  # noqa: BLE001
        failures.append(_common.failure(e))
    try:
        rec = rt._mcp.leased_run(task)
        if rec is not None and rec.run_epoch <= run:
            rt._mcp.close(rec)
    except Exception as e:  # noqa: BLE001
        failures.append(_common.failure(e))
    try:
        rt._person.close(a)
    except Exception as e:  # noqa: BLE001
        failures.append(_common.failure(e))
    try:
        if rt._files is not None:
            rt._files.close(a)
    except Exception as e:  # noqa: BLE001
        failures.append(_common.failure(e))
    return failures


def open_gate(rt: CredentialRuntime, a: Assignment, view: TaskView) -> CredentialFailure | None:
    """Open ``a``'s gate on ``view``: every consumer in order; the first failure, or ``None``."""
    # RT-060: opening on a view sets the task's served generation; RT-061: a credential change
    # keeps the generation; RT-083: an envServedChanged failure is swallowed; RT-084: an
    # mcpServedChanged failure propagates after the open was recorded.
    if rt._shut:
        return CredentialFailure(message=CLU_SHUTTING)
    ports: list[ConsumerPort] = [rt._engines, rt._mcp, rt._person]
    if rt._files is not None:
        ports.append(rt._files)
    for port in ports:
        try:
            port.open(a, view)
        except Exception as e:  # noqa: BLE001
            return _common.failure(e)
    rec = rt._rec(a.task_id)
    rec.open_run = a.run_epoch
    rt._sync_phase(rec)
    got = rt._gens.get(id(view))
    rec.served_gen = got[1] if got is not None and got[0] is view else None
    rt._emit(Notify(what="mcp-served", task_id=a.task_id))
    rt._emit(Notify(what="env-served", task_id=a.task_id))
    rt._deferred.append(lambda: _recovery.run_recovered_setup(rt, a))
    return None
