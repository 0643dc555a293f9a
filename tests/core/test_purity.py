"""The core is pure: no I/O, clock, randomness or concurrency import (h11-style)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "leasegate" / "core"

FORBIDDEN = {
    "time",
    "random",
    "uuid",
    "os",
    "socket",
    "threading",
    "asyncio",
    "trio",
    "anyio",
    "boto3",
    "botocore",
    "subprocess",
    "secrets",
    "multiprocessing",
    "concurrent",
    "selectors",
    "signal",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "logging",
    "urllib",
    "http",
    "ssl",
    "sqlite3",
    "fcntl",
    "filelock",
    "websockets",
    "cattrs",
    "attrs",
    "attr",
    "rich",
}


def _core_files() -> list[Path]:
    files = sorted(CORE.rglob("*.py"))
    assert files, "no core modules found"
    return files


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            # __import__("x") and importlib.import_module("x") with a literal.
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
            if name in {"__import__", "import_module"} and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.append((node.lineno, arg.value))
    return out


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_no_io_clock_or_concurrency(path: Path) -> None:
    bad = [
        f"{path.name}:{line}: {mod}"
        for line, mod in _imports(path)
        if mod.split(".")[0] in FORBIDDEN
    ]
    assert bad == []


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_reads_no_clock(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for needle in ("datetime.now", "datetime.utcnow", "date.today", "perf_counter", "monotonic("):
        assert needle not in text, f"{path.name} reads the clock via {needle}"


def test_scan_catches_a_forbidden_import(tmp_path: Path) -> None:
    # The scanner itself must be able to fail.
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom time import monotonic\n__import__('socket')\n")
    assert [m for _, m in _imports(bad)] == ["os", "time", "socket"]


def test_importing_core_loads_no_io_library() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import leasegate.core\n"
        "import leasegate.core as c\n"
        "for name in list(__import__('pkgutil').walk_packages(c.__path__, 'leasegate.core.')):\n"
        "    __import__(name.name)\n"
        "bad = sorted(m for m in ('trio', 'anyio', 'asyncio', 'boto3', 'botocore', 'socket',"
        " 'threading', 'cattrs', 'websockets') if m in set(sys.modules) - before)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
