"""Raw attention: each layer's (head-fused) attention weights, read as if they were about input tokens.

This is the paper's baseline: exact for layer 1, increasingly unrelated to the input tokens above it.
"""

from __future__ import annotations

from typing import Any

import torch

from attnflow.core.causal import normalize_causal
from attnflow.core.flow import resolve_indices
from attnflow.core.fusion import apply_padding, fuse_heads
from attnflow.core.inputs import as_stack
from attnflow.core.maps import check_fusion


def raw(attentions: Any, *, head_fusion: str | None = "mean", mask: Any = None,
        causal_norm: str | None = None) -> Any:
    """Head-fused attention per layer: the paper's baseline, read as if it were about input tokens.

    Args:
        attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a Hugging Face
            per-layer tuple, or ``AttentionMaps``. Row = query, column = key.
        head_fusion: ``"mean"``, ``"max"``, ``"min"``, or None (keep heads).
        mask: Optional padding mask ``(n,)`` or ``(batch, n)``, True for real tokens; padded positions
            get zero rows and columns. Rows are not re-normalised (this is the raw weight).
        causal_norm: None, ``"keys"`` or ``"sink"`` (see ``attnflow.core.causal``), applied to the
            fused weights; there is no residual here, so "keys" only rescales whole rows.

    Returns:
        ``(layers, n, n)`` (``(layers, heads, n, n)`` when ``head_fusion`` is None), with a leading
            batch axis for batched input; numpy in, numpy out; torch in, torch out.

    Raises:
        AttnflowError: Attention of another shape or an unknown fusion.
    """
    check_fusion(attentions, head_fusion)
    stack = as_stack(attentions, mask)
    w = apply_padding(fuse_heads(stack.values, head_fusion), stack.mask)
    return stack.out(normalize_causal(w, causal_norm, stack.mask))


def raw_rows(attentions: Any, positions: Any, *, layers: Any = None, head_fusion: str | None = "mean",
             mask: Any = None, causal_norm: str | None = None) -> Any:
    """``raw(...)[layers][:, positions]``, one layer at a time, so that no ``(layers, n, n)`` copy is made.

    Returns ``(len(layers), len(positions), n)`` (``(len(layers), heads, len(positions), n)`` when
    ``head_fusion`` is None), with a leading batch axis for batched input.
    """
    check_fusion(attentions, head_fusion)
    stack = as_stack(attentions, mask)
    layer_idx = resolve_indices(layers, stack.shape[1], "layers").tolist()
    pos_idx = resolve_indices(positions, stack.shape[-1], "positions").tolist()
    out = []
    for layer in layer_idx:
        w = apply_padding(fuse_heads(stack.values[:, layer], head_fusion), stack.mask)
        out.append(normalize_causal(w, causal_norm, stack.mask)[..., pos_idx, :])
    return stack.out(torch.stack(out, dim=1))
