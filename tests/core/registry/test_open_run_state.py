"""What an open run's registry state keeps: small objects, shared plan values, no closures.

An idle runner holds thousands of open runs, so the per-run state is kept
small: a committed run's bundle timers and its install fence are small
objects (never closures, whose cells and function objects cost several
hundred bytes each), and the runs of one manifest share its plan's digest
and remembered identities (``_plans.py``).
"""

from __future__ import annotations

import dataclasses
import gc
import types

from registry_kit import Driver, engine, grant, lease_json, manifest, mcp, reachable, static

from leasegate.core import Secret, decode
from leasegate.core.registry import LeaseRegistry, _bundles, _plans
from leasegate.core.registry._new import new_credential_entry
from leasegate.core.wire.credentials import EngineValue
from leasegate.core.wire.lease import TaskLease


def _open_runs(tasks: tuple[str, ...]) -> Driver:
    d = Driver()
    for task in tasks:
        d.start(task)
        d.frame(grant(d.op_id(), m=manifest([engine(0), engine(1)]), task=task))
        st = d.reg._tasks[task]
        assert st.gate_open
        assert st.renewal_timer is not None
        assert st.expiry_timer is not None
    return d


def test_open_runs_keep_no_closure_cell_or_function() -> None:
    d = _open_runs(("task-a", "task-b"))
    assert d.reg._installs  # the install records (and their fences) are kept
    kept = [
        o
        for o in reachable(d.reg, into_functions=False)
        if isinstance(o, (types.FunctionType, types.MethodType, types.CellType))
    ]
    assert kept == []


def test_open_runs_of_one_manifest_share_its_digest_and_identities() -> None:
    d = _open_runs(("task-a", "task-b"))
    a, b = d.reg._tasks["task-a"], d.reg._tasks["task-b"]
    assert a.bundle is not None
    assert b.bundle is not None
    assert a.bundle.lease.manifest_digest is b.bundle.lease.manifest_digest
    assert a.identities is b.identities
    assert dict(a.identities) == {cid: a.bundle.descs[cid].identity for cid in a.bundle.records}
    assert list(a.identities) == ["engine-0", "engine-1"]


def test_identities_of_records_other_than_the_plans_are_their_own() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0)], [mcp(0)], static("ssh"))))
    assert isinstance(lease, TaskLease)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    plan = _plans.plan_for(reg, lease.manifest, lease.manifest_digest)
    assert plan is not None
    records = {
        d.credential_id: new_credential_entry(d.manifest, "available", None, 1) for d in plan.descs
    }
    assert _plans.identities_of(plan, records, plan.by_id) is plan.identities
    reordered = dict(reversed(records.items()))
    fewer = dict(list(records.items())[1:])
    for other in (reordered, fewer, {}):
        got = _plans.identities_of(plan, other, plan.by_id)
        assert got is not plan.identities
        assert list(got.items()) == [(cid, plan.by_id[cid].identity) for cid in other]
    # A descriptor of another identity (another revision) is not the plan's.
    first = plan.descs[0]
    other_identity = dataclasses.replace(first.identity, revision="rev-other")
    changed = {
        **plan.by_id,
        first.credential_id: dataclasses.replace(first, identity=other_identity),
    }
    got = _plans.identities_of(plan, records, changed)
    assert got is not plan.identities
    assert got[first.credential_id] == other_identity


def _tracked_reachable(d: Driver) -> int:
    gc.collect()
    return sum(1 for o in reachable(d.reg, into_functions=False) if gc.is_tracked(o))


def test_each_open_run_keeps_at_most_twenty_objects_tracked_by_the_cyclic_collector() -> None:
    # Two engines a run: the run, its bundle, lease, session, reader, view, timers and
    # install record. The run's assignment is shared with its view, an idle reader keeps
    # no container of waiters, and runs that read the same envelope share its material
    # (value, env mapping, secret) and its view entry, which is also the run's record:
    # every full collection walks all of them.
    few = _tracked_reachable(_open_runs(tuple(f"task-{i}" for i in range(2))))
    many = _tracked_reachable(_open_runs(tuple(f"task-{i}" for i in range(12))))
    assert (many - few) / 10 <= 20


def test_an_open_runs_records_are_its_views_entries_and_its_descriptors_the_plans() -> None:
    d = _open_runs(("task-a",))
    st = d.reg._tasks["task-a"]
    assert st.bundle is not None
    b = st.bundle
    assert list(b.records) == ["engine-0", "engine-1"]
    assert [b.records[cid] for cid in b.records] == list(b.view.engines)
    assert all(b.records[e.manifest.credential_id] is e for e in b.view.engines)
    plan = d.reg._plans[b.lease.manifest_digest]
    assert b.descs is plan.by_id


def test_an_open_run_and_its_view_share_one_assignment() -> None:
    d = _open_runs(("task-a",))
    st = d.reg._tasks["task-a"]
    assert st.bundle is not None
    assert st.bundle.view.assignment is st.assignment


def test_runs_that_read_the_same_material_share_its_view_entry() -> None:
    d = _open_runs(("task-a", "task-b"))
    a, b = d.reg._tasks["task-a"].bundle, d.reg._tasks["task-b"].bundle
    assert a is not None
    assert b is not None
    assert a.records["engine-0"].material is b.records["engine-0"].material
    assert a.records["engine-0"] is b.records["engine-0"]
    assert a.view.engines[0] is b.view.engines[0]
    assert a.view.engines[0] is not a.view.engines[1]


def test_a_shared_view_entry_is_given_only_for_its_material_manifest_entry_and_version() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0), engine(1)])))
    assert isinstance(lease, TaskLease)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    plan = _plans.plan_for(reg, lease.manifest, lease.manifest_digest)
    assert plan is not None
    d0, d1 = plan.descs
    loc = d0.location
    assert loc is not None

    def material() -> EngineValue:
        return EngineValue(location=loc, auth_kind="env", env={"K": Secret("v")}, files=None)

    m = material()
    first = _bundles._available(d0, m, 3)
    assert first == new_credential_entry(d0.manifest, "available", m, 3)
    assert _bundles._available(d0, m, 3) is first  # shared: the same material, entry, version
    # Anything else is a record of its own, equal to one made afresh.
    m2 = material()
    other_desc = dataclasses.replace(d0, manifest=dataclasses.replace(d0.manifest))
    for desc, mat, version in ((d0, m, 4), (d1, m, 3), (other_desc, m, 3), (d0, m2, 3)):
        got = _bundles._available(desc, mat, version)
        assert got is not first
        assert got.material is mat
        assert got.manifest is desc.manifest
        assert got == new_credential_entry(desc.manifest, "available", mat, version)
    # Many distinct materials: the table stays bounded.
    held = [_bundles._available(d0, material(), 3) for _ in range(_bundles._AVAILABLE_MAX + 10)]
    assert len(held) == len({id(r) for r in held})
    assert len(_bundles._AVAILABLE) <= _bundles._AVAILABLE_MAX


def test_a_shared_view_entry_is_forgotten_once_nothing_holds_it() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0)])))
    assert isinstance(lease, TaskLease)
    plan = _plans.plan_for(
        LeaseRegistry(runner_kind="owned", op_id_seed="s"), lease.manifest, lease.manifest_digest
    )
    assert plan is not None
    (d0,) = plan.descs
    assert d0.location is not None
    m = EngineValue(location=d0.location, auth_kind="env", env={"K": Secret("v")}, files=None)
    rec = _bundles._available(d0, m, 3)
    assert _bundles._AVAILABLE[id(m)]() is rec
    del rec
    gc.collect()
    assert id(m) not in _bundles._AVAILABLE
