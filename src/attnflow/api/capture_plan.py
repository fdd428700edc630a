"""How ``attnflow.explain`` captures a decoder's input: the explained target's rows on the model's fast
attention (``attnflow.capture.rows``), or the attention maps on eager attention. Imports no torch."""

from __future__ import annotations

from typing import Any

from attnflow.hf.kind import carried_kind


def row_capture(methods: Any, model: Any, settings: Any) -> list[str] | None:
    """For an explanation of one decoder target: the methods whose rows the row capture computes on the
    model's fast attention without the maps (``attnflow.capture.rows``; possibly none, when every
    method runs the model itself), or None when the explanation needs the maps: a method reads them
    (the registry's ``captured``), the norm weighting is asked for, or the model's family cannot
    (``attnflow.hf.architectures.why_not_rows``). ``model``: loaded, or a config."""
    from attnflow.hf.architectures import why_not_rows
    from attnflow.config import registry

    records = [registry.get(m) for m in methods]
    if settings.weighting != "attention" or any(r.captured == "maps" for r in records):
        return None
    if why_not_rows(getattr(model, "model", model), carried_kind(model).family or None):
        return None
    return [r.name for r in records if r.captured == "rows"]


def capture_path(model: Any) -> str:
    """How ``attnflow.explain`` captures a decoder (a ``ModelInfo``, a
    ``Loaded`` or a loaded model): a sentence for ``attnflow methods --model``."""
    from attnflow.hf.architectures import why_not_rows
    from attnflow.hf.load import ModelInfo
    from attnflow.config import registry

    subject = model.config if isinstance(model, ModelInfo) else getattr(model, "model", model)
    why = why_not_rows(subject, carried_kind(model).family or None)
    if why:
        return f"explain captures the attention maps on eager attention: {why}"
    rows = ", ".join(m.name for m in registry.REGISTRY.values() if m.captured == "rows")
    return (f"explain captures the explained target's rows on the model's fast attention (SDPA), without the "
            f"attention maps, when every method reads only such rows ({rows}) or runs the model itself; "
            "otherwise the attention maps on eager attention")
