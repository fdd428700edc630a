"""Attention rollout (Abnar & Zuidema 2020, section 3).

With ``A_l`` the residual-augmented, head-fused attention of layer ``l`` (see
``attnflow.core.fusion``), rollout multiplies the layers, higher layer on the left::

    R_1 = A_1,   R_l = A_l @ R_{l-1}

Row ``q`` of ``R_l`` is how much position ``q`` at layer ``l`` draws on each input token, assuming
attention weights combine linearly along every path of the layered attention graph. Each ``A_l`` is
row-stochastic, so each ``R_l`` is too. Cost: ``O(layers * n^3)``.

Most uses need a few rows, not the whole maps: ``explain`` reads one target. Row ``q`` of ``R_l`` is
``e_q^T A_l A_{l-1} ... A_1``, which ``rollout_rows`` evaluates from the top down, one
vector-matrix product per layer: ``O(l * n^2)`` for one layer's row, ``O(L^2 * n^2)`` for a position's
rows at all ``L`` layers, against ``O(L * n^3)`` for the full maps (at 2,048 tokens and 30 layers
about 70 times less work), and no ``(layers, n, n)`` result to hold.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from attnflow.core.flow import resolve_indices
from attnflow.core.fusion import apply_padding, augmented, check_residual, fuse_heads
from attnflow.core.inputs import Stack, as_stack
from attnflow.core.maps import check_fusion
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


def check_start_layer(start_layer: Any, n_layers: int) -> int:
    """``start_layer`` as a layer index in ``[0, n_layers)`` (negative counts from the top), or a refusal."""
    if isinstance(start_layer, bool) or not isinstance(start_layer, numbers.Integral) \
            or not (-n_layers <= start_layer < n_layers):
        raise AttnflowError(f"start_layer must be an integer layer index in [0, {n_layers}); got {start_layer!r}")
    return int(start_layer) % n_layers


def rollout(attentions: Any, *, residual: float = 0.5, head_fusion: str | None = "mean",
            discard_ratio: float = 0.0, start_layer: int = 0, mask: Any = None,
            causal_norm: str | None = None) -> Any:
    """Attention rollout for every layer: ``R_1 = A_1``, ``R_l = A_l @ R_{l-1}``.

    ``A_l`` is layer ``l``'s head-fused attention with the residual added, ``(1 - residual) W +
    residual I``, rows re-normalised. ``R[l, q]`` is how much position ``q`` at layer ``l + 1`` draws
    on each input token. Cost: ``O(layers * n^3)``.

    Args:
        attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a Hugging Face
            per-layer tuple, or ``AttentionMaps``. Row = query, column = key.
        residual: Weight of the identity in ``A = (1 - residual) W + residual I`` (rows
            re-normalised); 0 disables the residual.
        head_fusion: ``"mean"``, ``"max"``, ``"min"``, or None (roll out each head separately).
        discard_ratio: Fraction of each fused layer's smallest off-diagonal weights set to 0 before
            the residual is added (the diagonal and padded positions are never counted or touched).
        start_layer: 0-based layer where rolling out starts; layers below it are the identity.
        mask: Optional padding mask, True for real tokens; padded positions never receive attention
            and their rows and columns in the result are 0.
        causal_norm: Receptive-field normalisation for decoders: None (the paper's), ``"keys"`` or
            ``"sink"``; see ``attnflow.core.causal``.

    Returns:
        ``R`` of shape ``(layers, n, n)`` (``(layers, heads, n, n)`` when ``head_fusion`` is None),
            plus a leading batch axis for batched input; numpy in, numpy out; torch in, torch out.
            Every real row sums to 1.

    Raises:
        AttnflowError: Attention of another shape, a residual outside [0, 1], or an unknown fusion.

    Examples:
        >>> import attnflow, torch
        >>> attentions = torch.rand(6, 8, 7, 7).softmax(-1)  # (layers, heads, n, n)
        >>> R = attnflow.rollout(attentions)
        >>> R.shape  # R[l, q]: position q at layer l + 1 over the input tokens
        torch.Size([6, 7, 7])
        >>> bool(torch.allclose(R.sum(-1), torch.ones(6, 7)))
        True
    """
    check_fusion(attentions, head_fusion)
    stack = as_stack(attentions, mask)
    return stack.out(_full(stack, residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio,
                           start_layer=check_start_layer(start_layer, stack.shape[1]), causal_norm=causal_norm))


def _full(stack: Stack, *, residual: float, head_fusion: str | None, discard_ratio: float, start_layer: int,
          causal_norm: str | None) -> torch.Tensor:
    a = augmented(stack.values, stack.mask, residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio,
                  causal_norm=causal_norm)
    if head_fusion is None:  # (batch, layers, heads, n, n): roll out heads separately
        r = rollout_matrices(a.transpose(1, 2), start_layer).transpose(1, 2)
    else:
        r = rollout_matrices(a, start_layer)
    return apply_padding(r, stack.mask)


def rollout_rows(attentions: Any, positions: Any, *, layers: Any = None, residual: float = 0.5,
                 head_fusion: str | None = "mean", discard_ratio: float = 0.0, start_layer: int = 0,
                 mask: Any = None, causal_norm: str | None = None) -> Any:
    """Rollout rows of chosen query ``positions`` at chosen ``layers``, without the full maps.

    Equal to ``rollout(...)[layers][:, positions]`` (same parameters, same conventions), computed
    from the top down: the row vectors of every requested layer are stacked as they are reached and
    multiplied by each ``A_l`` in turn, so every layer costs one ``(rows, n) @ (n, n)`` product and
    only one layer's augmented matrix exists at a time. Cost ``O(len(positions) * sum over requested
    layers l of (l + 1) * n^2)``; memory ``O(len(positions) * len(layers) * n)`` beyond the input.

    When that many rows cost more than the full maps (see ``rows_are_cheaper``; e.g. every
    position), the full maps are computed and sliced instead.

    Returns ``(len(layers), len(positions), n)`` (``(len(layers), heads, len(positions), n)`` when
    ``head_fusion`` is None), with a leading batch axis for batched input.
    """
    check_fusion(attentions, head_fusion)
    stack = as_stack(attentions, mask)
    batch, n_layers, heads, n, _ = stack.shape
    start_layer = check_start_layer(start_layer, n_layers)
    layer_idx = resolve_indices(layers, n_layers, "layers").tolist()
    pos_idx = torch.as_tensor(resolve_indices(positions, n, "positions"), dtype=torch.long, device=stack.values.device)
    if not rows_are_cheaper(n, len(pos_idx), layer_idx):
        r = _full(stack, residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio,
                  start_layer=start_layer, causal_norm=causal_norm)
        return stack.out(r[:, layer_idx][..., pos_idx, :])
    values = stack.values
    lead = (batch,) if head_fusion is not None else (batch, heads)
    one_hot = torch.zeros(len(pos_idx), n, dtype=values.dtype, device=values.device)
    one_hot[torch.arange(len(pos_idx)), pos_idx] = 1.0
    rows = one_hot.new_zeros(lead + (0, n))
    offset: dict[int, int] = {}
    # Without padding, discarding or the sink rule, A_l = D (c (1-r) W + r I) with D = 1 / row sums and
    # c the optional per-row "keys" factor, so v A_l = ((1-r) c D v) W + r D v: one pass for the row
    # sums and one product per layer, and no (n, n) matrix is written (at 2,048 tokens writing the
    # augmented matrix costs more than the product itself).
    direct = bool(stack.mask.all()) and discard_ratio == 0.0 and causal_norm in (None, "keys")
    causal = bool(getattr(attentions, "causal", False))  # AttentionMaps of a decoder: W is lower-triangular
    check_residual(residual)
    keys = torch.arange(1, n + 1, dtype=values.dtype, device=values.device) if causal_norm == "keys" else None
    for layer in range(max(layer_idx), -1, -1):
        if layer in layer_idx and layer not in offset:
            offset[layer] = rows.shape[-2]
            rows = torch.cat([rows, one_hot.expand(lead + one_hot.shape)], dim=-2)
        if layer < start_layer:
            continue
        if direct:
            w = fuse_heads(values[:, layer], head_fusion)  # (batch, [heads,] n, n); a view for fused maps
            c = (1.0 - residual) * (keys if keys is not None else torch.ones(n, dtype=w.dtype, device=w.device))
            rows = _times_augmented(rows, w, c, residual, causal)
        else:
            a = augmented(values[:, layer:layer + 1], stack.mask, residual=residual, head_fusion=head_fusion,
                          discard_ratio=discard_ratio, causal_norm=causal_norm)[:, 0]
            rows = rows @ a
    p = len(pos_idx)
    out = torch.stack([rows[..., offset[layer]:offset[layer] + p, :] for layer in layer_idx], dim=1)
    if not bool(stack.mask.all()):  # as in apply_padding: padded queries and keys get zeros
        shape = (batch,) + (1,) * (out.dim() - 3)
        keys = stack.mask.reshape(shape + (1, n)).to(out.dtype)
        queries = stack.mask[:, pos_idx].reshape(shape + (p, 1)).to(out.dtype)
        out = out * keys * queries
    return stack.out(out)


CAUSAL_BLOCK = 256


def _times_augmented(rows: torch.Tensor, w: torch.Tensor, c: torch.Tensor, residual: float,
                     causal: bool) -> torch.Tensor:
    """``rows @ A`` for ``A = D (c W + r I)``, ``D`` the inverse row sums (0 for an all-zero row).

    ``rows``: ``(..., k, n)``; ``w``: ``(..., n, n)``; ``c``: ``(n,)`` per-query factors. For a
    lower-triangular ``w`` the work goes block by block of queries, each block ``Q`` reading only
    the keys up to its last query: half the reads and multiply-adds of the dense product, and each
    block's row sums and product come from the same cached rows.
    """
    n = w.shape[-1]
    step = CAUSAL_BLOCK if causal else n
    out = torch.zeros_like(rows)
    for q0 in range(0, n, step):
        q1 = min(n, q0 + step)
        block = w[..., q0:q1, :q1]
        sums = c[q0:q1] * block.sum(dim=-1) + residual
        scaled = rows[..., q0:q1] * torch.where(sums > 0, 1.0 / torch.where(sums > 0, sums, 1.0), 0.0).unsqueeze(-2)
        out[..., :q1] += (scaled * c[q0:q1]) @ block
        out[..., q0:q1] += residual * scaled
    return out


def rows_are_cheaper(n: int, n_positions: int, layers: list[int]) -> bool:
    """Whether ``rollout_rows`` costs fewer multiply-adds than the full maps for these rows:
    ``n_positions * sum(l + 1) * n^2`` against ``(max(l) + 1) * n^3``."""
    return n_positions * sum(layer + 1 for layer in layers) < (max(layers) + 1) * n
