"""Capture: run a model and observe it, collecting its attention per layer (or a target's rows) in
receivers on the named hook points. Knows about transformers, never about results; editing a run
(ablation, attribution patching, AttnLRP, logit paths) is ``attnflow.interventions``, loading a
model is ``attnflow.hf``.

Names load on first use (torch and transformers are slow to import), so that importing attnflow, and
``attnflow --help``, stay fast.
"""

from __future__ import annotations

from typing import Any

from attnflow.config.lazy import lazy
from attnflow.config.moved import moved_name

_LAZY = {name: f"attnflow.capture.{module}" for name, module in {
    "GenerationTrace": "generation", "track_generation": "generation", "capture_gradients": "gradients",
    "capture": "text", "capture_images": "vision", "load_vision_model": "vision",
}.items()}

__all__ = list(_LAZY)
_lazy_getattr, _ = lazy(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    try:
        return _lazy_getattr(name)
    except AttributeError:
        return moved_name(__name__, name)  # load_model and default_model_path: attnflow.hf, for one release
