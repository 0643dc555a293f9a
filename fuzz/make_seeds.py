"""Write the seed corpora of the harnesses into ``fuzz/corpus/<harness>/``.

``python3 fuzz/make_seeds.py`` (re)writes the ``seed-*`` files only; files
with other names (regressions, ``bug-*``, inputs merged in from fuzzing
runs) are never touched. The seeds are small, readable inputs that reach
every branch of each harness's input layout, so that a fuzzing run starts
from valid frames rather than from nothing. The machine harnesses'
(registry, replica, runtime) seeds are found by a deterministic random
search that keeps inputs reaching commands no earlier seed reached
(:func:`_search_seeds`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness


def _frame_seeds() -> dict[str, bytes]:
    codec = _harness.load_harness("codec_harness")
    out: dict[str, bytes] = {}
    # Mode 0: raw JSON text of every example frame, plus tricky texts.
    for i, template in enumerate(codec.FRAME_TEMPLATES):
        kind = str(template.get("kind", "x")).replace(".", "-")
        out[f"seed-raw-{i:02d}-{kind}"] = b"\x00" + json.dumps(template).encode()
    grant = codec.FRAME_TEMPLATES[
        [t["kind"] for t in codec.FRAME_TEMPLATES].index("lease.grant.v1")
    ]
    text = json.dumps(grant)
    tricky = {
        "dup-kind": b'{"kind":"lease.deny","kind":"lease.unavailable","opId":"lease-1-abc"}',
        "nan": b'{"kind":"lease.request","opId":"lease-1-abc","taskId":"t","runEpoch":NaN}',
        "float-epoch": b'{"kind":"lease.request","opId":"lease-1-abc","taskId":"t","runEpoch":1.0}',
        "unsafe-epoch": (
            b'{"kind":"lease.request","opId":"lease-1-abc","taskId":"t","runEpoch":9007199254740992}'
        ),
        "bool-epoch": b'{"kind":"lease.request","opId":"lease-1-abc","taskId":"t","runEpoch":true}',
        "surrogate": b'{"kind":"lease.deny","opId":"lease-1-abc","error":"\\ud800"}',
        "control": b'{"kind":"lease.deny","opId":"lease-1-abc","error":"a\\u0000b"}',
        "deep": b"[" * 5000 + b"]" * 5000,
        "bad-utf8": b'{"kind":"\xff"}',
        "bom": b"\xef\xbb\xbf{}",
        "grant-extra-key": text[:-1].encode() + b',"extra":1}',
        "grant-whitespace": json.dumps(grant, indent=2).encode(),
    }
    for name, body in tricky.items():
        out[f"seed-raw-tricky-{name}"] = b"\x00" + body
    # Mode 1: raw envelopes, each at its own location and one at a wrong one.
    for i, (loc, env) in enumerate(codec.ENVELOPE_TEMPLATES):
        out[f"seed-env-{i:02d}-{env['class']}"] = b"\x01" + bytes([loc]) + json.dumps(env).encode()
    for i, loc in enumerate(codec.LOCATIONS):
        out[f"seed-param-{i:02d}"] = b"\x01\x00" + loc.parameter.encode()
    out["seed-param-versioned"] = b"\x01\x00" + codec.LOCATIONS[0].parameter.encode() + b":3"
    out["seed-param-dotdot"] = b"\x01\x00/uai/orgs/../credentials/mcp/x"
    loc0, env0 = codec.ENVELOPE_TEMPLATES[0]
    out["seed-env-wrong-location"] = b"\x01" + bytes([loc0 + 3]) + json.dumps(env0).encode()
    # Modes 2 and 3: each template unmutated (the mutation count byte is 0).
    for i in range(len(codec.FRAME_TEMPLATES)):
        out[f"seed-struct-frame-{i:02d}"] = bytes([2, i, 0, 0])
    for i in range(len(codec.ENVELOPE_TEMPLATES)):
        out[f"seed-struct-env-{i:02d}"] = bytes([3, i, 1, 0, 1])
    # A few mutated ones.
    out["seed-struct-frame-mutated-a"] = bytes([2, 0, 1, 3, 7, 1, 2, 9, 5, 1, 3, 3, 0, 4, 1])
    out["seed-struct-frame-mutated-b"] = bytes([2, 0, 9, 2, 40, 0, 2, 200, 3, 1, 1])
    out["seed-struct-env-mutated"] = bytes([3, 0, 1, 2, 6, 0, 9, 4, 2, 1])
    # Modes 4 and 5: project env envelopes (raw, then structured unmutated).
    for i, (staged, env) in enumerate(codec.PROJECT_ENV_TEMPLATES):
        which = "staged" if staged else "legacy"
        out[f"seed-projenv-{i:02d}-{which}"] = (
            b"\x04" + bytes([1 if staged else 0]) + json.dumps(env).encode()
        )
        out[f"seed-struct-projenv-{i:02d}"] = bytes([5, i, 0])
    return out


def _store_seeds() -> dict[str, bytes]:
    store = _harness.load_harness("store_harness")
    return dict(store.SEEDS)


def _features(cmd: object) -> set[str]:
    """What a command shows of the path taken: its type, plus its reason,
    error or message text and an answer's value type."""
    name = type(cmd).__name__
    out = {name}
    for attr in ("reason", "error", "message", "op", "consumer", "what"):
        value = getattr(cmd, attr, None)
        if isinstance(value, str) and len(value) < 120:
            out.add(f"{name}.{attr}={value}")
        msg = getattr(value, "message", None)
        if isinstance(msg, str):
            out.add(f"{name}.{attr}={msg}")
    if name == "Answer":
        out.add(f"Answer:{type(getattr(cmd, 'value', None)).__name__}")
    ack = getattr(cmd, "ack", None)
    if ack is not None:
        out.add(f"ack:{getattr(ack, 'ok', '?')}:{getattr(ack, 'error', '')}")
    return out


def _search_seeds(name: str, tries: int, max_len: int, keep: int) -> dict[str, bytes]:
    """Seeds for a machine harness, found by a deterministic random search.

    Random inputs (``random.Random(name)``) run through the harness; an input
    is kept when the commands it causes show a feature (:func:`_features`)
    no kept input showed, smallest inputs first among equals, at most
    ``keep``. Inputs that fail the harness are never kept (they would be
    findings, not seeds).
    """
    harness = _harness.load_harness(name)
    seen_now: set[str] = set()
    original = harness.Harness.feed

    def spy(self: object, event: object) -> list[object]:
        out = original(self, event)
        seen_now.add("event:" + type(event).__name__)
        for cmd in out:
            seen_now.update(_features(cmd))
        return out

    rng = random.Random(name)
    covered: set[str] = set()
    found: list[tuple[int, bytes]] = []
    harness.Harness.feed = spy
    try:
        for _ in range(tries):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(8, max_len)))
            seen_now.clear()
            try:
                harness.TestOneInput(data)
            except Exception:  # noqa: BLE001 - a finding is not a seed
                continue
            new = seen_now - covered
            if new:
                covered |= new
                found.append((len(new), data))
    finally:
        harness.Harness.feed = original
    best = sorted(found, key=lambda f: (-f[0], len(f[1])))[:keep]
    return {f"seed-search-{i:02d}": data for i, (_, data) in enumerate(best)}


#: Machine harnesses whose seeds come from :func:`_search_seeds`:
#: ``name -> (tries, max input length, seeds kept)``.
SEARCHED: dict[str, tuple[int, int, int]] = {
    "registry_harness": (3000, 400, 24),
    "replica_harness": (4000, 400, 24),
    "runtime_harness": (2500, 400, 24),
}


def main() -> None:
    """Write every harness's ``seed-*`` files (overwriting older seeds)."""
    todo = [("codec_harness", _frame_seeds()), ("store_harness", _store_seeds())]
    for name, (tries, max_len, keep) in SEARCHED.items():
        todo.append((name, _search_seeds(name, tries, max_len, keep)))
    for name, seeds in todo:
        directory = _harness.CORPUS_DIR / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("seed-*"):
            old.unlink()
        for file_name, data in seeds.items():
            (directory / file_name).write_bytes(data)
        print(f"{name}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
