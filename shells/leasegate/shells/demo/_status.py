"""The demo's live status view: a runner's ``status()`` as a rich table.

``leasegate demo --status-every S`` prints :func:`status_table` of the live
shell every ``S`` seconds while the walk runs (:func:`print_status_every`).
Only what :class:`~leasegate.shells.status.RunnerStatus` holds is shown:
ids, phases, revisions, times, counts — never a value.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import anyio
from rich.console import Console
from rich.table import Table

from leasegate.shells.status import PendingOps, RunnerStatus

__all__ = ["print_status_every", "status_table"]


def _pending(p: PendingOps) -> str:
    parts = [
        *(["lease request"] if p.lease_request else []),
        *(f"{n} {what}" for n, what in ((p.grants, "grant"), (p.installs, "install")) if n),
        *([f"{p.cleanups} cleanup"] if p.cleanups else []),
        *(["full cleanup"] if p.full_cleanup else []),
        *([f"{p.refreshes} refresh"] if p.refreshes else []),
        *([f"{p.waiters} waiter"] if p.waiters else []),
        *([f"{p.holds} hold"] if p.holds else []),
    ]
    return ", ".join(parts) or "-"


def _in_s(at_ms: int | None, now_ms: int) -> str:
    return "-" if at_ms is None else f"in {(at_ms - now_ms) / 1000:.0f}s"


def status_table(status: RunnerStatus, *, title: str = "runner status") -> Table:
    """One row per task of ``status``: run, phase, gate, lease expiry (relative to
    ``status.now_ms``), manifest revision and floor, env cursor, pending
    operations, armed timers and owed cleanups; the caption counts the
    runner's armed timers, owed cleanups and tracked work."""
    table = Table(title=title, title_justify="left", show_edge=False)
    for name in ("task", "run", "phase", "gate", "lease expires", "rev / floor", "env cursor"):
        table.add_column(name)
    table.add_column("pending")
    table.add_column("timers")
    table.add_column("owed")
    for t in status.tasks:
        gate = "open" if t.gate_open else "closed"
        if t.quarantined:
            gate += " (quarantined)"
        cursor = "-" if t.env_cursor is None else f"#{t.env_cursor.sequence}"
        rev = "-" if t.manifest_revision is None else str(t.manifest_revision)
        table.add_row(
            t.task_id,
            str(t.run_epoch),
            t.phase,
            gate,
            _in_s(t.lease_expires_at_ms, status.now_ms),
            f"{rev} / {t.revision_floor}",
            cursor,
            _pending(t.pending),
            ", ".join(t.timers) or "-",
            ", ".join(f"run {run} ({reason})" for run, reason in t.owed_cleanups) or "-",
        )
    owed = "unreadable" if status.owed_cleanups is None else str(len(status.owed_cleanups))
    table.caption = (
        f"{len(status.tasks)} task(s); {status.timers_armed} timer(s) armed; "
        f"{owed} cleanup(s) owed; {len(status.tracked)} tracked operation(s)"
    )
    table.caption_justify = "left"
    return table


@contextlib.asynccontextmanager
async def print_status_every(
    every_s: float | None, status: Callable[[], RunnerStatus], console: Console
) -> AsyncIterator[None]:
    """While the block runs, print ``status_table(status())`` every ``every_s`` seconds.

    ``None`` prints nothing. A ``status()`` that raises is skipped (the
    shell is stopping). The printer is cancelled when the block ends.
    """
    if every_s is None:
        yield
        return

    async def loop() -> None:
        while True:
            await anyio.sleep(every_s)
            try:
                st = status()
            except Exception:  # noqa: BLE001, S112 - a stopping shell: skip this tick
                continue
            console.print(status_table(st))

    async with anyio.create_task_group() as tg:
        tg.start_soon(loop)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
