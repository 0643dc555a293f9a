"""A user-style runner written against the public surface type-checks under ``mypy --strict``.

``example_runner.py`` (trio and threads) uses only ``leasegate.core``,
``leasegate.shells`` and ``leasegate.testing`` top-level names: no private
module, no ``cast``, no ``type: ignore``. mypy runs with the project's
configuration (strict) over the example and the library itself, so the
library in this tree is the one checked.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).with_name("example_runner.py")


def test_the_example_uses_no_cast_no_ignore_and_no_private_module() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "cast(" not in text
    assert "type: ignore" not in text
    assert "Any" not in re.findall(r"\b\w+\b", text)
    modules = re.findall(r"^\s*(?:from|import)\s+(leasegate[\w.]*)", text, flags=re.MULTILINE)
    assert modules, "the example imports leasegate"
    assert set(modules) <= {"leasegate.core", "leasegate.shells", "leasegate.testing"}


@pytest.mark.slow
def test_the_example_runner_passes_mypy_strict() -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed")
    out = subprocess.run(
        [mypy, "--strict", str(EXAMPLE), "core/leasegate", "shells/leasegate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout
