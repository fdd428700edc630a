"""Capture attention together with its gradient, for gradient-weighted rollout.

One forward pass under eager attention, each layer's weights received at its ``layers.i.attn`` hook
point (``output_attentions=True`` for a model whose classes declare no attention modules); each layer's
attention tensor is the very tensor the layer multiplies with the values, so a gradient hook on that
tensor (not on the model) receives ``d logit / d A_l`` for layer ``l`` (paired by layer index, never
by hook order). The model runs on eager attention for the call only (``attnflow.hf.points``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnflow.capture.streaming import attention_for_weights, eager, layer_weights, streamable_modules
from attnflow.hf.points import receiving
from attnflow.errors import AttnflowError


@dataclass
class Gradients:
    """``attentions`` and ``gradients``: ``(batch, layers, heads, n, n)``; ``logits``: ``(batch, classes)``;
    ``target``: ``(batch,)`` the class whose logit was differentiated, per example."""

    attentions: torch.Tensor
    gradients: torch.Tensor
    logits: torch.Tensor
    target: torch.Tensor


def resolve_classes(target: Any, logits: torch.Tensor, id2label: dict | None = None) -> torch.Tensor:
    """``None`` -> each example's predicted class; an int, a label name or one per example -> those."""
    batch, classes = logits.shape
    if target is None:
        return logits.argmax(dim=-1)
    labels = {str(v): int(k) for k, v in (id2label or {}).items()}
    values = list(target) if isinstance(target, (list, tuple, torch.Tensor)) else [target] * batch
    if len(values) != batch:
        raise AttnflowError(f"expected one target class per example ({batch}); got {len(values)}")
    out = []
    for v in values:
        v = int(v) if isinstance(v, torch.Tensor) else v
        if isinstance(v, str) and v in labels:
            v = labels[v]
        elif isinstance(v, str) and v.lstrip("-").isdigit():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or not -classes <= v < classes:
            raise AttnflowError(f"target class must be a class index in [0, {classes}) or a label name; got {v!r}")
        out.append(v % classes)
    return torch.tensor(out, device=logits.device)


def capture_gradients(model: Any, inputs: dict[str, torch.Tensor], target: Any = None) -> Gradients:
    """Run a classifier on ``inputs`` (tokenizer or pixel dict, batched) and differentiate the logit of
    ``target`` (None: each example's predicted class) with respect to every layer's attention.

    Examples in a batch do not interact, so the summed logits give each example its own gradient.
    """
    model.zero_grad(set_to_none=True)
    modules = streamable_modules(model)
    kept: list[Any] = [None] * len(modules)

    def keep(layer: int, index: int) -> Any:
        return lambda module, args, output: kept.__setitem__(layer, layer_weights(output, index))

    # transformers' own output_attentions would leave its recorder's hooks on the model: receivers instead
    scope = receiving(model, {f"layers.{i}.attn": keep(i, m.index) for i, m in enumerate(modules)},
                      attention=attention_for_weights(model)) if modules else eager(model)
    with torch.enable_grad(), scope:
        out = model(**inputs) if modules else model(**inputs, output_attentions=True)
        attentions = kept if modules and all(a is not None for a in kept) else getattr(out, "attentions", None)
        logits = getattr(out, "logits", None)
        if not attentions:
            raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
        if logits is None or logits.dim() != 2:
            raise AttnflowError("gradient-weighted rollout needs a classifier with logits of shape "
                                "(batch, classes), e.g. a *ForSequenceClassification or *ForImageClassification model")
        if not attentions[0].requires_grad:
            raise AttnflowError("the attentions are not differentiable; do not run the model under torch.no_grad()")
        received: list[torch.Tensor | None] = [None] * len(attentions)
        for layer, a in enumerate(attentions):
            a.register_hook(lambda g, layer=layer: received.__setitem__(layer, g))
        classes = resolve_classes(target, logits, getattr(model.config, "id2label", None))
        logits.gather(1, classes[:, None]).sum().backward()
    grads = [g if g is not None else torch.zeros_like(a) for g, a in zip(received, attentions)]
    model.zero_grad(set_to_none=True)
    return Gradients(attentions=torch.stack([a.detach().float().cpu() for a in attentions], dim=1),
                     gradients=torch.stack([g.detach().float().cpu() for g in grads], dim=1),
                     logits=logits.detach().float().cpu(), target=classes.cpu())
