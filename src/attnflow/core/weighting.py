"""How much each key contributes to a query: the attention weight, or the norm of what it adds.

``weighting="attention"`` (the paper's): layer ``l``'s map is the (head-fused) attention ``alpha``.

``weighting="norm"`` (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers
with Vector Norms", EMNLP): a head's output at query ``i`` is ``sum_j alpha^h_ij f_h(x_j)`` with
``f_h(x) = (x W_V^h + b_V^h) W_O^h`` the value vector mapped through the head's slice of the output
projection. Key ``j``'s contribution to query ``i`` is the length of its term, summed over heads,

    C_ij = sum_h || alpha^h_ij f_h(x_j) || = sum_h alpha^h_ij ||f_h(x_j)||        (alpha >= 0)

and rows are divided by their sums so that the map is row-stochastic like ``alpha`` (the residual,
causal normalisation, rollout and flow then run on it exactly as on attention). A sink token that
takes most of the attention but carries a short value vector contributes little. Because ``alpha``
is a scalar per (head, query, key), a layer needs only ``||f_h(x_j)||`` per head and key: ``(heads,
n)`` numbers, computed by ``attnflow.capture.values`` while the model runs.

Head fusion: "mean" gives the sum above (a constant factor cancels in the row normalisation); "max"
and "min" take the largest / smallest head's ``alpha^h_ij ||f_h(x_j)||`` before normalising.
"""

from __future__ import annotations

import torch

from attnflow.config.settings import check_choice, choices
from attnflow.core.fusion import fuse_heads
from attnflow.errors import AttnflowError

WEIGHTINGS = choices("weighting")


def check_weighting(weighting: str) -> None:
    check_choice("weighting", weighting)


def norm_weighted(weights: torch.Tensor, norms: torch.Tensor, head_fusion: str = "mean") -> torch.Tensor:
    """The norm-based map of one layer.

    weights: ``(..., heads, q, k)`` attention (row = query); norms: ``(..., heads, k)``, the length of
    each key's transformed value vector per head. Returns ``(..., q, k)`` with rows summing to 1 (a
    row of zeros, e.g. a padded query, stays zero).
    """
    if head_fusion not in choices("head_fusion"):
        raise AttnflowError(f"the norm weighting fuses heads by {', '.join(choices('head_fusion'))}; "
                            f"got {head_fusion!r}")
    if norms.shape[-2] != weights.shape[-3] or norms.shape[-1] != weights.shape[-1]:
        raise AttnflowError(f"norms of shape {tuple(norms.shape)} do not match attention of shape "
                            f"{tuple(weights.shape)} (expected (..., heads, keys))")
    c = fuse_heads(weights * norms.unsqueeze(-2), head_fusion)
    sums = c.sum(dim=-1, keepdim=True)
    return c / torch.where(sums > 0, sums, torch.ones_like(sums))
