"""explain(): text in, one method's scores for one target position out.

    expl = attnflow.explain("The keys to the cabinet", method="rollout", target="cls")
    print(expl); expl.plot("rollout.png")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from attnflow.capture import capture, load_model
from attnflow.core.maps import AttentionMaps
from attnflow.core.methods import METHODS, method_rows
from attnflow.errors import AttnflowError
from attnflow.explanation import Explanation

# Methods explain() offers for text: the paper's three plus gradient-weighted rollout (classifiers).
TEXT_METHODS = (*METHODS, "grad-rollout")


def resolve_target(target: Any, maps: AttentionMaps, tokenizer: Any = None) -> int:
    """``"cls"`` -> the classifier token's position; ``"last"`` -> the last real token; an int
    (negative counts from the end) -> that position; None -> "last" for decoders (the position that
    predicts the next token; decoders have no CLS), "cls" otherwise."""
    n = len(maps.tokens)
    if target is None:
        target = "last" if maps.causal else "cls"
    if isinstance(target, str) and target.lstrip("-").isdigit():
        target = int(target)
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        if not -n <= target < n:
            raise AttnflowError(f"target position {target} is outside the input's {n} tokens")
        return int(target) % n
    if target == "last":
        return n - 1
    if target == "cls":
        cls_id = getattr(tokenizer, "cls_token_id", None) if tokenizer is not None else None
        ids = maps.input_ids.tolist() if maps.input_ids is not None else []
        if cls_id is not None and cls_id in ids:
            return ids.index(cls_id)
        if maps.causal:
            raise AttnflowError("decoders have no CLS token; use target='last' (the default for decoders) or a position")
        raise AttnflowError("this model's input has no CLS token; use target='last' or a position")
    raise AttnflowError(f"target must be 'cls', 'last' or a token position; got {target!r}")


def scores_for(maps: AttentionMaps, method: str, target: int, *, residual: float = 0.5,
               head_fusion: str | None = "mean", solver: str = "auto",
               progress: Callable[[int, int], None] | None = None, causal_norm: str | None = None) -> np.ndarray:
    """``(layers, n)``: how the target position at each layer draws on the input tokens."""
    if method not in METHODS:
        raise AttnflowError(f"method must be one of {', '.join(METHODS)} or 'all'; got {method!r}")
    rows = method_rows(maps, method, [target], residual=residual, head_fusion=head_fusion, solver=solver,
                       causal_norm=causal_norm, progress=progress)
    return np.asarray(rows)[:, 0, :]


def _prediction(maps: AttentionMaps, model: Any) -> str | None:
    logits = maps.logits
    if logits is None or logits.dim() != 1:  # token-level outputs (LM heads) have no single label
        return None
    label = int(logits.argmax())
    id2label = getattr(model.config, "id2label", None) or {}
    return str(id2label.get(label, label))


@dataclass
class Prepared:
    """One captured input, ready for the methods: what explain() and explain_maps() share."""

    maps: AttentionMaps
    target: int
    prediction: str | None
    params: dict[str, Any]
    model: Any = None

    def grad_rollout(self) -> np.ndarray:
        """``(layers, n, n)`` gradient-weighted rollout (Chefer et al. 2021) for the predicted class,
        from a second, differentiable pass over the same token ids. Needs a sequence classifier."""
        from attnflow.capture.gradients import capture_gradients
        from attnflow.core.gradient import grad_rollout

        ids = self.maps.input_ids[None].to(next(self.model.parameters()).device)
        g = capture_gradients(self.model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, target=None)
        return np.asarray(grad_rollout(g.attentions, g.gradients))[0]


def prepare(text: str, model: Any, tokenizer: Any, *, target: Any, head_fusion: str | None, truncate: bool,
            **settings: Any) -> Prepared:
    """Load the model if given by name, capture ``text`` and resolve ``target``; ``settings`` are
    recorded in ``params`` next to the model name and text."""
    if not isinstance(text, str):
        raise AttnflowError(f"explain takes one text (a string); got {type(text).__name__}. "
                            "For a batch, use attnflow.capture(model, tokenizer, texts) and the core methods")
    if head_fusion not in ("mean", "max", "min"):
        raise AttnflowError(f"explaining needs head_fusion 'mean', 'max' or 'min'; got {head_fusion!r}")
    name = model if model is None or isinstance(model, str) else getattr(model, "name_or_path", type(model).__name__)
    if model is None or isinstance(model, str):
        model, tokenizer = load_model(model)
    elif tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    maps = capture(model, tokenizer, text, truncate=truncate)
    params = {"model": str(name if name is not None else model.name_or_path), "text": text,
              "head_fusion": head_fusion, **settings}
    return Prepared(maps=maps, target=resolve_target(target, maps, tokenizer), prediction=_prediction(maps, model),
                    params=params, model=model)


def explain(text: str, model: Any = None, *, tokenizer: Any = None, method: str = "rollout",
            target: Any = None, residual: float = 0.5, head_fusion: str | None = "mean",
            solver: str = "auto", truncate: bool = False,
            progress: Callable[[int, int], None] | None = None,
            causal_norm: str | None = None) -> Explanation | list[Explanation]:
    """Explain which input tokens position ``target`` draws on, layer by layer.

    model: a local path or hub id (loaded with eager attention), or a loaded model together with
        ``tokenizer``; None uses the default model.
    method: "raw", "rollout", "flow", "grad-rollout" (gradient-weighted rollout for the predicted class;
        sequence classifiers only), or "all" (then a list: raw, rollout and flow).
    target: "cls", "last", a token position, or None: "last" for decoders (the position that predicts
        the next token), "cls" for encoders.
    causal_norm: receptive-field normalisation for decoders (None, "keys", "sink"); see
        :mod:`attnflow.core.causal`. Other arguments as in :func:`attnflow.rollout` / :func:`attnflow.flow`.
    """
    if method != "all" and method not in TEXT_METHODS:
        raise AttnflowError(f"method must be one of {', '.join(TEXT_METHODS)} or 'all'; got {method!r}")
    run = prepare(text, model, tokenizer, target=target, head_fusion=head_fusion, truncate=truncate,
                  residual=residual, causal_norm=causal_norm)
    maps, position, prediction, params = run.maps, run.target, run.prediction, run.params
    def scores(m: str) -> np.ndarray:
        if m == "grad-rollout":
            return run.grad_rollout()[:, position, :]
        return scores_for(maps, m, position, residual=residual, head_fusion=head_fusion, solver=solver,
                          progress=progress, causal_norm=causal_norm)

    out = [Explanation(tokens=list(maps.tokens), method=m, target=position, prediction=prediction,
                       params=dict(params), scores=scores(m))
           for m in (METHODS if method == "all" else (method,))]
    return out if method == "all" else out[0]
