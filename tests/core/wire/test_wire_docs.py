"""docs/protocol.md documents exactly the fields the codec declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leasegate.core._model import field_specs
from leasegate.core.wire import lease as wl
from leasegate.core.wire._common import (
    OP_ID_PATTERN,
    PROJECT_ENV_KEY_PATTERN,
    PROJECT_ENV_STAGING_ID_PATTERN,
    PROJECT_PATH_SEGMENT_PATTERN,
)
from leasegate.core.wire.credentials import _Envelope

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"
MODELS = [
    *wl.FRAMES,
    wl.TaskLease,
    wl.Manifest,
    wl.ManifestEngine,
    wl.ManifestMcp,
    wl.ManifestStatic,
    wl.ManifestProject,
    wl.LeaseSession,
    wl.LeaseFiles,
]


def _sections() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            current = line
            out[current] = []
        else:
            out.setdefault(current, []).append(line)
    return out


def _documented_fields(lines: list[str]) -> set[str]:
    fields: set[str] = set()
    for line in lines:
        m = re.match(r"\| `([A-Za-z]+)` \|", line)
        if m:
            fields.add(m.group(1))
        elif fields and not line.startswith("|"):
            break  # the first table only
    return fields


def _wire_keys(cls: type) -> set[str]:
    keys = {wire for wire, _tp, _sp in field_specs(cls).values()}
    tag = getattr(cls, "TAG", None)
    if tag is not None:
        keys.add(tag[0])
    return keys


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_LR_018_every_model_is_documented_field_by_field(cls: type) -> None:
    sections = _sections()
    heading = next(
        (
            h
            for h in sections
            if h.startswith("### ") and (f"`{cls.__name__}`" in h or h.endswith(f" {cls.__name__}"))
        ),
        None,
    )
    assert heading is not None, f"no section for {cls.__name__}"
    assert _documented_fields(sections[heading]) == _wire_keys(cls)


def test_LR_032_envelope_common_keys_are_documented() -> None:
    sections = _sections()
    lines = sections["## Credential envelopes"]
    assert _documented_fields(lines) == _wire_keys(_Envelope) | {"class"}


@pytest.mark.parametrize(
    "pattern",
    [
        OP_ID_PATTERN,
        PROJECT_ENV_KEY_PATTERN,
        PROJECT_ENV_STAGING_ID_PATTERN,
        PROJECT_PATH_SEGMENT_PATTERN,
    ],
)
def test_LR_163_reference_patterns_are_documented(pattern: str) -> None:
    assert f"`^{pattern}$`" in DOC.read_text(encoding="utf-8")
