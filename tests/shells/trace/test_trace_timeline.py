"""``leasegate timeline``: the page model of a trace and its page in a real browser.

* The model (``leasegate.shells.trace.timeline.build_timeline``) from
  hand-written steps: exact phases, gate intervals and marks.
* A demo run with canary secrets, drawn: one row per run, the gate intervals
  where the trace's port calls put them, no secret in the page.
* Headless Chromium (Debian's ``chromium``; skipped with a reason when absent)
  loads the page from disk: the rows and gate bars through the DOM, as
  drawn, and a screenshot saved as an artifact (pytest's tmp dir, and
  ``$LEASEGATE_ARTIFACTS`` when set).
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leasegate.shells.cli import main
from leasegate.shells.trace import StepLine
from leasegate.shells.trace.timeline import build_timeline, load_timeline, render_html
from leasegate.testing.moto import MotoServer

A = {"$t": "registry.Assignment", "task_id": "t1", "run_epoch": 1}


def _step(n: int, at: int, event: dict[str, Any], calls=(), commands=()) -> StepLine:  # type: ignore[no-untyped-def]
    return StepLine(n + 1, n, {"now_ms": at, **event}, list(calls), list(commands))


def _call(port: str, method: str, raised: bool = False) -> dict[str, Any]:
    return {
        "port": port,
        "method": method,
        "task_id": "t1",
        "run_epoch": 1,
        "raised": raised,
        "unavailable": None,
        "result": None,
    }


def _life(close_raises: bool = False) -> list[StepLine]:
    grant = {
        "kind": "lease.grant.v1",
        "lease": {"taskId": "t1", "runEpoch": 1, "manifestRevision": 3, "expiresAt": 99_000},
    }
    return [
        _step(1, 1000, {"$t": "runtime.BeginStart", "task_id": "t1", "run_epoch": 1}),
        _step(
            2,
            1100,
            {"$t": "runtime.HandleFrame", "frame": grant},
            commands=[
                {"$t": "registry.OpenReader", "reader_id": 5, "assignment": A},
                {
                    "$t": "registry.ReadParameters",
                    "cmd_id": 6,
                    "reader_id": 5,
                    "selectors": ["/p:1", "/q:2"],
                },
            ],
        ),
        _step(
            3,
            1200,
            {
                "$t": "registry.ReadCompleted",
                "cmd_id": 6,
                "parameters": [{"name": "/p", "version": 1}],
                "invalid": ["/q:2"],
            },
            commands=[
                {
                    "$t": "runtime.ConsumerWork",
                    "cmd_id": -7,
                    "op": "install",
                    "request": {"assignment": A},
                }
            ],
        ),
        _step(
            4,
            1300,
            {"$t": "runtime.WorkDone", "cmd_id": -7},
            calls=[_call("engines", "open"), _call("mcp", "open")],
        ),
        _step(
            5,
            1500,
            {
                "$t": "runtime.HandleFrame",
                "frame": {"kind": "lease.stale", "taskId": "t1", "runEpoch": 1, "minRevision": 4},
            },
            calls=[_call("engines", "close"), _call("mcp", "close", raised=close_raises)],
        ),
        _step(
            6,
            1600,
            {"$t": "runtime.CloseAssignment", "task_id": "t1", "run_epoch": 1, "reason": "stop"},
            calls=[_call("mcp", "close")],
            commands=[
                {
                    "$t": "runtime.ConsumerWork",
                    "cmd_id": -8,
                    "op": "cleanup",
                    "request": {"assignment": A},
                }
            ],
        ),
        _step(
            7,
            1700,
            {"$t": "runtime.WorkDone", "cmd_id": -8},
            commands=[{"$t": "runtime.JournalSettle", "task_id": "t1", "runs": [1]}],
        ),
    ]


def test_timeline_model_phases_gate_interval_and_marks_follow_the_recorded_steps() -> None:
    tl = build_timeline([("a.trace", _life())])
    assert (tl.start_ms, tl.end_ms) == (1000, 1700)
    (row,) = tl.runs
    assert (row.source, row.task_id, row.run_epoch) == ("a.trace", "t1", 1)
    assert [(p.kind, p.start_step, p.end_step) for p in row.phases] == [
        ("starting", 1, 2),
        ("reading", 2, 3),
        ("installing", 3, 4),
        ("open", 4, 5),
        ("closing", 5, 6),
        ("cleaning", 6, 7),
        ("ended", 7, None),
    ]
    assert row.phases[-1].end_ms == 1700
    assert [(g.start_ms, g.end_ms, g.start_step, g.end_step) for g in row.gates] == [
        (1300, 1500, 4, 5)
    ]
    assert [(m.kind, m.step, m.label, m.bad) for m in row.marks] == [
        ("start", 1, "start", False),
        ("grant", 2, "grant r3", False),
        ("expiry", 2, "lease expiry", False),
        ("read", 3, "read: 1 found, 1 missing", True),
        ("floor", 5, "revision floor 4", False),
        ("close", 6, "close (stop)", False),
    ]
    assert next(m for m in row.marks if m.kind == "expiry").at_ms == 99_000
    # Hovering names the step as the trace records it.
    assert '"minRevision":4' in tl.steps[("a.trace", 5)].text


def test_timeline_model_a_failed_gate_close_quarantines_until_a_close_succeeds() -> None:
    (row,) = build_timeline([("a.trace", _life(close_raises=True))]).runs
    kinds = [(p.kind, p.start_step) for p in row.phases]
    assert ("quarantined", 5) in kinds
    # The gate stays open (mcp never closed) until step 6's close succeeds.
    assert [(g.start_step, g.end_step) for g in row.gates] == [(4, 6)]
    assert any(m.kind == "error" and m.step == 5 and m.bad for m in row.marks)


def test_timeline_model_monitor_violations_are_red_marks_on_their_run() -> None:
    class V:
        property = "open-without-view"
        step = 3  # 0-based: trace step 4
        task_id = "t1"
        run_epoch = 1

    tl = build_timeline([("a.trace", _life())], violations={"a.trace": [V()]})
    assert tl.violations == 1
    (m,) = [m for m in tl.runs[0].marks if m.kind == "violation"]
    assert (m.step, m.at_ms, m.bad, m.label) == (4, 1300, True, "monitor: open-without-view")
    assert 'data-kind="violation"' in render_html(tl)


def test_timeline_page_is_self_contained_and_escapes_trace_text() -> None:
    steps = _life()
    steps[5].event["reason"] = "<script>x</script>"
    page = render_html(build_timeline([("a<b>.trace", steps)]))
    assert "<script>x</script>" not in page
    assert "a&lt;b&gt;.trace" in page
    for external in ("http://", "https://", "src=", "<link", "@import"):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


# ------------------------------------------------------------ a demo, drawn


@pytest.fixture(scope="module")
def demo(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One demo run with canary secrets and its traces (the module's tests share it)."""
    from leasegate.shells.demo import DemoOptions, _write_timeline, run_demo

    d = tmp_path_factory.mktemp("timeline")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
            mp.setenv(name, os.devnull)
        for name in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
        ):
            mp.delenv(name, raising=False)
        result = run_demo(
            DemoOptions(
                shell="asyncio",
                ssm_endpoint=moto_server.url,
                trace=str(d / "demo.trace.jsonl"),
                secret_prefix="CANARY-",
                workdir=str(d / "work"),
            )
        )
    assert result.exit_code == 0, result.outcomes
    page = d / "demo.html"
    assert _write_timeline(result.traces, str(page)) == 0
    return {"dir": d, "traces": result.traces, "page": page, "minted": result.minted}


def _expected(
    paths: tuple[str, ...],
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int, int, int | None]]]:
    """Runs and gate intervals read straight off the trace files (not through the model)."""
    runs: list[tuple[str, str, int]] = []
    gates: list[tuple[str, str, int, int, int | None]] = []
    for path in paths:
        src = Path(path).name
        open_: dict[tuple[str, int], tuple[set[str], int]] = {}
        for line in Path(path).read_text().splitlines():
            obj = json.loads(line)
            if obj["type"] != "step":
                continue
            ev = obj["event"]
            found = [(ev["task_id"], ev["run_epoch"])] if ev["$t"] == "runtime.BeginStart" else []
            if ev["$t"] == "runtime.Recover":
                found = [(o["task_id"], o["run_epoch"]) for o in ev["owed"]]
            for t, r in found:
                if (src, t, r) not in runs:
                    runs.append((src, t, r))
            for c in obj["calls"]:
                key = (c["task_id"], c["run_epoch"])
                if c["raised"] or c["method"] not in ("open", "close"):
                    continue
                ports, since = open_.get(key, (set(), obj["n"]))
                if c["method"] == "open":
                    open_[key] = (ports | {c["port"]}, since if ports else obj["n"])
                elif c["port"] in ports:
                    ports = ports - {c["port"]}
                    open_[key] = (ports, since)
                    if not ports:
                        gates.append((src, key[0], key[1], since, obj["n"]))
                        del open_[key]
        gates.extend((src, t, r, since, None) for (t, r), (_, since) in open_.items())
    return runs, gates


def test_timeline_of_the_demo_one_row_per_run_gate_intervals_as_the_trace_says(
    demo: dict[str, Any],
) -> None:
    tl = load_timeline(list(demo["traces"]))
    runs, gates = _expected(demo["traces"])
    assert len(runs) == 4  # runs 1, 2 (crashed in cleanup), 2 recovered, 3
    assert [(r.source, r.task_id, r.run_epoch) for r in tl.runs] == runs
    got = [
        (r.source, r.task_id, r.run_epoch, g.start_step, g.end_step)
        for r in tl.runs
        for g in r.gates
    ]
    assert sorted(got, key=str) == sorted(gates, key=str)
    assert (
        len(gates) >= 4
    )  # run 1 opens three times (rotation, floor, env change), runs 2 and 3 once
    kinds = {m.kind for r in tl.runs for m in r.marks}
    assert {
        "grant",
        "renewal",
        "expiry",
        "floor",
        "rotation",
        "read",
        "env-commit",
        "env-apply",
    } <= kinds
    assert tl.runs[-1].phases[-1].kind == "ended"


def test_timeline_of_the_demo_holds_no_secret(demo: dict[str, Any]) -> None:
    page = demo["page"].read_text()
    assert "CANARY" not in page
    minted = [s.reveal() for s in demo["minted"]]
    assert len(minted) >= 8
    assert [i for i, v in enumerate(minted) if v in page] == []
    assert "#1#" in page  # redaction tokens, as in the trace


def test_timeline_cli_writes_the_page_and_refuses_a_malformed_trace(
    demo: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.html"
    assert main(["timeline", *demo["traces"], "-o", str(out), "--monitor"]) == 0
    assert "timeline: 4 runs, 2 trace(s) ->" in capsys.readouterr().out
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = tmp_path / "bad.trace"
    bad.write_text('{"type":"header"}\n')
    assert main(["timeline", str(bad), "-o", str(tmp_path / "b.html")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "malformed trace" in err
    assert "line 1" in err
    assert main(["timeline", str(tmp_path / "missing.trace")]) == 2
    assert main(["timeline", *demo["traces"], "-o", str(tmp_path / "no" / "x.html")]) == 2
    assert main(["demo", "--timeline", str(tmp_path / "no" / "x.html")]) == 2


# ------------------------------------------------------------ a real browser


class _Dom(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.gates: list[tuple[dict[str, str], dict[str, str]]] = []
        self.root: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.root = a
        elif tag == "g" and a.get("class") == "run":
            self.rows.append(a)
        elif tag == "rect" and a.get("class") == "gate":
            self.gates.append((self.rows[-1], a))


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return exe


def _browser(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_timeline_in_headless_chromium_rows_and_gate_bars_drawn_where_the_trace_says(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    exe = _chromium()
    url = demo["page"].resolve().as_uri()
    dumped = _browser(exe, tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    runs, gates = _expected(demo["traces"])
    assert [(r["data-source"], r["data-task"], int(r["data-run"])) for r in dom.rows] == runs
    tl = load_timeline(list(demo["traces"]))
    assert int(dom.root["data-drawn"]) == sum(len(r.phases) + len(r.gates) for r in tl.runs)
    got = []
    span = tl.end_ms - tl.start_ms
    for row, g in dom.gates:
        end = int(g["data-end-step"]) if g["data-end-step"] else None
        got.append(
            (
                row["data-source"],
                row["data-task"],
                int(row["data-run"]),
                int(g["data-start-step"]),
                end,
            )
        )
        # Drawn by the browser where the trace's times put it (230 px labels, 1100 px axis).
        x = 230 + (int(g["data-start-ms"]) - tl.start_ms) * 1100 / span
        w = (int(g["data-end-ms"]) - int(g["data-start-ms"])) * 1100 / span
        assert float(g["data-drawn-x"]) == pytest.approx(x, abs=0.2)
        assert float(g["data-drawn-width"]) == pytest.approx(max(w, 1.0), abs=0.2)
    assert sorted(got, key=str) == sorted(gates, key=str)

    shot = tmp_path / "timeline.png"
    taken = _browser(
        exe,
        tmp_path / "profile-shot",
        "--hide-scrollbars",
        "--window-size=1440,900",
        f"--screenshot={shot}",
        url,
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    artifacts = os.environ.get("LEASEGATE_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "timeline.png")
        shutil.copy(demo["page"], Path(artifacts) / "timeline.html")
    print(f"timeline screenshot: {shot}", file=sys.stderr)
