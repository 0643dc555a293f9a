"""Every logger the package creates is documented in docs/logging.md, under a
name in the ``leasegate`` tree without private (underscore) parts."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "shells" / "leasegate"
DOC = (ROOT / "docs" / "logging.md").read_text(encoding="utf-8")

_LITERAL = re.compile(r"""getLogger\(\s*["']([^"']+)["']\s*\)""")
_BY_NAME = re.compile(r"getLogger\(\s*__name__\s*\)")


def _module(path: Path) -> str:
    parts = path.relative_to(SOURCES.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _logger_names() -> set[str]:
    names: set[str] = set()
    for path in SOURCES.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(n for n in _LITERAL.findall(text) if n.startswith("leasegate"))
        if _BY_NAME.search(text):
            names.add(_module(path))
    return names


def test_every_leasegate_logger_is_documented_with_a_public_name() -> None:
    names = _logger_names() - {"leasegate"}  # the package logger (its NullHandler)
    assert {"leasegate.shells.dispatch", "leasegate.testing.cloud"} <= names
    for name in sorted(names):
        assert all(not part.startswith("_") for part in name.split(".")), name
        assert f"`{name}`" in DOC, f"{name} is not listed in docs/logging.md"


def test_the_core_does_not_log() -> None:
    for path in (ROOT / "core" / "leasegate").rglob("*.py"):
        assert "getLogger" not in path.read_text(encoding="utf-8"), path
