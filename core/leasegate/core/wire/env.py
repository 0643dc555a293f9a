"""Env replica frames (``env.replica.v1.*``) and project env value envelopes.

Theory of operation
===================

The cloud streams a task's project environment to the runner's env replica
(:mod:`leasegate.core.replica`) as four frames, and the runner answers every
one of them with an ``env.replica.v1.ack``:

* cloud → runner: :class:`EnvBegin` (open a snapshot attempt over an ordered
  project list), :class:`EnvPage` (one page of one project's records),
  :class:`EnvApply` (one record change, carrying a delivery cursor), and
  :class:`EnvCommit` (close the attempt: high water and per-project versions);
* runner → cloud: :class:`EnvAck` (success with a phase-specific body, or an
  error ``code``).

Each frame is a frozen dataclass deriving :class:`~leasegate.core.Model`; the
one validator in ``_model.py`` compiles the declarations below into strict
decoders. The reference (``host/lib/project-env-task-replica.ts``) imports
the frame validators without defining them; the choices made here are listed
in ``docs/protocol-env.md`` § Decisions, the most important being:

* ids (``opId``, ``runnerBootId``, ``streamId``, ``attemptId``) follow
  ``OP_ID``; task ids follow the task id rule; project ids
  :data:`~._common.PATH_SEGMENT_PATTERN`;
* ``projectIds`` are unique (at most :data:`MAX_ATTEMPT_PROJECTS`, may be
  empty); page records have unique keys in strictly ascending code-unit
  order, all after ``after``; ``after`` is an env key or ``null``;
* an apply's ``delivery.streamId`` and a commit's ``highWater.streamId``
  equal the frame's ``streamId``; delivery sequences are ≥ 1;
* a state's ``binding`` key is always present (``null`` or a binding), so an
  absent binding and a ``null`` one cannot differ canonically;
* a ``row`` value reference decodes; the replica never reads it and
  materializes it as ``value_unavailable`` (what the reference's reader
  does, LR: the registry refuses ``row`` reads).

The ack is one frame kind with five shapes (error, begun, page, applied,
complete). :class:`EnvAck` holds them all: the fields of other shapes are
``None``, and its decoder and encoder (installed below) check and write the
exact key set of the shape that ``ok``/``phase`` select.

Envelopes: the staged v2 and legacy v1 project env value envelopes are
parsed by :func:`parse_staged_envelope` and :func:`parse_legacy_envelope`
with the reference's exact rules (``parseStagedEnvelope``,
``parseLegacyEnvelope``: ER-098, ER-100); :class:`StagedEnvelope` and
:class:`LegacyEnvelope` are the models a writer encodes.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Final, Literal, TypeAlias

from leasegate.core._model import (
    _DECODERS,
    _ENCODERS,
    DecodeError,
    Model,
    _encoder_for,
    _Fail,
    _fast_secret,
    decoder,
    spec,
)

from .._json import JsonError, is_js_finite, loads
from .._secret import Secret
from ._common import (
    OP_ID_PATTERN,
    PATH_SEGMENT_PATTERN,
    PROJECT_ENV_KEY_PATTERN,
    PROJECT_ENV_STAGING_ID_PATTERN,
    TASK_ID_MAX_CHARS,
)
from .credentials import (
    project_env_legacy_parameter,
    project_env_legacy_selector,
    project_env_staged_parameter,
)

__all__ = [
    "ACK_CODES",
    "ACK_KIND",
    "APPLY_KIND",
    "BEGIN_KIND",
    "COMMIT_KIND",
    "FRAMES",
    "MAX_ATTEMPT_PROJECTS",
    "MAX_PAGE_RECORDS",
    "MAX_PROJECT_ENV_ACK_PAGE_BYTES",
    "MAX_WITHHOLD_REASON_CHARS",
    "PAGE_KIND",
    "UNAVAILABLE_REASONS",
    "AckCode",
    "AckPhase",
    "Binding",
    "BindingEnv",
    "BindingOmit",
    "BindingState",
    "BindingWithhold",
    "DeliveryCursor",
    "EnvAck",
    "EnvApply",
    "EnvBegin",
    "EnvCommit",
    "EnvFrame",
    "EnvPage",
    "Head",
    "Installed",
    "LegacyEnvelope",
    "Materialization",
    "ProjectVersion",
    "RecordResult",
    "StagedEnvelope",
    "Unavailable",
    "UnavailableReason",
    "ValueRef",
    "ValueRefLegacy",
    "ValueRefRow",
    "ValueRefStaged",
    "Withheld",
    "parse_legacy_envelope",
    "parse_staged_envelope",
    "project_env_legacy_parameter",
    "project_env_legacy_selector",
    "project_env_staged_parameter",
    "staged_envelope_value",
]

BEGIN_KIND: Final = "env.replica.v1.begin"
PAGE_KIND: Final = "env.replica.v1.page"
APPLY_KIND: Final = "env.replica.v1.apply"
COMMIT_KIND: Final = "env.replica.v1.commit"
ACK_KIND: Final = "env.replica.v1.ack"

#: The largest serialized success page ack, in bytes of UTF-8 compact JSON
#: (ER-051, ER-113; decided here, the reference imports it). An ack exactly
#: this long is accepted.
MAX_PROJECT_ENV_ACK_PAGE_BYTES: Final = 262_144
#: Most project ids in one begin (decided here).
MAX_ATTEMPT_PROJECTS: Final = 256
#: Most records in one page (decided here).
MAX_PAGE_RECORDS: Final = 1024
#: Longest withhold reason, in UTF-16 code units (decided here).
MAX_WITHHOLD_REASON_CHARS: Final = 128

#: The phase of an ack: one per frame kind (ER-109).
AckPhase: TypeAlias = Literal["begun", "page", "applied", "complete"]

#: Every ack error code (the reference's code table, § Constants).
AckCode: TypeAlias = Literal[
    "runner_boot_mismatch",
    "activation_pending",
    "task_assignment_mismatch",
    "replica_restart_required",
    "stream_retired",
    "reconciliation_attempt_retired",
    "reconciliation_attempt_conflict",
    "reconciliation_attempt_mismatch",
    "reader_changed",
    "project_not_in_attempt",
    "snapshot_page_conflict",
    "snapshot_page_mismatch",
    "snapshot_version_conflict",
    "record_version_stale",
    "ack_page_too_large",
    "replica_state_changed",
    "stream_mismatch",
    "receipt_missing",
    "delivery_conflict",
    "delivery_gap",
    "snapshot_incomplete",
    "record_version_gap",
    "project_not_in_replica",
    "record_version_conflict",
    "delivery_incomplete",
    "record_version_changed",
]
ACK_CODES: Final[tuple[str, ...]] = AckCode.__args__  # type: ignore[attr-defined]

#: Reasons of an ``unavailable`` materialization (ER-096–ER-101).
UnavailableReason: TypeAlias = Literal[
    "value_reference_invalid",
    "value_missing",
    "value_envelope_mismatch",
    "value_version_mismatch",
    "value_unavailable",
]
UNAVAILABLE_REASONS: Final[tuple[str, ...]] = UnavailableReason.__args__  # type: ignore[attr-defined]


def _op_id(wire: str) -> Any:
    return spec(wire, pattern=OP_ID_PATTERN)


def _task_id() -> Any:
    return spec("taskId", min_len=1, max_len=TASK_ID_MAX_CHARS, no_control=True)


def _project_id(wire: str = "projectId") -> Any:
    return spec(wire, pattern=PATH_SEGMENT_PATTERN)


def _version(wire: str = "recordVersion") -> Any:
    return spec(wire, minimum=0)


# ---------------------------------------------------------------------------
# Records


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ValueRefStaged(Model):
    """A staged value: ``{kind: "staged", stagingId}`` (a lowercase UUID).

    Read at :func:`project_env_staged_parameter`; the value is a v2
    :class:`StagedEnvelope`. Reference: ``ProjectEnvValueRef`` (ER-097).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "staged")
    staging_id: str = spec("stagingId", pattern=PROJECT_ENV_STAGING_ID_PATTERN)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ValueRefLegacy(Model):
    """A legacy value: ``{kind: "legacy", ssmVersion}`` (a safe integer ≥ 1).

    Read at :func:`project_env_legacy_selector`; the value is a v1
    :class:`LegacyEnvelope`. Reference: ``ProjectEnvValueRef`` (ER-099).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "legacy")
    ssm_version: int = spec("ssmVersion", minimum=1)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ValueRefRow(Model):
    """A database-row value: ``{kind: "row", rowId}`` (an op id).

    Decoded, never read: the lease registry refuses row reads, so the replica
    materializes it as ``value_unavailable`` without a read (decided here).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "row")
    row_id: str = _op_id("rowId")


#: A value reference (``head.valueRef``), ``null`` for none.
ValueRef: TypeAlias = ValueRefStaged | ValueRefLegacy | ValueRefRow


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Head(Model):
    """A record head: ``{revision, generation, tombstone, valueRef}``.

    ``revision`` counts metadata versions and ``generation`` value versions
    (both safe integers ≥ 0); ``valueRef`` is ``null`` for a tombstone.
    Reference: the head fields ``stateOrder`` reads (ER-072–ER-085).
    """

    revision: int = spec("revision", minimum=0)
    generation: int = spec("generation", minimum=0)
    tombstone: bool = spec("tombstone")
    value_ref: ValueRef | None = spec("valueRef")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BindingEnv(Model):
    """``{kind: "env"}``: materialize the value as an environment variable."""

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "env")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BindingOmit(Model):
    """``{kind: "omit"}``: withheld with reason ``binding_omits`` (ER-095)."""

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "omit")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BindingWithhold(Model):
    """``{kind: "withhold", reason}``: withheld with ``reason`` verbatim (ER-095).

    ``reason``: 1–128 UTF-16 units, no control characters.
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "withhold")
    reason: str = spec("reason", min_len=1, max_len=MAX_WITHHOLD_REASON_CHARS, no_control=True)


#: How a record is bound into the task environment.
Binding: TypeAlias = BindingEnv | BindingOmit | BindingWithhold


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BindingState(Model):
    """One record: ``{key, head, binding, policyEpoch, listingGeneration}``.

    ``key`` is an env key (``PROJECT_ENV_KEY``); ``binding`` is always present,
    ``null`` meaning "materialize"; ``policyEpoch`` a safe integer ≥ 1 or
    ``null``; ``listingGeneration`` a safe integer ≥ 0. States are compared
    canonically (every field). Reference: ``ProjectEnvReplicaBindingState``.
    """

    key: str = spec("key", pattern=PROJECT_ENV_KEY_PATTERN, max_len=256)
    head: Head = spec("head")
    binding: Binding | None = spec("binding")
    policy_epoch: int | None = spec("policyEpoch", minimum=1)
    listing_generation: int = spec("listingGeneration", minimum=0)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Installed(Model):
    """``{kind: "installed"}``: the value was read and authenticated (ER-102)."""

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "installed")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Withheld(Model):
    """``{kind: "withheld", reason}``: never read (ER-095).

    ``reason``: ``tombstone``, ``policy_epoch_unknown``, ``binding_omits`` or a
    withhold binding's reason.
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "withheld")
    reason: str = spec("reason", min_len=1, max_len=MAX_WITHHOLD_REASON_CHARS, no_control=True)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Unavailable(Model):
    """``{kind: "unavailable", reason}``: no value (ER-096–ER-101)."""

    TAG: ClassVar[tuple[str, str] | None] = ("kind", "unavailable")
    reason: UnavailableReason = spec("reason")


#: A record's materialization.
Materialization: TypeAlias = Installed | Withheld | Unavailable


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RecordResult(Model):
    """``{state, materialization}``: one result of a page or apply ack (ER-053)."""

    state: BindingState = spec("state")
    materialization: Materialization = spec("materialization")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryCursor(Model):
    """``{streamId, sequence}``: a position in a delivery stream (sequence ≥ 0)."""

    stream_id: str = _op_id("streamId")
    sequence: int = spec("sequence", minimum=0)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProjectVersion(Model):
    """``{projectId, recordVersion}``: one entry of a commit's ``versions``."""

    project_id: str = _project_id()
    record_version: int = _version()


# ---------------------------------------------------------------------------
# Frames (cloud → runner)


def _sorted_keys_after(records: tuple[BindingState, ...], after: str | None) -> bool:
    prev = after
    for r in records:
        if prev is not None and not r.key > prev:
            return False
        prev = r.key
    return True


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvBegin(Model):
    """``env.replica.v1.begin``: open snapshot attempt ``attemptId`` on ``streamId``.

    ``projectIds``: unique project ids (0–256), in the order the commit's
    ``versions`` must follow. Reference: ``isProjectEnvReplicaV1BeginFrame``
    (imported), ``#begin`` (ER-028–ER-036).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", BEGIN_KIND)
    op_id: str = _op_id("opId")
    task_id: str = _task_id()
    run_epoch: int = spec("runEpoch", minimum=1)
    runner_boot_id: str = _op_id("runnerBootId")
    stream_id: str = _op_id("streamId")
    attempt_id: str = _op_id("attemptId")
    project_ids: tuple[str, ...] = spec(
        "projectIds", pattern=PATH_SEGMENT_PATTERN, max_items=MAX_ATTEMPT_PROJECTS, unique=True
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvPage(Model):
    """``env.replica.v1.page``: records of ``projectId`` after key ``after``.

    ``after``: ``null`` for the first page, else the last key of the previous
    page; ``records``: 0–1024 states with unique keys in strictly ascending
    code-point order, each greater than ``after``; ``complete``: this is the
    project's last page. Reference: ``#page`` (ER-037–ER-053).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", PAGE_KIND)
    op_id: str = _op_id("opId")
    task_id: str = _task_id()
    run_epoch: int = spec("runEpoch", minimum=1)
    runner_boot_id: str = _op_id("runnerBootId")
    stream_id: str = _op_id("streamId")
    attempt_id: str = _op_id("attemptId")
    project_id: str = _project_id()
    after: str | None = spec("after", pattern=PROJECT_ENV_KEY_PATTERN, max_len=256)
    record_version: int = _version()
    records: tuple[BindingState, ...] = spec("records", max_items=MAX_PAGE_RECORDS)
    complete: bool = spec("complete")

    def _check(self) -> tuple[str, str] | None:
        if not _sorted_keys_after(self.records, self.after):
            return ("records", "keys not strictly ascending after 'after'")
        return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvApply(Model):
    """``env.replica.v1.apply``: one record change at ``delivery``.

    ``attemptId``: the attempt in progress (a staged apply) or ``null`` (a
    live apply); ``delivery.streamId`` equals ``streamId`` and
    ``delivery.sequence`` ≥ 1. Reference: ``#apply`` (ER-054–ER-072).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", APPLY_KIND)
    op_id: str = _op_id("opId")
    task_id: str = _task_id()
    run_epoch: int = spec("runEpoch", minimum=1)
    runner_boot_id: str = _op_id("runnerBootId")
    stream_id: str = _op_id("streamId")
    attempt_id: str | None = _op_id("attemptId")
    project_id: str = _project_id()
    record_version: int = _version()
    state: BindingState = spec("state")
    delivery: DeliveryCursor = spec("delivery")

    def _check(self) -> tuple[str, str] | None:
        if self.delivery.stream_id != self.stream_id:
            return ("delivery.streamId", "differs from streamId")
        if self.delivery.sequence < 1:
            return ("delivery.sequence", "less than 1")
        return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvCommit(Model):
    """``env.replica.v1.commit``: install attempt ``attemptId``.

    ``highWater.streamId`` equals ``streamId``; ``versions``: one entry per
    begun project, in begin order (0–256). Reference: ``#commit``
    (ER-086–ER-094).
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", COMMIT_KIND)
    op_id: str = _op_id("opId")
    task_id: str = _task_id()
    run_epoch: int = spec("runEpoch", minimum=1)
    runner_boot_id: str = _op_id("runnerBootId")
    stream_id: str = _op_id("streamId")
    attempt_id: str = _op_id("attemptId")
    high_water: DeliveryCursor = spec("highWater")
    versions: tuple[ProjectVersion, ...] = spec("versions", max_items=MAX_ATTEMPT_PROJECTS)

    def _check(self) -> tuple[str, str] | None:
        if self.high_water.stream_id != self.stream_id:
            return ("highWater.streamId", "differs from streamId")
        return None


# ---------------------------------------------------------------------------
# The ack (runner → cloud)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnvAck(Model):
    """``env.replica.v1.ack``: the answer to every env frame (ER-108–ER-111).

    Common fields: ``opId``, ``taskId``, ``runEpoch``, ``runnerBootId``,
    ``streamId``, ``attemptId`` (echoed; ``null`` for a live apply),
    ``policyEpochs`` (the manager's), ``appliedThrough`` (a cursor on the
    frame's stream), ``ok`` and ``phase``. Then one of:

    * error (``ok: false``): ``code`` and ``error`` (the same code);
    * ``begun``: nothing more;
    * ``page``: ``projectId``, ``after``, ``recordVersion``, ``results``,
      ``complete``;
    * ``applied``: ``projectId``, ``recordVersion``, ``result``;
    * ``complete``: ``highWater``.

    Fields of other shapes are ``None`` and absent on the wire; the decoder
    requires exactly the selected shape's keys.
    """

    TAG: ClassVar[tuple[str, str] | None] = ("kind", ACK_KIND)
    op_id: str = _op_id("opId")
    task_id: str = _task_id()
    run_epoch: int = spec("runEpoch", minimum=1)
    runner_boot_id: str = _op_id("runnerBootId")
    stream_id: str = _op_id("streamId")
    attempt_id: str | None = _op_id("attemptId")
    policy_epochs: tuple[int, ...] = spec("policyEpochs", minimum=1)
    applied_through: DeliveryCursor = spec("appliedThrough")
    ok: bool = spec("ok")
    phase: AckPhase = spec("phase")
    code: AckCode | None = spec("code")
    error: AckCode | None = spec("error")
    project_id: str | None = _project_id()
    after: str | None = spec("after", pattern=PROJECT_ENV_KEY_PATTERN, max_len=256)
    record_version: int | None = _version()
    results: tuple[RecordResult, ...] | None = spec("results")
    complete: bool | None = spec("complete")
    result: RecordResult | None = spec("result")
    high_water: DeliveryCursor | None = spec("highWater")


_COMMON_ACK: Final = (
    "op_id",
    "task_id",
    "run_epoch",
    "runner_boot_id",
    "stream_id",
    "attempt_id",
    "policy_epochs",
    "applied_through",
    "ok",
    "phase",
)
_ACK_SHAPES: Final[dict[tuple[bool, str], tuple[str, ...]]] = {
    (False, "begun"): ("code", "error"),
    (False, "page"): ("code", "error"),
    (False, "applied"): ("code", "error"),
    (False, "complete"): ("code", "error"),
    (True, "begun"): (),
    (True, "page"): ("project_id", "after", "record_version", "results", "complete"),
    (True, "applied"): ("project_id", "record_version", "result"),
    (True, "complete"): ("high_water",),
}
_ACK_FIELDS: Final = {f.name: f for f in dataclasses.fields(EnvAck)}
_ACK_VARIANTS: dict[tuple[bool, str], type[Model]] = {}


def _ack_variant(ok: bool, phase: str, names: tuple[str, ...]) -> type[Model]:
    """A private model with exactly one ack shape's fields (for strict decoding)."""
    anns = {n: EnvAck.__annotations__[n] for n in _COMMON_ACK + names}
    ns: dict[str, Any] = {
        "__annotations__": anns,
        "TAG": ("kind", ACK_KIND),
        "__module__": __name__,
    }
    for n in _COMMON_ACK + names:
        ns[n] = dataclasses.field(metadata=_ACK_FIELDS[n].metadata)
    cls = type(f"_Ack_{'ok' if ok else 'err'}_{phase}", (Model,), ns)
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)


for (_ok, _phase), _names in _ACK_SHAPES.items():
    _ACK_VARIANTS[(_ok, _phase)] = _ack_variant(_ok, _phase, _names)
# Compiled once, at import: the ack decoder never compiles on a hot path.
_ACK_DECODERS: Final = {shape: decoder(cls) for shape, cls in _ACK_VARIANTS.items()}
_ACK_ENCODERS: Final = {shape: _encoder_for(cls) for shape, cls in _ACK_VARIANTS.items()}


def _decode_ack(v: Any) -> EnvAck:
    if type(v) is not dict:
        raise _Fail("expected object")
    ok, phase = v.get("ok"), v.get("phase")
    if type(ok) is not bool:
        fail = _Fail("expected boolean" if "ok" in v else "missing key")
        fail.path.append("ok")
        raise fail
    variant = _ACK_DECODERS.get((ok, phase)) if type(phase) is str else None
    if variant is None:
        fail = _Fail("not an allowed value" if "phase" in v else "missing key")
        fail.path.append("phase")
        raise fail
    got = variant(v)
    if isinstance(got, DecodeError):
        fail = _Fail(got.reason)
        if got.field:
            fail.path.extend(reversed(got.field.replace("[", ".[").split(".")))
        raise fail
    kwargs = dict.fromkeys(_ACK_FIELDS)
    for f in dataclasses.fields(got):
        kwargs[f.name] = getattr(got, f.name)
    ack = EnvAck(**kwargs)
    if not ok and ack.code != ack.error:
        fail = _Fail("differs from code")
        fail.path.append("error")
        raise fail
    return ack


def _encode_ack(ack: EnvAck) -> dict[str, Any]:
    shape = (ack.ok, ack.phase)
    variant = _ACK_VARIANTS[shape]
    names = [f.name for f in dataclasses.fields(variant)]  # type: ignore[arg-type]
    out: dict[str, Any] = _ACK_ENCODERS[shape](variant(**{n: getattr(ack, n) for n in names}))
    return out


_DECODERS[EnvAck] = _decode_ack
_ENCODERS[EnvAck] = _encode_ack

#: Every env replica frame class (each tagged by ``kind``), for ``decode_frame``.
FRAMES: Final[tuple[type[Model], ...]] = (EnvBegin, EnvPage, EnvApply, EnvCommit, EnvAck)

#: A frame the replica handles (cloud → runner).
EnvFrame: TypeAlias = EnvBegin | EnvPage | EnvApply | EnvCommit


# ---------------------------------------------------------------------------
# Envelopes


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StagedEnvelope(Model):
    """The v2 staged value envelope stored at the staged parameter.

    ``{v: 2, kind: "project-env", orgId, projectId, key, stagingId, value}``;
    ``value`` is the secret (may be empty). For writers and tests; the
    replica checks raw text with :func:`parse_staged_envelope`.
    """

    v: Literal[2] = spec("v")
    kind: Literal["project-env"] = spec("kind")
    org_id: str = spec("orgId", min_len=1, max_len=128, no_control=True)
    project_id: str = _project_id()
    key: str = spec("key", pattern=PROJECT_ENV_KEY_PATTERN)
    staging_id: str = spec("stagingId", pattern=PROJECT_ENV_STAGING_ID_PATTERN)
    value: Secret = spec("value")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LegacyEnvelope(Model):
    """The v1 legacy value envelope (the ``orgId``-carrying form).

    ``{v: 1, kind: "project-env", orgId, projectId, key, value, updatedAt}``;
    ``updatedAt`` is a finite number (milliseconds). The reference also
    accepts the form without ``orgId`` (:func:`parse_legacy_envelope`).
    """

    v: Literal[1] = spec("v")
    kind: Literal["project-env"] = spec("kind")
    org_id: str = spec("orgId", min_len=1, max_len=128, no_control=True)
    project_id: str = _project_id()
    key: str = spec("key", pattern=PROJECT_ENV_KEY_PATTERN)
    value: Secret = spec("value")
    updated_at: float = spec("updatedAt")


_STAGED_KEYS: Final = frozenset(("v", "kind", "orgId", "projectId", "key", "stagingId", "value"))
_LEGACY_REQUIRED: Final = frozenset(("v", "kind", "projectId", "key", "value", "updatedAt"))
_LEGACY_ALLOWED: Final = _LEGACY_REQUIRED | {"orgId"}


# A JSON string body that decodes to itself: no quote, backslash, C0
# control character or surrogate.
_plain_body: Final = re.compile('[^"\\\\\x00-\x1f\ud800-\udfff]*').fullmatch


def _plain(s: str) -> bool:
    """``s`` is a JSON string body that decodes to itself (no quote,
    backslash, C0 control character or surrogate)."""
    # Printable ASCII is 0x20-0x7E: no control character (DEL, allowed in
    # JSON, takes the regular expression).
    if s.isascii() and s.isprintable():
        return '"' not in s and "\\" not in s
    return _plain_body(s) is not None


def _is_number(v: object, want: int) -> bool:
    return type(v) in (int, float) and v == want


def parse_staged_envelope(
    raw: str, *, org_id: str, project_id: str, key: str, staging_id: str
) -> Secret | UnavailableReason:
    """Authenticate a raw v2 staged envelope against the requested record.

    Returns the envelope's ``value`` as a :class:`Secret`, or
    ``"value_unavailable"`` (not JSON) or ``"value_envelope_mismatch"`` (JSON
    of another shape: not exactly the seven keys, ``v`` ≠ 2 (``2.0`` counts),
    ``kind`` ≠ ``"project-env"``, another org/project/key/staging id, or a
    non-string value). Never raises, never quotes ``raw``. Reference:
    ``parseStagedEnvelope`` (ER-098).
    """
    return staged_envelope_value(raw, org_id, project_id, key, staging_id)


def staged_envelope_value(
    raw: str, org_id: str, project_id: str, key: str, staging_id: str, /
) -> Secret | UnavailableReason:
    """:func:`parse_staged_envelope` with positional arguments (a hot path).

    Same arguments (``raw`` text, then org, project, key and staging id),
    same results (a :class:`Secret`, ``"value_unavailable"`` or
    ``"value_envelope_mismatch"``), never raises. Reference:
    ``parseStagedEnvelope`` (ER-098).

    Fast path: an envelope written compactly, in ``JSON.stringify``
    insertion order (``v, kind, orgId, projectId, key, stagingId, value``)
    or canonical order (``key, kind, orgId, projectId, stagingId, v,
    value``), ``v`` written ``2``, and no escape in any string, is exactly
    the record's expected text followed by the value and ``"}``; its value
    is taken without building the object (``docs/env-replica.md`` §
    Performance; checked against the full parse in
    ``tests/core/wire/test_env_text.py``). Every other text takes the full
    parse below.
    """
    if (
        type(raw) is str
        and type(org_id) is str
        and type(project_id) is str
        and type(key) is str
        and type(staging_id) is str
        and _plain(org_id + project_id + key + staging_id)
    ):
        got = _staged_envelope_fast(raw, org_id, project_id, key, staging_id)
        if got is not None:
            return got
    return _staged_envelope_parsed(raw, org_id, project_id, key, staging_id)


def _staged_envelope_fast(
    raw: str, org_id: str, project_id: str, key: str, staging_id: str, /
) -> Secret | None:
    """The fast path of :func:`staged_envelope_value`, for plain ids (the
    replica calls it directly: its ids are plain by construction).

    Precondition: ``org_id``, ``project_id``, ``key`` and ``staging_id`` are
    JSON string bodies that decode to themselves (no quote, backslash,
    control character or surrogate), so that the record's expected text is
    the only way to spell them. Returns the value as a :class:`Secret` when
    ``raw`` is that text followed by a value needing no escape and ``"}``;
    else ``None`` (then :func:`staged_envelope_value` decides). Never raises.
    Reference: ``parseStagedEnvelope`` (ER-098).
    """
    if raw.startswith('{"key":'):
        head = (
            f'{{"key":"{key}","kind":"project-env","orgId":"{org_id}",'
            f'"projectId":"{project_id}","stagingId":"{staging_id}","v":2,"value":"'
        )
    elif raw.startswith('{"v":2,'):
        head = (
            f'{{"v":2,"kind":"project-env","orgId":"{org_id}","projectId":"{project_id}",'
            f'"key":"{key}","stagingId":"{staging_id}","value":"'
        )
    else:
        return None
    if len(raw) < len(head) + 2 or not raw.startswith(head) or not raw.endswith('"}'):
        return None
    value = raw[len(head) : -2]
    return _fast_secret(value) if _plain(value) else None


def _staged_envelope_parsed(
    raw: str, org_id: str, project_id: str, key: str, staging_id: str, /
) -> Secret | UnavailableReason:
    """:func:`staged_envelope_value` without its fast path: parse, then check."""
    try:
        obj = loads(raw)
    except (JsonError, ValueError, TypeError):
        return "value_unavailable"
    if (
        type(obj) is not dict
        or obj.keys() != _STAGED_KEYS
        or not _is_number(obj["v"], 2)
        or obj["kind"] != "project-env"
        or obj["orgId"] != org_id
        or obj["projectId"] != project_id
        or obj["key"] != key
        or obj["stagingId"] != staging_id
        or type(obj["value"]) is not str
    ):
        return "value_envelope_mismatch"
    return _fast_secret(obj["value"])  # a str: checked above


def parse_legacy_envelope(
    raw: str, *, org_id: str, project_id: str, key: str
) -> Secret | UnavailableReason:
    """Authenticate a raw v1 legacy envelope against the requested record.

    Returns the ``value`` as a :class:`Secret`, ``"value_unavailable"`` (not
    JSON) or ``"value_envelope_mismatch"``: not an object; missing one of
    ``v, kind, projectId, key, value, updatedAt``; a key other than those
    and ``orgId``; ``v`` ≠ 1; ``kind`` ≠ ``"project-env"``; another project or
    key; a non-string value; ``updatedAt`` not a finite number (``1e999`` and
    booleans refused); ``orgId`` present but not the replica's org (``null``
    refused). Never raises. Reference: ``parseLegacyEnvelope`` (ER-100).
    """
    try:
        obj = loads(raw)
    except (JsonError, ValueError, TypeError):
        return "value_unavailable"
    if type(obj) is not dict:
        return "value_envelope_mismatch"
    keys = obj.keys()
    updated = obj.get("updatedAt")
    if (
        not keys >= _LEGACY_REQUIRED
        or not keys <= _LEGACY_ALLOWED
        or not _is_number(obj["v"], 1)
        or obj["kind"] != "project-env"
        or obj["projectId"] != project_id
        or obj["key"] != key
        or type(obj["value"]) is not str
        or type(updated) not in (int, float)
        or not is_js_finite(updated)  # type: ignore[arg-type]
        or ("orgId" in obj and obj["orgId"] != org_id)
    ):
        return "value_envelope_mismatch"
    return Secret(obj["value"])
