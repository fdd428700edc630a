"""Ablated flow and occlusion as registry functions (see ``attnflow.interventions.ablation`` for the
methods and their exact, batched, cached computation).

Each takes a context (the registry's ``Context``: ``model``, ``input_ids``, ``rows``, ``layers``,
``progress`` and the readout fields) and returns ``(layers, rows, n)`` scores, "clean minus edited" readout of
the token each row predicts (positive: the source supports the prediction):

- ``ablated_flow``: one row per target with no layers axis ``(1, rows, n)``: the source's values
  zeroed in every layer at once (the headline score; results place it at the top layer);
- ``ablated_flow_layers``: ``(layers, rows, n)``, zeroed one layer at a time;
- ``occlusion`` / ``occlusion_mean``: ``(1, rows, n)``, the source deleted / its input embedding
  replaced by the mean embedding.

The context may give ``tokens`` (the explained token per row, e.g. the generated ones;
default the model's argmax), ``readout`` ("logit", "logprob", "contrastive" with ``foils``),
``cache`` and ``clean_logits`` (a generation's own key/value cache and logits, reused),
``batch_size`` and ``spans`` (groups of positions ablated at once; ``attnflow.units.spans``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnflow.interventions.ablation import BATCH, Ablation
from attnflow.interventions.ablation import ablated_flow as _ablated_flow
from attnflow.interventions.ablation import occlusion as _occlusion
from attnflow.errors import AttnflowError


def _needs_decoder(context: Any, name: str) -> None:
    if context.model is None or context.input_ids is None:
        raise AttnflowError(f"{name} runs the model again; use attnflow.explain or attnflow.generate with a model")


def _options(context: Any) -> dict[str, Any]:
    return dict(readout=context.readout, tokens=context.tokens, foils=context.foils,
                batch_size=int(context.batch_size or BATCH), progress=context.progress,
                cache=context.cache, clean_logits=context.clean_logits)


def _place(found: Ablation, rows: list[int], layers: Any) -> np.ndarray:
    """``(variants, rows, n)`` in the order of ``rows`` (the engine sorts its targets)."""
    order = [found.targets.index(r) for r in rows]
    out = found.scores[order].transpose(1, 0, 2)
    if layers is not None and out.shape[0] > 1:
        out = out[np.atleast_1d(layers)]
    return out


def _rows(context: Any) -> list[int]:
    n = len(np.asarray(context.input_ids).reshape(-1))
    return list(range(n)) if context.rows is None else [int(r) for r in context.rows]


def _ablate(context: Any, layers: str) -> np.ndarray:
    _needs_decoder(context, "ablated flow")
    rows = _rows(context)
    groups = context.spans
    if groups is not None:  # every token of a span zeroed at once; each token carries its span's score
        from attnflow.units.spans import spread
        from attnflow.interventions.span_ablation import ablate_spans

        found = ablate_spans(context.model, context.input_ids, groups, sorted(rows), layers=layers,
                             **_sorted_tokens(rows, _options(context)))
        found.scores = spread(found.scores, groups, len(np.asarray(context.input_ids).reshape(-1)))
        return _place(found, rows, context.layers)
    found = _ablated_flow(context.model, context.input_ids, sorted(rows), layers=layers,
                          **_sorted_tokens(rows, _options(context)))
    return _place(found, rows, context.layers)


def _sorted_tokens(rows: list[int], options: dict[str, Any]) -> dict[str, Any]:
    """Per-row tokens, foils and clean logits reordered like the engine's sorted targets."""
    order = np.argsort(rows, kind="stable")
    if options.get("clean_logits") is not None:
        options["clean_logits"] = options["clean_logits"][torch.as_tensor(order)]
    for key in ("tokens", "foils"):
        if options.get(key) is not None:
            options[key] = np.asarray(options[key])[order]
    return options


def ablated_flow(context: Any) -> np.ndarray:
    return _ablate(context, "all")


def ablated_flow_layers(context: Any) -> np.ndarray:
    return _ablate(context, "each")


def _occlude(context: Any, replacement: Any) -> np.ndarray:
    _needs_decoder(context, "occlusion")
    rows = _rows(context)
    found = _occlusion(context.model, context.input_ids, sorted(rows), replacement=replacement,
                       **_sorted_tokens(rows, _options(context)))
    return _place(found, rows, None)


def occlusion(context: Any) -> np.ndarray:
    return _occlude(context, None)


def occlusion_mean(context: Any) -> np.ndarray:
    return _occlude(context, "mean")
