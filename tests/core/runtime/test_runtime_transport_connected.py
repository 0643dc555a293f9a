"""LR-010 through the runtime: ``TransportConnected`` decides when a connection re-authenticates.

The shells feed ``TransportConnected(connection=n)`` for every connection
their transport reports. The runtime passes it to the registry as
``BridgeAuthenticated`` for ``n > 1`` (a same-process reconnect) and for
``n == 1`` once a ``SendFailed`` was handled; otherwise it emits nothing.

The comparison tests replay the scenarios of
``tests/shells/test_shell_transport_adapters.py`` twice: once with the rule
applied outside the core (``BridgeAuthenticated`` fed by the host, the way the
shells decided before the runtime did) and once with ``TransportConnected``
for every marker, and require the same commands and the same registry events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from runtime_kit import RtDriver, of

from leasegate.core._base import Command
from leasegate.core.registry import BridgeAuthenticated, SendFailed, SendFrame
from leasegate.core.runtime import RuntimeShutdown, TransportConnected

#: A scenario: ``(driver, marker)``, where ``marker(n)`` reports connection ``n``.
Scenario = Callable[[RtDriver, Callable[[int], None]], None]


def _lease_requests(cmds: list[Command]) -> list[SendFrame]:
    return [c for c in of(cmds, SendFrame) if type(c.frame).__name__ == "LeaseRequest"]


def _first_connect_then_grant(d: RtDriver, marker: Callable[[int], None]) -> None:
    marker(1)
    d.begin()
    d.usable()


def _reconnect_asks_again(d: RtDriver, marker: Callable[[int], None]) -> None:
    marker(1)
    d.begin()
    marker(2)
    d.usable()


def _first_connect_after_failed_send(d: RtDriver, marker: Callable[[int], None]) -> None:
    d.begin()
    (sent,) = _lease_requests(d.out)
    d.feed(SendFailed(now_ms=d.now, cmd_id=sent.cmd_id))
    marker(1)
    d.usable()


def _reconnects_after_shutdown(d: RtDriver, marker: Callable[[int], None]) -> None:
    marker(1)
    d.begin()
    d.feed(RuntimeShutdown(now_ms=d.now, call_id=d.cid()))
    marker(2)
    marker(3)


SCENARIOS: dict[str, Scenario] = {
    "first_connect_then_grant": _first_connect_then_grant,
    "reconnect_asks_again": _reconnect_asks_again,
    "first_connect_after_failed_send": _first_connect_after_failed_send,
    "reconnects_after_shutdown": _reconnects_after_shutdown,
}


def _run_host_rule(scenario: Scenario) -> RtDriver:
    """The scenario with the host deciding (``BridgeAuthenticated`` for ``n > 1`` or after a
    failed send)."""
    d = RtDriver()
    real_feed = d.feed
    failed = [0]

    def feed(event: Any) -> list[Command]:
        if isinstance(event, SendFailed):
            failed[0] += 1
        return real_feed(event)

    d.feed = feed  # type: ignore[method-assign]

    def marker(n: int) -> None:
        if n > 1 or failed[0]:
            d.feed(BridgeAuthenticated(now_ms=d.now))

    scenario(d, marker)
    return d


def _run_runtime_rule(scenario: Scenario) -> RtDriver:
    """The scenario with ``TransportConnected`` fed for every marker."""
    d = RtDriver()
    scenario(d, lambda n: d.feed(TransportConnected(now_ms=d.now, connection=n)) and None)
    return d


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_LR_010_transport_connected_emits_what_the_host_rule_emitted(name: str) -> None:
    before = _run_host_rule(SCENARIOS[name])
    after = _run_runtime_rule(SCENARIOS[name])
    assert after.out == before.out
    assert after.reg_events == before.reg_events
    assert after.rt.reauthentications == before.rt.reauthentications


def test_LR_010_first_connection_without_a_failed_send_is_not_a_reauthentication() -> None:
    d = _run_runtime_rule(_first_connect_then_grant)
    assert d.reg_calls(BridgeAuthenticated) == []
    assert d.rt.reauthentications == 0
    assert len(_lease_requests(d.out)) == 1


def test_LR_010_reconnect_asks_for_the_lease_again_with_a_fresh_op_id() -> None:
    d = _run_runtime_rule(_reconnect_asks_again)
    assert len(d.reg_calls(BridgeAuthenticated)) == 1
    assert d.rt.reauthentications == 1
    first, again = _lease_requests(d.out)
    assert first.frame.op_id != again.frame.op_id


def test_LR_010_first_connection_after_a_failed_send_asks_again_at_once() -> None:
    d = _run_runtime_rule(_first_connect_after_failed_send)
    assert len(d.reg_calls(BridgeAuthenticated)) == 1
    assert len(_lease_requests(d.out)) == 2


def test_LR_010_connections_after_shutdown_reach_no_registry() -> None:
    d = _run_runtime_rule(_reconnects_after_shutdown)
    assert d.reg_calls(BridgeAuthenticated) == []
    assert d.rt.reauthentications == 0


@pytest.mark.parametrize("connection", [0, -2, "2", 2.0, True, None])
def test_LR_010_a_connection_that_is_not_a_positive_int_is_ignored(connection: Any) -> None:
    d = RtDriver()
    d.begin()
    (sent,) = _lease_requests(d.out)
    d.feed(SendFailed(now_ms=d.now, cmd_id=sent.cmd_id))
    got = d.feed(TransportConnected(now_ms=d.now, connection=connection))
    assert got == []
    assert d.reg_calls(BridgeAuthenticated) == []
    assert d.rt.internal_errors == 0
