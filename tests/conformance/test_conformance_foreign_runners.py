"""The kit judged on runners it did not come with: one written in Node.js
from the protocol pages alone (``runners/node_runner.js``, its standard
library only), that runner with a planted fault, and runners that misbehave
as processes or peers (``runners/hostile_runner.py``).

Every (runner, case) pair of the module is judged by one
:func:`~leasegate.conformance.run_matrix` in a background thread started
with the module's first test. The hostile runners' cases get a short
timeout (8 s), so a runner that never connects costs seconds, not a minute.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("moto")

from leasegate.conformance import CASES, Case, Target, Verdict, run_matrix
from leasegate.conformance._report import render_html, render_json, render_table

pytestmark = pytest.mark.integration

RUNNERS = Path(__file__).parent / "runners"
NODE = shutil.which("node")
BY_NAME = {c.name: c for c in CASES}
#: What the Node.js runner implements (no refresh).
NODE_PARTS = ("lease", "rotation", "narrowing", "deny", "unavailable", "env-replica")
#: Its cases judged by default; the retry cases (30 s each) are left to the
#: slow test of the Python runner from the docs, which shares their logic.
NODE_CASES = tuple(c.name for c in CASES if c.part in NODE_PARTS and not c.long)
HOSTILE = f"{sys.executable} {RUNNERS / 'hostile_runner.py'}"
#: A short timeout for the hostile runners' cases, seconds.
SHORT_S = 8.0


def _node(fault: str = "") -> Target:
    return Target(
        command=f"{NODE} {RUNNERS / 'node_runner.js'} {fault}".strip(), implements=NODE_PARTS
    )


def _short(name: str) -> Case:
    return dataclasses.replace(BY_NAME[name], timeout_s=SHORT_S)


class Runs:
    """The module's pairs, judged once in a background thread."""

    def __init__(self, tmp: Path) -> None:
        self.secrets = tmp / "secrets.txt"
        self.pids = tmp / "pids"
        self.pids.mkdir()
        os.environ["NODE_RUNNER_SECRETS_FILE"] = str(self.secrets)
        os.environ["HOSTILE_PID_DIR"] = str(self.pids)
        self.pairs: list[tuple[str, Case, Target]] = []
        if NODE is not None:
            self.pairs += [(f"node {n}", BY_NAME[n], _node()) for n in NODE_CASES]
            self.pairs += [
                ("dup-key-ack 04", BY_NAME["04-env-live-applies"], _node("dup-key-ack")),
                ("dup-key-ack 01", BY_NAME["01-lease-request"], _node("dup-key-ack")),
                ("binary-ack 07", BY_NAME["07-env-apply-replay"], _node("binary-ack")),
                ("ack-leaks-value 03", BY_NAME["03-env-snapshot-acks"], _node("ack-leaks-value")),
            ]
        for mode in (
            "never-connects",
            "exits-at-once",
            "floods",
            "binary-request",
            "ignores-sigterm",
            "leaves-a-child",
        ):
            self.pairs.append(
                (mode, _short("01-lease-request"), Target(command=f"{HOSTILE} {mode}"))
            )
        self.pairs.append(
            ("floods 02", _short("02-grant-reads-pinned"), Target(command=f"{HOSTILE} floods"))
        )
        self.pairs.append(
            ("not found", _short("01-lease-request"), Target(command=str(tmp / "no-such-runner")))
        )
        self.verdicts: dict[str, Verdict] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            vs = run_matrix([(c, t) for _, c, t in self.pairs], jobs=4)
            self.verdicts = {label: v for (label, _, _), v in zip(self.pairs, vs, strict=True)}
        except BaseException as e:  # noqa: BLE001 - handed to the tests
            self.error = e

    def __getitem__(self, label: str) -> Verdict:
        self.thread.join(300)
        assert not self.thread.is_alive(), "the runs did not end"
        if self.error is not None:
            raise self.error
        return self.verdicts[label]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    saved = {k: os.environ.get(k) for k in ("NODE_RUNNER_SECRETS_FILE", "HOSTILE_PID_DIR")}
    r = Runs(tmp_path_factory.mktemp("foreign"))
    yield r
    r.thread.join(300)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


@needs_node
@pytest.mark.parametrize("case", NODE_CASES)
def test_a_node_runner_from_the_docs_alone_passes(runs: Runs, case: str) -> None:
    v = runs[f"node {case}"]
    assert v.outcome == "passed", v.line()


@needs_node
def test_reports_of_a_foreign_runner_hold_none_of_its_secrets(runs: Runs) -> None:
    vs = [runs[f"node {n}"] for n in NODE_CASES]
    target = _node()
    doc = render_json(vs, target)
    json.loads(doc)
    text = render_table(vs) + doc + render_html(vs, target)
    secrets = {s for s in runs.secrets.read_text().splitlines() if s}
    # Session keys of every grant and the env values the runner read.
    assert len(secrets) >= 3
    leaked = [s[:4] + "…" for s in secrets if s in text]
    assert not leaked


@needs_node
def test_a_value_a_runner_puts_in_its_ack_is_not_shown_in_the_verdict(runs: Runs) -> None:
    v = runs["ack-leaks-value 03"]
    assert v.outcome == "failed"
    assert '"value":"<string>"' in v.detail, v.line()
    assert "first difference: results[0].materialization" in v.detail, v.line()
    shown = render_json([v], _node()) + render_html([v], _node()) + render_table([v])
    secrets = {s for s in runs.secrets.read_text().splitlines() if s}
    assert not [s[:4] + "…" for s in secrets if s in shown]


@needs_node
def test_an_ack_with_a_repeated_key_fails_its_case(runs: Runs) -> None:
    v = runs["dup-key-ack 04"]
    assert v.outcome == "failed"
    assert "each key once per object" in v.detail, v.line()
    assert "ok twice" in v.detail, v.line()
    assert runs["dup-key-ack 01"].outcome == "passed", runs["dup-key-ack 01"].line()


@needs_node
def test_an_ack_sent_as_a_binary_message_fails_its_case(runs: Runs) -> None:
    v = runs["binary-ack 07"]
    assert v.outcome == "failed"
    assert "text message" in v.detail, v.line()
    assert "binary" in v.detail, v.line()


def test_a_runner_that_never_connects_fails_within_the_case_timeout(runs: Runs) -> None:
    v = runs["never-connects"]
    assert v.outcome == "failed"
    assert v.detail == "connect: expected the runner connected to the bridge; seen no connection"
    assert v.seconds < SHORT_S + 3


def test_a_runner_that_exits_at_once_fails_at_once_with_its_status(runs: Runs) -> None:
    v = runs["exits-at-once"]
    assert v.outcome == "failed"
    assert v.detail.endswith("seen the runner exited with status 3"), v.line()
    assert v.seconds < SHORT_S


def test_a_runner_command_that_cannot_start_fails_with_the_reason(runs: Runs) -> None:
    v = runs["not found"]
    assert v.outcome == "failed"
    assert v.detail == (
        "start: expected the runner command started; "
        "seen FileNotFoundError (No such file or directory)"
    )


def test_a_lease_request_sent_as_a_binary_message_fails(runs: Runs) -> None:
    v = runs["binary-request"]
    assert v.outcome == "failed"
    assert "as a text message" in v.detail, v.line()
    assert "binary" in v.detail, v.line()


def test_a_flooding_runner_is_judged_within_the_case_timeout(runs: Runs) -> None:
    assert runs["floods"].outcome == "passed", runs["floods"].line()
    v = runs["floods 02"]
    assert v.outcome == "failed"
    assert v.seconds < SHORT_S + 3
    assert len(v.evidence) <= 300
    assert "seen no SSM call" in v.detail, v.line()


def _gone(runs: Runs, name: str) -> bool:
    """Whether the process whose pid the hostile runner noted as ``name`` ended
    (ended here if not, so no test leaves it behind)."""
    pid = int((runs.pids / name).read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    os.kill(pid, signal.SIGKILL)
    return False


def test_a_runner_that_ignores_sigterm_is_killed(runs: Runs) -> None:
    assert runs["ignores-sigterm"].outcome == "passed", runs["ignores-sigterm"].line()
    assert _gone(runs, "ignores-sigterm.pid")


def test_a_child_the_runner_leaves_behind_is_ended_with_it(runs: Runs) -> None:
    assert runs["leaves-a-child"].outcome == "passed", runs["leaves-a-child"].line()
    assert _gone(runs, "leaves-a-child.pid")
    assert _gone(runs, "leaves-a-child.child.pid")
