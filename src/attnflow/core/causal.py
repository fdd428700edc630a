"""Receptive-field normalisation for decoders (causal attention), an extension the paper suggests.

In a decoder, query ``q`` sees only the ``v_q`` real keys at or before it (``v_q = q + 1`` without
padding), so early rows are concentrated on few keys and every row leans on the first token, which
most heads use as an "attention sink" (a no-op target). Both options below act on the head-fused
weights ``W`` of each layer, row by row, before the residual ``A = norm((1-r) W' + r I)`` of
``attnflow.core.fusion``; rows of ``A`` still sum to 1. Each row depends only on that row and its
position, so earlier rows never change when tokens are appended (incremental generation stays exact).

- ``None`` (default): ``W' = W``, the paper's method.
- ``"keys"``: ``W'[q, :] = v_q * W[q, :]``. Attention is weighed against the residual by how many keys
  the query could read: a query that spread its attention over ``v_q`` keys mixes ``v_q`` times
  as strongly as one that could only look at itself, so the identity no longer dominates later rows
  merely because each of their attention weights is small. The effective residual of row ``q`` is
  ``r / (r + (1-r) v_q)``.
- ``"sink"``: ``W'[q, s] = 0`` for every ``q != s``, ``s`` the first real position. Attention to the
  sink is read as "the head did nothing", so that mass is dropped rather than moved to other keys;
  the row re-normalisation of ``A`` then gives the residual its share.
"""

from __future__ import annotations

import torch

from attnflow.config.settings import check_choice, choices

CAUSAL_NORMS = choices("causal_norm")


def check_causal_norm(causal_norm: str | None) -> None:
    check_choice("causal_norm", causal_norm)


def normalize_causal(w: torch.Tensor, causal_norm: str | None, mask: torch.Tensor) -> torch.Tensor:
    """Apply ``causal_norm`` to fused weights ``w`` ``(batch, ..., n, n)`` (row = query); ``mask``
    ``(batch, n)``, True for real tokens."""
    check_causal_norm(causal_norm)
    if causal_norm is None:
        return w
    shape = (mask.shape[0],) + (1,) * (w.dim() - 3) + (mask.shape[1],)
    if causal_norm == "keys":
        visible = mask.to(w.dtype).cumsum(dim=-1).reshape(shape).unsqueeze(-1)  # (batch, ..., n, 1)
        return w * visible
    n = w.shape[-1]
    first = mask.to(torch.int64).argmax(dim=-1)  # first real position per example
    sink_col = torch.nn.functional.one_hot(first, n).to(torch.bool).reshape(shape).unsqueeze(-2)
    sink_row = torch.nn.functional.one_hot(first, n).to(torch.bool).reshape(shape).unsqueeze(-1)
    return w.masked_fill(sink_col & ~sink_row, 0.0)


def augment_last_row(w_row: torch.Tensor, residual: float, causal_norm: str | None) -> torch.Tensor:
    """The residual-augmented row of the LAST query of an unpadded sequence.

    ``w_row``: ``(..., t+1)``, fused attention of the query at position ``t`` over keys ``0..t``.
    Equals row ``t`` of ``attnflow.core.fusion.augmented`` on the full matrix.
    """
    check_causal_norm(causal_norm)
    t = w_row.shape[-1] - 1
    if causal_norm == "keys":
        w_row = w_row * (t + 1)
    elif causal_norm == "sink" and t > 0:
        w_row = w_row.clone()
        w_row[..., 0] = 0.0
    a = (1.0 - residual) * w_row
    a[..., t] = a[..., t] + residual
    sums = a.sum(dim=-1, keepdim=True)
    return torch.where(sums > 0, a / torch.where(sums > 0, sums, torch.ones_like(sums)), a)
