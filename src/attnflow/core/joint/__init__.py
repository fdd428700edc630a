"""Rollout and flow over the joint encoder-decoder attention graph (T5, BART, Marian, mBART, Pegasus, ...).

An encoder-decoder model has three kinds of attention: encoder self-attention over the ``S`` source
tokens, decoder (causal) self-attention over the ``T`` decoder input tokens, and cross-attention from
each decoder position to the encoder's output. Every decoder layer ``l`` has two attention sublayers,
each inside a residual connection: ``h' = h + SelfAttn(h)``, then ``h'' = h' + CrossAttn(h', enc)``.
Giving both the paper's residual treatment (weight ``r``, default 0.5), a decoder position's output
mixes the encoder's output and the decoder's previous layer as

    J_l = [ (1 - r) C_l  |  r A_l ]        (T x (S + T); each row sums to 1)

with ``C_l`` the head-fused cross-attention (rows re-normalised to 1) and ``A_l = norm((1-r) W_l + r I)``
the residual-augmented decoder self-attention (``attnflow.core.fusion``). The joint graph has a node
per (encoder layer ``k = 0..Le``, source position) and per (decoder layer ``l = 0..Ld``, decoder
position), layer 0 being the embeddings; encoder node ``(k, q)`` has edges to ``(k-1, j)`` of weight
``A^enc_k[q, j]``, decoder node ``(l, t)`` has edges to the encoder's top node ``(Le, j)`` of weight
``J_l[t, j]`` and to ``(l-1, u)`` of weight ``J_l[t, S+u]``. The inputs are the source tokens and the
decoder input tokens together: ``S + T`` columns, source first.

**Joint rollout** multiplies along every path. With ``E = A^enc_Le ... A^enc_1`` (the encoder's rollout,
``S x S``) and ``D_0 = [0 | I_T]``::

    D_l = J_l [[E, 0], [D_{l-1}]]  =  (1 - r) C_l [E | 0]  +  r A_l D_{l-1}

so row ``t`` of ``D_l`` is how decoder position ``t`` at layer ``l`` draws on every source token and
every decoder input token up to ``t`` (rows sum to 1; columns after ``S + t`` are 0 by causality). This
is the construction of ALTI+ (Ferrando, Gállego, Alastruey, Escolano & Costa-jussà 2022, "Towards
Opening the Black Box of Neural Machine Translation: Source and Target Contributions in the Model",
EMNLP; arXiv:2205.11631): the decoder's per-layer mixing of encoder outputs and target prefix is
composed with the encoder's own rolled-out mixing, layer by layer. ALTI+ weighs edges by norm-based
contributions; here they are attention weights with the residual of Abnar & Zuidema (2020), so with
an empty source it reduces to the paper's rollout of the decoder.

**Joint flow** is the paper's flow on the same graph: edge weights are capacities, and the score of an
input token for node ``(l, t)`` is the max-flow from it to that token's embedding node (rows divided by
their sum with ``normalize=True``). The graph is computed by embedding it in an ordinary layered graph
of ``Le + Ld`` layers over ``S + T`` positions (``stacked_layers``: encoder layers carry the decoder
positions unchanged, decoder layers carry the source positions unchanged, capacity 1), whose max-flows
equal the joint graph's because the flow out of any one node is at most 1; the networkx oracle
(``attnflow.core.joint.oracle``) builds the joint graph itself.

Shapes: ``encoder (Le, heads, S, S)``, ``decoder (Ld, heads, T, T)``, ``cross (Ld, heads, T, S)``; row
= query. Results ``(Ld, T, S + T)`` for every decoder layer and position (numpy in -> numpy out).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from attnflow.core.flow import flow as layered_flow
from attnflow.core.flow import resolve_indices
from attnflow.core.fusion import augmented, check_head_fusion, check_residual, fuse_heads
from attnflow.core.rollout import rollout as layered_rollout
from attnflow.core.rollout import rollout_matrices
from attnflow.errors import AttnflowError


def _single(attentions: Any, what: str) -> tuple[torch.Tensor, bool]:
    """One input's ``(layers, heads, n, m)`` as float64 (a Hugging Face tuple with a batch of one too)."""
    if isinstance(attentions, (tuple, list)):
        attentions = [torch.as_tensor(np.asarray(a)) if not isinstance(a, torch.Tensor) else a for a in attentions]
        if attentions and attentions[0].dim() == 4:
            if attentions[0].shape[0] != 1:
                raise AttnflowError(f"expected the {what} attention of one input; got a batch of {attentions[0].shape[0]}")
            attentions = [a[0] for a in attentions]
        values, as_numpy = torch.stack([a.detach().to(torch.float64) for a in attentions]), False
    else:
        as_numpy = not isinstance(attentions, torch.Tensor)
        values = torch.as_tensor(np.asarray(attentions) if as_numpy else attentions).detach().to(torch.float64)
    if values.dim() != 4 or 0 in values.shape:
        raise AttnflowError(f"expected {what} attention of shape (layers, heads, queries, keys); got {tuple(values.shape)}")
    if not torch.isfinite(values).all() or bool((values < 0).any()):
        raise AttnflowError(f"the {what} attention must be finite and non-negative")
    return values, as_numpy


class JointGraph:
    """The augmented matrices of the joint graph (see the module docstring).

    encoder: ``(Le, S, S)`` residual-augmented, head-fused encoder attention (``A^enc``).
    self_attention: ``(Ld, T, T)`` the same for the decoder's self-attention (``A_l``).
    cross: ``(Ld, T, S)`` head-fused cross-attention, rows summing to 1 (``C_l``).
    joint: ``(Ld, T, S + T)`` the decoder layers' ``J_l``.
    """

    def __init__(self, encoder: Any, decoder: Any, cross: Any, *, residual: float = 0.5,
                 head_fusion: str = "mean") -> None:
        check_residual(residual)
        check_head_fusion(head_fusion)
        if head_fusion is None:
            raise AttnflowError("the joint graph needs head_fusion 'mean', 'max' or 'min'; got None")
        enc, self.as_numpy = _single(encoder, "encoder")
        dec, _ = _single(decoder, "decoder self-")
        crs, _ = _single(cross, "cross-")
        if enc.shape[-1] != enc.shape[-2] or dec.shape[-1] != dec.shape[-2]:
            raise AttnflowError(f"encoder and decoder self-attention must be square; got {tuple(enc.shape)} and "
                                f"{tuple(dec.shape)}")
        s, t = enc.shape[-1], dec.shape[-1]
        if crs.shape[0] != dec.shape[0] or crs.shape[-2:] != (t, s):
            raise AttnflowError(f"expected cross-attention of shape ({dec.shape[0]}, heads, {t}, {s}) (decoder layers, "
                                f"heads, decoder positions, source positions); got {tuple(crs.shape)}")
        self.residual, self.n_source, self.n_decoder = float(residual), s, t
        real = torch.ones(1, max(s, t), dtype=torch.bool)  # one unpadded example
        self.encoder = augmented(enc[None], real[:, :s], residual=residual, head_fusion=head_fusion)[0]
        self.self_attention = augmented(dec[None], real[:, :t], residual=residual, head_fusion=head_fusion)[0]
        self.cross = normalized_rows(fuse_heads(crs, head_fusion))
        self.joint = torch.cat([(1.0 - self.residual) * self.cross, self.residual * self.self_attention], dim=-1)

    @property
    def n_encoder_layers(self) -> int:
        return int(self.encoder.shape[0])

    @property
    def n_decoder_layers(self) -> int:
        return int(self.joint.shape[0])

    def encoder_rollout(self) -> torch.Tensor:
        """``E``: ``(S, S)``, the encoder's rollout at its top layer."""
        return rollout_matrices(self.encoder)[-1]

    def out(self, values: torch.Tensor) -> Any:
        return values.numpy() if self.as_numpy else values


def normalized_rows(w: torch.Tensor) -> torch.Tensor:
    """Rows divided by their sum (all-zero rows stay zero)."""
    sums = w.sum(dim=-1, keepdim=True)
    return torch.where(sums > 0, w / torch.where(sums > 0, sums, torch.ones_like(sums)), w)


def joint_rollout(encoder: Any, decoder: Any, cross: Any, *, residual: float = 0.5,
                  head_fusion: str = "mean") -> Any:
    """``D``: ``(Ld, T, S + T)``; ``D[l, t]`` is decoder position ``t`` at decoder layer ``l+1`` over the
    source tokens followed by the decoder input tokens (see the module docstring)."""
    g = JointGraph(encoder, decoder, cross, residual=residual, head_fusion=head_fusion)
    s, t = g.n_source, g.n_decoder
    below = torch.cat([g.encoder_rollout(), torch.zeros(s, t, dtype=torch.float64)], dim=-1)  # [E | 0]
    d = torch.cat([torch.zeros(t, s, dtype=torch.float64), torch.eye(t, dtype=torch.float64)], dim=-1)  # D_0
    out = []
    for layer in range(g.n_decoder_layers):
        j = g.joint[layer]
        d = j[:, :s] @ below + j[:, s:] @ d
        out.append(d)
    return g.out(torch.stack(out))


def joint_raw(cross: Any, n_decoder: int | None = None, *, head_fusion: str = "mean") -> Any:
    """Raw cross-attention as joint rows: ``(Ld, T, S + T)``, the head-fused cross-attention of each
    decoder layer over the source tokens and 0 over the decoder inputs (the classic "alignment" view;
    no residual, no composition)."""
    crs, as_numpy = _single(cross, "cross-")
    check_head_fusion(head_fusion)
    if head_fusion is None:
        raise AttnflowError("joint raw attention needs head_fusion 'mean', 'max' or 'min'; got None")
    w = fuse_heads(crs, head_fusion)
    t = w.shape[-2] if n_decoder is None else int(n_decoder)
    out = torch.cat([w, torch.zeros(*w.shape[:-1], t, dtype=w.dtype)], dim=-1)
    return out.numpy() if as_numpy else out


def stacked_layers(graph: JointGraph) -> torch.Tensor:
    """The joint graph as an ordinary layered graph: ``(Le + Ld, S + T, S + T)`` row-stochastic matrices.
    Encoder layers mix the source positions and keep each decoder position (weight 1 to itself);
    decoder layers keep each source position and mix the decoder positions with ``J_l``. Rolling it
    out gives ``D_l`` in the decoder rows of layer ``Le + l``."""
    s, t = graph.n_source, graph.n_decoder
    n = s + t
    eye = torch.eye(n, dtype=torch.float64)
    layers = []
    for k in range(graph.n_encoder_layers):
        m = eye.clone()
        m[:s, :s] = graph.encoder[k]
        layers.append(m)
    for layer in range(graph.n_decoder_layers):
        m = eye.clone()
        m[s:, :] = graph.joint[layer]
        layers.append(m)
    return torch.stack(layers)


def joint_flow(encoder: Any, decoder: Any, cross: Any, *, residual: float = 0.5, head_fusion: str = "mean",
               positions: Any = None, layers: Any = None, normalize: bool = True, solver: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> Any:
    """Attention flow on the joint graph: ``(len(layers), len(positions), S + T)``.

    positions: decoder positions (default all); layers: 0-based decoder layers (default all).
    Entry ``[i, p, j]`` is the max-flow from decoder position ``positions[p]`` at decoder layer
    ``layers[i] + 1`` to input ``j`` (source tokens, then decoder input tokens), divided by the row's sum
    when ``normalize``. solver: as in ``attnflow.flow`` (``"networkx"`` is the slow oracle).
    """
    g = JointGraph(encoder, decoder, cross, residual=residual, head_fusion=head_fusion)
    dec_layers = resolve_indices(layers, g.n_decoder_layers, "layers")
    dec_positions = resolve_indices(positions, g.n_decoder, "positions")
    stack = stacked_layers(g)
    # The stacked matrices are already the graph's capacities: residual 0 and one "head" leave them as
    # they are (rows already sum to 1), so the layered solvers compute the joint graph's max-flows.
    values = layered_flow(stack[:, None], residual=0.0, head_fusion="mean", positions=g.n_source + dec_positions,
                          layers=g.n_encoder_layers + dec_layers, normalize=normalize, solver=solver,
                          progress=progress)
    return g.out(values)


def stacked_rollout(graph: JointGraph) -> torch.Tensor:
    """Rollout of ``stacked_layers`` restricted to the decoder rows: ``(Ld, T, S + T)`` (equal to
    ``joint_rollout``; used to test the embedding the flow relies on)."""
    r = layered_rollout(stacked_layers(graph)[:, None], residual=0.0, head_fusion="mean")
    return r[graph.n_encoder_layers:, graph.n_source:, :]


__all__ = ["JointGraph", "joint_flow", "joint_raw", "joint_rollout", "stacked_layers"]
