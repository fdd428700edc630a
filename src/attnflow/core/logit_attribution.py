"""Logit attribution of attention: how much of the explained logit each source token brings, layer
by layer, split exactly (pure tensor math; ``attnflow.interventions.logit_paths`` collects the inputs).

Shapes (one input; ``L`` layers, ``H`` query heads sharing ``kv`` key/value heads, ``n`` tokens,
``d`` head size, ``D`` hidden size; attention's query axis is the second to last):

- ``attentions (L, H, P, n)``: the query rows of ``P`` positions (every position, or only those a
  target reads: a decoder's own; see ``select``), ``values (L, n, kv, d)`` (what the value projection
  output, bias included)
- ``grads (L, P, H, d)``: the linear map from layer ``l``'s attention output at position ``p`` (the
  heads' weighted value sums, before ``W_O``) to the explained logit, norms frozen (direct path)
- ``select (targets, P)``: which positions' attention outputs feed target ``i``'s logit
  (a decoder: its own position, the only one whose row it needs; a classifier: all of them)

**Direct logit attribution** (DLA) of attention outputs: layer ``l``'s attention output at ``p`` is
``ctx_l[p] = sum_j sum_h alpha[l, h, p, j] v[l, j, kv(h)]`` (per head), so its part of the logit,
``grads[l, p] . ctx_l[p]``, splits exactly over the source tokens ``j``::

    dla[i, l, j] = sum_p select[i, p] sum_h alpha[l, h, p, j] (v[l, j, kv(h)] . grads[l, p, h])

and ``sum_j dla[i, l, j]`` is the attention part of the logit at layer ``l`` (to round-off).

**ALTI-Logit** (Ferrando, Gállego, Tsiamas & Costa-jussà, ACL 2023, "Explaining How Transformers Use
Context to Build Predictions"): layer ``l``'s logit update is split over the tokens *at its input*
(``dla[:, l]``), and each of those layer-input tokens is traced back to the input tokens with ALTI
(Ferrando et al., EMNLP 2022): the contribution of ``x_j`` to position ``t``'s attention block
output (attention plus residual), ``T_t(x_j) = sum_h alpha[h, t, j] v_j^h W_O^h + [t = j] x_t``,
scored ``max(0, ||y_t||_1 - ||y_t - T_t(x_j)||_1)`` with ``y_t = sum_j T_t(x_j)`` and normalised
over ``j`` (``C_l``, rows sum to one; feed-forward blocks act per token and pass contributions on),
rolled out ``R_l = C_l R_{l-1}``. Then::

    alti_logit[i, l, :] = dla[i, l, :] @ R_{l-1}        (R_{-1} = identity)

Rows of ``R`` sum to one, so ``alti_logit[i, l].sum() == dla[i, l].sum()``: the same exact per-layer
total. Departures from the paper: the distance is taken on the residual stream before any post-layer
normalisation (post-LN encoders normalise it; the paper's decoders are pre-LN), and the output
projection's bias belongs to no token.

API (stable)::

    direct_logit_attribution(attentions, values, grads, select) -> (targets, L, n)
    alti_scores(attentions_l, values_l, w_o_l, residual_l, chunk=64, dtype=float32) -> (n, n), one layer
    alti_normalised(scores_l) -> C_l (n, n) float64
    alti_contributions(attentions, values, w_o, residual, chunk=64, dtype=float32) -> C (L, n, n)
    alti_logit(dla, contributions) -> (targets, L, n)

Memory: ALTI needs each layer's full ``(H, n, n)`` weights, but only one layer's at a time
(``alti_scores``, while the model runs); the rollout holds ``R (n, n)``. DLA needs only the rows
``select`` reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def _expand(values: torch.Tensor, heads: int) -> torch.Tensor:
    """``(..., n, kv, d)`` -> ``(..., n, H, d)``: query head ``h`` reads key/value head ``h // (H / kv)``."""
    kv = values.shape[-2]
    return values.repeat_interleave(heads // kv, dim=-2) if kv != heads else values


def direct_logit_attribution(attentions: torch.Tensor, values: torch.Tensor, grads: torch.Tensor,
                             select: torch.Tensor) -> torch.Tensor:
    """``(targets, L, n)``: see the module docstring. ``attentions (L, H, P, n)`` holds the query rows
    of the ``P`` positions ``grads (L, P, H, d)`` and ``select (targets, P)`` are taken at (all ``n``, or
    a decoder's targets alone); any float dtype, computed in float64 one layer at a time."""
    n_layers, heads = attentions.shape[:2]
    out = torch.empty(select.shape[0], n_layers, attentions.shape[-1], dtype=torch.float64)
    chosen = select.to(torch.float64)
    for layer in range(n_layers):
        v = _expand(values[layer].to(torch.float64), heads)  # (j, h, d)
        dots = torch.einsum("jhd,phd->pjh", v, grads[layer].to(torch.float64))  # v_j^{kv(h)} . grads[l, p, h]
        per_position = torch.einsum("hpj,pjh->pj", attentions[layer].to(torch.float64), dots)  # (p, j)
        out[:, layer] = chosen @ per_position
    return out


def alti_scores(attentions: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor, residual: torch.Tensor,
                chunk: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One layer's unnormalised ALTI scores ``(n, n)`` in ``dtype``: ``max(0, ||y_t||_1 - ||y_t -
    T_t(x_j)||_1)`` (rows ``t``, columns ``j``). ``attentions (H, n, n)``, ``values (n, kv, d)``, ``w_o
    (D, H, d)`` (may stay on the model's device, a view of its weights), ``residual (n, D)``: the layer's
    input; any float dtypes, read in ``dtype``. ``chunk`` rows of ``t`` at a time (working memory about
    ``2 chunk n D`` numbers, beside ``H n D`` for the heads' transformed values); a chunk's columns stop
    at its last non-zero weight (a decoder's causal mask: about half the work), where every later
    column scores exactly 0 anyway. ``n (H d D + n H D)`` multiply-adds at most."""
    heads, n, _ = attentions.shape
    scores = torch.zeros(n, n, dtype=dtype)
    v = _expand(values, heads).to(dtype)
    # (H, n, d) @ (H, d, D): each token's transformed value per head
    f = torch.bmm(v.transpose(0, 1), w_o.to(device=v.device, dtype=dtype).permute(1, 2, 0))
    f_by_source = f.transpose(0, 1)  # (j, H, D)
    del v
    for start in range(0, n, chunk):
        rows = slice(start, min(n, start + chunk))
        att = attentions[:, rows].to(dtype)  # (H, chunk, n)
        used = att.ne(0).any(1).any(0).nonzero()
        end = max(int(used[-1]) + 1 if len(used) else 0, rows.stop)  # the diagonal is always counted
        # T[t, j] = sum_h alpha[h, t, j] f[h, j]: per source j, (t, H) @ (H, D)
        t = torch.bmm(att[..., :end].permute(2, 1, 0), f_by_source[:end]).transpose(0, 1)  # (chunk, end, D)
        del att
        idx = torch.arange(rows.start, rows.stop)
        t[idx - start, idx] += residual[rows].to(dtype)
        y = t.sum(1, keepdim=True)
        distance = torch.sub(y, t, out=t).abs_().sum(-1)  # (y - t) in place of t: one (chunk, end, D) at a time
        scores[rows, :end] = (y.abs().sum(-1) - distance).clamp_min(0)
    return scores


def alti_normalised(scores: torch.Tensor) -> torch.Tensor:
    """ALTI's ``C_l (n, n)`` float64 from ``alti_scores``: each row over its sum (rows sum to one; an
    all-zero row stays zero)."""
    score = scores.to(torch.float64)
    total = score.sum(-1, keepdim=True)
    return torch.where(total > 0, score / torch.where(total > 0, total, 1), 0)


def alti_contributions(attentions: torch.Tensor, values: torch.Tensor, w_o: Any, residual: torch.Tensor,
                       chunk: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ALTI's ``C_l (L, n, n)`` (rows: positions ``t``, columns: contributing tokens ``j``), rows
    summing to one, float64. ``attentions (L, H, n, n)``, ``values (L, n, kv, d)``, ``w_o (L, D, H, d)``
    (or a list of ``L`` such ``(D, H, d)``): each head's slice of the output projection; ``residual (L,
    n, D)``: each layer's input. Scores computed in ``dtype`` (float32 by default: contributions only
    weigh the exact per-layer totals, whose sums do not depend on them), one layer at a time
    (``alti_scores``, which the logit paths run on each layer as the model runs)."""
    return torch.stack([alti_normalised(alti_scores(attentions[layer], values[layer], w_o[layer], residual[layer],
                                                    chunk, dtype)) for layer in range(attentions.shape[0])])


def alti_logit(dla: torch.Tensor, contributions: Iterable[torch.Tensor]) -> torch.Tensor:
    """``(targets, L, n)``: layer ``l``'s token logit contributions traced to the input with ALTI's
    rollout of the layers below (see the module docstring). ``contributions``: ``C (L, n, n)``, or any
    iterable of the ``L`` layers' ``C_l`` (e.g. normalised one at a time from ``alti_scores``)."""
    n = dla.shape[-1]
    out = torch.empty_like(dla)
    rolled = torch.eye(n, dtype=torch.float64)
    for layer, c in enumerate(contributions):
        out[:, layer] = dla[:, layer] @ rolled.to(dla.dtype)
        rolled = c.to(torch.float64) @ rolled
    return out
