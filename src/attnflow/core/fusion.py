"""From per-head attention to the matrices the methods multiply: head fusion, discard, residual.

Conventions (pinned here, used everywhere):

- row = query, column = key; layer index 0 is the lowest layer.
- head fusion: ``"mean"`` (the paper's default), ``"max"``, ``"min"`` over heads, or ``None`` to keep
  each head separately.
- residual: ``A = (1 - residual) * W + residual * I`` and then every row is divided by its sum, so a
  row of ``A`` is a distribution over keys. ``residual=0.5`` reproduces the paper's ``(W + I) / 2``;
  ``residual=0`` leaves ``W`` (rows re-normalised) unchanged.
- padding: padded keys receive no attention (their columns are zeroed); a padded query row keeps only
  its self-loop so that it never feeds a real token.
- receptive-field normalisation for decoders (``causal_norm``, off by default) is applied to the
  fused ``W`` before the residual; see ``attnflow.core.causal``.
"""

from __future__ import annotations

import math
import numbers

import torch

from attnflow.config.settings import check_choice, check_number, choices
from attnflow.core.causal import check_causal_norm, normalize_causal
from attnflow.errors import AttnflowError

HEAD_FUSIONS = (*choices("head_fusion"), None)  # None: keep each head (the core's per-head maps)


def check_head_fusion(head_fusion: str | None) -> None:
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)


def check_residual(residual: float) -> None:
    check_number("residual", residual)


def fuse_heads(values: torch.Tensor, head_fusion: str | None) -> torch.Tensor:
    """``(..., heads, n, n)`` -> ``(..., n, n)`` (or unchanged when ``head_fusion`` is None)."""
    check_head_fusion(head_fusion)
    if head_fusion is None:
        return values
    if values.shape[-3] == 1:  # maps fused during capture (or a one-head model): a view, no copy
        return values.squeeze(-3)
    if head_fusion == "mean":
        return values.mean(dim=-3)
    if head_fusion == "max":
        return values.amax(dim=-3)
    return values.amin(dim=-3)


def apply_padding(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero attention to and from padded positions. ``w``: ``(batch, ..., n, n)``; ``mask``: ``(batch, n)``."""
    if bool(mask.all()):  # nothing padded: multiplying by ones would only cost two passes
        return w
    shape = (mask.shape[0],) + (1,) * (w.dim() - 3) + (mask.shape[1],)
    keys = mask.reshape(shape).unsqueeze(-2).to(w.dtype)  # (batch, ..., 1, n)
    queries = mask.reshape(shape).unsqueeze(-1).to(w.dtype)  # (batch, ..., n, 1)
    return w * keys * queries


def discard_lowest(w: torch.Tensor, ratio: float, mask: torch.Tensor) -> torch.Tensor:
    """Zero the lowest ``ratio`` fraction of each matrix's off-diagonal weights between real tokens.

    ``w``: ``(batch, ..., n, n)`` fused weights. For every matrix, the ``floor(ratio * m)`` smallest of
    its ``m`` off-diagonal query-key pairs between real tokens are set to 0 (ties broken by position).
    Protected, never discarded: the diagonal (each token's attention to itself, so no row can lose
    all its mass) and every entry involving a padded position (already 0).
    """
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not (0.0 <= ratio < 1.0):
        raise AttnflowError(f"discard_ratio must be in [0, 1); got {ratio!r}")
    if ratio == 0.0:
        return w
    n = w.shape[-1]
    eye = torch.eye(n, dtype=torch.bool, device=w.device)
    shape = (mask.shape[0],) + (1,) * (w.dim() - 3) + (n,)
    valid = mask.reshape(shape).unsqueeze(-1) & mask.reshape(shape).unsqueeze(-2) & ~eye
    valid = valid.expand(w.shape)
    flat_w = w.reshape(-1, n * n)
    flat_valid = valid.reshape(-1, n * n)
    out = flat_w.clone()
    for i in range(flat_w.shape[0]):
        idx = flat_valid[i].nonzero().squeeze(1)
        k = math.floor(ratio * idx.numel())
        if k == 0:
            continue
        order = torch.argsort(flat_w[i, idx], stable=True)
        out[i, idx[order[:k]]] = 0.0
    return out.reshape(w.shape)


def add_residual(w: torch.Tensor, residual: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``A = (1 - residual) * W + residual * I``, rows re-normalised to sum to 1.

    A padded query row keeps only its self-loop. A row of zeros (possible only with ``residual=0``)
    stays zero.
    """
    check_residual(residual)
    n = w.shape[-1]
    # In place on one new tensor (the same values, bit for bit, as (1 - r) W + r I then a division):
    # these passes otherwise cost as much as the flow solve of a single row.
    a = w * (1.0 - residual)
    a.diagonal(dim1=-2, dim2=-1).add_(residual)
    if mask is not None and not bool(mask.all()):
        eye = torch.eye(n, dtype=w.dtype, device=w.device)
        shape = (mask.shape[0],) + (1,) * (w.dim() - 3) + (n,)
        padded_rows = ~mask.reshape(shape).unsqueeze(-1)  # (batch, ..., n, 1)
        a = torch.where(padded_rows, eye.expand_as(a), a)
    sums = a.sum(dim=-1, keepdim=True)
    positive = sums > 0
    if bool(positive.all()):
        return a.div_(sums)
    return torch.where(positive, a / torch.where(positive, sums, torch.ones_like(sums)), a)


def augmented(values: torch.Tensor, mask: torch.Tensor, *, residual: float, head_fusion: str | None,
              discard_ratio: float = 0.0, causal_norm: str | None = None) -> torch.Tensor:
    """The per-layer matrices of the attention graph: fuse heads, pad, discard, normalise for the
    receptive field (decoders, optional), add the residual.

    ``values``: ``(batch, layers, heads, n, n)`` -> ``(batch, layers, n, n)``
    (``(batch, layers, heads, n, n)`` when ``head_fusion`` is None).
    """
    check_causal_norm(causal_norm)
    w = apply_padding(fuse_heads(values, head_fusion), mask)
    w = discard_lowest(w, discard_ratio, mask)
    w = normalize_causal(w, causal_norm, mask)
    return add_residual(w, residual, mask)
