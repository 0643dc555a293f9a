"""Test kit for the invariant monitor: the runtime kit's driver with the monitor attached.

:class:`MonitoredDriver` is :class:`runtime_kit.RtDriver` whose runtime is
built on ports wrapped by :func:`leasegate.core.monitor.wrap_ports`, and
whose ``rt.handle`` feeds every step (event, port calls, commands) to an
:class:`InvariantMonitor`. Every driver built is kept in :data:`BUILT` so a
test can check all monitors after a scenario that builds several drivers.

Also: :func:`step` and builders for hand-made traces.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))

import runtime_kit
from runtime_kit import RtDriver

from leasegate.core._base import Command, Event
from leasegate.core.monitor import InvariantMonitor, PortLog, wrap_ports

BUILT: list[MonitoredDriver] = []


class MonitoredDriver(RtDriver):
    """An ``RtDriver`` whose every runtime step is observed by ``self.monitor``."""

    def __init__(self, **kw: Any) -> None:
        self.port_log = PortLog()
        self.monitor = InvariantMonitor()
        log = self.port_log
        orig = runtime_kit.CredentialRuntime

        def factory(**args: Any) -> Any:
            e, m, p, f = wrap_ports(
                engines=args.pop("engines"),
                mcp=args.pop("mcp"),
                person=args.pop("person"),
                files=args.pop("files", None),
                log=log,
            )
            return orig(engines=e, mcp=m, person=p, files=f, **args)

        runtime_kit.CredentialRuntime = factory  # type: ignore[misc,assignment]
        try:
            super().__init__(**kw)
        finally:
            runtime_kit.CredentialRuntime = orig  # type: ignore[misc]
        real = self.rt.handle
        monitor = self.monitor

        def handle(event: Event) -> list[Command]:
            got = real(event)
            monitor.observe(event, got, log.take())
            return got

        self.rt.handle = handle  # type: ignore[method-assign]
        BUILT.append(self)


def violations_of(drivers: list[MonitoredDriver]) -> list[Any]:
    """Every violation (and a marker per internal error) of the given drivers."""
    out: list[Any] = []
    for d in drivers:
        out.extend(d.monitor.violations)
        if d.monitor.internal_errors:
            out.append(("internal errors", d.monitor.internal_errors))
    return out
