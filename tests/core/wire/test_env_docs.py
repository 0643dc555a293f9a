"""docs/protocol-env.md documents exactly the fields wire/env.py declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leasegate.core._model import field_specs
from leasegate.core.wire import env

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol-env.md"
MODELS = [
    *env.FRAMES,
    env.BindingState,
    env.Head,
    env.BindingWithhold,
    env.ValueRefStaged,
    env.ValueRefLegacy,
    env.ValueRefRow,
    env.DeliveryCursor,
    env.ProjectVersion,
    env.RecordResult,
    env.StagedEnvelope,
    env.LegacyEnvelope,
]


def _section(name: str) -> list[str]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"### `{name}`")
    out = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        out.append(line)
    return out


def _documented(lines: list[str]) -> set[str]:
    fields: set[str] = set()
    for line in lines:
        m = re.match(r"\| `([A-Za-z]+)` \|", line)
        if m:
            fields.add(m.group(1))
        elif fields and not line.startswith("|"):
            break
    return fields


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_env_every_model_documented_field_by_field(cls: type) -> None:
    keys = {wire for wire, _tp, _sp in field_specs(cls).values()}
    if cls.TAG is not None:
        keys.add(cls.TAG[0])
    assert _documented(_section(cls.__name__)) == keys


def test_env_ack_codes_and_limit_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for code in env.ACK_CODES:
        assert f"`{code}`" in text, code
    assert f"{env.MAX_PROJECT_ENV_ACK_PAGE_BYTES:,}" in text
