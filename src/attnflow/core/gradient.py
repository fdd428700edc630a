"""Gradient-weighted attention rollout (Chefer, Gur & Wolf, ICCV 2021, "Generic Attention-model
Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers", eqs. 5-6).

For each layer ``l`` with attention ``A_l`` ``(heads, n, n)`` and the gradient ``G_l = dy_c / dA_l``
of the chosen class's logit ``y_c`` with respect to that same tensor::

    Ā_l = mean_heads( (G_l ⊙ A_l)⁺ )          (⁺: negative values set to 0)
    R_0 = I,   R_l = R_{l-1} + Ā_l @ R_{l-1}

Row = query, column = key, layer 0 the lowest, as everywhere in attnflow. ``R`` is not
row-normalised (the paper does not normalise it). The identity start and the ``+ R_{l-1}`` term play
the role of the residual connection, so no ``residual`` parameter applies here.

Gradients must be paired with the attention of the *same* layer: ``gradients[l]`` is the gradient
with respect to ``attentions[l]``.
"""

from __future__ import annotations

from typing import Any

import torch

from attnflow.core.fusion import apply_padding
from attnflow.core.inputs import as_stack
from attnflow.errors import AttnflowError


def grad_rollout(attentions: Any, gradients: Any, *, mask: Any = None) -> Any:
    """Gradient-weighted rollout for every layer.

    Parameters
    ----------
    attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a per-layer tuple, or
        ``AttentionMaps``. Row = query, column = key.
    gradients: the gradient of the explained logit with respect to each layer's attention, in the
        same form and order as ``attentions`` (gradients may be negative).
    mask: optional padding mask, True for real tokens; padded rows and columns of the result are 0.

    Returns
    -------
    ``R`` of shape ``(layers, n, n)`` (a leading batch axis for batched input): ``R[l, q, j]`` is
    the relevance of input token ``j`` for position ``q`` after layer ``l+1``.
    """
    stack = as_stack(attentions, mask)
    grads = _gradient_stack(gradients, stack.values)
    cam = (grads * stack.values).clamp(min=0).mean(dim=2)  # (batch, layers, n, n)
    cam = apply_padding(cam, stack.mask)
    n = cam.shape[-1]
    r = torch.eye(n, dtype=cam.dtype, device=cam.device).expand(cam.shape[0], n, n)
    out = []
    for layer in range(cam.shape[1]):
        r = r + cam[:, layer] @ r
        out.append(r)
    return stack.out(apply_padding(torch.stack(out, dim=1), stack.mask))


def _gradient_stack(gradients: Any, like: torch.Tensor) -> torch.Tensor:
    """Gradients in the shape of the attention stack ``like`` (they may be negative, so they are
    not validated as attentions)."""
    if gradients is None:
        raise AttnflowError("grad_rollout needs the gradients of the attentions; capture them with "
                            "attnflow.capture.capture_gradients")
    if isinstance(gradients, (tuple, list)):
        if len(gradients) != like.shape[1]:
            raise AttnflowError(f"expected one gradient per layer ({like.shape[1]}); got {len(gradients)}")
        g = torch.stack([torch.as_tensor(x) for x in gradients], dim=-4)
    else:
        g = torch.as_tensor(gradients)
    g = g.detach().to(device=like.device, dtype=like.dtype)
    if g.dim() == 4:
        g = g.unsqueeze(0)
    if g.shape != like.shape:
        raise AttnflowError(f"gradients must have the attentions' shape {tuple(like.shape)}; got {tuple(g.shape)}")
    if not torch.isfinite(g).all():
        raise AttnflowError("gradients contain NaN or infinite values")
    return g
