"""Replay every committed fuzz corpus file through its harness.

Each ``fuzz/corpus/<harness>/<file>`` becomes one test case calling
``<harness>.TestOneInput(bytes)``; the case fails when the harness raises
(a broken invariant or an unexpected exception). So every input that ever
found a bug, once copied into the corpus, is replayed by the normal test run
(``docs/fuzzing.md`` § Turning a finding into a regression test).

Inputs that reproduce a bug not fixed yet are listed in ``fuzz/known_bugs.json``
(:data:`KNOWN_BUGS`) and run as ``xfail(strict=True)``: the run stays green while the bug is
there and turns red (XPASS) once it is fixed, so the entry is then removed.

Also here: checks that the seeds exercise what they claim (valid frames and
envelopes are accepted, so the structured modes start from valid values),
and the CI smoke (:func:`test_fuzz_smoke_every_harness_under_atheris`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness

#: ``"<harness>/<corpus file>"`` → the bug it reproduces (``fuzz/known_bugs.json``).
KNOWN_BUGS: dict[str, str] = _harness.known_bugs()

_CASES = [
    pytest.param(
        name,
        path,
        id=f"{name}/{path.name}",
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[f"{name}/{path.name}"])]
        if f"{name}/{path.name}" in KNOWN_BUGS
        else [],
    )
    for name, path in _harness.iter_corpus()
]


@pytest.mark.parametrize(("harness", "path"), _CASES)
def test_fuzz_corpus_regression(harness: str, path: Path) -> None:
    """Issue #9: every corpus input replays without a finding."""
    module = _harness.load_harness(harness)
    module.TestOneInput(path.read_bytes())


def test_fuzz_every_harness_has_a_corpus() -> None:
    """Issue #9: each harness ships a seed corpus (and the known-bug list
    names only files that exist)."""
    names = _harness.harness_names()
    assert "codec_harness" in names
    assert "store_harness" in names
    for name in names:
        assert any(p.name.startswith("seed-") for p in _harness.corpus_files(name)), name
    for entry in KNOWN_BUGS:
        harness, file_name = entry.split("/", 1)
        assert (_harness.CORPUS_DIR / harness / file_name).is_file(), entry


def test_fuzz_codec_seeds_reach_acceptance() -> None:
    """The codec seeds of valid frames and envelopes decode (a seed corpus of
    refusals would never exercise the round-trip invariants)."""
    codec = _harness.load_harness("codec_harness")
    from leasegate.core import DecodeError, Secret, loads
    from leasegate.core.wire import decode_frame
    from leasegate.core.wire.credentials import decode_leased_value

    for path in _harness.corpus_files("codec_harness"):
        data = path.read_bytes()
        if path.name.startswith("seed-raw-") and "tricky" not in path.name:
            assert not isinstance(decode_frame(loads(data[1:])), DecodeError), path.name
        if path.name.startswith("seed-env-") and "wrong" not in path.name:
            loc = codec.LOCATIONS[data[1] % len(codec.LOCATIONS)]
            assert not isinstance(decode_leased_value(data[2:].decode(), loc), DecodeError), (
                path.name
            )
    projenv = [
        p for p in _harness.corpus_files("codec_harness") if p.name.startswith("seed-projenv")
    ]
    assert projenv
    for path in projenv:
        data = path.read_bytes()
        staged = bool(data[1] & 1)
        env = loads(data[2:])
        p = codec.PROJECT_ENV
        from leasegate.core.wire.env import parse_legacy_envelope, parse_staged_envelope

        out = (
            parse_staged_envelope(data[2:].decode(), **p)
            if staged
            else parse_legacy_envelope(
                data[2:].decode(), org_id=p["org_id"], project_id=p["project_id"], key=p["key"]
            )
        )
        assert isinstance(out, Secret), path.name
        assert out.reveal() == env["value"]


def test_fuzz_codec_harness_catches_a_broken_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The codec harness is not vacuous: with ``encode_frame`` broken (a
    field dropped), a valid seed becomes a finding."""
    codec = _harness.load_harness("codec_harness")
    real = codec.encode_frame

    def broken(frame: object) -> dict[str, object]:
        out = dict(real(frame))
        out.pop("opId", None)
        out.pop("taskId", None)
        return out

    monkeypatch.setattr(codec, "encode_frame", broken)
    seed = _harness.CORPUS_DIR / "codec_harness" / "seed-raw-05-lease-request"
    with pytest.raises(AssertionError):
        codec.TestOneInput(seed.read_bytes())


def test_fuzz_store_harness_catches_a_lost_append(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store harness is not vacuous: a store whose ``read_all`` drops the
    last event is a finding."""
    store = _harness.load_harness("store_harness")
    real = store.OrchestrationEventStore.read_all

    def lossy(self: object) -> list[dict[str, object]]:
        return real(self)[:-1]  # type: ignore[arg-type]

    monkeypatch.setattr(store.OrchestrationEventStore, "read_all", lossy)
    with pytest.raises(AssertionError):
        store.TestOneInput(store.SEEDS["seed-appends-no-fault"])


def _atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(
    not _atheris_available(), reason="atheris is not installed (pip install 'leasegate[fuzz]')"
)
def test_fuzz_smoke_every_harness_under_atheris(tmp_path: Path) -> None:
    """The CI smoke (issue #9): every harness runs under atheris for a few
    seconds (``LEASEGATE_FUZZ_SMOKE_SECONDS``, default 3) from its corpus;
    a crash, or a harness that does not start, fails the test. libFuzzer's
    seed is fixed so that the smoke explores the same inputs on every run."""
    seconds = int(os.environ.get("LEASEGATE_FUZZ_SMOKE_SECONDS", "3"))
    names = _harness.harness_names()
    proc = subprocess.run(
        [
            sys.executable,
            str(_harness.FUZZ_DIR / "run_all.py"),
            "--seconds",
            str(seconds),
            "--findings",
            str(tmp_path / "findings"),
            # A fixed libFuzzer seed: CI explores the same inputs in the same
            # order every run (a smoke, not a campaign; campaigns are seeded
            # at random, docs/fuzzing.md).
            "--",
            "-seed=1",
        ],
        capture_output=True,
        text=True,
        timeout=len(names) * (seconds + 30),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in names:
        assert f"{name}: ok" in proc.stdout, proc.stdout


def test_fuzz_run_all_reads_libfuzzer_stats() -> None:
    """``run_all.py`` reports executions and exec/s from libFuzzer's log."""
    run_all = _harness.load_harness("run_all")
    log = (
        "#64\tpulse  cov: 319 ft: 1179 corp: 45/556b exec/s: 32 rss: 51Mb\n"
        "#1200\tDONE   cov: 439 ft: 1736 corp: 99/1819b exec/s: 19 rss: 51Mb\n"
        "Done 1200 runs in 4 second(s)\n"
    )
    assert run_all.parse_stats(log) == (1200, 300)
    assert run_all.parse_stats("#77\tNEW cov: 1 ft: 1 corp: 1/1b exec/s: 9 rss: 1Mb\n") == (77, 9)
    assert run_all.parse_stats("atheris is not installed") == (None, None)
