"""``leasegate demo`` leaves nothing behind and reads no ambient proxy.

* Interrupted by SIGINT (or SIGTERM) at a random moment, the demo run as the
  user runs it (``python -m leasegate.shells.cli demo``, ``TMPDIR`` a fresh
  directory) exits non-zero and leaves ``TMPDIR`` empty: no temporary
  directory, no credential file. A handful of tries in CI;
  ``LEASEGATE_DEMO_SIGNAL_TRIES=20`` runs more locally.
* With ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (both cases) pointing at a
  dead address, the demo still passes every outcome on each shell.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leasegate.shells.demo import DemoOptions, run_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEAD = "http://127.0.0.1:9"
SHELLS = ["trio", "asyncio", "threads"]


def _leftovers(tmpdir: Path) -> list[str]:
    return sorted(str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*"))


def test_demo_interrupted_at_random_moments_leaves_no_temporary_directory(
    tmp_path: Path,
) -> None:
    tries = int(os.environ.get("LEASEGATE_DEMO_SIGNAL_TRIES", "3"))
    rng = random.Random()
    budget = time.monotonic() + max(120.0, 40.0 * tries)
    for i in range(tries):
        if time.monotonic() > budget:
            break
        tmpdir = tmp_path / f"tmp-{i}"
        tmpdir.mkdir()
        shell = SHELLS[i % len(SHELLS)]
        sig = signal.SIGTERM if i % 4 == 3 else signal.SIGINT
        env = {**os.environ, "TMPDIR": str(tmpdir), "COLUMNS": "120"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "leasegate.shells.cli", "demo", "--shell", shell],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            time.sleep(rng.uniform(1.0, 6.0))  # from the setup to the walk's last runs
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        note = f"try {i} ({shell}, {sig.name}): rc {proc.returncode}"
        assert _leftovers(tmpdir) == [], note + "\n" + err[-2000:]
        if proc.returncode == 0:
            continue  # the demo finished before the signal
        if proc.returncode == -sig:
            # docs/cli.md: a signal during the interpreter's own exit, after
            # the command finished, ends the process by that signal (a shell
            # reports 130 or 143). Only then: the summary line was printed.
            assert re.search(r"^(PASS|FAIL) \d+/\d+ outcomes", out, re.M), note + err[-2000:]
            assert "Traceback" not in err, note + err[-2000:]
            continue
        # docs/cli.md: 130 after SIGINT, 143 after SIGTERM, one line, no traceback.
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), note + err[-2000:]
        assert "Traceback" not in err, note + err[-2000:]
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert last.endswith("interrupted" if sig == signal.SIGINT else "terminated"), note


@pytest.mark.parametrize("shell", SHELLS)
def test_demo_passes_with_proxy_variables_pointing_at_a_dead_address(
    shell: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, DEAD)
        monkeypatch.setenv(name.lower(), DEAD)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = run_demo(DemoOptions(shell=shell, workdir=str(tmp_path)))
    failed = {k: v for k, v in result.outcomes.items() if v[0] != "pass"}
    assert failed == {}
    assert result.exit_code == 0
