"""``tools/compare_commands.py``: the differential command comparison.

Run against ``HEAD`` on a small subset (one corpus file of each machine
harness and the recorded-trace tests' traces, no demo), the streams must be
identical: the working tree is ``HEAD`` plus whatever is being changed, and a
change that alters an emitted command for these inputs shows here. The
difference report itself is checked on hand-made streams.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "compare_commands.py"

pytestmark = pytest.mark.slow


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_commands", TOOL)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_commands_at_head_and_in_the_working_tree_are_identical_on_a_subset() -> None:
    args = [sys.executable, str(TOOL), "--base", "HEAD", "--limit", "1", "--no-demo"]
    for harness in ("registry_harness", "replica_harness", "runtime_harness"):
        args += ["--harness", harness]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("identical at ")
    inputs = int(done.stdout.split(": ")[1].split(" inputs")[0])
    assert inputs >= 3 + 3  # a corpus file of each harness and the three test traces


def test_an_unknown_revision_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--base", "no-such-revision-anywhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown revision" in done.stderr


def test_the_first_difference_names_the_input_the_step_and_both_sides() -> None:
    tool = _tool()
    same = {"input": "fuzz:x:a", "n": 1, "machine": "M", "event": "E()", "out": "[]"}
    base = [same, {"input": "fuzz:x:a", "n": 2, "machine": "M", "event": "F()", "out": "[A()]"}]
    now = [same, {"input": "fuzz:x:a", "n": 2, "machine": "M", "event": "F()", "out": "[B()]"}]
    assert tool.first_difference(base, base) is None
    report = tool.first_difference(base, now)
    assert report is not None
    assert "fuzz:x:a, step 2" in report
    assert "[A()]" in report
    assert "[B()]" in report
    shorter = tool.first_difference(base, [same])
    assert shorter is not None
    assert "(stream ended)" in shorter


def test_inputs_from_a_given_corpus_directory_replace_the_committed_corpora(
    tmp_path: Path,
) -> None:
    tool = _tool()
    (tmp_path / "registry_harness").mkdir()
    (tmp_path / "registry_harness" / "b").write_bytes(b"\x01\x02")
    (tmp_path / "registry_harness" / "a").write_bytes(b"\x00")
    (tmp_path / "registry_harness" / ".gitkeep").write_bytes(b"")
    items = tool.fuzz_inputs(None, None, tmp_path)
    where = tmp_path.resolve() / "registry_harness"
    assert items == [f"fuzz:registry_harness:{where / 'a'}", f"fuzz:registry_harness:{where / 'b'}"]
    # a harness the directory has no inputs for contributes none
    assert tool.fuzz_inputs(None, ["replica_harness", "registry_harness"], tmp_path) == items
    assert tool.fuzz_inputs(1, None, tmp_path) == items[:1]
    committed = tool.fuzz_inputs(None, ["registry_harness"])
    assert committed
    assert all(str(ROOT / "fuzz" / "corpus" / "registry_harness") in item for item in committed)


def test_the_stream_recorder_reads_its_inputs_from_a_listing_file(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "command_stream", ROOT / "tools" / "_command_stream.py"
    )
    assert spec is not None
    assert spec.loader is not None
    stream = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stream)
    listing = tmp_path / "inputs"
    listing.write_text("fuzz:x:/a\n\ntrace:/b\n", encoding="utf-8")
    assert stream._expand(["trace:/c", f"@{listing}"]) == ["trace:/c", "fuzz:x:/a", "trace:/b"]


def test_a_given_corpus_is_compared_at_head_and_in_the_working_tree(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    for harness in ("registry_harness", "runtime_harness"):
        (corpus / harness).mkdir(parents=True)
        seed = sorted((ROOT / "fuzz" / "corpus" / harness).iterdir())[0].read_bytes()
        (corpus / harness / "seed-flipped").write_bytes(bytes([seed[0] ^ 1]) + seed[1:])
        (corpus / harness / "random").write_bytes(bytes(range(256)) * 4)
    args = [sys.executable, str(TOOL), "--base", "HEAD", "--no-traces", "--corpus", str(corpus)]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("identical at ")
    assert done.stdout.split(": ")[1].startswith("4 inputs, ")
