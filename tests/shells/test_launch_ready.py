"""What a task gets at launch-ready: ``LaunchReady`` and ``runner_runtime``.

The env is built from the committed snapshot (first project wins, shadowed
keys named), values stay ``Secret`` until ``reveal()``, the repr shows no
value, and a start that is no longer current gets no object (RT-018).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from leasegate.core import (
    Assignment,
    ReplicaView,
    Secret,
    TaskView,
    ViewEntry,
    ViewProject,
)
from leasegate.core.wire.env import BindingState, DeliveryCursor, Head, Installed, Withheld
from leasegate.shells import (
    CallFailed,
    ConsumerSet,
    LaunchReady,
    launch_ready,
    new_boot_id,
    runner_runtime,
)
from leasegate.shells.launch import launch_env

A = Assignment(task_id="task-1", run_epoch=3)


def _entry(key: str, value: str | None, *, installed: bool = True) -> ViewEntry:
    state = BindingState(
        key=key,
        head=Head(revision=1, generation=1, tombstone=False, value_ref=None),
        binding=None,
        policy_epoch=None,
        listing_generation=0,
    )
    mat = Installed() if installed else Withheld(reason="policy_epoch_unsupported")
    return ViewEntry(
        state=state, materialization=mat, value=None if value is None else Secret(value)
    )


def _snapshot(*projects: tuple[str, tuple[ViewEntry, ...]]) -> ReplicaView:
    return ReplicaView(
        task_id=A.task_id,
        run_epoch=A.run_epoch,
        runner_boot_id="boot",
        applied_through=DeliveryCursor(stream_id="s1", sequence=4),
        projects=tuple(
            ViewProject(project_id=pid, record_version=1, entries=entries)
            for pid, entries in projects
        ),
    )


def _view(projects: tuple[str, ...] = ("web", "api")) -> TaskView:
    return TaskView(
        assignment=A,
        lease_id="lease-7",
        manifest_revision=5,
        manifest_digest="d" * 64,
        expires_at=1_700_000_000_000,
        project_ids=projects,
        engines=(),
        mcp=(),
        github=None,
        ssh=None,
    )


def test_env_is_the_installed_values_first_project_wins_and_shadowed_keys_are_named() -> None:
    snap = _snapshot(
        ("api", (_entry("DB", "CANARY-api-db"), _entry("ONLY_API", "CANARY-a"))),
        ("web", (_entry("DB", "CANARY-web-db"), _entry("HELD", "x", installed=False))),
    )
    env, shadowed = launch_env(snap, ("web", "api"))  # the view's order, not the snapshot's
    assert {k: v.reveal() for k, v in env.items()} == {
        "DB": "CANARY-web-db",
        "ONLY_API": "CANARY-a",
    }
    assert shadowed == ("DB",)
    assert all(isinstance(v, Secret) for v in env.values())
    assert isinstance(env, types.MappingProxyType)  # read-only


def test_env_without_a_snapshot_is_empty() -> None:
    env, shadowed = launch_env(None, ("web",))
    assert dict(env) == {}
    assert shadowed == ()


def test_entries_without_a_value_are_left_out() -> None:
    env, _ = launch_env(_snapshot(("web", (_entry("GONE", None),))), ("web",))
    assert dict(env) == {}


def test_launch_ready_gives_identity_reveal_on_purpose_and_a_repr_without_values() -> None:
    env, shadowed = launch_env(_snapshot(("web", (_entry("TOKEN", "CANARY-tok"),))), ("web",))
    ready = LaunchReady(
        view=_view(),
        env=env,
        shadowed_env_keys=shadowed,
        files=types.MappingProxyType({"engines": (Path("/t/engine.env"),)}),
        revision_floor=4,
    )
    assert (ready.task_id, ready.run_epoch) == ("task-1", 3)
    assert (ready.lease_id, ready.manifest_revision) == ("lease-7", 5)
    assert (ready.revision_floor, ready.expires_at_ms) == (4, 1_700_000_000_000)
    assert ready.reveal() == {"TOKEN": "CANARY-tok"}
    text = repr(ready)
    assert "CANARY" not in text
    assert "CANARY" not in str(ready)
    assert "TOKEN" in text
    assert "lease-7" in text


def test_runner_runtime_wires_the_consumers_ports(tmp_path: Path) -> None:
    consumers = ConsumerSet(tmp_path / "tasks")
    rt = runner_runtime(boot_id=new_boot_id(), consumers=consumers)
    assert rt.consumer_port("engines") is consumers.engines
    assert rt.consumer_port("mcp") is consumers.mcp
    assert rt.consumer_port("person") is consumers.person
    assert rt.consumer_port("files") is None


def test_runner_runtime_refuses_a_boot_id_that_is_not_an_op_id(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="identity"):
        runner_runtime(boot_id="not a boot id", consumers=ConsumerSet(tmp_path))


def test_a_start_that_is_not_current_gets_no_launch_ready_object(tmp_path: Path) -> None:
    rt = runner_runtime(boot_id=new_boot_id(), consumers=ConsumerSet(tmp_path))
    with pytest.raises(CallFailed):
        launch_ready(rt, _view(), -1)


def test_new_boot_ids_differ() -> None:
    assert new_boot_id() != new_boot_id()
