"""Each machine's phase picture and transition table in the docs are what
tools/make_state_diagrams.py draws from the machine's own table now.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_state_diagrams", ROOT / "tools" / "make_state_diagrams.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_state_diagrams", mod)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()


def test_every_core_machine_with_phases_is_drawn() -> None:
    core = ROOT / "core" / "leasegate" / "core"
    with_phases = {p.parent.name for p in core.glob("*/_phases.py")}
    assert {"registry", "replica", "runtime"} <= with_phases
    assert set(TOOL.MACHINES) == with_phases


@pytest.mark.parametrize("machine", sorted(TOOL.MACHINES))
def test_the_committed_picture_and_table_are_what_the_table_draws(machine: str) -> None:
    svg = (ROOT / "docs" / "images" / f"states-{machine}.svg").read_text(encoding="utf-8")
    assert svg == TOOL.svg(machine)
    page = (ROOT / TOOL.MACHINES[machine]).read_text(encoding="utf-8")
    assert page == TOOL.page_text(machine)


@pytest.mark.parametrize("machine", sorted(TOOL.MACHINES))
def test_the_page_table_has_one_row_per_phase_with_its_moves(machine: str) -> None:
    phases, _initial, table = TOOL.load(machine)
    block = TOOL.table_md(machine)
    rows = dict(re.findall(r"^\| `([a-z_-]+)` \| (.*) \|$", block, flags=re.M))
    assert list(rows) == [p.value for p in phases]
    for p in phases:
        moves = set(re.findall(r"`([a-z_-]+)`", rows[p.value]))
        assert moves == {q.value for q in table[p]}
    # every move is drawn: one path per allowed move
    svg = TOOL.svg(machine)
    assert svg.count("marker-end=") == sum(len(v) for v in table.values())
