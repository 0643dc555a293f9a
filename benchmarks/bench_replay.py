"""Benchmark trace replay (not a test): events per second over a large trace.

Builds a trace of at least ``--events`` events (default 1,000,000) by driving
the real runtime core (lease registry, no env replica) through whole task
lives — ``BeginStart`` → ``lease.request`` → a grant of one engine and one
MCP credential → their Parameter Store read → the install sequence → the open
fan-out → ``AwaitLaunchReady`` → ``AcquireHold`` → ``ReleaseHold`` →
``CloseAssignment`` with its full cleanup (journal, close, drain, quiesce,
remove paths, settle) — recorded by a
:class:`~leasegate.shells.trace.TraceRecorder` (ports wrapped, secrets
redacted), task after task in one core. Then it replays the trace with
:func:`~leasegate.shells.trace.replay_trace` and measures, in the same run,
the baseline: ``json.loads`` of every line of the same file.

Reports (stderr summary, one JSON document on stdout and in ``--out``):
replay events per second, the ratio of replay time to the ``json.loads``
baseline, the bare core's events per second on the same events (time inside
``runtime.handle`` while recording) and replay's ratio to it, recording
events per second, the trace size.

Usage::

    python3 benchmarks/bench_replay.py [--events 1000000] [--out PATH] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bench_registry import ORG, T0, USER, _lease
from bench_runtime import _Port, answer_commands
from leasegate.core import Secret, decode, sha256_hex
from leasegate.core.registry import (
    TaskView,
)
from leasegate.core.runtime import (
    AcquireHold,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    HoldInfo,
    ReleaseHold,
)
from leasegate.core.wire.credentials import (
    EngineValue,
    McpHeader,
    McpValue,
    credential_parameter_name,
    encode_leased_value,
    parse_parameter_name,
)
from leasegate.core.wire.lease import Manifest, canonical_manifest_json
from leasegate.shells.trace import RuntimeConfig, TraceRecorder, replay_trace


def _manifest() -> dict[str, Any]:
    def p(cls: str, cid: str) -> str:
        return credential_parameter_name(ORG, USER, cls, cid)  # type: ignore[arg-type]

    return {
        "engines": [
            {
                "credentialId": "engine-0",
                "engine": "claude-code",
                "revision": "rev-0",
                "parameter": p("engine", "engine-0"),
                "version": 3,
                "sessionId": "s1",
                "authKind": "env",
            }
        ],
        "mcp": [
            {
                "credentialId": "mcp-0",
                "server": "linear",
                "revision": "rev-m0",
                "parameter": p("mcp", "mcp-0"),
                "version": 1,
                "sessionId": "s1",
                "authKind": "token",
            }
        ],
        "github": None,
        "ssh": None,
        "projects": [],
    }


def _values(m: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in [*m["engines"], *m["mcp"]]:
        loc = parse_parameter_name(e["parameter"])
        assert loc is not None
        value: Any
        if loc.credential_class == "engine":
            value = EngineValue(
                location=loc, auth_kind="env", env={"K": Secret("bench-env-secret")}, files=None
            )
        else:
            value = McpValue(
                location=loc,
                auth_kind="token",
                header=McpHeader(name="Authorization", value=Secret("bench-header-secret")),
                access_token=None,
            )
        out[e["parameter"]] = encode_leased_value(value)
    return out


def record(path: pathlib.Path, target: int) -> tuple[int, int, float, float]:
    """Write a trace of at least ``target`` events.

    Returns ``(events, runs, seconds, core_seconds)``: ``core_seconds`` is the
    time spent inside ``runtime.handle`` alone (the bare core on the same
    events, the reference for replay's own overhead).
    """
    config = RuntimeConfig(runner_kind="owned", op_id_seed="bench-replay")
    port = _Port()
    t0 = time.perf_counter()
    with TraceRecorder(path, config) as rec:
        e, m, p, f = rec.wrap_ports(engines=port, mcp=port, person=port)
        rt = config.build(engines=e, mcp=m, person=p, files=f)
        manifest = _manifest()
        decoded = decode(Manifest, manifest)
        assert isinstance(decoded, Manifest)
        digest = sha256_hex(canonical_manifest_json(decoded))
        values = _values(manifest)
        answers: dict[int, object] = {}
        events = 0
        core_ns = 0
        now = T0
        clock = time.perf_counter_ns

        def feed(first: Any, task: str) -> None:
            nonlocal events, core_ns
            queue: list[Any] = [first]
            while queue:
                ev = queue.pop(0)
                t = clock()
                out = rt.handle(ev)
                core_ns += clock() - t
                rec.record(ev, out)
                events += 1
                answer_commands(
                    out,
                    now,
                    queue,
                    answers,
                    lambda: _lease(
                        task,
                        manifest,
                        digest,
                        secret_access_key="bench-secret-access-key",
                        session_token="bench-session-token",
                    ),
                    values,
                )

        runs = 0
        while events < target:
            task = f"task-{runs}"
            base = 10 * runs
            feed(BeginStart(now_ms=now, call_id=base, task_id=task, run_epoch=1), task)
            start = answers.pop(base)
            assert isinstance(start, int)
            feed(AwaitLaunchReady(now_ms=now, call_id=base + 1, start_id=start), task)
            assert isinstance(answers.pop(base + 1, None), TaskView), "not launch-ready"
            feed(AcquireHold(now_ms=now, call_id=base + 2, start_id=start), task)
            hold = answers.pop(base + 2)
            assert isinstance(hold, HoldInfo)
            feed(ReleaseHold(now_ms=now, hold_id=hold.hold_id), task)
            feed(CloseAssignment(now_ms=now, call_id=base + 3, task_id=task, run_epoch=1), task)
            assert base + 3 in answers, "close did not settle"
            answers.clear()
            runs += 1
            now += 1
        assert rt.internal_errors == 0
        assert rec.failures == 0
    return events, runs, time.perf_counter() - t0, core_ns / 1e9


def baseline(path: pathlib.Path) -> float:
    """Seconds to read the file's lines and ``json.loads`` each (the baseline)."""
    loads = json.loads
    t0 = time.perf_counter()
    with path.open(encoding="utf-8") as f:
        for line in f:
            loads(line)
    return time.perf_counter() - t0


def main() -> None:
    """Parse arguments, run, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", type=pathlib.Path, default=None, help="write the trace here")
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[1] / ".benchmarks" / "bench_replay.json",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or pathlib.Path(tmp) / "bench.trace.jsonl"
        events, runs, rec_s, core_s = record(path, args.events)
        size = os.path.getsize(path)
        print(
            f"recorded {events} events ({runs} task lives, {size / 1e6:.0f} MB) in {rec_s:.1f} s",
            file=sys.stderr,
        )
        base_s = baseline(path)
        t0 = time.perf_counter()
        result = replay_trace(str(path))
        replay_s = time.perf_counter() - t0
        assert result.ok, result.divergence and result.divergence.report()
        assert result.events == events
    doc = {
        "benchmark": "bench_replay",
        "events": events,
        "task_lives": runs,
        "trace_bytes": size,
        "replay_seconds": replay_s,
        "replay_events_per_second": events / replay_s,
        "baseline": "json.loads of every line of the same trace",
        "baseline_seconds": base_s,
        "baseline_events_per_second": events / base_s,
        "replay_to_baseline_ratio": replay_s / base_s,
        "core_seconds": core_s,
        "core_events_per_second": events / core_s,
        "replay_to_core_ratio": replay_s / core_s,
        "record_seconds": rec_s,
        "record_events_per_second": events / rec_s,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(
        f"replay: {doc['replay_events_per_second']:.0f} events/s "
        f"({replay_s:.1f} s), json.loads baseline {doc['baseline_events_per_second']:.0f} "
        f"events/s: ratio {doc['replay_to_baseline_ratio']:.1f}x; the bare core "
        f"{doc['core_events_per_second']:.0f} events/s (replay {doc['replay_to_core_ratio']:.1f}x)",
        file=sys.stderr,
    )
    text = json.dumps(doc, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
