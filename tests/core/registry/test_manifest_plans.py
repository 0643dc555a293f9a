"""Manifest plans: one per manifest, shared by its grants, and the same commands as without them.

The registry works out what a manifest alone decides (its digest check, its
descriptors, its reads, its project sessions) once and keeps it in a bounded
cache keyed by the digest (``_plans.py``). These tests check that a cached
plan changes no command (the registry's fuzz corpus and a scenario mixing
repeated, distinct, mis-digested and caller-built manifests, with and without
the cache), that only a plain manifest (what the wire decoder builds) is
served from the cache, and that the cache stays bounded.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from registry_kit import (
    HOUR,
    Driver,
    engine,
    grant,
    lease_json,
    manifest,
    mcp,
    reachable,
    static,
)

from leasegate.core import Secret, decode
from leasegate.core.registry import LeaseRegistry, OpenGate, _plans
from leasegate.core.wire import decode_frame
from leasegate.core.wire.credentials import EngineValue
from leasegate.core.wire.lease import LeaseGrant, Manifest, TaskLease, manifest_digest

FUZZ = Path(__file__).resolve().parents[3] / "fuzz"


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``LeaseRegistry.handle`` call's event and commands, as reprs."""
    log: list[str] = []
    original = LeaseRegistry.handle

    def handle(self: LeaseRegistry, event: Any) -> Any:
        out = original(self, event)
        log.append(f"{event!r} -> {out!r}")
        return out

    monkeypatch.setattr(LeaseRegistry, "handle", handle)
    return log


def _with_and_without_cache(
    monkeypatch: pytest.MonkeyPatch, log: list[str], run: Callable[[], None]
) -> tuple[list[str], list[str]]:
    run()
    cached = list(log)
    log.clear()
    monkeypatch.setattr(_plans, "PLAN_CACHE_MAX", 0)
    run()
    uncached = list(log)
    return cached, uncached


def test_commands_are_the_same_with_and_without_plans_over_the_fuzz_corpus(
    monkeypatch: pytest.MonkeyPatch, recorded: list[str]
) -> None:
    sys.path.insert(0, str(FUZZ))
    try:
        import _harness
    finally:
        sys.path.remove(str(FUZZ))
    harness = _harness.load_harness("registry_harness")
    files = _harness.corpus_files("registry_harness")
    assert files

    def run() -> None:
        for path in files:
            harness.TestOneInput(path.read_bytes())

    cached, uncached = _with_and_without_cache(monkeypatch, recorded, run)
    assert len(cached) > 100
    assert cached == uncached


def _scenario() -> None:
    """Runs granted repeated, distinct, mis-digested and caller-built (bool) manifests."""
    d = Driver()
    m14 = manifest(
        [engine(i) for i in range(10)],
        [mcp(0), mcp(1, auth="none")],
        static("github"),
        static("ssh"),
        projects=2,
    )
    for i in range(4):
        task = f"task-{i}"
        d.start(task)
        d.frame(grant(d.op_id(), m=m14, task=task))
    # A distinct manifest, then the first again (a renewal-like second grant).
    d.start("task-x")
    d.frame(grant(d.op_id(), m=manifest([engine(0, version=5)]), task="task-x"))
    d.start("task-y")
    d.frame(grant(d.op_id(), m=m14, task="task-y", revision=5))
    # A digest that does not match an otherwise cached manifest.
    d.start("task-bad")
    good = grant(d.op_id(), m=m14, task="task-bad")
    good["lease"]["manifestDigest"] = "1" * 64
    d.frame(good)
    # A caller-built frame whose manifest equals the cached one but holds a
    # bool where the wire has an integer: its canonical JSON differs.
    d.start("task-bool")
    frame = decode_frame(grant(d.op_id(), m=manifest([engine(0, version=1)]), task="task-bool"))
    assert isinstance(frame, LeaseGrant)
    m = frame.lease.manifest
    bool_manifest = dataclasses.replace(
        m, engines=(dataclasses.replace(m.engines[0], version=True),)
    )
    assert bool_manifest == m
    d.frame(
        dataclasses.replace(frame, lease=dataclasses.replace(frame.lease, manifest=bool_manifest))
    )
    d.advance(3 * HOUR)


def test_commands_are_the_same_with_and_without_plans_for_mixed_manifests(
    monkeypatch: pytest.MonkeyPatch, recorded: list[str]
) -> None:
    cached, uncached = _with_and_without_cache(monkeypatch, recorded, _scenario)
    assert cached == uncached
    text = "\n".join(cached)
    # Six runs open (four of the same manifest, a distinct one, a later
    # revision); the wrong digest and the bool manifest are refused.
    assert text.count("OpenGate(") == 6
    assert text.count("message='grant manifest digest does not match'") == 2


def test_grants_of_an_equal_manifest_share_its_plan_manifest_and_descriptors() -> None:
    d = Driver()
    views = []
    for task in ("task-a", "task-b"):
        d.start(task)
        out = d.frame(grant(d.op_id(), m=manifest([engine(0), engine(1)]), task=task))
        views += [c.view for c in out if isinstance(c, OpenGate)]
    a, b = views
    assert a.engines[0].manifest is b.engines[0].manifest
    ra = d.reg._tasks["task-a"].bundle
    rb = d.reg._tasks["task-b"].bundle
    assert ra is not None
    assert rb is not None
    assert ra.lease.manifest is rb.lease.manifest
    plan = d.reg._plans[ra.lease.manifest_digest]
    assert ra.descs is rb.descs
    assert ra.descs["engine-0"] is plan.descs[0]
    # The plan holds no material: what the runs read is theirs (the two runs read
    # the same envelope text, so they share its value, wire/credentials.py).
    assert not [o for o in reachable(plan) if isinstance(o, EngineValue | Secret)]
    assert ra.records["engine-0"].material == rb.records["engine-0"].material
    assert len(d.reg._plans) == 1


def test_lease_of_keeps_every_field_and_takes_the_plans_manifest() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0)], [mcp(0)], static("ssh"))))
    again = decode(TaskLease, lease_json(manifest([engine(0)], [mcp(0)], static("ssh"))))
    assert isinstance(lease, TaskLease)
    assert isinstance(again, TaskLease)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    plan = _plans.plan_for(reg, lease.manifest, lease.manifest_digest)
    assert plan is not None
    shared = _plans.lease_of(again, plan)
    assert shared == again
    assert shared.manifest is plan.manifest is lease.manifest
    assert _plans.lease_of(lease, plan) is lease


def test_only_a_plain_manifest_is_served_from_the_cache() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0)])))
    assert isinstance(lease, TaskLease)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    plan = _plans.plan_for(reg, lease.manifest, lease.manifest_digest)
    assert plan is not None
    assert reg._plans == {lease.manifest_digest: plan}
    assert _plans._is_plain(lease.manifest)
    m = lease.manifest
    as_bool = dataclasses.replace(m, engines=(dataclasses.replace(m.engines[0], version=True),))
    as_float = dataclasses.replace(m, engines=(dataclasses.replace(m.engines[0], version=3.0),))
    as_list = dataclasses.replace(m, engines=list(m.engines))  # type: ignore[arg-type]
    for other in (as_bool, as_float, as_list):
        assert not _plans._is_plain(other)
    # A float equal to the integer has the same canonical JSON (and digest),
    # but its plan is not kept.
    assert _plans.plan_for(reg, as_float, lease.manifest_digest) is not plan
    assert _plans.plan_for(reg, as_float, lease.manifest_digest) is not None
    assert manifest_digest(as_float) == lease.manifest_digest
    one = dataclasses.replace(m, engines=(dataclasses.replace(m.engines[0], version=1),))
    one_bool = dataclasses.replace(m, engines=(dataclasses.replace(m.engines[0], version=True),))
    digest_one = manifest_digest(one)
    assert _plans.plan_for(reg, one, digest_one) is not None
    assert one_bool == one
    assert _plans.plan_for(reg, one_bool, digest_one) is None
    assert len(reg._plans) == 2


def test_the_plan_cache_keeps_at_most_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plans, "PLAN_CACHE_MAX", 3)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    digests = []
    for v in range(1, 6):
        lease = decode(TaskLease, lease_json(manifest([engine(0, version=v)])))
        assert isinstance(lease, TaskLease)
        assert _plans.plan_for(reg, lease.manifest, lease.manifest_digest) is not None
        digests.append(lease.manifest_digest)
    assert list(reg._plans) == digests[-3:]


def test_a_manifest_not_matching_its_digest_has_no_plan() -> None:
    lease = decode(TaskLease, lease_json(manifest([engine(0)]), digest="a" * 64))
    assert isinstance(lease, TaskLease)
    reg = LeaseRegistry(runner_kind="owned", op_id_seed="s")
    assert _plans.plan_for(reg, lease.manifest, lease.manifest_digest) is None
    assert reg._plans == {}
    assert isinstance(decode(Manifest, manifest()), Manifest)


def _plain_by_rules(m: object) -> bool:
    """Plainness checked field by field: exact classes, tuples, exact ``str``/``int``/``None``."""

    def entries_plain(entries: object, cls: type[object]) -> bool:
        return type(entries) is tuple and all(
            type(e) is cls
            and all(
                type(getattr(e, f.name)) in (str, int, type(None))
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            )
            for e in entries
        )

    if type(m) is not Manifest:
        return False
    statics = tuple(s for s in (m.github, m.ssh) if s is not None)
    return (
        entries_plain(m.engines, type(_M0.engines[0]))
        and entries_plain(m.mcp, type(_M0.mcp[0]))
        and entries_plain(m.projects, type(_M0.projects[0]))
        and entries_plain(statics, type(_M0.github))
    )


def _decoded_manifest(m: dict[str, Any]) -> Manifest:
    lease = decode(TaskLease, lease_json(m))
    assert isinstance(lease, TaskLease)
    return lease.manifest


_M0 = _decoded_manifest(manifest([engine(0), engine(1)], [mcp(0)], static("ssh")))


class _Str(str):
    __slots__ = ()


def _manifest_variants() -> list[Manifest]:
    """The manifest, equal copies, and copies with one field, entry or container changed."""
    m = _M0
    out = [m, _decoded_manifest(manifest([engine(0), engine(1)], [mcp(0)], static("ssh")))]
    out.append(_decoded_manifest(manifest([engine(0)], [mcp(0)], static("ssh"))))
    out.append(_decoded_manifest(manifest([engine(1), engine(0)], [mcp(0)], static("ssh"))))
    out.append(_decoded_manifest(manifest([engine(0), engine(1)], [mcp(0)], static("github"))))
    out.append(_decoded_manifest(manifest([engine(0), engine(1)], [], static("ssh"))))
    out.append(dataclasses.replace(m, github=None, ssh=m.github))
    out.append(dataclasses.replace(m, engines=list(m.engines)))  # type: ignore[arg-type]
    out.append(dataclasses.replace(m, projects=()))
    for slot in ("engines", "mcp", "projects"):
        entries = getattr(m, slot)
        first = entries[0]
        for f in dataclasses.fields(first):
            value = getattr(first, f.name)
            others: list[object] = [None, "x", 1, True, 1.0]
            if type(value) is str:
                others.append(_Str(value))
            if type(value) is int:
                others.extend([value, float(value), value == 1])
            for other in others:
                changed = dataclasses.replace(first, **{f.name: other})
                out.append(dataclasses.replace(m, **{slot: (changed, *entries[1:])}))
    static_entry = m.github
    assert static_entry is not None
    for f in dataclasses.fields(static_entry):
        value = getattr(static_entry, f.name)
        for other in (None, "x", 2, True, 2.0, _Str(value) if type(value) is str else value):
            changed = dataclasses.replace(static_entry, **{f.name: other})
            out.append(dataclasses.replace(m, github=changed))
    return out


def test_plain_keys_are_equal_exactly_when_plain_manifests_are_equal() -> None:
    variants = _manifest_variants()
    assert len(variants) > 60
    keys = [_plans._plain_key(v) for v in variants]
    for v, key in zip(variants, keys, strict=True):
        assert (key is not None) == _plain_by_rules(v) == _plans._is_plain(v)
    for a, ka in zip(variants, keys, strict=True):
        for b, kb in zip(variants, keys, strict=True):
            by_keys = ka is not None and kb is not None and ka == kb
            assert by_keys == (a == b and _plain_by_rules(a) and _plain_by_rules(b))
