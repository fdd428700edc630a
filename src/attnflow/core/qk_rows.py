"""Raw attention's and rollout's target rows from each layer's queries and keys, without the maps.

A decoder's explanation of position ``t`` needs, per layer ``l``, raw attention's row ``W_l[t]`` and
rollout's row ``R_l[t] = e_t Â_l Â_{l-1} ⋯ Â_1``, with ``Â = norm((1 - r) W' + r I)`` as in
``attnflow.core.fusion`` (``W`` the head-fused attention, ``W'`` after the optional receptive-field
normalisation of ``attnflow.core.causal``; layers below ``start_layer`` are the identity). Neither
needs the ``(layers, n, n)`` maps: ``v Â`` is a weighted sum of rows of ``Â``, and each row of ``W`` can
be recomputed from the layer's queries and keys as the attention kernel received them (after the
position encoding)::

    W[i, :] = fuse_h softmax_j( mask(i, j) + cap · tanh(scaling · q_h[i] · k_{g(h)}[j] / cap) )

with ``g(h) = h // (heads // kv_heads)`` (grouped-query heads), the soft-cap only where the model has
one (Gemma 2), and the mask causal (``j <= i``), within a sliding window where the layer has one
(transformers' convention: ``i - window < j``, so ``window`` keys including the query's own) and over
real keys only (``key_mask``).

One sweep from the top layer down computes every layer's rows: at each requested layer a chain ``e_t``
joins a stack of row vectors, and the whole stack is multiplied by the layer's ``Â`` once, whose rows
are recomputed in chunks of queries (memory ``chunk × keys × heads``, the chunk chosen from
``memory``), never as a ``(heads, n, n)`` tensor. The raw row of the layer falls out of the chunk that
holds ``t``. Chunks of queries that no chain reaches are skipped (the top layer computes ``t``'s
chunk alone), causal chunks read keys only up to their last query, and windowed ones only from the
window's start. In a decoder nothing after the last target matters: queries and keys beyond it are
never read.

Cost per layer: about ``heads × d × n² / 2`` multiply-adds for the scores (what the model's own
attention spends on ``q kᵀ``) plus ``stack × n² / 2`` for the product, ``stack <= layers ×
positions``. Accumulated in ``dtype`` (float32 by default, float64 in tests) whatever the dtype of the
queries and keys.

The oracle is ``attnflow.core.rollout.rollout_rows`` and ``attnflow.core.raw.raw_rows`` on the
maps the same queries and keys give under eager attention (``tests/test_qk_rows.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnflow.config.registry import row_methods
from attnflow.core.causal import check_causal_norm
from attnflow.core.flow import resolve_indices
from attnflow.core.fusion import check_head_fusion, check_residual
from attnflow.core.rollout import check_start_layer
from attnflow.errors import AttnflowError

# Working memory of one chunk of queries (its scores and softmax, every head, in ``dtype``): 16 MiB holds
# 224 queries' scores over 1,024 keys for SmolLM2's 9 heads, 28 over 8,192. Measured on one CPU core
# (SmolLM2's shapes, random queries and keys): 16 MiB chunks took half the time of 32 MiB ones at 1,024
# tokens (the scores stay in the cache) and were as fast as 4-32 MiB at 4,096.
CHUNK_MEMORY = 16 * 2**20


@dataclass(frozen=True)
class QK:
    """One layer's attention inputs as the attention kernel received them, for one input.

    query: ``(heads, n, d)``; key: ``(kv_heads, n, d)`` with ``heads`` a multiple of ``kv_heads`` (query
    head ``h`` reads key head ``h // (heads // kv_heads)``); any dtype and device.
    scaling: the factor on ``q · k``. softcap: logits become ``softcap * tanh(s / softcap)``, or None.
    window: causal sliding window (query ``i`` sees keys ``j`` with ``i - window < j <= i``), or None.
    """

    query: torch.Tensor
    key: torch.Tensor
    scaling: float
    softcap: float | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        q, k = self.query, self.key
        if q.dim() != 3 or k.dim() != 3 or q.shape[-1] != k.shape[-1] or q.shape[1] != k.shape[1] \
                or k.shape[0] == 0 or q.shape[0] % k.shape[0]:
            raise AttnflowError(f"expected queries (heads, n, d) and keys (kv_heads, n, d) with heads a multiple of "
                                f"kv_heads; got {tuple(q.shape)} and {tuple(k.shape)}")
        if self.window is not None and self.window < 1:
            raise AttnflowError(f"a sliding window must hold at least one key; got {self.window!r}")

    @classmethod
    def received(cls, query: Any, key: Any, window: int | None, **kwargs: Any) -> QK:
        """One input's ``QK`` from an attention kernel's call (``attnflow.hf.points``, ``layers.i.attn.kernel``):
        ``query`` ``(1, heads, n, d)`` and ``key`` detached, the kernel's ``scaling`` (``d ** -0.5`` where it
        gives none) and ``softcap``."""
        scaling = kwargs.get("scaling")
        return cls(query[0].detach(), key[0].detach(), float(query.shape[-1] ** -0.5 if scaling is None else scaling),
                   softcap=kwargs.get("softcap"), window=window)


@dataclass(frozen=True)
class _Rule:
    """What turns one chunk of scores into rows of ``W'`` (shared by every layer of a sweep)."""

    head_fusion: str
    causal: bool
    key_mask: torch.Tensor | None  # (m,) bool on the queries' device, or None
    causal_norm: str | None
    visible: torch.Tensor  # (m,) real keys at or before each query ("keys")
    first: int  # the first real position ("sink")
    dtype: torch.dtype


def target_rows(layers: Sequence[QK], positions: Any, *, methods: Sequence[str] | None = None,
                residual: float = 0.5, head_fusion: str = "mean", start_layer: int = 0, causal: bool = True,
                key_mask: Any = None, causal_norm: str | None = None, memory: int = CHUNK_MEMORY,
                dtype: torch.dtype = torch.float32,
                progress: Callable[[int, int], None] | None = None) -> dict[str, torch.Tensor]:
    """Raw attention's and rollout's rows of ``positions`` at every layer (see the module docstring).

    layers: one ``QK`` per layer, lowest first; read once each, top down (a sequence that loads a
        layer when indexed keeps one layer in memory at a time).
    methods: which of raw attention and rollout to compute (default both: the registry's ``row_methods()``).
    residual, head_fusion ("mean", "max", "min"), start_layer, causal_norm: as in
        ``attnflow.core.rollout.rollout_rows``. key_mask: ``(n,)``, True for real tokens (padded
        positions get zero rows and columns, as there). causal: queries see no later key.
    memory: bytes for one chunk of queries' scores. progress: ``progress(done, total)`` after each layer.

    Returns ``{method: (layers, len(positions), n)}`` in ``dtype`` on the queries' device.
    """
    allowed = row_methods()
    methods = allowed if methods is None else tuple(methods)
    if not methods or any(m not in allowed for m in methods):
        raise AttnflowError(f"methods must be among {allowed}; got {list(methods)!r}")
    if head_fusion is None:
        raise AttnflowError("rows from queries and keys fuse the heads; pass head_fusion 'mean', 'max' or 'min'")
    check_head_fusion(head_fusion)
    check_residual(residual)
    check_causal_norm(causal_norm)
    n_layers = len(layers)
    if n_layers == 0:
        raise AttnflowError("expected the queries and keys of at least one layer; got none")
    start_layer = check_start_layer(start_layer, n_layers)
    first_layer = layers[n_layers - 1]
    n, device = first_layer.key.shape[1], first_layer.query.device
    pos = torch.as_tensor(resolve_indices(positions, n, "positions"), dtype=torch.long)
    m = int(pos.max()) + 1 if causal else n  # a decoder reads nothing after its last target
    rule = _rule(key_mask, n, m, device, head_fusion=head_fusion, causal=causal, causal_norm=causal_norm,
                 dtype=dtype)
    p = len(pos)
    out = {method: torch.zeros(n_layers, p, n, dtype=dtype, device=device) for method in methods}
    chains = torch.zeros(0, m, dtype=dtype, device=device)
    starts = torch.zeros(p, m, dtype=dtype, device=device)
    starts[torch.arange(p), pos.to(device)] = 1.0
    offset: dict[int, int] = {}
    for done, layer in enumerate(range(n_layers - 1, -1, -1)):
        qk = first_layer if layer == n_layers - 1 else layers[layer]
        _check_layer(qk, n, layer)
        # a model dispatched over devices: its layers' inputs come to the top's; and laid out as (heads, n, d)
        # (the kernel received a transposed view): each chunk's matrix product reads them in that order
        qk = QK(qk.query.to(device).contiguous(), qk.key.to(device).contiguous(), qk.scaling, qk.softcap, qk.window)
        if "rollout" in out:
            offset[layer] = chains.shape[0]
            chains = torch.cat([chains, starts])
        rolled = "rollout" in out and layer >= start_layer
        product, raw = _times_layer(qk, chains if rolled else None, pos, rule, residual, memory)
        if rolled:  # below start_layer the layers are the identity
            chains = product
        if "raw" in out:
            out["raw"][layer, :, :m] = raw
        if progress is not None:
            progress(done + 1, n_layers)
    if "rollout" in out:
        rows = torch.stack([chains[offset[layer]:offset[layer] + p] for layer in range(n_layers)])
        out["rollout"][..., :m] = rows
    if rule.key_mask is not None:  # as rollout_rows: padded queries' rows are zero
        real = rule.key_mask[pos.to(device)].to(dtype)[None, :, None]
        for method in out:
            out[method] *= real
    return out


def _check_layer(qk: Any, n: int, layer: int) -> None:
    if not isinstance(qk, QK):
        raise AttnflowError(f"layer {layer}: expected a QK (queries and keys); got {type(qk).__name__}")
    if qk.key.shape[1] != n:
        raise AttnflowError(f"layer {layer} has {qk.key.shape[1]} positions; the top layer has {n}")


def _rule(key_mask: Any, n: int, m: int, device: Any, **facts: Any) -> _Rule:
    if key_mask is None:
        visible = torch.arange(1, m + 1, dtype=facts["dtype"], device=device)
        return _Rule(key_mask=None, visible=visible, first=0, **facts)
    mask = torch.as_tensor(key_mask, device=device)
    if mask.shape != (n,):
        raise AttnflowError(f"key_mask must have shape ({n},); got {tuple(mask.shape)}")
    mask = mask.bool()[:m]
    visible = mask.to(facts["dtype"]).cumsum(0)
    first = int(mask.to(torch.int64).argmax()) if bool(mask.any()) else 0
    return _Rule(key_mask=mask, visible=visible, first=first, **facts)


def chunk_size(heads: int, keys: int, itemsize: int, memory: int) -> int:
    """Queries per chunk: their scores and softmax over ``keys`` keys for ``heads`` heads (two arrays of
    ``itemsize`` bytes per entry) plus the mask (one byte) within ``memory`` bytes; at least one."""
    return max(1, int(memory) // max(1, keys * (2 * heads * itemsize + 1)))


def _times_layer(qk: QK, chains: torch.Tensor | None, pos: torch.Tensor, rule: _Rule, residual: float,
                 memory: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``chains @ Â`` (None when not rolling out) and the raw rows ``W'[pos]`` ``(len(pos), m)`` of one
    layer, its rows recomputed chunk by chunk."""
    m = rule.visible.shape[0]
    raw = torch.zeros(len(pos), m, dtype=rule.dtype, device=rule.visible.device)
    out = None if chains is None else torch.zeros_like(chains)
    step = min(m, chunk_size(qk.query.shape[0], m, torch.finfo(rule.dtype).bits // 8, memory))
    targets = pos.tolist()
    for q0 in range(0, m, step):
        q1 = min(m, q0 + step)
        here = [i for i, t in enumerate(targets) if q0 <= t < q1]
        part = None if chains is None else chains[:, q0:q1]
        if not here and (part is None or not bool(part.any())):
            continue  # no chain reaches these queries and no target is among them
        lo = max(0, q0 - qk.window + 1) if rule.causal and qk.window is not None else 0
        hi = q1 if rule.causal else m
        if part is None:  # raw rows alone: the targets' queries, not the whole chunk
            rows = torch.as_tensor([targets[i] for i in here], dtype=torch.long)
            w = _weights(qk, rows, lo, hi, rule)
        else:
            w = _weights(qk, torch.arange(q0, q1), lo, hi, rule)
        for j, i in enumerate(here):
            raw[i, lo:hi] = w[j if part is None else targets[i] - q0]
        if part is None:
            continue
        real = torch.ones(q1 - q0, dtype=rule.dtype, device=w.device) if rule.key_mask is None \
            else rule.key_mask[q0:q1].to(rule.dtype)
        # row i of Â: ((1 - r) W'[i] + d_i e_i) / s_i, with d_i = r (a padded query: 1, its W' row is 0)
        self_loop = real * residual + (1.0 - real)
        sums = (1.0 - residual) * w.sum(dim=-1) + self_loop
        scale = torch.where(sums > 0, 1.0 / torch.where(sums > 0, sums, 1.0), 0.0)
        scaled = part * scale
        out[:, lo:hi] += ((1.0 - residual) * scaled) @ w
        out[:, q0:q1] += scaled * self_loop
    return out, raw


def head_weights(qk: QK, queries: torch.Tensor, lo: int, hi: int, *, causal: bool = True,
                 key_mask: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every head's attention ``(heads, len(queries), hi - lo)`` of ``queries`` over keys ``lo:hi`` (in
    ``dtype``): the softmax of the masked, scaled and soft-capped logits of the module docstring; a query
    that sees no key gets a zero row. What a chunked attention computes its output from. ``lo:hi`` must
    hold every key a query may see (the masks are applied within it)."""
    device = qk.query.device
    queries = queries.to(device)
    heads, kv_heads, d = qk.query.shape[0], qk.key.shape[0], qk.query.shape[-1]
    c, group = len(queries), heads // kv_heads
    # the scaling on the chunk's queries (c x d numbers) rather than on its scores (c x keys per head); a
    # run of consecutive queries (a chunk) is sliced, not gathered: index_select took a quarter of the sweep
    first = int(queries[0]) if c else 0
    if c and int(queries[-1]) - first + 1 == c and (c == 1 or bool((queries.diff() == 1).all())):
        q = qk.query[:, first:first + c].to(dtype) * qk.scaling
    else:
        q = qk.query.index_select(1, queries).to(dtype).mul_(qk.scaling)
    q = q.reshape(kv_heads, group * c, d)
    k = qk.key[:, lo:hi].to(dtype)
    s = torch.matmul(q, k.transpose(-1, -2)).reshape(heads, c, hi - lo)
    if qk.softcap is not None:
        s.div_(qk.softcap).tanh_().mul_(qk.softcap)
    _hide(s, queries, lo, hi, causal, qk.window)
    if key_mask is not None:
        s.masked_fill_(~key_mask[lo:hi], float("-inf"))
    s = torch.softmax(s, dim=-1)
    # a query that sees no key (a padded one) gets a zero row, not the NaN of an all -inf softmax
    return s.nan_to_num_(0.0) if key_mask is not None else s


def _hide(s: torch.Tensor, queries: torch.Tensor, lo: int, hi: int, causal: bool, window: int | None) -> None:
    """Set to -inf the scores ``s`` ``(heads, len(queries), hi - lo)`` of keys a query may not see (later
    ones; outside its window), writing only the key columns where some query of the chunk has such a key:
    a pass over the whole chunk cost half as much as its scores' matrix product (measured at 4,096 keys)."""
    if not causal:
        return
    spans = []
    first, last = int(queries.min()), int(queries.max())
    if first + 1 < hi:
        spans.append((max(lo, first + 1), hi))
    if window is not None and last - window + 1 > lo:
        spans.append((lo, min(hi, last - window + 1)))
    for a, b in spans:
        keys = torch.arange(a, b, device=s.device)[None, :]
        hidden = keys > queries[:, None]
        if window is not None:
            hidden |= keys <= queries[:, None] - window
        s[:, :, a - lo:b - lo].masked_fill_(hidden, float("-inf"))


def _weights(qk: QK, queries: torch.Tensor, lo: int, hi: int, rule: _Rule) -> torch.Tensor:
    """``W'`` rows ``(len(queries), hi - lo)``: the fused attention of ``queries`` over keys ``lo:hi``,
    normalised as the module docstring says; padded queries' rows are 0."""
    queries = queries.to(qk.query.device)
    s = head_weights(qk, queries, lo, hi, causal=rule.causal, key_mask=rule.key_mask, dtype=rule.dtype)
    if rule.head_fusion == "mean":
        w = s.mean(dim=0)
    elif rule.head_fusion == "max":
        w = s.amax(dim=0)
    else:
        w = s.amin(dim=0)
    del s
    if rule.key_mask is not None:
        w *= rule.key_mask[queries][:, None].to(rule.dtype)
    if rule.causal_norm == "keys":
        w *= rule.visible[queries][:, None]
    elif rule.causal_norm == "sink" and lo <= rule.first < hi:
        w[queries != rule.first, rule.first - lo] = 0.0
    return w
