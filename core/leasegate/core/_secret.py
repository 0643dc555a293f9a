"""A value that must never be printed.

Every secret that crosses the core — STS secret access keys and session
tokens, SSM parameter values, env values, MCP header values, Git tokens and
SSH keys — is held in a :class:`Secret`. Its ``repr`` and ``str`` never show
the value, so an exception message, a log line or a dataclass repr that
happens to include it stays clean. Only :meth:`Secret.reveal` gives the text
back, and only the shells call it (to hand the value to boto3 or a consumer).

Security model: ``docs/security.md``.
"""

from __future__ import annotations

import hmac
from typing import Final

__all__ = ["REDACTED", "Secret"]

#: What ``repr``/``str`` of a :class:`Secret` show instead of the value.
REDACTED: Final = "<redacted>"


class Secret:
    """An immutable secret string that hides itself from ``repr`` and ``str``.

    Args:
        value: the secret text (any ``str``; the wire codec decides limits).

    Raises:
        TypeError: ``value`` is not a ``str`` (a ``Secret`` is never built
            from bytes or numbers by accident).

    Equality compares the values in constant time; the hash is that of the
    value, so two equal secrets hash alike. Pickling is refused, so a secret
    cannot travel into a file by accident.
    """

    __slots__ = ("_value",)

    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("Secret holds a str")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """Return the secret text. Call only where the value must be used."""
        return self._value

    def __len__(self) -> int:
        """Length in code points (not a secret: limits are checked on it)."""
        return len(self._value)

    def __repr__(self) -> str:
        return f"Secret({REDACTED})"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, format_spec: str) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(
            self._value.encode("utf-8", "surrogatepass"),
            other._value.encode("utf-8", "surrogatepass"),
        )

    def __hash__(self) -> int:
        return hash(("leasegate.Secret", self._value))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Secret cannot be pickled")
