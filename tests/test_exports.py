"""The public surface: ``leasegate.core``, ``leasegate.shells``, ``leasegate.testing``.

Every name in each ``__all__`` exists and is the object its defining module
documents; ``docs/api.md`` lists every one; no public doc imports a private
module; no name means two things across the three top levels or is a
machine-ambiguous name at ``leasegate.core``; no public callable returns
``object`` or ``Any``; every part ships ``py.typed``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TOPS = ("leasegate.core", "leasegate.shells", "leasegate.testing")
#: The machines' modules, whose names may repeat one another (each keeps its own).
MACHINES = (
    "leasegate.core.registry",
    "leasegate.core.replica",
    "leasegate.core.runtime",
    "leasegate.core.ledger",
    "leasegate.core.wire",
    "leasegate.core.monitor",
)
#: The shells' public modules a runner author may import from directly.
SHELL_MODULES = (
    "leasegate.shells.ports",
    "leasegate.shells.launch",
    "leasegate.shells.runner",
    "leasegate.shells.consumers",
    "leasegate.shells.transport",
    "leasegate.shells.store",
    "leasegate.shells.trace",
)
#: Public callables whose ``Any`` result is genuine (the list in docs/api.md, "Precise types"):
#: a JSON value of any shape, a dataclass field, or a boto3 object (typed by boto3-stubs).
ANY_RESULT_ALLOWED = frozenset(
    {
        "leasegate.core.loads",  # any JSON value (JavaScript JSON.parse semantics)
        "leasegate.core.spec",  # a dataclass field default, as dataclasses.field
        "leasegate.shells.FrameTransport.receive",  # a frame's JSON value (or a marker)
        "leasegate.shells.BlockingFrameTransport.receive",
        "leasegate.shells.MemoryFrameEnd.receive",
        "leasegate.shells.ThreadFrameEnd.receive",
        "leasegate.shells.AnyioWebSocketTransport.receive",
        "leasegate.shells.ThreadWebSocketClient.receive",
        "leasegate.testing.AsyncCloudEnd.receive",
        "leasegate.testing.ThreadCloudEnd.receive",
        "leasegate.shells.SsmReader.client",  # the botocore client (diagnostics)
        "leasegate.testing.MotoServer.client",  # boto3 clients of the local moto server
        "leasegate.testing.MotoServer.ssm_client",
        "leasegate.testing.MotoServer.sts_client",
        "leasegate.testing.ParameterWriter.put_parameter",  # boto3 response dicts
        "leasegate.testing.SessionMinter.assume_role",
    }
)


def _public(module: str) -> list[tuple[str, object]]:
    mod = importlib.import_module(module)
    return [(name, getattr(mod, name)) for name in mod.__all__]


@pytest.mark.parametrize("module", TOPS)
def test_every_name_in_all_exists_once(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert len(names) == len(set(names)), "a name is listed twice"
    missing = [n for n in names if not hasattr(mod, n)]
    assert missing == []


@pytest.mark.parametrize("module", TOPS)
def test_every_name_is_the_object_its_defining_module_documents(module: str) -> None:
    for name, obj in _public(module):
        home = getattr(obj, "__module__", None)
        if not isinstance(home, str) or not home.startswith("leasegate."):
            continue  # a constant or an alias: checked by identity below
        if getattr(obj, "__name__", None) != name:
            continue  # an alias under another name
        defining = importlib.import_module(home)
        assert getattr(defining, name, None) is obj, f"{module}.{name} is not {home}.{name}"
        assert inspect.getdoc(obj), f"{module}.{name} has no docstring"


def test_shells_top_level_names_are_the_submodules_objects() -> None:
    shells = importlib.import_module("leasegate.shells")
    for name, where in shells._WHERE.items():
        defining = importlib.import_module(where, "leasegate.shells")
        assert getattr(shells, name) is getattr(defining, name)
    assert set(shells._WHERE) == set(shells.__all__)


def test_import_leasegate_shells_loads_no_heavy_dependency() -> None:
    import subprocess
    import sys

    code = (
        "import sys, leasegate.shells; "
        "print(sorted(m for m in ('anyio', 'boto3', 'botocore', 'websockets', 'trio') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_no_name_means_two_things_across_the_top_levels() -> None:
    seen: dict[str, tuple[str, object]] = {}
    for module in TOPS:
        for name, obj in _public(module):
            if name in seen:
                assert seen[name][1] is obj, f"{name}: {seen[name][0]} and {module} differ"
            seen[name] = (module, obj)


def _ambiguous() -> dict[str, set[str]]:
    """Names two machine modules export as different objects: name -> modules."""
    first: dict[str, tuple[str, object]] = {}
    clash: dict[str, set[str]] = {}
    for module in MACHINES:
        for name, obj in _public(module):
            if name in first and first[name][1] is not obj:
                clash.setdefault(name, {first[name][0]}).add(module)
            first.setdefault(name, (module, obj))
    return clash


def test_machine_ambiguous_names_are_not_exported_at_the_core_top_level() -> None:
    clash = _ambiguous()
    # The known ones: the registry's and the replica's timers, the runtime's and the replica's acks.
    assert {"StartTimer", "CancelTimer", "SendAck"} <= set(clash)
    core = importlib.import_module("leasegate.core")
    assert sorted(set(clash) & set(core.__all__)) == []
    assert sorted(n for n in clash if hasattr(core, n)) == []


def test_ambiguous_names_keep_their_class_names_for_traces() -> None:
    from leasegate.core import registry, replica, runtime

    for mod, name in (
        (registry, "StartTimer"),
        (replica, "StartTimer"),
        (registry, "CancelTimer"),
        (replica, "CancelTimer"),
        (runtime, "SendAck"),
        (replica, "SendAck"),
    ):
        assert getattr(mod, name).__qualname__ == name


def _api_sections() -> dict[str, set[str]]:
    """``docs/api.md``: module heading (`` ## `leasegate.x` ``) -> names in backticks below it."""
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    sections: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            head = re.match(r"^##+ `(leasegate[\w.]*)`", line)
            current = sections.setdefault(head.group(1), set()) if head else None
            continue
        if current is not None:
            current.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line))
    return sections


@pytest.mark.parametrize("module", [*TOPS, *MACHINES, *SHELL_MODULES])
def test_api_page_lists_every_public_name(module: str) -> None:
    sections = _api_sections()
    assert module in sections, f"docs/api.md has no section for {module}"
    mod = importlib.import_module(module)
    assert sorted(set(mod.__all__) - sections[module]) == []


def _code_blocks(text: str) -> Iterator[str]:
    for m in re.finditer(r"```[^\n]*\n(.*?)```", text, flags=re.DOTALL):
        yield m.group(1)


_IMPORT = re.compile(
    r"^\s*(?:from\s+(leasegate(?:\.\w+)*)\s+import\s+([^\n#]+)|import\s+(leasegate(?:\.\w+)*))",
    flags=re.MULTILINE,
)


def _private_imports(text: str) -> list[str]:
    bad: list[str] = []
    for block in _code_blocks(text):
        for m in _IMPORT.finditer(block):
            module = m.group(1) or m.group(3)
            if any(part.startswith("_") for part in module.split(".")):
                bad.append(m.group(0).strip())
                continue
            names = m.group(2) or ""
            for name in re.split(r"[\s,()]+", names):
                if name.startswith("_") and name != "__version__":
                    bad.append(m.group(0).strip())
    return bad


def test_the_private_import_scan_finds_a_private_module() -> None:
    sample = "```python\nfrom leasegate.shells._dispatch import CallFailed\nimport x\n```\n"
    assert _private_imports(sample) == ["from leasegate.shells._dispatch import CallFailed"]
    assert _private_imports("```python\nfrom leasegate.core import _secret\n```") != []
    assert _private_imports("```python\nfrom leasegate.shells import ConsumerSet\n```") == []


def test_no_public_doc_imports_a_private_module() -> None:
    docs = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
    bad = {p.name: found for p in docs if (found := _private_imports(p.read_text("utf-8")))}
    assert bad == {}


def _callables(module: str) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, obj in _public(module):
        if inspect.isfunction(obj):
            yield f"{module}.{name}", obj
        elif inspect.isclass(obj) and obj.__module__.startswith("leasegate."):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                fn = member.fget if isinstance(member, property) else member
                if isinstance(fn, staticmethod | classmethod):
                    fn = fn.__func__
                if inspect.isfunction(fn):
                    yield f"{module}.{name}.{attr}", fn


def _bad_result(fn: Callable[..., Any]) -> str | None:
    hints = typing.get_type_hints(fn)
    if "return" not in hints:
        return "no return annotation"
    result = hints["return"]
    if result is Any or result is object:
        return repr(result)
    return None


@pytest.mark.parametrize("module", TOPS)
def test_no_public_callable_returns_object_or_any(module: str) -> None:
    bad = {}
    for qualname, fn in _callables(module):
        why = _bad_result(fn)
        if why is not None and qualname not in ANY_RESULT_ALLOWED:
            bad[qualname] = why
        elif why is None and qualname in ANY_RESULT_ALLOWED:
            bad[qualname] = "listed as an exception but precise now: drop it from the list"
    assert bad == {}


def test_the_any_exceptions_are_all_public_callables() -> None:
    known = {q for m in TOPS for q, _ in _callables(m)}
    assert sorted(ANY_RESULT_ALLOWED - known) == []


def test_the_result_scan_sees_object_and_any() -> None:
    def a() -> object:
        """-"""

    def b() -> Any:
        """-"""

    def c() -> int:
        """-"""

    assert _bad_result(a) == "<class 'object'>"
    assert _bad_result(b) == "typing.Any"
    assert _bad_result(c) is None


@pytest.mark.parametrize(
    "part", ["core/leasegate/core", "shells/leasegate/shells", "shells/leasegate/testing"]
)
def test_every_part_ships_py_typed(part: str) -> None:
    assert (ROOT / part / "py.typed").is_file()


def test_the_wait_timeouts_the_docs_name_are_importable_from_the_shells() -> None:
    """quickstart and troubleshooting tell a runner to catch ``LaunchTimeout`` / ``WaitTimeout``."""
    import leasegate.shells as shells
    from leasegate.shells import diagnostics

    assert shells.LaunchTimeout is diagnostics.LaunchTimeout
    assert shells.WaitTimeout is diagnostics.WaitTimeout
    assert issubclass(shells.LaunchTimeout, shells.WaitTimeout)
    assert issubclass(shells.WaitTimeout, TimeoutError)


def test_the_api_page_tables_are_what_the_generator_makes() -> None:
    """docs/api.md's name tables come from ``__all__`` and docstrings (tools/make_api_page.py)."""
    import runpy

    gen = runpy.run_path(str(DOCS.parent / "tools" / "make_api_page.py"))
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    assert gen["render"](text) == text, "run: python tools/make_api_page.py"
