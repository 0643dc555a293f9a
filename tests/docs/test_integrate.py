"""docs/integrate.md: its minimal shell runs as printed, its command table is complete,
its data-flow picture is what the generator makes now.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import read_blocks

from leasegate.core import registry, runtime
from leasegate.core._base import Command

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrate.md"
GENERATOR = ROOT / "docs" / "images" / "make_dataflow.py"


def _table_commands() -> set[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Every command", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z]+)`", first_cell))
    return names


def test_every_exported_command_of_the_runtime_and_the_registry_is_in_the_table() -> None:
    exported = {
        name
        for mod in (runtime, registry)
        for name in mod.__all__
        if isinstance(getattr(mod, name), type) and issubclass(getattr(mod, name), Command)
    }
    assert exported  # the modules export commands at all
    assert sorted(exported - _table_commands()) == []


def test_the_dataflow_picture_is_what_its_generator_makes_now() -> None:
    spec = importlib.util.spec_from_file_location("make_dataflow", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = (ROOT / "docs" / "images" / "dataflow.svg").read_text(encoding="utf-8")
    assert committed == mod.svg()
    assert "images/dataflow.svg" in PAGE.read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_minimal_shell_runs_as_printed_and_prints_what_it_shows(tmp_path: Path) -> None:
    blocks = read_blocks(PAGE)
    files = [b for b in blocks if b.role == "file"]
    assert [b.name for b in files] == ["minimal_shell.py"]
    for b in files:
        assert b.name is not None
        (tmp_path / b.name).write_text(b.text, encoding="utf-8")
    lines = len(files[0].text.splitlines())
    assert 60 <= lines <= 110, lines
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "core"), str(ROOT / "shells")])
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    printed: list[str] = []
    for b in blocks:
        if b.role != "run":
            continue
        for cmd in filter(str.strip, b.text.splitlines()):
            done = subprocess.run(
                cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            printed.append(done.stdout)
    (shown,) = [b.text for b in blocks if b.role == "show"]
    assert "".join(printed) == shown
    assert "CANARY" not in "".join(printed)
