"""Project value reads: ``readProjectValue`` and a grant's ``projectValues`` (LR-143–LR-154).

A read names a project and key and a staged or legacy reference; it goes
through the session of that project in the committed bundle (or, for an
install's reader, the grant being installed), reads exactly one selector,
checks the parameter and its envelope with the env replica's functions
(``parse_staged_envelope`` / ``parse_legacy_envelope``) and re-checks its
fence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._json import is_safe_int, sha256_hex
from .._sched import Co
from .._secret import Secret
from ..wire._common import PROJECT_ENV_KEY_RE, PROJECT_ENV_STAGING_ID_RE, PROJECT_PATH_SEGMENT_RE
from ..wire.env import parse_legacy_envelope, parse_staged_envelope
from ._bundles import assert_read_fence, read
from ._records import Bundle, InstallRec, LeaseError, Unavailable
from ._vocab import LegacyRef, ProjectValue, ProjectValueRead, RowRef, StagedRef

if TYPE_CHECKING:
    from ._machine import LeaseRegistry

__all__ = ["read_project_value"]


def read_project_value(m: LeaseRegistry, ev: ProjectValueRead) -> Co[ProjectValue | None]:
    """``readProjectValue`` and a grant's ``projectValues`` (LR-143–LR-154)."""
    # LR-153: projectValueReader's read, bound to the assignment named in the event.
    if (
        type(ev.project_id) is not str
        or PROJECT_PATH_SEGMENT_RE.fullmatch(ev.project_id) is None
        or type(ev.key) is not str
        or PROJECT_ENV_KEY_RE.fullmatch(ev.key) is None
    ):
        raise LeaseError("invalid project env identity")
    if isinstance(ev.ref, RowRef) or not isinstance(ev.ref, (StagedRef, LegacyRef)):
        raise LeaseError("a cloud lease cannot read a row-backed value")
    if ev.install_cmd_id is not None:
        rec = m._installs.get(ev.install_cmd_id)
        # The reference's projectValues reader is bound to its grant's
        # run; here the install is named by id, so a read naming another
        # assignment than that install's run is refused (Q14).
        if rec is None or (ev.task_id, ev.run_epoch) != (
            rec.run.assignment.task_id,
            rec.run.assignment.run_epoch,
        ):
            raise Unavailable()
        result = yield from _grant_read(m, rec, ev)
        return result
    st = m._tasks.get(ev.task_id)
    if st is None or st.assignment.run_epoch != ev.run_epoch or not m._usable(st):
        raise Unavailable()
    bundle = st.bundle
    assert bundle is not None
    generation = st.generation
    result = yield from _read_project_from(
        m, bundle, lambda: assert_read_fence(m, st, bundle, generation), ev
    )
    return result


def _grant_read(m: LeaseRegistry, rec: InstallRec, ev: ProjectValueRead) -> Co[ProjectValue | None]:
    """``#grantProjectValueReader`` (LR-154, LR-100)."""
    st, granted = rec.run, rec.granted
    b = st.bundle
    if (
        m._tasks.get(st.assignment.task_id) is st
        and b is not None
        and b.grant_id == granted.grant_id
        and m._usable(st)
    ):
        generation = st.generation
        result = yield from _read_project_from(
            m, b, lambda: assert_read_fence(m, st, b, generation), ev
        )
        return result
    if not rec.installing():
        raise Unavailable()

    def fence() -> None:
        if not rec.installing():
            raise Unavailable("credential read crossed an assignment fence")

    result = yield from _read_project_from(m, granted, fence, ev)
    return result


def _read_project_from(
    m: LeaseRegistry, bundle: Bundle, fence: Callable[[], None], ev: ProjectValueRead
) -> Co[ProjectValue | None]:
    """``#readProjectValueFrom`` (LR-144–LR-152)."""
    # LR-137: a read in flight when the bundle is replaced, its gate closes, it expires, the
    # floor rises or the run ends fails (#assertReadFence); LR-147: one GetParameters call with
    # one selector, no isolation; LR-149: the one parameter's name, type and version are
    # checked; LR-151: a legacy envelope's exact keys.
    ref = ev.ref
    session_id = bundle.project_sessions.get(ev.project_id)
    if not session_id:
        raise LeaseError("project is not in the active manifest")
    reader = bundle.readers.get(session_id)
    if reader is None:
        raise LeaseError("project credentials session is missing")
    expected: int | None
    if isinstance(ref, StagedRef):
        sid = ref.staging_id
        if type(sid) is not str or PROJECT_ENV_STAGING_ID_RE.fullmatch(sid) is None:
            raise LeaseError("invalid project env staging id")
        parameter = f"/uai/projects/{ev.project_id}/env-values/{sha256_hex(ev.key)}/{sid}"
        selector = parameter
        expected = None
    else:
        assert isinstance(ref, LegacyRef)
        if not is_safe_int(ref.ssm_version) or ref.ssm_version <= 0:
            raise LeaseError("invalid legacy project env version")
        parameter = f"/uai/projects/{ev.project_id}/env/{ev.key}"
        selector = f"{parameter}:{ref.ssm_version}"
        expected = ref.ssm_version
    result = yield from read(m, reader, (selector,))
    fence()
    if len(result.invalid) == 1 and result.invalid[0] == selector:
        if len(result.parameters) != 0:
            raise LeaseError("Parameter Store returned conflicting project results")
        return None
    if len(result.invalid) != 0 or len(result.parameters) != 1:
        raise LeaseError("Parameter Store returned an inexact project result")
    observed = result.parameters[0]
    if (
        observed.name != parameter
        or observed.type != "SecureString"
        or not is_safe_int(observed.version)
        or observed.version <= 0
        or (expected is not None and observed.version != expected)
    ):
        raise LeaseError("Parameter Store returned the wrong project parameter")
    raw = observed.value.reveal() if isinstance(observed.value, Secret) else None
    # One envelope check for the registry and the replica (LR-150/151, ER-098/100).
    if raw is None:
        raise LeaseError("project value envelope does not match its reference")
    if isinstance(ref, StagedRef):
        opened = parse_staged_envelope(
            raw,
            org_id=bundle.lease.org_id,
            project_id=ev.project_id,
            key=ev.key,
            staging_id=ref.staging_id,
        )
    else:
        opened = parse_legacy_envelope(
            raw, org_id=bundle.lease.org_id, project_id=ev.project_id, key=ev.key
        )
    if not isinstance(opened, Secret):
        raise LeaseError("project value envelope does not match its reference")
    return ProjectValue(raw_value=observed.value, version=observed.version, parameter=parameter)
