"""Bundle reads: materializing a grant through its session readers, and the readers' life.

A grant is materialized (LR-026–LR-036) by opening one reader per credentials
session, reading each session's entries in manifest order in chunks of at most
ten selectors (an access-denied chunk is read again one selector at a time,
LR-033), checking every returned parameter exactly (LR-031, LR-032) and
freezing the view (LR-036–LR-038). A bundle is destroyed by sealing its
readers and closing each once its reads drained (LR-059, LR-155). A read of
the committed bundle re-checks its fence afterwards (LR-093).

Functions taking the machine use its plumbing (ids, commands, the scheduler).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._sched import Co, Future
from ..wire.credentials import LeasedValue, parse_leased_value
from ..wire.lease import TaskLease, lease_expires_at
from ._new import (
    new_assignment,
    new_credential_entry,
    new_open_reader,
    new_read_parameters,
    new_task_view,
)
from ._plans import ManifestPlan
from ._records import Bundle, Desc, LeaseError, Reader, Run, Unavailable, is_access_denied
from ._vocab import (
    Assignment,
    CloseReader,
    CredentialEntry,
    FilesAccess,
    FilesCredentials,
    ReadCompleted,
    TaskView,
)

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = [
    "assert_read_fence",
    "destroy_bundle",
    "files_access",
    "freeze_view",
    "materialize",
    "read",
    "read_batch",
    "seal",
]


#: ``id`` of a material → a weak reference to the last record made of it, so that the
#: runs sharing a material (``wire/credentials.py``) share its record too. A hit is
#: checked to be of that very material, manifest entry and version; an entry goes
#: with its record (:func:`_forget`). Bounded.
_AVAILABLE: dict[int, weakref.KeyedRef[int, CredentialEntry]] = {}
_AVAILABLE_MAX: Final = 1024


def _forget(ref: weakref.KeyedRef[int, CredentialEntry]) -> None:
    """Drop the entry of a record that is gone (unless a newer one took its key)."""
    key = ref.key
    if _AVAILABLE.get(key) is ref:
        _AVAILABLE.pop(key, None)


def _available(d: Desc, material: LeasedValue, version: int) -> CredentialEntry:
    """The ``available`` record of ``material`` read at ``version`` for ``d``."""
    key = id(material)
    ref = _AVAILABLE.get(key)
    if ref is not None:
        rec = ref()
        if (
            rec is not None
            and rec.material is material
            and rec.manifest is d.manifest
            and rec.observed_version == version
        ):
            return rec
    rec = new_credential_entry(d.manifest, "available", material, version)
    if len(_AVAILABLE) >= _AVAILABLE_MAX:
        _AVAILABLE.clear()  # bounded: the records still held are made again when read
    _AVAILABLE[key] = weakref.KeyedRef(rec, _forget, key)
    return rec


def _material_matches(material: LeasedValue, desc: Desc) -> bool:
    if material.credential_class != desc.cls:
        return False
    if material.credential_class in ("engine", "mcp"):
        return getattr(material, "auth_kind", None) == desc.auth_kind
    return desc.auth_kind is None


def freeze_view(
    lease: TaskLease,
    expires_at: int,
    records: Mapping[str, CredentialEntry],
    assignment: Assignment | None = None,
) -> TaskView:
    """Build the view (LR-036–LR-038); raises ``LeaseError`` as ``freezeView``.

    The view's assignment is the lease's task and epoch: ``assignment`` (the
    run's own, shared rather than copied) when it is that one, else a new one.
    Its entries are the records themselves when they hold the lease's
    manifest entry (as every record read for a plan's lease does).
    """

    # LR-037: MCP records must be complete for their authKind, or "MCP material is incomplete".
    def need(cid: str) -> CredentialEntry:
        rec = records.get(cid)
        if rec is None:
            raise LeaseError("credential material is incomplete")
        return rec

    def entry(rec: CredentialEntry, manifest: Any) -> CredentialEntry:
        if rec.manifest is manifest:
            return rec
        return new_credential_entry(manifest, rec.availability, rec.material, rec.observed_version)

    def static_ok(rec: CredentialEntry, cls: str) -> bool:
        return not (
            rec.availability == "not-required"
            or (
                rec.availability == "available"
                and (
                    rec.material is None
                    or rec.material.credential_class != cls
                    or rec.observed_version is None
                )
            )
            or (
                rec.availability == "access-denied"
                and (rec.material is not None or rec.observed_version is not None)
            )
        )

    engines: list[CredentialEntry] = []
    for e in lease.manifest.engines:
        rec = need(e.credential_id)
        if not static_ok(rec, "engine"):
            raise LeaseError("engine material is incomplete")
        engines.append(entry(rec, e))
    mcp_entries: list[CredentialEntry] = []
    for m in lease.manifest.mcp:
        rec = need(m.credential_id)
        if (
            (m.auth_kind == "none" and (rec.availability != "not-required" or rec.material))
            or (m.auth_kind != "none" and rec.availability == "not-required")
            or (
                rec.availability == "available"
                and (rec.material is None or rec.material.credential_class != "mcp")
            )
            or (rec.availability == "access-denied" and rec.material is not None)
        ):
            raise LeaseError("MCP material is incomplete")
        mcp_entries.append(entry(rec, m))
    statics: list[CredentialEntry | None] = []
    for cls, s in (("github", lease.manifest.github), ("ssh", lease.manifest.ssh)):
        if s is None:
            statics.append(None)
            continue
        rec = need(s.credential_id)
        if not static_ok(rec, cls):
            raise LeaseError(f"{cls} material is incomplete")
        statics.append(entry(rec, s))
    if (
        assignment is None
        or assignment.task_id != lease.task_id
        or assignment.run_epoch != lease.run_epoch
    ):
        assignment = new_assignment(lease.task_id, lease.run_epoch)
    return new_task_view(
        assignment,
        lease.lease_id,
        lease.manifest_revision,
        lease.manifest_digest,
        expires_at,
        tuple(p.project_id for p in lease.manifest.projects),
        tuple(engines),
        tuple(mcp_entries),
        statics[0],
        statics[1],
    )


def read(m: LeaseRegistry, reader: Reader, selectors: tuple[str, ...]) -> Co[ReadCompleted]:
    """``ManagedSessionReader.read`` (LR-155)."""
    if reader.sealed:
        raise Unavailable("credential reader is sealed")
    reader.in_flight += 1
    try:
        fut = m._io_cmd(lambda cid: new_read_parameters(cid, reader.reader_id, selectors))
        result: ReadCompleted = yield fut
    finally:
        reader.in_flight -= 1
        if reader.in_flight == 0:
            drained, reader.drained = reader.drained, ()
            for d in drained:
                d.resolve(None)
    return result


def _destroy_reader(m: LeaseRegistry, reader: Reader) -> Co[None]:
    reader.sealed = True
    if reader.in_flight > 0:
        fut: Future[None] = Future(m._sched)
        reader.drained = (*reader.drained, fut)
        yield fut
    if reader.destroyed:
        return
    reader.destroyed = True
    m._emit(CloseReader(reader_id=reader.reader_id))


def destroy_bundle(m: LeaseRegistry, bundle: Bundle) -> Future[None]:
    """``#destroyBundle``: seal, then close each reader once drained (LR-059, LR-155)."""
    seal(bundle)
    tasks = [m._sched.spawn(_destroy_reader(m, r)) for r in bundle.readers.values()]
    return m._sched.gather([t.future for t in tasks])


def seal(bundle: Bundle) -> None:
    """Seal every reader of ``bundle``: no new read starts (LR-155)."""
    for r in bundle.readers.values():
        r.sealed = True


def materialize(m: LeaseRegistry, st: Run, lease: TaskLease, plan: ManifestPlan) -> Co[Bundle]:
    """``#materializeBundle`` (LR-026–LR-036, LR-040), reading ``plan``'s batches."""
    # LR-029: entries grouped by sessionId in manifest order, read in chunks of at most 10.
    readers: dict[str, Reader] = {}
    try:
        for session in lease.sessions:
            if session.purpose != "credentials":
                continue
            rid = m._id()
            readers[session.id] = Reader(reader_id=rid, session_id=session.id)
            m._emit(new_open_reader(rid, st.assignment, lease.region, session))
        if plan.incomplete:
            raise LeaseError("manifest credential is incomplete")
        records: dict[str, CredentialEntry] = dict(plan.not_required)
        for session_id, batches in plan.groups:
            reader = readers.get(session_id)
            if reader is None:
                raise LeaseError("manifest names a missing session")
            for batch in batches:
                yield from read_batch(
                    m, reader, batch.descs, batch.selectors, records, batch.expected
                )
        # Manifest order for every identity list (catalog note 11).
        ordered = {
            d.credential_id: records[d.credential_id]
            for d in plan.descs
            if d.credential_id in records
        }
        expires_at = lease_expires_at(lease)
        view = freeze_view(lease, expires_at, ordered, st.assignment)
        return Bundle(
            lease=lease,
            expires_at=expires_at,
            readers=readers,
            records=ordered,
            descs=plan.by_id,
            project_sessions=plan.project_sessions,
            view=view,
            grant_id=m._id(),
        )
    except Exception:
        tasks = [m._sched.spawn(_destroy_reader(m, r)) for r in readers.values()]
        yield m._sched.gather([t.future for t in tasks])
        raise


def _assert_batch(
    batch: Sequence[Desc],
    selectors: tuple[str, ...],
    result: ReadCompleted,
    records: dict[str, CredentialEntry],
    expected: Mapping[str | None, Desc] | None = None,
) -> None:
    """``#assertMaterialBatch`` (LR-031, LR-032).

    ``expected`` is ``batch`` by parameter (computed when not given).
    """
    if len(result.invalid) != 0:
        raise LeaseError("Parameter Store rejected a credential selector")
    if len(result.parameters) != len(batch):
        raise LeaseError("Parameter Store omitted or added credential material")
    if expected is None:
        expected = {d.parameter: d for d in batch}
    seen: set[str] = set()
    for p in result.parameters:
        d = expected.get(p.name)
        if (
            d is None
            or p.name in seen
            or p.type != "SecureString"
            or type(p.version) is not int
            or p.version != d.version
            or not hasattr(p.value, "reveal")
        ):
            raise LeaseError("Parameter Store returned inexact credential material")
        if f"{p.name}:{p.version}" not in selectors:
            raise LeaseError("Parameter Store returned an unrequested credential version")
        raw = p.value.reveal()
        material = parse_leased_value(raw, d.location)
        if material is None or not _material_matches(material, d):
            raise LeaseError("credential envelope does not match its manifest entry")
        seen.add(p.name)
        records[d.credential_id] = _available(d, material, p.version)


def read_batch(
    m: LeaseRegistry,
    reader: Reader,
    batch: Sequence[Desc],
    selectors: tuple[str, ...],
    records: dict[str, CredentialEntry],
    expected: Mapping[str | None, Desc] | None = None,
) -> Co[None]:
    """``#readMaterialBatch``: access-denied isolation by singletons (LR-033).

    ``selectors`` are ``batch``'s, in order; ``expected`` is ``batch`` by
    parameter, when the caller has it (a plan's :class:`._plans.Batch`).
    Each record is made with its descriptor's manifest entry; the caller
    keeps the descriptors (:attr:`Bundle.descs`).
    """
    try:
        result = yield from read(m, reader, selectors)
        _assert_batch(batch, selectors, result, records, expected)
        return
    except Exception as error:
        if not is_access_denied(error):
            raise
    for d, sel in zip(batch, selectors, strict=True):
        try:
            result = yield from read(m, reader, (sel,))
            _assert_batch([d], (sel,), result, records)
        except Exception as error:
            if not is_access_denied(error):
                raise
            records[d.credential_id] = new_credential_entry(d.manifest, "access-denied", None, None)


def files_access(m: LeaseRegistry, bundle: Bundle) -> FilesAccess | None:
    """The Files access of ``bundle``'s lease, or ``None`` without Files (LR-140)."""
    lease = bundle.lease
    if lease.files is None:
        return None
    session = next((s for s in lease.sessions if s.purpose == "files"), None)
    if session is None:
        raise LeaseError("Files metadata has no Files session")
    return FilesAccess(
        assignment=Assignment(lease.task_id, lease.run_epoch),
        region=lease.region,
        files=lease.files,
        credentials=FilesCredentials(
            access_key_id=session.access_key_id,
            secret_access_key=session.secret_access_key,
            session_token=session.session_token,
            expires_at=session.expires_at,
        ),
    )


def assert_read_fence(m: LeaseRegistry, st: Run, bundle: Bundle, generation: int) -> None:
    """``#assertReadFence`` (LR-093)."""
    if (
        not m._is_active(st)
        or not st.gate_open
        or st.bundle is not bundle
        or st.generation != generation
        or bundle.expires_at <= m._now
        or bundle.lease.manifest_revision < st.min_revision
    ):
        raise Unavailable("credential read crossed an assignment fence")
