"""Shared plumbing for the fuzz harnesses in ``fuzz/``.

Every harness is a file ``fuzz/<name>_harness.py`` defining
``TestOneInput(data: bytes) -> None`` (the atheris/libFuzzer entry point)
that raises on a finding (an ``AssertionError`` for a broken invariant, or
any unexpected exception) and returns normally otherwise. The same file
works two ways:

* ``python3 fuzz/<name>_harness.py [libFuzzer flags] [corpus dirs]`` runs it
  under atheris (coverage-guided); the harness calls :func:`main`, which
  calls ``atheris.Setup`` and ``atheris.Fuzz``;
* ``fuzz/test_corpus_regressions.py`` imports it with :func:`load_harness`
  and calls ``TestOneInput`` on every file of ``fuzz/corpus/<name>/``, so
  every input that ever found a bug is replayed by the normal test run.

Harnesses draw their choices from :class:`DataProvider`, a small pure-Python
stand-in for ``atheris.FuzzedDataProvider``: the same bytes make the same
choices with or without atheris installed (and across atheris versions), so
a corpus file replays identically under pytest.

See ``docs/fuzzing.md``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

__all__ = [
    "CORPUS_DIR",
    "FUZZ_DIR",
    "MACHINES",
    "DataProvider",
    "HypothesisProvider",
    "corpus_files",
    "harness_names",
    "instrument",
    "known_bugs",
    "load_harness",
    "main",
]

T = TypeVar("T")

#: What the machine harnesses name for instrumentation: the machines and the
#: monitor. atheris reduces each name to its top-level package, so in effect
#: all of ``leasegate`` imported in the block is instrumented, the codec too
#: (docs/fuzzing.md).
MACHINES: tuple[str, ...] = (
    "leasegate.core.registry",
    "leasegate.core.replica",
    "leasegate.core.runtime",
    "leasegate.core.monitor",
)

#: This directory (``fuzz/``).
FUZZ_DIR = Path(__file__).resolve().parent
#: The committed seed and regression corpora, one directory per harness.
CORPUS_DIR = FUZZ_DIR / "corpus"


def harness_names() -> list[str]:
    """Every harness in ``fuzz/``: the stems of ``*_harness.py`` (not
    starting with ``_``), sorted."""
    return sorted(p.stem for p in FUZZ_DIR.glob("*_harness.py") if not p.stem.startswith("_"))


def known_bugs() -> dict[str, str]:
    """``fuzz/known_bugs.json``: ``"<harness>/<corpus file>"`` → the bug that
    input reproduces and that is not fixed yet. The regression test runs
    these as ``xfail(strict=True)``; ``run_all.py`` leaves them out of the
    fuzzing seeds (they would stop every run at once)."""
    path = FUZZ_DIR / "known_bugs.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return {str(k): str(v) for k, v in data.items()}


def corpus_files(name: str) -> list[Path]:
    """The committed corpus files of harness ``name``, sorted by file name
    (hidden files such as ``.gitkeep`` excluded); ``[]`` if none."""
    directory = CORPUS_DIR / name
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def load_harness(name: str) -> ModuleType:
    """Import ``fuzz/<name>.py`` as a module (not instrumented).

    Raises:
        FileNotFoundError: no such harness file.
        Exception: whatever importing the harness raises.
    """
    path = FUZZ_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    module_name = f"leasegate_fuzz_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def instrument(
    enabled: bool, include: Sequence[str] = ("leasegate",)
) -> contextlib.AbstractContextManager[Any]:
    """Context manager for a harness's ``leasegate`` imports.

    ``instrument(__name__ == "__main__")``: when the harness runs as a script
    (under atheris), the modules under ``include`` (default all of
    ``leasegate``) imported inside the block get atheris coverage
    instrumentation; under pytest (or without atheris) it does nothing.
    atheris instruments whole top-level packages: any name in ``include``
    (e.g. ``_harness.MACHINES``) stands for all of ``leasegate``.
    """
    if not enabled:
        return contextlib.nullcontext()
    try:
        import atheris
    except ImportError:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=list(include))  # type: ignore[no-any-return]


def main(test_one_input: Callable[[bytes], None], argv: Sequence[str] | None = None) -> None:
    """Run ``test_one_input`` under atheris with libFuzzer's command line.

    Args:
        test_one_input: the harness entry point.
        argv: libFuzzer arguments (default ``sys.argv``), e.g.
            ``["h.py", "-max_total_time=60", "corpus/"]``.

    Raises:
        SystemExit: when atheris is not installed (exit status 2), or when
            libFuzzer finishes (its own exit status).
    """
    try:
        import atheris
    except ImportError:
        print("atheris is not installed: pip install 'leasegate[fuzz]'", file=sys.stderr)
        raise SystemExit(2) from None
    atheris.Setup(list(sys.argv if argv is None else argv), test_one_input)
    atheris.Fuzz()


def scratch_root() -> str:
    """A directory for harness scratch files: ``/dev/shm`` (tmpfs) when it is
    a writable directory, else the system temp directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    import tempfile

    return tempfile.gettempdir()


class DataProvider:
    """Deterministic choices drawn from fuzzer bytes, front to back.

    A pure-Python subset of ``atheris.FuzzedDataProvider``. When the bytes
    run out every method returns its smallest answer (``lo``, ``False``,
    empty), so any input is valid and short inputs make short runs.
    """

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    def remaining(self) -> int:
        """How many bytes are left."""
        return len(self._data) - self._pos

    def byte(self) -> int:
        """One byte (0..255), or 0 when exhausted."""
        if self._pos >= len(self._data):
            return 0
        b = self._data[self._pos]
        self._pos += 1
        return b

    def int_in_range(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` (inclusive), from as few bytes as the
        range needs (big-endian); ``lo`` when exhausted."""
        if hi <= lo:
            return lo
        span = hi - lo
        value = 0
        n = 0
        while (span >> (8 * n)) > 0:
            value = (value << 8) | self.byte()
            n += 1
        return lo + value % (span + 1)

    def boolean(self) -> bool:
        """``True`` or ``False`` (lowest bit of one byte)."""
        return bool(self.byte() & 1)

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options`` (must be non-empty)."""
        return options[self.int_in_range(0, len(options) - 1)]

    def raw(self, max_len: int) -> bytes:
        """Up to ``max_len`` bytes: a length byte-range first, then the bytes."""
        n = min(self.int_in_range(0, max_len), self.remaining())
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def text(self, max_len: int) -> str:
        """A string of up to ``max_len`` characters, any code point
        (surrogates included), biased to ASCII: each character is one byte
        (ASCII) or, after a byte ≥ 0x80, two more bytes picking from a
        table of awkward code points and the whole plane."""
        n = self.int_in_range(0, max_len)
        out: list[str] = []
        for _ in range(n):
            if self.remaining() == 0:
                break
            b = self.byte()
            if b < 0x80:
                out.append(chr(b))
            elif b < 0xC0:
                out.append(_AWKWARD[self.byte() % len(_AWKWARD)])
            else:
                out.append(chr(self.int_in_range(0, 0x10FFFF)))
        return "".join(out)

    def rest(self) -> bytes:
        """All remaining bytes."""
        out = self._data[self._pos :]
        self._pos = len(self._data)
        return out


class HypothesisProvider:
    """The :class:`DataProvider` interface drawing from Hypothesis instead of
    bytes, so the stateful tests (``tests/core/*/test_*_stateful.py``) drive
    the harnesses' actions with shrinkable choices.

    Args:
        data: a ``hypothesis.strategies.data()`` object (``st.data()``).

    ``remaining()`` is always 1 (never exhausted); ``raw``/``rest`` draw up
    to 64 bytes.
    """

    __slots__ = ("_data", "_st")

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies

        self._data = data
        self._st = strategies

    def remaining(self) -> int:
        """Always 1: Hypothesis decides when a run ends."""
        return 1

    def byte(self) -> int:
        """One byte (0..255)."""
        return int(self._data.draw(self._st.integers(0, 255)))

    def int_in_range(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` (``lo`` when ``hi <= lo``); shrinks to ``lo``."""
        if hi <= lo:
            return lo
        return int(self._data.draw(self._st.integers(lo, hi)))

    def boolean(self) -> bool:
        """``True`` or ``False``; shrinks to ``False``."""
        return bool(self._data.draw(self._st.booleans()))

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options`` (must be non-empty); shrinks to the first."""
        return options[self.int_in_range(0, len(options) - 1)]

    def raw(self, max_len: int) -> bytes:
        """Up to ``max_len`` (at most 64) bytes."""
        return bytes(self._data.draw(self._st.binary(max_size=min(max_len, 64))))

    def text(self, max_len: int) -> str:
        """A string of up to ``max_len`` characters (any code point but surrogates)."""
        return str(self._data.draw(self._st.text(max_size=max_len)))

    def rest(self) -> bytes:
        """Up to 64 bytes."""
        return self.raw(64)


_AWKWARD: tuple[str, ...] = (
    "\x00",
    "\x1f",
    "\x7f",
    "\n",
    "\u0085",
    "\u00a0",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\ud800",
    "\udfff",
    "\U0001f600",
    "\uffff",
    "/",
    "\\",
    '"',
    ":",
    "é",
    "CANARY",
)


def iter_corpus(names: Sequence[str] | None = None) -> Iterator[tuple[str, Path]]:
    """``(harness, file)`` for every committed corpus file of ``names``
    (default: every harness)."""
    for name in harness_names() if names is None else names:
        for path in corpus_files(name):
            yield name, path
