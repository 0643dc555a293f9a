"""Reference consumers (issue #6): permissions, content, atomicity, cleanup, canaries."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from leasegate.core import Secret
from leasegate.core.registry import (
    Assignment,
    CleanupRequest,
    CredentialEntry,
    Identity,
    InstallRequest,
    TaskView,
)
from leasegate.core.runtime import (
    ConsumerWork,
    CredentialFailure,
    CredentialUnavailable,
    TaskCleanupRequest,
)
from leasegate.core.wire.credentials import (
    CredentialLocation,
    EngineValue,
    GithubValue,
    McpHeader,
    McpValue,
    SshValue,
)
from leasegate.core.wire.lease import ManifestEngine, ManifestMcp, ManifestStatic
from leasegate.shells.consumers import (
    Consumer,
    ConsumerError,
    EngineConsumer,
    Material,
    McpConsumer,
    PersonConsumer,
    TaskRoot,
    atomic_write,
    material_from_value,
)
from leasegate.shells.ports import GIT_UNREADABLE, ConsumerSet, PersonGitHold

RUN = Assignment(task_id="task-1", run_epoch=3)


def _engine_env(cid: str = "eng-a", rev: str | None = "7") -> Material:
    return Material(
        identity=Identity(credential_class="engine", credential_id=cid, revision=rev),
        auth_kind="env",
        env={"API_KEY": Secret("CANARY-env-'quoted' $x"), "OTHER": Secret("two\nlines")},
    )


def _engine_files(cid: str = "eng-b", rev: str | None = "1") -> Material:
    return Material(
        identity=Identity(credential_class="engine", credential_id=cid, revision=rev),
        auth_kind="config-dir",
        files={"auth.json": Secret('{"t":"CANARY-file"}'), "sub/dir/cfg": Secret("x")},
    )


def _modes(root: Path) -> tuple[set[int], set[int]]:
    dirs, files = set(), set()
    for dirpath, _dirnames, filenames in os.walk(root):
        dirs.add(stat.S_IMODE(os.lstat(dirpath).st_mode))
        for f in filenames:
            files.add(stat.S_IMODE(os.lstat(os.path.join(dirpath, f)).st_mode))
    return dirs, files


def test_shell_consumers_env_and_config_dir_content_and_permissions(tmp_path: Path) -> None:
    old = os.umask(0o000)  # permissions must not depend on the umask
    try:
        root = TaskRoot(tmp_path / "tasks")
        engines = EngineConsumer(root)
        engines.install(RUN, [_engine_env(), _engine_files()])
    finally:
        os.umask(old)
    env_file = root.identity_dir("task-1", _engine_env().identity) / "engine.env"
    text = env_file.read_text()
    assert text == "export API_KEY='CANARY-env-'\\''quoted'\\'' $x'\nexport OTHER='two\nlines'\n"
    cfg = engines.config_dir("task-1", _engine_files().identity)
    assert (cfg / "auth.json").read_text() == '{"t":"CANARY-file"}'
    assert (cfg / "sub" / "dir" / "cfg").read_text() == "x"
    dirs, files = _modes(root.task_dir("task-1"))
    assert dirs == {0o700}
    assert files == {0o600}
    assert not list(root.task_dir("task-1").rglob(".*tmp*"))


def test_shell_consumers_mcp_and_person_content(tmp_path: Path) -> None:
    root = TaskRoot(tmp_path)
    mcp = McpConsumer(root)
    person = PersonConsumer(root)
    m_tok = Material(
        identity=Identity(credential_class="mcp", credential_id="m1", revision="2"),
        auth_kind="token",
        headers={"X-Api-Key": Secret("CANARY-h")},
    )
    m_oauth = Material(
        identity=Identity(credential_class="mcp", credential_id="m2", revision="2"),
        auth_kind="oauth",
        token=Secret("CANARY-oauth"),
    )
    mcp.install(RUN, [m_tok, m_oauth])
    assert json.loads(mcp.path_of("task-1", m_tok.identity, "headers.json").read_text()) == {
        "X-Api-Key": "CANARY-h"
    }
    assert json.loads(mcp.path_of("task-1", m_oauth.identity, "headers.json").read_text()) == {
        "Authorization": "Bearer CANARY-oauth"
    }
    gh = Material(
        identity=Identity(credential_class="github", credential_id="gh", revision="4"),
        auth_kind="token",
        token=Secret("CANARY/gh:tok"),
    )
    ssh = Material(
        identity=Identity(credential_class="ssh", credential_id="key", revision="9"),
        auth_kind="key",
        private_key=Secret("-----BEGIN KEY-----\nCANARY\n-----END KEY-----"),
    )
    person.install(RUN, [gh, ssh])
    creds = person.path_of("task-1", gh.identity, "git-credentials").read_text()
    assert creds == "https://x-access-token:CANARY%2Fgh%3Atok@github.com\n"
    creds_path = person.path_of("task-1", gh.identity, "git-credentials")
    assert person.path_of("task-1", gh.identity, "gitconfig").read_text() == (
        f'[credential]\n\thelper = "store --file={creds_path}"\n'
    )
    key = person.path_of("task-1", ssh.identity, "id_key").read_text()
    assert key == "-----BEGIN KEY-----\nCANARY\n-----END KEY-----\n"
    with pytest.raises(ConsumerError):
        mcp.install(RUN, [gh])  # another class


def test_shell_consumers_selective_cleanup_removes_exactly_the_removed_identities(
    tmp_path: Path,
) -> None:
    root = TaskRoot(tmp_path)
    engines = EngineConsumer(root)
    person = PersonConsumer(root)
    a7, a8, b1 = _engine_env("eng-a", "7"), _engine_env("eng-a", "8"), _engine_files("eng-b", "1")
    gh = Material(
        identity=Identity(credential_class="github", credential_id="eng-a", revision="7"),
        auth_kind="token",
        token=Secret("t"),
    )
    engines.install(RUN, [a7, a8, b1])
    person.install(RUN, [gh])
    other_task = Assignment(task_id="task-2", run_epoch=1)
    engines.install(other_task, [a7])
    # same (credentialId, revision) but another class: the engines consumer must not touch it
    engines.cleanup("task-1", [a7.identity, gh.identity])
    assert not root.identity_dir("task-1", a7.identity).exists()
    assert root.identity_dir("task-1", a8.identity).is_dir()
    assert root.identity_dir("task-1", b1.identity).is_dir()
    assert root.identity_dir("task-1", gh.identity).is_dir()
    assert root.identity_dir("task-2", a7.identity).is_dir()
    person.cleanup("task-1", [gh.identity])
    assert not (root.task_dir("task-1") / "github").exists()  # empty parents removed
    engines.cleanup(
        "task-1", [Identity(credential_class="engine", credential_id="nope", revision=None)]
    )
    engines.cleanup("task-1", [a8.identity, b1.identity])
    assert list(root.task_dir("task-1").iterdir()) == []


def test_shell_consumers_full_cleanup_removes_the_task_root(tmp_path: Path) -> None:
    root = TaskRoot(tmp_path)
    engines = EngineConsumer(root)
    engines.install(RUN, [_engine_env(), _engine_files()])
    engines.install(Assignment(task_id="task-2", run_epoch=1), [_engine_env()])
    engines.cleanup("task-1", None)
    assert not root.task_dir("task-1").exists()
    assert root.task_dir("task-2").is_dir()
    engines.cleanup("task-1", None)  # idempotent


def test_shell_consumers_open_close_gate_admission(tmp_path: Path) -> None:
    engines = EngineConsumer(TaskRoot(tmp_path))
    assert not engines.admits(RUN)
    engines.open(RUN)
    assert engines.admits(RUN)
    newer = Assignment(task_id="task-1", run_epoch=4)
    assert not engines.admits(newer)
    engines.close(RUN)
    assert not engines.admits(RUN)
    with pytest.raises(ConsumerError):
        engines.open(RUN)  # a closed run stays closed
    with pytest.raises(ConsumerError):
        engines.install(RUN, [_engine_env()])
    engines.open(newer)
    assert engines.admits(newer)
    engines.close(Assignment(task_id="task-1", run_epoch=10))  # covers older runs
    assert not engines.admits(newer)


def test_shell_consumers_atomic_replace_never_shows_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    a, b = b"A" * 200_000, b"B" * 200_000
    atomic_write(target, a)
    stop = threading.Event()
    seen: set[bytes] = set()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_bytes())

    t = threading.Thread(target=reader)
    t.start()
    for i in range(40):
        atomic_write(target, b if i % 2 == 0 else a)
    stop.set()
    t.join()
    assert seen <= {a, b}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_shell_consumers_reinstall_replaces_content(tmp_path: Path) -> None:
    root = TaskRoot(tmp_path)
    engines = EngineConsumer(root)
    engines.install(RUN, [_engine_files()])
    m2 = Material(
        identity=_engine_files().identity,
        auth_kind="config-dir",
        files={"auth.json": Secret("new")},
    )
    engines.install(RUN, [m2])
    assert (engines.config_dir("task-1", m2.identity) / "auth.json").read_text() == "new"


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/../../b", "a//b", ".", "a/./b", "x\x00y", ""])
def test_shell_consumers_unsafe_paths_refused_without_writing(tmp_path: Path, bad: str) -> None:
    root = TaskRoot(tmp_path / "r")
    engines = EngineConsumer(root)
    m = Material(
        identity=Identity(credential_class="engine", credential_id="e", revision="1"),
        auth_kind="config-dir",
        files={"ok": Secret("CANARY"), bad: Secret("CANARY")},
    )
    with pytest.raises(ConsumerError) as info:
        engines.install(RUN, [m])
    assert "CANARY" not in str(info.value)
    assert str(info.value) == "a credential file path is not safe"
    assert not (tmp_path / "r").exists()


def test_shell_consumers_hostile_ids_stay_inside_the_root(tmp_path: Path) -> None:
    root = TaskRoot(tmp_path / "r")
    engines = EngineConsumer(root)
    m = Material(
        identity=Identity(credential_class="engine", credential_id="../../etc", revision="../x"),
        auth_kind="env",
        env={"A": Secret("1")},
    )
    bad_run = Assignment(task_id="..", run_epoch=1)
    engines.install(bad_run, [m])
    written = list(tmp_path.rglob("engine.env"))
    assert len(written) == 1
    assert (tmp_path / "r") in written[0].parents
    engines.cleanup("..", None)
    assert list((tmp_path / "r").iterdir()) == []


def test_shell_consumers_symlinked_dir_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = tmp_path / "r"
    base.mkdir()
    (base / "task-1").symlink_to(elsewhere)
    engines = EngineConsumer(TaskRoot(base))
    with pytest.raises(ValueError, match="symlink"):
        engines.install(RUN, [_engine_env()])
    assert list(elsewhere.iterdir()) == []


def test_shell_consumers_material_from_wire_values_and_canaries(tmp_path: Path) -> None:
    loc = CredentialLocation(org_id="o", user_id="u", credential_class="engine", credential_id="e1")
    eng = EngineValue(location=loc, auth_kind="env", env={"K": Secret("CANARY-1")}, files=None)
    m = material_from_value(eng, "5")
    assert m.identity == Identity(credential_class="engine", credential_id="e1", revision="5")
    assert m.env == {"K": Secret("CANARY-1")}
    mloc = CredentialLocation(org_id="o", user_id=None, credential_class="mcp", credential_id="m")
    mcp = McpValue(
        location=mloc,
        auth_kind="token",
        header=McpHeader(name="X-K", value=Secret("CANARY-2")),
        access_token=None,
    )
    assert material_from_value(mcp, None).headers == {"X-K": Secret("CANARY-2")}
    gloc = CredentialLocation(org_id="o", user_id="u", credential_class="github", credential_id="g")
    assert material_from_value(
        GithubValue(location=gloc, token=Secret("CANARY-3")), "1"
    ).token == Secret("CANARY-3")
    sloc = CredentialLocation(org_id="o", user_id="u", credential_class="ssh", credential_id="s")
    ssh = material_from_value(SshValue(location=sloc, private_key=Secret("CANARY-4")), "1")
    assert ssh.private_key == Secret("CANARY-4")
    for x in (m, ssh):
        assert "CANARY" not in repr(x)
    with pytest.raises(ConsumerError) as info:
        material_from_value(object(), "1")
    assert "CANARY" not in str(info.value)
    # A bad env value: the error names nothing of it.
    bad = Material(identity=m.identity, auth_kind="env", env={"K": Secret("CANARY\x00")})
    with pytest.raises(ConsumerError) as info2:
        EngineConsumer(TaskRoot(tmp_path)).install(RUN, [bad])
    assert "CANARY" not in str(info2.value)
    assert "CANARY" not in repr(info2.value)


def test_shell_consumers_satisfy_the_protocol(tmp_path: Path) -> None:
    root = TaskRoot(tmp_path)
    consumers: list[Consumer] = [EngineConsumer(root), McpConsumer(root), PersonConsumer(root)]
    for c in consumers:
        c.open(RUN)
        c.install(RUN, [])
        c.close(RUN)
        c.cleanup("task-1", [])


def test_shell_consumers_symlink_deeper_in_an_existing_tree_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "eng-a" / "7").mkdir(parents=True)
    root = TaskRoot(tmp_path / "r")
    engines = EngineConsumer(root)
    engines.install(RUN, [_engine_files("other", "1")])
    (root.task_dir("task-1") / "engine" / "eng-a").symlink_to(elsewhere / "eng-a")
    with pytest.raises(ValueError, match="symlink"):
        engines.install(RUN, [_engine_env("eng-a", "7")])
    assert list((elsewhere / "eng-a" / "7").iterdir()) == []


# ---------------------------------------------------------------------------
# The runtime's ports and ConsumerWork on the reference consumers (ports.py)

_LOC = {"org_id": "acme", "user_id": "alice"}


def _loc(cls: Any, cid: str) -> CredentialLocation:
    return CredentialLocation(credential_class=cls, credential_id=cid, **_LOC)


def _eng_entry(cid: str, value: str, *, rev: str | None = "r1") -> CredentialEntry:
    return CredentialEntry(
        manifest=ManifestEngine(
            credential_id=cid,
            engine="claude-code",
            revision=rev,
            parameter="/p/" + cid,
            version=1,
            session_id="s",
            auth_kind="env",
        ),
        availability="available",
        material=EngineValue(
            location=_loc("engine", cid), auth_kind="env", env={"K": Secret(value)}, files=None
        ),
        observed_version=5,
    )


def _mcp_entry(cid: str, value: str | None, *, rev: str | None = "r1") -> CredentialEntry:
    auth: Any = "none" if value is None else "token"
    return CredentialEntry(
        manifest=ManifestMcp(
            credential_id=cid,
            server="srv",
            revision=rev,
            parameter=None if value is None else "/p/" + cid,
            version=None if value is None else 1,
            session_id=None if value is None else "s",
            auth_kind=auth,
        ),
        availability="not-required" if value is None else "available",
        material=None
        if value is None
        else McpValue(
            location=_loc("mcp", cid),
            auth_kind="token",
            header=McpHeader(name="X-Key", value=Secret(value)),
            access_token=None,
        ),
        observed_version=None if value is None else 1,
    )


def _static_entry(cls: str, cid: str, value: str | None, *, rev: str = "r1") -> CredentialEntry:
    material: Any = None
    if value is not None:
        material = (
            GithubValue(location=_loc("github", cid), token=Secret(value))
            if cls == "github"
            else SshValue(location=_loc("ssh", cid), private_key=Secret(value))
        )
    return CredentialEntry(
        manifest=ManifestStatic(
            credential_id=cid, revision=rev, parameter="/p/" + cid, version=1, session_id="s"
        ),
        availability="available" if value is not None else "access-denied",
        material=material,
        observed_version=None if value is None else 1,
    )


def _view(
    a: Assignment = RUN,
    *,
    engines: tuple[CredentialEntry, ...] = (),
    mcp: tuple[CredentialEntry, ...] = (),
    github: CredentialEntry | None = None,
    ssh: CredentialEntry | None = None,
) -> TaskView:
    return TaskView(
        assignment=a,
        lease_id="lease-1",
        manifest_revision=1,
        manifest_digest="0" * 64,
        expires_at=2_000_000_000_000,
        project_ids=(),
        engines=engines,
        mcp=mcp,
        github=github,
        ssh=ssh,
    )


def _install(view: TaskView, reason: Any = "grant") -> InstallRequest:
    return InstallRequest(
        assignment=view.assignment,
        owner_org_id="acme",
        owner_user_id="alice",
        previous=None,
        next=view,
        files=None,
        reason=reason,
        project_set_changed=False,
    )


def _full(a: Assignment = RUN) -> CleanupRequest:
    return CleanupRequest(
        assignment=a, mode="full", reason="stopped", removed=(), remove_files_session=False
    )


def _full_view() -> TaskView:
    return _view(
        engines=(_eng_entry("eng-a", "CANARY-eng"),),
        mcp=(_mcp_entry("m1", "CANARY-mcp"), _mcp_entry("m-open", None)),
        github=_static_entry("github", "gh", "CANARY-gh"),
        ssh=_static_entry("ssh", "key", "CANARY-ssh-key"),
    )


def _all_files(base: Path) -> dict[str, str]:
    return {str(p.relative_to(base)): p.read_text() for p in sorted(base.rglob("*")) if p.is_file()}


def test_RT_065_consumer_set_installs_every_class_under_the_manifest_revision(
    tmp_path: Path,
) -> None:
    cs = ConsumerSet(tmp_path / "tasks")
    view = _full_view()
    req = _install(view)
    assert (
        cs.work_sync(ConsumerWork(cmd_id=-1, consumer="engines", op="install", request=req)) is None
    )
    cs.mcp.install(req)
    cs.person.install(req)
    files = _all_files(tmp_path / "tasks")
    assert files == {
        "task-1/engine/eng-a/r1/engine.env": "export K='CANARY-eng'\n",
        "task-1/mcp/m1/r1/headers.json": '{"X-Key": "CANARY-mcp"}',
        "task-1/github/gh/r1/git-credentials": "https://x-access-token:CANARY-gh@github.com\n",
        "task-1/github/gh/r1/gitconfig": (
            '[credential]\n\thelper = "store --file='
            + str(tmp_path / "tasks/task-1/github/gh/r1/git-credentials")
            + '"\n'
        ),
        "task-1/ssh/key/r1/id_key": "CANARY-ssh-key\n",
    }
    dirs, modes = _modes(tmp_path / "tasks")
    assert dirs == {0o700}
    assert modes == {0o600}


def test_LR_092_rotation_rewrites_the_same_identity_files(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    cs.person.install(_install(_view(github=_static_entry("github", "gh", "CANARY-old"))))
    cs.person.install(
        _install(_view(github=_static_entry("github", "gh", "CANARY-new")), "credential-change")
    )
    files = _all_files(tmp_path)
    assert files["task-1/github/gh/r1/git-credentials"].startswith(
        "https://x-access-token:CANARY-new@"
    )
    assert len([k for k in files if k.endswith("git-credentials")]) == 1


def test_RT_082_RT_087_port_gates_pause_and_close_this_run_and_older(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    view = _full_view()
    newer = Assignment(task_id="task-1", run_epoch=4)
    for port in (cs.engines, cs.mcp, cs.person):
        port.open(RUN, view)
        assert port.admits(RUN)
        port.close(RUN)  # a pause: the runtime reopens after an install
        assert not port.admits(RUN)
        port.open(RUN, view)
        assert port.admits(RUN)
        port.close(Assignment(task_id="task-1", run_epoch=2))  # an older run: no effect
        assert port.admits(RUN)
        port.open(newer, _view(newer))
        port.close(RUN)  # closes run 3 and older, never the newer run 4
        assert port.admits(newer)


def test_RT_086_mcp_port_keeps_one_leased_record_per_task(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    assert cs.mcp.leased_run("task-1") is None
    cs.mcp.install(_install(_view(mcp=(_mcp_entry("m1", "v"),))))
    assert cs.mcp.leased_run("task-1") == RUN
    newer = Assignment(task_id="task-1", run_epoch=5)
    cs.mcp.open(newer, _view(newer))
    assert cs.mcp.leased_run("task-1") == newer
    cs.mcp.forget(RUN)  # an older run does not forget the newer record
    assert cs.mcp.leased_run("task-1") == newer
    cs.mcp.forget(newer)
    assert cs.mcp.leased_run("task-1") is None


@pytest.mark.parametrize("denied", ["github", "ssh"])
def test_RT_040_hold_git_refuses_an_unreadable_sign_in_or_key(tmp_path: Path, denied: str) -> None:
    cs = ConsumerSet(tmp_path)
    gh = _static_entry("github", "gh", None if denied == "github" else "CANARY-gh")
    ssh = _static_entry("ssh", "key", None if denied == "ssh" else "CANARY-k")
    view = _view(github=gh, ssh=ssh)
    cs.person.install(_install(view))
    cs.person.open(RUN, view)
    with pytest.raises(CredentialUnavailable) as info:
        cs.person.hold_git(RUN)
    assert info.value.message == GIT_UNREADABLE
    assert cs.person.holds == []  # no hold is registered
    # The readable one was still installed; the denied one has no file.
    files = _all_files(tmp_path)
    assert any(k.startswith(f"task-1/{'ssh' if denied == 'github' else 'github'}/") for k in files)
    assert not any(k.startswith(f"task-1/{denied}/") for k in files)


def test_RT_041_RT_043_git_hold_paths_abort_on_close_and_release_once(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    view = _view(
        github=_static_entry("github", "gh", "CANARY-gh"),
        ssh=_static_entry("ssh", "key", "CANARY-k"),
    )
    cs.person.install(_install(view))
    with pytest.raises(CredentialUnavailable):  # not open yet
        cs.person.hold_git(RUN)
    cs.person.open(RUN, view)
    hold = cs.person.hold_git(RUN)
    assert isinstance(hold, PersonGitHold)
    assert hold.git_credentials is not None
    assert hold.ssh_key is not None
    assert hold.git_config is not None
    assert hold.git_config.is_file()
    assert "CANARY-gh" in hold.git_credentials.read_text()
    assert hold.ssh_key.read_text() == "CANARY-k\n"
    assert "CANARY" not in repr(hold)
    assert cs.person.holds == [hold]
    assert not hold.aborted.is_set()
    cs.person.close(Assignment(task_id="task-1", run_epoch=2))  # older run: not this hold
    assert not hold.aborted.is_set()
    cs.person.close(RUN)
    assert hold.aborted.is_set()
    hold.release()
    hold.release()
    assert hold.released
    assert cs.person.holds == []
    # A view without GitHub or SSH holds nothing, and that is not an error.
    cs.person.open(RUN, _view())
    empty = cs.person.hold_git(RUN)
    assert (empty.git_config, empty.ssh_key) == (None, None)


def test_RT_097_full_cleanups_of_the_three_consumers_at_once_remove_everything(
    tmp_path: Path,
) -> None:
    cs = ConsumerSet(tmp_path)
    req = _install(_full_view())
    cs.engines.work_sync(ConsumerWork(cmd_id=-1, consumer="engines", op="install", request=req))
    cs.mcp.install(req)
    cs.person.install(req)
    other = _view(Assignment(task_id="task-2", run_epoch=1), engines=(_eng_entry("e", "x"),))
    cs.engines.work_sync(
        ConsumerWork(cmd_id=-2, consumer="engines", op="install", request=_install(other))
    )
    results: list[CredentialFailure | None] = []
    barrier = threading.Barrier(3)

    def run(name: Any) -> None:
        barrier.wait()
        results.append(
            cs.work_sync(ConsumerWork(cmd_id=-3, consumer=name, op="cleanup", request=_full()))
        )

    threads = [threading.Thread(target=run, args=(n,)) for n in ("engines", "person", "mcp")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [None, None, None]
    assert not (tmp_path / "task-1").exists()
    assert (tmp_path / "task-2" / "engine").is_dir()  # another task untouched


def test_RT_097_one_consumers_full_cleanup_leaves_the_other_classes(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    req = _install(_full_view())
    cs.mcp.install(req)
    cs.person.install(req)
    assert (
        cs.mcp.work_sync(ConsumerWork(cmd_id=-1, consumer="mcp", op="cleanup", request=_full()))
        is None
    )
    assert not (tmp_path / "task-1" / "mcp").exists()
    assert (tmp_path / "task-1" / "github").is_dir()
    assert (tmp_path / "task-1" / "ssh").is_dir()


def _task_req(
    ids: tuple[str, ...] | None, *, lease: CleanupRequest | None = None, files: bool = False
) -> TaskCleanupRequest:
    return TaskCleanupRequest(
        task_id="task-1",
        run_epoch=3,
        reason="stop",
        credential_ids=ids,
        lease=lease,
        remove_files_session=files,
    )


def test_host_remove_paths_whole_task_selective_and_files_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    cs = ConsumerSet(tmp_path / "tasks", files_session_path=lambda task: sessions / task)

    def fresh() -> None:
        req = _install(_full_view())
        cs.engines.work_sync(ConsumerWork(cmd_id=-1, consumer="engines", op="install", request=req))
        cs.mcp.install(req)
        cs.person.install(req)
        (sessions / "task-1").mkdir(parents=True, exist_ok=True)
        (sessions / "task-1" / "creds").write_text("x")

    def host(req: TaskCleanupRequest) -> CredentialFailure | None:
        return cs.work_sync(
            ConsumerWork(cmd_id=-5, consumer="host", op="remove-paths", request=req)
        )

    # Selective with the lease's request: exactly its identities.
    fresh()
    gh_r1 = Identity(credential_class="github", credential_id="gh", revision="r1")
    gh_r2 = Identity(credential_class="github", credential_id="gh", revision="r2")
    lease = CleanupRequest(
        assignment=RUN,
        mode="selective",
        reason="lease-replaced",
        removed=(gh_r2,),
        remove_files_session=False,
    )
    assert host(_task_req(("gh",), lease=lease)) is None
    assert cs.root.identity_dir("task-1", gh_r1).is_dir()  # another revision stays
    lease = dataclasses.replace(lease, removed=(gh_r1,))
    assert host(_task_req(("gh",), lease=lease)) is None
    assert not (tmp_path / "tasks" / "task-1" / "github").exists()
    assert (tmp_path / "tasks" / "task-1" / "ssh").is_dir()
    assert (sessions / "task-1").is_dir()
    # Selective without a lease (the runtime's own): every revision of the ids.
    assert host(_task_req(("key", "eng-a"))) is None
    assert not (tmp_path / "tasks" / "task-1" / "ssh").exists()
    assert not (tmp_path / "tasks" / "task-1" / "engine").exists()
    assert (tmp_path / "tasks" / "task-1" / "mcp").is_dir()
    # Whole task, with the Files session.
    fresh()
    assert host(_task_req(None, files=True)) is None
    assert not (tmp_path / "tasks" / "task-1").exists()
    assert not (sessions / "task-1").exists()
    assert host(_task_req(None, files=True)) is None  # idempotent


def test_host_quiesce_hook_and_failures_carry_fixed_texts(tmp_path: Path) -> None:
    seen: list[TaskCleanupRequest] = []
    outcome: list[BaseException | None] = [None]

    def quiesce(req: TaskCleanupRequest) -> None:
        seen.append(req)
        if outcome[0] is not None:
            raise outcome[0]

    cs = ConsumerSet(tmp_path, quiesce=quiesce)
    req = _task_req(None)
    cmd = ConsumerWork(cmd_id=-1, consumer="host", op="quiesce", request=req)
    assert cs.work_sync(cmd) is None
    assert seen == [req]
    outcome[0] = CredentialUnavailable("the task's engines could not be stopped")
    assert cs.work_sync(cmd) == CredentialFailure(message="the task's engines could not be stopped")
    outcome[0] = RuntimeError("CANARY-secret in an exception")
    err = cs.work_sync(cmd)
    assert err == CredentialFailure(message="a credential consumer failed")
    assert "CANARY" not in repr(err)
    # Without a hook: nothing to stop.
    assert ConsumerSet(tmp_path).work_sync(cmd) is None


def test_consumer_failure_becomes_the_fixed_text_without_secrets(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    (tmp_path / "task-1").write_text("not a directory")  # the install cannot create its dirs
    req = _install(_full_view())
    err = cs.work_sync(ConsumerWork(cmd_id=-1, consumer="engines", op="install", request=req))
    assert err == CredentialFailure(message="a credential consumer failed")
    with pytest.raises(ValueError, match="symlink or not a directory") as info:
        cs.person.install(req)
    assert "CANARY" not in str(info.value)
    assert "CANARY" not in repr(info.value)


def test_consumer_set_dispatch_replaced_consumer_and_unknown_work(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path)
    calls: list[tuple[str, str]] = []

    class Files:
        def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
            calls.append((cmd.consumer, cmd.op))
            raise RuntimeError("CANARY")

    assert cs.work_sync(ConsumerWork(cmd_id=-1, consumer="files", op="install")) is None
    cs.files = Files()
    err = cs.work_sync(ConsumerWork(cmd_id=-1, consumer="files", op="close-consumers"))
    assert err == CredentialFailure(message="a credential consumer failed")
    assert calls == [("files", "close-consumers")]
    for name in ("engines", "mcp", "person"):
        assert cs.work_sync(ConsumerWork(cmd_id=-1, consumer=name, op="drain")) is None  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_consumer_set_async_work_is_work_sync_in_a_thread(
    tmp_path: Path, anyio_backend: str
) -> None:
    cs = ConsumerSet(tmp_path)
    req = _install(_full_view())
    main = threading.get_ident()
    threads: list[int] = []
    orig = cs.work_sync

    def spy(cmd: ConsumerWork) -> CredentialFailure | None:
        threads.append(threading.get_ident())
        return orig(cmd)

    cs.work_sync = spy  # type: ignore[method-assign]
    assert (
        await cs.work(ConsumerWork(cmd_id=-1, consumer="engines", op="install", request=req))
        is None
    )
    assert (tmp_path / "task-1" / "engine" / "eng-a" / "r1" / "engine.env").is_file()
    assert threads
    assert threads[0] != main
    assert (
        await cs.work(ConsumerWork(cmd_id=-2, consumer="engines", op="cleanup", request=_full()))
        is None
    )
    assert not (tmp_path / "task-1").exists()
    # The single adapters serve work the same way.
    assert (
        await cs.engines.work(
            ConsumerWork(cmd_id=-3, consumer="engines", op="install", request=req)
        )
        is None
    )
    assert (
        await cs.mcp.work(ConsumerWork(cmd_id=-4, consumer="mcp", op="cleanup", request=_full()))
        is None
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_shell_consumers_gitconfig_serves_the_token_to_real_git(tmp_path: Path) -> None:
    # A base directory with a space, a quote and a dollar: quoted for git and the shell.
    base = tmp_path / "runner's $HOME dir"
    person = PersonConsumer(TaskRoot(base))
    gh = Material(
        identity=Identity(credential_class="github", credential_id="gh", revision="r1"),
        auth_kind="token",
        token=Secret("CANARY/tok:1"),
    )
    person.install(RUN, [gh])
    repo = tmp_path / "repo"
    repo.mkdir()  # git runs the helper here, not in the identity directory
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    config = person.path_of("task-1", gh.identity, "gitconfig")
    out = subprocess.run(
        ["git", "-c", f"include.path={config}", "credential", "fill"],
        input="protocol=https\nhost=github.com\n\n",
        capture_output=True,
        text=True,
        cwd=repo,
        env=env,
        timeout=30,
        check=True,
    )
    assert "username=x-access-token\n" in out.stdout
    assert "password=CANARY/tok:1\n" in out.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_RT_041_git_hold_env_serves_the_held_credentials_to_git(tmp_path: Path) -> None:
    cs = ConsumerSet(tmp_path / "tasks")
    view = _view(
        github=_static_entry("github", "gh", "CANARY-held"),
        ssh=_static_entry("ssh", "key", "CANARY-k"),
    )
    cs.person.install(_install(view))
    cs.person.open(RUN, view)
    hold = cs.person.hold_git(RUN)
    env = hold.git_env()
    assert "CANARY" not in repr(env)
    assert hold.ssh_key is not None
    assert env["GIT_SSH_COMMAND"] == f"ssh -i {hold.ssh_key} -o IdentitiesOnly=yes"
    repo = tmp_path / "repo"
    repo.mkdir()
    out = subprocess.run(
        ["git", "credential", "fill"],
        input="protocol=https\nhost=github.com\n\n",
        capture_output=True,
        text=True,
        cwd=repo,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "home"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            **env,
        },
        timeout=30,
        check=True,
    )
    assert "password=CANARY-held\n" in out.stdout
    hold.release()
    cs.person.open(RUN, _view())
    assert cs.person.hold_git(RUN).git_env() == {}
