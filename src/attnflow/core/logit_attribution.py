"""Logit attribution of attention: how much of the explained logit each source token brings, layer
by layer, split exactly (pure tensor math; ``attnflow.interventions.logit_paths`` collects the inputs).

Shapes (one input; ``L`` layers, ``H`` query heads sharing ``kv`` key/value heads, ``n`` tokens,
``d`` head size, ``D`` hidden size; attention's query axis is the second to last):

- ``attentions (L, H, n, n)``, ``values (L, n, kv, d)`` (what the value projection output, bias included)
- ``grads (L, n, H, d)``: the linear map from layer ``l``'s attention output at position ``p`` (the
  heads' weighted value sums, before ``W_O``) to the explained logit, norms frozen (direct path)
- ``select (targets, n)``: which positions' attention outputs feed target ``i``'s logit
  (a decoder: its own position; a classifier: all of them)

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
    alti_contributions(attentions, values, w_o, residual, chunk=64, dtype=float32) -> C (L, n, n)
    alti_logit(dla, contributions) -> (targets, L, n)
"""

from __future__ import annotations

from typing import Any

import torch


def _expand(values: torch.Tensor, heads: int) -> torch.Tensor:
    """``(L, n, kv, d)`` -> ``(L, n, H, d)``: query head ``h`` reads key/value head ``h // (H / kv)``."""
    kv = values.shape[2]
    return values.repeat_interleave(heads // kv, dim=2) if kv != heads else values


def direct_logit_attribution(attentions: torch.Tensor, values: torch.Tensor, grads: torch.Tensor,
                             select: torch.Tensor) -> torch.Tensor:
    """``(targets, L, n)``: see the module docstring."""
    heads = attentions.shape[1]
    v = _expand(values, heads)
    # (L, p, j, h): v_j^{kv(h)} . grads[l, p, h]
    dots = torch.einsum("ljhd,lphd->lpjh", v, grads)
    per_position = torch.einsum("lhpj,lpjh->lpj", attentions, dots)  # (L, p, j)
    return torch.einsum("ip,lpj->ilj", select.to(per_position.dtype), per_position)


def alti_contributions(attentions: torch.Tensor, values: torch.Tensor, w_o: Any, residual: torch.Tensor,
                       chunk: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ALTI's ``C_l (L, n, n)`` (rows: positions ``t``, columns: contributing tokens ``j``), rows
    summing to one. ``w_o (L, D, H, d)`` (or a list of ``L`` such ``(D, H, d)``): each head's slice of
    the output projection;
    ``residual (L, n, D)``: each layer's input. ``w_o`` may stay on the model's device (views of its
    weights); it is read where ``values`` are. ``chunk`` rows of ``t`` at a time (memory ``chunk n D``).
    Computed in ``dtype`` (float32 by default: contributions only weigh the exact per-layer totals,
    whose sums do not depend on them) and returned as float64. ``L n (H d D + n H D)`` multiply-adds."""
    n_layers, heads, n, _ = attentions.shape
    out = torch.zeros(n_layers, n, n, dtype=torch.float64)
    v = _expand(values, heads).to(dtype)
    att = attentions.to(dtype)
    x = residual.to(dtype)
    for layer in range(n_layers):
        # (H, n, d) @ (H, d, D): each token's transformed value per head
        f = torch.bmm(v[layer].transpose(0, 1), w_o[layer].to(device=v.device, dtype=dtype).permute(1, 2, 0))
        f_by_source = f.transpose(0, 1)  # (j, H, D)
        for start in range(0, n, chunk):
            rows = slice(start, min(n, start + chunk))
            # T[t, j] = sum_h alpha[h, t, j] f[h, j]: per source j, (t, H) @ (H, D)
            t = torch.bmm(att[layer, :, rows].permute(2, 1, 0), f_by_source).transpose(0, 1)  # (chunk, n, D)
            idx = torch.arange(rows.start, rows.stop)
            t[idx - start, idx] += x[layer, rows]
            y = t.sum(1, keepdim=True)
            score = (y.abs().sum(-1) - (y - t).abs().sum(-1)).clamp_min(0).to(torch.float64)  # (chunk, n)
            total = score.sum(-1, keepdim=True)
            out[layer, rows] = torch.where(total > 0, score / torch.where(total > 0, total, 1), 0)
    return out


def alti_logit(dla: torch.Tensor, contributions: torch.Tensor) -> torch.Tensor:
    """``(targets, L, n)``: layer ``l``'s token logit contributions traced to the input with ALTI's
    rollout of the layers below (see the module docstring)."""
    n_layers, n = contributions.shape[0], contributions.shape[-1]
    out = torch.empty_like(dla)
    rolled = torch.eye(n, dtype=contributions.dtype)
    for layer in range(n_layers):
        out[:, layer] = dla[:, layer] @ rolled
        rolled = contributions[layer] @ rolled
    return out
