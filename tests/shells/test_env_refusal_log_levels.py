"""The log level of an env frame the replica refuses: DEBUG when the cloud resends it.

``activation_pending`` and ``task_assignment_mismatch`` (ER-018) are answered
by the cloud re-sending the same frame as a matter of course (the reference
cloud does, docs/reference-cloud.md): :class:`WireLog.ack` gives them a DEBUG
text, once per task, run and code, and keeps the run's one WARNING for a code
that needs a look (``runner_boot_mismatch`` naming both boot ids, or any
other). ``tests/shells/test_shell_waits.py`` checks the boot-mismatch WARNING
through the shells; ``tests/shells/test_metrics_demo.py`` checks a whole demo
run logs its ``activation_pending`` refusals at DEBUG and never at WARNING.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from leasegate.shells.diagnostics import RESENT_ACK_CODES, WireLog

TASK = "task-acks"


def _ack(code: str, run: int = 1, boot: str = "boot-cloud") -> SimpleNamespace:
    return SimpleNamespace(ok=False, task_id=TASK, run_epoch=run, code=code, runner_boot_id=boot)


def test_resent_ack_codes_are_the_reference_clouds_resend_codes() -> None:
    from leasegate.testing import _cloud

    assert frozenset(_cloud._RETRY_CODES) == RESENT_ACK_CODES


@pytest.mark.parametrize("code", sorted(RESENT_ACK_CODES))
def test_a_resent_refusal_logs_at_debug_once_and_leaves_the_warning_to_a_later_code(
    code: str,
) -> None:
    wire = WireLog(lambda: 0)
    first = wire.ack(_ack(code), "boot-runner")
    assert first is not None
    level, text = first
    assert level == logging.DEBUG
    assert text == (
        f"the env replica refused an env frame for task {TASK!r} run 1: {code} "
        "(the cloud resends it)"
    )
    # The cloud's resends of the same frame log nothing more.
    assert [wire.ack(_ack(code), "boot-runner") for _ in range(5)] == [None] * 5
    # A code that needs a look still gets the run's WARNING, naming both boot ids.
    warned = wire.ack(_ack("runner_boot_mismatch"), "boot-runner")
    assert warned is not None
    assert warned[0] == logging.WARNING
    assert "boot-cloud" in warned[1]
    assert "boot-runner" in warned[1]
    # One WARNING per task and run; a new run gets its own DEBUG and WARNING.
    assert wire.ack(_ack("stream_retired"), "boot-runner") is None
    assert wire.ack(_ack(code, run=2), "boot-runner") == (
        logging.DEBUG,
        f"the env replica refused an env frame for task {TASK!r} run 2: {code} "
        "(the cloud resends it)",
    )
    assert wire.ack(_ack("stream_retired", run=2), "boot-runner") == (
        logging.WARNING,
        f"the env replica refused an env frame for task {TASK!r} run 2: stream_retired",
    )


def test_an_ok_ack_or_one_without_ids_logs_nothing() -> None:
    wire = WireLog(lambda: 0)
    assert wire.ack(SimpleNamespace(ok=True), "b") is None
    assert wire.ack(SimpleNamespace(ok=False, task_id=None, run_epoch=1, code="x"), "b") is None
    assert wire.ack(SimpleNamespace(ok=False, task_id=TASK, run_epoch="1", code="x"), "b") is None
