"""The demo's walk: one task through a whole lease life, every outcome checked from facts.

The walk (:func:`run_demo`) drives a real :class:`~leasegate.core.runtime.CredentialRuntime`
on a real shell against the reference cloud and a real SSM endpoint:

1. start → grant → env snapshot → gate open (files on disk, env served);
2. rotation → narrowing with a floor → env change → denial and recovery;
3. stop (every file removed);
4. a second run whose runner dies mid-cleanup (a simulated crash: the shell
   is abandoned without a shutdown while its cleanup is held), then a new
   runner on the same journal directory recovers the owed cleanup before
   it starts a third run.

Each outcome is decided from observable facts — the registry's status
(gate, phase, revisions), the committed view, the files under the task
root, the env snapshot, the durable journal's owed rows, the cloud's
transcript, the shell's readers and errors — never assumed. The invariant
monitor (``leasegate.core.monitor``) watches every core step; the trace
recorder (``leasegate.shells.trace``) writes them when ``--trace`` is
given. Nothing secret is printed: files appear as names, sizes and
permissions, env values as sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
from rich.console import Console

from leasegate.core import Secret
from leasegate.core._base import Command, Event
from leasegate.core.monitor import InvariantMonitor, PortLog, Violation, wrap_ports
from leasegate.core.registry import Assignment, CleanupRequest, OpenReader, TaskView
from leasegate.core.runtime import ConsumerWork, CredentialFailure, CredentialRuntime
from leasegate.shells._recording import CoreRecorder, RecorderChain
from leasegate.shells.consumers import EngineConsumer
from leasegate.shells.ports import ConsumerSet, EngineFilesPort
from leasegate.shells.store import RuntimeJournal
from leasegate.shells.timers import wall_clock_ms
from leasegate.shells.trace import RuntimeConfig, TraceRecorder
from leasegate.testing import ReferenceCloud

from . import _world
from ._drivers import AsyncDriver, Driver, ShellHandle, SimulatedCrash, ThreadDriver, WorkTrap
from ._report import FileRow, Report
from ._status import print_status_every

__all__ = ["TASK", "DemoOptions", "DemoResult", "run_demo"]

TASK: Final = "task-demo"
#: Longest the walk waits for one outcome to show, in seconds.
STEP_TIMEOUT_S: Final = 20.0
_CRASHED: Final = CredentialFailure(message="the runner crashed")


@dataclasses.dataclass(slots=True)
class DemoOptions:
    """What ``leasegate demo`` was asked for.

    Attributes:
        shell: ``"trio"``, ``"asyncio"`` or ``"threads"``.
        ssm_endpoint: a user's SSM endpoint URL, or ``None`` for moto on 127.0.0.1.
        trace: a trace file path (the runner before the crash; the runner
            after it writes ``<trace>.recovered``), or ``None``.
        secret_prefix: the start of every secret value the cloud is given
            (tests use ``"CANARY-"``).
        console: where the timeline goes (``None``: stdout).
        workdir: where task files and the journal live (``None``: a fresh
            temporary directory, removed at the end).
        step_timeout_s: longest wait for one outcome to show, in seconds.
        status_every_s: print the live shell's ``status()`` as a table every
            this many seconds (``None``: never).
        meter_provider: an OpenTelemetry ``MeterProvider`` the runners'
            :class:`~leasegate.shells.metrics.MetricsRecorder` reports to
            (``None``: no metrics; needs the ``otel`` extra otherwise).
    """

    shell: str = "trio"
    ssm_endpoint: str | None = None
    trace: str | None = None
    secret_prefix: str = "demo-"  # noqa: S105 - a prefix of random values, not a secret
    console: Console | None = None
    workdir: str | None = None
    step_timeout_s: float = STEP_TIMEOUT_S
    status_every_s: float | None = None
    meter_provider: Any = None


@dataclasses.dataclass(slots=True)
class DemoResult:
    """What a demo run did.

    Attributes:
        exit_code: 0 when every expected outcome happened, else 1.
        outcomes: ``key -> (status, observed)`` in walk order.
        minted: every secret the cloud minted or stored (``Secret`` values).
        output: the demo's printed text.
        logs: the log records emitted during the demo (formatted).
        traces: the trace files written.
        violations: the monitor's violations (their messages hold no secret).
        elapsed_s: wall time, seconds.
    """

    exit_code: int
    outcomes: dict[str, tuple[str, str]]
    minted: tuple[Secret, ...]
    output: str
    logs: str
    traces: tuple[str, ...]
    violations: tuple[Violation, ...]
    elapsed_s: float


class _Stop(Exception):  # noqa: N818 - control flow: an outcome failed
    """An outcome failed; the walk stops and tears down."""


class _LogTap(logging.Handler):
    """Collects every log record of the demo (for the leak check), optionally echoing it."""

    def __init__(self, echo: Callable[[str, str], None] | None) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is not the demo's failure
            text = str(record.msg)
        self.lines.append(f"{record.levelname} {record.name}: {text}")
        if self._echo is not None and record.levelno >= logging.WARNING:
            self._echo(record.levelname, text)


@dataclasses.dataclass(frozen=True, slots=True)
class SelectiveCleanup:
    """What one selective engine cleanup was seen doing (facts, no secret).

    Attributes:
        removed: the credential ids the cleanup was asked to remove.
        gone: every removed identity's directory was absent right after it.
        kept: every other engine identity directory present before it was
            still there right after it.
    """

    removed: tuple[str, ...]
    gone: bool
    kept: bool


class _GateEngines(EngineFilesPort):
    """The engines port counting gate opens and closes (the demo shows them),
    and recording what each selective cleanup did and how many full
    cleanups ran (the narrowing outcome is decided from these)."""

    opens = 0
    closes = 0

    def __init__(self, consumer: EngineConsumer) -> None:
        super().__init__(consumer)
        self.selective: list[SelectiveCleanup] = []
        self.full_cleanups = 0

    def _serve(self, cmd: ConsumerWork) -> None:
        req = cmd.request
        if cmd.op != "cleanup" or not isinstance(req, CleanupRequest):
            super()._serve(cmd)
            return
        if req.mode == "full":
            super()._serve(cmd)
            self.full_cleanups += 1
            return
        root = self.consumer.root
        task = req.assignment.task_id
        removed = [i for i in req.removed if i.credential_class == "engine"]
        removed_dirs = {root.identity_dir(task, i) for i in removed}
        engine_dir = root.task_dir(task) / "engine"
        before = set(engine_dir.glob("*/*")) if engine_dir.is_dir() else set()
        super()._serve(cmd)
        self.selective.append(
            SelectiveCleanup(
                removed=tuple(i.credential_id for i in removed),
                gone=not any(d.exists() for d in removed_dirs),
                kept=all(d.exists() for d in before - removed_dirs),
            )
        )

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Count, then admit (:meth:`EngineFilesPort.open`)."""
        self.opens += 1
        super().open(assignment, view)

    def close(self, assignment: Assignment) -> None:
        """Count, then close (:meth:`EngineFilesPort.close`)."""
        self.closes += 1
        super().close(assignment)


class _MonitorRecorder:
    """A :class:`CoreRecorder` feeding each core step to the invariant monitor."""

    def __init__(self, monitor: InvariantMonitor, log: PortLog) -> None:
        self.monitor = monitor
        self.log = log

    def record(self, event: Event, commands: Sequence[Command]) -> None:
        """Hand the step and its port calls to the monitor (never raises)."""
        with contextlib.suppress(Exception):
            self.monitor.observe(event, list(commands), tuple(self.log.take()))


class Runner:
    """One runner "process": its consumers, runtime, durable journal and recorders.

    Args:
        boot_id: the runner's boot id (the env replica checks it).
        seed: the runtime's op-id seed.
        base: the task root's base directory.
        agent_dir: the agent directory of the durable journal.
        trace: a trace file for this runner, or ``None``.
        meter_provider: where its metrics go (``None``: no metrics).
    """

    def __init__(
        self,
        *,
        boot_id: str,
        seed: str,
        base: Path,
        agent_dir: Path,
        trace: str | None,
        meter_provider: Any = None,
    ) -> None:
        self.meter_provider = meter_provider
        self.boot_id = boot_id
        self.consumers = ConsumerSet(base)
        self.engines = _GateEngines(EngineConsumer(self.consumers.root))
        self.consumers.engines = self.engines
        self.journal = RuntimeJournal(agent_dir, "demo-runner")
        self.trap = WorkTrap()
        self.opened: list[OpenReader] = []
        self.trace_path = trace
        self.trace_recorder: TraceRecorder | None = None
        self.monitor = InvariantMonitor()
        self.recorder: CoreRecorder | None = None
        self.runtime = self._build(seed)

    def _build(self, seed: str) -> CredentialRuntime:
        ports = self.consumers.ports()
        self.monitor = InvariantMonitor()
        config = RuntimeConfig(
            runner_kind="owned", op_id_seed=seed, replica=True, boot_id=self.boot_id
        )
        if self.trace_path is not None:
            rec = TraceRecorder(self.trace_path, config, monitor=self.monitor)
            self.trace_recorder = rec
            self.recorder = rec
            e, m, p, f = rec.wrap_ports(**ports, files=None)
        else:
            log = PortLog()
            e, m, p, f = wrap_ports(**ports, files=None, log=log)
            self.recorder = _MonitorRecorder(self.monitor, log)
        runtime = config.build(engines=e, mcp=m, person=p, files=f)
        if self.meter_provider is not None:
            from leasegate.shells.metrics import MetricsRecorder

            metrics = MetricsRecorder(runtime, meter_provider=self.meter_provider)
            self.recorder = RecorderChain(self.recorder, metrics)
        return runtime

    def work_sync(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``ConsumerWork`` blocking (threads); held forever once the trap is armed."""
        if self.trap.catches(cmd):
            self.trap.wait_released()
            return _CRASHED
        return self.consumers.work_sync(cmd)

    async def work(self, cmd: ConsumerWork) -> CredentialFailure | None:
        """Serve ``ConsumerWork`` (async shell); held until cancelled once the trap is armed."""
        if self.trap.catches(cmd):
            await anyio.sleep_forever()
        return await self.consumers.work(cmd)

    def violations(self) -> tuple[Violation, ...]:
        """The monitor's violations so far."""
        return tuple(self.monitor.violations)

    def close_trace(self) -> None:
        """Close the trace file, if any (idempotent)."""
        rec, self.trace_recorder = self.trace_recorder, None
        if rec is not None:
            with contextlib.suppress(Exception):
                rec.close()


# --------------------------------------------------------------------- facts


def file_rows(base: Path) -> list[FileRow]:
    """Every file under ``base``: path, size, mode, and whether its dirs are all 0700."""
    rows: list[FileRow] = []
    if not base.exists():
        return rows
    for path in sorted(base.rglob("*")):
        if not path.is_file():
            continue
        st = path.stat()
        ok = True
        d = path.parent
        while d != base and base in d.parents:
            ok = ok and stat.S_IMODE(d.stat().st_mode) == 0o700
            d = d.parent
        rows.append(FileRow(str(path.relative_to(base)), st.st_size, stat.S_IMODE(st.st_mode), ok))
    return rows


def _contents(base: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(base.rglob("*")) if p.is_file())


def _env(view: Any) -> dict[str, str] | None:
    if view is None:
        return None
    return {
        e.state.key: e.value.reveal()
        for p in view.projects
        for e in p.entries
        if e.value is not None
    }


def _env_rows(view: Any) -> list[tuple[str, str, int]]:
    if view is None:
        return []
    return [
        (p.project_id, e.state.key, len(e.value.reveal().encode()))
        for p in view.projects
        for e in p.entries
        if e.value is not None
    ]


# ---------------------------------------------------------------------- walk


class _Walk:
    """The walk's state and steps (see the module doc)."""

    def __init__(
        self,
        report: Report,
        options: DemoOptions,
        endpoint: _world.Endpoint,
        demo: _world.DemoCloud,
        mint: _world.MintLog,
        workdir: Path,
    ) -> None:
        self.r = report
        self.options = options
        self.endpoint = endpoint
        self.cloud: ReferenceCloud = demo.cloud
        self.user = demo.user
        self.project = demo.project
        self.cloud_org = demo.org
        self.values = demo.values
        self.mint = mint
        self.base = workdir / "tasks"
        self.agent = workdir / "agent"
        self.runners: list[Runner] = []
        self.current: str = "start"
        self.driver: Driver = self._driver()

    # -- helpers

    def _driver(self) -> Driver:
        if self.options.shell == "threads":
            return ThreadDriver(self.cloud, self.endpoint.url)
        return AsyncDriver(self.options.shell, self.cloud, self.endpoint.url)

    def _trace_for(self, index: int) -> str | None:
        t = self.options.trace
        if t is None:
            return None
        return t if index == 0 else f"{t}.recovered"

    def runner(self, boot_id: str) -> Runner:
        index = len(self.runners)
        r = Runner(
            boot_id=boot_id,
            seed=f"demo-runner-{index + 1}",
            base=self.base,
            agent_dir=self.agent,
            trace=self._trace_for(index),
            meter_provider=self.options.meter_provider,
        )
        self.runners.append(r)
        return r

    def check(self, key: str, ok: bool, observed: str) -> None:
        self.current = key
        if not self.r.check(key, ok, observed):
            raise _Stop(key)

    async def until(
        self,
        key: str,
        pred: Callable[[], bool],
        what: str,
        sh: ShellHandle | None = None,
        run: int = 1,
    ) -> None:
        """Wait until ``pred()`` holds (polling); fail ``key`` after the step timeout.

        With ``sh``, a failure names the run's facts (phase, gate, revisions,
        engines in view, files) — never a value.
        """
        self.current = key
        limit = self.options.step_timeout_s
        with anyio.move_on_after(limit):
            while True:
                with contextlib.suppress(Exception):
                    if pred():
                        return
                await anyio.sleep(0.02)
        facts = ""
        if sh is not None:
            with contextlib.suppress(Exception):
                facts = "; " + self.describe(sh, run)
        self.check(key, False, f"timed out after {limit:g}s waiting for {what}{facts}")

    def describe(self, sh: ShellHandle, run: int) -> str:
        """The run's observable state in one line (no secret)."""
        st = self.status(sh)
        v = self.view(sh, run)
        files = [f.path.split("/")[2] for f in file_rows(self.base)]
        if st is None:
            reg = "not registered"
        else:
            reg = (
                f"phase {st.phase}, gate {'open' if st.gate_open else 'closed'}, "
                f"installed rev {st.installed_revision}, wanted {st.wanted_revision}, "
                f"floor {st.min_revision}, holds {st.holds}, pending {st.pending_op}, "
                f"timers {','.join(st.timers) or '-'}"
            )
        seen = "none" if v is None else f"rev {v.manifest_revision} engines {_engine_ids(v)}"
        return f"{reg}; view {seen}; file credentials {sorted(set(files))}"

    def status(self, sh: ShellHandle) -> Any:
        return sh.query(lambda rt: rt.registry.status(TASK))

    def view(self, sh: ShellHandle, run: int) -> TaskView | None:
        return sh.query(lambda rt: rt.registry.current_view(TASK, run, wall_clock_ms()))

    def env(self, sh: ShellHandle, run: int) -> Any:
        return sh.query(lambda rt: rt.env_snapshot(TASK, run, (self.project,)))

    def gate_open(self, sh: ShellHandle, run: int) -> bool:
        st = self.status(sh)
        return bool(
            st is not None
            and st.gate_open
            and st.assignment.run_epoch == run
            and sh.query(lambda rt: rt.open_run(TASK)) == run
        )

    def files_hold(self, *values: str) -> bool:
        text = _contents(self.base)
        return all(v in text for v in values)

    async def owed(self, runner: Runner) -> tuple[Any, ...]:
        return await anyio.to_thread.run_sync(runner.journal.owed)

    def fresh(self, **kw: bool) -> str:
        return _world.fresh(self.mint, self.options.secret_prefix, **kw)

    def assign(self, run: int, boot_id: str) -> None:
        org = self.cloud_org
        self.cloud.assign(TASK, run, org, self.user, [self.project], runner_boot_id=boot_id)

    # -- the walk

    async def walk(self) -> None:
        r1 = self.runner("demo-boot-1")
        self.r.step(
            f"runner 1 (boot demo-boot-1) on the {self.driver.name} shell; task root {self.base}"
        )
        every = self.options.status_every_s
        async with (
            self.driver.running(r1) as sh,
            print_status_every(every, sh.status, self.r.console),
        ):
            await self.first_run(sh, r1)
            await self.crash(sh, r1)
        r1.close_trace()
        r2 = self.runner("demo-boot-2")
        self.r.step("runner 2 (boot demo-boot-2) starts on the same journal directory")
        async with (
            self.driver.running(r2) as sh,
            print_status_every(every, sh.status, self.r.console),
        ):
            await self.recover(sh, r2)
            await self.restart(sh, r2)
            self.current = "shutdown"
            await sh.shutdown()
        r2.close_trace()
        facts = sh.facts()
        self.check(
            "shutdown",
            facts["left"] == 0 and not facts["errors"] and facts["open_readers"] == 0,
            f"{facts['left']} task(s)/thread(s) left, {len(facts['errors'])} shell error(s), "
            f"{facts['open_readers']} of {facts['readers']} reader(s) open",
        )

    async def first_run(self, sh: ShellHandle, r1: Runner) -> None:
        # 1. start
        self.assign(1, r1.boot_id)
        self.r.step(f"cloud assigns {TASK} run 1 to {self.user}; runner begins the start")
        start_id = await sh.begin_start(TASK, 1)
        await self.until(
            "start",
            lambda: ("in", "lease.request") in self.cloud.transcript,
            "the lease.request",
            sh,
            1,
        )
        self.check("start", True, f"start id {start_id}; lease.request reached the cloud")

        # 2. grant
        self.current = "grant"
        view = (await sh.wait_launch_ready(start_id)).view
        await sh.end_start(start_id)
        lease = self.cloud.granted_lease(TASK, 1)
        keys = {s.access_key_id for s in lease.sessions} if lease is not None else set()
        used = {o.session.access_key_id for o in r1.opened}
        entries = [*view.engines, *view.mcp, view.github, view.ssh]
        avail = [e for e in entries if e is not None and e.availability == "available"]
        names = ", ".join(e.manifest.credential_id for e in entries if e is not None)
        self.check(
            "grant",
            lease is not None
            and view.lease_id == lease.lease_id
            and bool(used)
            and used <= keys
            and len(avail) == len(entries) == 5,
            f"{view.lease_id} rev {view.manifest_revision}: {names} — "
            f"{len(avail)}/{len(entries)} available; {len(r1.opened)} reader(s), "
            f"all on the lease's own STS session",
        )

        # 3. env snapshot
        await self.until(
            "env-snapshot",
            lambda: _env(self.env(sh, 1)) == {"DATABASE_URL": self.values["DATABASE_URL"]},
            "the env snapshot",
            sh,
            1,
        )
        snap = self.env(sh, 1)
        self.r.env(_env_rows(snap))
        self.check(
            "env-snapshot",
            True,
            f"{self.project}: DATABASE_URL served, equal to the cloud's value "
            f"(stream {self._stream()})",
        )

        # 4. gate open, files on disk
        rows = file_rows(self.base)
        self.r.files(rows)
        leased = [self.values[k] for k in ("claude", "codex", "linear", "gh", "ssh")]
        gate = self.gate_open(sh, 1)
        private = sum(f.mode == 0o600 and f.dir_modes_ok for f in rows)
        held = sum(self.files_hold(v) for v in leased)
        self.check(
            "gate-open",
            gate and len(rows) >= 5 and private == len(rows) and held == len(leased),
            f"gate {'open' if gate else 'NOT open'} on run 1; {len(rows)} files, "
            f"{private} of them 0600 in 0700 dirs; {held} of {len(leased)} leased values on disk",
        )

        # 5. rotation
        old_ver = _observed(view, "claude")
        new_key = self.fresh()
        old_key, self.values["claude"] = self.values["claude"], new_key
        ver = self.cloud.rotate("claude", env={"ANTHROPIC_API_KEY": new_key})
        self.r.step(f"cloud rotates claude: new SSM version {ver} (credential.changed)")
        await self.until(
            "rotation",
            lambda: (
                _observed(self.view(sh, 1), "claude") == ver
                and self.gate_open(sh, 1)
                and self.files_hold(new_key)
                and not self.files_hold(old_key)
            ),
            "the rotated version on disk",
            sh,
            1,
        )
        self.check(
            "rotation",
            True,
            f"claude SSM version {old_ver} → {ver} read pinned, engine.env rewritten, "
            "old value gone; gate open",
        )

        # 6. narrowing with a floor
        closes = r1.engines.closes
        n_selective = len(r1.engines.selective)
        n_full = r1.engines.full_cleanups
        self.cloud.narrow(TASK, 1, remove=["codex"], floor=True)
        floor = self.cloud.manifest_revision(TASK, 1)
        self.r.step(f"cloud narrows run 1: codex removed, floor revision {floor} (lease.stale)")
        raced: list[str] = []

        def narrowed() -> bool:
            st = self.status(sh)
            if (
                not raced
                and st is not None
                and st.pending_op is None
                and st.installed_revision is None
                and "retry" in st.timers
            ):
                # The grant asked for at the notice was still being read when the
                # narrowing's own cleanup dropped the old bundle: that grant went
                # stale and the registry waits for its 30 s retry (LR-086, LR-035).
                # The control plane prompts it instead (lease.stale, no floor; LR-080).
                raced.append("prompted")
                self.cloud.narrow(TASK, 1, floor=None)
                self.r.note(
                    "the grant raced the narrowing's cleanup and went stale; "
                    "instead of waiting 30 s for the retry, the cloud prompts again"
                )
            v = self.view(sh, 1)
            return (
                v is not None
                and _engine_ids(v) == ["claude"]
                and v.manifest_revision >= floor
                and self.gate_open(sh, 1)
                and not any("/codex/" in f.path for f in file_rows(self.base))
            )

        await self.until("narrowing", narrowed, "the narrowed view", sh, 1)
        st = self.status(sh)
        v = self.view(sh, 1)
        self.r.files(file_rows(self.base))
        # The removed credential's files must be seen going by the narrowing's own
        # selective cleanup, the others staying: a grant that races the narrowing
        # can escalate to a full cleanup (LR-131), which would remove them anyway.
        selective = [c for c in r1.engines.selective[n_selective:] if "codex" in c.removed]
        exact = any(c.gone and c.kept for c in selective)
        fulls = r1.engines.full_cleanups - n_full
        self.check(
            "narrowing",
            st.min_revision == floor
            and v is not None
            and v.manifest_revision >= floor
            and r1.engines.closes > closes
            and exact,
            f"floor {st.min_revision}, view rev {v.manifest_revision if v else '?'}; "
            "gate closed, then open again on the narrowed view; "
            + (
                "selective cleanup removed exactly codex's files"
                if exact
                else f"NO selective cleanup seen removing exactly codex's files "
                f"({len(selective)} ran)"
            )
            + (f"; then {fulls} full cleanup(s) before the re-grant" if fulls else "")
            + (" (re-prompted after a stale grant)" if raced else ""),
        )

        # 7. env change
        new_db = self.fresh(url=True)
        flags = self.fresh()
        self.values["DATABASE_URL"] = new_db
        self.cloud.set_env_value(self.project, "DATABASE_URL", new_db)
        self.cloud.set_env_value(self.project, "FEATURE_FLAGS", flags)
        self.r.step("cloud changes DATABASE_URL and adds FEATURE_FLAGS (live env applies)")
        await self.until(
            "env-change",
            lambda: _env(self.env(sh, 1)) == {"DATABASE_URL": new_db, "FEATURE_FLAGS": flags},
            "the changed env",
            sh,
            1,
        )
        self.r.env(_env_rows(self.env(sh, 1)))
        state = self.cloud.delivery_state(TASK, 1) or {}
        self.check(
            "env-change",
            True,
            f"both values served; live applies up to sequence {state.get('next_sequence', 1) - 1}",
        )

        # 8. denial
        lease_before = self.cloud.granted_lease(TASK, 1)
        closes = r1.engines.closes
        self.cloud.deny(TASK, 1, "demo: access revoked by the control plane")
        self.r.step("cloud denies run 1 (lease.stale, then lease.deny to the request)")
        await self.until(
            "denial",
            lambda: (
                ("out", "lease.deny") in self.cloud.transcript
                and self.status(sh) is not None
                and not self.status(sh).gate_open
                and self.status(sh).phase == "waiting"
                and not file_rows(self.base)
            ),
            "the denial's cleanup",
            sh,
            1,
        )
        st = self.status(sh)
        self.check(
            "denial",
            sh.query(lambda rt: rt.open_run(TASK)) is None,
            f"gate closed ({r1.engines.closes - closes} close call(s)), every file removed, phase "
            f"{st.phase}, timers armed: {', '.join(st.timers) or 'none'}",
        )

        # 9. recovery from the denial
        self.cloud.allow(TASK, 1)
        self.cloud.narrow(TASK, 1, floor=None)
        self.r.step("cloud allows run 1 again and prompts the runner (lease.stale, no floor)")
        await self.until(
            "deny-recovery",
            lambda: (
                self.gate_open(sh, 1)
                and (self.view(sh, 1) is not None)
                and lease_before is not None
                and self.view(sh, 1).lease_id != lease_before.lease_id  # type: ignore[union-attr]
                and self.files_hold(self.values["claude"])
            ),
            "a new grant",
            sh,
            1,
        )
        v = self.view(sh, 1)
        self.r.files(file_rows(self.base))
        self.check(
            "deny-recovery",
            v is not None and _engine_ids(v) == ["claude"],
            f"new lease {v.lease_id if v else '?'} rev {v.manifest_revision if v else '?'}; "
            "gate open; files back",
        )

        # 10. stop
        self.r.step("runner stops run 1")
        await sh.close(TASK, 1, "stop")
        owed = await self.owed(r1)
        rows = file_rows(self.base)
        self.check(
            "stop",
            sh.query(lambda rt: rt.open_run(TASK)) is None
            and not rows
            and not (self.base / TASK).exists()
            and owed == (),
            f"{len(rows)} files left, task directory "
            f"{'present' if (self.base / TASK).exists() else 'removed'}, "
            f"{len(owed)} cleanup(s) owed in the journal",
        )

    async def crash(self, sh: ShellHandle, r1: Runner) -> None:
        self.assign(2, r1.boot_id)
        self.r.step("cloud assigns run 2; runner starts it")
        start_id = await sh.begin_start(TASK, 2)
        self.current = "crash"
        await sh.wait_launch_ready(start_id)
        await sh.end_start(start_id)
        n_files = len(file_rows(self.base))
        self.r.step("runner stops run 2 … and dies in the middle of the cleanup")
        r1.trap.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._close_quietly, sh, 2)
            await self.until("crash", r1.trap.hit.is_set, "the cleanup to begin")
            await anyio.sleep(0.2)  # the other consumers' cleanups reach the trap too
            owed = await self.owed(r1)
            rows = file_rows(self.base)
            self.check(
                "crash",
                (TASK, 2) in [(o.task_id, o.run_epoch) for o in owed] and len(rows) == n_files > 0,
                f"cleanup of run 2 owed on disk ({owed[0].reason if owed else '—'}); "
                f"{len(rows)} files left behind; held: "
                + ", ".join(f"{c} {o}" for c, o in r1.trap.held),
            )
            raise SimulatedCrash

    async def _close_quietly(self, sh: ShellHandle, run: int) -> None:
        with contextlib.suppress(Exception):
            await sh.close(TASK, run, "stop")

    async def recover(self, sh: ShellHandle, r2: Runner) -> None:
        self.current = "crash-recovery"
        owed = await self.owed(r2)
        left = len(file_rows(self.base))
        rows_text = ", ".join(f"{o.task_id} run {o.run_epoch} ({o.reason})" for o in owed)
        self.r.note(f"journal owes: {rows_text or 'nothing'}")
        self.r.step("runner 2 recovers the owed cleanups before any start")
        await sh.recover()
        after = await self.owed(r2)
        rows = file_rows(self.base)
        self.check(
            "crash-recovery",
            bool(owed) and after == () and not rows and ("host", "remove-paths") in sh.work_log,
            f"{len(owed)} owed cleanup(s) run: {left} → {len(rows)} files; {len(after)} owed after",
        )

    async def restart(self, sh: ShellHandle, r2: Runner) -> None:
        self.assign(3, r2.boot_id)
        self.r.step("cloud assigns run 3; runner 2 starts it")
        self.current = "restart"
        start_id = await sh.begin_start(TASK, 3)
        await sh.wait_launch_ready(start_id)
        await sh.end_start(start_id)
        await self.until(
            "restart",
            lambda: (
                self.gate_open(sh, 3)
                and _env(self.env(sh, 3)) is not None
                and self.files_hold(self.values["claude"])
            ),
            "run 3's open gate",
            sh,
            3,
        )
        n = len(file_rows(self.base))
        await sh.close(TASK, 3, "stop")
        owed = await self.owed(r2)
        rows = file_rows(self.base)
        self.check(
            "restart",
            n > 0 and not rows and owed == (),
            f"run 3 gate open with {n} files and env served; stopped: {len(rows)} files, "
            f"{len(owed)} owed",
        )

    def _stream(self) -> str:
        state = self.cloud.delivery_state(TASK, 1) or {}
        return str(state.get("stream_id", "?"))


def _observed(view: Any, cid: str) -> int | None:
    if view is None:
        return None
    for e in view.engines:
        if e.manifest.credential_id == cid:
            return e.observed_version  # type: ignore[no-any-return]
    return None


def _engine_ids(view: Any) -> list[str] | None:
    if view is None:
        return None
    return [e.manifest.credential_id for e in view.engines]


# ---------------------------------------------------------------------- entry


class _TeeStream:
    """A text stream that copies every write into a list, then passes it on.

    Any other attribute (``isatty``, ``fileno``, ``encoding``, …) is the
    wrapped stream's, so ``rich`` and loggers see the real stream.
    """

    def __init__(self, stream: Any, sink: list[str]) -> None:
        self._stream = stream
        self._sink = sink

    def write(self, text: str) -> int:
        """Copy ``text``, then write it to the wrapped stream."""
        self._sink.append(text)
        return int(self._stream.write(text))

    def writelines(self, lines: Iterable[str]) -> None:
        """:meth:`write` each line."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _std_tap() -> Iterator[list[str]]:
    """Copy every Python-level write to ``sys.stdout``/``sys.stderr`` while the
    demo runs (for the leak check: a component that prints a value straight
    to the process's streams bypasses the demo's console and its loggers).
    Writes below Python (a C library or a child process on fd 1/2) are not seen.
    """
    sink: list[str] = []
    saved = sys.stdout, sys.stderr
    sys.stdout = _TeeStream(saved[0], sink)
    sys.stderr = _TeeStream(saved[1], sink)
    try:
        yield sink
    finally:
        sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _log_tap(report: Report, *, isolate: bool) -> Iterator[_LogTap]:
    """Tap the ``leasegate`` loggers. Isolated (the CLI), they are set to DEBUG
    while the demo runs so that every record is created and searched for
    secrets (a DEBUG record a host could enable is checked too); only
    WARNING and above are echoed in the timeline. Level and propagation are
    restored afterwards."""
    tap = _LogTap(report.log_line)
    logger = logging.getLogger("leasegate")
    logger.addHandler(tap)
    saved = logger.propagate, logger.level
    if isolate:
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
    try:
        yield tap
    finally:
        logger.removeHandler(tap)
        logger.propagate = saved[0]
        logger.setLevel(saved[1])


def run_demo(options: DemoOptions, *, isolate_logs: bool = False) -> DemoResult:
    """Run the demo (blocking); print the timeline and the final table.

    Args:
        options: see :class:`DemoOptions`.
        isolate_logs: keep the ``leasegate`` loggers' records out of the root
            logger while the demo runs and tap them from DEBUG up for the
            leak check (the CLI; WARNING and above are shown in the
            timeline instead).

    Returns:
        A :class:`DemoResult`; ``exit_code`` 0 only if every expected
        outcome of ``_report.OUTCOMES`` passed.

    Never raises for a failed outcome; an unexpected exception fails the
    current outcome with its type name only (an exception's text could
    hold a secret).
    """
    with contextlib.ExitStack() as owned:
        if options.workdir is None:
            # The one owner of the demo's temporary directory (task files of
            # every run, the crashed runner's too, and the journal): removed
            # on success, failure, Ctrl-C and any other exception.
            made = tempfile.TemporaryDirectory(prefix="leasegate-demo-", ignore_cleanup_errors=True)
            workdir = Path(owned.enter_context(made))
        else:
            workdir = Path(options.workdir)
        return _run_demo_in(workdir, options, isolate_logs=isolate_logs)


def _run_demo_in(workdir: Path, options: DemoOptions, *, isolate_logs: bool) -> DemoResult:
    """:func:`run_demo` with task files and the journal under ``workdir``."""
    report = Report(options.console, title=f"leasegate demo — {options.shell} shell")
    mint = _world.MintLog()
    endpoint: _world.Endpoint | None = None
    walk: _Walk | None = None
    traces: list[str] = []
    with _std_tap() as std, _log_tap(report, isolate=isolate_logs) as tap:
        try:
            endpoint = _world.open_endpoint(options.ssm_endpoint)
            where = "moto on " if endpoint.embedded else "your endpoint "
            sts = "STS AssumeRole" if endpoint.has_sts else "synthetic session keys"
            report.step(f"SSM endpoint: {where}{endpoint.url} ({sts})")
            demo = _world.build_cloud(
                endpoint, mint, prefix=options.secret_prefix, clock=wall_clock_ms
            )
            report.step(
                "reference cloud ready: engines claude, codex; MCP linear; GitHub; SSH; env"
            )
            walk = _Walk(report, options, endpoint, demo, mint, workdir)
            backend = "asyncio" if options.shell == "threads" else options.shell
            anyio.run(_guarded, walk, backend=backend)
        except ImportError:
            report.check(
                "start",
                False,
                "moto is not installed: pip install -e '.[demo]' (or pass --ssm-endpoint URL)",
            )
        except Exception as e:  # noqa: BLE001 - setup failed: name the type, never the text
            if walk is None:
                where = "the embedded moto server" if endpoint is None else "the SSM endpoint"
                report.check("start", False, f"{where} failed: {type(e).__name__}")
            else:
                report.check(walk.current, False, f"unexpected {type(e).__name__}")
        finally:
            if walk is not None:
                for r in walk.runners:
                    r.trap.release()
                    r.close_trace()
                    if r.trace_path is not None and os.path.exists(r.trace_path):
                        traces.append(r.trace_path)
            if endpoint is not None:
                endpoint.stop()
        _final_checks(report, walk, mint, tap, traces, std)
        report.skip_rest()
        violations = tuple(v for r in (walk.runners if walk else []) for v in r.violations())
        report.table(
            extra=[
                ("shell", options.shell),
                ("SSM endpoint", "moto (embedded)" if options.ssm_endpoint is None else "your URL"),
                ("trace", ", ".join(traces) if traces else "not written (use --trace FILE)"),
                *(("replay", f"leasegate replay {t} --monitor") for t in traces),
            ]
        )
        output = report.text()
        # The table itself is checked too, with everything written to the streams.
        leaked = max(mint.found_in(output), mint.found_in("".join(std)))
        if leaked:  # never expected
            report.console.print(
                f"[bold red]FAIL[/] {leaked} minted secret(s) in the output or stdout/stderr"
            )
    ok = report.passed and not leaked
    return DemoResult(
        exit_code=0 if ok else 1,
        outcomes={k: (o.status or "skip", o.observed) for k, o in report.outcomes.items()},
        minted=mint.values(),
        output=output,
        logs="\n".join(tap.lines),
        traces=tuple(traces),
        violations=violations,
        elapsed_s=report.elapsed(),
    )


async def _guarded(walk: _Walk) -> None:
    try:
        await walk.walk()
    except* _Stop:
        pass
    except* Exception as eg:  # noqa: BLE001 - fail the current outcome by type name only
        names = sorted({type(e).__name__ for e in eg.exceptions})
        walk.r.check(walk.current, False, f"unexpected {', '.join(names)}")


def _final_checks(
    report: Report,
    walk: _Walk | None,
    mint: _world.MintLog,
    tap: _LogTap,
    traces: list[str],
    std: list[str],
) -> None:
    if walk is None or report.outcomes["shutdown"].status != "pass":
        return
    violations = [v for r in walk.runners for v in r.violations()]
    steps = sum(r.monitor.steps for r in walk.runners)
    props = sorted({v.property for v in violations})
    report.check(
        "monitor",
        not violations and steps > 0,
        f"{steps} core steps of {len(walk.runners)} runners watched; "
        + (f"{len(violations)} violation(s): {', '.join(props)}" if violations else "no violation"),
    )
    texts = {
        "output": report.text(),
        "stdout/stderr": "".join(std),
        "logs": "\n".join(tap.lines),
    }
    for path in traces:
        texts[f"trace {Path(path).name}"] = Path(path).read_text(errors="replace")
    found = {name: mint.found_in(text) for name, text in texts.items()}
    report.check(
        "no-leak",
        not any(found.values()),
        f"{len(mint.values())} minted secrets searched in "
        + ", ".join(f"{name} ({n} found)" for name, n in found.items()),
    )
