"""Attention rollout (Abnar & Zuidema 2020, section 3).

With ``A_l`` the residual-augmented, head-fused attention of layer ``l`` (see
:mod:`attnflow.core.fusion`), rollout multiplies the layers, higher layer on the left::

    R_1 = A_1,   R_l = A_l @ R_{l-1}

Row ``q`` of ``R_l`` is how much position ``q`` at layer ``l`` draws on each input token, assuming
attention weights combine linearly along every path of the layered attention graph. Each ``A_l`` is
row-stochastic, so each ``R_l`` is too. Cost: ``O(layers * n^3)``.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from attnflow.core.fusion import apply_padding, augmented
from attnflow.core.inputs import as_stack
from attnflow.errors import AttnflowError


def rollout_matrices(a: torch.Tensor, start_layer: int = 0) -> torch.Tensor:
    """Roll out augmented matrices ``a`` of shape ``(..., layers, n, n)``; layers below ``start_layer``
    are the identity (no mixing counted yet)."""
    n_layers, n = a.shape[-3], a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape[:-3] + (n, n))
    out = []
    r = eye
    for layer in range(n_layers):
        if layer >= start_layer:
            r = a[..., layer, :, :] @ r
        out.append(r)
    return torch.stack(out, dim=-3)


def rollout(attentions: Any, *, residual: float = 0.5, head_fusion: str | None = "mean",
            discard_ratio: float = 0.0, start_layer: int = 0, mask: Any = None,
            causal_norm: str | None = None) -> Any:
    """Attention rollout for every layer.

    Parameters
    ----------
    attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a Hugging Face per-layer
        tuple, or :class:`AttentionMaps`. Row = query, column = key.
    residual: weight of the identity in ``A = (1-residual) W + residual I`` (rows re-normalised);
        0 disables the residual.
    head_fusion: ``"mean"`` | ``"max"`` | ``"min"`` | None (roll out each head separately).
    discard_ratio: fraction of each fused layer's smallest off-diagonal weights set to 0 before the
        residual is added (the diagonal and padded positions are never counted or touched).
    start_layer: 0-based layer where rolling out starts; layers below it are the identity.
    mask: optional padding mask, True for real tokens; padded positions never receive attention and
        their rows/columns in the result are 0.
    causal_norm: receptive-field normalisation for decoders, None (default, the paper), ``"keys"``
        or ``"sink"``; see :mod:`attnflow.core.causal`.

    Returns
    -------
    ``R`` of shape ``(layers, n, n)`` (``(layers, heads, n, n)`` when ``head_fusion`` is None), plus
    a leading batch axis for batched input. ``R[l, q]`` is position ``q`` at layer ``l+1`` over the
    input tokens; every real row sums to 1.
    """
    stack = as_stack(attentions, mask)
    n_layers = stack.shape[1]
    if isinstance(start_layer, bool) or not isinstance(start_layer, numbers.Integral) \
            or not (-n_layers <= start_layer < n_layers):
        raise AttnflowError(f"start_layer must be an integer layer index in [0, {n_layers}); got {start_layer!r}")
    start_layer = int(start_layer) % n_layers
    a = augmented(stack.values, stack.mask, residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio,
                  causal_norm=causal_norm)
    if head_fusion is None:  # (batch, layers, heads, n, n): roll out heads separately
        r = rollout_matrices(a.transpose(1, 2), start_layer).transpose(1, 2)
    else:
        r = rollout_matrices(a, start_layer)
    return stack.out(apply_padding(r, stack.mask))
