"""Capture: run a model and collect its attention per layer. Knows about transformers, never about results.

Names load on first use (torch and transformers are slow to import), so that importing attnflow, and
``attnflow --help``, stay fast.
"""

from __future__ import annotations

from attnflow.config.lazy import lazy

_LAZY = {name: f"attnflow.capture.{module}" for name, module in {
    "GenerationTrace": "generation", "track_generation": "generation", "capture_gradients": "gradients",
    "default_model_path": "load", "load_model": "load", "capture": "text", "capture_images": "vision",
    "load_vision_model": "vision",
}.items()}

__all__ = list(_LAZY)
__getattr__, _ = lazy(__name__, _LAZY)
