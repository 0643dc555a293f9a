"""The project describes itself as it is, not how it was worked on.

Test files are named after the behavior they test, never after a review pass
(``breaker``, ``findings``, a pass label such as ``_b6``); docs, code and tests
name no review pass ("breaker B3"), person ("helper M") or work session
("session 2"). History for users goes to ``CHANGELOG.md``, which is not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAD_TEST_NAME = re.compile(r"breaker|findings|_b[0-9]+(?:_|\.py$)", re.I)
BAD_TEXT = re.compile(r"\bbreaker B[0-9]+\b|\bhelper [A-Z]\b|\bsession [0-9]+\b", re.I)
CHECKED = ("core", "shells", "tests", "docs", "fuzz", "benchmarks")
SUFFIXES = {".py", ".md", ".toml", ".ini", ".yml", ".yaml", ".txt"}


def test_no_test_file_is_named_after_a_review_pass() -> None:
    bad = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if BAD_TEST_NAME.search(p.name)
    ]
    assert not bad, f"test files named after a review pass: {bad}"


def test_no_doc_or_code_names_a_review_pass_person_or_session() -> None:
    bad: list[str] = []
    for top in CHECKED:
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in SUFFIXES or not path.is_file() or path == Path(__file__):
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if BAD_TEXT.search(line):
                    bad.append(f"{path.relative_to(ROOT)}:{n}")
    assert not bad, f"history labels in docs or code: {bad}"
