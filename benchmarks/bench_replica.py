"""Benchmark the env replica core (not a test).

Two cases, each driven through :meth:`ReplicaManager.handle` by a minimal
in-process shell that answers every value read synchronously with a valid
staged v2 envelope:

* ``apply``: one task, one committed project of 100 keys, then a stream of
  ``--applies`` (default 1,000,000) live applies on one delivery stream, each
  advancing one key to a new value generation (so each apply reads and
  authenticates one envelope). Reports microseconds per apply (core time:
  ``json.loads`` of the frame bytes, decoding the frame value, the rules, the
  read command, the completion, envelope parsing, receipt and ledger
  accounting, the ack) and its ratio to a bare ``json.loads`` of the same
  frame bytes (goal ≤ 3×), also without the frame's own ``json.loads``.
* ``apply_withheld``: the same with ``--applies / 5`` applies whose binding
  is ``omit`` (withheld: no read, no envelope): the rules and bookkeeping
  alone.
* ``snapshot``: a ``--records`` (default 10,000) record snapshot of one
  project in pages of 500, begin to commit. Reports microseconds per page
  record.

The default ledger limits (16,384 receipts per task) would end a
million-apply stream with ``replica_restart_required`` long before the end,
as the reference does; the benchmark raises the limits so the whole stream is
measured (receipts of one stream are only released by a stream switch).

Prints a human summary on stderr and one JSON document on stdout, and writes
it to ``--out`` (default ``.benchmarks/bench_replica.json``).

Usage::

    python3 benchmarks/bench_replica.py [--applies 1000000] [--records 10000] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import pathlib
import platform
import sys
import time
from typing import Any

from leasegate.core import Secret, canonical_dumps
from leasegate.core.replica import (
    ActivateAssignment,
    EnvFrameReceived,
    ReadStagedValue,
    ReplicaLimits,
    ReplicaManager,
    SendAck,
    ValueReadCompleted,
)

BOOT, TASK, ORG = "boot1", "task-1", "org-1"


def sid(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-000000000000"


def state(key: str, gen: int, binding: Any = None) -> dict[str, Any]:
    return {
        "key": key,
        "head": {
            "revision": 1,
            "generation": gen,
            "tombstone": False,
            "valueRef": {"kind": "staged", "stagingId": sid(gen)},
        },
        "binding": binding,
        "policyEpoch": 1,
        "listingGeneration": 0,
    }


def common(kind: str, op: str, stream: str) -> dict[str, Any]:
    return {
        "kind": f"env.replica.v1.{kind}",
        "opId": op,
        "taskId": TASK,
        "runEpoch": 1,
        "runnerBootId": BOOT,
        "streamId": stream,
    }


def envelope(cmd: ReadStagedValue) -> str:
    # As the reference cloud writes it (canonical JSON: sorted keys, compact).
    return canonical_dumps(
        {
            "v": 2,
            "kind": "project-env",
            "orgId": ORG,
            "projectId": cmd.project_id,
            "key": cmd.key,
            "stagingId": cmd.staging_id,
            "value": f"value-{cmd.key}-{cmd.staging_id}",
        }
    )


class Shell:
    """Feeds frames and answers reads synchronously; times only ``handle``."""

    def __init__(self, m: ReplicaManager, *, text: bool = False) -> None:
        self.m = m
        self.text = text
        self.core = 0.0
        self.acks = 0
        self.errors = 0

    def run(self, ev: Any) -> None:
        clock = time.perf_counter
        t = clock()
        cmds = self.m.handle(ev)
        self.core += clock() - t
        while cmds:
            nxt: list[Any] = []
            for c in cmds:
                if type(c) is ReadStagedValue:
                    done = ValueReadCompleted(now_ms=0, cmd_id=c.cmd_id, raw=Secret(envelope(c)))
                    t = clock()
                    nxt += self.m.handle(done)
                    self.core += clock() - t
                elif type(c) is SendAck:
                    self.acks += 1
                    if not c.ack.ok:
                        self.errors += 1
            cmds = nxt

    def frame(self, wire: bytes) -> None:
        if self.text:
            # The frame's bytes as received: the core parses them.
            self.run(EnvFrameReceived(now_ms=0, frame=wire))
            return
        clock = time.perf_counter
        t = clock()
        value = json.loads(wire)
        dt = clock() - t
        self.core += dt
        self.run(EnvFrameReceived(now_ms=0, frame=value))


def wire(value: dict[str, Any]) -> bytes:
    """A frame as the transports send it (compact JSON, model field order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def snapshot(
    shell: Shell,
    records: int,
    stream: str,
    attempt: str,
    page_size: int = 500,
    *,
    withheld: bool = False,
) -> None:
    keys = [f"K{i:06d}" for i in range(records)]
    shell.frame(wire({**common("begin", "b", stream), "attemptId": attempt, "projectIds": ["p1"]}))
    after = None
    for start in range(0, records, page_size):
        chunk = keys[start : start + page_size]
        done = start + page_size >= records
        shell.frame(
            wire(
                {
                    **common("page", f"p{start}", stream),
                    "attemptId": attempt,
                    "projectId": "p1",
                    "after": after,
                    "recordVersion": 1,
                    "records": [state(k, 1, {"kind": "omit"} if withheld else None) for k in chunk],
                    "complete": done,
                }
            )
        )
        after = chunk[-1]
    shell.frame(
        wire(
            {
                **common("commit", "c", stream),
                "attemptId": attempt,
                "highWater": {"streamId": stream, "sequence": 0},
                "versions": [{"projectId": "p1", "recordVersion": 1}],
            }
        )
    )


def manager() -> ReplicaManager:
    big = 2**40
    m = ReplicaManager(
        boot_id=BOOT,
        limits=ReplicaLimits(
            max_task_entries=big, max_task_bytes=big, max_total_entries=big, max_total_bytes=big
        ),
    )
    m.handle(ActivateAssignment(now_ms=0, task_id=TASK, run_epoch=1, org_id=ORG, reader=object()))
    return m


def bench_snapshot(records: int) -> dict[str, Any]:
    shell = Shell(manager(), text=True)
    snapshot(shell, records, "S1", "A1")
    assert shell.errors == 0, shell.errors
    assert shell.m.is_ready(TASK, 1)
    return {
        "case": "snapshot",
        "records": records,
        "core_seconds": shell.core,
        "us_per_page_record": shell.core / records * 1e6,
    }


def bench_apply(applies: int, *, withheld: bool = False, text: bool = True) -> dict[str, Any]:
    shell = Shell(manager(), text=text)
    keys = 100
    snapshot(shell, keys, "S1", "A1", page_size=100, withheld=withheld)
    shell.core = 0.0
    frames: list[bytes] = []
    gens = [1] * keys
    loads_time = 0.0
    clock = time.perf_counter
    batch = 10_000
    gc.collect()
    for start in range(0, applies, batch):
        frames.clear()
        for i in range(start, min(start + batch, applies)):
            k = i % keys
            gens[k] += 1
            frames.append(
                wire(
                    {
                        **common("apply", f"a{i}", "S1"),
                        "attemptId": None,
                        "projectId": "p1",
                        "recordVersion": i + 2,
                        "state": state(
                            f"K{k:06d}", gens[k], {"kind": "omit"} if withheld else None
                        ),
                        "delivery": {"streamId": "S1", "sequence": i + 1},
                    }
                )
            )
        t = clock()
        for f in frames:
            json.loads(f)
        loads_time += clock() - t
        for f in frames:
            shell.frame(f)
    assert shell.errors == 0, shell.errors
    return {
        "case": ("apply_withheld" if withheld else "apply") + ("" if text else "_parsed"),
        "input": "frame bytes" if text else "parsed JSON value (the shell ran json.loads)",
        "applies": applies,
        "core_seconds": shell.core,
        "us_per_apply": shell.core / applies * 1e6,
        "json_loads_us_per_frame": loads_time / applies * 1e6,
        "ratio_to_json_loads": shell.core / loads_time,
        "goal_ratio": 3.0,
    }


def main() -> None:
    """Parse arguments, run both cases, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--applies", type=int, default=1_000_000)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path(".benchmarks/bench_replica.json")
    )
    args = ap.parse_args()
    cases = [
        bench_apply(args.applies),
        bench_snapshot(args.records),
        bench_apply(max(1, args.applies // 5), withheld=True),
        bench_apply(max(1, args.applies // 5), text=False),
    ]
    result = {
        "benchmark": "bench_replica",
        "cases": cases,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    a, s, w, p = cases
    print(
        f"apply: {a['us_per_apply']:.1f} µs/apply, {a['ratio_to_json_loads']:.2f}× json.loads; "
        f"withheld apply (no read): {w['us_per_apply']:.1f} µs, "
        f"{w['ratio_to_json_loads']:.2f}×; apply from a parsed value: "
        f"{p['ratio_to_json_loads']:.2f}×; snapshot: {s['us_per_page_record']:.1f} µs/record",
        file=sys.stderr,
    )
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
