"""Capture: run a model and collect its attention per layer. Knows about transformers, never about results.

Names load on first use (torch and transformers are slow to import), so that importing attnflow, and
``attnflow --help``, stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GenerationTrace": "generation", "track_generation": "generation", "capture_gradients": "gradients",
    "default_model_path": "load", "load_model": "load", "capture": "text", "capture_images": "vision",
    "load_vision_model": "vision",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attnflow.capture' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"attnflow.capture.{module}"), name)
    globals()[name] = value
    return value
