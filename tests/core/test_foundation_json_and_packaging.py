"""Breaker tests for the foundation (issue #2) outside the wire codec.

A test marked ``xfail(strict=True)`` documents an open defect (its ``reason``
says what is wrong) and fails as soon as the defect is fixed, so whoever fixes
it removes the mark.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from leasegate.core import JsonError, loads
from leasegate.core.ledger import (
    OrchestrationEventStoreError,
    parse_baseline,
    parse_cursor,
    parse_event_file,
    parse_marker,
)

#: A JSON number Python's int parser refuses (more than 4300 digits);
#: JSON.parse reads it as Infinity.
HUGE_NUMBER = b"1" * 5000

ROOT = Path(__file__).resolve().parents[2]


def test_loads_refuses_bad_text_with_json_error_only() -> None:
    # The cases loads already turns into JsonError (the contract the rest relies on).
    for text in (b"\xff", "[" * 100_000, "NaN", "{", "\ufeff{}", "1 2"):
        with pytest.raises(JsonError):
            loads(text)


def test_ledger_file_with_a_5000_digit_number_never_raises() -> None:
    assert isinstance(parse_event_file("00000001.json", HUGE_NUMBER), OrchestrationEventStoreError)
    assert parse_cursor(HUGE_NUMBER) is None
    assert isinstance(parse_marker(HUGE_NUMBER, "key"), OrchestrationEventStoreError)
    assert isinstance(parse_baseline(HUGE_NUMBER), OrchestrationEventStoreError)


def _setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Set up on a new machine", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second() -> None:
    # Issue #2: the main job, then the full test run; .ci/run runs exactly the second.
    commands = _setup_commands()
    assert commands == [
        "python3 -m pip install -e '.[demo]' && leasegate demo",
        'python3 -m pip install "tox>=4.11" && python3 -m tox',
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '"tox>=4.11"' in ci
    assert ci.rstrip().splitlines()[-1] == "python3 -m tox"


def test_wheel_ships_both_halves_of_the_namespace_package() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = meta["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert sorted(packages) == ["core/leasegate", "shells/leasegate"]
    # PEP 420: neither source root may own leasegate/__init__.py, or one half hides the other.
    assert not (ROOT / "core" / "leasegate" / "__init__.py").exists()
    assert not (ROOT / "shells" / "leasegate" / "__init__.py").exists()


def test_both_halves_carry_pep_561_markers_and_a_license() -> None:
    # hatchling ships every file under the two package roots, so the markers reach the wheel.
    assert (ROOT / "core" / "leasegate" / "core" / "py.typed").is_file()
    assert (ROOT / "shells" / "leasegate" / "shells" / "py.typed").is_file()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["license"] == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    extras = meta["project"]["optional-dependencies"]
    assert not any(d.startswith("moto") for d in meta["project"]["dependencies"])
    assert any(d.startswith("moto") for d in extras["demo"])
    assert any(d.startswith("moto") for d in extras["test"])
