"""The file-system calls of an append do not grow with the store's history.

Counted through the ``FsOps`` seam (no timing): an append into a store of a
few events and into one of thousands makes the same calls on the same kinds
of paths, and so does an append after a compaction, whatever the number of
events compacted and appended since (ES-053..055). The stores' history is
laid down directly in the on-disk format, then read back once.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from leasegate.core.ledger import cursor_record, event_file_name, serialize
from leasegate.shells.store import FsOps, OrchestrationEventStore

from .conftest import NOW, ev

MakeStore = Callable[..., OrchestrationEventStore]
Calls = Counter[tuple[str, str]]

LARGE = 3000


class CountingFs(FsOps):
    """Counts every store-level call as ``(kind, path)``, the path relative to
    the store's root with ordinals as ``<n>``, temp suffixes as ``<tmp>`` and
    marker digests as ``<key>`` (``fsync`` and ``close`` take a descriptor:
    their path is empty)."""

    def __init__(self) -> None:
        self.root = ""
        self.calls: Calls = Counter()

    def _count(self, kind: str, path: str) -> None:
        rel = os.path.relpath(path, self.root) if path else ""
        rel = re.sub(r"\.\d+\.[0-9a-f]{12}\.tmp$", ".<tmp>", rel)
        rel = re.sub(r"\d{16}", "<n>", rel)
        rel = re.sub(r"[0-9a-f]{64}", "<key>", rel)
        self.calls[(kind, rel)] += 1

    def write(self, path: str, data: bytes) -> int:
        self._count("write", path)
        return super().write(path, data)

    def fsync_file(self, fd: int) -> None:
        self._count("fsync", "")
        super().fsync_file(fd)

    def close(self, fd: int) -> None:
        self._count("close", "")
        super().close(fd)

    def rename(self, src: str, dst: str) -> None:
        self._count("rename", dst)
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self._count("fsync_dir", path)
        super().fsync_dir(path)

    def unlink(self, path: str) -> None:
        self._count("unlink", path)
        super().unlink(path)

    def mkdir(self, path: str) -> None:
        self._count("mkdir", path)
        super().mkdir(path)

    def read(self, path: str) -> bytes:
        self._count("read", path)
        return super().read(path)

    def listdir(self, path: str) -> list[str]:
        self._count("listdir", path)
        return super().listdir(path)

    def stat(self, path: str) -> os.stat_result:
        self._count("stat", path)
        return super().stat(path)


def lay_down(store: OrchestrationEventStore, first: int, last: int) -> None:
    """Write events ``first..last`` in the on-disk format (no fsync) and a
    cursor at ``last`` covering them as the tail."""
    os.makedirs(store.events_dir, exist_ok=True)
    total = 0
    for i in range(first, last + 1):
        data = serialize(
            {
                "schemaVersion": 1,
                "ordinal": i,
                "eventId": f"h{i}",
                "type": "task.created",
                "aggregateId": f"t{i % 7}",
                "actor": "runtime",
                "occurredAt": NOW,
                "payload": {"i": i},
            }
        )
        total += len(data)
        Path(store.events_dir, event_file_name(i)).write_bytes(data)
    Path(store.cursor_path).write_bytes(serialize(cursor_record(last, total)))


def history(make_store: MakeStore, session: str, events: int, compacted_then: int | None) -> None:
    """A store with ``events`` events; compacted at that ordinal when
    ``compacted_then`` is not ``None``, then that many more laid down."""
    store = make_store(session, max_tail_events=1)
    lay_down(store, 1, events)
    assert [e["ordinal"] for e in store.read_all()] == list(range(1, events + 1))
    if compacted_then is None:
        return
    assert store.compact_if_needed(events, lambda: {"through": events})
    if compacted_then:
        lay_down(store, events + 1, events + compacted_then)
        assert store.read_after(events)[-1]["ordinal"] == events + compacted_then


def append_calls(make_store: MakeStore, session: str) -> dict[str, Calls]:
    """The calls of a plain, a new-key and a replayed-key append, each the
    second append of its instance (the first verified the snapshot)."""
    make_store(session).append(ev(key="seen"))
    out: dict[str, Calls] = {}
    for label, key in (("plain", None), ("new key", "fresh"), ("replayed key", "seen")):
        fs = CountingFs()
        store = make_store(session, fs=fs)
        fs.root = store.root_dir
        store.append(ev())
        fs.calls.clear()
        store.append(ev(key=key))
        out[label] = fs.calls
    return out


WRITE_EVENT: Calls = Counter(
    {
        ("stat", "events"): 1,
        ("write", "events/<n>.json.<tmp>"): 1,
        ("fsync", ""): 1,
        ("close", ""): 1,
        ("rename", "events/<n>.json"): 1,
        ("fsync_dir", "events"): 1,
    }
)
WRITE_CURSOR: Calls = Counter(
    {
        ("write", "cursor.json.<tmp>"): 1,
        ("fsync", ""): 1,
        ("close", ""): 1,
        ("rename", "cursor.json"): 1,
        ("fsync_dir", "."): 1,
    }
)
SYNCHRONIZE: Calls = Counter(
    {
        ("stat", "."): 1,  # the root, ensured before the lock
        ("read", "projection-baseline.json"): 1,  # absent or the pointer (ES-053)
        ("read", "cursor.json"): 1,
        ("stat", "events/<n>.json"): 2,  # E(C) present, E(C+1) absent (ES-055)
    }
)
EXPECTED: dict[str, Calls] = {
    "plain": SYNCHRONIZE + WRITE_EVENT + WRITE_CURSOR,
    "new key": SYNCHRONIZE
    + Counter({("read", "idempotency/<key>.json"): 1})
    + WRITE_EVENT
    + Counter(
        {
            ("stat", "idempotency"): 1,
            ("write", "idempotency/<key>.json.<tmp>"): 1,
            ("fsync", ""): 1,
            ("close", ""): 1,
            ("rename", "idempotency/<key>.json"): 1,
            ("fsync_dir", "idempotency"): 1,
        }
    )
    + WRITE_CURSOR,
    "replayed key": SYNCHRONIZE
    + Counter(
        {
            ("read", "idempotency/<key>.json"): 1,
            ("stat", "events/<n>.json"): 1,  # its event is still in the tail (ES-019)
            ("read", "events/<n>.json"): 1,
        }
    ),
}
# ES-054: with a baseline, every append stats the snapshot it names
SNAPSHOT_STAT: Calls = Counter({("stat", "snapshots/<n>.json"): 1})


@pytest.mark.parametrize("events", [3, LARGE])
def test_ES_055_an_append_makes_the_same_file_system_calls_whatever_the_store_size(
    make_store: MakeStore, events: int
) -> None:
    history(make_store, "s", events, None)
    assert append_calls(make_store, "s") == EXPECTED


@pytest.mark.parametrize(
    ("events", "appended_since"), [(3, 0), (LARGE, 0), (LARGE, LARGE)], ids=str
)
def test_ES_053_after_a_compaction_an_append_adds_only_the_snapshot_stat(
    make_store: MakeStore, events: int, appended_since: int
) -> None:
    history(make_store, "s", events, appended_since)
    assert append_calls(make_store, "s") == {
        label: calls + SNAPSHOT_STAT for label, calls in EXPECTED.items()
    }
