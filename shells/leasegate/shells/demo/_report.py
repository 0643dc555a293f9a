"""The demo's timeline and final table (rich), and its list of expected outcomes.

Nothing secret is ever handed to this module: callers pass names, sizes,
permissions, counts and revision numbers only. :class:`Report` records what
it printed (``rich`` ``record=True``) so the demo can check at the end that
no minted secret reached its own output.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Final, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["OUTCOMES", "FileRow", "Outcome", "Report"]

#: The expected outcomes, in the order the demo walks them: (key, what must happen).
OUTCOMES: Final[tuple[tuple[str, str], ...]] = (
    ("start", "begin start sends lease.request"),
    ("grant", "grant read through the lease's own STS session; every credential available"),
    ("env-snapshot", "env snapshot streamed by the cloud and read from SSM"),
    ("gate-open", "gate open; files 0600 in 0700 dirs hold the leased values"),
    ("rotation", "rotated credential's new SSM version installed; gate open"),
    ("narrowing", "narrowed with a floor: removed credential's files gone; view at the floor"),
    ("env-change", "env change streamed live and served"),
    ("denial", "lease.deny: gate closed, every file removed"),
    ("deny-recovery", "re-allowed: a new grant, gate open again, files back"),
    ("stop", "stop: gate closed, every file removed, no cleanup owed"),
    ("crash", "runner dies mid-cleanup: cleanup owed on disk, files left behind"),
    ("crash-recovery", "new runner recovers the owed cleanup first: files gone, nothing owed"),
    ("restart", "after recovery a new run reaches an open gate and stops clean"),
    ("shutdown", "shutdown leaves no task, open reader or shell error"),
    ("monitor", "invariant monitor: no violation"),
    ("no-leak", "no minted secret in the output, the logs or the trace"),
)

Status = Literal["pass", "fail", "skip"]


@dataclasses.dataclass(slots=True)
class Outcome:
    """One expected outcome and what was observed.

    Attributes:
        key: the outcome's id (see :data:`OUTCOMES`).
        expected: what must happen.
        status: ``None`` until checked; ``pass``, ``fail`` or ``skip``
            (not reached because an earlier outcome failed).
        observed: the facts seen (no secret: names, counts, sizes).
        at_s: seconds since the demo began when it was checked.
    """

    key: str
    expected: str
    status: Status | None = None
    observed: str = ""
    at_s: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class FileRow:
    """A materialized file as the demo shows it: never its content.

    Attributes:
        path: relative to the task root.
        size: bytes.
        mode: permission bits, e.g. ``0o600``.
        dir_modes_ok: every directory from the task root down is ``0700``.
    """

    path: str
    size: int
    mode: int
    dir_modes_ok: bool


def _console() -> Console:
    """A recording console on stdout; 120 columns when stdout is not a terminal."""
    probe = Console()
    width = None if probe.is_terminal else 120
    return Console(record=True, highlight=False, width=width)


class Report:
    """The timeline printer and the outcome checklist.

    Args:
        console: where to print (``None``: a recording console on stdout).
        title: the heading.
    """

    def __init__(self, console: Console | None = None, *, title: str = "leasegate demo") -> None:
        self.console = console or _console()
        self._t0 = time.monotonic()
        self.outcomes: dict[str, Outcome] = {k: Outcome(k, e) for k, e in OUTCOMES}
        self.console.rule(f"[bold]{title}")

    # ------------------------------------------------------------ timeline

    def elapsed(self) -> float:
        """Seconds since the report began."""
        return time.monotonic() - self._t0

    def step(self, text: str) -> None:
        """A timeline line: what the demo does now."""
        self.console.print(f"[dim]{self.elapsed():6.2f}s[/] [bold cyan]▶[/] {text}")

    def note(self, text: str) -> None:
        """A timeline detail line (indented, dim)."""
        self.console.print(f"[dim]{'':7} │ {text}[/]", markup=True)

    def log_line(self, level: str, text: str) -> None:
        """A log record of the runner, shown in the timeline (text has no secret)."""
        line = Text(f"{'':7} │ log {level.lower()}: ", style="dim")
        line.append(text, style="dim yellow")
        self.console.print(line)

    def files(self, rows: Iterable[FileRow]) -> None:
        """Show materialized files: path, size, permissions (never content)."""
        rows = list(rows)
        if not rows:
            self.note("no file under the task root")
            return
        table = Table(show_edge=False, box=None, pad_edge=False, padding=(0, 2))
        table.add_column("file (under the task root)", style="dim")
        table.add_column("bytes", justify="right", style="dim")
        table.add_column("mode", style="dim")
        table.add_column("dirs 0700", style="dim")
        for r in rows:
            table.add_row(r.path, str(r.size), oct(r.mode), "yes" if r.dir_modes_ok else "NO")
        self.console.print(table, style="dim")

    def env(self, rows: Iterable[tuple[str, str, int]]) -> None:
        """Show served env values: project, key, value size in bytes (never the value)."""
        for project, key, size in rows:
            self.note(f"env {project}.{key} = <{size} bytes, hidden>")

    # ------------------------------------------------------------ outcomes

    def check(self, key: str, ok: bool, observed: str) -> bool:
        """Record outcome ``key`` as passed or failed; print it; return ``ok``."""
        o = self.outcomes[key]
        o.status = "pass" if ok else "fail"
        o.observed = observed
        o.at_s = self.elapsed()
        mark = "[bold green]✓[/]" if ok else "[bold red]✗[/]"
        self.console.print(f"[dim]{o.at_s:6.2f}s[/] {mark} [bold]{key}[/]: {observed}")
        return ok

    def skip_rest(self) -> None:
        """Mark every outcome not checked yet as skipped (an earlier one failed)."""
        for o in self.outcomes.values():
            if o.status is None:
                o.status = "skip"
                o.observed = "not reached"

    @property
    def passed(self) -> bool:
        """``True`` only if every expected outcome passed."""
        return all(o.status == "pass" for o in self.outcomes.values())

    def table(self, *, extra: Iterable[tuple[str, str]] = ()) -> None:
        """Print the final table of outcomes, then ``extra`` (label, value) lines."""
        table = Table(title="outcomes", title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("outcome")
        table.add_column("expected")
        table.add_column("observed")
        table.add_column("", justify="center")
        table.add_column("at", justify="right")
        marks = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "skip": "[yellow]–[/]"}
        for i, o in enumerate(self.outcomes.values(), 1):
            table.add_row(
                str(i),
                o.key,
                o.expected,
                o.observed,
                marks.get(o.status or "skip", "?"),
                "" if o.status == "skip" else f"{o.at_s:.2f}s",
            )
        self.console.print(table)
        for label, value in extra:
            self.console.print(f"[bold]{label}:[/] {value}")
        n_pass = sum(o.status == "pass" for o in self.outcomes.values())
        verdict = "[bold green]PASS[/]" if self.passed else "[bold red]FAIL[/]"
        self.console.print(
            f"{verdict} {n_pass}/{len(self.outcomes)} outcomes in {self.elapsed():.1f}s"
        )

    def text(self) -> str:
        """Everything printed so far, as plain text (for the leak check)."""
        return self.console.export_text(clear=False)
