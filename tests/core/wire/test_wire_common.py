"""The shared id rules (``wire/_common.py``), as the reference's constants define them."""

from __future__ import annotations

from typing import Any

import pytest

from leasegate.core.wire._common import (
    MAX_ERROR_CHARS,
    MAX_SSM_GET_PARAMETERS,
    PATH_SEGMENT_RE,
    PROJECT_ENV_KEY_RE,
    PROJECT_ENV_STAGING_ID_RE,
    PROJECT_PATH_SEGMENT_RE,
    is_op_id,
    is_task_id,
    is_valid_assignment,
)


def test_LR_163_limits() -> None:
    assert MAX_ERROR_CHARS == 512
    assert MAX_SSM_GET_PARAMETERS == 10


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("lease-1-0f_A", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a\n", False),
        ("a.b", False),
        ("é", False),
        (1, False),
        (None, False),
    ],
)
def test_LR_163_op_id(value: Any, ok: bool) -> None:
    assert is_op_id(value) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("t", True),
        ("t" * 128, True),
        ("😀" * 64, True),
        ("😀" * 64 + "t", False),
        ("t" * 129, False),
        ("", False),
        ("a\x00", False),
        ("a\x1f", False),
        ("a\x7f", False),
        ("a\x80", True),
        ("a b/c", True),
        (5, False),
    ],
)
def test_LR_163_task_id(value: Any, ok: bool) -> None:
    assert is_task_id(value) is ok


@pytest.mark.parametrize(
    ("task", "epoch", "ok"),
    [
        ("t", 1, True),
        ("t", 2**53 - 1, True),
        ("t", 0, False),
        ("t", -1, False),
        ("t", 2**53, False),
        ("t", True, False),
        ("t", 1.0, False),
        ("t", "1", False),
        ("", 1, False),
    ],
)
def test_LR_163_valid_assignment(task: Any, epoch: Any, ok: bool) -> None:
    assert is_valid_assignment(task, epoch) is ok


def test_LR_163_reference_patterns_match_the_whole_string() -> None:
    assert PROJECT_PATH_SEGMENT_RE.fullmatch("proj.1-a_b")
    assert not PROJECT_PATH_SEGMENT_RE.fullmatch("proj\n")
    assert not PROJECT_PATH_SEGMENT_RE.fullmatch("")
    assert PROJECT_ENV_KEY_RE.fullmatch("_A1")
    assert not PROJECT_ENV_KEY_RE.fullmatch("1A")
    assert not PROJECT_ENV_KEY_RE.fullmatch("A\n")
    assert PROJECT_ENV_STAGING_ID_RE.fullmatch("0123abcd-0000-4000-8000-00000000beef")
    assert not PROJECT_ENV_STAGING_ID_RE.fullmatch("0123ABCD-0000-4000-8000-00000000BEEF")
    assert PATH_SEGMENT_RE.fullmatch("..x")
    assert not PATH_SEGMENT_RE.fullmatch("..")
    assert not PATH_SEGMENT_RE.fullmatch(".")
    assert not PATH_SEGMENT_RE.fullmatch("x" * 129)
