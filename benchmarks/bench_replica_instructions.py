"""Instruction counts of the env replica's apply handling (not a test).

A load-independent companion of ``bench_replica.py``: the machine's load
moves timings by ±20 %, not the number of instructions executed. Under
``valgrind --tool=callgrind`` (if installed), this script runs the same
prepared live applies as ``bench_replica.py``'s ``apply`` case (frame bytes
and read completions made first, then a loop of ``handle`` calls), a loop of
bare ``json.loads`` over the same frame bytes, and the setup alone; each at
two stream lengths. The difference between the lengths, divided by the
difference in applies, less the same difference for the setup alone, is
the instructions per apply (or per ``json.loads``), without the setup and
the interpreter's start. Reports both and their ratio.

Without valgrind the document says ``"skipped"``.

Usage::

    python3 benchmarks/bench_replica_instructions.py [--small 500] [--large 1500] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_replica import TASK, ApplyStream, write_report  # noqa: E402 - after the path is set


def workload(mode: str, n: int) -> None:
    """Prepare ``n`` applies, then run ``mode``: ``apply``, ``loads`` or ``setup``."""
    stream = ApplyStream()
    prepared = stream.prepare(0, n)
    frames = [f for f, _, _, _ in prepared]
    events = [(ev, done) for _, ev, _, done in prepared]
    m = stream.m
    if mode == "apply":
        handle = m.handle
        for ev, done in events:
            handle(ev)
            handle(done)
        view = m.read_view(TASK, 1, ["p1"])
        assert view is not None
        assert view.applied_through.sequence == n
    elif mode == "loads":
        for f in frames:
            json.loads(f)


def count(mode: str, n: int) -> int:
    """Instructions executed by ``workload(mode, n)`` in a fresh interpreter."""
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(pathlib.Path(__file__).resolve()),
            "--workload",
            mode,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    got = re.search(r"Collected : (\d+)", proc.stderr)
    if got is None:
        raise RuntimeError("callgrind printed no instruction count")
    return int(got.group(1))


def main() -> None:
    """Parse arguments, count, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--large", type=int, default=1500)
    ap.add_argument("--workload", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(".benchmarks/bench_replica_instructions.json"),
    )
    args = ap.parse_args()
    if args.workload:
        workload(args.workload[0], int(args.workload[1]))
        return
    result: dict[str, Any] = {
        "benchmark": "bench_replica_instructions",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if shutil.which("valgrind") is None:
        result["skipped"] = "valgrind not found"
    else:
        span = args.large - args.small
        grown = {
            mode: count(mode, args.large) - count(mode, args.small)
            for mode in ("setup", "apply", "loads")
        }
        per = {mode: (grown[mode] - grown["setup"]) / span for mode in ("apply", "loads")}
        result.update(
            {
                "applies": [args.small, args.large],
                "instructions_per_apply": round(per["apply"]),
                "instructions_per_json_loads": round(per["loads"]),
                "ratio_to_json_loads": per["apply"] / per["loads"],
                "goal_ratio": 3.0,
            }
        )
        print(
            f"apply: {per['apply']:.0f} instructions, json.loads: {per['loads']:.0f}, "
            f"ratio {per['apply'] / per['loads']:.2f}",
            file=sys.stderr,
        )
    write_report(result, args.out)


if __name__ == "__main__":
    main()
