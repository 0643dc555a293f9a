"""The conformance kit judged on known runners: leasegate's own shells pass,
each planted fault fails exactly its cases, a runner written from the
protocol docs alone is judged through ``leasegate conformance --runner-cmd``.

Each case launches a runner process (a few seconds each), and the retry
cases wait out the protocol's 30 s. So every (runner, case) pair the
selected tests need is collected once and judged by one
:func:`~leasegate.conformance.run_matrix` in a background thread, started
with the module's first test: up to :data:`JOBS` runs work at once, the long
cases first, and a case waiting out its 30 s no longer counts, so the waits
overlap everything else. The tests that drive ``leasegate conformance``
themselves come first and run meanwhile; the others assert on the matrix's
verdicts. A handful of cases run by default; the whole suite on the
threading shell, a subset on the asyncio and trio shells (each with both
retry cases) and the faults are marked ``slow``;
``LEASEGATE_CONFORMANCE_MATRIX=1`` runs every case everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")

from leasegate.conformance import CASES, Target, Verdict, run_matrix
from leasegate.conformance._report import exit_status, render_html, render_json, render_table
from leasegate.shells.cli import main

pytestmark = pytest.mark.integration

RUNNERS = Path(__file__).parent / "runners"
PY = sys.executable
BROKEN = f"{PY} {RUNNERS / 'broken_runner.py'}"
MINIMAL = f"{PY} {RUNNERS / 'minimal_runner.py'}"
#: What the minimal runner implements (no env replica, no refresh).
LEASE_PARTS = ("lease", "rotation", "narrowing", "deny", "unavailable")
#: Runs working at once in the matrix (a case waiting out 30 s does not count).
JOBS = int(os.environ.get("LEASEGATE_CONFORMANCE_JOBS", "4"))
#: The whole matrix (every case on every shell, every fault on every case);
#: CI runs the subsets below.
MATRIX = os.environ.get("LEASEGATE_CONFORMANCE_MATRIX") == "1"

ALL = tuple(c.name for c in CASES)
LONG = tuple(c.name for c in CASES if c.long)
FAST = ("01-lease-request", "03-env-snapshot-acks", "06-env-apply-gap", "10-rotation")
#: Besides the whole suite on the threading shell, per async backend: the
#: retry cases once each, pipelined acks, coalesced refreshes, and pinned
#: reads (asyncio) or stale refresh answers (trio).
SHELL_SUBSET = {
    "asyncio": (
        "02-grant-reads-pinned",
        "05-env-pipelined-applies",
        "12-deny-stops-reads",
        "13-unavailable-retry",
        "14-refresh-coalesced",
    ),
    "trio": (
        "05-env-pipelined-applies",
        "12-deny-stops-reads",
        "13-unavailable-retry",
        "14-refresh-coalesced",
        "16-refresh-stale-answers",
    ),
}
#: Each fault, every case it must fail (the matrix runs all of them), the
#: ones CI runs, and cases next to them it must pass. ``read-latest`` also
#: fails the cases that read a rotated or refreshed version (13, 14, 16) and
#: the one that watches every read of a credential (15).
FAULTS = [
    (
        "read-latest",
        {"02-grant-reads-pinned", "10-rotation", "13-unavailable-retry"}
        | {"14-refresh-coalesced", "15-refresh-needs-sign-in", "16-refresh-stale-answers"},
        ("02-grant-reads-pinned", "10-rotation"),
        ("03-env-snapshot-acks",),
    ),
    ("read-after-deny", {"12-deny-stops-reads"}, None, ("13-unavailable-retry",)),
    ("ack-out-of-order", {"05-env-pipelined-applies"}, None, ("07-env-apply-replay",)),
    (
        "retry-early",
        {"12-deny-stops-reads", "13-unavailable-retry"},
        None,
        ("11-narrowing-floor",),
    ),
    ("retry-late", {"12-deny-stops-reads", "13-unavailable-retry"}, None, ("01-lease-request",)),
    ("refresh-per-request", {"14-refresh-coalesced"}, None, ("15-refresh-needs-sign-in",)),
    ("refresh-takes-any-answer", {"16-refresh-stale-answers"}, None, ("14-refresh-coalesced",)),
    ("refresh-ignores-sign-in", {"15-refresh-needs-sign-in"}, None, ("16-refresh-stale-answers",)),
]


def _self(shell: str) -> Target:
    return Target(command=f"{PY} -m leasegate.conformance.selfrunner --shell {shell}")


def _shell_cases(shell: str) -> tuple[str, ...]:
    return ALL if shell == "threads" or MATRIX else SHELL_SUBSET[shell]


def _fault_cases(
    expected: set[str], in_ci: tuple[str, ...] | None, passing: tuple[str, ...]
) -> tuple[tuple[str, ...], set[str]]:
    """The cases to run for a fault and those of them it must fail."""
    if MATRIX:
        return ALL, expected
    failing = tuple(sorted(expected)) if in_ci is None else in_ci
    return (*failing, *passing), set(failing)


MINIMAL_TARGET = Target(command=MINIMAL, implements=LEASE_PARTS)


def _needs(test: str, params: dict[str, Any]) -> list[tuple[Target, str]]:
    """The (runner, case) pairs a test of this module asserts on."""
    if test == "test_a_few_cases_pass_on_the_threading_shell":
        return [(_self("threads"), n) for n in FAST]
    if test == "test_reports_name_every_case_and_hold_no_secret":
        return [(_self("threads"), "02-grant-reads-pinned")]
    if test == "test_the_suite_passes_on_leasegates_shells":
        shell = params["shell"]
        return [(_self(shell), n) for n in _shell_cases(shell)]
    if test == "test_a_planted_fault_fails_exactly_its_cases":
        names, _ = _fault_cases(params["expected"], params["in_ci"], params["passing"])
        return [(Target(command=f"{BROKEN} {params['fault']}"), n) for n in names]
    if test == "test_the_runner_from_the_docs_alone_waits_out_its_retries":
        return [(MINIMAL_TARGET, n) for n in LONG]
    return []


class Matrix:
    """Every pair the selected tests need, judged once in a background thread."""

    #: Seconds a test waits for the matrix (each case has its own timeout).
    TIMEOUT_S = 1200.0

    def __init__(self, pairs: list[tuple[Target, str]]) -> None:
        by_name = {c.name: c for c in CASES}
        self._pairs = list(dict.fromkeys(pairs))
        self._runs = [(by_name[n], t) for t, n in self._pairs]
        self._verdicts: dict[tuple[Target, str], Verdict] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="conformance-matrix", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            verdicts = run_matrix(self._runs, jobs=JOBS) if self._runs else []
            self._verdicts = dict(zip(self._pairs, verdicts, strict=True))
        except BaseException as e:  # noqa: BLE001 - handed to the tests
            self._error = e

    def verdicts(self, target: Target, names: tuple[str, ...]) -> dict[str, Verdict]:
        """The verdicts of ``names`` on ``target`` (waits for the matrix)."""
        self._thread.join(self.TIMEOUT_S)
        assert not self._thread.is_alive(), "the conformance matrix did not end"
        if self._error is not None:
            raise self._error
        return {n: self._verdicts[(target, n)] for n in names}


@pytest.fixture(scope="module", autouse=True)
def matrix(request: pytest.FixtureRequest) -> Iterator[Matrix]:
    here = Path(__file__)
    pairs = [
        pair
        for item in request.session.items
        if item.path == here
        for pair in _needs(
            getattr(item, "originalname", item.name),
            dict(getattr(getattr(item, "callspec", None), "params", {})),
        )
    ]
    m = Matrix(pairs)
    yield m
    m._thread.join(Matrix.TIMEOUT_S)


def failed(vs: dict[str, Verdict]) -> set[str]:
    return {n for n, v in vs.items() if v.outcome == "failed"}


def lines(vs: dict[str, Verdict]) -> list[str]:
    return [v.line() for v in vs.values() if v.outcome != "passed"]


# -------------------------------------------- the command (while the matrix runs)


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


def test_jobs_above_one_needs_a_runner_command(capsys) -> None:
    argv = ["conformance", "--runner-url", "ws://127.0.0.1:9", "--jobs", "2"]
    assert main(argv) == 2
    assert "--jobs needs --runner-cmd" in capsys.readouterr().err
    assert main(["conformance", "--runner-cmd", "x", "--jobs", "0"]) == 2


@pytest.mark.slow
def test_a_runner_from_the_docs_alone_is_judged_by_the_command(tmp_path: Path, capsys) -> None:
    # Its retry cases (30 s each) are judged in the matrix (next test).
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    argv = ["conformance", "--runner-cmd", MINIMAL, "--implements", ",".join(LEASE_PARTS)]
    for name in ALL:
        if name not in LONG:
            argv += ["--case", name]
    status = main([*argv, "--jobs", "2", "--json", str(report), "--html", str(page)])
    doc = json.loads(report.read_text())
    outcomes = {c["case"]: c["verdict"] for c in doc["cases"]}
    assert status == 0, capsys.readouterr().out
    assert outcomes == {
        c.name: "passed" if c.part in LEASE_PARTS else "not applicable" for c in CASES if not c.long
    }
    assert page.read_text().startswith("<!doctype html>")


# ------------------------------------------------------------ the matrix's verdicts


def test_a_few_cases_pass_on_the_threading_shell(matrix: Matrix) -> None:
    vs = matrix.verdicts(_self("threads"), FAST)
    assert {n: v.outcome for n, v in vs.items()} == dict.fromkeys(FAST, "passed"), lines(vs)
    assert exit_status(list(vs.values())) == 0


def test_reports_name_every_case_and_hold_no_secret(matrix: Matrix) -> None:
    vs = list(matrix.verdicts(_self("threads"), ("02-grant-reads-pinned",)).values())
    text = (
        render_table(vs)
        + render_json(vs, Target(command="x"))
        + render_html(vs, Target(command="x"))
    )
    assert "02-grant-reads-pinned" in text
    for secret in ("sk-conformance", "ghp_conformance", "extra-0"):
        assert secret not in text
    assert "src=" not in render_html(vs, Target(command="x"))


@pytest.mark.slow
@pytest.mark.parametrize("shell", ["threads", "asyncio", "trio"])
def test_the_suite_passes_on_leasegates_shells(matrix: Matrix, shell: str) -> None:
    names = _shell_cases(shell)
    vs = matrix.verdicts(_self(shell), names)
    assert {n: v.outcome for n, v in vs.items()} == dict.fromkeys(names, "passed"), lines(vs)


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "expected", "in_ci", "passing"), FAULTS)
def test_a_planted_fault_fails_exactly_its_cases(
    matrix: Matrix,
    fault: str,
    expected: set[str],
    in_ci: tuple[str, ...] | None,
    passing: tuple[str, ...],
) -> None:
    names, failing = _fault_cases(expected, in_ci, passing)
    vs = matrix.verdicts(Target(command=f"{BROKEN} {fault}"), names)
    assert failed(vs) == failing, [v.line() for v in vs.values()]
    assert {n for n, v in vs.items() if v.outcome == "passed"} == set(names) - failing


@pytest.mark.slow
def test_the_runner_from_the_docs_alone_waits_out_its_retries(matrix: Matrix) -> None:
    vs = matrix.verdicts(MINIMAL_TARGET, LONG)
    assert {n: v.outcome for n, v in vs.items()} == dict.fromkeys(LONG, "passed"), lines(vs)
