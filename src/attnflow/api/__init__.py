"""Entry points: text, generation and images in, ``Attribution`` out.

They compose capture (models -> attention), core (the methods) and results; the CLI and the app are
thin layers over them. Each name loads its module on first use: ``attnflow.explain`` does not pay
for importing what ``faithfulness`` (scipy.stats) or ``batch`` (networkx, Dask) need,
and the checks made before any model loads (``attnflow.api.checks``) run without importing torch.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from attnflow.config.lazy import lazy

_MODULES = {
    "faithfulness": "faithfulness", "faithfulness_report": "faithfulness",
    "flow": "flowrun",
    "generate": "generate",
    "IMAGE_METHODS": "images", "explain_image": "images",
    "Loaded": "models", "register_architecture": "models", "resolve": "models",
    "FLOW_ALL_MAX": "text", "MAPS_ALL_MAX": "text", "TEXT_METHODS": "text", "explain": "text",
    "explain_attentions": "text", "explain_maps": "text",
}

# The batch system has its own room (attnflow.batch, beside the app and the CLI); its entry point stays
# reachable here as it always was.
_ELSEWHERE = {"BatchRun": "attnflow.batch.run", "batch": "attnflow.batch.run"}

__all__ = sorted({*_MODULES, *_ELSEWHERE})


__getattr__, _names = lazy(__name__, {**{name: f"attnflow.api.{module}" for name, module in _MODULES.items()},
                                      **_ELSEWHERE})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_names()))


class _Api(types.ModuleType):
    """``faithfulness`` and ``generate`` are both functions and the modules defining them:
    importing such a module (``from attnflow.api.generate import ...``) makes Python set the
    package's attribute to the module. The name stays the function, as when this package imported
    everything at once."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, types.ModuleType) and _MODULES.get(name) == name:
            value = getattr(value, name)
            super().__setattr__(name, value)
        return value


sys.modules[__name__].__class__ = _Api
