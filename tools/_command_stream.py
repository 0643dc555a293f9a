"""Record the command stream of one source tree (used by ``tools/compare_commands.py``).

Run as ``python tools/_command_stream.py TREE OUT INPUT...`` with ``PYTHONPATH``
pointing at ``TREE/core`` and ``TREE/shells``. Every ``handle`` of the core's
machines (``CredentialRuntime``, ``LeaseRegistry``, ``ReplicaManager``) called
from outside a machine is recorded: the event's ``repr`` and the ``repr`` of
the commands it returned (secrets show as ``Secret`` redactions; memory
addresses are blanked). ``INPUT`` is ``fuzz:<harness>:<corpus file>`` (the file
is fed to ``TREE``'s own harness, so its driver answers the commands) or
``trace:<file>`` (replayed with ``TREE``'s ``replay_trace``); ``@FILE`` stands
for the inputs listed in ``FILE``, one a line. Each input's
outcome (``ok``, the exception's type, or the replay's divergence step) is
recorded after its stream.

Output: JSON lines ``{"input": ..., "n": step, "event": ..., "out": ...}`` and
``{"input": ..., "outcome": ...}``. Nothing of it is a secret: the core's
reprs never show one.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _clean(text: str) -> str:
    return _ADDRESS.sub(" at 0x?", text)


class _Stream:
    """Collects the top-level ``handle`` calls of the input being run."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.input = ""
        self.n = 0
        self.depth = 0

    def wrap(self, cls: type) -> None:
        real: Callable[..., Any] = cls.handle  # type: ignore[attr-defined]
        stream = self

        def handle(machine: Any, event: Any) -> Any:
            stream.depth += 1
            try:
                out = real(machine, event)
            finally:
                stream.depth -= 1
            if stream.depth == 0:
                stream.n += 1
                stream.write(
                    n=stream.n,
                    machine=cls.__name__,
                    event=_clean(repr(event)),
                    out=_clean(repr(out)),
                )
            return out

        cls.handle = handle  # type: ignore[attr-defined]

    def start(self, name: str) -> None:
        self.input = name
        self.n = 0

    def write(self, **fields: Any) -> None:
        self.sink.write(json.dumps({"input": self.input, **fields}, sort_keys=True) + "\n")


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        result = fn()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return f"raised {type(e).__name__}"
    if result is None:
        return "ok"
    div = getattr(result, "divergence", None)
    if div is not None:
        return f"diverged at step {getattr(div, 'step', '?')}"
    return "ok"


def _expand(args: list[str]) -> list[str]:
    """``args`` with each ``@FILE`` replaced by the non-empty lines of ``FILE``."""
    items: list[str] = []
    for arg in args:
        if arg.startswith("@"):
            lines = Path(arg[1:]).read_text(encoding="utf-8").splitlines()
            items.extend(line for line in lines if line)
        else:
            items.append(arg)
    return items


def main(argv: list[str]) -> int:
    """Record ``argv[2:]``'s inputs through tree ``argv[0]`` into file ``argv[1]``."""
    tree, out_path, inputs = Path(argv[0]).resolve(), argv[1], _expand(argv[2:])
    sys.path.insert(0, str(tree / "fuzz"))
    os.environ.pop("LEASEGATE_FUZZ_TRACE", None)
    from leasegate.core.registry import LeaseRegistry
    from leasegate.core.replica import ReplicaManager
    from leasegate.core.runtime import CredentialRuntime

    with open(out_path, "w", encoding="utf-8") as sink:
        stream = _Stream(sink)
        for cls in (CredentialRuntime, LeaseRegistry, ReplicaManager):
            stream.wrap(cls)
        harnesses: dict[str, Any] = {}
        for item in inputs:
            kind, _, rest = item.partition(":")
            if kind == "fuzz":
                name, _, file = rest.partition(":")
                stream.start(f"fuzz:{name}:{Path(file).name}")
                if name not in harnesses:
                    import _harness  # the tree's own

                    try:
                        harnesses[name] = _harness.load_harness(name)
                    except FileNotFoundError:
                        harnesses[name] = None
                mod = harnesses[name]
                if mod is None:
                    stream.write(outcome="no such harness in this tree")
                    continue
                data = Path(file).read_bytes()
                stream.write(outcome=_outcome(lambda m=mod, d=data: m.TestOneInput(d)))
            elif kind == "trace":
                stream.start(f"trace:{Path(rest).name}")
                from leasegate.shells.trace import replay_trace

                stream.write(outcome=_outcome(lambda p=rest: replay_trace(p)))
            else:
                print(f"unknown input {item!r}", file=sys.stderr)
                return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
