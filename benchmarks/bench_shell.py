"""Benchmark the runner shells (not a test): grant-to-open latency and idle cost.

Two parts, for the async shell (anyio on asyncio; the idle part also on
trio) and the threading shell:

1. **Grant-to-open latency** (``--iterations`` task runs each, default 15):
   the reference cloud on a moto server on 127.0.0.1 behind its WebSocket
   server; the shell connects with its WebSocket transport
   (``AnyioWebSocketTransport`` / ``ThreadWebSocketClient``). Timed: from the
   moment the transport hands the shell the ``lease.grant.v1`` frame to the
   moment the engines gate opens (the run is then launch-ready). In between:
   the grant's checks, one SSM reader built from the lease's own STS
   session, the ``GetParameters`` reads against moto, the install, the open
   fan-out. Baselines measured in the same run, with the **same names** the
   shell read: ``direct_warm`` = the same ``GetParameters`` calls on one
   boto3 client built beforehand; ``direct_cold`` = building a boto3 client
   from the lease's keys on one long-lived boto3 session first (what a host
   calling boto3 directly does per lease: the shell must also build one
   client per lease session), then the same calls. The goal is judged
   against ``direct_cold``; ``direct_warm`` is reported as the floor no
   per-lease client can reach. Reported: medians and p90 in milliseconds, and the ratios
   shell / baseline (goal ≤ 1.2×).

2. **Idle runs** (``--idle-runs``, default 10,000): that many task runs
   granted and launch-ready at once (in-memory cloud and parameter store, no
   moto), each with its registry timers armed (renewal, expiry). Reported:
   memory in bytes per run four ways: resident set growth of the whole
   process and ``tracemalloc`` growth of the whole process (both include the
   in-process reference cloud's own state),
   ``tracemalloc`` growth allocated at lines of ``leasegate/core`` and
   ``leasegate/shells``, and the object graph reachable from the shell
   (``sys.getsizeof``, the cloud and its store excluded); timers armed; the number
   of **sleepers**: asyncio or trio tasks sleeping in ``AsyncTimerHeap.run`` / threads
   named ``leasegate-timers`` (goal: one per shell), plus every task/thread
   of the shell.

Writes one JSON document to ``--out`` (default ``.benchmarks/bench_shell.json``)
and prints it as the last line of stdout; a summary goes to stderr. The
goals are checked **inside the report** (``goals``), never by a test.

Usage::

    python3 benchmarks/bench_shell.py [--iterations 15] [--idle-runs 10000]
        [--skip-latency] [--skip-idle] [--experiment-shared-loader] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pathlib
import platform
import queue
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import anyio
import boto3

from leasegate.core.registry import Assignment, OpenReader, ReadParameters, TaskView
from leasegate.core.runtime import CredentialRuntime
from leasegate.shells.async_shell import AsyncRunnerShell
from leasegate.shells.ssm import ReadResult, SessionCredentials, SsmReader, _normalize
from leasegate.shells.thread_shell import ThreadRunnerShell
from leasegate.shells.timers import wall_clock_ms
from leasegate.shells.transport import (
    AnyioWebSocketTransport,
    Backoff,
    ThreadWebSocketClient,
    thread_memory_pair,
)
from leasegate.testing import (
    CloudWebSocketServer,
    MemoryCloudLink,
    MemoryParameterStore,
    MotoServer,
    ReferenceCloud,
    start_moto,
)

BOOT = "boot-bench"
GOAL_RATIO = 1.2


class GatePort:
    """A consumer port recording when each task's gate opened (perf_counter seconds)."""

    def __init__(self) -> None:
        self.opened: dict[str, float] = {}
        self.leased: dict[str, Assignment] = {}

    def open(self, assignment: Assignment, view: TaskView) -> None:
        self.opened.setdefault(assignment.task_id, time.perf_counter())
        self.leased[assignment.task_id] = assignment

    def close(self, assignment: Assignment) -> None:
        pass

    def forget(self, what: Any) -> None:
        pass

    def install(self, request: Any) -> None:
        pass

    def leased_run(self, task_id: str) -> Assignment | None:
        return self.leased.get(task_id)

    def hold_git(self, assignment: Assignment) -> Any:
        raise RuntimeError("not used")


class Capture:
    """A recorder keeping the readers opened and the names read (no values)."""

    def __init__(self) -> None:
        self.opened: list[OpenReader] = []
        self.reads: list[tuple[str, ...]] = []

    def record(self, event: Any, commands: Any) -> None:
        for cmd in commands:
            if isinstance(cmd, OpenReader):
                self.opened.append(cmd)
            elif isinstance(cmd, ReadParameters):
                self.reads.append(tuple(cmd.selectors))


def _grant_times(sink: dict[str, float]) -> Callable[[Any], None]:
    def note(value: Any) -> None:
        if isinstance(value, dict) and value.get("kind") == "lease.grant.v1":
            lease = value.get("lease")
            task = lease.get("taskId") if isinstance(lease, dict) else None
            if isinstance(task, str):
                sink.setdefault(task, time.perf_counter())

    return note


class TimedAsync:
    """Wraps an async transport: notes when each task's grant frame is handed over."""

    def __init__(self, inner: Any, note: Callable[[Any], None]) -> None:
        self.inner = inner
        self.note = note

    async def send(self, value: Any) -> None:
        await self.inner.send(value)

    async def receive(self) -> Any:
        value = await self.inner.receive()
        self.note(value)
        return value

    async def aclose(self) -> None:
        await self.inner.aclose()


class TimedThread:
    """Wraps a blocking transport: notes when each task's grant frame is handed over."""

    def __init__(self, inner: Any, note: Callable[[Any], None]) -> None:
        self.inner = inner
        self.note = note

    def send(self, value: Any) -> None:
        self.inner.send(value)

    def receive(self, timeout_s: float | None = None) -> Any:
        value = self.inner.receive(timeout_s)
        self.note(value)
        return value

    def close(self) -> None:
        self.inner.close()


def _moto_cloud(moto: MotoServer, credentials: int) -> ReferenceCloud:
    moto.reset()
    cloud = ReferenceCloud(
        ssm=moto.ssm_client(), sts=moto.sts_client(), region=moto.region, clock=wall_clock_ms
    )
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    for i in range(credentials):
        cloud.add_engine_credential("alice", f"engine-{i}", env={"API_KEY": f"bench-value-{i}"})
    return cloud


def _runtime(seed: str, gate: GatePort) -> CredentialRuntime:
    return CredentialRuntime(
        runner_kind="owned", op_id_seed=seed, engines=gate, mcp=GatePort(), person=GatePort()
    )


#: One long-lived boto3 session, as a host calling boto3 directly keeps one:
#: a client per lease is built on it (its parsed service models are reused).
_BOTO_SESSION = boto3.session.Session()


def _boto_client(moto: MotoServer, cmd: OpenReader) -> Any:
    s = cmd.session
    return _BOTO_SESSION.client(
        "ssm",
        region_name=cmd.region,
        endpoint_url=moto.url,
        aws_access_key_id=s.access_key_id,
        aws_secret_access_key=s.secret_access_key.reveal(),
        aws_session_token=s.session_token.reveal(),
    )


def _baselines(moto: MotoServer, cap: Capture, warm: Any) -> tuple[float, float]:
    """(cold, warm) seconds for the same GetParameters calls the shell made."""
    t0 = time.perf_counter()
    client = _boto_client(moto, cap.opened[-1])
    for names in cap.reads:
        client.get_parameters(Names=list(names), WithDecryption=True)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for names in cap.reads:
        warm.get_parameters(Names=list(names), WithDecryption=True)
    return cold, time.perf_counter() - t0


def _stats(xs: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in xs)
    return {
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 3),
        "min_ms": round(ms[0], 3),
    }


def _reader_factory(moto: MotoServer) -> Callable[[OpenReader], SsmReader]:
    def make(cmd: OpenReader) -> SsmReader:
        return SsmReader(
            SessionCredentials.from_lease(cmd.session, cmd.region), endpoint_url=moto.url
        )

    return make


def latency_async(moto: MotoServer, iterations: int, credentials: int) -> dict[str, Any]:
    cloud = _moto_cloud(moto, credentials)
    gate = GatePort()
    rt = _runtime("bench-async", gate)
    cap = Capture()
    grants: dict[str, float] = {}
    shell_s: list[float] = []
    cold_s: list[float] = []
    warm_s: list[float] = []
    names: list[int] = []
    warm_client: list[Any] = []

    async def main() -> None:
        with CloudWebSocketServer(cloud) as server:
            async with AnyioWebSocketTransport(
                server.url, backoff=Backoff(base_ms=20, max_ms=200)
            ) as ws:
                await ws.wait_connected()
                transport = TimedAsync(ws, _grant_times(grants))
                shell = AsyncRunnerShell(
                    rt, transport, reader_factory=_reader_factory(moto), recorder=cap
                )
                async with shell:
                    for i in range(iterations + 1):  # the first one warms up
                        task = f"async-{i}"
                        cloud.assign(task, 1, "acme", "alice", runner_boot_id=BOOT)
                        cap.opened.clear()
                        cap.reads.clear()
                        start = await shell.begin_start(task, 1)
                        await shell.wait_launch_ready(start)
                        elapsed = gate.opened[task] - grants[task]
                        await shell.close(task, 1, "stop")
                        if not warm_client:
                            warm_client.append(_boto_client(moto, cap.opened[-1]))
                        cold, warm = await anyio.to_thread.run_sync(
                            _baselines, moto, cap, warm_client[0]
                        )
                        if i == 0:
                            continue
                        shell_s.append(elapsed)
                        cold_s.append(cold)
                        warm_s.append(warm)
                        names.append(sum(len(r) for r in cap.reads))

    anyio.run(main, backend="asyncio")
    return _latency_report(shell_s, cold_s, warm_s, names)


def latency_thread(moto: MotoServer, iterations: int, credentials: int) -> dict[str, Any]:
    cloud = _moto_cloud(moto, credentials)
    gate = GatePort()
    rt = _runtime("bench-thread", gate)
    cap = Capture()
    grants: dict[str, float] = {}
    shell_s: list[float] = []
    cold_s: list[float] = []
    warm_s: list[float] = []
    names: list[int] = []
    warm = None
    with CloudWebSocketServer(cloud) as server:
        client = ThreadWebSocketClient(server.url, backoff=Backoff(base_ms=20, max_ms=200))
        client.start()
        client.wait_connected(10)
        transport = TimedThread(client, _grant_times(grants))
        shell = ThreadRunnerShell(rt, transport, reader_factory=_reader_factory(moto), recorder=cap)
        with shell:
            for i in range(iterations + 1):
                task = f"thread-{i}"
                cloud.assign(task, 1, "acme", "alice", runner_boot_id=BOOT)
                cap.opened.clear()
                cap.reads.clear()
                start = shell.begin_start(task, 1)
                shell.wait_launch_ready(start, timeout_s=60)
                elapsed = gate.opened[task] - grants[task]
                shell.close(task, 1, "stop", timeout_s=60)
                if warm is None:
                    warm = _boto_client(moto, cap.opened[-1])
                cold, warm_t = _baselines(moto, cap, warm)
                if i == 0:
                    continue
                shell_s.append(elapsed)
                cold_s.append(cold)
                warm_s.append(warm_t)
                names.append(sum(len(r) for r in cap.reads))
    return _latency_report(shell_s, cold_s, warm_s, names)


def _latency_report(
    shell_s: list[float], cold_s: list[float], warm_s: list[float], names: list[int]
) -> dict[str, Any]:
    shell, cold, warm = _stats(shell_s), _stats(cold_s), _stats(warm_s)
    return {
        "iterations": len(shell_s),
        "names_read_per_grant": statistics.median(names) if names else 0,
        "grant_to_open": shell,
        "direct_cold": cold,
        "direct_warm": warm,
        "ratio_vs_cold": round(shell["median_ms"] / cold["median_ms"], 3),
        "ratio_vs_warm": round(shell["median_ms"] / warm["median_ms"], 3),
    }


# ------------------------------------------------------------------ idle


class MemReader:
    """An in-memory reader over the cloud's parameter store (no HTTP)."""

    def __init__(self, store: MemoryParameterStore) -> None:
        self.store = store
        self.closed = False

    def read_blocking(self, names: Any) -> ReadResult:
        return _normalize(self.store.get_parameters(Names=list(names), WithDecryption=True))

    async def read(self, names: Any, limiter: Any = None) -> ReadResult:
        return self.read_blocking(names)

    def seal(self) -> None:
        self.closed = True


def _mem_cloud() -> tuple[ReferenceCloud, MemoryParameterStore]:
    store = MemoryParameterStore()
    cloud = ReferenceCloud(ssm=store, clock=wall_clock_ms)
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_engine_credential("alice", "engine-0", env={"API_KEY": "idle-value"})
    return cloud, store


def _traced() -> tuple[int, int]:
    """(all traced bytes, bytes allocated at lines of leasegate/core or leasegate/shells)."""
    snap = tracemalloc.take_snapshot()
    ours = snap.filter_traces(
        (
            tracemalloc.Filter(True, "*leasegate/core/*"),
            tracemalloc.Filter(True, "*leasegate/shells/*"),
        )
    )
    total = sum(s.size for s in snap.statistics("filename"))
    return total, sum(s.size for s in ours.statistics("filename"))


def _graph_bytes(root: object, stop: tuple[type, ...]) -> int:
    """``sys.getsizeof`` summed over the objects reachable from ``root``.

    Not followed: types, modules, functions and code (shared), and instances
    of ``stop`` (the in-process cloud, its parameter store, the transport).
    """
    import types

    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
    seen: set[int] = set()
    todo = [root]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (skip, stop)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def _rss() -> int:
    """Resident set size now, bytes, minus tracemalloc's own bookkeeping (Linux)."""
    try:
        pages = int(pathlib.Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    import resource

    return pages * resource.getpagesize() - tracemalloc.get_tracemalloc_memory()


def _memory(before: tuple[int, int, int], shell: object, runs: int) -> dict[str, int]:
    gc.collect()
    after = (*_traced(), _rss())
    stop = (ReferenceCloud, MemoryParameterStore, MemoryCloudLink, threading.Thread)
    return {
        "rss_bytes_per_run_process": round((after[2] - before[2]) / runs),
        "traced_bytes_per_run_process": round((after[0] - before[0]) / runs),
        "traced_bytes_per_run_core_and_shell_sites": round((after[1] - before[1]) / runs),
        "graph_bytes_per_run": round(_graph_bytes(shell, stop) / runs),
    }


def _sleeps_in_timer_heap(coro: Any) -> bool:
    """Whether a coroutine's await chain is inside ``AsyncTimerHeap.run``."""
    while coro is not None:
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        if code is not None and code.co_name == "run" and code.co_filename.endswith("timers.py"):
            return True
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return False


def _all_coros(backend: str) -> list[Any]:
    """The coroutines of every task of the running event loop (asyncio or trio)."""
    if backend == "asyncio":
        return [t.get_coro() for t in asyncio.all_tasks()]
    import trio

    coros: list[Any] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        coros.append(task.coro)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return coros


def _async_sleepers(backend: str) -> tuple[int, int]:
    """(tasks sleeping in AsyncTimerHeap.run, all tasks) of the running loop."""
    coros = _all_coros(backend)
    return sum(1 for c in coros if _sleeps_in_timer_heap(c)), len(coros)


def idle_async(runs: int, backend: str = "asyncio") -> dict[str, Any]:
    cloud, store = _mem_cloud()
    gate = GatePort()
    rt = _runtime("idle-async", gate)
    out: dict[str, Any] = {"runs": runs, "backend": backend}

    async def main() -> None:
        transport = MemoryCloudLink(cloud).async_end()
        shell = AsyncRunnerShell(rt, transport, reader_factory=lambda c: MemReader(store))  # type: ignore[arg-type,return-value]
        async with shell:
            tasks_before = shell.running_tasks
            gc.collect()
            tracemalloc.start(1)
            base = (*_traced(), _rss())
            t0 = time.perf_counter()
            for i in range(runs):
                task = f"idle-{i}"
                cloud.assign(task, 1, "acme", "alice", runner_boot_id=BOOT)
                start = await shell.begin_start(task, 1)
                await shell.wait_launch_ready(start)
            out["setup_s"] = round(time.perf_counter() - t0, 2)
            out.update(_memory(base, shell, runs))
            tracemalloc.stop()
            sleepers, all_tasks = _async_sleepers(backend)
            out.update(
                {
                    "open_runs": sum(1 for i in range(runs) if rt.open_run(f"idle-{i}") == 1),
                    "timers_armed": shell._heap.armed,
                    "sleepers": sleepers,
                    "shell_tasks_before": tasks_before,
                    "shell_tasks_idle": shell.running_tasks,
                    "event_loop_tasks": all_tasks,
                }
            )
            t0 = time.perf_counter()
            await shell.shutdown(timeout_s=60)
            out["shutdown_s"] = round(time.perf_counter() - t0, 2)
        out["shell_tasks_after"] = shell.running_tasks

    anyio.run(main, backend=backend)
    return out


def _thread_link(cloud: ReferenceCloud, end: Any, stop: threading.Event) -> None:
    """Pump frames between the cloud and a ThreadFrameEnd until ``stop``."""
    while not stop.is_set():
        try:
            value = end.receive(0.002)
            cloud.receive_text(json.dumps(value))
        except queue.Empty:
            pass
        except EOFError:
            return
        for frame in cloud.take_outgoing():
            end.send(frame)


def idle_thread(runs: int) -> dict[str, Any]:
    cloud, store = _mem_cloud()
    gate = GatePort()
    rt = _runtime("idle-thread", gate)
    out: dict[str, Any] = {"runs": runs}
    ours, theirs = thread_memory_pair(max_buffer=4096)
    stop = threading.Event()
    pump = threading.Thread(target=_thread_link, args=(cloud, theirs, stop), daemon=True)
    pump.start()
    shell = ThreadRunnerShell(rt, ours, reader_factory=lambda c: MemReader(store))  # type: ignore[arg-type,return-value]
    with shell:
        threads_before = shell.running_threads
        gc.collect()
        tracemalloc.start(1)
        base = (*_traced(), _rss())
        t0 = time.perf_counter()
        for i in range(runs):
            task = f"idle-{i}"
            cloud.assign(task, 1, "acme", "alice", runner_boot_id=BOOT)
            start = shell.begin_start(task, 1)
            shell.wait_launch_ready(start, timeout_s=60)
        out["setup_s"] = round(time.perf_counter() - t0, 2)
        out.update(_memory(base, shell, runs))
        tracemalloc.stop()
        names = [t.name for t in threading.enumerate() if t.name.startswith("leasegate-")]
        out.update(
            {
                "open_runs": sum(1 for i in range(runs) if rt.open_run(f"idle-{i}") == 1),
                "timers_armed": shell.timers_armed,
                "sleepers": names.count("leasegate-timers"),
                "shell_threads_before": threads_before,
                "shell_threads_idle": shell.running_threads,
                "shell_thread_names": sorted(set(names)),
            }
        )
        t0 = time.perf_counter()
        shell.shutdown(timeout_s=60)
        out["shutdown_s"] = round(time.perf_counter() - t0, 2)
    stop.set()
    pump.join(5)
    out["shell_threads_after"] = shell.running_threads
    return out


def _share_loader() -> None:
    """Experiment: one botocore data loader for every reader (the service model is parsed once).

    ``SsmReader`` builds a fresh isolated botocore session per lease reader;
    most of a reader's build time is that session loading and parsing the
    SSM service model again. This patches ``isolated_botocore_session`` (in
    this process only) to register one shared loader, to show what the
    shells' latency would be with it.
    """
    import botocore.loaders

    from leasegate.shells import ssm

    loader = botocore.loaders.create_loader()
    original = ssm.isolated_botocore_session

    def shared(**kwargs: Any) -> Any:
        session = original(**kwargs)
        session.register_component("data_loader", loader)
        return session

    ssm.isolated_botocore_session = shared  # type: ignore[assignment]


def main() -> None:
    """Run the parts asked for; write and print the JSON report."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--credentials", type=int, default=3, help="engine credentials per grant")
    ap.add_argument("--idle-runs", type=int, default=10_000)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument(
        "--experiment-shared-loader",
        action="store_true",
        help="experiment: every SsmReader's botocore session shares one data loader",
    )
    ap.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path(".benchmarks/bench_shell.json")
    )
    args = ap.parse_args()
    result: dict[str, Any] = {
        "benchmark": "bench_shell",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "goals": {},
    }
    goals = result["goals"]
    if args.experiment_shared_loader:
        _share_loader()
        result["experiment"] = "shared botocore data loader across lease readers"
    if not args.skip_latency:
        moto = start_moto()
        try:
            for name, fn in (("async", latency_async), ("thread", latency_thread)):
                rep = fn(moto, args.iterations, args.credentials)
                result[f"latency_{name}"] = rep
                goals[f"grant_to_open_{name}_vs_cold_le_{GOAL_RATIO}x"] = (
                    rep["ratio_vs_cold"] <= GOAL_RATIO
                )
                goals[f"grant_to_open_{name}_vs_warm_le_{GOAL_RATIO}x"] = (
                    rep["ratio_vs_warm"] <= GOAL_RATIO
                )
                print(
                    f"{name}: grant->open {rep['grant_to_open']['median_ms']} ms, "
                    f"direct cold {rep['direct_cold']['median_ms']} ms "
                    f"(x{rep['ratio_vs_cold']}), warm {rep['direct_warm']['median_ms']} ms "
                    f"(x{rep['ratio_vs_warm']})",
                    file=sys.stderr,
                )
        finally:
            moto.stop()
    if not args.skip_idle:
        idle_parts: tuple[tuple[str, Any], ...] = (
            ("async", idle_async),
            ("trio", lambda runs: idle_async(runs, backend="trio")),
            ("thread", idle_thread),
        )
        for name, fn2 in idle_parts:
            rep2 = fn2(args.idle_runs)
            result[f"idle_{name}"] = rep2
            goals[f"one_sleeper_{name}"] = rep2["sleepers"] == 1
            print(
                f"{name}: {rep2['runs']} idle runs, {rep2['graph_bytes_per_run']} B/run (graph), "
                f"{rep2['timers_armed']} timers, {rep2['sleepers']} sleeper(s)",
                file=sys.stderr,
            )
    text = json.dumps(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
