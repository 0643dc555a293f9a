"""Benchmark: strict wire decode against bare ``json.loads`` of the same bytes.

Run ``python3 benchmarks/bench_codec.py``. Not a timed test: one run, one
ratio per case, no pass/fail. Prints a human summary on stderr and one JSON
document on stdout (what ``benchmarks/run_all.py`` merges)::

    {"benchmark": "codec", "python": "3.11.x", "cases": [
        {"name": ..., "bytes": ..., "json_loads_us": ..., "strict_decode_us": ...,
         "ratio": ..., "goal_ratio": 2.0}, ...]}

``strict_decode_us`` is the full path a shell runs per frame: parse the bytes
(``leasegate.core.loads``, JavaScript semantics) and decode strictly
(``decode_frame``). ``ratio`` = strict / bare ``json.loads``. Goal ≤ 2×.

Adding a case (e.g. the env replica's ``env.replica.v1.apply``): append a
:class:`Case` to :data:`CASES` below — a name, the frame's UTF-8 bytes and a
function from those bytes to the decoded frame. Nothing else changes.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core" / "wire"))

from wire_examples import big_grant  # noqa: E402

from leasegate.core import DecodeError, loads  # noqa: E402
from leasegate.core.wire import decode_frame  # noqa: E402

GOAL_RATIO = 2.0


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark case: ``decode(data)`` must return a decoded frame."""

    name: str
    data: bytes
    decode: Callable[[bytes], Any]


def strict_frame(data: bytes) -> Any:
    """Parse and strictly decode one frame; fail loudly if it does not decode."""
    out = decode_frame(loads(data))
    if isinstance(out, DecodeError):
        raise AssertionError(f"benchmark frame does not decode: {out}")
    return out


CASES: list[Case] = [
    Case(
        "lease.grant.v1 (14 credentials, 2 projects)",
        json.dumps(big_grant()).encode("utf-8"),
        strict_frame,
    ),
    # env replica engineer: append Case("env.replica.v1.apply (...)", data, fn) here.
]


def _per_call_us(fn: Callable[[], Any]) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    best = min(timer.repeat(repeat=7, number=number))
    return best / number * 1e6


def run(cases: list[Case]) -> dict[str, Any]:
    """Time every case; return the JSON report."""
    results = []
    for case in cases:
        case.decode(case.data)  # warm up (compiles the model decoders), and check
        data = case.data
        bare = _per_call_us(lambda: json.loads(data))
        strict = _per_call_us(lambda c=case: c.decode(data))  # type: ignore[misc]
        results.append(
            {
                "name": case.name,
                "bytes": len(data),
                "json_loads_us": round(bare, 2),
                "strict_decode_us": round(strict, 2),
                "ratio": round(strict / bare, 2),
                "goal_ratio": GOAL_RATIO,
            }
        )
    return {"benchmark": "codec", "python": platform.python_version(), "cases": results}


def main() -> int:
    report = run(CASES)
    for r in report["cases"]:
        print(
            f"{r['name']}: {r['bytes']} bytes, json.loads {r['json_loads_us']} us, "
            f"strict {r['strict_decode_us']} us, ratio {r['ratio']}x (goal <= {GOAL_RATIO}x)",
            file=sys.stderr,
        )
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
