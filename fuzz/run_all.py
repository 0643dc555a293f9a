"""Run every fuzz harness under atheris for a number of seconds each.

Usage::

    python3 fuzz/run_all.py [--seconds N] [--only NAME ...] [--findings DIR]
                            [--timeout S] [--keep-going] [-- extra libFuzzer flags]

For each harness ``fuzz/<name>.py`` (``*_harness.py``) it runs, in a
subprocess::

    python3 fuzz/<name>.py -max_total_time=N -timeout=S -rss_limit_mb=2048 \\
        -artifact_prefix=<findings>/<name>/ <findings>/corpus/<name> <findings>/seeds/<name>

where ``<findings>/seeds/<name>/`` is a fresh copy of the committed corpus
``fuzz/corpus/<name>/`` without the inputs of ``fuzz/known_bugs.json``
(known, unfixed bugs would stop the run at once). libFuzzer starts from
those seeds, writes new interesting
inputs to the working corpus ``<findings>/corpus/<name>/`` (never into the
committed one) and writes a crashing input to ``<findings>/<name>/crash-*``
(``timeout-*``, ``oom-*`` likewise). ``<findings>`` defaults to
``fuzz/findings/`` (gitignored).

It prints one line per harness, ``<name>: ok, <executions> execs,
<rate> exec/s`` or ``<name>: FINDING ...`` with the artifact paths, and
exits 0 when every harness ran its time without a finding, 1 on a finding,
2 when a harness could not run (atheris missing, a harness that does not
start). With ``--keep-going`` a harness that found something is restarted
(from the working corpus) until its seconds are spent, and the line sums
every segment (:func:`keep_going`). See ``docs/fuzzing.md``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness

#: libFuzzer flags per harness, before the command line's own (which win).
#: The store harness's inputs are short but its seeds are tiny: without a
#: fixed length limit libFuzzer would take many minutes to allow sequences
#: of more than a few operations.
DEFAULT_FLAGS: dict[str, list[str]] = {
    "store_harness": ["-max_len=256", "-len_control=0"],
    # The machine harnesses read at most ~80 steps of a few bytes each.
    "registry_harness": ["-max_len=1024"],
    "replica_harness": ["-max_len=1024"],
    "runtime_harness": ["-max_len=1024"],
}

_ARTIFACT_PREFIXES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_STAT = re.compile(r"#(\d+)\s+\w+.*?exec/s: (\d+)")


def parse_stats(log: str) -> tuple[int | None, int | None]:
    """``(executions, exec/s)`` from libFuzzer's log; ``None`` when absent.

    Executions: the ``Done N runs`` line, else the last ``#N`` status line.
    Exec/s: the last status line's ``exec/s``, else N divided by the
    seconds of the ``Done`` line.
    """
    execs: int | None = None
    rate: int | None = None
    for m in _STAT.finditer(log):
        execs, rate = int(m.group(1)), int(m.group(2))
    done = _DONE.search(log)
    if done is not None:
        execs = int(done.group(1))
        secs = int(done.group(2))
        if secs > 0:
            rate = execs // secs
    return execs, rate


def run_harness(
    name: str, seconds: int, findings: Path, timeout_s: int, extra: list[str]
) -> tuple[int, str]:
    """Run one harness; return ``(status, summary line)``.

    Status: 0 no finding, 1 a finding, 2 could not run. The full libFuzzer
    log is written to ``<findings>/<name>.log``.
    """
    artifacts = findings / name
    work = findings / "corpus" / name
    artifacts.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    # The committed corpus minus the known, unfixed bugs (fuzz/known_bugs.json):
    # libFuzzer would stop at such an input before fuzzing anything.
    seeds = findings / "seeds" / name
    shutil.rmtree(seeds, ignore_errors=True)
    seeds.mkdir(parents=True)
    bugs = _harness.known_bugs()
    for path in _harness.corpus_files(name):
        if f"{name}/{path.name}" not in bugs:
            shutil.copyfile(path, seeds / path.name)
    before = {p.name for p in artifacts.iterdir()}
    cmd = [
        sys.executable,
        str(_harness.FUZZ_DIR / f"{name}.py"),
        f"-max_total_time={seconds}",
        f"-timeout={timeout_s}",
        "-rss_limit_mb=2048",
        f"-artifact_prefix={artifacts}/",
        *DEFAULT_FLAGS.get(name, []),
        *extra,
        str(work),
        str(seeds),
    ]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=seconds + 120,
            check=False,
        )
        log = proc.stdout + proc.stderr
        code = proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        err = exc.stderr or b""
        log = (out if isinstance(out, str) else out.decode("utf-8", "replace")) + (
            err if isinstance(err, str) else err.decode("utf-8", "replace")
        )
        code = -1
        log += "\n[run_all] the harness did not stop in time\n"
    (findings / f"{name}.log").write_text(log, encoding="utf-8")
    new = sorted(
        p
        for p in artifacts.iterdir()
        if p.name not in before and p.name.startswith(_ARTIFACT_PREFIXES)
    )
    execs, rate = parse_stats(log)
    stats = (
        f"{execs if execs is not None else '?'} execs, {rate if rate is not None else '?'} exec/s"
    )
    if new:
        paths = ", ".join(str(p) for p in new)
        return 1, f"{name}: FINDING ({stats}): {paths} (log: {findings / f'{name}.log'})"
    if code != 0 or execs is None:
        tail = "\n    ".join(log.strip().splitlines()[-8:])
        return 2, f"{name}: FAILED to run (exit {code}, {stats}):\n    {tail}"
    return 0, f"{name}: ok, {stats}"


def keep_going(
    name: str, seconds: int, findings: Path, timeout_s: int, extra: list[str]
) -> tuple[int, str]:
    """Run one harness for ``seconds`` in all, restarting it after each
    finding (libFuzzer stops at the first crash, and its fork mode does not
    work with atheris), from the working corpus built so far.

    Returns ``(status, summary line)`` like :func:`run_harness`; the line
    sums the executions of every segment and lists every artifact. Each
    segment's log is kept as ``<findings>/<name>.<k>.log``.
    """
    start = time.monotonic()
    total = 0
    found: list[str] = []
    worst = 0
    k = 0
    while True:
        left = int(seconds - (time.monotonic() - start))
        if left < 5:
            break
        status, line = run_harness(name, left, findings, timeout_s, extra)
        log = findings / f"{name}.log"
        execs, _ = parse_stats(log.read_text(encoding="utf-8", errors="replace"))
        log.replace(findings / f"{name}.{k}.log")
        k += 1
        total += execs or 0
        if status == 2:
            return 2, line
        if status == 1:
            worst = 1
            found.append(line.split(": ", 2)[-1].split(" (log:")[0])
    elapsed = max(1, int(time.monotonic() - start))
    stats = f"{total} execs in {elapsed} s, {total // elapsed} exec/s, {k} segment(s)"
    if found:
        return worst, f"{name}: FINDINGS ({stats}): " + "; ".join(found)
    return 0, f"{name}: ok, {stats}"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the chosen harnesses in turn, print a summary.

    Returns:
        The exit status: 0 clean, 1 a finding, 2 a harness could not run.
    """
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, extra = args_in[:cut], args_in[cut + 1 :]
    parser = argparse.ArgumentParser(description="Run the atheris fuzz harnesses.")
    parser.add_argument("--seconds", type=int, default=60, help="per harness (default 60)")
    parser.add_argument(
        "--only", action="append", default=None, metavar="NAME", help="a harness (repeatable)"
    )
    parser.add_argument(
        "--findings",
        type=Path,
        default=_harness.FUZZ_DIR / "findings",
        help="where crashes, logs and working corpora go (default fuzz/findings)",
    )
    parser.add_argument(
        "--timeout", type=int, default=10, help="seconds one input may take (default 10)"
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="restart a harness after a finding until its seconds are spent (campaigns)",
    )
    args = parser.parse_args(args_in)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: pip install 'leasegate[fuzz]'", file=sys.stderr)
        return 2
    names = _harness.harness_names()
    if args.only:
        unknown = [n for n in args.only if n not in names]
        if unknown:
            print(f"unknown harness(es): {', '.join(unknown)}; known: {', '.join(names)}")
            return 2
        names = [n for n in names if n in args.only]
    args.findings.mkdir(parents=True, exist_ok=True)
    worst = 0
    for name in names:
        run = keep_going if args.keep_going else run_harness
        status, line = run(name, args.seconds, args.findings, args.timeout, extra)
        print(line, flush=True)
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
