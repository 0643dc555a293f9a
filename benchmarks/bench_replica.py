"""Benchmark the env replica core (not a test).

Every case drives :meth:`ReplicaManager.handle` with frames given as their
bytes (compact JSON in the models' field order, as the transports send
them), value reads answered with a valid staged v2 envelope written as the
reference cloud writes it (canonical JSON). One task holds one committed
project of 100 keys; each live apply advances one key to a new value
generation, so it reads and authenticates one envelope.

* ``apply`` (the goal measure): a stream of ``--applies`` (default
  1,000,000) live applies on one delivery stream, in batches of 10,000. For
  each batch the frames' bytes and the value reads' completions are made
  first; then one timed loop runs a bare ``json.loads`` over the frame
  bytes, and one timed loop hands each frame and its read's completion to
  ``handle``. Both are tight loops over inputs made in advance, each
  started after an untimed ``gc.collect()`` (neither pays for the other's
  garbage), so the ratio compares like with like. Reports microseconds per apply and the
  ratio of apply handling to ``json.loads`` (goal ≤ 3×). Checked: inside
  the timed loop, each apply's command count (one read, then a notice and
  an ack) and that its ack is ``ok``; every 500th apply's commands in full
  after the loop (the expected read, an ``installed`` result); after each
  batch, every apply's receipt (``ok``, ``installed``), the cursor and each
  key's served value. A wrong answer fails the run.
* ``apply_in_situ``: the same stream, but the shell makes each read's
  completion when the read command comes out, between the two ``handle``
  calls of an apply; only the ``handle`` calls are timed. The shell's work
  in between leaves the core's code and data cold in the CPU caches, so
  this is slower per apply; reported for comparison.
* ``apply_withheld``: ``--applies / 5`` applies whose binding is ``omit``
  (withheld: no read, no envelope), measured like ``apply``: the rules and
  bookkeeping alone.
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

from leasegate.core import Secret, canonical_dumps, encode
from leasegate.core.replica import (
    ActivateAssignment,
    EnvFrameReceived,
    NotifyChange,
    ReadStagedValue,
    ReplicaLimits,
    ReplicaManager,
    SendAck,
    ValueReadCompleted,
)
from leasegate.core.replica._receipts import _INSTALLED_JSON, _receipt_fields

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
    """Feeds frame bytes and answers reads as they come; times only ``handle``."""

    def __init__(self, m: ReplicaManager) -> None:
        self.m = m
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
        self.run(EnvFrameReceived(now_ms=0, frame=wire))


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
    shell = Shell(manager())
    snapshot(shell, records, "S1", "A1")
    assert shell.errors == 0, shell.errors
    assert shell.m.is_ready(TASK, 1)
    return {
        "case": "snapshot",
        "records": records,
        "core_seconds": shell.core,
        "us_per_page_record": shell.core / records * 1e6,
    }


def apply_frame(i: int, key: str, gen: int, *, withheld: bool) -> bytes:
    """The bytes of the ``i``-th live apply: ``key`` gets value generation ``gen``."""
    return wire(
        {
            **common("apply", f"a{i}", "S1"),
            "attemptId": None,
            "projectId": "p1",
            "recordVersion": i + 2,
            "state": state(key, gen, {"kind": "omit"} if withheld else None),
            "delivery": {"streamId": "S1", "sequence": i + 1},
        }
    )


#: A prepared apply: its frame bytes, the frame event, and (for a read)
#: the read command expected of the core and its completion.
Prepared = tuple[bytes, EnvFrameReceived, ReadStagedValue | None, ValueReadCompleted | None]


class ApplyStream:
    """One task with a committed project of 100 keys, and its live applies.

    Each apply advances one key (round robin) to a new value generation.
    :meth:`prepare` makes the next applies' inputs in advance: the frame
    bytes and, unless ``withheld``, the read the core must emit (read
    command ids are consecutive) and its completion with a valid envelope.
    """

    keys = 100

    def __init__(self, *, withheld: bool = False) -> None:
        self.withheld = withheld
        self.shell = Shell(manager())
        snapshot(self.shell, self.keys, "S1", "A1", page_size=100, withheld=withheld)
        self.m = self.shell.m
        self.gens = [1] * self.keys
        self.next_cmd = self.m._next_cmd

    def prepare(self, start: int, count: int) -> list[Prepared]:
        """Inputs of applies ``start`` to ``start + count - 1``, in order."""
        out: list[Prepared] = []
        for i in range(start, start + count):
            k = i % self.keys
            self.gens[k] += 1
            key = f"K{k:06d}"
            f = apply_frame(i, key, self.gens[k], withheld=self.withheld)
            read: ReadStagedValue | None = None
            done: ValueReadCompleted | None = None
            if not self.withheld:
                self.next_cmd += 1
                read = ReadStagedValue(
                    cmd_id=self.next_cmd,
                    reader=None,
                    task_id=TASK,
                    run_epoch=1,
                    project_id="p1",
                    key=key,
                    staging_id=sid(self.gens[k]),
                )
                done = ValueReadCompleted(
                    now_ms=0, cmd_id=self.next_cmd, raw=Secret(envelope(read))
                )
            out.append((f, EnvFrameReceived(now_ms=0, frame=f), read, done))
        return out


def bench_apply(applies: int, *, withheld: bool = False) -> dict[str, Any]:
    """The ``apply`` (or ``apply_withheld``) case: inputs made first, then timed."""
    stream = ApplyStream(withheld=withheld)
    m = stream.m
    handle = m.handle
    core_time = loads_time = 0.0
    clock = time.perf_counter
    batch = 10_000
    for start in range(0, applies, batch):
        prepared = stream.prepare(start, min(batch, applies - start))
        frames = [p[0] for p in prepared]
        events = [
            (ev, done, (start + j) % DEEP_EVERY == 0) for j, (_, ev, _, done) in enumerate(prepared)
        ]
        reads = {start + j: p[2] for j, p in enumerate(prepared) if (start + j) % DEEP_EVERY == 0}
        # Each timed loop starts from a clean collector: neither pays for
        # the other's garbage (the json.loads loop once ran right after the
        # core's and absorbed part of its collection work).
        gc.collect()
        t = clock()
        for f in frames:
            json.loads(f)
        loads_time += clock() - t
        gc.collect()
        kept: list[tuple[list[Any], list[Any]]] = []
        bad = 0
        t = clock()
        # Every apply's commands are checked in the loop (their count, and
        # the ack's ``ok``: a lost read, a lost ack or an error ack is
        # caught); every DEEP_EVERY-th apply's commands are kept and checked
        # in full after the loop. Keeping them all would make the collector
        # walk them and slow the loop.
        if withheld:
            for ev, _, deep in events:
                last = handle(ev)
                if deep:
                    kept.append(([], last))
                elif len(last) != 2 or not last[1].ack.ok:
                    bad += 1
        else:
            for ev, done, deep in events:
                first = handle(ev)
                last = handle(done)
                if deep:
                    kept.append((first, last))
                elif len(first) != 1 or len(last) != 2 or not last[1].ack.ok:
                    bad += 1
        core_time += clock() - t
        assert bad == 0, f"{bad} applies answered wrongly"
        check_commands(kept, reads, withheld=withheld)
        check_batch(m, start, len(frames), stream.gens, withheld=withheld)
    return {
        "case": "apply_withheld" if withheld else "apply",
        "input": "frame bytes and read completions made in advance (a tight loop, as json.loads)",
        "applies": applies,
        "core_seconds": core_time,
        "us_per_apply": core_time / applies * 1e6,
        "json_loads_us_per_frame": loads_time / applies * 1e6,
        "ratio_to_json_loads": core_time / loads_time,
        "goal_ratio": 3.0,
    }


#: Every how many applies all of an apply's commands are kept and checked.
DEEP_EVERY = 500


def check_commands(
    kept: list[tuple[list[Any], list[Any]]],
    reads: dict[int, ReadStagedValue | None],
    *,
    withheld: bool,
) -> None:
    """The kept applies' commands: the expected read, then a notice and an ``ok`` ack."""
    assert len(kept) == len(reads)
    for (first, last), read in zip(kept, reads.values(), strict=True):
        if read is None:
            assert first == []
        else:
            (cmd,) = first
            assert type(cmd) is ReadStagedValue, cmd
            assert (cmd.cmd_id, cmd.project_id, cmd.key, cmd.staging_id) == (
                read.cmd_id,
                read.project_id,
                read.key,
                read.staging_id,
            )
        notice, send = last
        assert type(notice) is NotifyChange
        assert notice.task_id == TASK
        assert type(send) is SendAck
        ack = send.ack
        assert ack.ok
        assert ack.phase == "applied"
        assert ack.result is not None
        kind = encode(ack.result.materialization)["kind"]
        assert kind == ("withheld" if withheld else "installed"), kind


def check_batch(
    m: ReplicaManager, start: int, count: int, gens: list[int], *, withheld: bool
) -> None:
    """Every apply of the batch was answered ``ok`` with the expected result.

    Untimed. The outputs are not kept during the timed loop (keeping them
    would make the collector walk them); instead, each apply's receipt (its
    answer, ER-114) must be ``ok`` with an ``installed`` (or ``withheld``)
    materialization, the cursor must stand at the batch's last delivery, and
    the served view must hold each key's latest value: a read of another
    record, a lost completion or an error ack would fail one of these.
    """
    r = m._replicas[TASK]
    want = (
        _INSTALLED_JSON
        if not withheld
        else canonical_dumps({"kind": "withheld", "reason": "binding_omits"})
    )
    for seq in range(start + 1, start + count + 1):
        fields = _receipt_fields(r.apply_receipts[seq])
        assert fields[0] == "1", seq  # ok
        assert fields[7] == want, (seq, fields[7])  # the materialization
    view = m.read_view(TASK, 1, ["p1"])
    assert view is not None
    assert view.applied_through.sequence == start + count
    (project,) = view.projects
    for e in project.entries:
        gen = gens[int(e.state.key[1:])]
        assert e.state.head.generation == gen
        if not withheld:
            assert e.value is not None
            assert e.value.reveal() == f"value-{e.state.key}-{sid(gen)}"


def bench_apply_in_situ(applies: int) -> dict[str, Any]:
    """The ``apply_in_situ`` case: each read answered when it comes out."""
    stream = ApplyStream()
    shell = stream.shell
    shell.core = 0.0
    loads_time = 0.0
    clock = time.perf_counter
    batch = 10_000
    for start in range(0, applies, batch):
        # Only the frames: the shell answers each read itself.
        frames = [p[0] for p in stream.prepare(start, min(batch, applies - start))]
        gc.collect()
        t = clock()
        for f in frames:
            json.loads(f)
        loads_time += clock() - t
        for f in frames:
            shell.frame(f)
    assert shell.errors == 0, shell.errors
    return {
        "case": "apply_in_situ",
        "input": "frame bytes; each read answered between the two handle calls of its apply",
        "applies": applies,
        "core_seconds": shell.core,
        "us_per_apply": shell.core / applies * 1e6,
        "json_loads_us_per_frame": loads_time / applies * 1e6,
        "ratio_to_json_loads": shell.core / loads_time,
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
        bench_apply_in_situ(args.applies),
        bench_apply(max(1, args.applies // 5), withheld=True),
        bench_snapshot(args.records),
    ]
    result = {
        "benchmark": "bench_replica",
        "cases": cases,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    a, i, w, s = cases
    print(
        f"apply: {a['us_per_apply']:.1f} µs/apply, {a['ratio_to_json_loads']:.2f}× json.loads "
        f"(goal ≤ 3×); in situ: {i['us_per_apply']:.1f} µs, {i['ratio_to_json_loads']:.2f}×; "
        f"withheld apply (no read): {w['us_per_apply']:.1f} µs, "
        f"{w['ratio_to_json_loads']:.2f}×; snapshot: {s['us_per_page_record']:.1f} µs/record",
        file=sys.stderr,
    )
    write_report(result, args.out)


def write_report(result: dict[str, Any], out: pathlib.Path) -> None:
    """Write the JSON document to ``out`` and print it on stdout."""
    text = json.dumps(result, indent=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
