"""Packages whose public names are imported on first use (PEP 562): importing the package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]) -> tuple[Callable[[str], Any],
                                                                                 Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose globals are ``namespace``: each name of ``exports``
    (name -> the module that defines it) is imported when first read, then kept in ``namespace``.

    Examples:
        >>> namespace = {"__name__": "pkg"}
        >>> getattr_, dir_ = lazy_exports(namespace, {"sqrt": "math"})
        >>> getattr_("sqrt")(9.0), "sqrt" in namespace, dir_()
        (3.0, True, ['__name__', 'sqrt'])
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
