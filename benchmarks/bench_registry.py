"""Benchmark the lease registry core (not a test).

Task runs, each driven from ``StartRun`` through a grant (by default 14
credentials: 10 engines, 2 MCP connections, GitHub, SSH; and 2 projects) to
an open gate, every completion (gate outcomes, reads, install) fed back
synchronously by a minimal in-process shell. Only the time spent inside
``LeaseRegistry.handle`` is counted as core time, as CPU time of the thread
(``time.thread_time_ns``: on a shared machine, time spent descheduled is not
the core's); it includes decoding the grant frame, which ``handle`` does.

Cases, one row each, every one measured in this one run:

* ``open runs N``: microseconds per run-to-open of the runs started while
  about ``N`` runs (1, 1,000, 5,000) are already open in the same registry
  (runs stay open): the mean over the runs from ``N`` to ``N + w``, with
  ``w`` the larger of ``--window`` and ``N / 4``. A full collection of the
  cyclic garbage collector walks every open run's state and comes about
  each time the tracked objects grew by a quarter, so a window of a quarter
  of the open runs holds about one at every size: the mean is the
  amortized cost, not the luck of whether a collection fell inside a short
  window. ``ratio_to_first`` compares with the first window: the goal is
  flat (≤ 1.1).
* ``credentials K``: 1, 14 and 50 credentials per grant, ``--runs`` runs in
  a fresh registry.

Each row also gives ``json.loads`` of that case's grant frame (the floor's
first part) and the ratio of run-to-open to it.

Prints a human summary on stderr and one JSON document on stdout (what
``benchmarks/run_all.py`` merges), also written to ``--out`` (default
``.benchmarks/bench_registry.json``, git-ignored).

Usage::

    python3 benchmarks/bench_registry.py [--runs 1000] [--window 200] [--out PATH]
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

from leasegate.core import Secret, canonical_dumps, decode, sha256_hex
from leasegate.core.registry import (
    CloseGate,
    FrameReceived,
    GateCallbackDone,
    InstallFinished,
    LeaseRegistry,
    OpenGate,
    ReadCompleted,
    ReadParameters,
    RunInstall,
    SendFrame,
    SsmParameter,
    StartRun,
)
from leasegate.core.wire.credentials import (
    EngineValue,
    GithubValue,
    McpHeader,
    McpValue,
    SshValue,
    credential_parameter_name,
    encode_leased_value,
    parse_parameter_name,
)
from leasegate.core.wire.lease import Manifest, canonical_manifest_json

ORG, USER = "org-1", "user-1"
T0 = 1_800_000_000_000


def _manifest(credentials: int = 14) -> dict[str, Any]:
    """A manifest of ``credentials`` entries (≥ 1): engines, then 2 MCP, GitHub, SSH.

    14 is 10 engines, 2 MCP connections, GitHub and SSH; 1 is one engine; 50
    is 46 engines and the same four others.
    """

    def p(cls: str, cid: str) -> str:
        return credential_parameter_name(ORG, USER, cls, cid)  # type: ignore[arg-type]

    n_engines = credentials if credentials < 4 else credentials - 4
    engines = [
        {
            "credentialId": f"engine-{i}",
            "engine": "claude-code",
            "revision": f"rev-{i}",
            "parameter": p("engine", f"engine-{i}"),
            "version": 3,
            "sessionId": "s1",
            "authKind": "env",
        }
        for i in range(n_engines)
    ]
    mcp = [
        {
            "credentialId": f"mcp-{i}",
            "server": "linear",
            "revision": f"rev-m{i}",
            "parameter": p("mcp", f"mcp-{i}"),
            "version": 1,
            "sessionId": "s1",
            "authKind": "token",
        }
        for i in range(2 if credentials >= 4 else 0)
    ]
    static = {
        cls: {
            "credentialId": f"{cls}-1",
            "revision": "rev-1",
            "parameter": p(cls, f"{cls}-1"),
            "version": 2,
            "sessionId": "s1",
        }
        for cls in ("github", "ssh")
    }
    return {
        "engines": engines,
        "mcp": mcp,
        "github": static["github"] if credentials >= 4 else None,
        "ssh": static["ssh"] if credentials >= 4 else None,
        "projects": [{"projectId": f"proj-{i}", "sessionId": "s1"} for i in range(2)],
    }


def _lease(
    task: str,
    manifest: dict[str, Any],
    digest: str,
    *,
    secret_access_key: str = "secret",
    session_token: str = "token",
) -> dict[str, Any]:
    """The ``lease`` object of a grant for ``task`` (run 1, one credentials session)."""
    session = {
        "id": "s1",
        "purpose": "credentials",
        "accessKeyId": "ASIAEXAMPLEEXAMPLE01",
        "secretAccessKey": secret_access_key,
        "sessionToken": session_token,
        "expiresAt": T0 + 7_200_000,
    }
    return {
        "taskId": task,
        "runEpoch": 1,
        "leaseId": f"lease-{task}",
        "orgId": ORG,
        "userId": USER,
        "region": "us-east-1",
        "manifestRevision": 4,
        "manifestDigest": digest,
        "manifest": manifest,
        "sessions": [session],
        "files": None,
        "expiresAt": T0 + 7_200_000,
    }


def _values(credentials: int) -> dict[str, str]:
    out: dict[str, str] = {}
    m = _manifest(credentials)
    for e in [*m["engines"], *m["mcp"], *(x for x in (m["github"], m["ssh"]) if x is not None)]:
        loc = parse_parameter_name(e["parameter"])
        assert loc is not None
        value: Any
        if loc.credential_class == "engine":
            value = EngineValue(location=loc, auth_kind="env", env={"K": Secret("v")}, files=None)
        elif loc.credential_class == "mcp":
            value = McpValue(
                location=loc,
                auth_kind="token",
                header=McpHeader(name="Authorization", value=Secret("v")),
                access_token=None,
            )
        elif loc.credential_class == "github":
            value = GithubValue(location=loc, token=Secret("v"))
        else:
            value = SshValue(location=loc, private_key=Secret("v"))
        out[e["parameter"]] = encode_leased_value(value)
    return out


def drive(runs: int, credentials: int = 14) -> list[int]:
    """Drive ``runs`` task runs to an open gate in one registry.

    Returns the core time (ns of thread CPU time inside ``handle``) of each
    run, in order; every run stays open.
    """
    # The previous case's registry is garbage held by reference cycles (its
    # scheduler, coroutines and futures): collect it now, untimed, so that no
    # run of this case pays for walking it.
    gc.collect()
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="bench")
    manifest = _manifest(credentials)
    decoded = decode(Manifest, manifest)
    assert isinstance(decoded, Manifest)
    digest = sha256_hex(canonical_manifest_json(decoded))
    assert digest == sha256_hex(canonical_dumps(manifest))
    values = _values(credentials)
    per_run: list[int] = []
    opened = 0
    now = T0
    clock = time.thread_time_ns
    for n in range(runs):
        task = f"task-{n}"
        core_ns = 0
        queue: list[Any] = [StartRun(now_ms=now, call_id=n, task_id=task, run_epoch=1)]
        while queue:
            ev = queue.pop(0)
            t = clock()
            out = reg.handle(ev)
            core_ns += clock() - t
            for c in out:
                if isinstance(c, (CloseGate, OpenGate)):
                    queue.append(GateCallbackDone(now_ms=now, cmd_id=c.cmd_id))
                    if isinstance(c, OpenGate):
                        opened += 1
                elif isinstance(c, SendFrame):
                    grant = {
                        "kind": "lease.grant.v1",
                        "opId": c.frame.op_id,  # type: ignore[attr-defined]
                        "lease": _lease(task, manifest, digest),
                    }
                    queue.append(FrameReceived(now_ms=now, frame=grant))
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
                elif isinstance(c, RunInstall):
                    queue.append(InstallFinished(now_ms=now, cmd_id=c.cmd_id))
        per_run.append(core_ns)
    assert opened == runs, opened
    assert reg.internal_errors == 0
    return per_run


def _grant_loads_us(credentials: int) -> float:
    """Best per-call time of ``json.loads`` of this case's grant frame, in µs."""
    manifest = _manifest(credentials)
    decoded = decode(Manifest, manifest)
    assert isinstance(decoded, Manifest)
    digest = sha256_hex(canonical_manifest_json(decoded))
    text = json.dumps(
        {"kind": "lease.grant.v1", "opId": "op-1", "lease": _lease("task-0", manifest, digest)}
    )
    clock = time.thread_time_ns
    best = float("inf")
    for _ in range(200):
        t = clock()
        for _ in range(20):
            json.loads(text)
        best = min(best, (clock() - t) / 20)
    return best / 1e3


def _row(name: str, ns: list[int], loads_us: float, credentials: int) -> dict[str, Any]:
    us = sum(ns) / len(ns) / 1e3
    return {
        "name": name,
        "credentials": credentials,
        "runs_timed": len(ns),
        "core_us_per_run_to_open": round(us, 1),
        "json_loads_grant_us": round(loads_us, 1),
        "ratio_to_json_loads": round(us / loads_us, 1),
    }


def run(runs: int, window: int = 200) -> dict[str, Any]:
    """Every case (module docstring); return the JSON report."""
    cases: list[dict[str, Any]] = []
    marks = (1, 1000, 5000)
    loads14 = _grant_loads_us(14)
    drive(20, 14)  # warm-up, untimed: compiles the model decoders once
    widths = {mark: max(window, mark // 4) for mark in marks}
    per_run = drive(marks[-1] + widths[marks[-1]], 14)
    first = None
    for mark in marks:
        start = 0 if mark == 1 else mark
        row = _row(f"open runs {mark}", per_run[start : start + widths[mark]], loads14, 14)
        first = first or row["core_us_per_run_to_open"]
        row["ratio_to_first"] = round(row["core_us_per_run_to_open"] / first, 2)
        cases.append(row)
    for credentials in (1, 14, 50):
        ns = drive(runs, credentials)
        cases.append(
            _row(f"credentials {credentials}", ns, _grant_loads_us(credentials), credentials)
        )
    return {
        "benchmark": "bench_registry",
        "clock": "thread CPU time inside handle()",
        "projects_per_grant": 2,
        "goal_us_per_run_to_open_14_credentials": 150,
        "goal_ratio_to_first": 1.1,
        "cases": cases,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    """Parse arguments, run, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[1] / ".benchmarks" / "bench_registry.json",
    )
    args = ap.parse_args()
    result = run(args.runs, args.window)
    for row in result["cases"]:
        print(
            f"{row['name']}: {row['core_us_per_run_to_open']} µs core per run-to-open, "
            f"{row['ratio_to_json_loads']}x json.loads of the grant "
            f"({row['json_loads_grant_us']} µs)"
            + (f", {row['ratio_to_first']}x the first" if "ratio_to_first" in row else ""),
            file=sys.stderr,
        )
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
