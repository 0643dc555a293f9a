"""docs/quickstart.md runs as printed: its files, its commands, its output, its types.

Every fenced block of the page carries a marker (``tests/support/docblocks.py``):
the files are written byte for byte into a scratch directory, the commands are
run there in order with this interpreter first on ``PATH`` (each must exit 0),
and the output the page shows is what the two runners print, ids aside. The
runners and the test file also pass ``mypy --strict`` with no cast and no
``type: ignore``. The install block must be README's first set-up command's
install part.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import Block, read_blocks, run_blocks, write_files

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _blocks() -> list[Block]:
    return read_blocks(PAGE)


def _write_files(where: Path) -> list[Path]:
    return write_files(_blocks(), where)


def test_every_block_of_the_quickstart_has_a_role() -> None:
    blocks = _blocks()
    roles = [b.role for b in blocks]
    assert roles.count("file") >= 4  # the local cloud, two runners, the test file
    assert roles.count("run") >= 2
    for b in blocks:
        if b.role == "show":
            assert b.lang == "text", f"line {b.line}: only output may go unchecked"
        if b.role == "file":
            assert b.lang == "python", f"line {b.line}"


def test_the_install_block_is_readmes_first_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = [b for b in _blocks() if b.role == "install"]
    assert len(install) == 1
    assert install[0].text.strip() + " && leasegate demo" in readme


def test_the_quickstart_runs_as_printed_and_prints_what_it_shows(tmp_path: Path) -> None:
    _write_files(tmp_path)
    outputs = run_blocks(_blocks(), tmp_path)
    (shown,) = [b for b in _blocks() if b.role == "show"]
    # The shown lines, with the lease id (different every run) as a pattern.
    expected = [
        re.escape(line).replace(r"lease\-3\-294341be0bfe", r"lease-[0-9]+-[0-9a-f]+")
        for line in shown.text.splitlines()
    ]
    runners = [o for o in outputs if "gate open:" in o]
    assert len(runners) == 2, outputs
    for out in runners:
        got = out.splitlines()
        assert len(got) == len(expected), out
        for pattern, line in zip(expected, got, strict=True):
            assert re.fullmatch(pattern, line), (pattern, line)
    for out in outputs:
        assert "sk-example" not in out
        assert "postgres://db.example" not in out


def test_the_quickstart_code_passes_mypy_strict_with_no_cast_or_ignore(tmp_path: Path) -> None:
    files = _write_files(tmp_path)
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert "cast(" not in text, f.name
        assert "type: ignore" not in text, f.name
        modules = re.findall(r"^\s*(?:from|import)\s+(leasegate[\w.]*)", text, flags=re.M)
        assert set(modules) <= {"leasegate.core", "leasegate.shells", "leasegate.testing"}, f.name
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed (tox's tests environment installs it)")
    out = subprocess.run(
        [mypy, "--strict", *map(str, files), "core/leasegate", "shells/leasegate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
