"""Record the invariant monitor's verdicts in one tree (used by ``tools/compare_monitor.py``).

Run as ``python tools/_monitor_stream.py TREE OUT INPUT...`` with ``PYTHONPATH``
pointing at ``TREE/core`` and ``TREE/shells``. Every
``InvariantMonitor.observe`` call made while an input runs is recorded with
the violations it returned (their ``repr``: property, step, task, run and the
fixed message, never a secret); at the end of each input every monitor it
built is summarized (steps, violations, internal errors).

``INPUT`` is

* ``fuzz:<harness>:<corpus file>``: the file fed to ``TREE``'s own harness
  (the runtime and registry harnesses observe every step);
* ``trace:<file>``: the trace replayed with ``TREE``'s ``replay_trace(...,
  monitor=True)``;
* ``walk:<seed>``: the runtime tests' random walk of that seed over the whole
  composition (``tests/core/runtime/test_runtime_walk.py``), observed by the
  monitor kit's driver (``tests/core/monitor/monitor_kit.py``), with
  ``Recover`` carrying its owed rows (the mid-run finding of
  ``docs/monitor.md`` may show).

After an input ran, the steps its first monitor observed (event, commands,
port calls: the very objects) are fed again, *mutated*, to ``MUTANTS`` fresh
monitors: steps dropped, repeated or swapped, commands dropped or reversed,
port calls moved or dropped, commands, port calls and parameter reads repeated later, runs,
times and assignments shifted, a secret of the stream leaked into a ``Log``.
A mutation is drawn from ``random.Random`` seeded with the input's name and
the mutant's number, so both trees see the same mutants. These broken
streams make the properties fire: a correct stream leaves every verdict
empty, so the correct streams alone would compare little.

Output: JSON lines ``{"input", "m", "n", "found"}`` (``m``: the monitor's
number within the input, ``n``: the step; only steps with violations),
``{"input", "m", "steps", "violations", "internal_errors"}`` per monitor and
``{"input", "outcome"}`` per input; the last line is ``{"observe_s": ...}``,
the processor time spent inside ``observe`` (not compared).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Mutated copies of each input's observed stream.
MUTANTS = 16


class _Recorder:
    """Wraps ``InvariantMonitor.observe``; collects the current input's calls."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.input = ""
        self.monitors: list[Any] = []
        self.steps: list[list[tuple[object, list[object], list[object]]]] = []
        self.observe_s = 0.0
        self.capture = True

    def wrap(self, cls: type) -> None:
        real: Callable[..., Any] = cls.observe  # type: ignore[attr-defined]
        rec = self

        def observe(mon: Any, event: object, commands: Any, port_calls: Any = ()) -> Any:
            idx = rec.index(mon)
            step = mon.steps
            if rec.capture and idx == 0:
                rec.steps[0].append((event, list(commands), list(port_calls)))
            t0 = time.process_time()
            found = real(mon, event, commands, port_calls)
            rec.observe_s += time.process_time() - t0
            if found:
                rec.write(m=idx, n=step, found=[repr(v) for v in found])
            return found

        cls.observe = observe  # type: ignore[attr-defined]

    def index(self, mon: Any) -> int:
        for i, m in enumerate(self.monitors):
            if m is mon:
                return i
        self.monitors.append(mon)
        self.steps.append([])
        return len(self.monitors) - 1

    def start(self, name: str) -> None:
        self.input = name
        self.monitors = []
        self.steps = []
        self.capture = True

    def summarize(self) -> None:
        for i, m in enumerate(self.monitors):
            self.write(
                m=i,
                steps=m.steps,
                violations=len(m.violations),
                internal_errors=m.internal_errors,
            )

    def write(self, **fields: Any) -> None:
        self.sink.write(json.dumps({"input": self.input, **fields}, sort_keys=True) + "\n")


def _secrets(steps: list[tuple[object, list[object], list[object]]]) -> list[str]:
    """The revealed ``Secret`` texts of a stream (first 20, in stream order)."""
    from leasegate.core import Secret

    out: dict[str, None] = {}

    def walk(x: object, depth: int) -> None:
        if depth > 8 or len(out) >= 20:
            return
        if isinstance(x, Secret):
            if len(x.reveal()) >= 8:
                out.setdefault(x.reveal(), None)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v, depth + 1)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v, depth + 1)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name, None), depth + 1)

    for ev, cmds, _calls in steps:
        walk(ev, 0)
        walk(cmds, 0)
    return list(out)


def _mutate(
    steps: list[tuple[object, list[object], list[object]]], rnd: random.Random, secrets: list[str]
) -> list[tuple[object, list[object], list[object]]]:
    from leasegate.core.runtime import Log

    out = [(ev, list(cmds), list(calls)) for ev, cmds, calls in steps]
    for _ in range(rnd.randint(1, 4)):
        if not out:
            break
        i = rnd.randrange(len(out))
        ev, cmds, calls = out[i]
        op = rnd.randrange(14)
        if op == 0:
            del out[i]
        elif op == 1:
            out.insert(rnd.randrange(i, len(out) + 1), (ev, list(cmds), list(calls)))
        elif op == 2 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif op == 3 and cmds:
            del cmds[rnd.randrange(len(cmds))]
        elif op == 4:
            cmds.reverse()
        elif op == 5 and calls:
            j = rnd.randrange(len(out))
            out[j][2].extend(calls)
            calls.clear()
        elif op == 6:
            calls.clear()
        elif op == 7 and secrets:
            cmds.insert(rnd.randrange(len(cmds) + 1), Log(message=rnd.choice(secrets)))
        elif op == 8 and cmds:
            moved = cmds.pop(rnd.randrange(len(cmds)))
            into = out[rnd.randrange(len(out))][1]
            into.insert(rnd.randrange(len(into) + 1), moved)
        elif op == 9 and calls:
            k = rnd.randrange(len(calls))
            calls[k] = _shifted(calls[k], rnd)
        elif op == 10:
            out[i] = (_shifted(ev, rnd), cmds, calls)
        elif op == 11 and cmds:
            k = rnd.randrange(len(cmds))
            cmds[k] = _shifted(cmds[k], rnd)
        elif op == 12 and (cmds or calls):
            j = rnd.randrange(i, len(out))
            if cmds:
                out[j][1].append(rnd.choice(cmds))
            if calls:
                out[j][2].append(rnd.choice(calls))
        elif op == 13:
            reads = [
                (k, c)
                for k, (_e, cs, _p) in enumerate(out)
                for c in cs
                if type(c).__name__ == "ReadParameters"
            ]
            if reads:
                k, c = rnd.choice(reads)
                out[rnd.randrange(k, len(out))][1].append(c)
    return out


def _shifted(x: object, rnd: random.Random) -> object:
    """``x`` with one run, time or assignment moved (a dataclass copy), else ``x``."""
    if not dataclasses.is_dataclass(x) or isinstance(x, type):
        return x
    names = [f.name for f in dataclasses.fields(x) if f.init]
    pick = [n for n in ("run_epoch", "now_ms", "assignment", "task_id") if n in names]
    if not pick:
        return x
    name = rnd.choice(pick)
    value = getattr(x, name, None)
    if name == "now_ms" and type(value) is int:
        new: object = value + rnd.choice((1, 10**6, 10**12))
    elif name == "run_epoch" and type(value) is int:
        new = value + rnd.choice((-1, 1))
    elif name == "task_id" and type(value) is str:
        new = value + "-other"
    elif name == "assignment":
        new = _shifted(value, rnd)
    else:
        return x
    try:
        return dataclasses.replace(x, **{name: new})  # type: ignore[type-var]
    except (TypeError, ValueError):
        return x


def _mutants(rec: _Recorder, cls: type) -> None:
    if not rec.steps or not rec.steps[0]:
        return
    steps = rec.steps[0]
    rec.capture = False
    secrets = _secrets(steps)
    for j in range(MUTANTS):
        rnd = random.Random(f"{rec.input}#{j}")  # noqa: S311 - reproducible mutants
        mon = cls()
        for ev, cmds, calls in _mutate(steps, rnd, secrets):
            mon.observe(ev, cmds, calls)


def _walk(tree: Path, seed: int) -> None:
    for sub in ("tests/support", "tests/core/runtime", "tests/core/monitor"):
        if str(tree / sub) not in sys.path:
            sys.path.insert(0, str(tree / sub))
    import monitor_kit
    import test_runtime_walk as walk

    walk.RtDriver = monitor_kit.MonitoredDriver  # type: ignore[misc]
    walk._walk(seed, replica=seed % 2 == 0)


def main(argv: list[str]) -> int:
    """Record ``argv[2:]``'s inputs through tree ``argv[0]`` into file ``argv[1]``."""
    tree, out_path, inputs = Path(argv[0]).resolve(), argv[1], argv[2:]
    sys.path.insert(0, str(tree / "fuzz"))
    from _command_stream import _outcome  # this tools/ directory's

    os.environ.pop("LEASEGATE_FUZZ_TRACE", None)
    from leasegate.core.monitor import InvariantMonitor

    with open(out_path, "w", encoding="utf-8") as sink:
        rec = _Recorder(sink)
        rec.wrap(InvariantMonitor)
        harnesses: dict[str, Any] = {}
        for item in inputs:
            kind, _, rest = item.partition(":")
            if kind == "fuzz":
                name, _, file = rest.partition(":")
                rec.start(f"fuzz:{name}:{Path(file).name}")
                if name not in harnesses:
                    import _harness  # the tree's own

                    harnesses[name] = _harness.load_harness(name)
                data = Path(file).read_bytes()
                outcome = _outcome(lambda m=harnesses[name], d=data: m.TestOneInput(d))
            elif kind == "trace":
                rec.start(f"trace:{Path(rest).name}")
                from leasegate.shells.trace import replay_trace

                outcome = _outcome(lambda p=rest: replay_trace(p, monitor=True))
            elif kind == "walk":
                rec.start(f"walk:{rest}")
                outcome = _outcome(lambda s=int(rest): _walk(tree, s))
            else:
                print(f"unknown input {item!r}", file=sys.stderr)
                return 2
            _mutants(rec, InvariantMonitor)
            rec.summarize()
            rec.write(outcome=outcome)
        sink.write(json.dumps({"observe_s": round(rec.observe_s, 3)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
