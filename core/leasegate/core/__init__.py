"""leasegate's sans-I/O core: pure, deterministic protocol machines.

Events in, commands out: no clock, no threads, no I/O, and the standard
library alone. See ``docs/index.md`` for the theory of operation and
``docs/protocol.md`` for the wire format.
"""

from ._json import JsonError, canonical_dumps, is_safe_int, loads, sha256_hex, utf16_len
from ._model import DecodeError, JsonValue, Model, decode, encode, spec
from ._secret import REDACTED, Secret

__all__ = [
    "REDACTED",
    "DecodeError",
    "JsonError",
    "JsonValue",
    "Model",
    "Secret",
    "canonical_dumps",
    "decode",
    "encode",
    "is_safe_int",
    "loads",
    "sha256_hex",
    "spec",
    "utf16_len",
]
