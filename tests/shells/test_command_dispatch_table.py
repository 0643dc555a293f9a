"""The shells carry out commands through one table: every command a shell can
receive has exactly one handler there, and every handler is for such a command.
"""

from __future__ import annotations

import logging

import pytest

from leasegate.core import registry, runtime
from leasegate.core._base import Command
from leasegate.shells import _dispatch
from leasegate.shells._dispatch import COMMAND_HANDLERS, CONSUMED_BY_THE_RUNTIME


def _exported_commands() -> dict[str, type[Command]]:
    found: dict[str, type[Command]] = {}
    for mod in (runtime, registry):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, type) and issubclass(obj, Command):
                found[f"{mod.__name__}.{name}"] = obj
    return found


def test_every_command_a_shell_receives_has_exactly_one_handler() -> None:
    exported = _exported_commands()
    shell_facing = {k: c for k, c in exported.items() if c.__name__ not in CONSUMED_BY_THE_RUNTIME}
    assert len(shell_facing) >= 20  # the runtime's and the registry's pass-through commands
    missing = sorted(k for k, c in shell_facing.items() if c not in COMMAND_HANDLERS)
    assert missing == []
    # one handler per class: the table is keyed by class, so a class exported under
    # two names still has one entry; no entry is for a class nobody exports
    assert set(COMMAND_HANDLERS) == set(shell_facing.values())


def test_the_commands_the_runtime_consumes_are_exported_by_the_registry() -> None:
    names = set(registry.__all__)
    assert sorted(CONSUMED_BY_THE_RUNTIME - names) == []
    for name in CONSUMED_BY_THE_RUNTIME:
        assert getattr(registry, name) not in COMMAND_HANDLERS


class _Probe(_dispatch.CommandDispatch):
    """A dispatch with only the hooks these commands use."""

    def __init__(self) -> None:
        self.resolved: list[tuple[int, object, object]] = []

    def _resolve(self, call_id: int, value: object, error: object) -> None:  # type: ignore[override]
        self.resolved.append((call_id, value, error))


def test_a_project_value_answer_completes_its_host_call() -> None:
    probe = _Probe()
    probe._execute(registry.ProjectValueDone(call_id=7, result=None))
    assert probe.resolved == [(7, None, None)]


def test_a_command_of_an_unknown_type_is_logged_by_name_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Stray(Command):
        pass

    probe = _Probe()
    with caplog.at_level(logging.WARNING, logger="leasegate.shells.dispatch"):
        probe._execute(Stray())
    assert probe.resolved == []
    assert "unhandled runtime command Stray" in caplog.text


def test_io_commands_reach_the_shells_own_start_io_hook() -> None:
    started: list[object] = []

    class Shell(_Probe):
        def _start_io(self, cmd: object) -> None:  # type: ignore[override]
            started.append(cmd)

    read = registry.ReadParameters(cmd_id=3, reader_id=1, selectors=("/p:1",))
    setup = runtime.RunSetup(cmd_id=4, task_id="t", run_epoch=1, recovery_id=-2)
    Shell()._execute(read)
    Shell()._execute(setup)
    assert started == [read, setup]
