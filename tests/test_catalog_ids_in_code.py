"""Every catalog entry's id is named in the code that implements it.

Reads the behavior catalogs (``LR-``, ``ER-``, ``RT-``, ``ES-``, ``DL-`` in
``shared/design/behaviors/*.md``, next to the repository in CI) and checks
that each id appears literally (a range such as ``LR-020–LR-065`` does not
count) in a comment or docstring of the Python sources under ``core/`` or
``shells/``, so a reader can find the function behind each entry.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ID = re.compile(r"\b(?:LR|ER|RT|ES|DL)-\d{3}\b")
ENTRY = re.compile(r"^(?:- )?\*\*((?:LR|ER|RT|ES|DL)-\d{3})\*\*", re.M)


def _catalog_dir() -> Path | None:
    for candidate in (
        os.environ.get("LEASEGATE_BEHAVIORS"),
        ROOT.parent / "shared" / "design" / "behaviors",
        Path("/work/shared/design/behaviors"),
    ):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def _catalog_ids(directory: Path) -> list[str]:
    ids: list[str] = []
    for path in sorted(directory.glob("*.md")):
        for entry in ENTRY.findall(path.read_text(encoding="utf-8")):
            if entry not in ids:
                ids.append(entry)
    return ids


def _ids_in_comments_and_docstrings() -> set[str]:
    """Ids named in comments or string literals (docstrings) of core and shells."""
    found: set[str] = set()
    for top in ("core", "shells"):
        for path in (ROOT / top).rglob("*.py"):
            source = path.read_text(encoding="utf-8")
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type in (tokenize.COMMENT, tokenize.STRING):
                    found.update(ID.findall(tok.string))
    return found


def test_every_catalog_id_is_named_in_core_or_shells() -> None:
    directory = _catalog_dir()
    if directory is None:
        pytest.skip("behavior catalogs not found (expected at ../shared/design/behaviors)")
    ids = _catalog_ids(directory)
    assert len(ids) > 500, f"only {len(ids)} catalog entries parsed from {directory}"
    named = _ids_in_comments_and_docstrings()
    missing = [i for i in ids if i not in named]
    assert not missing, f"{len(missing)} catalog ids named nowhere in core/ or shells/: {missing}"
