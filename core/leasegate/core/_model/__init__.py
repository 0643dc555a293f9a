"""One small declarative validator for every wire model.

Theory of operation
===================

Wire models are frozen dataclasses. Each field's Python annotation says its
JSON type, and its :func:`spec` metadata says its wire name and limits
(pattern, length in UTF-16 code units, numeric bounds, item counts, control
characters). Nothing else describes a frame: this module compiles, once per
class, a decoder and an encoder from those declarations, and the same
declarations drive docs and tests.

Strictness, as the reference's parsers are strict:

* an object must have exactly the declared keys: an extra key or a missing
  key is an error (``exact`` key sets);
* types are exact: ``bool`` is not an integer, a string is never coerced to a
  number, integers must be safe (``|n| ≤ 2**53 - 1``) and floats are not
  integers;
* strings are checked against their pattern with a full match (JavaScript's
  ``^…$`` with no multiline flag matches the whole input; Python's ``$``
  would also accept a final newline, so patterns are always full-matched);
* lengths count UTF-16 code units, as JavaScript's ``.length`` does.

Supported annotations: ``str``, :class:`~leasegate.core.Secret` (a JSON
string held as a secret), ``int``, ``float`` (any finite JSON number, never a
``bool``), ``bool``, ``None``, ``typing.Literal`` of strings or ints,
``tuple[X, ...]`` (a JSON array), ``dict[str, X]`` (a JSON object with
arbitrary keys), another model, a union of those (``X | None``), a union of
*tagged* models (each declares ``TAG = ("kind", "lease.grant.v1")``; the tag
picks the member), and :data:`JsonValue` (any JSON value, kept as is, for
fields the protocol declares opaque).

A model may define ``_check(self) -> tuple[str, str] | None`` for rules that
span fields; it returns ``(field, reason)`` for the first violation.

Errors never quote the offending value (it may be a secret): a
:class:`DecodeError` names the field path and the rule that failed.

The decoder never raises for any input: :func:`decode` returns either the
model or a :class:`DecodeError`.

Layout
======

==================  =========================================================
``_declare``        :class:`Model`, :func:`spec`, :class:`DecodeError`, the
                    declared fields of a model
``_decode``         the reference decoders (the rules), :func:`decode`,
                    :func:`decoder`
``_fast``           the generated fast path (straight-line code per model)
``_patterns``       the fast path's remembered pattern matches and ASCII
                    widths
``_construct``      :func:`constructor`: frozen instances without ``__init__``
``_encode``         :func:`encode`
==================  =========================================================
"""

from __future__ import annotations

from ._construct import constructor as constructor
from ._declare import DecodeError, JsonValue, Model, spec
from ._declare import _Fail as _Fail
from ._declare import _Spec as _Spec
from ._declare import field_specs as field_specs
from ._decode import _DECODERS as _DECODERS
from ._decode import _decoder_for as _decoder_for
from ._decode import decode, decoder
from ._decode import reference_decoder as reference_decoder
from ._encode import _ENCODERS as _ENCODERS
from ._encode import _encoder_for as _encoder_for
from ._encode import encode
from ._fast import _fast_secret as _fast_secret
from ._patterns import _CACHE_MAX as _CACHE_MAX
from ._patterns import _PATTERN_CACHES as _PATTERN_CACHES
from ._patterns import _ascii_width as _ascii_width
from ._patterns import clear_pattern_caches as clear_pattern_caches

__all__ = [
    "DecodeError",
    "JsonValue",
    "Model",
    "decode",
    "decoder",
    "encode",
    "spec",
]
