"""``tools/compare_monitor.py``: the differential comparison of the monitor's verdicts.

Run against ``HEAD`` on a small subset (one corpus file of each monitored
harness, two random walks and their mutants, no traces), the verdicts must be
identical and some must be violations (the mutants break the streams). The
difference report and the mutations are checked on hand-made streams.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "compare_monitor.py"

pytestmark = pytest.mark.slow


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_verdicts_at_head_and_in_the_working_tree_are_identical_on_a_subset() -> None:
    args = [sys.executable, str(TOOL), "--base", "HEAD", "--limit", "1", "--walks", "2"]
    done = subprocess.run(
        [*args, "--no-traces"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("identical at ")
    summary = done.stdout.split(": ", 1)[1]
    assert summary.startswith("4 inputs")
    violations = int(summary.split(" violations")[0].rsplit(" ", 1)[1])
    assert violations > 0


def test_an_unknown_revision_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--base", "no-such-revision-anywhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown revision" in done.stderr


def test_the_first_difference_names_the_input_and_both_sides() -> None:
    tool = _load(TOOL, "compare_monitor")
    same = {"input": "walk:1", "m": 0, "n": 3, "found": ["Violation(property='a')"]}
    base = [same, {"input": "walk:1", "m": 0, "n": 5, "found": ["Violation(property='b')"]}]
    now = [same, {"input": "walk:1", "m": 0, "n": 6, "found": ["Violation(property='b')"]}]
    assert tool.first_difference(base, base) is None
    report = tool.first_difference(base, now)
    assert report is not None
    assert "walk:1 (stream line 2)" in report
    assert '"n": 5' in report
    assert '"n": 6' in report
    shorter = tool.first_difference(base, [same])
    assert shorter is not None
    assert "(stream ended)" in shorter


def test_mutants_are_the_same_for_the_same_seed_and_differ_from_the_stream() -> None:
    stream = _load(ROOT / "tools" / "_monitor_stream.py", "monitor_stream")
    from leasegate.core.registry import CancelTimer, StartTimer, TimerFired

    steps: list[tuple[object, list[object], list[object]]] = [
        (
            TimerFired(now_ms=i, timer_id=i),
            [StartTimer(timer_id=i, delay_ms=5), CancelTimer(timer_id=i)],
            [],
        )
        for i in range(6)
    ]
    first = [stream._mutate(steps, random.Random(f"x#{j}"), []) for j in range(8)]
    again = [stream._mutate(steps, random.Random(f"x#{j}"), []) for j in range(8)]
    assert first == again
    assert any(m != steps for m in first)
    assert steps[0][1] == [StartTimer(timer_id=0, delay_ms=5), CancelTimer(timer_id=0)]
