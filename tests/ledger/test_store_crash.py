"""Durability: atomic writes, crash matrices (tables A and K), SIGKILL, multi-process."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from leasegate.core.ledger import (
    OrchestrationConcurrencyError,
    idempotency_marker_name,
    parse_cursor,
)
from leasegate.shells.store import FsOps, OrchestrationEventStore, write_atomic

from .conftest import CrashFs, SimulatedCrash, ev

MakeStore = Callable[..., OrchestrationEventStore]
REPO = Path(__file__).resolve().parents[2]


def assert_healthy(store: OrchestrationEventStore) -> list[dict[str, Any]]:
    """Reopened store: contiguous log, cursor never ahead; returns the tail."""
    events = store.read_all()
    snap = store.read_projection_snapshot()
    through = snap.through_ordinal if snap else 0
    assert [e["ordinal"] for e in events] == list(range(through + 1, through + 1 + len(events)))
    cur = (
        parse_cursor(Path(store.cursor_path).read_bytes())
        if os.path.exists(store.cursor_path)
        else None
    )
    highest = through + len(events)
    assert cur is None or cur.last_ordinal <= highest
    return events


def count_steps(run: Callable[[FsOps], None]) -> list[tuple[str, str]]:
    fs = CrashFs(crash_at=10**9)
    run(fs)
    return fs.steps


def test_ES_067_atomic_write_temp_rename_fsync_and_cleanup(tmp_path: Path) -> None:
    class Fs(FsOps):
        fail = False
        seen: ClassVar[list[str]] = []

        def rename(self, src: str, dst: str) -> None:
            self.seen.append(os.path.basename(src))
            if self.fail:
                raise OSError(5, "injected")
            super().rename(src, dst)

    fs = Fs()
    target = tmp_path / "a" / "b" / "x.json"
    write_atomic(fs, str(target), b"one")
    assert target.read_bytes() == b"one"
    tmp = fs.seen[0]
    assert tmp.startswith(f"x.json.{os.getpid()}.")
    assert tmp.endswith(".tmp")
    fs.fail = True
    with pytest.raises(OSError, match="injected"):
        write_atomic(fs, str(target), b"two")
    assert target.read_bytes() == b"one"
    assert os.listdir(target.parent) == ["x.json"]  # temp removed on failure


def _prefill(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev())


def test_ES_069_append_crash_matrix(tmp_path: Path, ids: Any) -> None:
    def make(d: Path, fs: FsOps | None = None) -> OrchestrationEventStore:
        return OrchestrationEventStore(d, "s", fs=fs, now=ids.now, create_event_id=ids.event_id)

    probe = tmp_path / "probe"
    _prefill(make(probe))
    steps = count_steps(lambda fs: make(probe, fs).append(ev(key="K")))
    assert [op for op, _ in steps] == ["write", "fsync", "rename", "fsync_dir"] * 3
    commit = steps.index(("rename", f"{3:016d}.json")) + 1
    assert len(steps) == 12
    for crash_at in range(1, len(steps) + 1):
        d = tmp_path / f"c{crash_at}"
        _prefill(make(d))
        with pytest.raises(SimulatedCrash):
            make(d, CrashFs(crash_at)).append(ev(key="K"))
        store = make(d)
        events = assert_healthy(store)
        committed = crash_at >= commit
        assert [e["ordinal"] for e in events] == ([1, 2, 3] if committed else [1, 2]), crash_at
        cur = json.loads(Path(store.cursor_path).read_text())
        if crash_at < len(steps) - 1:  # before the cursor rename: the cursor lags
            assert cur["lastOrdinal"] == 2
        if committed:
            # A3..A8: a retry with K returns n; expected n-1 without a key gets OCE
            with pytest.raises(OrchestrationConcurrencyError, match="actual 3"):
                make(d).append(ev(), expected_last_ordinal=2)
        again = store.append(ev(key="K"))
        assert again["ordinal"] == 3
        assert [e.get("idempotencyKey") for e in store.read_all()].count("K") == 1
        assert store.append(ev(key="k1"))["ordinal"] == 1  # acknowledged key kept
        assert store.append(ev())["ordinal"] == 4
        marker = Path(store.idempotency_dir, idempotency_marker_name("K"))
        assert json.loads(marker.read_text())["ordinal"] == 3


def _prefill_compaction(store: OrchestrationEventStore) -> None:
    store.append(ev(key="k1"))
    store.append(ev(key="k2"))
    assert store.compact_if_needed(2, lambda: {"through": 2})
    store.append(ev(key="k3"))
    store.append(ev())
    store.append(ev(key="k5"))


def test_ES_070_compaction_crash_matrix(tmp_path: Path, ids: Any) -> None:
    def make(d: Path, fs: FsOps | None = None) -> OrchestrationEventStore:
        return OrchestrationEventStore(
            d, "s", fs=fs, now=ids.now, create_event_id=ids.event_id, max_tail_events=2
        )

    probe = tmp_path / "probe"
    _prefill_compaction(make(probe))
    steps = count_steps(lambda fs: make(probe, fs).compact_if_needed(5, lambda: {"through": 5}))
    ops = [op for op, _ in steps]
    # S(T) 4 steps, baseline 4 steps, 2 markers, fsync of idempotency/,
    # 3 events, 1 old snapshot, cursor 4 steps
    assert ops[:8] == ["write", "fsync", "rename", "fsync_dir"] * 2
    assert ops == ["write", "fsync", "rename", "fsync_dir"] * 2 + ["unlink"] * 2 + ["fsync_dir"] + [
        "unlink"
    ] * 4 + [
        "write",
        "fsync",
        "rename",
        "fsync_dir",
    ]
    publish = steps.index(("rename", "projection-baseline.json")) + 1
    for crash_at in range(1, len(steps) + 1):
        d = tmp_path / f"c{crash_at}"
        _prefill_compaction(make(d))
        with pytest.raises(SimulatedCrash):
            make(d, CrashFs(crash_at)).compact_if_needed(5, lambda: {"through": 5})
        store = make(d)
        events = assert_healthy(store)
        snap = store.read_projection_snapshot()
        assert snap is not None
        if crash_at >= publish:  # K5..K10: the new snapshot is authoritative
            assert (snap.through_ordinal, snap.projection, events) == (5, {"through": 5}, [])
        else:  # K1..K4: old baseline, full replay of the tail
            assert snap.through_ordinal == 2
            assert [e["ordinal"] for e in events] == [3, 4, 5]
        for key, ordinal in (("k1", 1), ("k2", 2), ("k3", 3), ("k5", 5)):
            assert store.append(ev(key=key))["ordinal"] == ordinal, (crash_at, key)
        assert store.append(ev())["ordinal"] == 6
        # the next compaction succeeds and prunes every leftover (K3, K7, K8)
        assert store.append(ev())["ordinal"] == 7
        assert store.compact_if_needed(7, lambda: {"through": 7}) is True
        assert sorted(os.listdir(store.snapshots_dir)) == [f"{7:016d}.json"]
        assert os.listdir(store.events_dir) == []
        assert_healthy(store)


CHILD = textwrap.dedent(
    """
    import sys
    from leasegate.shells.store import AppendEventInput, OrchestrationEventStore
    agent, prefix = sys.argv[1], sys.argv[2]
    store = OrchestrationEventStore(agent, "kill", max_tail_events=5, max_idempotency_events=4096)
    last = None
    i = 0
    while True:
        key = f"{prefix}-{i}"
        print("try", key, flush=True)
        item = AppendEventInput(type="task.created", aggregate_id="a", actor="runtime",
                                payload={"i": i}, idempotency_key=key)
        e = store.append(item, expected_last_ordinal=last)
        last = e["ordinal"]
        print("ack", key, last, flush=True)
        store.compact_if_needed(last, lambda: {"through": last})
        i += 1
    """
)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "core"), str(REPO / "shells")])
    return env


def test_ES_071_sigkill_child_appending_in_a_loop(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    rng = random.Random(71)
    acked: dict[str, int] = {}
    for round_ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(agent), f"r{round_}"],
            stdout=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        assert child.stdout is not None
        assert child.stdout.readline().startswith("try")
        time.sleep(rng.uniform(0.05, 0.4))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        tried: str | None = None
        for line in out.splitlines():
            parts = line.split()
            if parts[:1] == ["ack"] and len(parts) == 3:
                acked[parts[1]] = int(parts[2])
            elif parts[:1] == ["try"] and len(parts) == 2:
                tried = parts[1]
        store = OrchestrationEventStore(
            agent, "kill", max_tail_events=5, max_idempotency_events=4096
        )
        events = assert_healthy(store)
        snap = store.read_projection_snapshot()
        highest = (snap.through_ordinal if snap else 0) + len(events)
        for key, ordinal in acked.items():
            assert store.append(ev(key=key))["ordinal"] == ordinal  # no loss, no duplicate
        if tried is not None and tried not in acked:
            got = store.append(ev(key=tried))["ordinal"]
            assert got <= highest + 1
            acked[tried] = got
        assert_healthy(store)
    assert len(acked) > 6


WORKER = textwrap.dedent(
    """
    import os, sys, time
    from leasegate.core.ledger import OrchestrationConcurrencyError
    from leasegate.shells.store import AppendEventInput, OrchestrationEventStore
    agent, go = sys.argv[1], sys.argv[2]
    store = OrchestrationEventStore(agent, "race")
    while not os.path.exists(go):
        time.sleep(0.001)
    last = 0
    for _ in range(15):
        evs = store.read_after(last)
        if evs:
            last = evs[-1]["ordinal"]
        item = AppendEventInput(type="task.created", aggregate_id="a", actor="runtime", payload={})
        try:
            e = store.append(item, expected_last_ordinal=last)
            print("won", e["ordinal"], flush=True)
            last = e["ordinal"]
        except OrchestrationConcurrencyError as exc:
            print("lost", exc.expected, exc.actual, flush=True)
    """
)


def test_ES_023_processes_racing_with_expected_last_ordinal(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(agent), str(go)],
            stdout=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        for _ in range(4)
    ]
    time.sleep(0.3)
    go.write_text("")
    wins: list[int] = []
    losses = 0
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        for line in out.splitlines():
            parts = line.split()
            if parts[0] == "won":
                wins.append(int(parts[1]))
            else:
                losses += 1
                assert int(parts[2]) > int(parts[1])  # the loser saw a newer log
    store = OrchestrationEventStore(agent, "race")
    events = assert_healthy(store)
    assert sorted(wins) == [e["ordinal"] for e in events]  # each ordinal won exactly once
    assert len(wins) + losses == 60


def test_ES_012_ES_072_lock_of_a_killed_holder_is_free_at_once(
    store: OrchestrationEventStore,
) -> None:
    store.append(ev())
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,time\n"
            f"fd=os.open({store.lock_path!r}, os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    fast = OrchestrationEventStore(Path(store.root_dir).parents[2], "s1", lock_timeout_s=0.5)
    t0 = time.monotonic()
    assert fast.append(ev())["ordinal"] == 2
    assert time.monotonic() - t0 < 0.5


def test_ES_068_durable_steps_when_append_and_compaction_return(
    tmp_path: Path,
) -> None:
    # every file the store wrote by the time a call returns was fsynced and its
    # directory fsynced after the rename (the write pattern of ES-067)
    fs = CrashFs(crash_at=10**9)
    store = OrchestrationEventStore(tmp_path, "s", fs=fs, max_tail_events=2)
    store.append(ev(key="k"))
    store.append(ev())
    store.compact_if_needed(2, lambda: {})
    ops = fs.steps
    for i, (op, name) in enumerate(ops):
        if op == "rename":
            assert ops[i - 1][0] == "fsync", name
            assert ops[i + 1][0] == "fsync_dir", name
    renamed = [n for op, n in ops if op == "rename"]
    assert renamed[-3:] == [f"{2:016d}.json", "projection-baseline.json", "cursor.json"]
    assert ops[-1][0] == "fsync_dir"


def test_ES_067_failed_temp_write_leaves_no_temp(tmp_path: Path) -> None:
    class Fs(FsOps):
        def write(self, path: str, data: bytes) -> int:
            fd = super().write(path, b"partial")
            os.close(fd)
            raise OSError(28, "No space left on device")

    target = tmp_path / "x.json"
    with pytest.raises(OSError, match="No space"):
        write_atomic(Fs(), str(target), b"data")
    assert os.listdir(tmp_path) == []
