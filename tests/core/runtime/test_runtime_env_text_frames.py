"""Frames given to ``HandleFrame`` as JSON text decide exactly what the same frames as values do.

The fuzz corpus of the runtime harness is replayed twice: once as it is, once
with every frame of ``HandleFrame`` given as its compact wire text (keys in
the model's field order when it decodes, as leasegate's transports write it).
Both replays must return the same commands at every step, and the text one
must have taken the apply fast path (``decode_apply_text``) at least once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from leasegate.core import encode
from leasegate.core.runtime import CredentialRuntime, HandleFrame
from leasegate.core.wire import decode_apply_text, decode_frame

_FUZZ = Path(__file__).resolve().parents[3] / "fuzz"
sys.path.insert(0, str(_FUZZ))

import _harness  # noqa: E402

_CORPUS = [path for _, path in _harness.iter_corpus(["runtime_harness"])]


def _as_text(frame: object) -> object:
    if not isinstance(frame, dict):
        return frame
    decoded = decode_frame(frame)
    value: Any = frame
    if not isinstance(decoded, BaseException) and decoded is not None:
        try:
            value = encode(decoded)
        except Exception:  # noqa: BLE001 - a frame that does not encode stays as it came
            value = frame
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return frame


def _replay(monkeypatch: pytest.MonkeyPatch, path: Path, text: bool) -> tuple[list[str], int]:
    module = _harness.load_harness("runtime_harness")
    outs: list[str] = []
    fast = [0]
    real = CredentialRuntime.handle

    def handle(self: CredentialRuntime, event: Any) -> Any:
        if text and isinstance(event, HandleFrame):
            frame = _as_text(event.frame)
            if isinstance(frame, str) and decode_apply_text(frame) is not None:
                fast[0] += 1
            event = HandleFrame(now_ms=event.now_ms, call_id=event.call_id, frame=frame)
        got = real(self, event)
        outs.append(repr(got))
        return got

    with monkeypatch.context() as m:
        m.setattr(CredentialRuntime, "handle", handle)
        module.TestOneInput(path.read_bytes())
    return outs, fast[0]


def test_env_frames_as_text_emit_the_same_commands_over_the_fuzz_corpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _CORPUS, "the runtime harness has a corpus"
    fast = 0
    for path in _CORPUS:
        values, _ = _replay(monkeypatch, path, text=False)
        texts, hits = _replay(monkeypatch, path, text=True)
        fast += hits
        assert texts == values, path.name
    assert fast > 0, "no frame of the corpus took the text fast path"
