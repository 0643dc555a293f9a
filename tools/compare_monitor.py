"""Differential monitor comparison: the invariant monitor's verdicts at a git revision and now.

Usage::

    python tools/compare_monitor.py --base <git-rev> [--limit N] [--walks N]
        [--no-traces] [--demo] [--keep DIR]

Checks a change of ``leasegate.core.monitor`` out of ``<git-rev>`` (``git
worktree add --detach`` into a temporary directory) and runs the same inputs
through the monitor there and in the working tree
(``tools/_monitor_stream.py``), then reports the first difference in the
violations (property, step, run, message, in order), the steps observed or
the internal errors. The inputs:

* every file of ``fuzz/corpus/registry_harness`` and
  ``fuzz/corpus/runtime_harness`` (the harnesses that observe every step;
  ``--limit N``: the first ``N`` of each);
* the recorded-trace tests' traces, recorded once with the working tree as
  ``tools/compare_commands.py`` records them, replayed with the monitor
  (``--no-traces`` leaves them out; ``--demo`` adds a trace of the demo,
  ``leasegate demo --trace``, and of its recovery);
* the runtime tests' random walks ``0 .. N-1`` (``--walks N``, default 60),
  ``Recover`` keeping its owed rows;
* for each of these, mutated copies of the observed stream (steps dropped,
  repeated, swapped; commands dropped or reversed; port calls moved; a secret
  leaked into a log), which make every property fire.

Exit status: 0 when both verdict streams are identical (printed with the processor
time each side spent inside ``observe``), 1 at the first difference, 2 on a usage
error. Nothing printed is a secret: violation messages never hold one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STREAM = ROOT / "tools" / "_monitor_stream.py"
#: The fuzz harnesses that feed every step to the monitor.
HARNESSES = ("registry_harness", "runtime_harness")


def _commands_tool() -> ModuleType:
    """``tools/compare_commands.py`` as a module (its input and trace helpers)."""
    spec = importlib.util.spec_from_file_location(
        "compare_commands", ROOT / "tools" / "compare_commands.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def record(tool: ModuleType, tree: Path, inputs: list[str], out: Path) -> list[dict[str, Any]]:
    """The verdict stream of ``inputs`` through ``tree`` (``tools/_monitor_stream.py``)."""
    tool._run([sys.executable, str(STREAM), str(tree), str(out), *inputs], tool._env(tree), 1800)
    with out.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def first_difference(base: list[dict[str, Any]], now: list[dict[str, Any]]) -> str | None:
    """A report of the first verdict line that differs, or ``None`` when identical."""
    for i in range(max(len(base), len(now))):
        a = base[i] if i < len(base) else None
        b = now[i] if i < len(now) else None
        if a == b:
            continue
        where = (a or b or {}).get("input", "?")
        lines = [f"first difference: {where} (stream line {i + 1})"]
        for label, rec in (("base", a), ("now ", b)):
            lines.append(f"  {label}: " + ("(stream ended)" if rec is None else json.dumps(rec)))
        return "\n".join(lines)
    return None


def _timing(stream: list[dict[str, Any]]) -> float:
    return float(stream[-1].get("observe_s", 0.0)) if stream else 0.0


def _summary(stream: list[dict[str, Any]]) -> str:
    inputs = {r["input"] for r in stream if "input" in r}
    monitors = [r for r in stream if "steps" in r]
    found = sum(r["violations"] for r in monitors)
    steps = sum(r["steps"] for r in monitors)
    return f"{len(inputs)} inputs, {len(monitors)} monitors, {steps} steps, {found} violations"


def main(argv: list[str] | None = None) -> int:
    """Compare the monitor's verdicts at ``--base`` and in the working tree (exit 0: identical)."""
    ap = argparse.ArgumentParser(prog="compare_monitor.py", description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the git revision to compare against")
    ap.add_argument("--limit", type=int, default=None, help="corpus files per harness")
    ap.add_argument("--walks", type=int, default=60, help="random walk seeds 0..N-1")
    ap.add_argument("--no-traces", action="store_true", help="leave the recorded traces out")
    ap.add_argument("--demo", action="store_true", help="add a trace of the demo (about 60 s)")
    ap.add_argument("--keep", default=None, help="keep both streams in this directory")
    args = ap.parse_args(argv)
    git = shutil.which("git")
    if git is None:
        print("compare_monitor: git not found", file=sys.stderr)
        return 2
    tool = _commands_tool()
    commit = tool.resolve_commit(git, args.base)
    if commit is None:
        print(f"compare_monitor: unknown revision {args.base!r}", file=sys.stderr)
        return 2
    with tool.base_checkout(git, commit, "leasegate-compare-monitor-") as (work, base_tree):
        inputs = tool.fuzz_inputs(args.limit, list(HARNESSES))
        if not args.no_traces:
            inputs += tool.record_traces(work, args.demo, None)
        inputs += [f"walk:{seed}" for seed in range(args.walks)]
        base = record(tool, base_tree, inputs, work / "base.jsonl")
        now = record(tool, ROOT, inputs, work / "now.jsonl")
        tool.keep_streams(work, args.keep)
        diff = first_difference(base[:-1], now[:-1])
        if diff is not None:
            print(diff)
            return 1
        print(
            f"identical at {commit[:12]} and in the working tree: {_summary(now)};"
            f" observe took {_timing(base):.2f} s at the base, {_timing(now):.2f} s now"
        )
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
