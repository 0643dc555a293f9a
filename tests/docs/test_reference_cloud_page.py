"""docs/reference-cloud.md's test file for a runner runs as printed, on both shells.

The page's one marked example (``tests/support/docblocks.py``) is written into
a scratch directory and run with the command the page gives: pytest finds the
plugin's fixtures through the entry point alone (no conftest line).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docblocks import read_blocks, run_blocks, write_files

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference-cloud.md"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_runner_test_file_of_the_reference_cloud_page_passes_as_printed(
    tmp_path: Path,
) -> None:
    blocks = read_blocks(PAGE, every_block=False)
    assert [b.name for b in blocks if b.role == "file"] == ["test_my_runner.py"]
    text = blocks[0].text
    assert "leasegate.shells." not in text.replace("from leasegate.shells import", "")
    write_files(blocks, tmp_path)
    (out,) = run_blocks(blocks, tmp_path)
    assert "3 passed" in out
