"""Benchmark the lease registry core (not a test).

1,000 task runs, each driven from ``StartRun`` through a grant of 14
credentials (10 engines, 2 MCP connections, GitHub, SSH) and 2 projects to an
open gate, every completion (gate outcomes, reads, install) fed back
synchronously by a minimal in-process shell. Only the time spent inside
``LeaseRegistry.handle`` is counted as core time.

Reports core microseconds per run-to-open and events per second: a human
summary on stderr, one JSON document on stdout (what ``benchmarks/run_all.py``
merges), and the same JSON written to ``--out`` (default
``.benchmarks/bench_registry.json``, git-ignored). Core time includes decoding
the grant frame, which ``handle`` does.

Usage::

    python3 benchmarks/bench_registry.py [--runs 1000] [--out PATH]
"""

from __future__ import annotations

import argparse
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


def _manifest() -> dict[str, Any]:
    def p(cls: str, cid: str) -> str:
        return credential_parameter_name(ORG, USER, cls, cid)  # type: ignore[arg-type]

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
        for i in range(10)
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
        for i in range(2)
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
        "github": static["github"],
        "ssh": static["ssh"],
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


def _values() -> dict[str, str]:
    out: dict[str, str] = {}
    m = _manifest()
    for e in [*m["engines"], *m["mcp"], m["github"], m["ssh"]]:
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


def run(runs: int) -> dict[str, Any]:
    """Drive ``runs`` task runs to an open gate; return the measurements."""
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="bench")
    manifest = _manifest()
    decoded = decode(Manifest, manifest)
    assert isinstance(decoded, Manifest)
    digest = sha256_hex(canonical_manifest_json(decoded))
    assert digest == sha256_hex(canonical_dumps(manifest))
    values = _values()
    core_ns = 0
    events = 0
    opened = 0
    now = T0
    for n in range(runs):
        task = f"task-{n}"
        queue: list[Any] = [StartRun(now_ms=now, call_id=n, task_id=task, run_epoch=1)]
        while queue:
            ev = queue.pop(0)
            t = time.perf_counter_ns()
            out = reg.handle(ev)
            core_ns += time.perf_counter_ns() - t
            events += 1
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
    assert opened == runs, opened
    assert reg.internal_errors == 0
    seconds = core_ns / 1e9
    return {
        "benchmark": "bench_registry",
        "runs": runs,
        "credentials_per_grant": 14,
        "projects_per_grant": 2,
        "events": events,
        "events_per_run": events / runs,
        "core_seconds": seconds,
        "core_us_per_run_to_open": core_ns / runs / 1e3,
        "events_per_second": events / seconds if seconds else None,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    """Parse arguments, run, print and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[1] / ".benchmarks" / "bench_registry.json",
    )
    args = ap.parse_args()
    result = run(args.runs)
    print(
        f"{result['runs']} runs to open: {result['core_us_per_run_to_open']:.1f} µs core per run, "
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
