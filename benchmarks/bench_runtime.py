"""Benchmark the runtime core (not a test).

``--runs`` task runs (default 500), each driven through the whole composition:
``BeginStart`` → the registry's request → a grant of 14 credentials and 2
projects → the install sequence (engines, MCP, person) → the open fan-out →
``AwaitLaunchReady`` answered → ``AcquireHold`` → ``ReleaseHold`` →
``CloseAssignment`` with its full cleanup procedure (journal, close, drain,
quiesce, remove paths, drop memory, settle). A minimal in-process shell feeds
every completion back synchronously; consumer ports are no-op objects; no env
replica. Only the time spent inside ``CredentialRuntime.handle`` counts.

Reports core microseconds per run (start to closed) and events per second: a
summary on stderr, one JSON document on stdout, the same JSON written to
``--out`` (default ``.benchmarks/bench_runtime.json``).

Usage::

    python3 benchmarks/bench_runtime.py [--runs 500] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bench_registry import T0, _lease, _manifest, _values
from leasegate.core import Secret, decode, sha256_hex
from leasegate.core.registry import (
    Assignment,
    ReadCompleted,
    ReadParameters,
    SendFrame,
    SsmParameter,
    TaskView,
)
from leasegate.core.runtime import (
    AcquireHold,
    Answer,
    AwaitLaunchReady,
    BeginStart,
    CloseAssignment,
    ConsumerWork,
    CredentialRuntime,
    HandleFrame,
    HoldInfo,
    JournalRecord,
    JournalSettle,
    ReleaseHold,
    WorkDone,
)
from leasegate.core.wire.lease import Manifest, canonical_manifest_json


class _Port:
    """A consumer port that admits everything and does nothing."""

    def open(self, assignment: Assignment, view: TaskView) -> None:
        """Admit."""

    def close(self, assignment: Assignment) -> None:
        """Stop admitting."""

    def forget(self, assignment: Assignment) -> None:
        """Forget."""

    def install(self, request: object) -> None:
        """Install nothing."""

    def leased_run(self, task_id: str) -> Assignment | None:
        """No MCP record."""
        return None

    def hold_git(self, assignment: Assignment) -> _Port:
        """A Git hold."""
        return self

    def release(self) -> None:
        """Release the Git hold."""


def answer_commands(
    out: list[Any],
    now: int,
    queue: list[Any],
    answers: dict[int, object],
    lease: Callable[[], dict[str, Any]],
    values: dict[str, str],
) -> None:
    """Answer one step's commands as a perfect cloud and host would.

    ``Answer`` values go into ``answers`` (by call id); a ``SendFrame`` (the
    lease request) queues a grant of ``lease()``; a read queues its
    completion from ``values`` (parameter name -> envelope); consumer and
    journal work queue a successful ``WorkDone``. Shared with ``bench_replay``.
    """
    for c in out:
        if isinstance(c, Answer):
            answers[c.call_id] = c.value
        elif isinstance(c, SendFrame):
            grant = {
                "kind": "lease.grant.v1",
                "opId": c.frame.op_id,  # type: ignore[attr-defined]
                "lease": lease(),
            }
            queue.append(HandleFrame(now_ms=now, call_id=-1, frame=grant))
        elif isinstance(c, ReadParameters):
            params = tuple(
                SsmParameter(
                    name=s.rpartition(":")[0],
                    type="SecureString",
                    value=Secret(values[s.rpartition(":")[0]]),
                    version=int(s.rpartition(":")[2]),
                )
                for s in c.selectors
            )
            queue.append(ReadCompleted(now_ms=now, cmd_id=c.cmd_id, parameters=params))
        elif isinstance(c, (ConsumerWork, JournalRecord, JournalSettle)):
            queue.append(WorkDone(now_ms=now, cmd_id=c.cmd_id))


def run(runs: int) -> dict[str, Any]:
    """Drive ``runs`` task runs from start to closed; return the measurements."""
    port = _Port()
    rt = CredentialRuntime(
        runner_kind="owned", op_id_seed="bench", engines=port, mcp=port, person=port
    )
    manifest = _manifest()
    decoded = decode(Manifest, manifest)
    assert isinstance(decoded, Manifest)
    digest = sha256_hex(canonical_manifest_json(decoded))
    values = _values(14)
    core_ns = 0
    events = 0
    answers: dict[int, object] = {}
    now = T0

    def feed(first: Any, task: str) -> None:
        nonlocal core_ns, events
        queue: list[Any] = [first]
        while queue:
            ev = queue.pop(0)
            t = time.perf_counter_ns()
            out = rt.handle(ev)
            core_ns += time.perf_counter_ns() - t
            events += 1
            answer_commands(
                out, now, queue, answers, lambda: _lease(task, manifest, digest), values
            )

    held = 0
    for n in range(runs):
        task = f"task-{n}"
        base = 10 * n
        feed(BeginStart(now_ms=now, call_id=base, task_id=task, run_epoch=1), task)
        start = answers[base]
        assert isinstance(start, int)
        feed(AwaitLaunchReady(now_ms=now, call_id=base + 1, start_id=start), task)
        assert isinstance(answers.get(base + 1), TaskView), "not launch-ready"
        feed(AcquireHold(now_ms=now, call_id=base + 2, start_id=start), task)
        hold = answers[base + 2]
        assert isinstance(hold, HoldInfo)
        held += 1
        feed(ReleaseHold(now_ms=now, hold_id=hold.hold_id), task)
        feed(CloseAssignment(now_ms=now, call_id=base + 3, task_id=task, run_epoch=1), task)
        assert base + 3 in answers, "close did not settle"
    assert held == runs
    assert rt.internal_errors == 0
    seconds = core_ns / 1e9
    return {
        "benchmark": "bench_runtime",
        "runs": runs,
        "credentials_per_grant": 14,
        "projects_per_grant": 2,
        "events": events,
        "events_per_run": events / runs,
        "core_seconds": seconds,
        "core_us_per_run_start_to_closed": core_ns / runs / 1e3,
        "events_per_second": events / seconds if seconds else None,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    """Parse arguments, run, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[1] / ".benchmarks" / "bench_runtime.json",
    )
    args = ap.parse_args()
    result = run(args.runs)
    print(
        f"{result['runs']} runs start to closed: "
        f"{result['core_us_per_run_start_to_closed']:.1f} µs core per run, "
        f"{result['events_per_second']:.0f} events/s "
        f"({result['events_per_run']:.0f} events per run)",
        file=sys.stderr,
    )
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
