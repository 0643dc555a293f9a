"""``benchmarks/run_all.py``: the report's speed-goal table and headings.

The goal table is read from the benchmarks' documents, so a goal is "yes"
only when its figure is at the goal, a document that is missing or lacks the
figure says so rather than passing, and a report merged from more than one
invocation says that it was.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _registry(first_us: float, at_5000_us: float, run_id: str = "r1") -> dict[str, Any]:
    def row(name: str, us: float) -> dict[str, Any]:
        return {
            "name": name,
            "core_us_per_run_to_open": us,
            "json_loads_grant_us": 13.0,
            "ratio_to_json_loads": round(us / 13.0, 1),
            "ratio_to_first": round(us / first_us, 2),
        }

    return {
        "script": "bench_registry.py",
        "run_id": run_id,
        "started_utc": "2026-01-01T00:00:00Z",
        "cases": [
            row("open runs 1", first_us),
            row("open runs 1000", first_us),
            row("open runs 5000", at_5000_us),
            row("credentials 14", first_us),
        ],
    }


def _row(lines: list[str], goal: str) -> list[str]:
    found = [line for line in lines if line.startswith(f"| {goal} |")]
    assert len(found) == 1, (goal, lines)
    return [cell.strip() for cell in found[0].strip("|").split("|")]


def test_a_goal_is_met_only_when_its_figure_is_at_the_goal() -> None:
    lines = _run_all().goal_rows([_registry(140.0, 160.0)])
    first = _row(lines, "run-to-open, 14 credentials, first runs")
    assert first[1] == "140.0 µs"
    assert first[2].startswith("json.loads of the grant 13.0 µs")
    assert first[4] == "yes"
    assert _row(lines, "run-to-open with 1,000 runs open")[4] == "yes"
    flat = _row(lines, "run-to-open with 5,000 runs open")
    assert flat[1] == "160.0 µs (1.14×)"
    assert flat[4] == "no"
    slow = _run_all().goal_rows([_registry(151.0, 151.0)])
    assert _row(slow, "run-to-open, 14 credentials, first runs")[4] == "no"


def test_a_missing_document_or_figure_is_reported_and_not_met() -> None:
    broken = _registry(140.0, 140.0)
    broken["cases"] = broken["cases"][:1]
    lines = _run_all().goal_rows([broken])
    assert _row(lines, "run-to-open with 5,000 runs open")[1:5] == [
        "not in `bench_registry.py`'s document",
        "",
        "",
        "no",
    ]
    assert _row(lines, "replay of a recorded trace vs the bare core")[1] == (
        "not measured (`bench_replay.py` missing)"
    )


def test_a_report_merged_from_two_invocations_says_so_and_dates_each_section() -> None:
    mod = _run_all()
    replay = {
        "script": "bench_replay.py",
        "run_id": "r2",
        "started_utc": "2026-01-02T00:00:00Z",
        "replay_events_per_second": 40,
        "core_events_per_second": 50,
        "json_loads_events_per_second": 100,
        "replay_speed_vs_core": 0.8,
    }
    text = mod.markdown([_registry(140.0, 140.0), replay], [])
    assert "2 runs merged (`r1`, `r2`)" in text
    assert "## bench_replay.py (`bench_replay.py`, started 2026-01-02T00:00:00Z, run `r2`)" in text
    assert _row(text.splitlines(), "replay of a recorded trace vs the bare core")[4] == "yes"
    one = mod.markdown([_registry(140.0, 140.0)], [])
    assert "one run (`r1`)" in one
