"""Gradient-weighted rollout (Chefer, Gur & Wolf 2021) as a registry function: the gradients the
capture already holds (images), or a second, differentiable pass over the same token ids (text)."""

from __future__ import annotations

import numpy as np
import torch

from attnflow.config.registry import Context
from attnflow.core.gradient import grad_rollout as _grad_rollout
from attnflow.errors import AttnflowError


def grad_rollout(context: Context) -> np.ndarray:
    """``(layers, rows, n)`` (a leading batch axis for images) for the predicted class."""
    attentions, gradients = context.attentions, context.gradients
    if gradients is None:
        if context.model is None or context.input_ids is None:
            raise AttnflowError("grad-rollout needs the model (a sequence classifier); use attnflow.explain")
        from attnflow.capture.gradients import capture_gradients

        ids = torch.as_tensor(context.input_ids)[None].to(next(context.model.parameters()).device)
        g = capture_gradients(context.model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, target=None)
        attentions, gradients = g.attentions, g.gradients
    full = np.asarray(_grad_rollout(attentions, gradients), dtype=float)  # (batch?, layers, n, n)
    if context.kind != "image":
        full = full[0] if full.ndim == 4 else full
    if context.layers is not None:
        full = full[..., np.atleast_1d(context.layers), :, :]
    return full if context.rows is None else full[..., list(context.rows), :]
