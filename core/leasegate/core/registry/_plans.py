"""Manifest plans: what a grant's manifest alone decides, worked out once per manifest.

A grant's manifest decides its digest check (LR-020 step 3), its credential
descriptors and their uniqueness (LR-023), which entries are complete
(LR-028), how the entries are grouped by session and chunked into reads of at
most ten selectors (LR-029), what each read must return (LR-031) and the
project sessions (LR-038). None of it depends on the run, the sessions or
the values read, so a :class:`ManifestPlan` holds it, and every grant of
an equal manifest shares it: one descriptor tuple, one manifest (the lease is
rebuilt around the plan's, :func:`lease_of`), no per-run copies.

:func:`plan_for` looks the plan up by the grant's claimed digest in the
registry's bounded cache (:data:`PLAN_CACHE_MAX` plans, the oldest dropped
first). A cached plan is used only when its manifest equals the grant's and
the grant's manifest is *plain*: every value an exact ``str``, ``int`` or
``None`` and every entry of its exact class, as the wire decoder builds them.
Exact ``str``/``int``/``None`` values are equal only when they are the same
type and value, so an equal plain manifest has the same canonical JSON and
hence the same digest (``tests/core/registry/test_manifest_plans.py``
checks the registry's commands with and without the cache). Any other
manifest (one a caller built with a ``bool`` or a ``float`` where the wire
has an integer) is hashed by :func:`~leasegate.core.wire.lease.manifest_digest`
every time and its plan is not kept.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from ..wire._common import MAX_SSM_GET_PARAMETERS
from ..wire.credentials import parse_parameter_name
from ..wire.lease import (
    Manifest,
    ManifestEngine,
    ManifestMcp,
    ManifestProject,
    ManifestStatic,
    TaskLease,
    manifest_digest,
)
from ._new import new_credential_entry, new_task_lease
from ._records import Desc
from ._vocab import CredentialEntry, Identity

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = [
    "PLAN_CACHE_MAX",
    "Batch",
    "ManifestPlan",
    "descriptors",
    "identities_of",
    "lease_of",
    "plan_for",
]

#: Most manifest plans a registry keeps (the oldest is dropped first).
PLAN_CACHE_MAX: Final = 256


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Batch:
    """One read of a session: at most ten descriptors, their selectors, by parameter."""

    descs: tuple[Desc, ...]
    selectors: tuple[str, ...]
    expected: Mapping[str | None, Desc]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ManifestPlan:
    """What a manifest decides for every grant of it (module docstring).

    Attributes:
        manifest: the manifest (shared by the leases of every grant of it).
        digest: its digest (lowercase hex SHA-256 of its canonical JSON).
        descs: its credentials in manifest order (engines, MCP, GitHub, SSH).
        by_id: credential id → descriptor (the last one of an id; a plan
            whose ids are not unique is refused before any read): the
            ``descs`` of its bundles (read-only).
        ids_unique, params_unique: LR-023's uniqueness checks.
        incomplete: an entry that needs a secret lacks a parameter, a
            version, a session or a parseable parameter name (LR-028).
        not_required: ``(credential id, record)`` of the ``none`` entries
            (LR-037), their records shared by every bundle of the plan.
        groups: per session id, in first-use order, its reads (LR-029).
        project_sessions: project id → session id (LR-038, LR-143).
        identities: credential id → cleanup identity, in manifest order:
            what a run committing a grant of it remembers (LR-048), shared
            by those runs (read-only, :func:`identities_of`).
        key: the manifest's plain key (:func:`_plain_key`), or ``None``
            for a manifest that is not plain (such a plan is never cached).
    """

    manifest: Manifest
    digest: str
    descs: tuple[Desc, ...]
    by_id: Mapping[str, Desc]
    ids_unique: bool
    params_unique: bool
    incomplete: bool
    not_required: tuple[tuple[str, CredentialEntry], ...]
    groups: tuple[tuple[str, tuple[Batch, ...]], ...]
    project_sessions: dict[str, str]
    identities: Mapping[str, Identity]
    key: tuple[object, ...] | None = None


def _desc(
    cls: Literal["engine", "mcp", "github", "ssh"],
    e: ManifestEngine | ManifestMcp | ManifestStatic,
    auth_kind: str | None,
) -> Desc:
    return Desc(
        cls,
        e.credential_id,
        e.revision,
        e.parameter,
        e.version,
        e.session_id,
        auth_kind,
        None if e.parameter is None else parse_parameter_name(e.parameter),
        e,
        Identity(cls, e.credential_id, e.revision),
    )


def descriptors(manifest: Manifest) -> tuple[Desc, ...]:
    """The manifest's credentials as descriptors, in manifest order (``descriptorFrom*``)."""
    out = [_desc("engine", e, e.auth_kind) for e in manifest.engines]
    out.extend(_desc("mcp", e, e.auth_kind) for e in manifest.mcp)
    if manifest.github is not None:
        out.append(_desc("github", manifest.github, None))
    if manifest.ssh is not None:
        out.append(_desc("ssh", manifest.ssh, None))
    return tuple(out)


def _build(manifest: Manifest, digest: str, key: tuple[object, ...] | None) -> ManifestPlan:
    descs = descriptors(manifest)
    ids = [d.credential_id for d in descs]
    params = [d.parameter for d in descs if d.parameter is not None]
    not_required: list[tuple[str, CredentialEntry]] = []
    grouped: dict[str, list[Desc]] = {}
    incomplete = False
    for d in descs:
        if d.auth_kind == "none":
            not_required.append(
                (d.credential_id, new_credential_entry(d.manifest, "not-required", None, None))
            )
            continue
        if not d.parameter or not d.version or not d.session_id or d.location is None:
            incomplete = True
            continue
        grouped.setdefault(d.session_id, []).append(d)
    groups = tuple(
        (
            session_id,
            tuple(
                Batch(
                    descs=tuple(batch),
                    selectors=tuple(f"{d.parameter}:{d.version}" for d in batch),
                    expected={d.parameter: d for d in batch},
                )
                for batch in (
                    group[off : off + MAX_SSM_GET_PARAMETERS]
                    for off in range(0, len(group), MAX_SSM_GET_PARAMETERS)
                )
            ),
        )
        for session_id, group in grouped.items()
    )
    return ManifestPlan(
        manifest=manifest,
        digest=digest,
        descs=descs,
        by_id={d.credential_id: d for d in descs},
        ids_unique=len(set(ids)) == len(ids),
        params_unique=len(set(params)) == len(params),
        incomplete=incomplete,
        not_required=tuple(not_required),
        groups=groups,
        project_sessions={p.project_id: p.session_id for p in manifest.projects},
        identities={d.credential_id: d.identity for d in descs},
        key=key,
    )


def _values_of(cls: type[object]) -> Callable[[object], tuple[object, ...]]:
    return operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))  # type: ignore[arg-type]


_ENGINE_VALUES: Final = _values_of(ManifestEngine)
_MCP_VALUES: Final = _values_of(ManifestMcp)
_STATIC_VALUES: Final = _values_of(ManifestStatic)
_PROJECT_VALUES: Final = _values_of(ManifestProject)

#: The types of the values the wire decoder builds in a manifest entry.
_PLAIN_TYPES: Final = frozenset({str, int, type(None)})


def _plain_values(
    entries: object, cls: type[object], values: Callable[[object], Any]
) -> tuple[tuple[object, ...], ...] | None:
    """The field values of each entry, or ``None`` unless every entry is plain.

    ``entries`` must be a ``tuple`` of exact ``cls`` instances whose values are
    all exact ``str``/``int``/``None``.
    """
    if type(entries) is not tuple:
        return None
    is_plain = _PLAIN_TYPES.issuperset
    out = []
    for e in entries:
        if type(e) is not cls:
            return None
        v = values(e)
        if not is_plain(map(type, v)):
            return None
        out.append(v)
    return tuple(out)


def _plain_static(entry: object) -> tuple[object, ...] | None:
    """``()`` for no entry, ``(values,)`` for a plain ``ManifestStatic``, else ``None``."""
    if entry is None:
        return ()
    return _plain_values((entry,), ManifestStatic, _STATIC_VALUES)


def _plain_key(manifest: Manifest) -> tuple[object, ...] | None:
    """The field values of a plain manifest, nested in tuples; ``None`` if not plain.

    Plain: every entry has its exact class and every value is an exact
    ``str``/``int``/``None``, as the wire decoder builds them. Two plain
    manifests are equal exactly when their keys are (the dataclass equality
    compares the same values, field by field, of entries of the same
    classes; exact ``str``/``int``/``None`` values are equal only when they
    are the same type and value), and then they have the same canonical JSON
    (module docstring). Comparing keys is a comparison of tuples of atoms, in C.
    """
    if type(manifest) is not Manifest:
        return None
    engines = _plain_values(manifest.engines, ManifestEngine, _ENGINE_VALUES)
    if engines is None:
        return None
    mcp = _plain_values(manifest.mcp, ManifestMcp, _MCP_VALUES)
    if mcp is None:
        return None
    projects = _plain_values(manifest.projects, ManifestProject, _PROJECT_VALUES)
    if projects is None:
        return None
    github = _plain_static(manifest.github)
    if github is None:
        return None
    ssh = _plain_static(manifest.ssh)
    if ssh is None:
        return None
    return (engines, mcp, github, ssh, projects)


def _is_plain(manifest: Manifest) -> bool:
    """Whether every entry has its exact class and every value is an exact ``str``/``int``/``None``.

    What the wire decoder builds; for such manifests equality implies the
    same canonical JSON (module docstring).
    """
    return _plain_key(manifest) is not None


def plan_for(m: LeaseRegistry, manifest: Manifest, digest: str) -> ManifestPlan | None:
    """The plan of ``manifest`` if its digest is ``digest``, else ``None`` (LR-020 step 3).

    Taken from the registry's cache when an equal plain manifest has that
    digest; else the digest is computed and, for a plain manifest, the new
    plan kept (module docstring).
    """
    cache = m._plans
    plan = cache.get(digest)
    if plan is not None and plan.manifest is manifest:
        return plan
    # A cached plan's manifest is plain, so its key is set: the grant's plain
    # manifest equals it exactly when the keys are equal (_plain_key).
    key = _plain_key(manifest)
    if plan is not None and key is not None and key == plan.key:
        return plan
    if manifest_digest(manifest) != digest:
        return None
    plan = _build(manifest, digest, key)
    if PLAN_CACHE_MAX > 0 and digest not in cache and key is not None:
        while len(cache) >= PLAN_CACHE_MAX:
            del cache[next(iter(cache))]
        cache[digest] = plan
    return plan


def lease_of(lease: TaskLease, plan: ManifestPlan) -> TaskLease:
    """``lease`` with the plan's manifest and digest (equal to its own), shared across grants.

    ``plan`` is :func:`plan_for` of the lease's manifest and digest, so its
    digest is the lease's (the same text).
    """
    if lease.manifest is plan.manifest and lease.manifest_digest is plan.digest:
        return lease
    return new_task_lease(
        lease.task_id,
        lease.run_epoch,
        lease.lease_id,
        lease.org_id,
        lease.user_id,
        lease.region,
        lease.manifest_revision,
        plan.digest,
        plan.manifest,
        lease.sessions,
        lease.files,
        lease.expires_at,
    )


def identities_of(
    plan: ManifestPlan, records: Mapping[str, object], descs: Mapping[str, Desc]
) -> Mapping[str, Identity]:
    """Credential id → identity of ``records`` (a bundle of ``plan``), in their order.

    ``descs`` holds the descriptor of each record (the bundle's). The plan's
    own mapping (one per manifest, never mutated) when it is the same, as
    for every committed bundle (one record per descriptor, in manifest
    order); otherwise a new dict.
    """
    shared = plan.identities
    if len(records) == len(shared) and all(
        cid == known and (descs[cid].identity is ident or descs[cid].identity == ident)
        for cid, (known, ident) in zip(records, shared.items(), strict=True)
    ):
        return shared
    return {cid: descs[cid].identity for cid in records}
