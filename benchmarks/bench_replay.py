"""Benchmark trace replay (not a test): events per second over a large trace.

Builds a trace of at least ``--events`` events (default 200,000) by driving
the real runtime core (lease registry, no env replica) through whole task
lives — ``BeginStart`` → ``lease.request`` → a grant of one engine and one
MCP credential → their Parameter Store read → the install sequence → the open
fan-out → ``AwaitLaunchReady`` → ``AcquireHold`` → ``ReleaseHold`` →
``CloseAssignment`` with its full cleanup (journal, close, drain, quiesce,
remove paths, settle) — recorded by a
:class:`~leasegate.shells.trace.TraceRecorder` (ports wrapped, secrets
redacted), task after task in one core.

Then, in ``--rounds`` interleaved rounds (default 3), it times the same
events three ways, one after the other:

* **the bare core**: every recorded event (structured once, before the
  rounds) fed to a fresh runtime built from the trace's header with the
  benchmark's do-nothing ports — ``runtime.handle`` alone, no recorder;
* **replay**: :func:`~leasegate.shells.trace.replay_trace` of the file
  (read, decode, scripted ports, compare every command);
* **``json.loads``** of every line of the same file (the parse floor).

Times are CPU seconds of this process (``time.process_time``: the machine is
shared, wall time counts other people's work); the figures are each way's
median over the rounds and the ratios are the medians of the per-round
ratios. Reported (stderr summary, one JSON document on stdout and in
``--out``): events per second of each way, replay's speed relative to the
bare core (goal ≥ 0.7), replay's time relative to ``json.loads``, recording
events per second, the trace size.

Usage::

    python3 benchmarks/bench_replay.py [--events 200000] [--rounds 3] [--out PATH] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
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
from leasegate.shells.trace import (
    RuntimeConfig,
    TraceRecorder,
    make_converter,
    read_trace,
    replay_trace,
)


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
    """CPU seconds to read the file's lines and ``json.loads`` each (the parse floor)."""
    loads = json.loads
    t0 = time.process_time()
    with path.open(encoding="utf-8") as f:
        for line in f:
            loads(line)
    return time.process_time() - t0


def recorded_events(path: pathlib.Path) -> tuple[RuntimeConfig, list[Any]]:
    """The trace's header config and its events, structured (by the full path)."""
    conv = make_converter(None)
    with path.open(encoding="utf-8") as f:
        header, steps = read_trace(f, check_tags=False)
        return header.config, [conv.structure(s.event, object) for s in steps]


def bare_core(config: RuntimeConfig, events: list[Any]) -> float:
    """CPU seconds of a fresh runtime handling ``events`` (no recorder, no trace)."""
    port = _Port()
    rt = config.build(engines=port, mcp=port, person=port, files=None)
    handle = rt.handle
    t0 = time.process_time()
    for ev in events:
        handle(ev)
    took = time.process_time() - t0
    assert rt.internal_errors == 0
    return took


def replay(path: pathlib.Path, events: int) -> float:
    """CPU seconds of :func:`replay_trace` over the file (it must match)."""
    t0 = time.process_time()
    result = replay_trace(str(path))
    took = time.process_time() - t0
    assert result.ok, result.divergence and result.divergence.report()
    assert result.events == events
    return took


def main() -> None:
    """Parse arguments, run, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=pathlib.Path, default=None, help="write the trace here")
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[1] / ".benchmarks" / "bench_replay.json",
    )
    args = ap.parse_args()
    core_s: list[float] = []
    replay_s: list[float] = []
    base_s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or pathlib.Path(tmp) / "bench.trace.jsonl"
        events, runs, rec_s, _ = record(path, args.events)
        size = os.path.getsize(path)
        print(
            f"recorded {events} events ({runs} task lives, {size / 1e6:.0f} MB) in {rec_s:.1f} s",
            file=sys.stderr,
        )
        config, structured = recorded_events(path)
        assert len(structured) == events
        for _ in range(args.rounds):
            core_s.append(bare_core(config, structured))
            replay_s.append(replay(path, events))
            base_s.append(baseline(path))
    med = statistics.median
    speed = med(c / r for c, r in zip(core_s, replay_s, strict=True))
    to_loads = med(r / b for r, b in zip(replay_s, base_s, strict=True))
    doc = {
        "benchmark": "bench_replay",
        "events": events,
        "task_lives": runs,
        "trace_bytes": size,
        "rounds": args.rounds,
        "clock": "process CPU time (time.process_time), median of interleaved rounds",
        "replay_events_per_second": round(events / med(replay_s)),
        "core_events_per_second": round(events / med(core_s)),
        "json_loads_events_per_second": round(events / med(base_s)),
        "replay_speed_vs_core": round(speed, 3),
        "goal_replay_speed_vs_core_ge_0.7": speed >= 0.7,
        "replay_time_vs_json_loads": round(to_loads, 3),
        "replay_seconds": [round(x, 3) for x in replay_s],
        "core_seconds": [round(x, 3) for x in core_s],
        "json_loads_seconds": [round(x, 3) for x in base_s],
        "record_seconds": round(rec_s, 3),
        "record_events_per_second": round(events / rec_s),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(
        f"replay: {doc['replay_events_per_second']} events/s, the bare core "
        f"{doc['core_events_per_second']} events/s (replay at {speed:.2f}x its speed), "
        f"json.loads {doc['json_loads_events_per_second']} events/s "
        f"(replay takes {to_loads:.1f}x its time)",
        file=sys.stderr,
    )
    text = json.dumps(doc, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
