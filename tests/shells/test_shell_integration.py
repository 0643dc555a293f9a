"""Issue #6 done-when: the shells with the reference consumers, end to end.

One scenario, parametrized over the shells (asyncio and trio through
``AsyncRunnerShell``, threads through ``ThreadRunnerShell``) and the runner
kinds (``owned``; ``task-machine`` with a Files session):

* the reference cloud grants engines (an env one and a config-dir one), two
  MCP connections (a token and one without auth), GitHub, SSH and two
  projects, minting the lease's STS session with ``AssumeRole`` on a moto
  server on 127.0.0.1 **with IAM enforcement**;
* the gate opens and launch-ready answers; every consumer's files exist with
  the leased content, ``0600`` in ``0700`` directories; the Git hold points
  at them; both projects' env values are served;
* a rotation (``credential.changed``) of the engine and of GitHub replaces
  the material in the same files;
* one more engine credential is **really denied by the server**: it stays
  ``access-denied`` (no file), everything else is available;
* a stop removes every file of the task (and the Files session directory);
* shutdown leaves nothing running; no ``CANARY`` value reaches a log, an
  error or a repr.

Scoping the denial. moto's IAM evaluates SSM actions against resource
``*``, so a policy can deny ``ssm:GetParameters`` only as a whole, per
principal. The test therefore mints two roles: the lease's session (the one
the cloud grants) may read; a second role is denied. The reader the shell
builds for the lease (``reader_factory``) signs every ``GetParameters``
that names the denied credential's parameter with the denied role's session
and every other call with the lease's own session. The server really answers
that call with ``AccessDeniedException`` (classified by the shell's own
``SsmReader``, LR-034); the registry then isolates the selectors one by one
(LR-033), so only that credential ends ``access-denied``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from leasegate.core.registry import OpenReader
from leasegate.core.replica import ReplicaManager
from leasegate.core.runtime import ConsumerWork, CredentialFailure, CredentialRuntime
from leasegate.core.wire.lease import LeaseFiles
from leasegate.shells.async_shell import AsyncRunnerShell, CallFailed
from leasegate.shells.ports import GIT_UNREADABLE, ConsumerSet, PersonGitHold
from leasegate.shells.ssm import ReadResult, SessionCredentials, SsmReader
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.timers import wall_clock_ms
from leasegate.testing import CloudWebSocketServer, MemoryCloudLink, ReferenceCloud
from leasegate.testing.moto import MotoServer

pytestmark = [pytest.mark.integration]

SHELLS = ["asyncio", "trio", "threads"]
KINDS = ["owned", "task-machine"]
TIMEOUT_S = 20.0


# ---------------------------------------------------------------------------
# The IAM-enforced moto server: an allowed role (the lease's) and a denied one


class Roles:
    """The two roles: the lease's (may read) and the denied one."""

    def __init__(self, server: MotoServer) -> None:
        tag = uuid.uuid4().hex[:8]
        self.server = server
        self.allow_arn = server.create_role(f"lease-{tag}", allow_read=True)
        self.deny_arn = server.create_role(f"denied-{tag}", allow_read=False)


@pytest.fixture(scope="module")
def roles(moto_iam_server: MotoServer) -> Roles:
    return Roles(moto_iam_server)


class RoutingReader(SsmReader):
    """The lease session's reader, except calls naming ``denied`` go to ``deny``."""

    def __init__(self, creds: SessionCredentials, deny: SsmReader, denied: str, url: str) -> None:
        super().__init__(creds, endpoint_url=url, max_backoff_s=0.1)
        self._deny = deny
        self._denied = denied
        #: How many calls the server denied (for the test's own check).
        self.denied_calls = 0

    def _call(self, selectors: tuple[str, ...]) -> ReadResult:
        if any(s.split(":", 1)[0] == self._denied for s in selectors):
            self.denied_calls += 1
            return self._deny._call(selectors)
        return super()._call(selectors)


# ---------------------------------------------------------------------------
# The cloud and the runtime


TASK = "task-int"
BOOT = "boot-int-1"


def _cloud(server: MotoServer, roles: Roles, org: str, *, kind: str, deny: str) -> ReferenceCloud:
    cloud = ReferenceCloud(
        ssm=server.client("ssm"),
        sts=server.client("sts"),
        region=server.region,
        clock=wall_clock_ms,
        retry_delay_ms=100,
        role_arn=roles.allow_arn,
        seed=org,
    )
    cloud.add_org(org)
    cloud.add_user(org, "alice")
    cloud.add_project(org, "web")
    cloud.add_project(org, "api")
    cloud.add_engine_credential("alice", f"{org}-claude", env={"ANTHROPIC_API_KEY": "CANARY-1"})
    cloud.add_engine_credential(
        "alice",
        f"{org}-codex",
        engine="codex",
        auth_kind="config-dir",
        files={"auth.json": '{"token":"CANARY-codex"}'},
    )
    cloud.add_mcp("alice", f"{org}-mcp", server="linear", header=("X-Api-Key", "CANARY-mcp"))
    cloud.add_mcp("alice", f"{org}-open", server="docs", auth_kind="none")
    cloud.set_github("alice", f"{org}-gh", "CANARY-gh-1")
    cloud.set_ssh("alice", f"{org}-ssh", "-----BEGIN KEY-----\nCANARY-ssh\n-----END KEY-----")
    if deny == "engine":
        cloud.add_engine_credential("alice", f"{org}-denied", env={"DENIED": "CANARY-denied"})
    cloud.set_env_value("web", "DATABASE_URL", "CANARY-db")
    cloud.set_env_value("api", "API_TOKEN", "CANARY-api")
    files = LeaseFiles(bucket="task-files", prefix="t/", read_only=False)
    cloud.assign(
        TASK,
        1,
        org,
        "alice",
        ["web", "api"],
        runner_boot_id=BOOT,
        files=files if kind == "task-machine" else None,
    )
    return cloud


class FilesRecorder:
    """A host's Files consumer double: gate + work; the session dir holds no secret."""

    def __init__(self, sessions: Path) -> None:
        self.sessions = sessions
        self.calls: list[str] = []
        self.access: list[Any] = []

    def open(self, assignment: Any, view: Any) -> None:
        self.calls.append("open")

    def close(self, assignment: Any) -> None:
        self.calls.append("close")

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        self.calls.append(cmd.op)
        if cmd.op == "install":
            files = cmd.request.files  # type: ignore[attr-defined]
            self.access.append(files)
            d = self.sessions / files.assignment.task_id
            d.mkdir(parents=True, exist_ok=True)
            (d / "mount").write_text(files.files.bucket + "/" + files.files.prefix)
        return None


# ---------------------------------------------------------------------------
# Drivers: one blocking interface over the three shells


class Driver:
    """Blocking host calls on a shell, whatever runs it."""

    shell: Any
    rt: CredentialRuntime

    def call(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    def query(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` between two ``handle`` calls (core state is consistent)."""
        raise NotImplementedError

    def script(self, fn: Callable[[], Any]) -> Any:
        """Run a cloud script step where the transport notices its frames."""
        raise NotImplementedError


class AsyncDriver(Driver):
    def __init__(self, portal: anyio.from_thread.BlockingPortal, shell: AsyncRunnerShell) -> None:
        self.portal = portal
        self.shell = shell
        self.rt = shell.runtime

    def call(self, name: str, *args: Any) -> Any:
        method = getattr(self.shell, name)

        async def bounded() -> Any:
            with anyio.fail_after(TIMEOUT_S):
                out = method(*args)
                if hasattr(out, "__await__"):
                    out = await out
                return out

        return self.portal.call(bounded)

    def query(self, fn: Callable[[], Any]) -> Any:
        return self.portal.call(fn)  # on the loop thread, between handle calls

    def script(self, fn: Callable[[], Any]) -> Any:
        return self.portal.call(fn)  # the link's listener wakes on the loop thread


class ThreadDriver(Driver):
    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.rt = shell.runtime

    def call(self, name: str, *args: Any) -> Any:
        if name in ("wait_launch_ready", "close"):
            return getattr(self.shell, name)(*args, timeout_s=TIMEOUT_S)
        return getattr(self.shell, name)(*args)

    def query(self, fn: Callable[[], Any]) -> Any:
        return self.shell.query(lambda _rt: fn())

    def script(self, fn: Callable[[], Any]) -> Any:
        return fn()  # the WebSocket server's listener is thread-safe


@contextlib.contextmanager
def running(
    which: str, rt: CredentialRuntime, cloud: ReferenceCloud, factory: Any, cs: ConsumerSet
) -> Iterator[Driver]:
    if which == "threads":
        from leasegate.shells.transport import Backoff, ThreadWebSocketClient

        with CloudWebSocketServer(cloud) as server:
            client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
            client.start()
            assert client.wait_connected(10)
            shell = ThreadRunnerShell(rt, client, reader_factory=factory, work=cs.work_sync)
            with shell:
                yield ThreadDriver(shell)
            assert shell.leaked_threads == 0
        return
    with anyio.from_thread.start_blocking_portal(which) as portal:
        link = MemoryCloudLink(cloud)
        shell = AsyncRunnerShell(rt, link.async_end(), reader_factory=factory, work=cs.work)
        try:
            with portal.wrap_async_context_manager(shell):
                yield AsyncDriver(portal, shell)
            assert shell.running_tasks == 0
        finally:
            link.close()


def _has(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except FileNotFoundError:
        return False


def _wait_for(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _modes(base: Path) -> tuple[set[int], set[int]]:
    dirs, files = set(), set()
    for dirpath, _dirs, names in os.walk(base):
        dirs.add(stat.S_IMODE(os.lstat(dirpath).st_mode))
        for n in names:
            files.add(stat.S_IMODE(os.lstat(os.path.join(dirpath, n)).st_mode))
    return dirs, files


def _setup(
    tmp_path: Path,
    server: MotoServer,
    roles: Roles,
    *,
    which: str,
    kind: str,
    deny: str,
) -> tuple[ReferenceCloud, CredentialRuntime, ConsumerSet, FilesRecorder, Any, list[Any], str]:
    org = f"o{uuid.uuid4().hex[:10]}"
    cloud = _cloud(server, roles, org, kind=kind, deny=deny)
    denied_param = cloud.credential_parameter(f"{org}-denied" if deny == "engine" else f"{org}-gh")
    assert denied_param is not None
    files = FilesRecorder(tmp_path / "sessions")
    cs = ConsumerSet(
        tmp_path / "tasks",
        files=files,
        files_session_path=lambda task: tmp_path / "sessions" / task,
    )
    rt = CredentialRuntime(
        runner_kind=kind,  # type: ignore[arg-type]
        op_id_seed=f"int-{which}-{kind}",
        files=files if kind == "task-machine" else None,
        replica=ReplicaManager(boot_id=BOOT),
        **cs.ports(),
    )
    deny_creds = server.session_for(roles.deny_arn)
    readers: list[RoutingReader] = []

    def factory(cmd: OpenReader) -> SsmReader:
        deny_reader = SsmReader(deny_creds, endpoint_url=server.url, max_backoff_s=0.1)
        r = RoutingReader(
            SessionCredentials.from_lease(cmd.session, cmd.region),
            deny_reader,
            denied_param,
            server.url,
        )
        readers.append(r)
        return r

    return cloud, rt, cs, files, factory, readers, org


# ---------------------------------------------------------------------------
# The matrix


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", SHELLS)
def test_issue6_grant_files_rotation_denied_stop_under_each_shell(
    which: str,
    kind: str,
    tmp_path: Path,
    moto_iam_server: MotoServer,
    roles: Roles,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every leasegate logger at DEBUG (docs/logging.md): no record may hold a canary.
    caplog.set_level(logging.DEBUG, logger="leasegate")
    cloud, rt, cs, files, factory, readers, org = _setup(
        tmp_path, moto_iam_server, roles, which=which, kind=kind, deny="engine"
    )
    base = tmp_path / "tasks"
    with running(which, rt, cloud, factory, cs) as d:
        start = d.call("begin_start", TASK, 1)
        ready: Any = d.call("wait_launch_ready", start)
        view = ready.view
        # -- the grant: everything available but the one the server denied
        avail = {e.manifest.credential_id: e.availability for e in (*view.engines, *view.mcp)}
        assert avail == {
            f"{org}-claude": "available",
            f"{org}-codex": "available",
            f"{org}-denied": "access-denied",
            f"{org}-mcp": "available",
            f"{org}-open": "not-required",
        }
        assert view.github.availability == "available"
        assert view.ssh.availability == "available"
        assert sum(r.denied_calls for r in readers) >= 1
        assert d.query(lambda: rt.open_run(TASK)) == 1
        # -- both projects' env values served from the grant's own reader
        snap: Any = d.query(lambda: rt.env_snapshot(TASK, 1, ("web", "api")))
        assert snap is not None
        values = {e.state.key: e.value.reveal() for p in snap.projects for e in p.entries}
        assert values == {"DATABASE_URL": "CANARY-db", "API_TOKEN": "CANARY-api"}
        # -- the consumers' files: content and permissions
        task = base / TASK
        expected = {
            f"engine/{org}-claude/r1/engine.env": "export ANTHROPIC_API_KEY='CANARY-1'\n",
            f"engine/{org}-codex/r1/config/auth.json": '{"token":"CANARY-codex"}',
            f"mcp/{org}-mcp/r1/headers.json": '{"X-Api-Key": "CANARY-mcp"}',
            f"github/{org}-gh/r1/git-credentials": (
                "https://x-access-token:CANARY-gh-1@github.com\n"
            ),
            f"github/{org}-gh/r1/gitconfig": (
                f'[credential]\n\thelper = "store --file={task}/github/{org}-gh/r1/'
                'git-credentials"\n'
            ),
            f"ssh/{org}-ssh/r1/id_key": "-----BEGIN KEY-----\nCANARY-ssh\n-----END KEY-----\n",
        }
        got = {str(p.relative_to(task)): p.read_text() for p in task.rglob("*") if p.is_file()}
        assert got == expected  # the denied credential and the no-auth MCP wrote nothing
        # -- what the task gets names exactly these files and env values
        listed = {str(p.relative_to(task)) for paths in ready.files.values() for p in paths}
        assert listed == set(expected)
        assert ready.reveal() == values
        assert "CANARY" not in repr(ready)
        dirs, modes = _modes(base)
        assert dirs == {0o700}
        assert modes == {0o600}
        # -- the Git hold points at the installed files
        hold: Any = d.call("acquire_hold", start)
        assert hold is not None
        git = hold.git
        assert isinstance(git, PersonGitHold)
        assert git.git_credentials == task / f"github/{org}-gh/r1/git-credentials"
        assert git.ssh_key == task / f"ssh/{org}-ssh/r1/id_key"
        d.call("release_hold", hold.hold_id)
        assert git.released
        d.call("end_start", start)
        # -- task machines: the Files session was installed (no secret on disk)
        if kind == "task-machine":
            assert files.calls[:3] == ["close", "install", "open"]  # install is a pause
            assert (tmp_path / "sessions" / TASK / "mount").read_text() == "task-files/t/"
        else:
            assert files.calls == []
        # -- rotation: credential.changed replaces the material in the same files
        # (one at a time: a change whose read completes after another change's
        # install committed crosses the read fence, LR-093, and the re-grant
        # the registry then asks for is not a scenario of this test)
        env_file = task / f"engine/{org}-claude/r1/engine.env"
        gh_file = task / f"github/{org}-gh/r1/git-credentials"
        d.script(lambda: cloud.rotate(f"{org}-claude", env={"ANTHROPIC_API_KEY": "CANARY-2"}))
        _wait_for(lambda: _has(env_file, "CANARY-2"), "the engine rotation")
        _wait_for(lambda: "install" not in d.query(rt.tracked), "the install to end")
        d.script(lambda: cloud.rotate(f"{org}-gh", token="CANARY-gh-2"))
        _wait_for(lambda: _has(gh_file, "CANARY-gh-2"), "the GitHub rotation")
        _wait_for(lambda: "install" not in d.query(rt.tracked), "the install to end")
        assert d.query(lambda: rt.open_run(TASK)) == 1
        assert env_file.read_text() == "export ANTHROPIC_API_KEY='CANARY-2'\n"
        assert gh_file.read_text() == "https://x-access-token:CANARY-gh-2@github.com\n"
        got = {str(p.relative_to(task)) for p in task.rglob("*") if p.is_file()}
        assert got ^ set(expected) == set()  # replaced in place: no second copy anywhere
        # -- stop: every file of the task is gone (and the Files session)
        d.call("close", TASK, 1, "stop")
        assert not task.exists()
        assert list(base.iterdir()) == []
        assert not (tmp_path / "sessions" / TASK).exists()
        assert d.query(lambda: rt.open_run(TASK)) is None
        assert cloud.delivery_errors == []
        d.call("shutdown")
        assert d.shell.task_errors == []
    assert all(r.closed for r in readers)
    assert "CANARY" not in caplog.text
    assert all("CANARY" not in r.getMessage() for r in caplog.records)
    # The shells did log (so the check above saw real records), under named loggers.
    assert {r.name for r in caplog.records} & {
        "leasegate.shells.dispatch",
        "leasegate.testing.cloud",
    }
    assert "CANARY" not in repr(readers)
    assert "CANARY" not in repr(git)


@pytest.mark.parametrize("which", SHELLS)
def test_RT_040_denied_github_refuses_the_hold_and_leaves_the_rest_available(
    which: str,
    tmp_path: Path,
    moto_iam_server: MotoServer,
    roles: Roles,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="leasegate")
    cloud, rt, cs, _files, factory, _readers, org = _setup(
        tmp_path, moto_iam_server, roles, which=which, kind="owned", deny="github"
    )
    task = tmp_path / "tasks" / TASK
    with running(which, rt, cloud, factory, cs) as d:
        start = d.call("begin_start", TASK, 1)
        ready: Any = d.call("wait_launch_ready", start)
        view = ready.view
        assert view.github.availability == "access-denied"
        assert view.github.material is None
        assert view.ssh.availability == "available"
        assert all(e.availability == "available" for e in view.engines)
        assert (task / f"ssh/{org}-ssh/r1/id_key").is_file()
        # The person files the task gets: the SSH key only (GitHub was not read).
        assert ready.files["person"] == (task / f"ssh/{org}-ssh/r1/id_key",)
        assert not (task / "github").exists()
        # RT-040: never a hold that silently lacks the owner's Git credentials.
        with pytest.raises(CallFailed) as info:  # one class for both shells (_dispatch)
            d.call("acquire_hold", start)
        assert info.value.error == CredentialFailure(message=GIT_UNREADABLE)
        assert cs.person.holds == []
        d.call("end_start", start)
        d.call("close", TASK, 1, "stop")
        assert not task.exists()
        d.call("shutdown")
    assert "CANARY" not in caplog.text
