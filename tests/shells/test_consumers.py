"""Reference consumers (issue #6): permissions, content, atomicity, cleanup, canaries."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from leasegate.core import Secret
from leasegate.core.registry import Assignment, Identity
from leasegate.core.wire.credentials import (
    CredentialLocation,
    EngineValue,
    GithubValue,
    McpHeader,
    McpValue,
    SshValue,
)
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
    assert "helper = store" in person.path_of("task-1", gh.identity, "gitconfig").read_text()
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
