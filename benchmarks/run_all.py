"""Run every ``benchmarks/bench_*.py`` and merge their reports.

Each benchmark script is run as ``python3 bench_x.py --out FILE`` and writes
one JSON document to ``FILE`` (a script that ignores ``--out`` may instead
print the document as the last line of its stdout). This runner executes
them one after the other with the current interpreter, then writes:

* ``benchmarks/REPORT.json``: ``{"benchmarks": [<each script's document,
  plus "script">], "failed": [{"script", "returncode"}]}``;
* ``benchmarks/REPORT.md``: first a table of the speed goals (each goal's
  figure, its baseline beside it, the goal and whether it is met, read from
  the documents; a goal whose document is missing says so), then one table
  per benchmark: one row per case when the document has a ``"cases"`` list,
  else one row per (flattened) key. Each benchmark's heading gives the UTC
  time its script started and the id of the ``run_all.py`` invocation that
  ran it, so figures merged from a limited run are told apart.

Usage: ``python3 benchmarks/run_all.py [NAME_SUBSTRING ...]`` (only the
scripts whose file name contains one of the substrings). A run limited this
way updates only those scripts' sections: the other documents are kept from
the existing ``REPORT.json`` (in file-name order) and ``REPORT.md`` is
rendered from the merged documents. Exit status 1 if a script failed or
printed no JSON.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_one(script: Path, run_id: str) -> dict[str, Any] | None:
    """Run one benchmark script; its JSON document, or ``None`` on failure.

    The document gets ``script``, ``started_utc`` (when the script started)
    and ``run_id`` (the invocation of this runner, ``run_id``) added.
    """
    print(f"== {script.name}", file=sys.stderr, flush=True)
    started = _utc_now()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        proc = subprocess.run(
            [sys.executable, str(script), "--out", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout)
            return None
        candidates = [out.read_text(encoding="utf-8")] if out.exists() else []
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    candidates += lines[-1:]
    for text in candidates:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(doc, dict):
            doc = {"results": doc}
        doc["script"] = script.name
        doc["started_utc"] = started
        doc["run_id"] = run_id
        return doc
    return None


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for k, v in value.items():
            rows += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    text = value if isinstance(value, str) else json.dumps(value)
    return [(prefix, text if len(text) <= 120 else text[:117] + "...")]


def _case(doc: dict[str, Any], name: str) -> dict[str, Any]:
    for c in doc.get("cases", []):
        if isinstance(c, dict) and c.get("name") == name:
            return c
    raise KeyError(name)


def _dig(doc: dict[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        value = value[key]
    return value


#: One goal: (what, script, read) where ``read(doc)`` gives
#: ``(figure, baseline, goal, met)`` as text, text, text, bool.
Goal = tuple[str, str, Callable[[dict[str, Any]], tuple[str, str, str, bool]]]


def _run_to_open(case: str) -> Callable[[dict[str, Any]], tuple[str, str, str, bool]]:
    def read(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
        row = _case(doc, case)
        us = float(row["core_us_per_run_to_open"])
        loads, ratio = row["json_loads_grant_us"], row["ratio_to_json_loads"]
        base = f"json.loads of the grant {loads} µs ({ratio}×)"
        return f"{us} µs", base, "≤ 150 µs", us <= 150

    return read


def _open_runs(mark: int) -> Callable[[dict[str, Any]], tuple[str, str, str, bool]]:
    def read(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
        row, first = _case(doc, f"open runs {mark}"), _case(doc, "open runs 1")
        ratio = float(row["ratio_to_first"])
        figure = f"{row['core_us_per_run_to_open']} µs ({ratio}×)"
        return figure, f"first runs {first['core_us_per_run_to_open']} µs", "≤ 1.1×", ratio <= 1.1

    return read


def _cold_decode(case: str) -> Callable[[dict[str, Any]], tuple[str, str, str, bool]]:
    def read(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
        row = _case(doc, case)
        ratio = float(row["ratio"])
        figure = f"{row['strict_decode_us']} µs ({ratio}×)"
        return figure, f"json.loads {row['json_loads_us']} µs", "≤ 2×", ratio <= 2.0

    return read


def _replay(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
    ratio = float(doc["replay_speed_vs_core"])
    figure = f"{doc['replay_events_per_second']} events/s ({ratio}×)"
    base = (
        f"bare core {doc['core_events_per_second']} events/s; "
        f"json.loads of the lines {doc['json_loads_events_per_second']} lines/s"
    )
    return figure, base, "≥ 0.7×", ratio >= 0.7


def _store(case: str) -> Callable[[dict[str, Any]], tuple[str, str, str, bool]]:
    def read(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
        row = next(c for c in doc["cases"] if str(c.get("name", "")).startswith(case))
        small = doc["cases"][0]
        ratio = float(row["ratio_to_smallest"])
        figure = f"{row['appends_per_s']} appends/s ({ratio}×)"
        return (
            figure,
            f"{small['name']}: {small['appends_per_s']} appends/s",
            "≥ 0.9×",
            ratio >= 0.9,
        )

    return read


def _traced(backend: str) -> Callable[[dict[str, Any]], tuple[str, str, str, bool]]:
    def read(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
        idle = _dig(doc, f"idle_{backend}")
        n = int(idle["traced_bytes_per_run_core_and_shell_sites"])
        base = f"whole process {idle['traced_bytes_per_run_process']} B per run"
        return f"{n} B", base, "≤ 8192 B", n <= 8192

    return read


def _grant_to_open(doc: dict[str, Any]) -> tuple[str, str, str, bool]:
    lat = _dig(doc, "latency_async")
    ratio = float(lat["ratio_vs_cold"])
    figure = f"{lat['grant_to_open']['median_ms']} ms ({ratio}×)"
    base = f"boto3 direct, client per lease {lat['direct_cold']['median_ms']} ms"
    return figure, base, "≤ 1.2×", ratio <= 1.2


GOALS: tuple[Goal, ...] = (
    ("run-to-open, 14 credentials, first runs", "bench_registry.py", _run_to_open("open runs 1")),
    (
        "run-to-open, 14 credentials, 1,000 fresh runs",
        "bench_registry.py",
        _run_to_open("credentials 14"),
    ),
    ("run-to-open with 1,000 runs open", "bench_registry.py", _open_runs(1000)),
    ("run-to-open with 5,000 runs open", "bench_registry.py", _open_runs(5000)),
    ("replay of a recorded trace vs the bare core", "bench_replay.py", _replay),
    ("store append at 100,000 events vs 1,000", "bench_store_scaling.py", _store("100000 events")),
    (
        "store append at 100,000 events compacted vs 1,000",
        "bench_store_scaling.py",
        _store("100000 events, compacted"),
    ),
    (
        "strict decode, cold caches: grant (14 credentials)",
        "bench_codec.py",
        _cold_decode("lease.grant.v1 (14 credentials, 2 projects), cold caches"),
    ),
    (
        "strict decode, cold caches: env apply",
        "bench_codec.py",
        _cold_decode("env.replica.v1.apply (live, one key), cold caches"),
    ),
    ("traced bytes per idle run, asyncio", "bench_shell.py", _traced("async")),
    ("traced bytes per idle run, trio", "bench_shell.py", _traced("trio")),
    ("traced bytes per idle run, threads", "bench_shell.py", _traced("thread")),
    ("async grant-to-open vs boto3 direct", "bench_shell.py", _grant_to_open),
)


def goal_rows(docs: list[dict[str, Any]]) -> list[str]:
    """The speed goals' table (Markdown lines), read from ``docs``."""
    by_script = {d.get("script"): d for d in docs}
    out = [
        "| goal | figure | baseline | goal | met | measured |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for what, script, read in GOALS:
        doc = by_script.get(script)
        if doc is None:
            out.append(f"| {what} | not measured (`{script}` missing) | | | no | |")
            continue
        try:
            figure, base, goal, met = read(doc)
        except (KeyError, TypeError, ValueError, StopIteration):
            out.append(f"| {what} | not in `{script}`'s document | | | no | |")
            continue
        when = doc.get("started_utc", "before run ids were kept")
        out.append(f"| {what} | {figure} | {base} | {goal} | {'yes' if met else 'no'} | {when} |")
    return out


def markdown(docs: list[dict[str, Any]], failed: list[dict[str, Any]]) -> str:
    """Render the merged report: the goals' table, then one table per benchmark."""
    runs = sorted({str(d.get("run_id", "unknown")) for d in docs})
    origin = (
        f"one run (`{runs[0]}`)"
        if len(runs) == 1
        else f"{len(runs)} runs merged ({', '.join(f'`{r}`' for r in runs)}): see each heading"
    )
    out = ["# Benchmark report", "", f"Generated by `benchmarks/run_all.py`, {origin}.", ""]
    out += ["## Speed goals", "", *goal_rows(docs), ""]
    for doc in docs:
        label = doc.get("benchmark", doc["script"])
        when = doc.get("started_utc")
        stamp = f", started {when}, run `{doc.get('run_id')}`" if when else ""
        out += [f"## {label} (`{doc['script']}`{stamp})", ""]
        cases = doc.get("cases")
        if isinstance(cases, list) and cases and all(isinstance(c, dict) for c in cases):
            label_key = "name" if any("name" in c for c in cases) else "case"
            columns = sorted({k for c in cases for k in c if k != label_key})
            out.append("| case | " + " | ".join(columns) + " |")
            out.append("| --- |" + " --- |" * len(columns))
            for c in cases:
                cells = " | ".join(str(c.get(k, "")) for k in columns)
                out.append(f"| {c.get(label_key, '')} | {cells} |")
        else:
            out += ["| key | value |", "| --- | --- |"]
            skip = {"script", "started_utc", "run_id"}
            out += [f"| {k} | {v} |" for k, v in _flatten(doc) if k not in skip]
        out.append("")
    if failed:
        out += ["## Failed", ""]
        out += [f"* `{f['script']}`" for f in failed]
        out.append("")
    return "\n".join(out)


def merged(
    docs: list[dict[str, Any]], failed: list[dict[str, Any]], ran: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """This run's documents and failures (scripts ``ran``) merged into the
    existing ``REPORT.json``: its entries for other scripts are kept, all in
    script-name order."""
    try:
        old = json.loads((HERE / "REPORT.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return docs, failed
    kept = [d for d in old.get("benchmarks", []) if d.get("script") not in ran]
    kept_failed = [f for f in old.get("failed", []) if f.get("script") not in ran]
    return (
        sorted(kept + docs, key=lambda d: str(d.get("script"))),
        sorted(kept_failed + failed, key=lambda f: str(f.get("script"))),
    )


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(a in s.name for a in argv)]
    docs: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    run_id = _utc_now()
    for script in scripts:
        doc = run_one(script, run_id)
        if doc is None:
            failed.append({"script": script.name})
        else:
            docs.append(doc)
    if argv:
        docs, failed = merged(docs, failed, {s.name for s in scripts})
    (HERE / "REPORT.json").write_text(
        json.dumps({"benchmarks": docs, "failed": failed}, indent=2) + "\n", encoding="utf-8"
    )
    (HERE / "REPORT.md").write_text(markdown(docs, failed), encoding="utf-8")
    print(f"wrote {HERE / 'REPORT.md'} and REPORT.json", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
