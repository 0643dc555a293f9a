"""The shells' OpenTelemetry instruments over a whole run, and leasegate without the extra.

A real runtime on the async shell against the reference cloud and a moto
server on 127.0.0.1: start → grant → env snapshot → gate open → a floor
narrowing (``lease.stale`` with ``minRevision``) → re-grant → stop →
shutdown. The SDK's ``InMemoryMetricReader`` reads every instrument of
``leasegate.shells.metrics.INSTRUMENTS``; the test asserts exact values (the
run is scripted, so every count is known) and that no attribute holds a
secret, a credential id or a parameter name.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
import shell_kit as kit

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from leasegate.core.registry import OpenReader
from leasegate.core.replica import ReplicaManager
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.metrics import INSTRUMENTS, MetricsRecorder
from leasegate.testing import MemoryCloudLink, MotoServer

TASK = "task-metrics"
BOOT = "boot-metrics-1"
ROOT = Path(__file__).resolve().parents[2]


def _points(reader: InMemoryMetricReader) -> dict[str, Any]:
    """name -> (unit, {frozenset(attributes): value}) from one collection."""
    out: dict[str, Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "leasegate"
            for m in sm.metrics:
                series = {}
                for p in m.data.data_points:
                    key = frozenset(p.attributes.items())
                    series[key] = (p.count, p.min, p.max) if hasattr(p, "count") else p.value
                out[m.name] = (m.unit, series)
    return out


def _one(series: dict[Any, Any], **attrs: str) -> Any:
    return series[frozenset(attrs.items())]


@pytest.mark.integration
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_metrics_of_a_whole_run_on_the_reference_cloud(
    anyio_backend: str, moto_server: MotoServer, tmp_path: Path
) -> None:
    cloud = kit.reference_cloud(moto_server, task=TASK, boot=BOOT)
    transport = MemoryCloudLink(cloud).async_end()
    log: list[kit.LogEntry] = []
    engines = kit.RecordingEngines(tmp_path / "tasks", log)
    rt = kit.port_runtime("metrics", log, engines=engines, replica=ReplicaManager(boot_id=BOOT))
    reader = InMemoryMetricReader()
    recorder = MetricsRecorder(rt, meter_provider=MeterProvider(metric_readers=[reader]))
    opened: list[OpenReader] = []
    shell = AsyncRunnerShell(
        rt,
        transport,
        reader_factory=kit.moto_reader_factory(moto_server, opened),
        work=engines.work,
        recorder=recorder,
    )
    with anyio.fail_after(30):
        async with shell:
            start_id = await shell.begin_start(TASK, 1)
            await shell.wait_launch_ready(start_id)
            shell.end_start(start_id)
            at_open = _points(reader)
            await shell.close(TASK, 1, "stop")
            await shell.shutdown()
    got = _points(reader)
    # Every instrument moved, but the quarantine counter (no gate close failed).
    assert set(got) == set(INSTRUMENTS) - {"leasegate.quarantines"}
    for name, (unit, series) in got.items():
        _kind, want_unit, keys = INSTRUMENTS[name]
        assert unit == want_unit, name
        for attrs in series:
            assert {k for k, _ in attrs} == set(keys), name
            assert all("CANARY" not in str(v) and "claude" not in str(v) for _, v in attrs)
            assert all("/" not in str(v) for _, v in attrs), name  # no parameter name
    # While the gate was open: one run usable, its latency recorded once.
    _, runs = at_open["leasegate.runs"]
    assert _one(runs, phase="usable") == 1
    assert _one(runs, phase="waiting") == 0
    # After the stop and shutdown: no run registered.
    _, runs = got["leasegate.runs"]
    assert all(v == 0 for v in runs.values())
    _, latency = got["leasegate.gate.open_latency"]
    count, low, high = _one(latency)
    assert count == 1
    assert 0 <= low == high < 30_000
    assert got["leasegate.gate.closes"][1] == {frozenset({("reason", "stopped")}): 1}
    assert got["leasegate.lease.requests"][1] == {frozenset({("kind", "initial")}): 1}
    assert got["leasegate.lease.answers"][1] == {frozenset({("outcome", "grant")}): 1}
    # The grant's one engine credential and the project's one env value.
    assert got["leasegate.ssm.parameters"][1] == {frozenset({("outcome", "available")}): 2}
    count, _, _ = _one(got["leasegate.ssm.read.duration"][1], outcome="ok")
    assert count == 2
    cleanups = got["leasegate.cleanups"][1]
    assert cleanups == {
        frozenset({("consumer", c), ("outcome", "ok")}): 1
        for c in ("engines", "person", "mcp", "host")
    }
    assert set(got["leasegate.cleanup.duration"][1]) == {
        frozenset({("consumer", c)}) for c in ("engines", "person", "mcp", "host")
    }
    # The snapshot's begin, page and commit were each acked ok once; a begin
    # the cloud re-sent while the activation was pending (its 150 ms resend)
    # was refused with that code: how often depends on timing.
    acks = got["leasegate.env.acks"][1]
    ok = {k: v for k, v in acks.items() if ("code", "ok") in k}
    assert ok == {
        frozenset({("code", "ok"), ("phase", p)}): 1 for p in ("begun", "page", "complete")
    }
    assert set(acks) - set(ok) <= {frozenset({("code", "activation_pending"), ("phase", "begun")})}
    assert _one(got["leasegate.timers.armed"][1]) == 0
    assert _one(got["leasegate.env.ledger.entries"][1]) == 0
    assert _one(got["leasegate.env.ledger.bytes"][1]) == 0


def test_leasegate_imports_and_runs_without_opentelemetry(tmp_path: Path) -> None:
    """With ``opentelemetry`` unimportable (a ``sys.meta_path`` blocker), the shells
    and the demo's modules import, a runtime and the demo's runner (with its
    recorder) drive a start, no module of it is loaded, and only the metrics
    module asks for the extra."""
    script = textwrap.dedent(
        """
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(name)
                return None
        sys.meta_path.insert(0, Hide())
        import importlib.util
        real = importlib.util.find_spec
        hidden = lambda n, *a: None if n.startswith("opentelemetry") else real(n, *a)
        importlib.util.find_spec = hidden
        try:
            import opentelemetry
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("the blocker let opentelemetry through")
        import pathlib
        import leasegate.shells as shells
        from leasegate.shells import async_shell, thread_shell, status, cli
        from leasegate.shells.trace import replay
        from leasegate.shells.demo import DemoOptions, run_demo
        from leasegate.shells.demo._walk import Runner
        from leasegate.core.registry import SendFrame
        from leasegate.core.runtime import BeginStart
        from leasegate.core.wire.lease import LeaseRequest
        rt = shells.runner_runtime(boot_id="b1", consumers=shells.ConsumerSet(sys.argv[1]))
        cmds = rt.handle(BeginStart(now_ms=1, call_id=1, task_id="t", run_epoch=1))
        assert cmds, cmds
        # The demo's runner, as run_demo builds it without a meter provider.
        assert DemoOptions().meter_provider is None
        base = pathlib.Path(sys.argv[1])
        runner = Runner(
            boot_id="b2", seed="s", base=base / "tasks", agent_dir=base / "agent", trace=None
        )
        cmds = runner.runtime.handle(BeginStart(now_ms=1, call_id=1, task_id="t", run_epoch=1))
        sent = [c.frame for c in cmds if isinstance(c, SendFrame)]
        assert [type(f) for f in sent] == [LeaseRequest], cmds
        runner.recorder.record(BeginStart(now_ms=1, call_id=1, task_id="t", run_epoch=1), cmds)
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        try:
            shells.MetricsRecorder
        except shells.MissingExtraError as e:
            print("extra:", e.extra)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "extra: otel"


def test_docs_list_every_instrument_with_its_kind_unit_and_attributes() -> None:
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    rows = {
        cells[0].strip("` †"): cells
        for line in text.splitlines()
        if line.startswith("| `leasegate.")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert set(rows) == set(INSTRUMENTS)
    for name, (kind, unit, keys) in INSTRUMENTS.items():
        cells = rows[name]
        assert cells[1] == kind, name
        assert cells[2] == f"`{unit}`", name
        for key in keys:
            assert f"`{key}`" in cells[3], (name, key)
