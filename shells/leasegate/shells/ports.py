"""Adapters from the reference consumers to the runtime's ports and ``ConsumerWork``.

The runtime core (``docs/runtime.md``, "Ports") needs two things of each
consumer: a synchronous **port** it calls inside ``handle`` (gates, and for
MCP and person the install itself), and the awaited **work** it asks for with
``ConsumerWork`` commands. This module adapts the reference consumers of
:mod:`leasegate.shells.consumers` (files under one :class:`TaskRoot`):

* :class:`EngineFilesPort` — ``EnginesPort`` + engine work, on :class:`EngineConsumer`;
* :class:`McpFilesPort` — ``McpPort`` + MCP work, on :class:`McpConsumer`;
* :class:`PersonFilesPort` — ``PersonPort`` (with :meth:`PersonFilesPort.hold_git`
  and :class:`PersonGitHold`) + person work, on :class:`PersonConsumer`;
* :class:`HostWork` — the host's ``quiesce`` and ``remove-paths`` work;
* :class:`ConsumerSet` — all of them on one root, with one dispatcher for
  both shells: ``await work(cmd)`` (async shell) and ``work_sync(cmd)``
  (threading shell). The async form runs the blocking one in a worker thread.

Every work function returns ``None`` or a :class:`CredentialFailure` with a
fixed text (``"a credential consumer failed"`` for any exception: an
exception's text never reaches an error). Guide: ``docs/consumers.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypedDict, runtime_checkable

import anyio

from leasegate.core.registry import (
    Assignment,
    CleanupRequest,
    CredentialEntry,
    Identity,
    InstallRequest,
    TaskView,
)
from leasegate.core.runtime import (
    CLEANUP_CLASSES,
    ConsumerWork,
    CredentialFailure,
    CredentialUnavailable,
    EnginesPort,
    McpPort,
    PersonPort,
    TaskCleanupRequest,
)

from .consumers import (
    ConsumerError,
    EngineConsumer,
    FileConsumer,
    Material,
    McpConsumer,
    PersonConsumer,
    TaskRoot,
    material_from_value,
)
from .consumers._fs import remove_tree

__all__ = [
    "GIT_UNREADABLE",
    "ConsumerSet",
    "EngineFilesPort",
    "FilesWork",
    "HostWork",
    "MaterializedPaths",
    "McpFilesPort",
    "PersonFilesPort",
    "PersonGitHold",
    "RuntimePorts",
    "entry_materials",
]

_FAILED = "a credential consumer failed"
#: The fixed ``CredentialUnavailable`` text of :meth:`PersonFilesPort.hold_git` (RT-040).
GIT_UNREADABLE = "the owner's Git credentials could not be read"
_GIT_NOT_OPEN = "the owner's Git credentials are not open for this run"


def entry_materials(entries: Sequence[CredentialEntry | None]) -> list[Material]:
    """The :class:`Material` of each entry that carries read material.

    The identity is the manifest's ``(class, credentialId, revision)`` — the
    same identity the lease registry names in a selective cleanup (LR-046),
    so a rotation (same revision, new SSM version) rewrites the same files and
    a new revision gets its own directory. Entries without material
    (``access-denied``, MCP ``not-required``) and ``None`` are skipped.

    Raises:
        ConsumerError: a material that is not a leased credential value.
    """
    out: list[Material] = []
    for entry in entries:
        if entry is None or entry.material is None or entry.availability != "available":
            continue
        m = material_from_value(entry.material, entry.manifest.revision)
        ident = Identity(
            credential_class=m.identity.credential_class,
            credential_id=entry.manifest.credential_id,
            revision=entry.manifest.revision,
        )
        out.append(dataclasses.replace(m, identity=ident))
    return out


class _Admission:
    """Per-task admitted run: the adapters' own gate state (no I/O, thread-safe).

    Not the consumer's :class:`~leasegate.shells.consumers.Gate`: the runtime
    closes a gate before each install and reopens it after (a pause), while
    the reference gate closes a run for good.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: task id -> the run admitted now (absent: nothing admitted).
        self.admitted: dict[str, int] = {}

    def open(self, assignment: Assignment) -> None:
        with self._lock:
            self.admitted[assignment.task_id] = assignment.run_epoch

    def close(self, assignment: Assignment) -> None:
        with self._lock:
            run = self.admitted.get(assignment.task_id)
            if run is not None and run <= assignment.run_epoch:
                del self.admitted[assignment.task_id]

    def admits(self, assignment: Assignment) -> bool:
        with self._lock:
            return self.admitted.get(assignment.task_id) == assignment.run_epoch


def _cleanup(consumer: FileConsumer, req: object) -> None:
    """A consumer's ``cleanup`` for a :class:`CleanupRequest` (full or selective)."""
    if not isinstance(req, CleanupRequest):
        return
    task_id = req.assignment.task_id
    consumer.cleanup(task_id, None if req.mode == "full" else req.removed)


def _paths(
    consumer: FileConsumer, task_id: str, entries: Sequence[CredentialEntry | None]
) -> tuple[Path, ...]:
    """Where ``consumer`` writes the files of ``entries`` for ``task_id`` (no I/O).

    A material the consumer would refuse (:class:`ConsumerError`) has no files.
    """
    out: list[Path] = []
    try:
        materials = entry_materials(entries)
    except ConsumerError:
        return ()
    for m in materials:
        base = consumer.root.identity_dir(task_id, m.identity)
        try:
            rels = list(consumer.render_at(m, base))
        except ConsumerError:
            continue
        out.extend(base.joinpath(*rel.split("/")) for rel in rels)
    return tuple(out)


@runtime_checkable
class MaterializedPaths(Protocol):
    """A port that can say where it writes a view's files (read for ``LaunchReady.files``).

    The reference adapters (:class:`EngineFilesPort`, :class:`McpFilesPort`,
    :class:`PersonFilesPort`) implement it; an in-memory port need not.
    """

    def materialized_paths(self, view: TaskView) -> tuple[Path, ...]:
        """The paths (under the task root) of the files ``view`` puts on disk, in manifest order."""


class _Worker:
    """Shared ``work``/``work_sync`` of one consumer adapter."""

    name: str = ""

    def __init__(self, limiter: anyio.CapacityLimiter | None) -> None:
        self._limiter = limiter

    def _serve(self, cmd: ConsumerWork) -> None:
        raise NotImplementedError

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve this consumer's ``ConsumerWork`` in the calling thread (blocking).

        Other consumers' work succeeds untouched. Returns ``None`` or
        ``CredentialFailure("a credential consumer failed")``; never raises.
        """
        if cmd.consumer != self.name:
            return None
        try:
            self._serve(cmd)
        except Exception:  # noqa: BLE001 - never an exception's text in an error
            return CredentialFailure(message=_FAILED)
        return None

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """:meth:`work_sync` in an anyio worker thread (for the async shell)."""
        if cmd.consumer != self.name or cmd.op == "drain":
            return None
        return await anyio.to_thread.run_sync(self.work_sync, cmd, limiter=self._limiter)


class EngineFilesPort(_Worker):
    """The runtime's ``EnginesPort`` plus its engine ``ConsumerWork``, on :class:`EngineConsumer`.

    Args:
        consumer: the reference engine consumer (its files are ``0600`` in
            ``0700`` directories).
        limiter: bounds the worker threads of :meth:`work` (``None``: anyio's).

    ``open``/``close`` flip this adapter's own admission state, **not** the
    consumer's gate (see :class:`_Admission`). ``forget`` keeps nothing.
    :meth:`work_sync` / :meth:`work` serve ``ConsumerWork(consumer="engines")``:
    ``install`` writes the materials of the request's ``next`` view (see
    :func:`entry_materials`), ``cleanup`` removes the task's engine files
    (``full``) or exactly the removed identities (``selective``), ``drain``
    does nothing (writes are not left in flight). Reference:
    ``host/lib/credential-consumers/engines`` as the runtime uses it
    (``installEngineCredentials``, ``cleanupEngineCredentials``,
    ``openEngineGate``/``closeEngineGate``; catalog "Undefined").
    """

    name = "engines"

    def __init__(
        self, consumer: EngineConsumer, *, limiter: anyio.CapacityLimiter | None = None
    ) -> None:
        super().__init__(limiter)
        self.consumer = consumer
        self._gate = _Admission()
        #: task id -> the run admitted now (absent: nothing admitted).
        self.admitted = self._gate.admitted

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit work of ``assignment`` (RT-082)."""
        self._gate.open(assignment)

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older (RT-087)."""
        self._gate.close(assignment)

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment`` is admitted now."""
        return self._gate.admits(assignment)

    def forget(self, assignment: Assignment) -> None:
        """Drop in-memory state of the run on teardown (nothing is kept here)."""

    @staticmethod
    def materials(view: TaskView) -> list[Material]:
        """The engine materials of ``view`` (entries with read material only)."""
        return entry_materials(view.engines)

    def materialized_paths(self, view: TaskView) -> tuple[Path, ...]:
        """The engine files of ``view`` (``engine.env`` or ``config/<path>``); no I/O."""
        return _paths(self.consumer, view.assignment.task_id, view.engines)

    def _serve(self, cmd: ConsumerWork) -> None:
        req = cmd.request
        if cmd.op == "install" and isinstance(req, InstallRequest):
            self.consumer.install(req.assignment, self.materials(req.next))
        elif cmd.op == "cleanup":
            _cleanup(self.consumer, req)


class McpFilesPort(_Worker):
    """The runtime's ``McpPort`` plus its MCP ``ConsumerWork``, on :class:`McpConsumer`.

    Args:
        consumer: the reference MCP consumer (``headers.json`` per connection).
        limiter: bounds the worker threads of :meth:`work`.

    The port keeps **one leased record per task**: the assignment the task's
    leased MCP connections serve, set by :meth:`install` and :meth:`open`,
    answered by :meth:`leased_run`, dropped by :meth:`forget` (the runtime
    closes and forgets MCP with that record's own assignment, only when it
    is ≤ the closing run, RT-086). :meth:`install` is synchronous (the
    runtime calls it inside ``handle``): it writes the files of every MCP
    entry of the ``next`` view that has material (a connection without auth,
    ``not-required``, writes nothing) and raises on failure. Work:
    ``cleanup`` as the engines', ``drain`` nothing. Reference:
    ``host/lib/credential-consumers/mcp`` as the runtime uses it
    (``installMcpConnections``, ``leasedMcpFor``, ``forgetLeasedMcp``,
    ``openMcpGate``/``closeMcpGate``, ``cleanupMcpConnections``).
    """

    name = "mcp"

    def __init__(
        self, consumer: McpConsumer, *, limiter: anyio.CapacityLimiter | None = None
    ) -> None:
        super().__init__(limiter)
        self.consumer = consumer
        self._gate = _Admission()
        self._lock = threading.Lock()
        self._leased: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit work of ``assignment``; it becomes the task's leased record (RT-082)."""
        with self._lock:
            self._leased[assignment.task_id] = assignment
        self._gate.open(assignment)

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older (RT-086)."""
        self._gate.close(assignment)

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment`` is admitted now."""
        return self._gate.admits(assignment)

    def leased_run(self, task_id: str) -> Assignment | None:
        """The assignment the task's leased MCP record serves, or ``None``."""
        with self._lock:
            return self._leased.get(task_id)

    def forget(self, assignment: Assignment) -> None:
        """Forget the task's leased record if it is ``assignment``'s run or older."""
        with self._lock:
            rec = self._leased.get(assignment.task_id)
            if rec is not None and rec.run_epoch <= assignment.run_epoch:
                del self._leased[assignment.task_id]

    def install(self, request: InstallRequest) -> None:
        """Write the MCP files of ``request.next`` synchronously (RT-065..079).

        Raises:
            ConsumerError: unusable material (fixed text).
            OSError: the file system refused.
        """
        self.consumer.install(request.assignment, entry_materials(request.next.mcp))
        with self._lock:
            self._leased[request.assignment.task_id] = request.assignment

    def materialized_paths(self, view: TaskView) -> tuple[Path, ...]:
        """The ``headers.json`` of each MCP entry of ``view`` with material; no I/O."""
        return _paths(self.consumer, view.assignment.task_id, view.mcp)

    def _serve(self, cmd: ConsumerWork) -> None:
        if cmd.op == "cleanup":
            _cleanup(self.consumer, cmd.request)


@dataclasses.dataclass(eq=False)
class PersonGitHold:
    """The owner's Git credentials held for a task-up (reference ``TaskGitCredentialHold``).

    Attributes:
        assignment: the run held.
        git_config: the ``gitconfig`` to include (``credential.helper store``
            on the ``git-credentials`` beside it), or ``None`` without GitHub.
        git_credentials: the ``git-credentials`` file, or ``None``.
        ssh_key: the SSH private key file (``0600``), or ``None`` without SSH.
        aborted: set when the person gate closes for this run (or a newer
            one) or a cleanup reaches it: the hold's own signal.

    :meth:`release` is idempotent (the runtime calls it once, RT-043).
    ``repr`` shows paths only, never material.
    """

    assignment: Assignment
    git_config: Path | None
    git_credentials: Path | None
    ssh_key: Path | None
    aborted: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    _on_release: Callable[[PersonGitHold], None] | None = dataclasses.field(
        default=None, repr=False
    )
    released: bool = False

    def git_env(self) -> dict[str, str]:
        """Environment variables that make a ``git`` child use these credentials.

        ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_0``/``GIT_CONFIG_VALUE_0``
        include :attr:`git_config` (git ≥ 2.31); ``GIT_SSH_COMMAND`` is
        ``ssh -i <ssh_key> -o IdentitiesOnly=yes`` (path shell-quoted). Only
        paths, never material; empty when the hold has neither.
        """
        env: dict[str, str] = {}
        if self.git_config is not None:
            env.update(
                GIT_CONFIG_COUNT="1",
                GIT_CONFIG_KEY_0="include.path",
                GIT_CONFIG_VALUE_0=os.path.abspath(self.git_config),
            )
        if self.ssh_key is not None:
            key = shlex.quote(os.path.abspath(self.ssh_key))
            env["GIT_SSH_COMMAND"] = f"ssh -i {key} -o IdentitiesOnly=yes"
        return env

    def release(self) -> None:
        """Release the hold (the first call only)."""
        if self.released:
            return
        self.released = True
        if self._on_release is not None:
            self._on_release(self)


class PersonFilesPort(_Worker):
    """The runtime's ``PersonPort`` plus its person ``ConsumerWork``, on :class:`PersonConsumer`.

    Args:
        consumer: the reference person consumer (GitHub ``git-credentials`` +
            ``gitconfig``, SSH ``id_key``).
        limiter: bounds the worker threads of :meth:`work`.

    :meth:`install` writes the GitHub and SSH files of ``request.next``
    synchronously. :meth:`open` records the run's view; :meth:`hold_git`
    reads it: when the manifest names a GitHub sign-in or SSH key whose
    material was not read (``access-denied``) it raises
    ``CredentialUnavailable(GIT_UNREADABLE)`` and takes no hold (RT-040: never a
    hold that silently lacks credentials); else it returns a
    :class:`PersonGitHold` with the files' paths. :meth:`close` and a
    ``cleanup`` abort the holds of runs ≤ theirs. Work: ``cleanup`` as the
    engines', ``drain`` nothing (installs are synchronous). Reference:
    ``host/lib/credential-consumers/github`` as the runtime uses it
    (``installPersonCredentials``, ``holdTaskGitCredentials``,
    ``openPersonCredentialGate``/``closePersonCredentialGate``,
    ``cleanupPersonCredentials``).
    """

    name = "person"

    def __init__(
        self, consumer: PersonConsumer, *, limiter: anyio.CapacityLimiter | None = None
    ) -> None:
        super().__init__(limiter)
        self.consumer = consumer
        self._gate = _Admission()
        self._lock = threading.Lock()
        self._views: dict[str, TaskView] = {}
        #: Holds not yet released.
        self.holds: list[PersonGitHold] = []

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit work of ``assignment`` and keep ``view`` for :meth:`hold_git`."""
        with self._lock:
            self._views[assignment.task_id] = view
        self._gate.open(assignment)

    def close(self, assignment: Assignment) -> None:
        """Admit nothing more of ``assignment``'s run or older; abort their holds."""
        self._gate.close(assignment)
        self._abort(assignment)

    def admits(self, assignment: Assignment) -> bool:
        """Whether work of ``assignment`` is admitted now."""
        return self._gate.admits(assignment)

    def _abort(self, assignment: Assignment) -> None:
        with self._lock:
            for h in self.holds:
                same = h.assignment.task_id == assignment.task_id
                if same and h.assignment.run_epoch <= assignment.run_epoch:
                    h.aborted.set()

    def install(self, request: InstallRequest) -> None:
        """Write the GitHub and SSH files of ``request.next`` synchronously.

        Raises:
            ConsumerError: unusable material (fixed text).
            OSError: the file system refused.
        """
        nxt = request.next
        self.consumer.install(request.assignment, entry_materials([nxt.github, nxt.ssh]))

    def materialized_paths(self, view: TaskView) -> tuple[Path, ...]:
        """GitHub ``git-credentials`` + ``gitconfig`` and SSH ``id_key`` of ``view``; no I/O."""
        return _paths(self.consumer, view.assignment.task_id, [view.github, view.ssh])

    def hold_git(self, assignment: Assignment) -> PersonGitHold:
        """Hold the run's Git credentials (reference ``holdTaskGitCredentials``).

        Raises:
            CredentialUnavailable: ``GIT_UNREADABLE`` when the open view names a
                GitHub sign-in or SSH key without read material (RT-040), or
                a fixed text when no view of this run is open.
        """
        with self._lock:
            view = self._views.get(assignment.task_id)
        if view is None or view.assignment != assignment or not self._gate.admits(assignment):
            raise CredentialUnavailable(_GIT_NOT_OPEN)
        paths: dict[str, Path | None] = {"github": None, "ssh": None}
        for cls, entry in (("github", view.github), ("ssh", view.ssh)):
            if entry is None:
                continue
            if entry.availability != "available" or entry.material is None:
                raise CredentialUnavailable(GIT_UNREADABLE)
            paths[cls] = self.consumer.root.identity_dir(
                assignment.task_id,
                Identity(
                    credential_class=cls,  # type: ignore[arg-type]
                    credential_id=entry.manifest.credential_id,
                    revision=entry.manifest.revision,
                ),
            )
        gh, ssh = paths["github"], paths["ssh"]
        hold = PersonGitHold(
            assignment=assignment,
            git_config=None if gh is None else gh / "gitconfig",
            git_credentials=None if gh is None else gh / "git-credentials",
            ssh_key=None if ssh is None else ssh / "id_key",
            _on_release=self._released,
        )
        with self._lock:
            self.holds.append(hold)
        return hold

    def _released(self, hold: PersonGitHold) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self.holds.remove(hold)

    def _serve(self, cmd: ConsumerWork) -> None:
        req = cmd.request
        if cmd.op == "cleanup" and isinstance(req, CleanupRequest):
            self._abort(req.assignment)
            _cleanup(self.consumer, req)


class HostWork:
    """The host's ``ConsumerWork(consumer="host")``: ``quiesce`` and ``remove-paths``.

    Args:
        root: the task root the reference consumers write under.
        quiesce: called with the :class:`TaskCleanupRequest` to prove every
            engine of the run and older runs stopped (reference
            ``quiesceProcesses``, the orchestrator's ``quiesceLeasedEngineAgents``);
            ``None``: nothing to stop. It may raise ``CredentialUnavailable``
            (its fixed message is reported) or anything else ("a credential
            consumer failed"); either fails the cleanup, which keeps its
            journal row.
        files_session_path: maps a task id to its Files session directory
            (task machines); ``None``: no Files session on disk.

    ``remove-paths`` (catalog "Undefined", coordinator step 6) removes, for a
    whole-task request (``credential_ids is None``), the task's whole root
    directory; for a selective one with the lease's request, exactly the
    lease's removed identities; for a selective one without it (the
    runtime's own), every revision of each named id in every class. It also
    removes the Files session directory when ``remove_files_session`` is set
    (or for any whole-task request when the lease says so). Idempotent.
    """

    def __init__(
        self,
        root: TaskRoot,
        *,
        quiesce: Callable[[TaskCleanupRequest], None] | None = None,
        files_session_path: Callable[[str], Path] | None = None,
    ) -> None:
        self.root = root
        self._quiesce = quiesce
        self._files_session_path = files_session_path

    def remove_paths(self, req: TaskCleanupRequest) -> None:
        """Remove what ``req`` names (see the class doc).

        Raises:
            OSError: the file system refused.
        """
        task = req.task_id
        if req.credential_ids is None:
            self.root.remove_task(task)
        elif req.lease is not None:
            for ident in req.lease.removed:
                self.root.remove_identity(task, ident)
        else:
            for cid in req.credential_ids:
                self.root.remove_credential(task, cid, CLEANUP_CLASSES)
        lease_says = req.lease is not None and req.lease.remove_files_session
        if self._files_session_path is not None and (req.remove_files_session or lease_says):
            remove_tree(self._files_session_path(task))

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``quiesce`` / ``remove-paths`` in the calling thread; never raises."""
        if cmd.consumer != "host" or not isinstance(cmd.request, TaskCleanupRequest):
            return None
        try:
            if cmd.op == "quiesce":
                if self._quiesce is not None:
                    self._quiesce(cmd.request)
            elif cmd.op == "remove-paths":
                self.remove_paths(cmd.request)
        except CredentialUnavailable as e:
            return CredentialFailure(message=e.message)
        except Exception:  # noqa: BLE001 - never an exception's text in an error
            return CredentialFailure(message=_FAILED)
        return None


class FilesWork(Protocol):
    """A host's Files consumer work (``install``, ``close-consumers``), blocking."""

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``ConsumerWork(consumer="files")``; return ``None`` or a failure."""


class RuntimePorts(TypedDict):
    """The consumer ports of :class:`ConsumerSet`, as ``CredentialRuntime(**ports)`` takes them."""

    engines: EnginesPort
    mcp: McpPort
    person: PersonPort


class ConsumerSet:
    """The reference consumers on one task root, with one work dispatcher.

    Args:
        root: a :class:`TaskRoot` or its base directory (created ``0700`` on
            first write).
        quiesce: the host's quiesce hook (see :class:`HostWork`).
        files: the host's Files work (``consumer="files"``); ``None``: such
            work succeeds untouched (there is none without a Files port).
        files_session_path: see :class:`HostWork`.
        limiter: bounds the worker threads of :meth:`work` (``None``: anyio's).

    Attributes ``engines`` (:class:`EngineFilesPort`), ``mcp``
    (:class:`McpFilesPort`), ``person`` (:class:`PersonFilesPort`) are the
    ports to build the runtime with (``CredentialRuntime(**consumers.ports(), ...)``);
    ``host`` is the :class:`HostWork`. A host replaces one by assigning
    another object with the same members before building the runtime.

    ``work_sync(cmd)`` (threading shell) and ``await work(cmd)`` (async
    shell; :meth:`work_sync` in a worker thread) dispatch on
    ``cmd.consumer``; unknown consumers succeed untouched. Both return
    ``None`` or a :class:`CredentialFailure` and never raise.
    """

    def __init__(
        self,
        root: TaskRoot | str | os.PathLike[str],
        *,
        quiesce: Callable[[TaskCleanupRequest], None] | None = None,
        files: FilesWork | None = None,
        files_session_path: Callable[[str], Path] | None = None,
        limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        self.root = root if isinstance(root, TaskRoot) else TaskRoot(Path(root))
        self.root.sweep_orphans()  # boot: temporary files a killed write left behind
        self.engines = EngineFilesPort(EngineConsumer(self.root), limiter=limiter)
        self.mcp = McpFilesPort(McpConsumer(self.root), limiter=limiter)
        self.person = PersonFilesPort(PersonConsumer(self.root), limiter=limiter)
        self.host = HostWork(self.root, quiesce=quiesce, files_session_path=files_session_path)
        self.files = files
        self._limiter = limiter

    def ports(self) -> RuntimePorts:
        """``{"engines": …, "mcp": …, "person": …}`` for ``CredentialRuntime(**…)``."""
        return {"engines": self.engines, "mcp": self.mcp, "person": self.person}

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve any ``ConsumerWork`` in the calling thread (blocking); never raises."""
        try:
            if cmd.consumer == "engines":
                return self.engines.work_sync(cmd)
            if cmd.consumer == "mcp":
                return self.mcp.work_sync(cmd)
            if cmd.consumer == "person":
                return self.person.work_sync(cmd)
            if cmd.consumer == "host":
                return self.host.work_sync(cmd)
            if cmd.consumer == "files" and self.files is not None:
                return self.files.work_sync(cmd)
        except Exception:  # noqa: BLE001 - a replaced consumer that raised
            return CredentialFailure(message=_FAILED)
        return None

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """:meth:`work_sync` in an anyio worker thread (for the async shell)."""
        return await anyio.to_thread.run_sync(self.work_sync, cmd, limiter=self._limiter)
