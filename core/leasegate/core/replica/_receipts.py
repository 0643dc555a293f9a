"""Apply receipts: how one is packed, read back and charged (ER-114).

An apply's receipt is its fingerprint and its answer, packed into one string
(:data:`_ApplyReceipt`); a replay unpacks it (:func:`_receipt_fields`,
:func:`_same_apply`, :func:`_receipt_result`). Its ledger cost, the UTF-8
length of the canonical JSON of ``["apply", seq, receipt]`` plus 64, is
summed from fixed and variable parts without writing that text
(:func:`_receipt_cost`). :func:`state_json` writes a decoded state's JSON,
the state's identity in a fingerprint and the measure of its cost.
Pure functions and constants only; the accounting that charges a receipt to
the ledger is :mod:`._accounting`.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from .._json import loads
from .._model import DecodeError, constructor, decoder, encode
from ..wire.env import (
    BindingEnv,
    BindingOmit,
    BindingState,
    BindingWithhold,
    EnvApply,
    Installed,
    Materialization,
    RecordResult,
    ValueRefLegacy,
    ValueRefRow,
    ValueRefStaged,
)
from ._ledger import LEDGER_RECORD_OVERHEAD_BYTES, canonical, js, utf8_len

#: packed into one string of ten fields joined by U+0000 (no field can hold
#: one: ids match patterns, numbers are digits, and JSON text escapes every
#: control character):
#:
#: ``ok`` ("1" or "0"), ``bytes`` (the ledger cost charged for it), then the
#: fingerprint without the sequence (the receipt's key): attempt id ("" for
#: ``None``; an attempt id is never empty), delivery stream id, project id
#: and the frame's record version; then the answer: the result's record
#: version (or a consumed error's code), the materialization as canonical
#: JSON and the result state as :func:`state_json` (both "" for an error;
#: the result "" also when it is the frame's state); last the frame's state
#: as :func:`state_json`.
#:
#: A string, not a tuple: a dict of ints to strings is never tracked by the
#: garbage collector (a tuple of them would be, until a collection), and one
#: object per receipt instead of several keeps a long stream's memory small
#: and its young collections fast. Read only when an apply is replayed
#: (:func:`_receipt_fields`).
_ApplyReceipt: TypeAlias = str
_RECEIPT_SEP: Final = "\x00"


def _receipt_fields(rec: _ApplyReceipt) -> list[str]:
    """The ten fields of a receipt (see :data:`_ApplyReceipt`)."""
    return rec.split(_RECEIPT_SEP, 9)


def _receipt_bytes(rec: _ApplyReceipt) -> int:
    """The ledger cost charged for a receipt (its second field)."""
    return int(rec[2 : rec.index(_RECEIPT_SEP, 2)])


# A fast constructor (positional, in field order) for results built on the
# hot path from fields that are valid by construction.
_new_result: Final = constructor(RecordResult)
_INSTALLED: Final = Installed()


_MAT_JSON: dict[Materialization, str] = {}


def _mat_json(m: Materialization) -> str:
    """Canonical JSON of a materialization (cached; ``installed`` first)."""
    if m is _INSTALLED:
        return _INSTALLED_JSON
    got = _MAT_JSON.get(m)
    if got is None:
        got = canonical(encode(m))
        if len(_MAT_JSON) < 1024:
            _MAT_JSON[m] = got
    return got


_decode_state: Final = decoder(BindingState)
_decode_mat: Final = decoder(Materialization)


def _receipt_result(f: list[str]) -> RecordResult:
    """The ``result`` of an ``ok`` receipt (its fields ``f``), rebuilt from
    its JSON texts.

    Equal (by value) to the result of the original ack: the texts were
    written from decoded values, and decoding them gives the same values
    back (``tests/core/replica`` checks the round trip on
    generated states).
    """
    state = _decode_state(loads(f[8] or f[9]))
    mat = _decode_mat(loads(f[7]))
    assert isinstance(state, BindingState), "receipt state does not decode"
    assert not isinstance(mat, DecodeError), "receipt materialization does not decode"
    return _new_result(state, mat)


def _same_apply(rec: _ApplyReceipt, frame: EnvApply, sj: str) -> bool:
    """Whether ``frame`` (its state as :func:`state_json` ``sj``) is the apply
    that ``rec`` (the receipt of its sequence) answered: same attempt,
    delivery stream, project, record version and state (the reference's
    fingerprint, ER-055/ER-056)."""
    f = _receipt_fields(rec)
    return (
        f[3] == frame.delivery.stream_id
        and f[2] == ("" if frame.attempt_id is None else frame.attempt_id)
        and f[4] == frame.project_id
        and f[5] == str(frame.record_version)
        and f[9] == sj
    )


_INSTALLED_JSON: Final = canonical(encode(_INSTALLED))
_INSTALLED_LEN: Final = len(_INSTALLED_JSON)


# The apply evidence ``["apply", seq, receipt]`` as canonical JSON, its
# fixed text between the variable parts (ER-114):
#   '["apply",' S ',{"appliedThrough":{"sequence":' S ',"streamId":"' STREAM
#   '"},"attemptId":' ATTEMPT ',"fingerprint":' FP
#   then ',"ok":true,"projectId":"' P '","recordVersion":' RV
#        ',"result":{"materialization":' MAT ',"state":' STATE '}}]'
#   or   ',"code":' CODE (before ',"fingerprint":') and ',"ok":false}]'.
_EV_HEAD_LEN: Final = sum(
    map(len, ['["apply",', ',{"appliedThrough":{"sequence":', ',"streamId":"', '"},"attemptId":'])
)
_EV_OK_LEN: Final = sum(
    map(
        len,
        [
            ',"fingerprint":',
            ',"ok":true,"projectId":"',
            '","recordVersion":',
            ',"result":{"materialization":',
            ',"state":',
            "}}]",
        ],
    )
)
_EV_ERR_LEN: Final = sum(map(len, [',"code":', ',"fingerprint":', ',"ok":false}]']))
# The fingerprint: canonical JSON of {attemptId, delivery, projectId,
# recordVersion, state}, held in the evidence as a JSON string (each '"'
# escaped, quotes around):
#   '{"attemptId":' ATTEMPT ',"delivery":{"sequence":' S ',"streamId":"'
#   STREAM '"},"projectId":"' P '","recordVersion":' RV ',"state":' STATE '}'
_FP_FIXED_LEN: Final = 2 + sum(
    len(part) + part.count('"')
    for part in [
        '{"attemptId":',
        ',"delivery":{"sequence":',
        ',"streamId":"',
        '"},"projectId":"',
        '","recordVersion":',
        ',"state":',
        "}",
    ]
)


def _receipt_cost(
    frame: EnvApply,
    sj: str,
    code: str | None,
    version: int | None,
    result_sj: str | None,
    mat_json: str | None,
) -> int:
    """Ledger bytes of an apply's evidence ``["apply", seq, receipt]`` (ER-114).

    ``64 +`` the UTF-8 length of the evidence's canonical JSON (keys
    sorted). That text is never written, only its length: it is summed from
    the fixed parts (above) and the variable ones. Ids (stream, attempt,
    project) and numbers are ASCII with nothing to escape; the state (``sj``,
    its :func:`state_json`: the canonical JSON's members in another order,
    so the same length and characters), held
    twice (in the fingerprint, a JSON string, each ``"`` escaped; and as
    the result), needs the encoder only when it holds non-ASCII text or a
    backslash (a withhold reason). ``tests/core/replica`` checks the sum
    equals the generic form's on generated applies.
    """
    d = frame.delivery
    a = frame.attempt_id
    plain = sj.isascii() and "\\" not in sj
    rv_len = len(str(frame.record_version))
    n = (
        _EV_HEAD_LEN
        + _FP_FIXED_LEN
        + 3 * len(str(d.sequence))
        + 2 * len(d.stream_id)
        + (8 if a is None else 2 * len(a) + 6)
        + len(frame.project_id)
        + rv_len
        + (len(sj) + _plain_quotes(frame.state, sj) if plain else _fp_state_len(sj))
    )
    if code is None:
        assert result_sj is not None
        assert mat_json is not None
        n += (
            _EV_OK_LEN
            + len(frame.project_id)
            + (rv_len if version == frame.record_version else len(str(version)))
            + (_INSTALLED_LEN if mat_json is _INSTALLED_JSON else utf8_len(mat_json))
            + (len(sj) if result_sj is sj and plain else utf8_len(result_sj))
        )
    else:
        n += _EV_ERR_LEN + utf8_len(js(code))
    return LEDGER_RECORD_OVERHEAD_BYTES + n


_QUOTES: dict[tuple[type, type], int] = {}


def _plain_quotes(state: BindingState, sj: str) -> int:
    """The number of ``"`` in ``sj``, the :func:`state_json` of ``state``,
    when ``sj`` is plain (ASCII, no backslash).

    Then no value holds a quote (keys, staging and row ids match patterns
    without one; a withhold reason holding one is written ``\\"``, not plain),
    so the count depends only on the kinds of the value reference and the
    binding: counted once per pair of kinds, then remembered.
    """
    kinds = (type(state.head.value_ref), type(state.binding))
    got = _QUOTES.get(kinds)
    if got is None:
        got = _QUOTES[kinds] = sj.count('"')
    return got


def _fp_state_len(sj: str) -> int:
    """UTF-8 length of a state's JSON ``sj`` (:func:`state_json`, as long as
    its canonical JSON) written inside the
    fingerprint, a JSON string (quotes excluded; ER-114).

    JavaScript writes a lone surrogate in the state as the six characters
    ``\\udxxx``; held in the fingerprint string, that backslash is escaped
    again: seven bytes, one more than :func:`utf8_len` charges it.
    """
    n = utf8_len(js(sj)) - 2
    try:
        sj.encode("utf-8")
    except UnicodeEncodeError:
        n += sum(1 for c in sj if "\ud800" <= c <= "\udfff")
    return n


def pack_ok_receipt(
    cost: int,
    frame: EnvApply,
    sj: str,
    version: int | None,
    mat_json: str | None,
    result_sj: str | None,
) -> _ApplyReceipt:
    """The receipt of an ``ok`` apply (see :data:`_ApplyReceipt`; ER-114).

    ``cost``: the ledger bytes charged for it (:func:`_receipt_cost`);
    ``sj``: the frame's state as :func:`state_json`; ``version``,
    ``mat_json`` and ``result_sj``: the result's record version,
    materialization as canonical JSON and state as :func:`state_json`
    (``result_sj is sj`` when the result's state is the frame's: then
    written "").
    """
    d = frame.delivery
    a = frame.attempt_id
    return (
        f"1\x00{cost}\x00{'' if a is None else a}\x00{d.stream_id}\x00{frame.project_id}"
        f"\x00{frame.record_version}\x00{version}\x00{mat_json}"
        f"\x00{'' if result_sj is sj else result_sj}\x00{sj}"
    )


def pack_error_receipt(cost: int, frame: EnvApply, sj: str, code: str) -> _ApplyReceipt:
    """The receipt of an apply consumed as the error ``code`` (see
    :data:`_ApplyReceipt`; ER-114). ``cost`` and ``sj`` as for
    :func:`pack_ok_receipt`."""
    d = frame.delivery
    a = frame.attempt_id
    return (
        f"0\x00{cost}\x00{'' if a is None else a}\x00{d.stream_id}\x00{frame.project_id}"
        f"\x00{frame.record_version}\x00{code}\x00\x00\x00{sj}"
    )


def state_json(s: BindingState) -> str:
    """The JSON of a decoded state, written directly: ``js(encode(s))``.

    Compact, keys in field order (``key, head, binding, policyEpoch,
    listingGeneration``; ``revision, generation, tombstone, valueRef``;
    ``kind`` first in a reference or binding): the form the wire carries, so
    that an apply given as text takes it as a slice of the frame
    (:func:`~leasegate.core.wire._env_text.decode_apply_match`). It is the
    state's identity in an apply's fingerprint (equal states, equal texts:
    ER-055/ER-056) and the measure of its ledger cost: the canonical JSON
    the reference charges (ER-114) holds the same members, so it has the
    same length and the same characters. Ids, keys and staging ids match
    ASCII patterns with nothing to escape; a withhold reason is free text
    and is written by the JSON encoder. ``tests/core/replica`` checks the
    equality on generated states.
    """
    h = s.head
    ref = h.value_ref
    t = type(ref)
    if ref is None:
        rj = "null"
    elif t is ValueRefStaged:
        rj = '{"kind":"staged","stagingId":"' + ref.staging_id + '"}'  # type: ignore[union-attr]
    elif t is ValueRefLegacy:
        rj = '{"kind":"legacy","ssmVersion":' + str(ref.ssm_version) + "}"  # type: ignore[union-attr]
    elif t is ValueRefRow:
        rj = '{"kind":"row","rowId":"' + ref.row_id + '"}'  # type: ignore[union-attr]
    else:
        return js(encode(s))
    b = s.binding
    tb = type(b)
    if b is None:
        bj = "null"
    elif tb is BindingEnv:
        bj = '{"kind":"env"}'
    elif tb is BindingOmit:
        bj = '{"kind":"omit"}'
    elif tb is BindingWithhold:
        bj = '{"kind":"withhold","reason":' + js(b.reason) + "}"  # type: ignore[union-attr]
    else:
        return js(encode(s))
    pe = s.policy_epoch
    # One f-string (a single allocation); every interpolated number is an
    # int (decoded strictly: never a bool), written as ``str`` writes it.
    return (
        f'{{"key":"{s.key}","head":{{"revision":{h.revision},"generation":{h.generation},'
        f'"tombstone":{"true" if h.tombstone else "false"},"valueRef":{rj}}},"binding":{bj},'
        f'"policyEpoch":{"null" if pe is None else pe},'
        f'"listingGeneration":{s.listing_generation}}}'
    )
