"""The monitor on whole runs against the reference cloud (real registry and replica, moto).

Re-runs the whole-run tests of ``tests/shells/test_reference_cloud_runner.py``
(grant, activation_pending resend, env snapshot, rotation, env changes,
narrowing with a floor, denial, renewal) with the runtime's ports wrapped by
``wrap_ports`` and every ``handle`` observed: no violation may appear.
Integration: needs the local moto server the plugin starts on 127.0.0.1.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shells"))

import test_reference_cloud_runner as cloud_runner
from test_reference_cloud_runner import runner  # noqa: F401 - the fixture

from leasegate.core.monitor import InvariantMonitor, PortLog, wrap_ports

pytestmark = pytest.mark.integration

MONITORS: list[InvariantMonitor] = []


@pytest.fixture(autouse=True)
def _monitored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    orig = cloud_runner.CredentialRuntime

    def factory(**args: Any) -> Any:
        log = PortLog()
        e, m, p, f = wrap_ports(
            engines=args.pop("engines"),
            mcp=args.pop("mcp"),
            person=args.pop("person"),
            files=args.pop("files", None),
            log=log,
        )
        rt = orig(engines=e, mcp=m, person=p, files=f, **args)
        mon = InvariantMonitor()
        MONITORS.append(mon)
        real = rt.handle

        def handle(event: Any) -> Any:
            got = real(event)
            mon.observe(event, got, log.take())
            return got

        rt.handle = handle  # type: ignore[method-assign]
        return rt

    MONITORS.clear()
    monkeypatch.setattr(cloud_runner, "CredentialRuntime", factory)
    yield
    MONITORS.clear()


RUNS = [
    "test_RT_009_ER_018_a_real_runner_becomes_ready_on_the_clouds_grant_and_env",
    "test_LR_091_RT_078_rotation_and_env_changes_reach_the_running_task",
    "test_LR_081_LR_112_narrow_and_deny_from_the_cloud_close_the_task",
    "test_LR_115_LR_118_renewal_grants_stream_a_fresh_snapshot",
]


@pytest.mark.parametrize("name", RUNS)
def test_reference_cloud_whole_runs_are_clean(runner: Any, name: str) -> None:  # noqa: F811
    getattr(cloud_runner, name)(runner)
    assert len(MONITORS) == 1
    mon = MONITORS[0]
    assert mon.steps > 5
    assert mon.internal_errors == 0
    assert mon.violations == []
    if "narrow" in name:
        # the narrowing's lease.stale set a floor the opens were checked against
        assert mon._floors
