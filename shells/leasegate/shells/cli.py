"""The ``leasegate`` command (also ``python -m leasegate``).

Sub-commands:

* ``leasegate demo`` — the main job: walks one task through a whole lease
  life against a local SSM endpoint (``leasegate.shells.demo``).
* ``leasegate replay TRACE`` — feeds a recorded trace to a fresh core and
  compares every command (``leasegate.shells.trace``).
* ``leasegate timeline TRACE...`` — draws a trace's runs on a time axis as one
  HTML page (``leasegate.shells.trace.timeline``).
* ``leasegate conformance --runner-cmd CMD | --runner-url URL`` — judges a
  runner against the protocol's conformance suite (``leasegate.conformance``).
* ``leasegate version`` (or ``leasegate --version``) — prints the installed version.

Global options ``-v``/``-vv``/``-q`` set the level of the ``leasegate``
logger tree and its stderr handler (format :data:`LOG_FORMAT`).

Exit statuses (``docs/cli.md``): :data:`EXIT_OK` 0, :data:`EXIT_FAILED` 1
(a demo outcome missed, a replay divergence, a malformed trace),
:data:`EXIT_USAGE` 2 (bad arguments, an unreadable trace, an unwritable
``--trace`` path, a missing extra — all found before any work starts),
:data:`EXIT_INTERRUPTED` 130 (SIGINT), :data:`EXIT_TERMINATED` 143 (SIGTERM),
:data:`EXIT_BROKEN_PIPE` 141 (stdout closed by its reader, as ``leasegate
demo | head -1``). An interrupt, a termination or a closed pipe never prints
a traceback, also when it arrives wrapped in an exception group (trio, anyio).

The CLI uses :mod:`argparse` from the standard library: the command surface is
small and argparse gives exact exit codes and help with no dependency. Each
sub-command's module is imported only when it runs, so ``leasegate version``
stays fast and works without any extra.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from types import FrameType

from ._extras import missing_modules

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "LOG_FORMAT",
    "main",
]

#: Success: every demo outcome happened; the replay matched.
EXIT_OK = 0
#: The command ran and its outcome is a failure (outcome missed, divergence).
EXIT_FAILED = 1
#: A usage error, found before any work starts.
EXIT_USAGE = 2
#: Interrupted by SIGINT (Ctrl-C): 128 + 2.
EXIT_INTERRUPTED = 130
#: stdout was closed by its reader: 128 + SIGPIPE (13), what a shell reports.
EXIT_BROKEN_PIPE = 141
#: Terminated by SIGTERM: 128 + 15.
EXIT_TERMINATED = 143

#: The format of the stderr log handler the CLI installs on the ``leasegate`` logger.
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"

#: sub-command -> module whose ``run(args: argparse.Namespace) -> int`` serves it.
_COMMANDS = {
    "demo": "leasegate.shells.demo",
    "replay": "leasegate.shells.trace.replay",
    "conformance": "leasegate.conformance",
    "timeline": "leasegate.shells.trace.timeline",
}


def _version() -> str:
    try:
        return version("leasegate")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def _log_options() -> argparse.ArgumentParser:
    """-v/-q, accepted before and after the sub-command."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log more on stderr: -v INFO, -vv DEBUG (default WARNING)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=argparse.SUPPRESS,
        help="log less on stderr: -q ERROR only, -qq nothing",
    )
    return common


def _positive_int(text: str) -> int:
    """``--jobs``'s value: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_seconds(text: str) -> float:
    """``--status-every``'s value: a number of seconds, at least 0.1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not value >= 0.1 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be at least 0.1 seconds")
    return value


def _build_parser() -> argparse.ArgumentParser:
    common = _log_options()
    parser = argparse.ArgumentParser(
        prog="leasegate",
        description="Task-scoped cloud credential leases for runner hosts.",
        epilog="exit status: 0 ok, 1 outcome missed or divergence, 2 usage error, "
        "130 interrupted (SIGINT), 143 terminated (SIGTERM), 141 stdout closed. "
        "Details: docs/cli.md.",
        parents=[common],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"leasegate {_version()}",
        help="print the installed version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="walk one task through a whole lease life (main job)",
        description="Walk one task through a whole lease life against a local SSM endpoint "
        "and print a timeline and a table of outcomes (docs/demo.md).",
    )
    demo.add_argument(
        "--shell",
        choices=("trio", "asyncio", "threads"),
        default="trio",
        help="the runner shell: the async shell on trio or asyncio, or the threading "
        "shell (default: %(default)s)",
    )
    demo.add_argument(
        "--ssm-endpoint",
        metavar="URL",
        default=None,
        help="an http(s):// SSM endpoint to use instead of the embedded moto server "
        "(default: moto on 127.0.0.1)",
    )
    demo.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="record the core's steps to FILE (and FILE.recovered for the recovering "
        "runner); replay them with 'leasegate replay FILE' (default: no trace)",
    )
    demo.add_argument(
        "--timeline",
        metavar="FILE.html",
        default=None,
        help="write the run's timeline page to FILE.html (docs/timeline.md); without "
        "--trace the traces it is drawn from go to a temporary directory",
    )
    demo.add_argument(
        "--status-every",
        metavar="S",
        type=_positive_seconds,
        default=None,
        help="print the live runner's status (tasks, phases, gates, leases, timers; "
        "never a value) as a table every S seconds (default: never)",
    )
    replay = sub.add_parser(
        "replay",
        parents=[common],
        help="replay a recorded trace through a fresh core",
        description="Feed a recorded trace to a fresh core and compare every command "
        "(docs/trace-format.md).",
    )
    replay.add_argument("trace", metavar="TRACE", help="the trace file to replay")
    replay.add_argument(
        "--monitor",
        action="store_true",
        help="also run the invariant monitor over the replayed steps",
    )
    timeline = sub.add_parser(
        "timeline",
        parents=[common],
        help="draw a trace's runs on a time axis as one HTML page",
        description="Draw every task run of the traces on a time axis: phases, gate "
        "intervals, lease, reads, env, errors (docs/timeline.md).",
    )
    timeline.add_argument("trace", metavar="TRACE", nargs="+", help="the trace file(s) to draw")
    timeline.add_argument(
        "-o",
        "--output",
        metavar="FILE.html",
        default=None,
        help="where to write the page (default: the first TRACE plus .html)",
    )
    timeline.add_argument(
        "--monitor",
        action="store_true",
        help="replay the traces with the invariant monitor and draw its violations in red",
    )
    conformance = sub.add_parser(
        "conformance",
        parents=[common],
        help="judge a runner against the protocol's conformance suite",
        description="Run the numbered conformance cases against a runner: a command "
        "the kit launches, or a runner listening on a WebSocket URL (docs/conformance.md).",
    )
    who = conformance.add_mutually_exclusive_group(required=True)
    who.add_argument("--runner-cmd", metavar="CMD", help="the runner command, launched per case")
    who.add_argument("--runner-url", metavar="URL", help="a runner listening on ws://...")
    conformance.add_argument(
        "--case",
        action="append",
        metavar="N",
        help="run only this case (number or name; repeatable)",
    )
    conformance.add_argument(
        "--implements", metavar="PARTS", help="the parts the runner implements, comma-separated"
    )
    conformance.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="run up to N cases at once (default 1; --runner-cmd only)",
    )
    conformance.add_argument("--json", metavar="FILE", help="write the JSON report to FILE")
    conformance.add_argument("--html", metavar="FILE", help="write the HTML report to FILE")
    sub.add_parser(
        "version",
        parents=[common],
        help="print the installed version",
        description="Print the installed version.",
    )
    return parser


# ---------------------------------------------------------------------- logging


def _log_level(verbose: int, quiet: int) -> int:
    """WARNING by default; each -v one level down to DEBUG, each -q one up past CRITICAL."""
    level = logging.WARNING - 10 * verbose + 10 * quiet
    return max(logging.DEBUG, min(level, logging.CRITICAL + 10))


@contextlib.contextmanager
def _stderr_logging(level: int) -> Iterator[None]:
    """A stderr handler at ``level`` on the ``leasegate`` logger, for the command's run.

    The handler has the level too: a part that lowers the logger's level for
    its own purposes (the demo taps every record for its leak check) does not
    make the CLI print more. Level, handler and propagation are restored after.
    """
    logger = logging.getLogger("leasegate")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


# ------------------------------------------------------------ up-front checks


class _UsageError(Exception):
    """A usage error found before the command runs (one line, names the path)."""


def _check_readable(path: str) -> None:
    if os.path.isdir(path):
        raise _UsageError(f"cannot read {path}: is a directory")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise _UsageError(f"cannot read {path}: {e.strerror or type(e).__name__}") from None


def _check_writable(path: str) -> None:
    """``path`` can be created or overwritten (nothing is created here)."""
    if os.path.isdir(path):
        raise _UsageError(f"cannot write {path}: is a directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise _UsageError(f"cannot write {path}: permission denied")
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise _UsageError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _UsageError(f"cannot write {path}: directory {parent} is not writable")


def _check_extras(args: argparse.Namespace) -> None:
    if args.command == "conformance":
        needed = ["boto3", "moto", "websockets"]
    elif args.command != "demo":
        return
    else:
        needed = ["rich", "boto3", "moto"]
    if getattr(args, "shell", None) == "trio":
        needed.append("trio")
    absent = missing_modules(needed)
    if absent:
        raise _UsageError(
            f"needs {', '.join(absent)} (not installed): pip install 'leasegate[demo]'"
        )


def _check(args: argparse.Namespace) -> None:
    """Every check that can fail before the command spends any time.

    Raises:
        _UsageError: an unreadable trace, an unwritable ``--trace`` path (or
            its ``.recovered`` companion), a missing extra.
    """
    if args.command == "replay":
        _check_readable(args.trace)
    elif args.command == "timeline":
        for path in args.trace:
            _check_readable(path)
        _check_writable(args.output or f"{args.trace[0]}.html")
    elif args.command == "demo":
        if args.trace is not None:
            _check_writable(args.trace)
            _check_writable(f"{args.trace}.recovered")
        if args.timeline is not None:
            _check_writable(args.timeline)
    _check_extras(args)


# ------------------------------------------------- interrupts and closed pipes


def _contains(exc: BaseException, kind: type[BaseException]) -> bool:
    """``exc`` is a ``kind``, or an exception group holding one at any depth."""
    if isinstance(exc, kind):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kind) is not None
    return False


@contextlib.contextmanager
def _sigterm_as_interrupt(seen: list[int]) -> Iterator[None]:
    """While the command runs, SIGTERM is handled like SIGINT.

    The handler re-raises the signal as SIGINT, so whatever handles SIGINT
    (trio's and asyncio's safe delivery, or Python's default) handles it;
    ``seen`` records that it was SIGTERM (exit 143, not 130). Nothing is
    installed off the main thread (``signal`` allows handlers only there).
    """

    def on_term(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        signal.raise_signal(signal.SIGINT)

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _quiet_stdout() -> None:
    """After a closed stdout pipe: point fd 1 at devnull so the interpreter's
    final flush does not fail again (the recipe of the ``signal`` docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no file descriptor (a test's capture)
        pass


def _stdout_is_devnull() -> bool:
    """fd 1 is ``/dev/null`` (a library that met a closed pipe, as ``rich``
    does, pointed it there before raising ``SystemExit``)."""
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ main


def _run(args: argparse.Namespace) -> int:
    if args.command == "version":
        print(_version())
        return EXIT_OK
    module = importlib.import_module(_COMMANDS[args.command])
    status: int = module.run(args)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``leasegate`` command.

    Args:
        argv: arguments without the program name (``sys.argv[1:]`` if None).

    Returns:
        The process exit status: :data:`EXIT_OK` (0), :data:`EXIT_FAILED`
        (1: a demo outcome missed, a replay divergence, a malformed trace),
        :data:`EXIT_USAGE` (2: bad arguments, an unreadable trace, an
        unwritable ``--trace`` path, a missing extra; one line on stderr
        naming the path or the extra), :data:`EXIT_INTERRUPTED` (130, SIGINT;
        stderr gets the one line ``interrupted``), :data:`EXIT_TERMINATED`
        (143, SIGTERM; ``terminated``), :data:`EXIT_BROKEN_PIPE` (141, stdout
        closed by its reader; nothing more is written to it).

    Never raises for an interrupt or a closed pipe, also wrapped in an
    exception group or answered by ``rich`` with ``SystemExit`` after it
    pointed stdout at ``/dev/null``; ``--help`` and ``--version`` return 0 instead of raising
    ``SystemExit``. Any other exception propagates unchanged.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, a usage error (argparse printed it)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        _check(args)
    except _UsageError as e:
        _say(f"leasegate {args.command}: {e}")
        return EXIT_USAGE
    level = _log_level(getattr(args, "verbose", 0), getattr(args, "quiet", 0))
    terms: list[int] = []
    piped = not _stdout_is_devnull()
    try:
        with _sigterm_as_interrupt(terms), _stderr_logging(level):
            return _run(args)
    except SystemExit:
        if piped and _stdout_is_devnull():  # rich's answer to a closed stdout
            return EXIT_BROKEN_PIPE
        raise
    except BaseException as e:
        if _contains(e, KeyboardInterrupt):
            if terms:
                _say("terminated")
                return EXIT_TERMINATED
            _say("interrupted")
            return EXIT_INTERRUPTED
        if _contains(e, BrokenPipeError):
            _quiet_stdout()
            return EXIT_BROKEN_PIPE
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
