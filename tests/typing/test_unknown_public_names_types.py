"""A name the public packages do not export fails ``mypy --strict`` instead of typing as ``Any``.

``leasegate.shells`` loads its names lazily through a module ``__getattr__``;
type checkers must not see it, or every misspelled or missing name imported
from the package would type-check silently as ``Any``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_importing_a_name_the_shells_do_not_export_fails_mypy_strict(tmp_path: Path) -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed")
    user = tmp_path / "user_runner.py"
    user.write_text(
        "from leasegate.shells import LaunchTimeout, NoSuchShellName\n"
        "print(LaunchTimeout, NoSuchShellName)\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [mypy, "--strict", "--no-incremental", str(user)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'has no attribute "NoSuchShellName"' in out.stdout
    assert "LaunchTimeout" not in out.stdout.replace("NoSuchShellName", "")
