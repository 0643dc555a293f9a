"""Text fast path for the env replica's hot frame, the apply (pure, stdlib).

Theory of operation
===================

An apply frame is parsed once per live change, and a strict parse of a
small JSON text in Python is dominated by building and then checking a
dict. On the wire, an apply is written by one writer in one shape:
leasegate's transports and its reference cloud send frames as compact JSON
with keys in the models' field order (``json.dumps(encode(frame),
separators=(",", ":"), ensure_ascii=False)``). (The staged envelope, the
other text parsed per live change, has its own fast path in
:func:`~leasegate.core.wire.env.staged_envelope_value`.)

So the fast path is one anchored regular expression (run by the C regex
engine) over the text, that accepts **only** texts whose strict parse is
certain to succeed with the values it captured:

* strings are captured only when they hold no escape, no control character,
  no surrogate and nothing outside the Basic Multilingual Plane, so the text
  between the quotes *is* the decoded string, and its length in characters
  is its length in UTF-16 code units;
* every id is matched by its own wire pattern inside the expression
  (``OP_ID``, path segment, env key, staging id), with the same length
  bounds;
* integers are matched only as ``0`` or 1–15 digits without a leading zero
  (below ``Number.MAX_SAFE_INTEGER``); a field whose minimum is 1 refuses
  ``0`` in the expression itself;
* an apply's ``delivery.streamId`` is a back-reference to its ``streamId``.

Anything else (another key order, whitespace, an escape, a longer number, a
``row`` value reference, any invalid frame) is not matched, and the caller
takes the full path (:func:`~leasegate.core._json.loads` and the strict
decoder), which also produces every error. A fast path therefore never
decides an error and never differs from the full path on a text it accepts:
``tests/core/wire/test_env_text.py`` checks that differentially on generated
and mutated texts.
"""

from __future__ import annotations

import re
from typing import Final

from .._model import constructor
from ._common import OP_ID_PATTERN, PROJECT_ENV_STAGING_ID_PATTERN
from .env import (
    APPLY_KIND,
    BindingEnv,
    BindingOmit,
    BindingState,
    BindingWithhold,
    DeliveryCursor,
    EnvApply,
    Head,
    ValueRefLegacy,
    ValueRefStaged,
)

__all__ = ["decode_apply_text"]

# A JSON string body that decodes to itself, with one character per UTF-16
# code unit: no quote, backslash, C0 control, DEL (refused by every
# no-control field), surrogate or astral character.
_FREE_CHAR: Final = '[^"\\\\\x00-\x1f\x7f\ud800-\udfff\U00010000-\U0010ffff]'
# A safe integer >= 0 / >= 1, written as JSON.stringify writes it.
_NAT: Final = "(0|[1-9][0-9]{0,14})"
_POS: Final = "([1-9][0-9]{0,14})"
# A path segment (PATH_SEGMENT_PATTERN): its "not . or .." lookahead is
# anchored at the closing quote instead of the end of the string.
_SEGMENT: Final = r'(?!\.\.?")[A-Za-z0-9_.-]{1,128}'
# PROJECT_ENV_KEY_PATTERN with the state key's 256-character bound.
_ENV_KEY_256: Final = "[A-Za-z_][A-Za-z0-9_]{0,255}"


def _q(group: str) -> str:
    return f'"({group})"'


_APPLY_RE: Final = re.compile(
    "".join(
        (
            '{"kind":"',
            re.escape(APPLY_KIND),
            '","opId":',
            _q(OP_ID_PATTERN),  # 1
            ',"taskId":',
            _q(_FREE_CHAR + "{1,128}"),  # 2
            ',"runEpoch":',
            _POS,  # 3
            ',"runnerBootId":',
            _q(OP_ID_PATTERN),  # 4
            ',"streamId":',
            _q(OP_ID_PATTERN),  # 5
            ',"attemptId":(?:null|',
            _q(OP_ID_PATTERN),  # 6
            '),"projectId":',
            _q(_SEGMENT),  # 7
            ',"recordVersion":',
            _NAT,  # 8
            ',"state":{"key":',
            _q(_ENV_KEY_256),  # 9
            ',"head":{"revision":',
            _NAT,  # 10
            ',"generation":',
            _NAT,  # 11
            ',"tombstone":(true|false)',  # 12
            ',"valueRef":(?:null|{"kind":"staged","stagingId":',
            _q(PROJECT_ENV_STAGING_ID_PATTERN),  # 13
            '}|{"kind":"legacy","ssmVersion":',
            _POS,  # 14
            '})},"binding":(?:null|{"kind":"(env|omit)"}',  # 15
            '|{"kind":"withhold","reason":',
            _q(_FREE_CHAR + "{1,128}"),  # 16
            '}),"policyEpoch":(?:null|',
            _POS,  # 17
            '),"listingGeneration":',
            _NAT,  # 18
            '},"delivery":{"streamId":"(?P=s)","sequence":',
            _POS,  # 19
            "}}",
        )
    ).replace(',"streamId":"(', ',"streamId":"(?P<s>', 1)
)
_match_apply: Final = _APPLY_RE.fullmatch

_new_apply: Final = constructor(EnvApply)
_new_state: Final = constructor(BindingState)
_new_head: Final = constructor(Head)
_new_staged: Final = constructor(ValueRefStaged)
_new_legacy: Final = constructor(ValueRefLegacy)
_new_cursor: Final = constructor(DeliveryCursor)
_new_withhold: Final = constructor(BindingWithhold)
_new_env: Final = constructor(BindingEnv)
_new_omit: Final = constructor(BindingOmit)


def decode_apply_text(text: str) -> EnvApply | None:
    """Decode an apply frame from its compact wire text, or ``None``.

    Args:
        text: the frame's JSON text as a transport received it (``str``).

    Returns:
        The :class:`~leasegate.core.wire.env.EnvApply` that
        ``decode(EnvApply, loads(text))`` would return, when ``text`` is in
        the wire's compact form (field order of the model, no whitespace,
        strings without escapes, integers of at most 15 digits, value
        reference ``staged``/``legacy``/``null``); ``None`` for every other
        text, valid or not: the caller then takes the full path, which also
        decides every error. Never raises.

    Reference: ``isProjectEnvReplicaV1ApplyFrame`` (imported by
    ``host/lib/project-env-task-replica.ts``; ER-024); the decisions of
    ``docs/protocol-env.md`` § Decisions, unchanged.
    """
    got = _decode_apply_match(text)
    return None if got is None else got[0]


def _decode_apply_match(text: str) -> tuple[EnvApply, str] | None:
    """:func:`decode_apply_text`, with the frame's state text.

    The state text is the slice of ``text`` holding the ``state`` object:
    compact JSON in field order, equal to
    :func:`~leasegate.core.replica._receipts.state_json` of the decoded state
    (strings in the matched form need no escape; integers are written as
    ``str`` writes them). ``None`` when :func:`decode_apply_text` gives
    ``None``.
    """
    m = _match_apply(text) if type(text) is str else None
    if m is None:
        return None
    (
        op_id,
        task_id,
        run_epoch,
        boot_id,
        stream_id,
        attempt_id,
        project_id,
        record_version,
        key,
        revision,
        generation,
        tombstone,
        staging_id,
        ssm_version,
        binding_kind,
        reason,
        policy_epoch,
        listing_generation,
        sequence,
    ) = m.groups()
    if staging_id is not None:
        ref: ValueRefStaged | ValueRefLegacy | None = _new_staged(staging_id)
    elif ssm_version is not None:
        ref = _new_legacy(int(ssm_version))
    else:
        ref = None
    if binding_kind is None:
        binding: BindingEnv | BindingOmit | BindingWithhold | None = (
            None if reason is None else _new_withhold(reason)
        )
    else:
        binding = _new_env() if binding_kind == "env" else _new_omit()
    frame = _new_apply(
        op_id,
        task_id,
        int(run_epoch),
        boot_id,
        stream_id,
        attempt_id,
        project_id,
        int(record_version),
        _new_state(
            key,
            _new_head(int(revision), int(generation), tombstone == "true", ref),
            binding,
            None if policy_epoch is None else int(policy_epoch),
            int(listing_generation),
        ),
        _new_cursor(stream_id, int(sequence)),
    )
    # '{"key":"' is 8 characters before the key; the state's closing brace
    # follows its listingGeneration.
    return frame, text[m.start(9) - 8 : m.end(18) + 1]
