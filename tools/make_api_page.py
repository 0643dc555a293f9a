"""Regenerate the name tables of docs/api.md from each public module's ``__all__``.

Every section headed ``## `leasegate.x``` holds a table of the module's public
names, each with its kind and the first line of its docstring. Run after a
public name is added or removed (``tests/test_exports.py`` fails until then):

    python tools/make_api_page.py

The prose around the tables is kept as it is.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
_SECTION = re.compile(r"^## `(leasegate[\w.]*)`\s*$", re.M)


def _row(module: object, name: str) -> str:
    obj = getattr(module, name)
    if inspect.isclass(obj):
        kind = "exception" if issubclass(obj, BaseException) else "class"
    elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
        kind = "function"
    elif inspect.ismodule(obj):
        kind = "module"
    else:
        return f"| `{name}` | constant |"
    doc = " ".join((inspect.getdoc(obj) or "").split("\n\n")[0].split()).replace("``", "`")
    doc = doc.replace("|", "\\|")
    doc = re.sub(r":\w+:`~?([^`]+)`", lambda m: "`" + m.group(1).split(".")[-1] + "`", doc)
    return f"| `{name}` | {kind}: {doc} |"


def render(text: str) -> str:
    """``text`` with every module section's table made anew from ``__all__``."""
    out = []
    pos = 0
    for m in _SECTION.finditer(text):
        start = text.index("| --- | --- |\n", m.end()) + len("| --- | --- |\n")
        end = start
        while end < len(text) and text.startswith("|", end):
            end = text.index("\n", end) + 1
        module = importlib.import_module(m.group(1))
        rows = "".join(_row(module, n) + "\n" for n in module.__all__)
        out.append(text[pos:start] + rows)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def main() -> int:
    """Rewrite docs/api.md; exit 0."""
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
