"""Fuzz harness: the file event store, with an injected crash or I/O error.

``TestOneInput(data)`` builds a fresh store in a scratch directory (tmpfs
``/dev/shm`` when available), picks its limits and one fault, then runs up
to 24 operations chosen by a :class:`~_harness.DataProvider`:

* ``append`` without a key, with one of four idempotency keys, and with an
  ``expected_last_ordinal`` (right, or off by one);
* ``read_all``, ``read_after(k)`` (``k`` around the baseline and the head);
* ``compact_if_needed(T, projection)`` at the head or elsewhere;
* reopening the store (a new instance over the same directory).

The fault is injected through the store's file-system seam
(:class:`leasegate.shells.store.FsOps`): at mutating step N (a write,
fsync, rename, directory fsync, unlink or mkdir) either the process "dies"
(a ``BaseException`` after the step; every later file-system call raises
too, as in ``tests/ledger/conftest.py``'s ``CrashFs``) or the step fails
with ``OSError`` (``EIO``/``ENOSPC``, before it happens). Either ends the
sequence; the store is then reopened with the real file system and checked.

A model of what was acknowledged is kept alongside. Invariants (a finding
is an ``AssertionError`` or any unexpected exception):

* the log is contiguous: ``read_all`` returns ordinals T+1..H with T the
  snapshot's ``throughOrdinal`` (0 without one);
* no acknowledged append is lost: every event an ``append`` returned is
  in the tail unchanged (or at or below T, compacted, its id in the
  projection snapshot taken at T);
* the one interrupted operation committed wholly or not at all (an
  interrupted append is at H+1 or absent);
* no idempotent append is duplicated: re-appending any acknowledged key
  (and the interrupted one's, if it committed) returns the stored event and
  leaves H unchanged, before and after reconciliation;
* the cursor is never ahead of the events (``cursor.lastOrdinal`` ≤ H), and
  equals H after a mutation;
* ``expected_last_ordinal`` ≠ H raises ``OrchestrationConcurrencyError``
  and writes nothing; ``read_after(k)`` with k < T raises
  ``OrchestrationSnapshotRequiredError``; ``compact_if_needed`` returns
  ``False`` unless T = H and the tail is due.

Reference behavior: ES-009, ES-014..021, ES-024..030, ES-033..037,
ES-044..047, ES-055..059, ES-069, ES-070 (``reference/orchestration/
event-store.ts``; ``docs/ledger.md``). Run:
``python3 fuzz/store_harness.py [libFuzzer flags] [corpus dirs]``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
from _harness import DataProvider

with _harness.instrument(__name__ == "__main__"):
    from leasegate.core.ledger import (
        OrchestrationConcurrencyError,
        OrchestrationEventStoreError,
        OrchestrationSnapshotRequiredError,
        event_file_name,
    )
    from leasegate.shells.store import AppendEventInput, FsOps, OrchestrationEventStore

KEYS = ("key-a", "key-b", "key-c", "key-d")
TYPES = ("task.created", "attempt.queued", "attempt.started", "cleanup.owed")
ACTORS = ("runtime", "worker", "human")
SESSION = "fuzz-session"


class SimulatedCrash(BaseException):
    """The simulated process death (not an ``Exception``: nothing catches it)."""


class FaultFs(FsOps):
    """The real file system, with one fault at mutating step ``fault_at``.

    ``crash=True``: perform step ``fault_at`` (1-based), then raise
    :class:`SimulatedCrash` and refuse every later call. ``crash=False``:
    raise ``OSError`` instead of performing step ``fault_at``; later calls
    work. ``fault_at=0``: no fault.
    """

    def __init__(self, fault_at: int, *, crash: bool, err: int) -> None:
        self.fault_at = fault_at
        self.crash = crash
        self.err = err
        self.steps = 0
        self.dead = False
        self.fired = False

    def _alive(self) -> None:
        if self.dead:
            raise SimulatedCrash("dead")

    def _before(self) -> None:
        self._alive()
        self.steps += 1
        if self.steps == self.fault_at and not self.crash:
            self.fired = True
            raise OSError(self.err, os.strerror(self.err))

    def _after(self) -> None:
        if self.steps == self.fault_at and self.crash:
            self.fired = True
            self.dead = True
            raise SimulatedCrash(f"crash after step {self.fault_at}")

    def write(self, path: str, data: bytes) -> int:
        self._before()
        fd = super().write(path, data)
        if self.crash and self.steps == self.fault_at:
            os.close(fd)
        self._after()
        return fd

    def fsync_file(self, fd: int) -> None:
        self._before()
        super().fsync_file(fd)
        self._after()

    def close(self, fd: int) -> None:
        self._alive()
        super().close(fd)

    def rename(self, src: str, dst: str) -> None:
        self._before()
        super().rename(src, dst)
        self._after()

    def fsync_dir(self, path: str) -> None:
        self._before()
        super().fsync_dir(path)
        self._after()

    def unlink(self, path: str) -> None:
        self._before()
        super().unlink(path)
        self._after()

    def mkdir(self, path: str) -> None:
        self._before()
        super().mkdir(path)
        self._after()

    def read(self, path: str) -> bytes:
        self._alive()
        return super().read(path)

    def listdir(self, path: str) -> list[str]:
        self._alive()
        return super().listdir(path)

    def stat(self, path: str) -> os.stat_result:
        self._alive()
        return super().stat(path)


class Interrupted(Exception):
    """The injected fault fired during the current operation."""


class Model:
    """What the store acknowledged, and the one interrupted operation."""

    def __init__(self) -> None:
        self.acked: dict[int, dict[str, Any]] = {}
        self.keys: dict[str, int] = {}
        self.head = 0
        self.through = 0
        self.projections: dict[int, dict[str, Any]] = {}
        self.pending_append: AppendEventInput | None = None
        self.pending_compaction: int | None = None

    def projection(self) -> dict[str, Any]:
        """The projection this harness stores: the ids of events 1..H."""
        return {"ids": [self.acked[n]["eventId"] for n in sorted(self.acked)]}


class Clock:
    """Deterministic ``now`` and event ids."""

    def __init__(self) -> None:
        self.n = 0

    def now(self) -> str:
        self.n += 1
        return f"2026-01-01T00:00:{self.n % 60:02d}.{self.n % 1000:03d}Z"

    def event_id(self) -> str:
        self.n += 1
        return f"evt-{self.n}"


def _cursor_last(store: OrchestrationEventStore) -> int | None:
    try:
        raw = Path(store.cursor_path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return int(json.loads(raw)["lastOrdinal"])
    except (ValueError, KeyError, TypeError):
        return None


def _same_input(event: dict[str, Any], item: AppendEventInput) -> bool:
    return (
        event["type"] == item.type
        and event["aggregateId"] == item.aggregate_id
        and event["actor"] == item.actor
        and event["payload"] == item.payload
        and event.get("idempotencyKey") == (item.idempotency_key or None)
    )


def check_log(store: OrchestrationEventStore, model: Model, *, exact: bool) -> tuple[int, int]:
    """Check contiguity, no loss, cursor not ahead. Returns (T, H) on disk.

    ``exact``: no operation is pending, so T and H must equal the model's.
    """
    snap = store.read_projection_snapshot()
    through = snap.through_ordinal if snap is not None else 0
    events = store.read_all()
    ordinals = [e["ordinal"] for e in events]
    assert ordinals == list(range(through + 1, through + 1 + len(events))), "log not contiguous"
    head = ordinals[-1] if ordinals else through
    cursor = _cursor_last(store)
    assert cursor is None or cursor <= head, "cursor ahead of the events"
    for n, event in model.acked.items():
        if n > through:
            assert n <= head, "acknowledged append lost"
            assert events[n - through - 1] == event, "acknowledged event changed"
    if snap is not None:
        expected = model.projections.get(through)
        assert expected is not None, "snapshot at an ordinal never compacted"
        assert snap.projection == expected, "snapshot projection differs"
    if exact:
        assert (through, head) == (model.through, model.head), "store and model disagree"
    else:
        assert through in (model.through, model.pending_compaction), "unexpected baseline"
        extra = head - model.head
        assert extra == 0 or (extra == 1 and model.pending_append is not None), (
            "unexpected events after an interrupted operation"
        )
        if extra == 1:
            assert model.pending_append is not None
            assert _same_input(events[-1], model.pending_append), "a different event committed"
    return through, head


def check_keys(store: OrchestrationEventStore, model: Model, head: int) -> None:
    """Re-append every acknowledged key: the stored event comes back, H stays."""
    for key, n in model.keys.items():
        again = store.append(
            AppendEventInput(
                type="task.created",
                aggregate_id="dup",
                actor="human",
                payload={"dup": True},
                idempotency_key=key,
            )
        )
        assert again == model.acked[n], "idempotent re-append did not return the stored event"
    events = store.read_all()
    now_head = events[-1]["ordinal"] if events else model.through
    assert now_head == head, "idempotent re-append wrote an event"


def _payload(fdp: DataProvider) -> dict[str, Any]:
    kind = fdp.int_in_range(0, 3)
    if kind == 0:
        return {}
    if kind == 1:
        return {"n": fdp.int_in_range(0, 2**53 - 1)}
    if kind == 2:
        return {"text": fdp.text(24), "list": [1, None, True, 1.5]}
    return {"blob": "x" * fdp.int_in_range(0, 3000)}  # grows the tail bytes


def _run_ops(
    fdp: DataProvider,
    store: OrchestrationEventStore,
    model: Model,
    fs: FaultFs,
    reopen: Any,
) -> None:
    """Run the operation sequence; raise :class:`Interrupted` on the fault.
    ``reopen()`` returns a new store instance over the same directory."""
    for _ in range(fdp.int_in_range(1, 24)):
        op = fdp.int_in_range(0, 7)
        try:
            if op <= 2:
                _append(fdp, store, model, op)
            elif op == 3:
                check_log(store, model, exact=True)
            elif op == 4:
                k = (
                    model.head
                    + fdp.int_in_range(0, 3)
                    - 2
                    - (model.head - model.through) * (fdp.int_in_range(0, 1))
                )
                if k < model.through and model.through > 0:
                    try:
                        store.read_after(k)
                    except OrchestrationSnapshotRequiredError:
                        pass
                    else:
                        raise AssertionError("read_after below T did not require the snapshot")
                else:
                    got = [e["ordinal"] for e in store.read_after(k)]
                    want = [n for n in range(model.through + 1, model.head + 1) if n > k]
                    assert got == want, "read_after returned the wrong events"
            elif op == 5:
                _compact(fdp, store, model)
            elif op == 6:
                store = reopen()
            else:
                check_keys(store, model, model.head)
        except (SimulatedCrash, OSError) as exc:
            if fs.fired:
                raise Interrupted from exc
            raise


def _has_lone_surrogate(payload: dict[str, Any]) -> bool:
    text = payload.get("text")
    return isinstance(text, str) and any("\ud800" <= ch <= "\udfff" for ch in text)


def _append(fdp: DataProvider, store: OrchestrationEventStore, model: Model, op: int) -> None:
    key = fdp.pick(KEYS) if op == 1 else None
    expected: int | None = None
    if op == 2:
        expected = model.head + fdp.pick((0, 0, 0, 1, -1))
        if fdp.boolean():
            key = fdp.pick(KEYS)
    item = AppendEventInput(
        type=fdp.pick(TYPES),
        aggregate_id=f"agg-{fdp.int_in_range(0, 3)}",
        actor=fdp.pick(ACTORS),
        payload=_payload(fdp),
        idempotency_key=key,
    )
    if _has_lone_surrogate(item.payload):
        # Validation comes first (ES-013, ES-015): refused before the key
        # lookup and the ordinal check, and nothing is written.
        try:
            store.append(item, expected_last_ordinal=expected)
        except OrchestrationConcurrencyError as exc:
            raise AssertionError("an invalid input reached the ordinal check") from exc
        except OrchestrationEventStoreError:
            assert _cursor_last(store) in (None, model.head)
            return
        raise AssertionError("an input with a lone surrogate was accepted")
    if key is not None and key in model.keys:
        event = store.append(item, expected_last_ordinal=expected)
        assert event == model.acked[model.keys[key]], "idempotent append returned another event"
        assert _cursor_last(store) == model.head
        return
    if expected is not None and expected != model.head:
        try:
            store.append(item, expected_last_ordinal=expected)
        except OrchestrationConcurrencyError:
            return
        raise AssertionError("a stale expected_last_ordinal was accepted")
    model.pending_append = item
    try:
        event = store.append(item, expected_last_ordinal=expected)
    except OrchestrationConcurrencyError as exc:
        raise AssertionError("the right expected_last_ordinal was refused") from exc
    model.pending_append = None
    model.head += 1
    assert event["ordinal"] == model.head, "append did not take H+1"
    assert _same_input(event, item)
    model.acked[model.head] = event
    if key is not None:
        model.keys[key] = model.head
    assert _cursor_last(store) == model.head, "cursor is not H after an append"


def _compact(fdp: DataProvider, store: OrchestrationEventStore, model: Model) -> None:
    target = model.head if fdp.int_in_range(0, 3) else model.head - 1
    projection = model.projection()
    calls: list[int] = []

    def project() -> dict[str, Any]:
        calls.append(1)
        return projection

    model.pending_compaction = target
    previous = model.projections.get(target)
    model.projections[target] = projection
    done = store.compact_if_needed(target, project)
    model.pending_compaction = None
    if not done:
        assert not calls, "projection() called without compacting"
        if previous is None:
            del model.projections[target]
        else:
            model.projections[target] = previous
        if target == model.head:
            tail = model.head - model.through
            assert tail < store.max_tail_events, "a due compaction (by count) did not run"
            assert _tail_bytes(store, model) < store.max_tail_bytes, (
                "a due compaction (by bytes) did not run"
            )
        return
    assert target == model.head, "compacted below the head"
    assert len(calls) == 1, "projection() not called exactly once"
    assert model.head - model.through >= 1
    model.through = target
    assert _cursor_last(store) == model.head, "cursor is not H after compaction"


def _tail_bytes(store: OrchestrationEventStore, model: Model) -> int:
    """Bytes of the event files above T, from the directory itself."""
    total = 0
    for n in range(model.through + 1, model.head + 1):
        total += os.stat(os.path.join(store.events_dir, event_file_name(n))).st_size
    return total


def _new_store(root: str, clock: Clock, limits: tuple[int, int], fs: FsOps) -> Any:
    return OrchestrationEventStore(
        root,
        SESSION,
        now=clock.now,
        create_event_id=clock.event_id,
        max_tail_events=limits[0],
        max_tail_bytes=limits[1],
        fs=fs,
    )


def TestOneInput(data: bytes) -> None:
    """One fuzz input: limits, a fault, operations; then reopen and check.

    Raises:
        AssertionError: an invariant broke (a finding).
        Exception: anything else the store raised unexpectedly (a finding).
    """
    fdp = DataProvider(data)
    limits = (fdp.int_in_range(1, 8), fdp.pick((400, 2000, 4 << 20)))
    fault_at = fdp.int_in_range(0, 255)
    crash = fdp.boolean()
    err = fdp.pick((errno.EIO, errno.ENOSPC))
    root = tempfile.mkdtemp(prefix="leasegate-fuzz-store-", dir=_harness.scratch_root())
    try:
        clock = Clock()
        fs = FaultFs(fault_at, crash=crash, err=err)
        store = _new_store(root, clock, limits, fs)
        model = Model()
        interrupted = False
        try:
            _run_ops(fdp, store, model, fs, lambda: _new_store(root, clock, limits, fs))
        except Interrupted:
            interrupted = True
        # Reopen with the real file system and check.
        reopened = _new_store(root, clock, limits, FsOps())
        through, head = check_log(reopened, model, exact=not interrupted)
        if head > model.head:
            assert model.pending_append is not None
            event = reopened.read_all()[-1]
            model.acked[head] = event
            if model.pending_append.idempotency_key:
                model.keys[model.pending_append.idempotency_key] = head
        model.head = head
        model.through = through
        check_keys(reopened, model, head)  # before reconciliation: no duplicates
        item = AppendEventInput(
            type="task.failed", aggregate_id="after", actor="kernel", payload={}
        )
        event = reopened.append(item)
        assert event["ordinal"] == head + 1, "append after reopen did not take H+1"
        model.acked[head + 1] = event
        model.head = head + 1
        model.pending_append = None
        model.pending_compaction = None
        assert _cursor_last(reopened) == model.head, "cursor is not H after reconciliation"
        check_log(reopened, model, exact=True)
        check_keys(reopened, model, model.head)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)


def _seed(*parts: int) -> bytes:
    return bytes(parts)


#: Seed inputs (written by ``fuzz/make_seeds.py``): limits, fault, ops.
#: Layout: max_tail_events-1, tail-bytes pick, fault step, crash bit, errno
#: pick, op count-1, then per op its choices.
SEEDS: dict[str, bytes] = {
    "seed-appends-no-fault": _seed(2, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3),
    "seed-keyed-appends-and-dup": _seed(7, 2, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0)
    + _seed(0, 0, 0, 0, 7, 3),
    "seed-compaction": _seed(1, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 5, 1, 3, 4, 0),
    "seed-crash-at-step-5": _seed(1, 2, 5, 1, 0, 5, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0),
    "seed-crash-at-step-20": _seed(1, 2, 20, 1, 0, 9, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 5, 1)
    + _seed(0, 0, 0, 0, 0, 0, 0),
    "seed-enospc-at-step-9": _seed(2, 2, 9, 0, 1, 6, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2),
    "seed-expected-ordinal": _seed(3, 2, 0, 0, 0, 4, 2, 0, 0, 0, 0, 0, 0, 2, 3, 0, 0, 0, 0, 0),
    "seed-reopen-read-after": _seed(3, 2, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 6, 4, 2, 0, 4, 1, 1),
}


if __name__ == "__main__":
    _harness.main(TestOneInput)
