"""One pass that collects what logit attribution needs: each layer's attention rows and value
vectors (and, for ALTI, each layer's contributions from its full weights and residual input), and
the direct path from each attention output to the explained logit.

The explained logit ``z`` (a decoder's next-token logit at each target position, or a classifier's
class logit, or ``z_c - z_f`` against a foil) is made a *linear* function of the attention outputs
while the model runs, by freezing what is not linear at the values of this very input:

- every normalisation (LayerNorm, RMSNorm and their variants) keeps its scale ``gamma / sigma(x)``
  as computed (and LayerNorm its centring, which is linear), so ``norm(x) = S x + beta`` exactly;
- a tanh head (BERT's pooler) keeps its ratio ``tanh(a) / a``, and a final logit soft-cap
  (Gemma 2's ``cap * tanh(u / cap)``) its ratio ``z / u``: again exact at this input;
- the feed-forward blocks (the architecture table's ``mlp``) and every later attention output are
  cut from the path: the direct path of layer ``l``'s attention output is the residual stream
  through the frozen norms to the read-out, as in direct logit attribution.

Each attention output's input to the output projection ``W_O`` (the heads' weighted value sums,
``(n, heads * head_dim)``) becomes a leaf of autograd; one backward pass of the summed explained
logits gives ``grads[l, p] = dz / d ctx_l[p]``, the linear map from layer ``l``'s attention output at
position ``p`` to the logit. The attention part of the logit at layer ``l`` is then exactly
``sum_p grads[l, p] . ctx_l[p]`` (the output projection's bias is added after the leaf and belongs to
no token), and splitting ``ctx_l[p] = sum_h sum_j alpha[l, h, p, j] v[l, j, kv(h)]`` over the
source tokens ``j`` is exact too (``attnflow.core.logit_attribution``). Decoders' positions do
not interact along the direct path, so several targets share one backward pass.

What is kept is what the decompositions read, no more: each layer's attention rows at the
positions the explained logits read (a decoder's targets: positions do not interact along the
direct path, so ``grads[l, p]`` is zero elsewhere; a classifier's every position), in the model's
dtype (its weights are what the model computed, so float64 arithmetic on them later is unchanged);
every layer's values; and, with ``alti=True``, ALTI's ``(n, n)`` scores of each layer, computed from
that layer's full weights, values and input as soon as its attention has run
(``attnflow.core.logit_attribution.alti_scores``), so that one layer's ``(H, n, n)`` weights exist
at a time and nothing ``(L, H, n, n)`` or ``(L, n, hidden)`` is held. Attention runs the model's own
eager function under ``torch.no_grad`` (its inside is off the direct path: each output projection's
input is a fresh leaf), so autograd keeps no layer's scores either.

Which modules are the value and output projections and the feed-forward block is the
architecture table's row (``attnflow.hf.architectures.PROJECTIONS`` and ``MLPS``);
normalisations are found by their class. Attention must be eager (its weights are read).

API (stable)::

    logit_paths(model, inputs, targets=None, *, tokens=None, foils=None, alti=False) -> LogitPaths
    LogitPaths: attentions (L, H, P, n) the rows at positions (P of them), values (L, n, kv, d) (both in
                the model's dtype), w_o (L x (hidden, H, d), the weights' views), grads (L, P, H, d),
                select (targets, P), alti (L, n, n) float32 ALTI scores or None, positions, targets,
                tokens, logits (the explained logits, float64), attention_part (targets, L)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import architecture, model_type, refuse_unsupported
from attnflow.capture.streaming import architecture_fixes, checked_weights, streamable_modules, streaming
from attnflow.capture.values import projections
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.core.logit_attribution import alti_scores
from attnflow.hf.points import attention_function, can_switch, hook_points, receiving
from attnflow.hf.weights import input_device, parameter


ALTI_WORKING = 128 * 2**20  # bytes: ALTI's per-chunk working arrays (2 x chunk x n x hidden float32)


@dataclass
class LogitPaths:
    """See the module docstring; every tensor on the CPU, batch axis dropped; ``grads`` float64,
    ``attentions`` and ``values`` in the model's dtype."""

    attentions: torch.Tensor
    values: torch.Tensor
    w_o: list[torch.Tensor]
    grads: torch.Tensor
    select: torch.Tensor
    positions: list[int]
    targets: list[int]
    tokens: list[int]
    logits: np.ndarray
    attention_part: np.ndarray
    decoder: bool
    alti: torch.Tensor | None = None


class _Pass:
    """The active pass: keeps each layer's attention rows at ``positions`` (None: all) and values
    (streaming receiver), holds the leaves, and with ``alti`` turns each layer's weights, values and
    input into ALTI's scores as soon as the layer's attention has run."""

    def __init__(self, n_layers: int, found: list[Any], heads: int, positions: list[int] | None, alti: bool) -> None:
        self.n_layers, self.projections, self.heads, self.positions = n_layers, found, heads, positions
        self.rows: torch.Tensor | None = None  # (L, H, P, n), made on the first layer
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.leaves: list[torch.Tensor | None] = [None] * n_layers
        self.seen = [False] * n_layers
        self.residual: torch.Tensor | None = None  # the input of the layer whose attention runs next
        self.scores: torch.Tensor | None = None  # (L, n, n) float32, with alti
        self.alti = alti

    def layer(self, layer: int, weights: Any) -> None:
        w = checked_weights(weights)[0]  # (H, n, n): this layer's, freed when the layer is done
        kept = w if self.positions is None else w[:, self.positions]
        if self.rows is None:
            self.rows = torch.empty(self.n_layers, *kept.shape, dtype=kept.dtype)
        self.rows[layer] = kept
        self.seen[layer] = True
        if self.alti:
            if self.residual is None or self.v[layer] is None:
                raise AttnflowError(f"layer {layer}'s input or values were not seen before its attention; ALTI "
                                    "cannot read the residual stream")
            n = w.shape[-1]
            w_o = self.projections[layer].w_o.detach()
            chunk = max(1, min(64, ALTI_WORKING // (2 * n * w_o.shape[0] * 4)))
            scores = alti_scores(w, self.v[layer], w_o.reshape(w_o.shape[0], self.heads, -1), self.residual, chunk)
            if self.scores is None:
                self.scores = torch.zeros(self.n_layers, n, n, dtype=scores.dtype)
            self.scores[layer] = scores
            self.residual = None

    def values(self, layer: int, projected: Any) -> None:
        self.v[layer] = self.projections[layer].head_values(projected, self.heads)[0].clone()

    def end_call(self, output: Any) -> None:
        pass


def _without_autograd(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """Each layer's attention kernel (``layers.i.attn.kernel``): the model's own eager attention under
    ``torch.no_grad``. Its inside is off the direct path (the output projection's input is a leaf), so
    the weights and values are the same numbers, and autograd keeps no ``(H, n, n)`` of any layer."""
    with torch.no_grad():
        return attention_function("eager", module)(module, query, key, value, attention_mask, **kwargs)


def _leaf_receiver(state: _Pass, layer: int) -> Any:
    """Before layer ``layer``'s output projection: its input becomes a leaf of autograd (the gradient of
    the logit with respect to each head's context)."""
    def receiver(module: Any, args: tuple, kwargs: dict) -> Any:
        if not args:
            return None
        leaf = args[0].detach().requires_grad_(True)
        state.leaves[layer] = leaf
        return (leaf, *args[1:]), kwargs
    return receiver


def _residual_receiver(state: _Pass, layer: int) -> Any:
    """Around layer ``layer``'s block: keep its input, the residual stream the layer reads (what
    transformers' ``hidden_states[layer]`` would be, without its recorder's hooks on the model), until
    the layer's attention has run (ALTI's ``x_t``)."""
    def receiver(forward: Any, args: tuple, kwargs: dict) -> Any:
        hidden = args[0] if args else kwargs.get("hidden_states")
        state.residual = hidden[0].detach()
        return forward(*args, **kwargs)
    return receiver


def _cut(module: Any, args: Any, output: Any) -> Any:
    """A feed-forward block's output, cut from the gradient's path."""
    if isinstance(output, tuple):
        return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in output)
    return output.detach()


def _frozen_norm(module: Any, args: Any, output: Any) -> Any:
    """Freeze a normalisation's scale at this input: the output is unchanged, its derivative is the
    frozen linear map (LayerNorm: centre, then scale by gamma / sigma; RMS norms: the element-wise
    ratio output / input, which is gamma / rms whatever the variant's spelling of gamma)."""
    if not args or not isinstance(output, torch.Tensor):
        return None
    x = args[0]
    if isinstance(module, torch.nn.LayerNorm):
        centred = x - x.mean(-1, keepdim=True)
        sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + module.eps)
        gamma = parameter(module)
        scale = (gamma if gamma is not None else 1.0) / sigma
        frozen = centred * scale.detach()  # the bias is a constant: its derivative is zero
        return frozen + (output - frozen).detach()
    ratio = torch.where(x != 0, output / torch.where(x != 0, x, torch.ones_like(x)), torch.zeros_like(x))
    return x * ratio.detach() + (output - x * ratio).detach()


def _frozen_tanh(module: Any, args: Any, output: Any) -> Any:
    """A tanh module (of the ``activations`` point) as the ratio output / input, frozen."""
    if not isinstance(module, torch.nn.Tanh) or not args:
        return None
    x = args[0]
    ratio = torch.where(x != 0, output / torch.where(x != 0, x, torch.ones_like(x)), torch.ones_like(x))
    return x * ratio.detach() + (output - x * ratio).detach()


def _receivers(model: Any, state: _Pass, n_layers: int, seen: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    """The pass's receivers on the hook points: leaves before each output projection, each feed-forward
    block cut, attention run without autograd, norms and tanh frozen, each layer's input kept for ALTI
    until its attention has run, and (``seen``) the unembedding's input and output kept."""
    row = architecture(model)
    if row is None or row.mlp is None:
        name = model_type(model) or type(model).__name__
        raise AttnflowError(f"logit attribution cuts each layer's feed-forward block out of the direct path, "
                            f"and the architecture table does not name it for {name!r} models")
    wanted: dict[str, Any] = {}
    for layer in range(n_layers):
        wanted[f"layers.{layer}.attn.out"] = _leaf_receiver(state, layer)
        wanted[f"layers.{layer}.mlp"] = _cut
        if state.alti:
            wanted[f"layers.{layer}.block"] = _residual_receiver(state, layer)
        if can_switch(model) and hook_points(model).has(f"layers.{layer}.attn.kernel"):
            wanted[f"layers.{layer}.attn.kernel"] = _without_autograd
    wanted.update(norms=_frozen_norm, activations=_frozen_tanh)
    if seen is not None:  # u_c = h . W_U[c] without a backward pass through the vocabulary
        wanted["unembed"] = lambda module, args, output: seen.update(h=args[0], u=output)
    return wanted


def _unembedded(seen: dict[str, torch.Tensor], unembed: Any, at: list[int], tokens: torch.Tensor,
                z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The explained logits as ``ratio * (h_t . W_U[c])`` from the unembedding's input ``h``, the ratio
    ``z / u`` of the model's logit to the unembedding's output frozen (1 unless the model soft-caps or
    scales its logits after the unembedding; exact at this input): the same gradient as through the
    logits, without a backward pass through the whole vocabulary. ``at``: the targets' rows of ``h``."""
    h = seen["h"][0][at]
    weight = parameter(unembed)
    from transformers.pytorch_utils import Conv1D

    rows = (weight.T if isinstance(unembed, Conv1D) else weight)[tokens.to(weight.device)]
    ratio = torch.where(u != 0, z / torch.where(u != 0, u, torch.ones_like(u)), torch.ones_like(u)).detach()
    return ratio * (h * rows.to(h.dtype)).sum(-1)


def _head(model: Any) -> bool:
    """True for a causal LM (next-token logits), False for a sequence classifier (the table's head)."""
    kind = kind_of(model)
    if kind.lm:
        return True
    if kind.head == "classification":
        return False
    raise AttnflowError(f"logit attribution explains a logit, so it needs a decoder-only causal language-model or a "
                        f"sequence-classification head; {type(model).__name__} has neither")


def logit_paths(model: Any, inputs: Any, targets: Any = None, *, tokens: Any = None,
                foils: Any = None, alti: bool = False) -> LogitPaths:
    """Run ``model`` once on ``inputs`` (token ids ``(n,)`` / ``(1, n)``, or a dict of tensors for one
    sequence) and collect ``LogitPaths`` (see the module docstring).

    targets: decoders: positions whose next-token logit is explained (default: the last); a
        classifier explains its output, read at no single position (``targets`` is ignored and
        the one target is recorded as position 0). tokens: the explained token / class per target
        (default: the argmax). foils: a foil per target, explaining ``z_c - z_f``. alti: also
        ALTI's scores of every layer (``LogitPaths.alti``).
    """
    refuse_unsupported(model)
    decoder = _head(model)
    feed = dict(inputs) if isinstance(inputs, dict) else {"input_ids": torch.as_tensor(inputs).reshape(1, -1).long()}
    ids = feed["input_ids"]
    n = ids.shape[-1]
    if decoder:
        targets = [n - 1] if targets is None else [int(t) % n for t in np.atleast_1d(np.asarray(targets)).tolist()]
        if len(set(targets)) != len(targets):
            raise AttnflowError(f"targets must be distinct positions; got {targets}")
    else:
        targets = [0]
    for what, given in (("tokens", tokens), ("foils", foils)):
        if given is not None and len(np.atleast_1d(given)) != len(targets):
            raise AttnflowError(f"give one of {what} per target ({len(targets)}); got {len(np.atleast_1d(given))}")
    modules = streamable_modules(model)
    if not modules:
        raise AttnflowError(f"logit attribution hooks each attention module, and {type(model).__name__} declares "
                            "none to transformers (or shares one module between layers)")
    found = projections(model, modules)
    config = getattr(model.config, "text_config", None) or model.config
    heads = int(config.num_attention_heads)
    # a decoder's logits read the attention outputs at their own positions only; a classifier's at all
    positions = targets if decoder else list(range(n))
    state = _Pass(len(modules), found, heads, positions if decoder else None, alti)
    device = input_device(model)
    feed = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in feed.items()}
    at = targets
    if decoder and "logits_to_keep" in inspect.signature(model.forward).parameters:
        feed["logits_to_keep"] = torch.tensor(targets, device=device)  # not (n, vocab) logits: the targets' rows
        at = list(range(len(targets)))
    unembed = model.get_output_embeddings() if decoder else None
    pre_cap: dict[str, torch.Tensor] = {}
    receivers = _receivers(model, state, len(modules), pre_cap if decoder else None)
    with torch.enable_grad(), architecture_fixes(model), streaming(model, modules, state), receiving(model, receivers):
        out = model(**feed, use_cache=False)
        z = out.logits[0]
        u = pre_cap.get("u", out.logits)[0] if decoder else z
        rows = z[at] if decoder else z[None]
        urows = u[at] if decoder else u[None]
        del out, z, u
        explained = rows.detach().argmax(-1) if tokens is None else torch.as_tensor(np.atleast_1d(tokens)).long()
        explained = explained.to(rows.device)
        pick = lambda r, ids: r.gather(-1, ids[:, None])[:, 0]  # noqa: E731
        zc, uc = pick(rows, explained), pick(urows, explained)
        # soft-capped logits (z = cap * tanh(u / cap)): the ratio z / u, frozen, is exact here
        objective = _unembedded(pre_cap, unembed, at, explained, zc, uc) if decoder else zc
        value = zc.detach().to(torch.float64)
        if foils is not None:
            foil_ids = torch.as_tensor(np.atleast_1d(foils)).long().to(rows.device)
            zf, uf = pick(rows, foil_ids), pick(urows, foil_ids)
            objective = objective - (_unembedded(pre_cap, unembed, at, foil_ids, zf, uf) if decoder else zf)
            value = value - zf.detach().to(torch.float64)
        pre_cap.clear()
        leaves = state.leaves
        if any(leaf is None for leaf in leaves) or not all(state.seen) or any(v is None for v in state.v):
            raise AttnflowError("an attention layer's output projection, weights or values were not seen; the "
                                "architecture table names the wrong modules for logit attribution")
        grads = torch.autograd.grad(objective.sum(), leaves, allow_unused=True)
    n_layers = len(modules)
    index = torch.tensor(positions, device=leaves[0].device)
    # only the rows at ``positions``: grads[l, p] is zero elsewhere (positions do not interact on the direct path)
    g = torch.stack([torch.zeros_like(leaf[0, index]) if gr is None else gr[0, index]
                     for gr, leaf in zip(grads, leaves)])
    ctx = torch.stack([leaf[0, index].detach() for leaf in leaves]).to(torch.float64).cpu()
    del grads
    state.leaves = leaves = []
    d = g.shape[-1] // heads
    g = g.to(torch.float64).cpu()
    select = torch.eye(len(targets), dtype=torch.float64) if decoder else torch.ones(1, n, dtype=torch.float64)
    # the attention part of the logit per target and layer: sum_p select[i, p] grads[l, p] . ctx[l, p]
    part = torch.einsum("ip,lp->il", select, (g * ctx).sum(-1))
    w_o = [f.w_o.detach().reshape(f.w_o.shape[0], heads, d) for f in found]  # views: no copy of the weights
    values = torch.stack([v.cpu() for v in state.v])
    state.v = []
    return LogitPaths(attentions=state.rows.cpu(), values=values, w_o=w_o,
                      grads=g.reshape(n_layers, len(positions), heads, d), select=select, positions=positions,
                      targets=targets, tokens=[int(t) for t in explained.tolist()], logits=value.cpu().numpy(),
                      attention_part=part.numpy(), decoder=decoder, alti=state.scores)
