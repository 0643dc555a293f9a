"""Attacks on the reference consumers and their port adapters.

Each test here failed before its fix:

* a symlink planted in the task root (at the task, class or credential
  level) made a cleanup follow it and delete, and prune, directories
  **outside** the root (selective cleanups, full per-consumer cleanups and
  the host's ``remove-paths``);
* directories that already existed under the root with loose permissions
  kept them after an install or a rotation (only the identity directory was
  re-chmodded);
* an MCP header or GitHub token that is not encodable (a lone surrogate, as a
  JSON ``\\ud800`` escape decodes) raised ``UnicodeEncodeError``, whose
  ``object`` attribute holds the whole secret, instead of a fixed-text
  :class:`ConsumerError`.

Catalog: consumer behavior is "Undefined" in the catalogs (issue #6, item 6:
"Directories 0700, files 0600 ... a full cleanup removes the task root");
RT-097 (cleanups of the three consumers) and the host's ``remove-paths``.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from leasegate.core import Secret
from leasegate.core.registry import Assignment, Identity
from leasegate.core.runtime import ConsumerWork, TaskCleanupRequest
from leasegate.shells.consumers import (
    ConsumerError,
    EngineConsumer,
    Material,
    McpConsumer,
    PersonConsumer,
    TaskRoot,
    UnsafePath,
)
from leasegate.shells.consumers._fs import is_temp_name
from leasegate.shells.ports import ConsumerSet
from leasegate.testing.moto import MotoServer

TASK = "task-1"
RUN = Assignment(task_id=TASK, run_epoch=1)
CLAUDE = Identity(credential_class="engine", credential_id="claude", revision="r1")


def _env_material(ident: Identity = CLAUDE, value: str = "CANARY-env") -> Material:
    return Material(identity=ident, auth_kind="env", env={"API_KEY": Secret(value)})


def _victim(outside: Path) -> list[Path]:
    """A tree outside the task root shaped like a task's (what a symlink points at)."""
    paths = []
    for cls in ("engine", "mcp", "github", "ssh"):
        d = outside / cls / "claude" / "r1"
        d.mkdir(parents=True)
        f = d / "precious"
        f.write_text("not the runner's")
        paths.append(f)
    return paths


def _roots(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    return base, outside


def _all_intact(victims: list[Path]) -> bool:
    return all(p.is_file() and p.read_text() == "not the runner's" for p in victims)


# ------------------------------------------------------------- symlinks at cleanup


def test_shell_consumers_selective_cleanup_never_follows_a_task_symlink_out_of_the_root(
    tmp_path: Path,
) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    os.symlink(outside, base / TASK)  # planted: the task directory is a symlink
    c = EngineConsumer(TaskRoot(base))
    c.cleanup(TASK, [CLAUDE])
    assert _all_intact(victims)
    # Nor were the (now empty-looking) parents pruned outside.
    assert (outside / "engine" / "claude").is_dir()
    assert os.path.islink(base / TASK)


def test_shell_consumers_selective_cleanup_never_follows_a_class_symlink(tmp_path: Path) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    (base / TASK).mkdir(mode=0o700)
    os.symlink(outside / "engine", base / TASK / "engine")
    EngineConsumer(TaskRoot(base)).cleanup(TASK, [CLAUDE])
    assert _all_intact(victims)


def test_shell_consumers_selective_cleanup_never_follows_a_credential_symlink(
    tmp_path: Path,
) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    (base / TASK / "engine").mkdir(mode=0o700, parents=True)
    os.symlink(outside / "engine" / "claude", base / TASK / "engine" / "claude")
    EngineConsumer(TaskRoot(base)).cleanup(TASK, [CLAUDE])
    assert _all_intact(victims)


def test_RT_097_full_cleanups_never_follow_a_task_symlink_out_of_the_root(
    tmp_path: Path,
) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    os.symlink(outside, base / TASK)
    root = TaskRoot(base)
    for consumer in (EngineConsumer(root), McpConsumer(root), PersonConsumer(root)):
        consumer.cleanup(TASK, None)
    assert _all_intact(victims)


def test_RT_097_full_cleanup_still_removes_a_planted_symlink_itself_not_its_target(
    tmp_path: Path,
) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    (base / TASK).mkdir(mode=0o700)
    os.symlink(outside / "engine", base / TASK / "engine")
    EngineConsumer(TaskRoot(base)).cleanup(TASK, None)
    assert _all_intact(victims)
    assert not os.path.lexists(base / TASK / "engine")
    assert not os.path.lexists(base / TASK)  # the task root, left empty, is gone


def test_shell_consumers_cleanup_unlinks_symlinks_inside_an_identity_dir_not_targets(
    tmp_path: Path,
) -> None:
    # Guard (held before the fix too): links inside what is removed are unlinked.
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    root = TaskRoot(base)
    c = EngineConsumer(root)
    c.install(RUN, [_env_material()])
    d = root.identity_dir(TASK, CLAUDE)
    os.symlink(outside, d / "to-outside")
    os.symlink(victims[0], d / "to-file")
    c.cleanup(TASK, [CLAUDE])
    assert not os.path.lexists(d)
    assert _all_intact(victims)


def _host(base: Path, req: TaskCleanupRequest) -> object:
    consumers = ConsumerSet(base)
    return consumers.work_sync(
        ConsumerWork(cmd_id=1, consumer="host", op="remove-paths", request=req)
    )


def test_host_remove_paths_by_credential_id_never_follows_a_task_symlink(tmp_path: Path) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    os.symlink(outside, base / TASK)
    req = TaskCleanupRequest(
        task_id=TASK,
        run_epoch=1,
        credential_ids=("claude",),
        remove_files_session=False,
        lease=None,
        reason="revoked",
    )
    assert _host(base, req) is None
    assert _all_intact(victims)
    assert (outside / "engine").is_dir()


def test_host_remove_paths_whole_task_removes_the_symlink_not_its_target(tmp_path: Path) -> None:
    base, outside = _roots(tmp_path)
    victims = _victim(outside)
    os.symlink(outside, base / TASK)
    req = TaskCleanupRequest(
        task_id=TASK,
        run_epoch=1,
        credential_ids=None,
        remove_files_session=False,
        lease=None,
        reason="stop",
    )
    assert _host(base, req) is None
    assert _all_intact(victims)
    assert not os.path.lexists(base / TASK)


def test_shell_consumers_cleanup_still_removes_what_the_identity_owns_and_prunes(
    tmp_path: Path,
) -> None:
    # The fix must not weaken the ordinary case.
    base, _ = _roots(tmp_path)
    root = TaskRoot(base)
    c = EngineConsumer(root)
    other = Identity(credential_class="engine", credential_id="codex", revision="r1")
    c.install(RUN, [_env_material(), _env_material(other)])
    c.cleanup(TASK, [CLAUDE])
    assert not (base / TASK / "engine" / "claude").exists()
    assert (root.identity_dir(TASK, other) / "engine.env").is_file()
    c.cleanup(TASK, [other])
    assert not (base / TASK / "engine").exists()  # empty parents pruned
    assert (base / TASK).is_dir()  # never the task root itself
    c.cleanup(TASK, None)
    assert not (base / TASK).exists()


# ------------------------------------------------------------- permissions


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_shell_consumers_install_tightens_existing_loose_dirs_to_0700(tmp_path: Path) -> None:
    base, _ = _roots(tmp_path)
    (base / TASK / "engine").mkdir(parents=True)
    os.chmod(base / TASK, 0o777)
    os.chmod(base / TASK / "engine", 0o755)
    EngineConsumer(TaskRoot(base)).install(RUN, [_env_material()])
    for d in (
        base / TASK,
        base / TASK / "engine",
        base / TASK / "engine" / "claude",
        base / TASK / "engine" / "claude" / "r1",
    ):
        assert _mode(d) == 0o700, d


def test_LR_092_rotation_restores_0600_files_and_0700_dirs(tmp_path: Path) -> None:
    base, _ = _roots(tmp_path)
    root = TaskRoot(base)
    c = EngineConsumer(root)
    mat = Material(
        identity=CLAUDE,
        auth_kind="config-dir",
        files={"a/b/auth.json": Secret("CANARY-one")},
    )
    c.install(RUN, [mat])
    config = root.identity_dir(TASK, CLAUDE) / "config"
    # Tampered with between installs (a loose umask tool, a careless host).
    os.chmod(config, 0o755)
    os.chmod(config / "a", 0o755)
    os.chmod(config / "a" / "b" / "auth.json", 0o644)
    rotated = Material(
        identity=CLAUDE, auth_kind="config-dir", files={"a/b/auth.json": Secret("CANARY-two")}
    )
    c.install(RUN, [rotated])
    assert (config / "a" / "b" / "auth.json").read_text() == "CANARY-two"
    assert _mode(config / "a" / "b" / "auth.json") == 0o600
    for d in (config, config / "a", config / "a" / "b"):
        assert _mode(d) == 0o700, d


def test_shell_consumers_install_refuses_planted_symlinks_at_every_level(tmp_path: Path) -> None:
    # Regression guard for the fd-based directory walk (this case held before).
    for level in range(4):
        base = tmp_path / f"b{level}"
        base.mkdir(mode=0o700)
        outside = tmp_path / f"o{level}"
        outside.mkdir()
        parts = [TASK, "engine", "claude", "r1"][: level + 1]
        parent = base.joinpath(*parts[:-1])
        parent.mkdir(parents=True, exist_ok=True)
        os.symlink(outside, parent / parts[-1])
        consumer = EngineConsumer(TaskRoot(base))
        with pytest.raises(UnsafePath):
            consumer.install(RUN, [_env_material()])
        assert list(outside.iterdir()) == []


# ------------------------------------------------------------- values and secrets


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


@pytest.mark.parametrize(
    ("consumer_cls", "material"),
    [
        (
            McpConsumer,
            Material(
                identity=Identity(credential_class="mcp", credential_id="linear", revision="1"),
                auth_kind="token",
                headers={"Authorization": Secret("CANARY-\ud800-header")},
            ),
        ),
        (
            McpConsumer,
            Material(
                identity=Identity(credential_class="mcp", credential_id="linear", revision="1"),
                auth_kind="oauth",
                token=Secret("CANARY-\udcff-oauth"),
            ),
        ),
        (
            PersonConsumer,
            Material(
                identity=Identity(credential_class="github", credential_id="gh", revision="1"),
                auth_kind="token",
                token=Secret("CANARY-\ud800-token"),
            ),
        ),
    ],
)
def test_shell_consumers_unencodable_secret_is_a_fixed_text_error_holding_no_secret(
    tmp_path: Path, consumer_cls: type[McpConsumer | PersonConsumer], material: Material
) -> None:
    consumer = consumer_cls(TaskRoot(tmp_path / "base"))
    with pytest.raises(ConsumerError) as info:
        consumer.install(RUN, [material])
    for e in _chain(info.value):
        assert "CANARY" not in str(e)
        assert "CANARY" not in repr(e.args)
        assert "CANARY" not in repr(getattr(e, "object", ""))
    assert not any(p.is_file() for p in (tmp_path / "base").rglob("*"))


def test_shell_consumers_non_utf8_and_huge_values_round_trip(tmp_path: Path) -> None:
    # Lone surrogates in env/config/ssh values are written byte for byte
    # (surrogatepass); 8 MiB values are written whole.
    root = TaskRoot(tmp_path / "base")
    big = "CANARY-" + "x" * (8 << 20)
    mats = [
        Material(identity=CLAUDE, auth_kind="env", env={"K": Secret(big)}),
        Material(
            identity=Identity(credential_class="engine", credential_id="cfg", revision="1"),
            auth_kind="config-dir",
            files={"f": Secret("CANARY-\udcff")},
        ),
    ]
    EngineConsumer(root).install(RUN, mats)
    env = (root.identity_dir(TASK, CLAUDE) / "engine.env").read_bytes()
    assert env == b"export K='" + big.encode() + b"'\n"
    f = root.identity_dir(TASK, mats[1].identity) / "config" / "f"
    assert f.read_bytes() == "CANARY-\udcff".encode("utf-8", "surrogatepass")


# ------------------------------------------------------------- concurrency


def test_RT_097_concurrent_install_and_full_cleanup_leave_no_loose_file(tmp_path: Path) -> None:
    """Installs racing full cleanups of the same task: each call either succeeds or
    fails with ``OSError``/``ConsumerError``; afterwards no temporary file is
    left and every file left is 0600 in 0700 directories (never a partial)."""
    base = tmp_path / "base"
    root = TaskRoot(base)
    c = EngineConsumer(root)
    errors: list[BaseException] = []
    stop = threading.Event()

    def installer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                c.install(RUN, [_env_material(value=f"CANARY-{i}")])
            except (OSError, ConsumerError):
                pass
            except BaseException as e:  # noqa: BLE001 - recorded for the assertion
                errors.append(e)

    def cleaner() -> None:
        for _ in range(300):
            try:
                c.cleanup(TASK, None)
            except OSError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        stop.set()

    threads = [threading.Thread(target=installer), threading.Thread(target=cleaner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for p in base.rglob("*"):
        assert not is_temp_name(p.name)
        if p.is_file():
            assert _mode(p) == 0o600
            assert p.read_text().startswith("export API_KEY='CANARY-")
        else:
            assert _mode(p) == 0o700


# ------------------------------------------------------------- the demo's leak check


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_demo_no_leak_fails_when_a_component_prints_a_leased_value(
    stream: str,
    moto_server: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A leased value printed straight to the process's stdout/stderr (not through
    the demo's console or the ``leasegate`` loggers) must fail ``no-leak``:
    before the fix the demo exited 0 with the value on its own stdout."""
    import sys

    from leasegate.shells.demo import DemoOptions, run_demo
    from leasegate.shells.ports import EngineFilesPort

    serve = EngineFilesPort._serve

    def leaky(self: EngineFilesPort, cmd: ConsumerWork) -> None:
        if cmd.op == "install":
            for m in self.materials(cmd.request.next):  # type: ignore[attr-defined]
                for v in m.env.values():
                    print("debug:", v.reveal(), file=getattr(sys, stream))
        serve(self, cmd)

    monkeypatch.setattr(EngineFilesPort, "_serve", leaky)
    result = run_demo(
        DemoOptions(
            shell="asyncio",
            ssm_endpoint=moto_server.url,
            workdir=str(tmp_path),
            secret_prefix="CANARY-",
        )
    )
    captured = capsys.readouterr()
    assert "debug: CANARY-" in getattr(captured, stream.replace("std", ""))  # the fault happened
    status = {k: v[0] for k, v in result.outcomes.items()}
    assert status["no-leak"] == "fail", result.outcomes["no-leak"]
    assert "stdout/stderr" in result.outcomes["no-leak"][1]
    assert all(s == "pass" for k, s in status.items() if k != "no-leak")
    assert result.exit_code == 1
    assert "CANARY" not in result.outcomes["no-leak"][1]


@pytest.mark.integration
@pytest.mark.slow
def test_demo_narrowing_fails_when_the_selective_cleanup_removes_nothing(
    moto_server: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The narrowing's selective cleanup must be seen removing the removed
    credential's files. Before the fix the narrowing passed with a selective
    cleanup that did nothing: the grant that raced the narrowing escalated to a
    full cleanup (``manifest-narrowed``), which removed every file anyway."""
    from leasegate.shells.consumers import FileConsumer
    from leasegate.shells.demo import DemoOptions, run_demo
    from leasegate.shells.ports import HostWork

    full_cleanup = FileConsumer.cleanup
    remove_paths = HostWork.remove_paths

    def only_full(self: FileConsumer, task_id: str, removed: object) -> None:
        if removed is None:
            full_cleanup(self, task_id, None)

    def host_only_full(self: HostWork, req: TaskCleanupRequest) -> None:
        if req.credential_ids is None:
            remove_paths(self, req)

    monkeypatch.setattr(FileConsumer, "cleanup", only_full)
    monkeypatch.setattr(HostWork, "remove_paths", host_only_full)
    result = run_demo(
        DemoOptions(
            shell="asyncio",
            ssm_endpoint=moto_server.url,
            workdir=str(tmp_path),
            step_timeout_s=5.0,
        )
    )
    capsys.readouterr()
    status = {k: v[0] for k, v in result.outcomes.items()}
    assert status["narrowing"] == "fail", result.outcomes["narrowing"]
    assert "selective" in result.outcomes["narrowing"][1]
    assert result.exit_code == 1


@pytest.mark.integration
@pytest.mark.slow
def test_demo_no_leak_sees_a_debug_record_of_a_leasegate_logger(
    moto_server: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As the CLI runs it (``isolate_logs=True``), a ``leasegate`` logger's DEBUG
    record holding a leased value must fail ``no-leak``. Before the fix the
    record was never created (the loggers were left at WARNING), so the demo
    exited 0 while a host enabling DEBUG would log the secret."""
    import logging

    from leasegate.shells.demo import DemoOptions, run_demo
    from leasegate.shells.ports import EngineFilesPort

    serve = EngineFilesPort._serve

    def leaky(self: EngineFilesPort, cmd: ConsumerWork) -> None:
        if cmd.op == "install":
            for m in self.materials(cmd.request.next):  # type: ignore[attr-defined]
                for v in m.env.values():
                    logging.getLogger("leasegate.shells.leaky").debug("value %s", v.reveal())
        serve(self, cmd)

    monkeypatch.setattr(EngineFilesPort, "_serve", leaky)
    level = logging.getLogger("leasegate").level
    result = run_demo(
        DemoOptions(shell="asyncio", ssm_endpoint=moto_server.url, workdir=str(tmp_path)),
        isolate_logs=True,
    )
    out = capsys.readouterr()
    assert logging.getLogger("leasegate").level == level  # restored
    assert result.outcomes["no-leak"][0] == "fail", result.outcomes["no-leak"]
    assert "logs (0 found)" not in result.outcomes["no-leak"][1]
    assert result.exit_code == 1
    # DEBUG records are tapped, not echoed: the value reached no stream.
    assert not any(s.reveal() in out.out + out.err for s in result.minted)


@pytest.mark.integration
@pytest.mark.slow
def test_demo_without_sts_remembers_the_synthetic_session_secrets_for_the_leak_check(
    moto_server: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a user's endpoint without STS every lease gets synthetic session keys.
    Before the fix the cloud minted them itself and the demo's leak check never
    searched for them (no session secret key or token in ``minted``)."""
    from leasegate.shells.demo import DemoOptions, _world, run_demo

    real_open = _world.open_endpoint

    def no_sts(url: str | None) -> _world.Endpoint:
        ep = real_open(url)
        ep.has_sts = False
        return ep

    monkeypatch.setattr(_world, "open_endpoint", no_sts)
    trace = tmp_path / "nosts.trace"
    result = run_demo(
        DemoOptions(
            shell="asyncio",
            ssm_endpoint=moto_server.url,
            workdir=str(tmp_path / "w"),
            trace=str(trace),
            secret_prefix="CANARY-",
        )
    )
    out = capsys.readouterr().out
    assert "synthetic session keys" in out
    assert result.exit_code == 0, result.outcomes
    sessions = [s.reveal() for s in result.minted if "CANARY" not in s.reveal()]
    assert len(sessions) >= 4  # two sessions at least: a secret key and a token each
    for text in (out, trace.read_text(), Path(f"{trace}.recovered").read_text(), result.logs):
        assert not any(v in text for v in sessions)


def test_shell_consumers_config_path_of_16_segments_is_installed_as_documented(
    tmp_path: Path,
) -> None:
    """docs/consumers.md: engine file paths are relative, at most 16 plain
    segments. Before the fix a 16-segment path passed the material check and
    was then refused as ``config/<path>`` (17 segments); 17 stay refused."""
    root = TaskRoot(tmp_path / "base")
    c = EngineConsumer(root)
    rel16 = "/".join(f"p{i}" for i in range(16))
    c.install(RUN, [Material(identity=CLAUDE, auth_kind="config-dir", files={rel16: Secret("v")})])
    assert (root.identity_dir(TASK, CLAUDE) / "config" / rel16).read_text() == "v"
    rel17 = rel16 + "/p16"
    with pytest.raises(ConsumerError):
        c.install(
            RUN, [Material(identity=CLAUDE, auth_kind="config-dir", files={rel17: Secret("v")})]
        )
