"""Code blocks of a Markdown page, with the marker that says what each is for.

Every fenced block of a page checked this way is preceded by an HTML comment
(invisible on the rendered page) naming its role:

* ``<!-- file: NAME -->`` — the block is a file; the test writes it, byte for
  byte, as ``NAME`` in a scratch directory;
* ``<!-- run -->`` — the block is shell commands; the test runs each line in
  that directory, in order, and each must exit 0;
* ``<!-- show -->`` — output shown to the reader (text blocks only; the page's
  test compares it with what the commands printed);
* ``<!-- install -->`` — an install command the page's test compares with
  README's, never runs.

A fenced block without a marker is an error: nothing in the page goes
untested. Used by ``tests/docs/test_quickstart.py``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["Block", "read_blocks", "run_blocks", "write_files"]

_MARKER = re.compile(r"^<!--\s*(file|run|show|install)(?::\s*(\S+))?\s*-->\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its role (``file``/``run``/``show``), file name, language and text."""

    role: str
    name: str | None
    lang: str
    text: str
    line: int


def read_blocks(page: Path, *, every_block: bool = True) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with its marker.

    Args:
        every_block: every block must carry a marker (a page run whole, like
            the quickstart); ``False`` skips unmarked blocks (a reference page
            with one runnable example among sketches).

    Raises:
        ValueError: a block has no marker (with ``every_block``), a ``file``
            marker has no name, or a fence is left open (the message names
            the line).
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[str, str | None] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _MARKER.match(line)
        if m:
            pending = (m.group(1), m.group(2))
            i += 1
            continue
        f = _FENCE.match(line)
        if f:
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"{page.name}:{i + 1}: fence left open")
            if pending is None:
                if every_block:
                    raise ValueError(f"{page.name}:{i + 1}: a code block without a marker")
                i = j + 1
                continue
            role, name = pending
            if role == "file" and not name:
                raise ValueError(f"{page.name}:{i + 1}: a file marker without a name")
            text = "\n".join(lines[start:j]) + "\n"
            blocks.append(Block(role=role, name=name, lang=f.group(1), text=text, line=i + 1))
            pending = None
            i = j + 1
            continue
        if line.strip():
            pending = None if not line.startswith("<!--") else pending
        i += 1
    return blocks


def write_files(blocks: list[Block], where: Path) -> list[Path]:
    """Write every ``file`` block into ``where``, byte for byte; return the paths."""
    written = []
    for b in blocks:
        if b.role == "file":
            assert b.name is not None
            path = where / b.name
            path.write_text(b.text, encoding="utf-8")
            written.append(path)
    return written


def run_blocks(
    blocks: list[Block], where: Path, *, timeout_s: float = 300.0, keep_pythonpath: bool = False
) -> list[str]:
    """Run every line of every ``run`` block in ``where`` with bash; return each stdout.

    This interpreter's directory comes first on ``PATH`` (so ``python3`` is
    this environment's). ``PYTHONPATH`` is dropped unless ``keep_pythonpath``
    (the commands see the installed leasegate, as a reader would).

    Raises:
        AssertionError: a command exited non-zero or printed a traceback
            (the message holds its output).
    """
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if not keep_pythonpath:
        env.pop("PYTHONPATH", None)
    outputs = []
    for b in blocks:
        if b.role != "run":
            continue
        for line in b.text.splitlines():
            if not line.strip():
                continue
            done = subprocess.run(
                ["bash", "-c", line],
                cwd=where,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            assert done.returncode == 0, f"{line!r} failed:\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            outputs.append(done.stdout)
    return outputs
