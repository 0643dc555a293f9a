"""Leased values decoded from one envelope text are shared while held (LR-032).

``decode_leased_value`` returns the value it decoded before from an equal
text for the same location object, as long as that value is still held
somewhere; otherwise it decodes. These tests check the shared answer against
a decode of its own (``credentials._decode``, which never shares) over
generated and mutated envelopes: the same values, the same refusals, and
sharing that actually happens; and that a value's text is forgotten with it.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import random
from typing import Any

from lease_kit import envelope_header, typed

from leasegate.core import DecodeError
from leasegate.core.wire import credentials
from leasegate.core.wire.credentials import (
    CredentialLocation,
    decode_leased_value,
    parse_leased_value,
)

ORG, USER = "org-1", "user-1"

#: Values a mutation puts in place of a field (wrong types, limits, controls).
_ODD: tuple[Any, ...] = (
    None,
    0,
    1,
    2,
    True,
    1.0,
    "",
    "x",
    "a" * 200,
    "\x00",
    "a\nb",
    "..",
    [],
    {},
    {"K": "v"},
    ["x"],
    "engine",
    "mcp",
    "github",
    "ssh",
    "env",
    "token",
    "oauth",
    "config-dir",
    "leased-credential",
    ORG,
    USER,
    "other",
)


def _location(cls: str, cid: str, user: str | None = USER) -> CredentialLocation:
    return CredentialLocation(
        org_id=ORG,
        user_id=user,
        credential_class=cls,  # type: ignore[arg-type]
        credential_id=cid,
    )


def _envelope(rng: random.Random, cls: str, cid: str) -> dict[str, Any]:
    base = envelope_header(cls, cid)
    if cls == "engine":
        if rng.random() < 0.7:
            keys = rng.sample(["K", "API_KEY", "_X1", "TOKEN", "B"], rng.randint(1, 3))
            base |= {"authKind": "env", "env": {k: f"CANARY-{rng.random()}" for k in keys}}
        else:
            kind = rng.choice(["config-dir", "oauth", "token"])
            paths = rng.sample(["a.json", "d/b.txt", ".c", "x/y/z"], rng.randint(1, 2))
            base |= {"authKind": kind, "files": {p: f"CANARY-{rng.random()}" for p in paths}}
    elif cls == "mcp":
        if rng.random() < 0.7:
            base |= {
                "authKind": "token",
                "header": {"name": "Authorization", "value": f"Bearer CANARY-{rng.random()}"},
            }
        else:
            base |= {"authKind": "oauth", "accessToken": f"CANARY-{rng.random()}"}
    elif cls == "github":
        base |= {"token": f"CANARY-{rng.random()}"}
    else:
        base |= {"privateKey": f"-----BEGIN KEY-----\nCANARY-{rng.random()}\n-----END KEY-----\n"}
    return base


def _mutate(rng: random.Random, value: Any) -> Any:
    """``value`` with one random change at any depth (a key dropped, added or replaced)."""
    out = copy.deepcopy(value)
    node = out
    while isinstance(node, dict) and node and rng.random() < 0.4:
        child = node[rng.choice(list(node))]
        if not isinstance(child, dict) or not child:
            break
        node = child
    if not isinstance(node, dict):
        return out
    op = rng.random()
    if op < 0.3 and node:
        del node[rng.choice(list(node))]
    elif op < 0.45:
        node[rng.choice(["extra", "v", "Class", "env", "header"])] = rng.choice(_ODD)
    elif node:
        node[rng.choice(list(node))] = rng.choice(_ODD)
    return out


def _text(rng: random.Random, value: Any) -> str:
    """A JSON text of ``value``, compact or spaced, sorted or not, sometimes broken."""
    text = json.dumps(
        value,
        separators=rng.choice([(",", ":"), (", ", ": ")]),
        sort_keys=rng.random() < 0.5,
        ensure_ascii=rng.random() < 0.5,
    )
    r = rng.random()
    if r < 0.03:
        return text[:-1]
    if r < 0.06:
        return " " + text
    if r < 0.08:
        return text + "x"
    return text


def _cases(seed: int, n: int) -> list[tuple[str, CredentialLocation]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cls = rng.choice(["engine", "engine", "mcp", "github", "ssh"])
        cid = f"cred-{i % 7}"
        value = _envelope(rng, cls, cid)
        if rng.random() < 0.5:
            value = _mutate(rng, value)
        # Mostly its own location; sometimes another credential's or class's.
        r = rng.random()
        if r < 0.8:
            location = _location(cls, cid)
        elif r < 0.9:
            location = _location(cls, f"cred-{(i + 1) % 7}")
        else:
            location = _location(rng.choice(["engine", "mcp", "github", "ssh"]), cid)
        out.append((_text(rng, value), location))
    return out


def test_LR_032_shared_values_equal_a_decode_of_their_own_on_generated_and_mutated_envelopes() -> (
    None
):
    shared = accepted = refused = 0
    for raw, location in _cases(32, 3000):
        want = typed(credentials._decode(raw, location))
        first = decode_leased_value(raw, location)
        # A fresh text object of the same contents, as every read returns.
        again = decode_leased_value("".join(list(raw)), location)
        assert typed(first) == want
        assert typed(again) == want
        assert typed(parse_leased_value(raw, location)) == (
            want if want[0] is not DecodeError else (type(None), None)
        )
        if isinstance(first, DecodeError):
            refused += 1
            continue
        accepted += 1
        shared += again is first
        # An equal location that is another object decodes again: equal, not shared.
        other = dataclasses.replace(location)
        assert other is not location
        fresh = decode_leased_value(raw, other)
        assert fresh is not first
        assert fresh.location is other
        assert typed(fresh) == typed(credentials._decode(raw, other))
    # Not vacuous: both outcomes are common, and held values were shared.
    assert accepted > 600
    assert refused > 600
    assert shared == accepted


def test_LR_032_a_shared_value_is_never_given_for_another_location() -> None:
    rng = random.Random(7)
    for cls in ("engine", "mcp", "github", "ssh"):
        raw = json.dumps(_envelope(rng, cls, "cred-1"))
        mine = _location(cls, "cred-1")
        held = decode_leased_value(raw, mine)
        assert not isinstance(held, DecodeError)
        for other in (
            _location(cls, "cred-2"),
            _location(cls, "cred-1", user=None),
            _location("engine" if cls != "engine" else "mcp", "cred-1"),
        ):
            got = decode_leased_value(raw, other)
            assert isinstance(got, DecodeError)
            assert typed(got) == typed(credentials._decode(raw, other))
        assert decode_leased_value(raw, mine) is held


def test_LR_032_a_value_and_its_envelope_text_are_forgotten_once_nothing_holds_the_value() -> None:
    raw = json.dumps(_envelope(random.Random(1), "github", "cred-forget"))
    location = _location("github", "cred-forget")
    value = decode_leased_value(raw, location)
    assert not isinstance(value, DecodeError)
    assert raw in credentials._DECODED
    del value
    gc.collect()
    assert raw not in credentials._DECODED
    assert not any("cred-forget" in key for key in credentials._DECODED)
    # Decoded again, not from a memory of it.
    assert typed(decode_leased_value(raw, location)) == typed(credentials._decode(raw, location))


def test_LR_032_shared_values_stay_bounded_in_entries_and_text_length() -> None:
    rng = random.Random(2)
    location = _location("github", "cred-bound")
    held = []
    for _ in range(credentials._DECODED_MAX + 50):
        raw = json.dumps(_envelope(rng, "github", "cred-bound"))
        held.append(decode_leased_value(raw, location))
        assert len(credentials._DECODED) <= credentials._DECODED_MAX
    assert all(not isinstance(v, DecodeError) for v in held)
    long = _envelope(rng, "ssh", "cred-long")
    long["privateKey"] = "k" * (credentials._DECODED_MAX_CHARS - 10)
    raw = json.dumps(long)
    assert len(raw) > credentials._DECODED_MAX_CHARS
    value = decode_leased_value(raw, _location("ssh", "cred-long"))
    assert not isinstance(value, DecodeError)
    assert raw not in credentials._DECODED
