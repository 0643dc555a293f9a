"""The conformance kit judged on known runners: leasegate's own shells pass,
each planted fault fails exactly its cases, a runner written from the
protocol docs alone is judged through ``leasegate conformance --runner-cmd``.

Each case launches a runner process (a few seconds each): a handful of cases
run by default; the whole suite on the threading shell, a few cases on the
asyncio and trio shells and the faults on their cases are marked ``slow``;
``LEASEGATE_CONFORMANCE_MATRIX=1`` runs every case everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("moto")

from leasegate.conformance import CASES, Target, run_suite
from leasegate.conformance._report import exit_status, render_html, render_json, render_table
from leasegate.shells.cli import main

pytestmark = pytest.mark.integration

RUNNERS = Path(__file__).parent / "runners"
PY = sys.executable
SELF = f"{PY} -m leasegate.conformance.selfrunner --shell"
FAST = ("01-lease-request", "03-env-snapshot-acks", "06-env-apply-gap", "10-rotation")
LEASE_PARTS = ("lease", "rotation", "narrowing", "deny", "unavailable")


def verdicts(
    command: str, names: tuple[str, ...] | None = None, parts: tuple[str, ...] | None = None
):
    cases = [c for c in CASES if names is None or c.name in names]
    target = Target(command=command) if parts is None else Target(command=command, implements=parts)
    return {v.case.name: v for v in run_suite(cases, target)}


def failed(vs) -> set[str]:
    return {n for n, v in vs.items() if v.outcome == "failed"}


def test_a_few_cases_pass_on_the_threading_shell() -> None:
    vs = verdicts(f"{SELF} threads", FAST)
    assert {n: v.outcome for n, v in vs.items()} == dict.fromkeys(FAST, "passed"), [
        v.line() for v in vs.values()
    ]
    assert exit_status(list(vs.values())) == 0


#: The whole matrix (every case on every shell, every fault on every case)
#: takes about 6 minutes; CI runs the subsets below, and
#: ``LEASEGATE_CONFORMANCE_MATRIX=1`` runs all of it.
MATRIX = os.environ.get("LEASEGATE_CONFORMANCE_MATRIX") == "1"
ALL = tuple(c.name for c in CASES)
#: A few cases per shell besides the whole suite on the threading shell:
#: pinned reads, pipelined acks, deny.
SHELL_SUBSET = ("02-grant-reads-pinned", "05-env-pipelined-applies", "12-deny-stops-reads")
#: Each fault, the cases it must fail, and a case next to them it must pass.
FAULTS = [
    ("read-latest", {"02-grant-reads-pinned", "10-rotation"}, "03-env-snapshot-acks"),
    ("read-after-deny", {"12-deny-stops-reads"}, "13-unavailable-retry"),
    ("ack-out-of-order", {"05-env-pipelined-applies"}, "07-env-apply-replay"),
]


@pytest.mark.slow
@pytest.mark.parametrize("shell", ["threads", "asyncio", "trio"])
def test_the_suite_passes_on_leasegates_shells(shell: str) -> None:
    names = ALL if shell == "threads" or MATRIX else SHELL_SUBSET
    vs = verdicts(f"{SELF} {shell}", names)
    assert {n: v.outcome for n, v in vs.items()} == dict.fromkeys(names, "passed"), [
        v.line() for v in vs.values() if v.outcome != "passed"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "expected", "passing"), FAULTS)
def test_a_planted_fault_fails_exactly_its_cases(
    fault: str, expected: set[str], passing: str
) -> None:
    names = ALL if MATRIX else (*sorted(expected), passing)
    vs = verdicts(f"{PY} {RUNNERS / 'broken_runner.py'} {fault}", names)
    assert set(vs) == set(names)
    assert failed(vs) == expected, [v.line() for v in vs.values()]
    assert {n for n, v in vs.items() if v.outcome == "passed"} == set(names) - expected


@pytest.mark.slow
def test_a_runner_from_the_docs_alone_is_judged_by_the_command(tmp_path: Path, capsys) -> None:
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    status = main(
        [
            "conformance",
            "--runner-cmd",
            f"{PY} {RUNNERS / 'minimal_runner.py'}",
            "--implements",
            ",".join(LEASE_PARTS),
            "--json",
            str(report),
            "--html",
            str(page),
        ]
    )
    doc = json.loads(report.read_text())
    outcomes = {c["case"]: c["verdict"] for c in doc["cases"]}
    assert status == 0, capsys.readouterr().out
    assert outcomes == {
        c.name: "not applicable" if c.part == "env-replica" else "passed" for c in CASES
    }
    assert page.read_text().startswith("<!doctype html>")


def test_reports_name_every_case_and_hold_no_secret() -> None:
    vs = list(verdicts(f"{SELF} threads", ("02-grant-reads-pinned",)).values())
    text = (
        render_table(vs)
        + render_json(vs, Target(command="x"))
        + render_html(vs, Target(command="x"))
    )
    assert "02-grant-reads-pinned" in text
    for secret in ("sk-conformance", "ghp_conformance", "extra-0"):
        assert secret not in text
    assert "src=" not in render_html(vs, Target(command="x"))


def test_a_listening_runner_is_judged_through_runner_url(tmp_path: Path, capsys) -> None:
    runner = subprocess.Popen(
        [PY, str(RUNNERS / "minimal_runner.py"), "--listen"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout is not None
        url = runner.stdout.readline().strip()
        assert url.startswith("ws://127.0.0.1:"), url
        cases = ("01-lease-request", "02-grant-reads-pinned", "03-env-snapshot-acks")
        report = tmp_path / "report.json"
        argv = ["conformance", "--runner-url", url, "--implements", ",".join(LEASE_PARTS)]
        for c in cases:
            argv += ["--case", c]
        status = main([*argv, "--json", str(report)])
        doc = json.loads(report.read_text())
        assert status == 0, capsys.readouterr().out
        assert {c["case"]: c["verdict"] for c in doc["cases"]} == {
            cases[0]: "passed",
            cases[1]: "passed",
            cases[2]: "not applicable",
        }
        assert doc["target"]["url"] == url
    finally:
        runner.terminate()
        runner.wait(10)
