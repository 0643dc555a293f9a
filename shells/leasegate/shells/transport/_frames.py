"""Frame text <-> JSON value."""

from __future__ import annotations

import json
from typing import Any

from leasegate.core import JsonError, loads

__all__ = ["dumps_frame", "parse_frame"]

_MISSING: Any = object()


def dumps_frame(value: Any) -> str:
    """One frame's JSON text: compact, non-ASCII as itself.

    Raises:
        ValueError: ``value`` holds a non-finite float or a non-JSON object
            (the message names the type only).
    """
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"frame is not JSON-serializable ({type(exc).__name__})") from None


def parse_frame(message: object) -> tuple[bool, Any]:
    """Parse one received message: ``(True, value)``, or ``(False, None)`` when
    it is not text or not valid JSON (``JSON.parse`` semantics). Never raises."""
    if not isinstance(message, str):
        return False, None
    try:
        return True, loads(message)
    except JsonError:
        return False, None
    except Exception:  # noqa: BLE001 - never fatal
        return False, None
