"""Differential command comparison: the core's commands at a git revision and now.

Usage::

    python tools/compare_commands.py --base <git-rev> [--limit N] [--no-demo]
        [--demo-trace FILE] [--harness NAME ...] [--keep DIR] [--corpus DIR]

Feeds the same inputs to the core at ``<git-rev>`` (checked out with ``git
worktree add --detach`` into a temporary directory, run with ``PYTHONPATH``
pointing there) and to the working tree, records every top-level ``handle``
of the core's machines with the commands it returned
(``tools/_command_stream.py``), and reports the first difference. The inputs:

* every file of ``fuzz/corpus/<harness>/`` of the working tree (``--limit N``:
  the first ``N`` of each harness), each fed to that tree's own harness, whose
  driver answers the commands; ``--corpus DIR`` (repeatable) takes the files
  of ``DIR/<harness>/`` instead, laid out like ``fuzz/corpus`` (new inputs:
  random bytes, mutations, a fuzzer's output directory);
* the recorded-trace tests' traces (the runtime's whole-runner scenario, a
  crash and a recovery, and the rich trace of ``tests/shells/trace``),
  recorded once with the working tree, replayed through both;
* a trace of the demo (``leasegate demo --trace``, about 40 s; recorded once
  with the working tree unless ``--demo-trace`` names one; ``--no-demo``
  leaves it out).

Exit status: 0 when both streams are identical, 1 at the first difference
(printed: the input, the step, both sides), 2 on a usage error (an unknown
revision, no git). Nothing printed is a secret: the core's reprs never show
one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STREAM = ROOT / "tools" / "_command_stream.py"

#: Records the recorded-trace tests' traces into ``argv[1]`` (run in the working tree).
_RECORD_TEST_TRACES = """
import pathlib, sys
root = pathlib.Path(sys.argv[1]); out = pathlib.Path(sys.argv[2])
for sub in ("tests/support", "tests/core/runtime", "tests/core/replica", "tests/shells/trace"):
    sys.path.insert(0, str(root / sub))
import pytest
from trace_kit import RecordingDriver
import test_trace_replay as t
RecordingDriver.directory = out
mp = pytest.MonkeyPatch()
try:
    t._scenario(mp)
finally:
    mp.undo()
t._rich(out / "rich.jsonl")
"""


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "core"), str(tree / "shells")])
    env.pop("LEASEGATE_FUZZ_TRACE", None)
    env.setdefault("AWS_CONFIG_FILE", os.devnull)
    env.setdefault("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)  # noqa: S603
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(
            f"{Path(cmd[1]).name if len(cmd) > 1 else cmd[0]} failed: " + " / ".join(tail)
        )


def fuzz_inputs(
    limit: int | None, harnesses: list[str] | None, corpus: Path | None = None
) -> list[str]:
    """``fuzz:<harness>:<file>`` for the files of ``corpus/<harness>/`` (sorted;
    ``corpus``: the working tree's ``fuzz/corpus`` unless given, where every
    harness named must have a directory; in a given ``corpus`` a harness
    without one has no inputs)."""
    given = corpus is not None
    corpus = ROOT / "fuzz" / "corpus" if corpus is None else corpus.resolve()
    names = harnesses or sorted(p.name for p in corpus.iterdir() if p.is_dir())
    items: list[str] = []
    for name in names:
        if given and not (corpus / name).is_dir():
            continue
        files = sorted(
            p for p in (corpus / name).iterdir() if p.is_file() and not p.name.startswith(".")
        )
        items.extend(f"fuzz:{name}:{p}" for p in files[:limit])
    return items


def record_traces(work: Path, demo: bool, demo_trace: str | None) -> list[str]:
    """Record the test traces (and the demo's) with the working tree; ``trace:<file>`` items."""
    env = _env(ROOT)
    out = work / "traces"
    out.mkdir()
    _run([sys.executable, "-c", _RECORD_TEST_TRACES, str(ROOT), str(out)], env, 300)
    traces = sorted(out.glob("*.jsonl"))
    if demo_trace is not None:
        traces += [Path(demo_trace)]
        if Path(demo_trace + ".recovered").is_file():
            traces.append(Path(demo_trace + ".recovered"))
    elif demo:
        path = work / "demo.jsonl"
        _run([sys.executable, "-m", "leasegate", "demo", "--trace", str(path)], env, 600)
        traces += [path, Path(f"{path}.recovered")]
    return [f"trace:{p}" for p in traces if p.is_file()]


def record(tree: Path, inputs: list[str], out: Path) -> list[dict[str, Any]]:
    """The command stream of ``inputs`` through ``tree`` (``tools/_command_stream.py``;
    the inputs are passed in a file, one a line, so that any number fits)."""
    listing = out.with_suffix(".inputs")
    listing.write_text("".join(f"{item}\n" for item in inputs), encoding="utf-8")
    _run([sys.executable, str(STREAM), str(tree), str(out), f"@{listing}"], _env(tree), 7200)
    with out.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def first_difference(base: list[dict[str, Any]], now: list[dict[str, Any]]) -> str | None:
    """A report of the first line where the streams differ, or ``None`` when identical."""
    for i in range(max(len(base), len(now))):
        a = base[i] if i < len(base) else None
        b = now[i] if i < len(now) else None
        if a == b:
            continue
        where = (a or b or {}).get("input", "?")
        step = (a or b or {}).get("n", "the outcome")
        lines = [f"first difference: {where}, step {step} (stream line {i + 1})"]
        for label, rec in (("base", a), ("now ", b)):
            if rec is None:
                lines.append(f"  {label}: (stream ended)")
            elif "outcome" in rec:
                lines.append(f"  {label}: outcome {rec['outcome']}")
            else:
                lines.append(f"  {label}: {rec['machine']}.handle({rec['event']})")
                lines.append(f"        -> {rec['out']}")
        return "\n".join(lines)
    return None


def _summary(stream: list[dict[str, Any]]) -> str:
    inputs = {r["input"] for r in stream}
    steps = sum(1 for r in stream if "n" in r)
    return f"{len(inputs)} inputs, {steps} handle calls"


def resolve_commit(git: str, rev: str) -> str | None:
    """The commit ``rev`` names in this repository, or ``None`` when it names none."""
    done = subprocess.run(  # noqa: S603 - git with a checked revision
        [git, "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


@contextlib.contextmanager
def base_checkout(git: str, commit: str, prefix: str) -> Iterator[tuple[Path, Path]]:
    """``(work, base)``: a temporary directory and ``commit`` checked out as
    ``work/base`` (``git worktree add --detach``); both removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    base_tree = work / "base"
    try:
        subprocess.run(  # noqa: S603 - git, argv list
            [git, "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), commit],
            check=True,
            capture_output=True,
        )
        yield work, base_tree
    finally:
        subprocess.run(  # noqa: S603 - git, argv list
            [git, "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
            capture_output=True,
        )
        shutil.rmtree(work, ignore_errors=True)


def keep_streams(work: Path, keep: str | None) -> None:
    """Copy ``work``'s ``base.jsonl`` and ``now.jsonl`` into directory ``keep`` (if given)."""
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "base.jsonl", Path(keep) / "base.jsonl")
        shutil.copy(work / "now.jsonl", Path(keep) / "now.jsonl")


def main(argv: list[str] | None = None) -> int:
    """Compare the command streams at ``--base`` and in the working tree (exit 0: identical)."""
    ap = argparse.ArgumentParser(prog="compare_commands.py", description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the git revision to compare against")
    ap.add_argument("--limit", type=int, default=None, help="corpus files per harness")
    ap.add_argument("--harness", action="append", default=None, help="only this fuzz harness")
    ap.add_argument("--no-demo", action="store_true", help="leave the demo's trace out")
    ap.add_argument("--no-traces", action="store_true", help="leave every trace out")
    ap.add_argument("--demo-trace", default=None, help="a recorded demo trace to use")
    ap.add_argument("--keep", default=None, help="keep both streams in this directory")
    ap.add_argument(
        "--corpus",
        action="append",
        default=None,
        help="fuzz inputs from DIR/<harness>/ instead of fuzz/corpus (repeatable)",
    )
    args = ap.parse_args(argv)
    git = shutil.which("git")
    if git is None:
        print("compare_commands: git not found", file=sys.stderr)
        return 2
    commit = resolve_commit(git, args.base)
    if commit is None:
        print(f"compare_commands: unknown revision {args.base!r}", file=sys.stderr)
        return 2
    with base_checkout(git, commit, "leasegate-compare-") as (work, base_tree):
        if args.corpus is None:
            inputs = fuzz_inputs(args.limit, args.harness)
        else:
            inputs = []
            for directory in args.corpus:
                inputs += fuzz_inputs(args.limit, args.harness, Path(directory))
        if not args.no_traces:
            inputs += record_traces(work, not args.no_demo, args.demo_trace)
        base = record(base_tree, inputs, work / "base.jsonl")
        now = record(ROOT, inputs, work / "now.jsonl")
        keep_streams(work, args.keep)
        diff = first_difference(base, now)
        if diff is not None:
            print(diff)
            return 1
        print(f"identical at {commit[:12]} and in the working tree: {_summary(now)}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
