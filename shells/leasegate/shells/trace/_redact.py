"""Redaction of secrets before a trace line is written.

A trace must never hold a secret, yet replaying it must reproduce the core's
behavior exactly. The core treats a secret's *content* as opaque except in
three ways, and the redaction keeps each of them:

1. **Equality.** The core compares secrets (a changed credential value, the
   same session seen twice). Every distinct secret text of a trace gets its
   own token, and the same text always gets the same token
   (:class:`Redactor` keeps the mapping for the whole trace).
2. **Length.** Limits are checked on lengths in UTF-16 code units (a session
   token of at most 16,384 units, a header value of at most 8,192). A token
   has the secret's UTF-16 length: ``#<n>#`` padded with ``*``. Only a secret
   shorter than its token's ``#<n>#`` core (e.g. a 1–3 character secret) gets
   a longer token; tokens are ASCII, so the UTF-8 byte size of a non-ASCII
   secret is not kept (the core never measures a secret's bytes: the env
   replica's replay ledger charges frame evidence, which holds no value).
   A token keeps the secret's control characters (U+0000–U+001F, U+007F) in
   their places: they are what the core validates in a secret's content.
3. **Envelope structure.** A Parameter Store value is a JSON envelope whose
   secret fields sit next to identity fields the core authenticates (org,
   project, key, staging id, credential id). An envelope of a known kind
   (``project-env``, ``leased-credential``) is redacted *inside*, by
   allow-list: its identity fields (``v``, ``kind``, ``orgId``, ``userId``,
   ``projectId``, ``key``, ``stagingId``, ``updatedAt``, ``credentialId``,
   ``class``, ``authKind``, ``header.name``, the ``env``/``files`` keys)
   stay while they hold a name (or their known literal, or a scalar); every
   other string becomes a token (``value``, the ``env``/``files``
   values, ``header.value``, ``accessToken``, ``token``, ``privateKey``, any
   unexpected field); the result is re-serialized compactly with every
   value's JSON type kept (a float stays a float: ``1.0`` is not ``1``),
   so it still authenticates — and is refused — exactly as the original. A value that is
   JSON but not a known envelope becomes a JSON string token (it stays "JSON
   of another shape"); any other value becomes a plain token (it stays "not
   JSON").

Frames (``HandleFrame.frame``) are raw JSON: the frame is decoded with
:func:`leasegate.core.wire.decode_frame`, every :class:`Secret` the decoded
frame holds is collected, and every string of the raw JSON equal to one of
them is replaced by its token; strings under ``secretAccessKey`` and
``sessionToken`` keys are redacted even when the frame does not decode, and
so is the free-text ``error`` of a ``lease.deny`` frame (the core never uses
its content, only its length, and a peer's text could quote anything).

Limits (documented in ``docs/trace-format.md``): a non-secret string of a
frame that happens to equal a secret of the same frame is redacted too; a
token could in principle equal a real value of the trace (tokens start with
``#``, so only a secret or name that looks like ``#<n>#**`` could).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from leasegate.core import Secret
from leasegate.core._json import loads, utf16_len
from leasegate.core.wire import decode_frame

__all__ = ["FRAME_SECRET_KEYS", "MIN_SCRUB_CHARS", "TEXT_KEYS", "Redactor"]

#: Secrets at least this long are also searched for *inside* other strings
#: of a line (an error text quoting one); the invariant monitor's
#: ``MIN_SECRET_CHARS`` (shorter ones would match ordinary words).
MIN_SCRUB_CHARS: Final = 6
#: The keys of a trace line whose string values are free texts searched for
#: quoted secrets: ``Log``/``ReportError``/``CredentialFailure`` messages,
#: ``CallDone``/ack errors, a port call's ``CredentialUnavailable`` message.
TEXT_KEYS: Final = frozenset(("message", "error", "unavailable"))

#: Keys of raw frame JSON whose string values are always redacted.
FRAME_SECRET_KEYS: Final = frozenset(("secretAccessKey", "sessionToken"))

#: Frame kinds whose ``error`` is a peer's free text (never used by the core
#: beyond its length; it could quote anything, so it is redacted too).
_FREE_TEXT_KINDS: Final = frozenset(("lease.deny",))

#: Envelope fields kept as they are (identity the core authenticates).
_PROJECT_ENV_KEEP: Final = frozenset(
    ("v", "kind", "orgId", "projectId", "key", "stagingId", "updatedAt")
)
_CREDENTIAL_KEEP: Final = frozenset(
    ("v", "kind", "orgId", "userId", "credentialId", "class", "authKind")
)
#: A kept identity string must look like a name (a path segment, an env key,
#: a staging id, a header name, a literal such as ``leased-credential``);
#: any other string there becomes a token too. The core refuses such a value
#: either way (it matches no name it expects), so the outcome is kept.
_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z:-]{0,256}")
#: Characters a secret's validation looks at (control characters: U+0000–
#: U+001F, U+007F): a token keeps them where the secret has them.
#: Identity fields whose strings are literals: any other string is redacted.
_LITERALS: Final[dict[str, frozenset[str]]] = {
    "v": frozenset(),
    "updatedAt": frozenset(),
    "kind": frozenset(("project-env", "leased-credential")),
    "class": frozenset(("engine", "mcp", "github", "ssh")),
    "authKind": frozenset(("env", "config-dir", "oauth", "token")),
}
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class Redactor:
    """A per-trace, stable mapping from secret texts to redaction tokens.

    ``text(s)`` redacts a whole secret (an SSM value, a session key, a leaf);
    ``frame(raw)`` redacts a raw frame. The same input always gives the same
    output within one redactor; distinct secrets give distinct tokens.
    Never raises on any input. Catalog TR-002–TR-004 (``docs/trace-format.md``).
    """

    __slots__ = ("_n", "_out", "_re", "_re_json", "_seen")

    def __init__(self) -> None:
        self._out: dict[str, str] = {}
        self._n = 0
        self._seen = 0  # len(self._out) when the patterns were built
        self._re: re.Pattern[str] | None = None
        self._re_json: re.Pattern[str] | None = None

    def scrub_line(self, line: Any, text: str) -> str:
        """``text`` (the JSON encoding of ``line``) with every known secret
        quoted inside another string replaced by its token.

        An error or log text, a port's ``CredentialUnavailable`` message or a
        consumer's failure text (a string under a :data:`TEXT_KEYS` key) that
        quotes a secret this redactor has seen (at least
        :data:`MIN_SCRUB_CHARS` characters) gets the secret's token in its
        place. ``line`` is
        changed in place only when the text holds a secret; the (re-encoded)
        text is returned. A secret first seen inside such a text, before any
        ``Secret`` carried it, is not known and stays (documented limit).
        """
        if self._seen != len(self._out):
            self._build()
        if self._re_json is None or self._re_json.search(text) is None:
            return text
        fixed = self._scrub(line, 0)
        return _dumps(fixed)

    def _build(self) -> None:
        self._seen = len(self._out)
        keys = sorted((k for k in self._out if len(k) >= MIN_SCRUB_CHARS), key=len, reverse=True)
        if not keys:
            return
        self._re = re.compile("|".join(re.escape(k) for k in keys))
        self._re_json = re.compile("|".join(re.escape(_dumps(k)[1:-1]) for k in keys))

    def _scrub(self, v: Any, depth: int, text: bool = False) -> Any:
        """``v`` with known secrets replaced inside the strings of text
        fields (:data:`TEXT_KEYS`) only: an id, a name or a region that
        merely equals a secret (an env value ``us-east-1``) is kept, since
        the core compares those across steps."""
        if type(v) is str:
            if not text:
                return v
            assert self._re is not None
            return self._re.sub(lambda m: self._out[m.group(0)], v)
        if depth > 300:
            return v
        if type(v) is dict:
            return {k: self._scrub(x, depth + 1, k in TEXT_KEYS) for k, x in v.items()}
        if type(v) is list:
            return [self._scrub(x, depth + 1, text) for x in v]
        return v

    def _token(self, s: str, *, json_string: bool = False) -> str:
        self._n += 1
        core = f"#{self._n}#"
        want = utf16_len(s) - (2 if json_string else 0)  # the quotes count
        if not json_string and _CONTROL.search(s) is not None:
            return _keep_controls(s, core)
        tok = core + "*" * max(0, want - len(core))
        return f'"{tok}"' if json_string else tok

    def leaf(self, s: str) -> str:
        """The token of ``s`` (a secret inside an envelope or a frame)."""
        got = self._out.get(s)
        if got is None:
            got = "" if s == "" else self._token(s)
            self._out[s] = got
        return got

    def text(self, s: str) -> str:
        """Redact a whole secret text (envelope-aware, see the module doc)."""
        got = self._out.get(s)
        if got is not None:
            return got
        if s == "":
            return ""
        try:
            obj = loads(s)
        except Exception:  # noqa: BLE001 - not JSON: a plain token
            obj = _NOT_JSON
        if obj is _NOT_JSON:
            got = self._token(s)
        else:
            got = self._envelope(obj)
            if got is None:
                got = self._token(s, json_string=True)
        self._out[s] = got
        return got

    def _envelope(self, obj: Any) -> str | None:
        if type(obj) is not dict:
            return None
        kind = obj.get("kind")
        if kind == "project-env":
            keep = _PROJECT_ENV_KEEP
        elif kind == "leased-credential":
            keep = _CREDENTIAL_KEEP
        else:
            return None
        # Allow-list: the identity fields the core authenticates stay; every
        # other string (the value, env/files values, the header's value,
        # tokens, keys, and any unexpected field) becomes a token.
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k in keep:
                out[k] = self._name(v, _LITERALS.get(k))
            elif k == "header" and kind == "leased-credential" and type(v) is dict:
                out[k] = {
                    hk: (self._name(hv, None) if hk == "name" else self._deep(hv, 0))
                    for hk, hv in v.items()
                }
            else:
                out[k] = self._deep(v, 0)
        try:
            return _dump_same(out, 0)
        except (TypeError, ValueError, RecursionError):
            return None

    def _name(self, v: Any, literals: frozenset[str] | None) -> Any:
        """An identity field's value: kept if it is a scalar name (or one of
        the field's ``literals``), else redacted."""
        if v is None or type(v) in (bool, int, float):
            return v
        if type(v) is str and (v in literals if literals is not None else _NAME.fullmatch(v)):
            return v
        return self._deep(v, 0)

    def _deep(self, v: Any, depth: int) -> Any:
        """``v`` with every string (not object keys) replaced by its token."""
        if type(v) is str:
            return self.leaf(v)
        if depth > 100:
            return None
        if type(v) is dict:
            return {k: self._deep(x, depth + 1) for k, x in v.items()}
        if type(v) is list:
            return [self._deep(x, depth + 1) for x in v]
        return v

    def frame(self, raw: Any) -> Any:
        """Redact a raw frame (a JSON value); return the redacted copy."""
        secrets: set[str] = set()
        # decode_frame never raises; a frame it refuses holds no Secret (the
        # key rule below still applies to it).
        _collect(decode_frame(raw), secrets, 0)
        if isinstance(raw, dict) and raw.get("kind") in _FREE_TEXT_KINDS:
            raw = {k: (self._deep(v, 0) if k == "error" else v) for k, v in raw.items()}
        return self._walk(raw, secrets, False, 0)

    def text_frame(self, raw: str) -> str:
        """Redact a frame received as JSON text; return redacted text.

        Text the core's ``loads`` parses is redacted as the value it parses
        to (:meth:`frame`) and written back as JSON text that ``loads`` reads
        as that redacted value, so a replay feeds the core the same frame a
        recorded dict frame would be (the runtime handles a text frame as its
        value, docs/runtime.md). Any other text, or a redacted value JSON
        cannot hold, becomes one token of its length. Never raises.
        """
        try:
            value = loads(raw)
        except Exception:  # noqa: BLE001 - not JSON the core reads: one token
            return self.leaf(raw)
        try:
            return _dump_same(self.frame(value), 0)
        except (TypeError, ValueError, RecursionError):
            return self.leaf(raw)

    def _walk(self, v: Any, secrets: set[str], under_key: bool, depth: int) -> Any:
        if type(v) is str:
            return self.leaf(v) if (under_key or v in secrets) else v
        if depth > 200:
            return None
        if isinstance(v, dict):
            return {
                k: self._walk(x, secrets, under_key or k in FRAME_SECRET_KEYS, depth + 1)
                for k, x in v.items()
            }
        if isinstance(v, (list, tuple)):
            return [self._walk(x, secrets, under_key, depth + 1) for x in v]
        return v


_NOT_JSON: Final = object()
_dumps: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _dump_same(v: Any, depth: int) -> str:
    """JSON text of ``v`` that the core's ``loads`` reads back as the same
    value *and types*: a float stays a float (``1.0`` is not written ``1``:
    an envelope's ``"v": 1.0`` is refused by the core, ``"v": 1`` is not), an
    infinite one (``1e400`` in the original) is written ``1e999``.

    Raises:
        ValueError: a value JSON cannot hold (NaN, an over-long integer).
        TypeError: a value of another type.
    """
    if depth > 200:
        raise ValueError("nested too deeply")
    if v is None or v is True or v is False:
        return "null" if v is None else ("true" if v else "false")
    t = type(v)
    if t is str:
        return _dumps(v)
    if t is int:
        return str(v)
    if t is float:
        if v != v:
            raise ValueError("NaN")
        if v in (math.inf, -math.inf):
            return "1e999" if v > 0 else "-1e999"
        return repr(v)
    if t is list:
        return "[" + ",".join(_dump_same(x, depth + 1) for x in v) + "]"
    if t is dict:
        return (
            "{" + ",".join(_dumps(k) + ":" + _dump_same(x, depth + 1) for k, x in v.items()) + "}"
        )
    raise TypeError(t.__name__)


def _keep_controls(s: str, core: str) -> str:
    """A token of ``s``'s UTF-16 length keeping its control characters in place.

    The other positions hold ``core`` (``#<n>#``, in order) then ``*``; if
    ``s`` has fewer of them than ``core`` has characters, the rest of
    ``core`` is appended (the token is longer, as for a short secret).
    Tokens of distinct cores differ distinct tokens (the non-control characters
    of a token spell its core).
    """
    out: list[str] = []
    i = 0
    for ch in s:
        if _CONTROL.fullmatch(ch) is not None:
            out.append(ch)
            continue
        for _ in range(2 if ord(ch) > 0xFFFF else 1):  # UTF-16 units
            out.append(core[i] if i < len(core) else "*")
            i += 1
    if i < len(core):
        out.append(core[i:])
    return "".join(out)


def _collect(v: Any, out: set[str], depth: int) -> None:
    """Add the text of every :class:`Secret` reachable from ``v`` to ``out``."""
    if depth > 200:
        return
    if isinstance(v, Secret):
        out.add(v.reveal())
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        for f in dataclasses.fields(v):
            _collect(getattr(v, f.name, None), out, depth + 1)
    elif isinstance(v, Mapping):
        for x in v.values():
            _collect(x, out, depth + 1)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _collect(x, out, depth + 1)
