"""Entry points: text, generation and images in, :class:`~attnflow.results.Attribution` out.

They compose capture (models -> attention), core (the methods) and results; the CLI and the app are
thin layers over them. The names load on first use, so that the checks made before any model loads
(:mod:`attnflow.api.checks`) can run without importing torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_LAZY = {
    "BatchRun": "batch", "batch": "batch", "faithfulness": "faithfulness", "faithfulness_report": "faithfulness",
    "generate": "generate", "IMAGE_METHODS": "images", "explain_image": "images", "FLOW_ALL_MAX": "text",
    "MAPS_ALL_MAX": "text", "TEXT_METHODS": "text", "explain": "text", "explain_attentions": "text",
    "explain_maps": "text", "Loaded": "models", "register_architecture": "models", "resolve": "models",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attnflow.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"attnflow.api.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """Importing the submodule ``attnflow.api.batch`` (or ``.faithfulness``) sets the package attribute of
    that name to the module; ``attnflow.api.batch`` must stay the function, as it was when this package
    imported every name up front."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
