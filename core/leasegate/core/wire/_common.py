"""Identifier rules and limits shared by every frame and envelope.

These are facts of the wire protocol, taken from the constants at the top of
the reference's ``host/lib/cloud-credential-leases.ts`` (``OP_ID``,
``MAX_ERROR_CHARS``, ``PROJECT_PATH_SEGMENT``, ``PROJECT_ENV_KEY``,
``PROJECT_ENV_STAGING_ID``) and from its ``validAssignment`` (task ids and run
epochs); catalog entry LR-163 lists them.

Each pattern is given twice: as the source text (``*_PATTERN``, what
:func:`leasegate.core.spec` takes, always matched against the *whole* string,
as JavaScript's ``^…$`` without the multiline flag matches) and compiled
(``*_RE``; use ``.fullmatch``, never ``.match``: Python's ``$`` would accept a
trailing newline). Lengths are in UTF-16 code units, JavaScript's ``.length``.

Rules this module adds where the reference leaves a shape undefined (recorded
in ``docs/protocol.md`` § Decisions): :data:`NAME_MAX_CHARS`,
:data:`PATH_SEGMENT_MAX_CHARS`, :data:`REGION_PATTERN`,
:data:`DIGEST_PATTERN`, :data:`ACCESS_KEY_ID_PATTERN`.
"""

from __future__ import annotations

import re
from typing import Final

from .._json import MAX_SAFE_INTEGER, utf16_len

__all__ = [
    "ACCESS_KEY_ID_PATTERN",
    "DIGEST_PATTERN",
    "DIGEST_RE",
    "MAX_ERROR_CHARS",
    "MAX_SAFE_INTEGER",
    "MAX_SSM_GET_PARAMETERS",
    "NAME_MAX_CHARS",
    "OP_ID_PATTERN",
    "OP_ID_RE",
    "PARAMETER_NAME_MAX_CHARS",
    "PATH_SEGMENT_MAX_CHARS",
    "PATH_SEGMENT_PATTERN",
    "PATH_SEGMENT_RE",
    "PROJECT_ENV_KEY_PATTERN",
    "PROJECT_ENV_KEY_RE",
    "PROJECT_ENV_STAGING_ID_PATTERN",
    "PROJECT_ENV_STAGING_ID_RE",
    "PROJECT_PATH_SEGMENT_PATTERN",
    "PROJECT_PATH_SEGMENT_RE",
    "REGION_PATTERN",
    "TASK_ID_MAX_CHARS",
    "is_op_id",
    "is_task_id",
    "is_valid_assignment",
]

#: Operation ids (``lease.request``, ``credential.refresh`` and their
#: answers): 1 to 128 of ``A–Z a–z 0–9 _ -``. Reference: ``OP_ID``.
OP_ID_PATTERN: Final = r"[A-Za-z0-9_-]{1,128}"
OP_ID_RE: Final = re.compile(OP_ID_PATTERN)

#: The longest ``lease.deny`` error text, in UTF-16 code units (at least 1).
#: Reference: ``MAX_ERROR_CHARS``.
MAX_ERROR_CHARS: Final = 512

#: Task ids are 1 to 128 UTF-16 code units with no U+0000–U+001F or U+007F.
#: Reference: ``validAssignment``.
TASK_ID_MAX_CHARS: Final = 128

#: A project id as it appears in a parameter path. Reference:
#: ``PROJECT_PATH_SEGMENT`` (no length bound there; the grant bounds project
#: ids to :data:`PATH_SEGMENT_MAX_CHARS`).
PROJECT_PATH_SEGMENT_PATTERN: Final = r"[A-Za-z0-9_.-]+"
PROJECT_PATH_SEGMENT_RE: Final = re.compile(PROJECT_PATH_SEGMENT_PATTERN)

#: A project env key. Reference: ``PROJECT_ENV_KEY``.
PROJECT_ENV_KEY_PATTERN: Final = r"[A-Za-z_][A-Za-z0-9_]*"
PROJECT_ENV_KEY_RE: Final = re.compile(PROJECT_ENV_KEY_PATTERN)

#: A staging id: a lowercase UUID. Reference: ``PROJECT_ENV_STAGING_ID``.
PROJECT_ENV_STAGING_ID_PATTERN: Final = (
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)
PROJECT_ENV_STAGING_ID_RE: Final = re.compile(PROJECT_ENV_STAGING_ID_PATTERN)

#: At most this many selectors per ``GetParameters`` call. Reference:
#: ``MAX_SSM_GET_PARAMETERS``.
MAX_SSM_GET_PARAMETERS: Final = 10

# ---------------------------------------------------------------------------
# Decided here (the reference imports these shapes without defining them).

#: Longest opaque name (lease id, credential id, revision, session id), in
#: UTF-16 code units. Names have no pattern and may hold control characters:
#: the reference only compares them for equality (``docs/protocol.md``
#: decision 6; control characters are refused only for task ids and values
#: written into line-based or header formats).
NAME_MAX_CHARS: Final = 128

#: Longest path segment (org id, user id, project id, credential id inside a
#: parameter name), in UTF-16 code units.
PATH_SEGMENT_MAX_CHARS: Final = 128

#: Longest SSM parameter name accepted in a manifest (SSM's own limit).
PARAMETER_NAME_MAX_CHARS: Final = 2048

#: A path segment of a credential parameter name (org id, user id,
#: credential id): ``PROJECT_PATH_SEGMENT`` limited to 128 units, and never
#: ``.`` or ``..``.
PATH_SEGMENT_PATTERN: Final = r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,128}"
PATH_SEGMENT_RE: Final = re.compile(PATH_SEGMENT_PATTERN)

#: An AWS region name such as ``us-east-1`` or ``us-gov-west-1``.
REGION_PATTERN: Final = r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}"

#: A lowercase hex SHA-256 digest.
DIGEST_PATTERN: Final = r"[0-9a-f]{64}"
DIGEST_RE: Final = re.compile(DIGEST_PATTERN)

#: An STS access key id (not a secret): uppercase letters and digits.
ACCESS_KEY_ID_PATTERN: Final = r"[A-Z0-9]{16,128}"

_CONTROL: Final = re.compile("[\x00-\x1f\x7f]")


def is_op_id(value: object) -> bool:
    """Whether ``value`` is a ``str`` op id (``OP_ID``, full match). Never raises."""
    return type(value) is str and OP_ID_RE.fullmatch(value) is not None


def is_task_id(value: object) -> bool:
    """Whether ``value`` is a valid task id. Never raises.

    A ``str`` of 1 to 128 UTF-16 code units with no U+0000–U+001F and no
    U+007F. Reference: ``validAssignment`` (LR-163).
    """
    return (
        type(value) is str
        and 0 < utf16_len(value) <= TASK_ID_MAX_CHARS
        and _CONTROL.search(value) is None
    )


def is_valid_assignment(task_id: object, run_epoch: object) -> bool:
    """Whether ``(task_id, run_epoch)`` is a valid task assignment. Never raises.

    The task id follows :func:`is_task_id`; the run epoch is a safe integer
    (an ``int``, never a ``bool``) of at least 1. Reference:
    ``validAssignment`` in ``cloud-credential-leases.ts``.
    """
    return is_task_id(task_id) and type(run_epoch) is int and 1 <= run_epoch <= MAX_SAFE_INTEGER
