"""Fixtures for the event store and ledger tests.

* ``make_store(**opts)``: a store on a temporary agent dir with a
  deterministic clock (``2026-01-01T00:00:00.000Z``) and ids (``e1``, ``e2`` ...).
* ``RecordingFs``: an ``FsOps`` that logs every step as ``(op, bare name)``.
* ``CrashFs``: an ``FsOps`` that performs the N-th mutating step and then
  "dies": it raises ``SimulatedCrash`` (a ``BaseException``) and refuses every
  later call, as a killed process would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leasegate.shells.store import AppendEventInput, FsOps, OrchestrationEventStore

NOW = "2026-01-01T00:00:00.000Z"


class SimulatedCrash(BaseException):
    """The simulated process death."""


class RecordingFs(FsOps):
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def _rec(self, op: str, path: str) -> None:
        self.log.append((op, os.path.basename(path)))

    def write(self, path: str, data: bytes) -> int:
        self._rec("write", path)
        return super().write(path, data)

    def fsync_file(self, fd: int) -> None:
        self.log.append(("fsync", ""))
        super().fsync_file(fd)

    def rename(self, src: str, dst: str) -> None:
        self._rec("rename", dst)
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self._rec("fsync_dir", path)
        super().fsync_dir(path)

    def unlink(self, path: str) -> None:
        self._rec("unlink", path)
        super().unlink(path)

    def mkdir(self, path: str) -> None:
        self._rec("mkdir", path)
        super().mkdir(path)

    def read(self, path: str) -> bytes:
        self._rec("read", path)
        return super().read(path)

    def reads_of(self, name: str) -> int:
        return sum(1 for op, n in self.log if op == "read" and n == name)


class CrashFs(FsOps):
    """Performs mutating step number ``crash_at`` (1-based), then dies."""

    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.steps: list[tuple[str, str]] = []
        self.dead = False

    def _step(self, op: str, path: str) -> None:
        if self.dead:
            raise SimulatedCrash("dead")
        self.steps.append((op, os.path.basename(path)))

    def _after(self) -> None:
        if len(self.steps) == self.crash_at:
            self.dead = True
            raise SimulatedCrash(f"crash after step {self.crash_at}: {self.steps[-1]}")

    def write(self, path: str, data: bytes) -> int:
        self._step("write", path)
        fd = super().write(path, data)
        if len(self.steps) == self.crash_at:
            os.close(fd)
        self._after()
        return fd

    def fsync_file(self, fd: int) -> None:
        self._step("fsync", "")
        super().fsync_file(fd)
        if len(self.steps) == self.crash_at:
            os.close(fd)
            self.dead = True
            raise SimulatedCrash("crash after fsync")

    def close(self, fd: int) -> None:
        if self.dead:
            raise SimulatedCrash("dead")
        super().close(fd)

    def rename(self, src: str, dst: str) -> None:
        self._step("rename", dst)
        super().rename(src, dst)
        self._after()

    def fsync_dir(self, path: str) -> None:
        self._step("fsync_dir", path)
        super().fsync_dir(path)
        self._after()

    def unlink(self, path: str) -> None:
        self._step("unlink", path)
        super().unlink(path)
        self._after()

    def mkdir(self, path: str) -> None:
        self._step("mkdir", path)
        super().mkdir(path)
        self._after()

    def read(self, path: str) -> bytes:
        if self.dead:
            raise SimulatedCrash("dead")
        return super().read(path)


def ev(
    key: str | None = None,
    payload: dict[str, Any] | None = None,
    *,
    type: str = "task.created",
    aggregate: str = "a",
    actor: str = "runtime",
    **extra: Any,
) -> AppendEventInput:
    return AppendEventInput(
        type=type,
        aggregate_id=aggregate,
        actor=actor,
        payload={} if payload is None else payload,
        idempotency_key=key,
        **extra,
    )


class Ids:
    def __init__(self) -> None:
        self.n = 0
        self.now_calls = 0

    def event_id(self) -> str:
        self.n += 1
        return f"e{self.n}"

    def now(self) -> str:
        self.now_calls += 1
        return NOW


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent"


@pytest.fixture
def ids() -> Ids:
    return Ids()


@pytest.fixture
def make_store(agent_dir: Path, ids: Ids) -> Callable[..., OrchestrationEventStore]:
    def make(session: str = "s1", **opts: Any) -> OrchestrationEventStore:
        opts.setdefault("now", ids.now)
        opts.setdefault("create_event_id", ids.event_id)
        return OrchestrationEventStore(agent_dir, session, **opts)

    return make


@pytest.fixture
def store(make_store: Callable[..., OrchestrationEventStore]) -> OrchestrationEventStore:
    return make_store()


@pytest.fixture
def helpers() -> Any:
    class H:
        ev = staticmethod(ev)
        RecordingFs = RecordingFs
        CrashFs = CrashFs
        SimulatedCrash = SimulatedCrash
        NOW = NOW

    return H


# ---------------------------------------------------------------------------
# PostgreSQL: one throwaway server per test session (tests/ledger/pg_server.py)


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """A running PostgreSQL server on 127.0.0.1 started for this test run.

    Skips (with the reason) when psycopg or the server binaries are missing,
    except in CI (``CI=true``), where that fails instead.
    """
    from .pg_server import PgServer, find_pg_bin

    def unavailable(reason: str) -> None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL tests cannot run in CI: {reason}")
        pytest.skip(reason)

    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        unavailable("psycopg/psycopg-pool not installed (extra leasegate[postgres])")
    bin_dir = find_pg_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL server binaries (pg_ctl, initdb) on this machine")
    assert bin_dir is not None
    import atexit

    server = PgServer(bin_dir)
    atexit.register(server.stop)  # also when the run is interrupted
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_conninfo(pg_server: Any) -> str:
    """The connection string of the test run's database on the test server
    (tests keep apart by session id: see ``pg_session``)."""
    import psycopg

    name = f"leasegate_tests_{os.getpid()}"
    with psycopg.connect(pg_server.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"host=127.0.0.1 port={pg_server.port} user=postgres dbname={name}"


@pytest.fixture(scope="session")
def pg_pool(pg_conninfo: str) -> Any:
    """An open pool (schema migrated) on the test run's database."""
    from leasegate.shells.store.postgres import create_pool

    pool = create_pool(pg_conninfo, max_size=8)
    try:
        yield pool
    finally:
        pool.close(timeout=5)


@pytest.fixture
def pg_session(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``pg_session("s1")``: a session id unique to this test (the test run
    shares one database)."""
    import hashlib

    prefix = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    return lambda name: f"{prefix}/{name}"


@pytest.fixture(params=["file", "postgres"])
def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend the contract tests run on: the file store, PostgreSQL."""
    return str(request.param)


@pytest.fixture
def make_contract_store(
    store_backend: str, request: pytest.FixtureRequest, agent_dir: Path, ids: Ids
) -> Callable[..., Any]:
    """``make(session="s1", **opts)``: a store of the backend under test with
    the deterministic clock and ids of ``make_store``."""
    if store_backend == "file":

        def make_file(session: str = "s1", **opts: Any) -> Any:
            opts.setdefault("now", ids.now)
            opts.setdefault("create_event_id", ids.event_id)
            return OrchestrationEventStore(agent_dir, session, **opts)

        return make_file
    from leasegate.shells.store.postgres import PostgresEventStore

    pool = request.getfixturevalue("pg_pool")
    named = request.getfixturevalue("pg_session")

    def make_pg(session: str = "s1", **opts: Any) -> Any:
        opts.setdefault("now", ids.now)
        opts.setdefault("create_event_id", ids.event_id)
        return PostgresEventStore(pool, named(session), **opts)

    return make_pg
