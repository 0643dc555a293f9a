"""Port-call recording: what the runtime asked of its synchronous ports in a step.

The runtime core calls its consumer ports (engines, MCP, person, Files)
synchronously inside ``handle``; those calls are part of a step just as the
event and the commands are. :func:`wrap_ports` wraps the four ports so that
every call is appended to a :class:`PortLog` as a :class:`PortCall` (also
when the port raises; the exception is then re-raised unchanged). A shell
or a trace recorder takes the log after each ``handle`` (:meth:`PortLog.take`)
and hands it to the monitor or writes it to a trace.

No :class:`PortCall` holds a secret: an ``open`` records a
:class:`ViewStamp` (identity, revision and expiry of the view, no material),
``leased_run`` records the :class:`~leasegate.core.registry.Assignment` it
returned, every other call records ``None`` (a ``GitHold`` may hold a token
and is never recorded).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from ..registry import Assignment

__all__ = ["PortCall", "PortLog", "ViewStamp", "wrap_ports"]

PortName = Literal["engines", "mcp", "person", "files"]
PortMethod = Literal["open", "close", "forget", "install", "hold_git", "leased_run"]


@dataclasses.dataclass(frozen=True, slots=True)
class ViewStamp:
    """The secret-free identity of a ``TaskView`` a gate was opened with.

    Attributes:
        task_id, run_epoch: the view's own assignment (``""`` / ``-1`` when
            the view did not carry one).
        lease_id: the lease the view was built from.
        manifest_revision: the lease's manifest revision.
        manifest_digest: the lease's manifest digest.
        expires_at: the view's expiry, in milliseconds since the Unix epoch
            (``lease_expires_at`` of the lease, LR-038).
    """

    task_id: str
    run_epoch: int
    lease_id: str
    manifest_revision: int
    manifest_digest: str
    expires_at: int

    @staticmethod
    def of(view: object) -> ViewStamp:
        """Stamp ``view`` (a ``TaskView`` or anything); never raises.

        Fields that cannot be read, or are not of the declared type, become
        ``""`` (texts) or ``-1`` (integers).
        """
        a = getattr(view, "assignment", None)
        return ViewStamp(
            task_id=_text(getattr(a, "task_id", None)),
            run_epoch=_int(getattr(a, "run_epoch", None)),
            lease_id=_text(getattr(view, "lease_id", None)),
            manifest_revision=_int(getattr(view, "manifest_revision", None)),
            manifest_digest=_text(getattr(view, "manifest_digest", None)),
            expires_at=_int(getattr(view, "expires_at", None)),
        )


def _text(x: object) -> str:
    return x if type(x) is str else ""


def _int(x: object) -> int:
    return x if type(x) is int else -1


@dataclasses.dataclass(frozen=True, slots=True)
class PortCall:
    """One call the runtime made to a consumer port during a ``handle``.

    Attributes:
        port: ``"engines"``, ``"mcp"``, ``"person"`` or ``"files"``.
        method: ``"open"``, ``"close"``, ``"forget"``, ``"install"``,
            ``"hold_git"`` or ``"leased_run"``.
        task_id, run_epoch: the assignment the call names (``install``: the
            request's assignment; ``leased_run``: the task, run ``None``);
            ``None`` when the argument carried none.
        raised: whether the port raised (the exception is re-raised).
        result: ``open`` → :class:`ViewStamp` of the view; ``leased_run`` →
            the :class:`Assignment` or ``None`` it returned; else ``None``.
            Never a secret.
    """

    port: str
    method: str
    task_id: str | None
    run_epoch: int | None
    raised: bool
    result: object = None


class PortLog:
    """The port calls of the current step, in call order.

    ``calls`` is the list itself (append-only between takes);
    :meth:`take` returns it and starts a new one.
    """

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[PortCall] = []

    def take(self) -> list[PortCall]:
        """Return the calls recorded since the last take, and clear the log."""
        out, self.calls = self.calls, []
        return out

    def __repr__(self) -> str:
        return f"PortLog(calls={len(self.calls)})"


def _assignment_of(x: object) -> tuple[str | None, int | None]:
    task = getattr(x, "task_id", None)
    run = getattr(x, "run_epoch", None)
    return (task if type(task) is str else None, run if type(run) is int else None)


class _Wrapped:
    """A port wrapper: records each listed method's call, delegates everything else."""

    __slots__ = ("_log", "_name", "_port")

    def __init__(self, name: str, port: Any, log: PortLog) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_port", port)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._port, attr)

    def _call(self, method: str, who: tuple[str | None, int | None], fn: Any, *args: Any) -> Any:
        try:
            out = fn(*args)
        except BaseException:
            self._log.calls.append(PortCall(self._name, method, who[0], who[1], True, None))
            raise
        result: object = None
        if method == "open":
            result = ViewStamp.of(args[1])
        elif method == "leased_run":
            result = out if isinstance(out, Assignment) else None
        self._log.calls.append(PortCall(self._name, method, who[0], who[1], False, result))
        return out

    def __repr__(self) -> str:
        return f"<recorded {self._name} port>"


class _Gate(_Wrapped):
    __slots__ = ()

    def open(self, assignment: Any, view: Any) -> None:
        """Record and delegate ``open(assignment, view)``."""
        self._call("open", _assignment_of(assignment), self._port.open, assignment, view)

    def close(self, assignment: Any) -> None:
        """Record and delegate ``close(assignment)``."""
        self._call("close", _assignment_of(assignment), self._port.close, assignment)


class _Engines(_Gate):
    __slots__ = ()

    def forget(self, assignment: Any) -> None:
        """Record and delegate ``forget(assignment)``."""
        self._call("forget", _assignment_of(assignment), self._port.forget, assignment)


class _Mcp(_Engines):
    __slots__ = ()

    def leased_run(self, task_id: str) -> Any:
        """Record and delegate ``leased_run(task_id)`` (result: the assignment)."""
        task = task_id if type(task_id) is str else None
        return self._call("leased_run", (task, None), self._port.leased_run, task_id)

    def install(self, request: Any) -> None:
        """Record and delegate ``install(request)``."""
        who = _assignment_of(getattr(request, "assignment", None))
        self._call("install", who, self._port.install, request)


class _Person(_Gate):
    __slots__ = ()

    def install(self, request: Any) -> None:
        """Record and delegate ``install(request)``."""
        who = _assignment_of(getattr(request, "assignment", None))
        self._call("install", who, self._port.install, request)

    def hold_git(self, assignment: Any) -> Any:
        """Record and delegate ``hold_git(assignment)`` (the hold is not recorded)."""
        return self._call("hold_git", _assignment_of(assignment), self._port.hold_git, assignment)


def wrap_ports(
    *, engines: Any, mcp: Any, person: Any, files: Any = None, log: PortLog
) -> tuple[Any, Any, Any, Any]:
    """Wrap the runtime's four consumer ports so every call lands in ``log``.

    Args:
        engines, mcp, person: the ports (``EnginesPort``, ``McpPort``,
            ``PersonPort`` of :mod:`leasegate.core.runtime`).
        files: the ``FilesPort``, or ``None`` (then ``None`` is returned for it).
        log: where each call is appended as a :class:`PortCall`.

    Returns:
        ``(engines, mcp, person, files)`` wrappers to construct the
        ``CredentialRuntime`` with. Each wrapper delegates to its port,
        appends a :class:`PortCall` (also when the port raises, then
        re-raises the same exception) and forwards any other attribute to
        the wrapped port.

    Raises:
        Nothing itself; a port's exception propagates unchanged (the runtime
        catches it, RT-082/RT-087).
    """
    return (
        _Engines("engines", engines, log),
        _Mcp("mcp", mcp, log),
        _Person("person", person, log),
        None if files is None else _Gate("files", files, log),
    )
