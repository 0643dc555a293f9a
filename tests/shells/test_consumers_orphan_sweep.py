"""Orphaned temporary files of the consumers' atomic writes are swept.

A process killed inside ``atomic_write`` leaves its temporary file (0600,
holding the material) next to the target. ``ConsumerSet`` construction (the
boot) sweeps every task directory under the root; every install of an
identity sweeps that identity's directory. A write in flight in this process
is never swept, a symlink below the root is never followed, and no
credential file can be named like a temporary file.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from leasegate.core import Secret
from leasegate.core.registry import Assignment, Identity
from leasegate.shells.consumers import EngineConsumer, Material, TaskRoot, _fs, atomic_write
from leasegate.shells.consumers._fs import is_temp_name, safe_segment
from leasegate.shells.ports import ConsumerSet

RUN = Assignment(task_id="task-1", run_epoch=3)
ORPHAN = ".engine.env~tmp~4242~deadbeef"
CANARY = "CANARY-orphan-secret"


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if is_temp_name(p.name)]


def _env(cid: str) -> Material:
    return Material(
        identity=Identity(credential_class="engine", credential_id=cid, revision="7"),
        auth_kind="env",
        env={"API_KEY": Secret(CANARY)},
    )


def _plant(directory: Path, name: str = ORPHAN) -> Path:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    p = directory / name
    p.write_text(f"export API_KEY='{CANARY}'\n")
    p.chmod(0o600)
    return p


# The writer loads _fs.py by its path: it needs only the standard library,
# and a child that does not import the whole package starts in milliseconds.
_WRITER = textwrap.dedent(
    """
    import importlib.util, sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("consumer_fs", sys.argv[1])
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    target = Path(sys.argv[2])
    fs.ensure_private_dir(target.parent)
    data = b"export API_KEY='CANARY-" + b"x" * (int(sys.argv[3]) - 25) + b"'\\n"
    fs.atomic_write(target, data)
    print("go", flush=True)
    while True:
        fs.atomic_write(target, data)
    """
)


@pytest.mark.slow
def test_consumer_boot_sweep_removes_what_writes_killed_by_sigkill_left(tmp_path: Path) -> None:
    base = tmp_path / "tasks"
    target = base / "task-1" / "engine" / "eng-a" / "7" / "engine.env"
    size = 4 * 1024 * 1024
    rng = random.Random(17)
    left_behind = 0
    for _ in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, _fs.__file__, str(target), str(size)],
            stdout=subprocess.PIPE,
            text=True,
        )
        guard = threading.Timer(10.0, proc.kill)  # a child that never says "go"
        guard.start()
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "go\n"
            threading.Event().wait(rng.uniform(0.0, 0.04))  # a random point of the loop
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(10) == -signal.SIGKILL
        finally:
            guard.cancel()
            proc.kill()
            proc.wait(10)
            assert proc.stdout is not None
            proc.stdout.close()
        orphans = _temp_files(base)
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in orphans)
        left_behind += len(orphans)
        # The target is always a whole file (the old one or the new one).
        assert target.stat().st_size == size
    assert left_behind > 0  # the kills did land inside atomic_write

    ConsumerSet(base)  # the boot sweep

    assert _temp_files(base) == []
    assert target.read_bytes().startswith(b"export API_KEY='CANARY-")
    assert target.stat().st_size == size


def test_consumer_boot_sweep_covers_every_task_directory(tmp_path: Path) -> None:
    base = tmp_path / "tasks"
    planted = [
        _plant(base / "task-1" / "engine" / "eng-a" / "7"),
        _plant(base / "task-2" / "mcp" / "m-1" / "_", ".headers.json~tmp~1~0123abcd"),
        _plant(
            base / "task-2" / "engine" / "e" / "1" / "config" / "deep", ".a.json~tmp~9~ffffffff"
        ),
        _plant(base, ".stray~tmp~1~00000000"),
    ]
    kept = _plant(base / "task-1" / "engine" / "eng-a" / "7", "engine.env")

    assert TaskRoot(base).sweep_orphans() == len(planted)

    assert not any(p.exists() for p in planted)
    assert kept.read_text() == f"export API_KEY='{CANARY}'\n"
    assert TaskRoot(base).sweep_orphans() == 0
    assert TaskRoot(tmp_path / "missing").sweep_orphans() == 0


def test_consumer_install_sweeps_the_installed_identitys_orphans_only(tmp_path: Path) -> None:
    base = tmp_path / "tasks"
    root = TaskRoot(base)
    consumer = EngineConsumer(root)
    mine = _plant(root.identity_dir(RUN.task_id, _env("eng-a").identity))
    files = Material(
        identity=Identity(credential_class="engine", credential_id="eng-b", revision="1"),
        auth_kind="config-dir",
        files={"sub/auth.json": Secret(CANARY)},
    )
    mine_deep = _plant(
        root.identity_dir(RUN.task_id, files.identity) / "config" / "sub",
        ".auth.json~tmp~1~12345678",
    )
    other = _plant(root.identity_dir(RUN.task_id, _env("eng-c").identity))

    consumer.install(RUN, [_env("eng-a"), files])

    assert not mine.exists()
    assert not mine_deep.exists()
    assert other.exists()  # another identity: the boot sweep's
    assert sorted(p.name for p in _temp_files(base)) == [ORPHAN]


def test_consumer_sweep_keeps_a_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "d" / "engine.env"
    target.parent.mkdir(mode=0o700)
    real_fsync = os.fsync
    writer: list[int] = []
    inside = threading.Event()
    resume = threading.Event()

    def fsync(fd: int) -> None:
        if writer and threading.get_ident() == writer[0] and not inside.is_set():
            inside.set()  # the temporary file is written, not yet renamed
            resume.wait(10)
        real_fsync(fd)

    def write() -> None:
        writer.append(threading.get_ident())
        atomic_write(target, CANARY.encode())

    monkeypatch.setattr(os, "fsync", fsync)
    t = threading.Thread(target=write)
    t.start()
    try:
        assert inside.wait(10)
        in_flight = _temp_files(tmp_path)
        assert len(in_flight) == 1
        assert TaskRoot(tmp_path).sweep_orphans() == 0
        assert in_flight[0].exists()
    finally:
        resume.set()
        t.join(10)
    assert not t.is_alive()
    assert target.read_text() == CANARY
    assert _temp_files(tmp_path) == []


def test_consumer_sweep_never_follows_a_symlink_below_the_root(tmp_path: Path) -> None:
    base = tmp_path / "tasks"
    outside = _plant(tmp_path / "outside")
    (base / "task-1" / "engine" / "eng-a").mkdir(parents=True)
    (base / "task-1" / "engine" / "eng-a" / "7").symlink_to(tmp_path / "outside")
    (base / "task-2").symlink_to(tmp_path / "outside")
    root = TaskRoot(base)

    assert root.sweep_orphans() == 0
    assert root.sweep_identity(RUN.task_id, _env("eng-a").identity) == 0
    assert outside.exists()


@pytest.mark.parametrize(
    "name",
    [".engine.env.tmp-1-deadbeef", "engine.env", "h-" + "0" * 64, "_", ".auth.json"],
)
def test_consumer_file_names_are_never_temporary_file_names(tmp_path: Path, name: str) -> None:
    assert not is_temp_name(name)
    assert not is_temp_name(safe_segment(name + "~tmp~1~deadbeef", what="file"))
    # A credential file named like another tool's temporary file is installed and kept.
    root = TaskRoot(tmp_path)
    material = Material(
        identity=Identity(credential_class="engine", credential_id="eng-b", revision="1"),
        auth_kind="config-dir",
        files={name: Secret(CANARY)},
    )
    EngineConsumer(root).install(RUN, [material])
    assert root.sweep_orphans() == 0
    assert (root.identity_dir(RUN.task_id, material.identity) / "config" / name).exists()
