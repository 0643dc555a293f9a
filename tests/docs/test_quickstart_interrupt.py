"""Ctrl-C on the quickstart's runners, as printed: exit 130, no traceback, nothing left on disk.

Each runner of ``docs/quickstart.md`` runs as a subprocess with ``TMPDIR`` on a
fresh directory; SIGINT is sent the moment its first credential file is on
disk (the gate is open, or about to be). The shell's exception path closes the
run and removes its files; the page's ``__main__`` turns the
``KeyboardInterrupt`` into status 130. Bounded: every wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docblocks import read_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _files_under(d: Path) -> list[Path]:
    """The files under ``d`` now. The runner writes and replaces directories
    while this looks (a materialization is written aside, then renamed into
    place), so a directory that vanishes mid-walk is skipped, not an error:
    ``os.walk`` ignores it."""
    return [Path(root, name) for root, _dirs, names in os.walk(d) for name in names]


@pytest.mark.parametrize("runner", ["runner_threads.py", "runner_trio.py"])
def test_sigint_with_a_credential_file_on_disk_exits_130_with_no_traceback_and_no_file_left(
    tmp_path: Path, runner: str
) -> None:
    for b in read_blocks(PAGE):
        if b.role == "file":
            assert b.name is not None
            (tmp_path / b.name).write_text(b.text, encoding="utf-8")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, runner],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if any(p.name == "engine.env" for p in _files_under(tmpdir)):
                break
            time.sleep(0.005)
        interrupted = proc.poll() is None
        assert interrupted or proc.returncode == 0
        if interrupted:
            proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = err.decode(errors="replace")
    assert "Traceback" not in text, text
    assert proc.returncode == (130 if interrupted else 0), text
    assert _files_under(tmpdir) == []
    assert list(tmpdir.iterdir()) == []
