"""Project env value envelopes the registry authenticates (LR-150, LR-151).

The registry reads a project's env value through the grant's own session and
checks, before handing the *raw* envelope on, that it is exactly the value
asked for. Reference: ``openProjectValue`` and ``exactJsonObject`` in
``host/lib/cloud-credential-leases.ts``. The shapes are declared as wire
models so that the one validator (``_model.py``) enforces exact key sets and
types; the field equalities are checked by :func:`open_project_value`.

* staged (v2): exactly ``{v: 2, kind: "project-env", orgId, projectId, key,
  stagingId, value}``;
* legacy (v1): exactly ``{v: 1, kind: "project-env", projectId, key, value,
  updatedAt}`` plus an optional ``orgId``; ``updatedAt`` a finite number.

(The env replica's own codec may also declare these envelopes; the registry
keeps its check self-contained, as the reference does.)
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from leasegate.core._model import DecodeError, Model, decode, spec

from .._json import JsonError, loads
from .._secret import Secret

__all__ = ["open_project_value"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Staged(Model):
    v: Literal[2] = spec("v")
    kind: Literal["project-env"] = spec("kind")
    org_id: str = spec("orgId")
    project_id: str = spec("projectId")
    key: str = spec("key")
    staging_id: str = spec("stagingId")
    value: Secret = spec("value")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Legacy(Model):
    v: Literal[1] = spec("v")
    kind: Literal["project-env"] = spec("kind")
    project_id: str = spec("projectId")
    key: str = spec("key")
    value: Secret = spec("value")
    updated_at: float = spec("updatedAt")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _LegacyWithOrg(Model):
    v: Literal[1] = spec("v")
    kind: Literal["project-env"] = spec("kind")
    org_id: str = spec("orgId")
    project_id: str = spec("projectId")
    key: str = spec("key")
    value: Secret = spec("value")
    updated_at: float = spec("updatedAt")


def open_project_value(
    raw: str,
    *,
    org_id: str,
    project_id: str,
    key: str,
    staging_id: str | None,
) -> bool:
    """Whether ``raw`` is the envelope of exactly this project value.

    Args:
        raw: the decrypted parameter text.
        org_id: the lease's org id.
        project_id, key: the value asked for.
        staging_id: the staged reference's id, or ``None`` for a legacy one.

    Returns:
        ``True`` when the envelope matches (LR-150 for staged, LR-151 for
        legacy); ``False`` otherwise. Never raises; never looks at ``value``
        beyond its type.
    """
    try:
        obj = loads(raw)
    except (JsonError, ValueError, TypeError, RecursionError):
        return False
    if staging_id is not None:
        staged = decode(_Staged, obj)
        return (
            not isinstance(staged, DecodeError)
            and staged.org_id == org_id
            and staged.project_id == project_id
            and staged.key == key
            and staged.staging_id == staging_id
        )
    with_org = type(obj) is dict and "orgId" in obj
    legacy = decode(_LegacyWithOrg if with_org else _Legacy, obj)
    if isinstance(legacy, DecodeError):
        return False
    if isinstance(legacy, _LegacyWithOrg) and legacy.org_id != org_id:
        return False
    return legacy.project_id == project_id and legacy.key == key
