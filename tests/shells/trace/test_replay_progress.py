"""``leasegate replay``: a progress bar on long traces at a terminal, a summary at the end."""

from __future__ import annotations

import argparse
import io
import pathlib

import pytest
from shell_kit import Port

from leasegate.core.runtime import BeginStart
from leasegate.shells.trace import RuntimeConfig, TraceRecorder
from leasegate.shells.trace import replay as replay_mod

TASKS = 2100  # one step per task: a trace over PROGRESS_MIN_LINES lines


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _long_trace(path: pathlib.Path, tasks: int) -> None:
    config = RuntimeConfig(runner_kind="owned", op_id_seed="progress")
    rec = TraceRecorder(str(path), config)
    log: list[tuple[str, str]] = []
    e, m, p, f = rec.wrap_ports(
        engines=Port("engines", log), mcp=Port("mcp", log), person=Port("person", log), files=None
    )
    rt = config.build(engines=e, mcp=m, person=p, files=f)
    for i in range(tasks):
        event = BeginStart(now_ms=1_000 + i, call_id=i + 1, task_id=f"task-{i}", run_epoch=1)
        rec.record(event, rt.handle(event))
    rec.close()


def _run(path: pathlib.Path) -> int:
    return replay_mod.run(argparse.Namespace(trace=str(path), monitor=False))


def test_replay_of_a_long_trace_on_a_terminal_shows_progress_and_a_summary(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rich")
    path = tmp_path / "long.jsonl"
    _long_trace(path, TASKS)
    assert sum(1 for _ in path.open()) >= replay_mod.PROGRESS_MIN_LINES
    advanced: list[int] = []
    real = replay_mod.replay_trace

    def spy(p: str, **kw: object) -> replay_mod.ReplayResult:
        progress = kw.get("progress")
        assert callable(progress)  # a bar was set up for this terminal
        kw["progress"] = lambda n: (advanced.append(n), progress(n))
        return real(p, **kw)  # type: ignore[arg-type]

    out = _Terminal()
    monkeypatch.setattr(replay_mod, "replay_trace", spy)
    monkeypatch.setattr("sys.stdout", out)
    assert _run(path) == 0
    assert len(advanced) == TASKS
    text = out.getvalue()
    assert f"replay matched: {TASKS} steps" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"summary: {TASKS} steps, {TASKS} task(s), 0 violation(s), ")
    assert last.endswith("s")


def test_replay_off_a_terminal_shows_no_bar_but_the_summary(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "short.jsonl"
    _long_trace(path, 3)
    seen: list[object] = []
    real = replay_mod.replay_trace

    def spy(p: str, **kw: object) -> replay_mod.ReplayResult:
        seen.append(kw.get("progress"))
        return real(p, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(replay_mod, "replay_trace", spy)
    assert _run(path) == 0
    assert seen == [None]
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("summary: 3 steps, 3 task(s), 0 violation(s), ")
