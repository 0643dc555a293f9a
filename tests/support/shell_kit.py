"""Doubles and checks shared by the runner-shell tests (async, threading, reference cloud).

Importable as ``shell_kit`` (pytest's ``pythonpath`` puts ``tests/support``
on ``sys.path``). Used by ``tests/shells/test_async_shell.py``,
``test_thread_shell.py``, ``test_runner_shells_races_and_hostile_inputs.py`` and
``test_reference_cloud_runner.py``:

* :class:`Port` — an in-memory consumer port (engines, MCP, person) that
  records its calls into a shared log;
* :class:`RecordingEngines` — the reference engine consumer's port
  (``EngineFilesPort``: files ``0600`` in ``0700`` directories) that also
  records its gate calls;
* :func:`port_runtime` — the real ``CredentialRuntime`` on :class:`Port` s;
* :func:`reference_cloud` — the reference cloud on a moto server with one
  org, user, project, engine credential (canary values) and one assignment;
* :func:`moto_reader_factory` — a shell ``reader_factory`` reading moto
  through each lease's own STS session, recording every ``OpenReader``;
* :func:`leave_task_files` — a previous process's engine file on disk;
* the spine checks (:func:`assert_grant_read_through_the_lease`,
  :func:`assert_stop_cleaned_up`, :func:`assert_readers_settled`,
  :func:`assert_spine_kept_its_secrets`) the end-to-end shell tests share;
* :func:`shell_threads` — names of the live ``leasegate-*`` threads.

Secrets are canary values (``CANARY-1``, ``CANARY-db``). No AWS, no internet:
the cloud talks to a moto server on 127.0.0.1 that the test started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.core.registry import Assignment, OpenReader, TaskView
from leasegate.core.runtime import CredentialRuntime
from leasegate.shells.consumers import EngineConsumer, TaskRoot
from leasegate.shells.ports import EngineFilesPort
from leasegate.shells.ssm import SessionCredentials, SsmReader
from leasegate.shells.timers import wall_clock_ms
from leasegate.testing import MotoServer, ReferenceCloud

#: One consumer call as a log entry: ``(consumer name, call)``, e.g. ``("mcp", "open")``.
LogEntry = tuple[str, str]


class Port:
    """An in-memory consumer port recording its calls.

    Args:
        name: the consumer's name in the log (``"engines"``, ``"mcp"``, ``"person"``).
        log: the shared log; each call appends ``(name, call)``.

    ``open`` keeps the view (:attr:`views`, oldest first) and the leased run
    (:meth:`leased_run`); ``hold_git`` is not used by these tests and raises
    ``AssertionError``. Implements the runtime's port contracts (catalog
    "Ports") with no I/O.
    """

    def __init__(self, name: str, log: list[LogEntry]) -> None:
        self.name = name
        self.log = log
        self.views: list[TaskView] = []
        self.leased: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Record ``(name, "open")``; keep ``view`` and the leased run."""
        self.log.append((self.name, "open"))
        self.views.append(view)
        self.leased[assignment.task_id] = assignment

    def close(self, assignment: Assignment) -> None:
        """Record ``(name, "close")``."""
        self.log.append((self.name, "close"))

    def forget(self, what: Any) -> None:
        """Record ``(name, "forget")``."""
        self.log.append((self.name, "forget"))

    def install(self, request: Any) -> None:
        """Record ``(name, "install")``."""
        self.log.append((self.name, "install"))

    def leased_run(self, task_id: str) -> Assignment | None:
        """The assignment last opened for ``task_id`` (``None``: never opened)."""
        return self.leased.get(task_id)

    def hold_git(self, assignment: Assignment) -> Any:
        """Not used by these tests. Raises: ``AssertionError`` always."""
        raise AssertionError("not used")


class RecordingEngines(EngineFilesPort):
    """The reference engine consumer's port (files under ``base``), also recording gate calls.

    Args:
        base: the task root's directory.
        log: the shared log; ``open``/``close`` append ``("engines", "open"|"close")``
            before the adapter's own gate call.
    """

    def __init__(self, base: Path, log: list[LogEntry]) -> None:
        super().__init__(EngineConsumer(TaskRoot(base)))
        self.log = log

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Record ``("engines", "open")``, then admit the run."""
        self.log.append(("engines", "open"))
        super().open(assignment, view)

    def close(self, assignment: Assignment) -> None:
        """Record ``("engines", "close")``, then close the run's admission."""
        self.log.append(("engines", "close"))
        super().close(assignment)


def port_runtime(
    seed: str, log: list[LogEntry] | None = None, *, engines: Any = None, **options: Any
) -> CredentialRuntime:
    """An owned runner's real ``CredentialRuntime`` whose consumers are :class:`Port` s.

    Args:
        seed: the op id seed.
        log: the ports' shared log (``None``: a fresh one nobody reads).
        engines: the engines port (``None``: ``Port("engines", log)``).
        options: more ``CredentialRuntime`` arguments (``replica=``, ...).
    """
    log = [] if log is None else log
    return CredentialRuntime(
        runner_kind="owned",
        op_id_seed=seed,
        engines=engines if engines is not None else Port("engines", log),
        mcp=Port("mcp", log),
        person=Port("person", log),
        **options,
    )


def reference_cloud(
    moto: MotoServer,
    *,
    task: str,
    boot: str,
    api_key: str = "CANARY-1",
    database_url: str = "CANARY-db",
) -> ReferenceCloud:
    """The reference cloud on ``moto`` (reset first), on the wall clock, resends after 150 ms.

    Holds org ``acme``, user ``alice``, project ``web`` (``DATABASE_URL`` =
    ``database_url``), alice's engine credential ``claude``
    (``ANTHROPIC_API_KEY`` = ``api_key``), and run 1 of ``task`` assigned to
    the runner booted as ``boot``. Reference: the cloud side of a grant
    (``leasegate.testing.ReferenceCloud``).
    """
    moto.reset()
    cloud = ReferenceCloud(
        ssm=moto.ssm_client(),
        sts=moto.sts_client(),
        region=moto.region,
        clock=wall_clock_ms,
        retry_delay_ms=150,
    )
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": api_key})
    cloud.set_env_value("web", "DATABASE_URL", database_url)
    cloud.assign(task, 1, "acme", "alice", ["web"], runner_boot_id=boot)
    return cloud


def moto_reader_factory(
    moto: MotoServer, opened: list[OpenReader]
) -> Callable[[OpenReader], SsmReader]:
    """A shell ``reader_factory``: an ``SsmReader`` on ``moto`` built from the command's session.

    Appends each ``OpenReader`` to ``opened``; the reader's retries back off
    at most 0.1 s. Reference: the runner's per-lease Parameter Store client
    (LR-026).
    """

    def factory(cmd: OpenReader) -> SsmReader:
        opened.append(cmd)
        return SsmReader(
            SessionCredentials.from_lease(cmd.session, cmd.region),
            endpoint_url=moto.url,
            max_backoff_s=0.1,
        )

    return factory


def leave_task_files(base: Path, task: str) -> None:
    """A previous process's engine file: ``base/task/engine/claude/3/engine.env``."""
    (base / task / "engine" / "claude" / "3").mkdir(parents=True)
    (base / task / "engine" / "claude" / "3" / "engine.env").write_text("x")


def assert_grant_read_through_the_lease(
    cloud: ReferenceCloud, task: str, opened: list[OpenReader], view: Any
) -> None:
    """Run 1 of ``task`` was granted; every reader in ``opened`` used one of that
    lease's own sessions; ``view`` holds exactly the available ``claude`` engine.

    Raises: ``AssertionError`` otherwise (RT-009).
    """
    lease = cloud.granted_lease(task, 1)
    assert lease is not None
    keys = {s.access_key_id for s in lease.sessions}
    assert opened
    assert {o.session.access_key_id for o in opened} <= keys
    assert [e.manifest.credential_id for e in view.engines] == ["claude"]
    assert all(e.availability == "available" for e in view.engines)


def env_values(snapshot: Any) -> dict[str, str]:
    """An env snapshot's values, revealed, by key (all projects)."""
    return {e.state.key: e.value.reveal() for p in snapshot.projects for e in p.entries}


def assert_stop_cleaned_up(
    shell: Any, log: list[LogEntry], base: Path, task: str, cloud: ReferenceCloud
) -> None:
    """After ``close(task, 1, "stop")``: the engines gate closed, the host removed the
    paths and the engines cleaned up, ``base/task`` is gone, no cleanup is owed,
    the cloud saw no delivery error.

    Raises: ``AssertionError`` otherwise (RT-009 close, ER-018).
    """
    assert ("engines", "close") in log
    assert ("host", "remove-paths") in shell.work_log
    assert ("engines", "cleanup") in shell.work_log
    assert not (base / task).exists()  # stop: the task's files are gone
    assert shell.memory_journal.owed() == ()
    assert cloud.delivery_errors == []


def assert_readers_settled(shell: Any) -> None:
    """No task error, every reader the shell built closed, none still open by id.

    Raises: ``AssertionError`` otherwise.
    """
    assert shell.task_errors == []
    assert all(r.closed for r in shell.all_readers)
    assert shell.readers == {}


def assert_spine_kept_its_secrets(
    cloud: ReferenceCloud, shell: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The runner's first frame was ``lease.request``; no canary in a log line or
    in the readers' ``repr``.

    Raises: ``AssertionError`` otherwise.
    """
    sent = [k for d, k in cloud.transcript if d == "in"]
    assert sent[0] == "lease.request"
    assert "CANARY" not in caplog.text
    assert "CANARY" not in repr(shell.all_readers)


def shell_threads() -> list[str]:
    """Names of the live threads whose name starts with ``leasegate-``."""
    return [
        t.name for t in threading.enumerate() if t.name.startswith("leasegate-") and t.is_alive()
    ]
