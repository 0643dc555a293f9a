"""Optional dependencies: which extra brings what, and the error when one is missing.

``pip install leasegate`` brings what the shells import (anyio, botocore,
cattrs, websockets). The demo, the reference cloud and the trio backend need
an extra (README "Extras"); a part that needs one checks for it before it
imports anything and raises :class:`MissingExtraError` naming the extra,
instead of a bare ``ModuleNotFoundError`` from deep inside an import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

__all__ = ["MissingExtraError", "missing_modules", "require_extra"]


class MissingExtraError(ImportError):
    """A part of leasegate needs an optional dependency that is not installed.

    ``str(error)`` is one line: ``"<feature> needs <modules>: pip install
    'leasegate[<extra>]'"``. It is an :class:`ImportError` (``name`` is the
    first missing module), so ``except ImportError`` still catches it.

    Attributes:
        feature: what was asked for (``"leasegate.testing"``, ``"leasegate demo"``).
        modules: the missing top-level modules, in the order checked.
        extra: the extra that installs them (``"demo"``, ``"trio"``).
    """

    def __init__(self, feature: str, modules: tuple[str, ...], extra: str) -> None:
        self.feature = feature
        self.modules = modules
        self.extra = extra
        super().__init__(
            f"{feature} needs {', '.join(modules)}: pip install 'leasegate[{extra}]'",
            name=modules[0] if modules else None,
        )


def missing_modules(modules: Iterable[str]) -> tuple[str, ...]:
    """The top-level modules of ``modules`` that cannot be imported.

    Args:
        modules: top-level module names (``"moto"``, ``"rich"``).

    Returns:
        Those whose import spec cannot be found, in the order given. Nothing
        is imported (``importlib.util.find_spec`` of a top-level name only
        searches ``sys.path``).
    """
    absent: list[str] = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or half-imported module
            found = False
        if not found:
            absent.append(name)
    return tuple(absent)


def require_extra(feature: str, extra: str, modules: Iterable[str]) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``modules`` is importable.

    Args:
        feature: what needs them (named in the message).
        extra: the extra that installs them.
        modules: top-level module names.

    Raises:
        MissingExtraError: one or more are missing (all of them are named).
    """
    absent = missing_modules(modules)
    if absent:
        raise MissingExtraError(feature, absent, extra)
