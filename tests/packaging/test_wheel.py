"""The built wheel: the core runs with nothing but the standard library, and
``python -m leasegate`` works from a wheel install (pyproject, README "Extras")."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A core scenario run in the fresh venv: env replica frames through handle(),
#: with no third-party module importable (the venv has only the wheel).
SCENARIO = r"""
import json
import sys
from leasegate.core import Secret
from leasegate.core._base import Command
from leasegate.core.replica import EnvFrameReceived, ReplicaManager

m = ReplicaManager(boot_id="boot1")
begin = {"kind": "env.replica.v1.begin", "opId": "op-b", "taskId": "t1", "runEpoch": 1,
         "runnerBootId": "boot1", "streamId": "S1", "attemptId": "A1", "projectIds": ["p1"]}
steps = [m.handle(EnvFrameReceived(now_ms=0, frame=f))
         for f in (json.dumps(begin), '{"kind": 7}', "not json")]
assert all(isinstance(c, Command) for cmds in steps for c in cmds), steps
assert steps[0], "a begin for an unknown task is answered"
assert "CANARY" not in repr(Secret("CANARY-1"))
third = sorted(n for n in ("anyio", "botocore", "cattrs", "msgspec", "websockets", "trio",
                           "rich", "moto") if n in sys.modules)
assert third == [], third
print("core ok", [type(c).__name__ for c in steps[0]])
"""


def _run(*cmd: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_wheel_installed_without_dependencies_runs_the_core_and_the_command(
    tmp_path: Path,
) -> None:
    pytest.importorskip("hatchling", reason="the test extra brings hatchling")
    dist = tmp_path / "dist"
    dist.mkdir()
    # The PEP 517 hook, offline and without build isolation.
    _run(
        sys.executable,
        "-c",
        f"import hatchling.build as b; print(b.build_wheel({str(dist)!r}))",
        cwd=ROOT,
    )
    (wheel,) = dist.glob("leasegate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "leasegate/__main__.py" in names
    assert "leasegate/core/__init__.py" in names
    assert "leasegate/shells/py.typed" in names
    assert not any(n.startswith(("tests/", "core/", "shells/")) for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    requires = sorted(
        line.split(":", 1)[1].strip().split(">")[0].split(";")[0].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    )
    assert requires == ["anyio", "botocore", "cattrs", "msgspec", "websockets"]
    assert "Classifier: Typing :: Typed" in metadata

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        wheel,
    )
    core = _run(python, "-I", "-c", SCENARIO, cwd=tmp_path)
    assert core.stdout.startswith("core ok")
    version = _run(python, "-I", "-m", "leasegate", "--version", cwd=tmp_path)
    assert version.stdout.startswith("leasegate ")
    # Without the demo extra the command names it instead of a bare ModuleNotFoundError.
    demo = subprocess.run(
        [str(python), "-I", "-m", "leasegate", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert demo.returncode == 2
    assert "pip install 'leasegate[demo]'" in demo.stderr
    assert "Traceback" not in demo.stderr
