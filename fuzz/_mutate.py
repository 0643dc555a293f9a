"""Structured mutation of JSON values, shared by the fuzz harnesses.

:func:`mutate` applies a few field-level mutations that a
:class:`~_harness.DataProvider` chooses (type swaps, ``bool`` for ``int``,
huge and unsafe integers, floats, control characters and lone surrogates,
long strings, extra, missing and duplicated keys and items, a copy of
another subtree); :func:`refresh_digest` recomputes a grant's manifest
digest so the mutation gets past the digest check; :func:`check_no_leak`
asserts a decoded value's ``repr``/``str`` shows no canary secret.

Used by ``codec_harness.py`` (frames and envelopes) and by the machine
harnesses (``registry_harness.py``, ``runtime_harness.py``,
``replica_harness.py``) for the frames they feed. The choices a given byte
string makes are part of the corpora's meaning: change them only by adding
options at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from typing import Any

from _harness import DataProvider
from leasegate.core import Secret, canonical_dumps, sha256_hex

__all__ = ["CANARY", "check_no_leak", "mutate", "refresh_digest"]

#: The marker every canary secret of the harnesses contains.
CANARY = "CANARY"

_KEYS: tuple[str, ...] = (
    "kind",
    "opId",
    "taskId",
    "runEpoch",
    "lease",
    "manifest",
    "sessions",
    "expiresAt",
    "__proto__",
    "constructor",
    "",
    "extra",
    "authKind",
    "class",
    "value",
)

_INTS: tuple[int, ...] = (
    0,
    1,
    -1,
    2**31,
    2**53 - 1,
    2**53,
    -(2**53 - 1),
    -(2**53),
    2**63,
    2**64 + 1,
    10**30,
    -(10**30),
    10**400,  # beyond the float range
    -(10**400),
)

_FLOATS: tuple[float, ...] = (0.0, -0.0, 1.0, 1.5, 5e-324, 1e308, 9007199254740993.0)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in ``value`` (the root is ``()``), depth-first."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _new_value(fdp: DataProvider, old: Any, root: Any) -> Any:
    """A replacement for ``old``: a type swap, a boundary, or a tweak."""
    choice = fdp.int_in_range(0, 17)
    if choice == 0:
        return None
    if choice == 1:
        return fdp.boolean()
    if choice == 2:
        return fdp.pick(_INTS)
    if choice == 3:
        return fdp.pick(_FLOATS)
    if choice == 4:
        return fdp.text(40)
    if choice == 5:
        # A long string around the limits (128, 512, 1024, 4096 ...).
        n = fdp.pick((127, 128, 129, 256, 257, 512, 513, 1024, 1025, 4096, 4097, 8193, 16385))
        return (fdp.text(4) or "a") * n
    if choice == 6:
        return []
    if choice == 7:
        return {}
    if choice == 8:
        return copy.deepcopy(_get(root, fdp.pick(_paths(root))))
    if choice == 9:
        # Type swap: a number as a string, a string as a number.
        if isinstance(old, int | float) and not isinstance(old, bool):
            return str(old)
        if isinstance(old, str):
            return len(old)
        return [old]
    if isinstance(old, bool):
        return int(old) if choice % 2 else not old
    if isinstance(old, int):
        as_float = float(old) if abs(old) < 2**1000 else old
        return fdp.pick((old + 1, old - 1, -old, old * 1000, as_float, bool(old & 1)))
    if isinstance(old, float):
        return int(old) if old.is_integer() and abs(old) < 1e300 else -old
    if isinstance(old, str):
        op = fdp.int_in_range(0, 5)
        if op == 0:
            return old + fdp.text(3)
        if op == 1:
            return old[: fdp.int_in_range(0, len(old))]
        if op == 2:
            at = fdp.int_in_range(0, len(old))
            return (
                old[:at] + fdp.pick(("\x00", "\x1f", "\x7f", "\t", "\n", "\ud800", "/")) + old[at:]
            )
        if op == 3:
            return old.upper()
        if op == 4:
            return old + "/.."
        return " " + old
    if isinstance(old, list):
        if old and fdp.boolean():
            return [*old, copy.deepcopy(fdp.pick(old))]  # a duplicate item
        return old[: fdp.int_in_range(0, len(old))]
    if isinstance(old, dict):
        return {k: v for k, v in old.items() if fdp.boolean()}
    return None


def mutate(fdp: DataProvider, value: Any) -> Any:
    """Apply 0..4 mutations (the count comes first, so an exhausted provider
    leaves ``value`` unchanged). Returns the mutated copy."""
    root = copy.deepcopy(value)
    for _ in range(fdp.int_in_range(0, 4)):
        paths = _paths(root)
        path = fdp.pick(paths)
        op = fdp.int_in_range(0, 3)
        if path == ():
            if op == 0:
                root = _new_value(fdp, root, root)
            continue
        parent = _get(root, path[:-1])
        last = path[-1]
        if op == 0 or op == 1:
            parent[last] = _new_value(fdp, parent[last], root)
        elif op == 2:
            # Remove the key or item.
            del parent[last]
        else:
            # Add a key (to a dict) or an item (to a list).
            if isinstance(parent, dict):
                key = fdp.pick(_KEYS) if fdp.boolean() else fdp.text(12)
                parent[key] = _new_value(fdp, parent[last], root)
            else:
                parent.insert(fdp.int_in_range(0, len(parent)), copy.deepcopy(parent[last]))
    return root


def refresh_digest(value: Any) -> None:
    """Recompute ``lease.manifestDigest`` from ``lease.manifest`` in place,
    when both are where a grant has them and the manifest is JSON."""
    if not isinstance(value, dict):
        return
    lease = value.get("lease")
    if not isinstance(lease, dict) or "manifest" not in lease:
        return
    try:
        lease["manifestDigest"] = sha256_hex(canonical_dumps(lease["manifest"]))
    except (ValueError, TypeError):
        return


def _leaves(obj: Any, secrets: list[str], plain: list[str], depth: int = 0) -> None:
    """Collect revealed secret strings and other strings of a decoded value."""
    if depth > 200:
        return
    if isinstance(obj, Secret):
        secrets.append(obj.reveal())
    elif isinstance(obj, str):
        plain.append(obj)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _leaves(getattr(obj, f.name), secrets, plain, depth + 1)
    elif isinstance(obj, dict | types.MappingProxyType):
        for k, v in obj.items():
            _leaves(k, secrets, plain, depth + 1)
            _leaves(v, secrets, plain, depth + 1)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _leaves(v, secrets, plain, depth + 1)


def check_no_leak(obj: Any) -> None:
    """A decoded value's ``repr``/``str`` shows no canary secret.

    Only decisive when some secret contains ``CANARY`` and no non-secret
    string does (a canary in a non-secret field may legitimately show)."""
    secrets: list[str] = []
    plain: list[str] = []
    _leaves(obj, secrets, plain)
    if not any(CANARY in s for s in secrets) or any(CANARY in p for p in plain):
        return
    for shown in (repr(obj), str(obj)):
        assert CANARY not in shown, "a secret value shows in repr/str"
