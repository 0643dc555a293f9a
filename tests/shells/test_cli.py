"""The ``leasegate`` command's conventions (docs/cli.md): version, help, log
levels, up-front path checks, exit statuses, interrupts and closed pipes."""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from leasegate.shells import MissingExtraError, cli

ENV = {**os.environ, "COLUMNS": "120"}


def _leasegate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasegate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        check=False,
    )


# ---------------------------------------------------------------- version, help


def test_version_flag_and_version_command_print_the_installed_version() -> None:
    flag = _leasegate("--version")
    command = _leasegate("version")
    assert flag.returncode == 0, flag.stderr
    assert command.returncode == 0, command.stderr
    assert flag.stdout == f"leasegate {command.stdout.strip()}\n"
    assert command.stdout.strip() != ""


def test_python_dash_m_leasegate_help_lists_every_command_and_the_exit_statuses() -> None:
    proc = _leasegate("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: leasegate ")
    for word in (
        "conformance",
        "demo",
        "replay",
        "timeline",
        "version",
        "--version",
        "-v",
        "-q",
        "130",
        "143",
        "141",
    ):
        assert word in proc.stdout


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no sub-commands")


def test_every_option_of_every_command_has_help_text() -> None:
    parser = cli._build_parser()
    subs = _subparsers(parser)
    assert set(subs) == {"conformance", "demo", "replay", "timeline", "version"}
    for name, p in {"leasegate": parser, **subs}.items():
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help not in (None, "", argparse.SUPPRESS), (name, action.dest)


def test_demo_help_describes_its_options() -> None:
    proc = _leasegate("demo", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "the runner shell" in proc.stdout
    assert "instead of the embedded moto server" in proc.stdout
    assert "FILE.recovered" in proc.stdout


def test_a_usage_error_exits_2_and_verbose_with_quiet_is_one() -> None:
    assert _leasegate("frobnicate").returncode == 2
    both = _leasegate("-v", "-q", "version")
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr


# ---------------------------------------------------------------------- logging


def _log_every_level(args: argparse.Namespace) -> int:
    log = logging.getLogger("leasegate.shells.dispatch")
    for level in ("debug", "info", "warning", "error"):
        getattr(log, level)("%s record", level)
    return 0


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        ((), ["warning", "error"]),
        (("-q",), ["error"]),
        (("-qq",), []),
        (("-v",), ["info", "warning", "error"]),
        (("-vv",), ["debug", "info", "warning", "error"]),
        (("version", "-vv"), ["debug", "info", "warning", "error"]),
    ],
)
def test_verbosity_flags_set_the_leasegate_logger_tree_level_on_stderr(
    flags: tuple[str, ...],
    shown: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "_run", _log_every_level)
    logger = logging.getLogger("leasegate")
    before = logger.level, logger.propagate, list(logger.handlers)
    argv = list(flags) if "version" in flags else [*flags, "version"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    expected = "".join(
        f"{level.upper()} leasegate.shells.dispatch: {level} record\n" for level in shown
    )
    assert err == expected
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_quiet_and_verbose_run_as_subprocess_flags() -> None:
    for flags in (("-q",), ("-v",), ("-vv",)):
        proc = _leasegate(*flags, "version")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""


# ------------------------------------------------------------ up-front checks


def test_replay_of_a_missing_or_directory_trace_is_a_one_line_usage_error(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.trace", tmp_path):
        proc = _leasegate("replay", str(path))
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1
        assert f"leasegate replay: cannot read {path}: " in proc.stderr
        assert "Traceback" not in proc.stderr


def test_demo_with_an_unwritable_trace_path_fails_before_starting(tmp_path: Path) -> None:
    missing_dir = tmp_path / "no-such-dir" / "demo.trace"
    recovered_dir = tmp_path / "demo.trace.recovered"
    recovered_dir.mkdir()
    cases = {
        str(missing_dir): f"directory {missing_dir.parent} does not exist",
        str(tmp_path): "is a directory",
        str(tmp_path / "demo.trace"): f"cannot write {recovered_dir}: is a directory",
    }
    for path, reason in cases.items():
        proc = _leasegate("demo", "--trace", path)
        assert proc.returncode == 2, proc.stdout[-2000:]
        assert proc.stderr.startswith(f"leasegate demo: cannot write {path}")
        assert reason in proc.stderr
        assert proc.stderr.count("\n") == 1
        assert proc.stdout == ""  # nothing started: no endpoint, no timeline
    assert not (tmp_path / "demo.trace").exists()


def test_demo_without_its_extra_names_the_extra_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli, "missing_modules", lambda names: tuple(n for n in names if n == "moto")
    )
    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err == "leasegate demo: needs moto (not installed): pip install 'leasegate[demo]'\n"


def test_reference_cloud_without_moto_raises_the_typed_missing_extra_error() -> None:
    code = (
        "import sys\n"
        "sys.modules['moto'] = None\n"
        "try:\n"
        "    import leasegate.testing\n"
        "except ImportError as e:\n"
        "    from leasegate.shells import MissingExtraError\n"
        "    print(type(e).__name__, isinstance(e, MissingExtraError), e.name)\n"
        "    print(e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "MissingExtraError True moto",
        "leasegate.testing needs moto: pip install 'leasegate[demo]'",
    ]


def test_missing_extra_error_is_an_import_error_naming_every_missing_module() -> None:
    e = MissingExtraError("leasegate demo", ("rich", "trio"), "demo")
    assert isinstance(e, ImportError)
    assert e.name == "rich"
    assert str(e) == "leasegate demo needs rich, trio: pip install 'leasegate[demo]'"


# ------------------------------------------- interrupts and closed pipes (in-process)


def _raising(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


@pytest.mark.parametrize(
    "exc",
    [
        KeyboardInterrupt(),
        BaseExceptionGroup("trio", [KeyboardInterrupt()]),
        BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [KeyboardInterrupt()])]),
        BaseExceptionGroup("both", [ValueError("x"), KeyboardInterrupt()]),
    ],
)
def test_an_interrupt_also_wrapped_in_a_group_exits_130_with_one_line(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_run", _raising(exc))
    assert cli.main(["version"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted\n"
    assert captured.out == ""


@pytest.mark.parametrize("exc", [BrokenPipeError(), ExceptionGroup("anyio", [BrokenPipeError()])])
def test_a_closed_stdout_also_wrapped_in_a_group_exits_141_quietly(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_run", _raising(exc))
    assert cli.main(["version"]) == 141
    assert capsys.readouterr().err == ""


def test_any_other_error_propagates_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_run", _raising(ValueError("boom")))
    with pytest.raises(ValueError, match="boom"):
        cli.main(["version"])


def test_the_sigterm_handler_is_restored_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[Any] = []
    monkeypatch.setattr(
        cli, "_run", lambda args: seen.append(signal.getsignal(signal.SIGTERM)) or 0
    )
    assert cli.main(["version"]) == 0
    assert len(seen) == 1
    assert seen[0] is not before
    assert signal.getsignal(signal.SIGTERM) is before


# --------------------------------------------- a real demo: signals and pipes


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: queue.Queue[str | None], text: str, timeout: float) -> None:
    seen: list[str] = []
    while True:
        line = q.get(timeout=timeout)
        if line is None:
            raise AssertionError("the demo ended before: " + "".join(seen)[-2000:])
        seen.append(line)
        if text in line:
            return


def _demo(*args: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "leasegate", "demo", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait (bounded) and return stderr (stdout is the caller's: pumped or closed)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise
    assert proc.stderr is not None
    return proc.stderr.read()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    ("shell", "sig", "status", "line"),
    [
        ("trio", signal.SIGINT, 130, "interrupted"),
        ("threads", signal.SIGINT, 130, "interrupted"),
        ("asyncio", signal.SIGTERM, 143, "terminated"),
    ],
)
def test_a_signal_during_the_demo_exits_with_its_status_and_no_traceback(
    shell: str, sig: signal.Signals, status: int, line: str
) -> None:
    proc = _demo("--shell", shell)
    try:
        assert proc.stdout is not None
        _wait_for(_lines(proc.stdout), "reference cloud ready", timeout=90)
        proc.send_signal(sig)
        err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == status, err[-3000:]
    assert "Traceback" not in err
    assert err.endswith(f"{line}\n"), err[-3000:]


@pytest.mark.slow
@pytest.mark.integration
def test_demo_into_a_pipe_closed_after_one_line_exits_141_without_a_traceback() -> None:
    proc = _demo()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # `leasegate demo | head -1`
        assert first != ""
        proc.stdout.close()
        err = _finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 141, err[-3000:]
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
