"""``leasegate demo``: the whole walk on every shell, its trace replayed, no secret leaked.

* In process, on asyncio, trio and threads, against the session's moto
  server given as ``--ssm-endpoint`` (so the user-endpoint path with STS is
  covered): every expected outcome passes and the exit code is 0.
* As the user runs it: ``leasegate demo --shell asyncio --trace F`` in a
  subprocess (its own embedded moto), then ``leasegate replay F --monitor``
  and ``leasegate replay F.recovered --monitor`` both exit 0.
* Canary: every secret the reference cloud was given (``CANARY-`` values)
  or minted (STS secret keys and session tokens) is absent from the trace
  files, stdout/stderr and the captured logs.
* A fault (the consumers and the host never remove files) makes an outcome
  miss: exit 1, that outcome failed, the later ones skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leasegate.shells.demo import DemoOptions, run_demo
from leasegate.shells.demo._report import OUTCOMES
from leasegate.testing.moto import MotoServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = [k for k, _ in OUTCOMES]


@pytest.mark.parametrize("shell", ["asyncio", "trio", "threads"])
def test_demo_walks_every_outcome_to_exit_0_on_each_shell(
    shell: str, moto_server: MotoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_demo(DemoOptions(shell=shell, ssm_endpoint=moto_server.url, workdir=str(tmp_path)))
    out = capsys.readouterr().out
    failed = {k: v for k, v in result.outcomes.items() if v[0] != "pass"}
    assert failed == {}
    assert result.exit_code == 0
    assert list(result.outcomes) == KEYS
    assert result.violations == ()
    # The timeline and the table were printed, ending with the verdict.
    assert f"PASS {len(KEYS)}/{len(KEYS)} outcomes" in out
    for key in KEYS:
        assert key in out
    # Every task file is gone; the journal directory holds no owed row (checked by the walk).
    assert not any(p.is_file() for p in (tmp_path / "tasks").rglob("*"))
    assert result.elapsed_s < 120


def test_demo_cli_trace_replays_exactly_with_a_clean_monitor(tmp_path: Path) -> None:
    trace = tmp_path / "demo.trace"
    env = {**os.environ, "COLUMNS": "120"}
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "leasegate.shells.cli",
            "demo",
            "--shell",
            "asyncio",
            "--trace",
            str(trace),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "PASS" in demo.stdout
    assert "Traceback" not in demo.stderr
    recovered = Path(f"{trace}.recovered")
    assert trace.stat().st_size > 0
    assert recovered.stat().st_size > 0
    for path in (trace, recovered):
        replay = subprocess.run(
            [sys.executable, "-m", "leasegate.shells.cli", "replay", str(path), "--monitor"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert "matched" in replay.stdout


def test_demo_canary_no_minted_secret_in_trace_output_or_logs(
    moto_server: MotoServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every leasegate record (DEBUG up) and everything else from INFO up: botocore's
    # own DEBUG records print request and response bodies, so a host must never
    # enable them with real secrets (docs/demo.md).
    caplog.set_level("INFO")
    caplog.set_level("DEBUG", logger="leasegate")
    trace = tmp_path / "canary.trace"
    result = run_demo(
        DemoOptions(
            shell="asyncio",
            ssm_endpoint=moto_server.url,
            trace=str(trace),
            secret_prefix="CANARY-",
            workdir=str(tmp_path / "work"),
        )
    )
    captured = capsys.readouterr()
    assert result.exit_code == 0, result.outcomes
    minted = [s.reveal() for s in result.minted]
    # The cloud's values (CANARY-…) and the STS sessions it minted (not CANARY-…).
    assert sum(v.startswith("CANARY-") for v in minted) >= 8
    sts = [v for v in minted if "CANARY" not in v]
    assert len(sts) >= 4  # two sessions at least: a secret key and a token each
    texts = {
        "stdout": captured.out,
        "stderr": captured.err,
        "logs": caplog.text + result.logs,
        "trace": trace.read_text(),
        "trace.recovered": Path(f"{trace}.recovered").read_text(),
    }
    assert texts["trace"]
    assert texts["stdout"]
    for name, text in texts.items():
        assert "CANARY" not in text, name
        leaked = [i for i, v in enumerate(minted) if v in text]
        assert leaked == [], name


def test_demo_exits_1_when_an_outcome_misses(
    moto_server: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from leasegate.shells.consumers import FileConsumer
    from leasegate.shells.ports import HostWork

    # The fault: no consumer and no host ever removes a file.
    monkeypatch.setattr(FileConsumer, "cleanup", lambda self, task_id, removed: None)
    monkeypatch.setattr(HostWork, "remove_paths", lambda self, req: None)
    result = run_demo(
        DemoOptions(
            shell="asyncio",
            ssm_endpoint=moto_server.url,
            workdir=str(tmp_path),
            step_timeout_s=2.0,
        )
    )
    out = capsys.readouterr().out
    assert result.exit_code == 1
    status = {k: v[0] for k, v in result.outcomes.items()}
    # Everything up to the narrowing happened; the removed credential's files stayed.
    first_fail = KEYS.index("narrowing")
    assert all(status[k] == "pass" for k in KEYS[:first_fail])
    assert status["narrowing"] == "fail"
    assert "timed out" in result.outcomes["narrowing"][1]
    assert all(status[k] == "skip" for k in KEYS[first_fail + 1 :])
    assert "FAIL" in out


def test_demo_ssm_endpoint_must_be_an_http_url_usage_error_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from leasegate.shells.demo import run

    args = argparse.Namespace(shell="asyncio", ssm_endpoint="ftp://127.0.0.1:9", trace=None)
    assert run(args) == 2
    assert "--ssm-endpoint must be an http:// or https:// URL" in capsys.readouterr().err


def test_demo_unreachable_endpoint_fails_the_start_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_demo(
        DemoOptions(shell="asyncio", ssm_endpoint="http://127.0.0.1:9", workdir=str(tmp_path))
    )
    assert result.exit_code == 1
    assert result.outcomes["start"] == ("fail", "the SSM endpoint failed: EndpointConnectionError")
    assert all(v[0] == "skip" for k, v in result.outcomes.items() if k != "start")
    assert "FAIL 0/16" in capsys.readouterr().out
