"""The install sequence of a grant or a credential change (RT-065 … RT-079).

:func:`install` is one coroutine per ``RunInstall``, read top-down: fence;
for a grant with a replica, activate with the grant's reader, bind its
generation to the next view and wait (event-driven, :func:`env_eval` after
every event) for that generation's exact snapshot, then fence; engines
(awaited), fence, MCP and person (synchronous), Files (awaited), fence.
Its end is fed back to the registry (``InstallFinished``/``InstallFailed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._sched import Co
from ..registry import InstallFailed, InstallFinished, InstallRequest, TaskView
from ..replica import ActivateAssignment, ActivationOutcome
from . import _common
from ._common import (
    CLU_ENV_DEADLINE,
    CLU_ENV_WITHDRAWN,
    CLU_INSTALL_WITHDRAWN,
    CLU_NO_READER,
    CLU_SHUTTING,
    Done,
    prefix,
)
from ._vocab import ConsumerWork, CredentialFailure, Log, ReaderRef

if TYPE_CHECKING:
    from ._machine import CredentialRuntime

__all__ = ["GENS_KEPT", "Install", "bind_gen", "env_eval", "install"]

#: Views per task whose generation binding is kept (the open one, a candidate,
#: the previous one of a credential change, with margin).
GENS_KEPT = 8


class Install:
    """One install under way: its request, reader generation and env deadline."""

    __slots__ = ("cmd_id", "done", "expired", "gen", "request", "timer")

    def __init__(self, cmd_id: int, request: InstallRequest) -> None:
        self.cmd_id = cmd_id
        self.request = request
        self.gen = 0
        self.timer: int | None = None
        self.expired = False
        #: Resumes the install once the env wait ended (with its failure or ``None``).
        self.done: Done | None = None


def _fence(rt: CredentialRuntime, inst: Install) -> CredentialFailure | None:
    # RT-066: an install whose isCurrent() is false rejects "the grant was withdrawn" at every
    # fence; RT-075: the fence is checked again after the snapshot arrived.
    if rt._shut:
        return CredentialFailure(message=CLU_SHUTTING)
    if not rt.registry.install_is_current(inst.cmd_id, rt._now):
        return CredentialFailure(message=CLU_INSTALL_WITHDRAWN)
    return None


def install(rt: CredentialRuntime, cmd_id: int, request: InstallRequest) -> Co[None]:
    """The install sequence of ``RunInstall(cmd_id, request)``; reports its end to the registry."""
    inst = Install(cmd_id, request)
    wid = rt._track("install")
    err = yield from _sequence(rt, inst)
    rt._untrack(wid)
    if err is not None:
        rt._emit(Log(message=prefix(request.assignment) + "install failed: " + err.message))
        rt._reg(InstallFailed(now_ms=rt._now, cmd_id=cmd_id))
    else:
        rt._reg(InstallFinished(now_ms=rt._now, cmd_id=cmd_id))


def _sequence(rt: CredentialRuntime, inst: Install) -> Co[CredentialFailure | None]:
    # RT-068: no reader generation after activation rejects the install; RT-069: the generation
    # is recorded for the next view before waiting; RT-077: a failing step stops the install
    # with its error; RT-078: a credential-change install has no activation and no env wait.
    request = inst.request
    err = _fence(rt, inst)
    if err is not None:
        return err
    a = request.assignment
    replica = rt._replica
    if replica is not None and request.reason == "grant":
        outcome = [
            c
            for c in rt._rep(
                ActivateAssignment(
                    now_ms=rt._now,
                    task_id=a.task_id,
                    run_epoch=a.run_epoch,
                    org_id=request.owner_org_id,
                    reader=ReaderRef(inst.cmd_id),
                )
            )
            if isinstance(c, ActivationOutcome)
        ]
        if not outcome or outcome[0].error is not None:
            msg = outcome[0].error if outcome and outcome[0].error else CLU_NO_READER
            return CredentialFailure(message=msg)
        gen = replica.reader_generation(a.task_id, a.run_epoch)
        if gen is None:
            return CredentialFailure(message=CLU_NO_READER)
        bind_gen(rt, request.next, gen)
        inst.gen = gen

        def expired() -> None:
            inst.timer = None
            inst.expired = True
            env_eval(rt, inst)

        inst.timer = rt._set_timer(rt._env_ms, expired)

        def wait_env(done: Done) -> None:
            inst.done = done
            rt._env_waits[inst.cmd_id] = inst
            env_eval(rt, inst)

        err = yield from rt._until(wait_env)
        if err is not None:
            return err
        err = _fence(rt, inst)
        if err is not None:
            return err
    elif request.reason == "credential-change" and request.previous is not None:
        got = rt._gens.get(id(request.previous))
        if got is not None and got[0] is request.previous:
            bind_gen(rt, request.next, got[1])
    # RT-076: consumers install in order: engines, fence, MCP, persons, Files.
    err = yield rt._await(
        lambda cid: ConsumerWork(cmd_id=cid, consumer="engines", op="install", request=request)
    )
    err = err or _fence(rt, inst)
    if err is not None:
        return err
    try:
        rt._mcp.install(request)
        rt._person.install(request)
    except Exception as e:  # noqa: BLE001
        return _common.failure(e)
    if rt._files is None:
        return _fence(rt, inst)
    err = yield rt._await(
        lambda cid: ConsumerWork(cmd_id=cid, consumer="files", op="install", request=request)
    )
    return err or _fence(rt, inst)


def bind_gen(rt: CredentialRuntime, view: TaskView, gen: int) -> None:
    """Bind a reader generation to ``view`` (the instance); keep a few per task."""
    keys = rt._rec(view.assignment.task_id).gen_keys
    rt._gens[id(view)] = (view, gen)
    keys.append(id(view))
    while len(keys) > GENS_KEPT:
        old = keys.pop(0)
        if old not in keys:
            rt._gens.pop(old, None)


def env_eval(rt: CredentialRuntime, inst: Install) -> None:
    """Re-evaluate an install's env wait; end it when the snapshot, a withdrawal or the
    deadline decides (in that order)."""
    # RT-070: a grant install with a replica waits for the env snapshot; RT-071: an available
    # snapshot goes on at once; RT-072: a withdrawn grant or a shutdown rejects the wait.
    if inst.cmd_id not in rt._env_waits or rt._replica is None:
        return
    a = inst.request.assignment
    err: CredentialFailure | None = None
    if (
        rt._replica.read_view_at(a.task_id, a.run_epoch, inst.request.next.project_ids, inst.gen)
        is not None
    ):
        pass
    elif rt._shut or not rt.registry.install_is_current(inst.cmd_id, rt._now):
        err = CredentialFailure(message=CLU_ENV_WITHDRAWN)
    elif inst.expired:
        err = CredentialFailure(message=CLU_ENV_DEADLINE)
    else:
        return
    del rt._env_waits[inst.cmd_id]
    done, inst.done = inst.done, None
    rt._clear_timer(inst.timer)
    if done is not None:
        done(err)
