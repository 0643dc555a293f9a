"""Regenerate COVERAGE.md from the test names (``python3 tests/core/registry/make_coverage.py``).

A test covers an entry when its name starts with ``test_LR_<id>_``. Notes say
where a test covers only part of its entry; keep them truthful.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

NOTES = {
    14: "port decision: a failed send is reported by the `SendFailed` event after the "
    "`SendFrame` command (docs/registry.md)",
    91: "a change announced while the run is not usable is re-read once a grant is usable "
    "(decision R2, docs/registry.md)",
    114: "a lease with less than 13 min 20 s left is renewed on decision R1's schedule "
    "(docs/registry.md), not the reference's",
    19: "port decision: a hook failure is the `GrantHookFailed` event, reported when it arrives",
    141: "an abort signal already aborted is the shell's to refuse (it does not send "
    "`WaitUsable`); `WaitCancelled` covers a later abort",
    31: 'the "unrequested credential version" sub-check cannot be reached through events '
    "(a selector is always built from the entry's own version); kept as defense in depth, "
    "not tested",
    34: "the classification itself (name, HTTP 403, message regex) is the shell's job "
    "(`ReadFailed.access_denied`); the core tests cover how the flag is used",
    43: "guard unreachable through events: a missing session fails the chunk read first "
    "(LR-030); the test asserts that observable outcome",
    133: "parametrized race matrix: in-flight read / cleanup / install × stop / supersession / "
    "floor raise / expiry / newer grant",
    155: "a read through a sealed reader is reached by a committed grant still installing "
    "while a newer grant narrows (breaker test); the other tests cover sealing, "
    "drain-then-close and close-once",
    136: "parametrized race matrix for credential changes: in-flight read / refusal cleanup / "
    "install × stop / supersession / floor raise / expiry / newer grant",
    153: "the `readStaged`/`readLegacy` adapter is the shell's; the core test covers reading "
    "through the bundle usable at call time",
    156: "SSM client construction is the shell's; the core test covers the region and the "
    "single session handed to `OpenReader`",
}

HEADER = """# LR coverage of the lease registry core

Every entry of `design/behaviors/lease-registry.md` and the test(s) named after it.
All tests are driven by events only (no sleeps, no mocked clock, no AWS).
Kept truthful: an entry is listed with a test only when that test exists and passes;
notes say where a test covers only part of an entry. Regenerate with
`python3 tests/core/registry/make_coverage.py`.

Also: `test_registry_properties.py` (determinism byte for byte, also across processes
and hash seeds; canaries; malformed and unexpected frames; random events never
raise; random walks with in-order and out-of-order completions keep the gate
and no-revival invariants), `test_gate_protocol.py` (the gate-callback
contract of `docs/events-and-commands.md`) and `test_quirks.py` (decisions
Q1, Q2, Q11 of `docs/registry.md`).

| id | tests | notes |
| --- | --- | --- |
"""


def main() -> None:
    """Write COVERAGE.md next to this file."""
    ids: dict[int, list[str]] = {}
    for f in sorted(HERE.glob("test_*.py")):
        for m in re.finditer(r"def (test_LR_(\d{3})_\w+)", f.read_text(encoding="utf-8")):
            ids.setdefault(int(m.group(2)), []).append(f"`{f.name}::{m.group(1)}`")
    rows = [
        f"| LR-{i:03d} | {'<br>'.join(ids.get(i, [])) or 'not yet'} | {NOTES.get(i, '')} |"
        for i in range(1, 164)
    ]
    out = HERE / "COVERAGE.md"
    # Hand-written sections after the table (the breaker review) are kept.
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    marker = "\n## Breaker review"
    tail = old[old.index(marker) :] if marker in old else ""
    out.write_text(HEADER + "\n".join(rows) + "\n" + tail, encoding="utf-8")


if __name__ == "__main__":
    main()
