"""The monitor is one checker per property over one ordered stream.

* every property of ``PROPERTIES`` has exactly one checker, and the monitor
  runs exactly ``CHECKERS``;
* each checker's docstring names its property and the catalog ids it checks,
  and ``docs/monitor.md``'s checkers table gives the same checker and ids;
* a property is flagged from one place only: its name appears as a string
  value in its checker's module and nowhere else in the monitor (besides
  ``PROPERTIES``), and a checker can report no other property;
* when one item breaks several properties they are reported in checker order.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import leasegate.core.monitor as monitor_pkg
from leasegate.core.monitor import PROPERTIES, InvariantMonitor, PortCall, ViewStamp
from leasegate.core.monitor._checks import CHECKERS
from leasegate.core.registry import Assignment, TaskView
from leasegate.core.runtime import Answer, BeginStart, CloseAssignment, WorkDone

ROOT = Path(__file__).resolve().parents[3]
MONITOR_DIR = Path(monitor_pkg.__file__).resolve().parent
ID = re.compile(r"\b(?:LR|ER|RT)-\d{3}\b")


def _docs_table() -> dict[str, tuple[str, set[str]]]:
    """``docs/monitor.md``'s checkers table: property → (checker, ids)."""
    text = (ROOT / "docs" / "monitor.md").read_text(encoding="utf-8")
    section = text.split("## The checkers", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and not cells[0].startswith("`-"):
            rows[cells[0].strip("`")] = (cells[1].strip("`").split("`")[0], set(ID.findall(line)))
    return rows


def test_every_property_has_exactly_one_checker_and_the_monitor_runs_them_all() -> None:
    assert sorted(c.PROPERTY for c in CHECKERS) == sorted(PROPERTIES)
    assert [type(c) for c in InvariantMonitor().checkers] == list(CHECKERS)


@pytest.mark.parametrize("checker", CHECKERS, ids=[c.PROPERTY for c in CHECKERS])
def test_each_checker_names_its_property_and_catalog_ids_as_the_docs_table_does(
    checker: type,
) -> None:
    doc = inspect.getdoc(checker) or ""
    assert f"``{checker.PROPERTY}``" in doc.split("\n", 1)[0]
    ids = set(ID.findall(doc))
    assert ids, f"{checker.__name__} names no catalog id"
    table = _docs_table()
    assert checker.PROPERTY in table, "docs/monitor.md's checkers table misses it"
    name, doc_ids = table[checker.PROPERTY]
    assert name == checker.__name__
    assert doc_ids == ids, (sorted(doc_ids), sorted(ids))


def _string_values(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is str}


def test_a_property_is_flagged_from_its_checker_module_only() -> None:
    where: dict[str, list[str]] = {p: [] for p in PROPERTIES}
    for path in sorted(MONITOR_DIR.rglob("*.py")):
        if path.name == "_monitor.py":
            continue  # PROPERTIES itself
        for value in _string_values(path) & set(PROPERTIES):
            where[value].append(path.relative_to(MONITOR_DIR).as_posix())
    own = {c.PROPERTY: inspect.getfile(c) for c in CHECKERS}
    for prop, files in where.items():
        assert files == [Path(own[prop]).relative_to(MONITOR_DIR).as_posix()], (prop, files)


def test_a_checker_reports_its_own_property_only() -> None:
    mon = InvariantMonitor()
    for c in mon.checkers:
        mon._found = []
        c.flag(3, "task-1", 1, "a fixed text")
        assert [(v.property, v.step) for v in mon._found] == [(c.PROPERTY, 3)]


def test_one_open_breaking_three_properties_reports_them_in_checker_order() -> None:
    t0 = 1_800_000_000_000
    other = TaskView(
        assignment=Assignment("task-1", 2),
        lease_id="L1",
        manifest_revision=4,
        manifest_digest="d" * 64,
        expires_at=t0 - 1,
        project_ids=("proj-0",),
        engines=(),
        mcp=(),
        github=None,
        ssh=None,
    )
    mon = InvariantMonitor()
    mon.observe(
        BeginStart(now_ms=t0, call_id=1, task_id="task-1", run_epoch=1),
        [Answer(call_id=1, value=7)],
    )
    mon.observe(
        CloseAssignment(now_ms=t0, call_id=2, task_id="task-1", run_epoch=1, reason="stop"), []
    )
    found = mon.observe(
        WorkDone(now_ms=t0, cmd_id=99),
        [],
        [PortCall("engines", "open", "task-1", 1, False, ViewStamp.of(other))],
    )
    assert [v.property for v in found] == [
        "open-after-close",
        "foreign-env-snapshot",
        "view-below-floor-or-expired",
    ]
    assert all(v.step == 2 and (v.task_id, v.run_epoch) == ("task-1", 1) for v in found)
    assert mon.internal_errors == 0
