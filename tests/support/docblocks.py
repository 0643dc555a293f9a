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
import re
from pathlib import Path

__all__ = ["Block", "read_blocks"]

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


def read_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` in order, each with its marker.

    Raises:
        ValueError: a block has no marker, a ``file`` marker has no name, or a
            fence is left open (the message names the line).
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
                raise ValueError(f"{page.name}:{i + 1}: a code block without a marker")
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
