"""The wire codec: every frame and envelope, decoded strictly, encoded exactly.

* :func:`decode_frame` takes any JSON value (as :func:`leasegate.core.loads`
  returns it) and returns a typed frame or a
  :class:`~leasegate.core.DecodeError` naming the offending field. It never
  raises, for any input.
* :func:`encode_frame` is its exact inverse: ``decode_frame(encode_frame(f))
  == f`` for every frame ``f``.
* :data:`FRAME_TYPES` lists every frame class, dispatched on ``kind``.

Frames: :mod:`.lease` (``lease.*`` and ``credential.*``) and :mod:`.env`
(``env.replica.v1.*``). Credential envelopes and parameter names:
:mod:`.credentials`. Limits and id rules:
:mod:`._common`. The protocol is documented in ``docs/protocol.md``.
"""

from __future__ import annotations

import typing
from typing import Any, Final

from .._model import DecodeError, Model, decoder, encode
from . import credentials, env, lease
from ._env_text import decode_apply_text
from .env import FRAMES as _ENV_FRAMES
from .lease import FRAMES as _LEASE_FRAMES

__all__ = [
    "FRAME_TYPES",
    "DecodeError",
    "Frame",
    "credentials",
    "decode_apply_text",
    "decode_frame",
    "encode_frame",
    "env",
    "frame_kinds",
    "lease",
]

#: Every frame class the codec knows, each tagged by its ``kind``: the lease
#: and credential frames, then the env replica frames.
FRAME_TYPES: Final[tuple[type[Model], ...]] = _LEASE_FRAMES + _ENV_FRAMES

#: Any frame (the union of :data:`FRAME_TYPES`).
Frame: typing.TypeAlias = Model

_FRAME_UNION: Final[Any] = typing.Union[FRAME_TYPES]  # noqa: UP007 - built at runtime
_DECODE_FRAME: Final = decoder(_FRAME_UNION)
_KINDS: Final = frozenset(cls.TAG[1] for cls in FRAME_TYPES if cls.TAG is not None)


def decode_frame(value: object) -> Frame | DecodeError:
    """Decode one frame, dispatching on its ``kind``.

    Args:
        value: any object, normally a JSON value from
            :func:`leasegate.core.loads`.

    Returns:
        The frame (an instance of one of :data:`FRAME_TYPES`), or a
        :class:`~leasegate.core.DecodeError` whose ``field`` is the wire path
        of the first offending field (``"kind"`` for an unknown kind) and
        whose ``reason`` never quotes the value. Never raises.
    """
    return typing.cast("Frame | DecodeError", _DECODE_FRAME(value))


def encode_frame(frame: Model) -> dict[str, Any]:
    """Encode a frame to its JSON value (secrets revealed: this is the wire).

    Args:
        frame: an instance of one of :data:`FRAME_TYPES`.

    Returns:
        A ``dict`` of JSON values, ``kind`` first.

    Raises:
        TypeError: ``frame`` is not an instance of a frame class.
    """
    if type(frame) not in FRAME_TYPES:
        raise TypeError("not a frame")
    return encode(frame)


def frame_kinds() -> frozenset[str]:
    """The ``kind`` of every frame in :data:`FRAME_TYPES`."""
    return _KINDS
