"""Names that load on first use: one helper for every package that keeps ``import attnflow`` (and
``attnflow --help``) from importing torch, transformers or matplotlib before something is computed.

    __getattr__, __dir__ = lazy(__name__, {"explain": "attnflow.api.text", ...})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, names: Mapping[str, str], public: tuple[str, ...] = ()) -> tuple[Callable[[str], Any],
                                                                                   Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each public name to the module that
    defines it, imported on first access; the value is then kept in the package (no second lookup).
    ``__dir__`` lists the lazy names and ``public`` ones besides."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*names, *public})

    return __getattr__, __dir__
