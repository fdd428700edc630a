"""AttnLRP: attention-aware layer-wise relevance propagation, on a stock Hugging Face model.

Achtibat, Hatefi, Dreyer, Jain, Wiegand, Lapuschkin, Samek 2024, "AttnLRP: Attention-Aware Layer-Wise
Relevance Propagation for Transformers" (ICML). LRP starts from the explained logit ``z`` (relevance
``R = z``) and redistributes it backwards, layer by layer, onto the layer's inputs; the relevance of
input token ``j`` is what reaches its input embedding. Every rule below is written in the
gradient x input form (the paper's Appendix; lxt's "efficient" implementation): a relevance ``R_y``
at a tensor ``y`` equals ``y * g_y`` for a *modified* gradient ``g``, and each rule is a change of one
operation's backward pass, so one forward and one backward pass give::

    R_j = sum_d  e[j, d] * g~[j, d]          e: the input embedding of token j (the input embedding
                                             module's output), g~: the modified gradient of z

The rules (``x`` an operation's input, ``y`` its output):

- linear maps (``nn.Linear``, GPT-2's ``Conv1D``, residual sums, rotary rotation, grouped-query head
  sharing, the ``1/sqrt(d)`` scaling, LayerNorm's centring): the epsilon-rule with epsilon = 0,
  ``R_i = sum_k x_i W_ki R_k / y_k``, which in this form is the *standard* gradient. A bias ``b`` keeps
  ``b * g_y`` (lost relevance, a bias term).
- elementwise non-linearities (SiLU, GELU, tanh of BERT's pooler, Gemma 2's attention soft-capping
  ``cap * tanh(s / cap)``): the identity rule ``R_x = R_y``, i.e. the derivative ``f(x) / x``
  (0 where ``x = 0``; the relevance there is 0 whatever it is).
- bilinear products of two input-dependent factors (``q . k^T``, ``attention . V``, a gated
  feed-forward's ``act(gate(x)) * up(x)``): the uniform rule, half of the product's relevance to each
  factor: the gradient into each factor is halved (the product rule would give each factor all of it).
- softmax (the paper's rule, from its first-order Taylor expansion at ``x``): ``R_x_i = x_i (R_s_i - s_i sum_k R_s_k)``,
  which is ``x * (the standard gradient)``: the standard backward pass. It does not conserve: each
  softmax row keeps the bias term ``sum_k R_s_k (1 - x_k + sum_i s_i x_i)``, with ``R_s = s * g_s``.
- LayerNorm ``(x - mean(x)) / sigma * w + b`` and RMSNorm ``x / rms(x) * w``: the denominator held
  constant (the identity rule on the normalisation), the mean subtraction kept (it is linear):
  the norm becomes a linear map; LayerNorm's offset ``b`` keeps ``b * g_y``.
- a soft-capped final logit (Gemma 2, ``z = cap * tanh(u / cap)``): the identity rule, ``R_u = z``.
- constant inputs added to the token embedding (GPT-2's and BERT's position embeddings, BERT's
  token-type embeddings) are not tokens: they keep ``p * g`` (bias terms).

Conservation: ``sum_j R_j = z - (linear biases . g) - (norm offsets . g) - (position / token-type
embeddings . g) - (softmax bias terms)``, exact up to floating point (``tests/test_attnlrp.py`` checks
it in float64 for every family of the architecture table's ``lrp_gate`` column, with every term computed
separately).

How: receivers on the model's hook points (``attnflow.hf.points``) for the pass only: a kernel
receiver on every layer's attention call applies the q.k, softmax and attention.V rules and does what
eager attention does otherwise, and receivers on the ``norms``, ``activations``, ``layers.i.mlp.gate``,
``embed`` and ``unembed`` points apply the norm, activation and gated-product rules and keep the input
leaf and the unembedding's output. Per-architecture facts (the gated product's factors) are the
architecture table's ``lrp_gate`` column; norms and activations are the hook points' groups.

Long inputs: autograd would keep every layer's attention weights ``(heads, n, n)`` (and their float32
softmax) for the backward pass, 16 x 32 x 2,048^2 numbers twice over for a Llama-3.2-1B at 2,048
tokens. From ``CHECKPOINT_FROM`` positions (or where that does not fit the memory budget) each decoder
layer keeps only its input (``layers.i.block``, activation checkpointing) and is recomputed, with the
same receivers and hence the same rules, in the backward pass; its attention (``_ChunkedAttention``)
keeps only queries, keys and values and recomputes the rules chunk of query rows by chunk there, so no
``(heads, n, n)`` tensor is ever whole. Every rule above is per query row or linear, so the relevances are
the same; the keys' and values' gradients are summed over chunks in float32 or wider.

API::

    attnlrp(model, input_ids, targets=None, *, tokens=None, foils=None, readout="logit", observe=None,
            checkpoint=None) -> LRP
    LRP.relevance  # (len(targets), n) float64: R_j per target (a classifier: one row)
    LRP.logits     # (len(targets),) the explained z (or z_c - z_f)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import architecture, model_type
from attnflow.capture.streaming import architecture_fixes
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.hf.points import hook_points, receiving
from attnflow.hf.weights import input_device, parameter
from attnflow.interventions.attribution_patching import checkpointed
from attnflow.interventions.costs import ATTNLRP_CHUNK_BYTES, long_path

READOUTS = ("logit", "contrastive")
# the long path's attention: the most bytes one chunk of query rows' scores takes (float32 or wider); its
# backward pass holds a few such tensors at a time (scores, weights and their gradients). Set in costs.py,
# whose memory model sizes the path with it (costs cannot import this module: a cycle)
CHUNK_BYTES = ATTNLRP_CHUNK_BYTES


@dataclass
class LRP:
    """AttnLRP relevances (see the module docstring): ``relevance (targets, n)``, the explained values
    ``logits (targets,)``, the explained ``tokens`` (classes), and ``decoder`` (False: a classifier)."""

    relevance: np.ndarray
    targets: list[int]
    tokens: list[int]
    logits: np.ndarray
    decoder: bool


class _Pass:
    """The active pass: the input-embedding leaf, the unembedding's output, the attention calls seen;
    ``chunked``: the long path's attention (``_ChunkedAttention``)."""

    def __init__(self, observe: Callable[..., None] | None, chunked: bool = False) -> None:
        self.leaf: torch.Tensor | None = None
        self.unembedded: torch.Tensor | None = None
        self.observe = observe
        self.calls = 0
        self.chunked = chunked


# ------------------------------------------------------------------------------------- the rules

def uniform(t: torch.Tensor) -> torch.Tensor:
    """The uniform rule's half: the same value (``0.5 t + 0.5 t`` is exact in floating point), half the
    gradient into ``t``."""
    return 0.5 * t + 0.5 * t.detach()


def identity(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The identity rule for an elementwise ``y = f(x)``: the value ``y`` exactly, the derivative
    ``y / x`` (0 where ``x = 0``), so that ``x * g_x = y * g_y``."""
    safe = torch.where(x != 0, x, torch.ones_like(x))
    ratio = torch.where(x != 0, y / safe, torch.zeros_like(y))
    return y.detach() + (x - x.detach()) * ratio.detach()


def _rules(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, dropout: float, scaling: float | None,
           softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager attention with AttnLRP's rules: ``(output (b, n, heads, d), scores, weights (b, heads, n, m))``
    for query ``(b, heads, n, d)``, key/value ``(b, kv heads, m, d)`` and an additive mask."""
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    if groups > 1:  # grouped-query heads: each key/value head serves `groups` query heads (linear: gradients sum)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = uniform(torch.matmul(query, key.transpose(-1, -2))) * scaling
    if softcap is not None:
        scores = identity(scores, torch.tanh(scores / softcap) * softcap)
    if attention_mask is not None:
        scores = scores + attention_mask[..., :key.shape[-2]]
    # the softmax rule is x * (the standard gradient): nothing to change; softmax at least in float32 as eager does
    weights = torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), dim=-1).to(query.dtype)
    used = torch.nn.functional.dropout(weights, p=dropout, training=True) if dropout and module.training else weights
    out = uniform(torch.matmul(used, value))
    return out.transpose(1, 2).contiguous(), scores, weights


def _query_chunks(query: torch.Tensor, key: torch.Tensor) -> list[slice]:
    """Query rows in chunks whose scores ``(b, heads, rows, m)`` take at most ``CHUNK_BYTES`` in float32
    (or the wider dtype)."""
    b, heads, n = query.shape[:3]
    size = torch.empty((), dtype=torch.promote_types(query.dtype, torch.float32)).element_size()
    rows = max(1, CHUNK_BYTES // max(1, b * heads * key.shape[-2] * size))
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def _mask_rows(mask: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    return mask if mask is None or mask.shape[-2] == 1 else mask[..., rows, :]


class _ChunkedAttention(torch.autograd.Function):
    """``_rules``' output, with only the queries, keys, values and mask kept for the backward pass: the
    backward pass recomputes the rules chunk of query rows by chunk (``_query_chunks``) and backpropagates
    each chunk through them, so no ``(heads, n, m)`` tensor exists whole. Softmax and the rules are per
    query row, so each chunk's gradient into its queries is exact; the keys' and values' are sums over
    chunks, accumulated in float32 or wider. ``observe`` sees each chunk's scores and weights during the
    backward pass."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                module: Any, scaling: float | None, softcap: float | None, observe: Any) -> torch.Tensor:
        ctx.save_for_backward(query, key, value, mask)
        ctx.settings = (module, scaling, softcap, observe)
        return torch.cat([_rules(module, query[:, :, rows], key, value, _mask_rows(mask, rows), 0.0, scaling,
                                 softcap)[0] for rows in _query_chunks(query, key)], dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        query, key, value, mask = ctx.saved_tensors
        module, scaling, softcap, observe = ctx.settings
        wide = torch.promote_types(key.dtype, torch.float32)
        grad_query = torch.empty_like(query)
        grad_key = torch.zeros(key.shape, dtype=wide, device=key.device)
        grad_value = torch.zeros(value.shape, dtype=wide, device=value.device)
        with torch.enable_grad():
            k, v = key.detach().requires_grad_(True), value.detach().requires_grad_(True)
            for rows in _query_chunks(query, key):
                q = query[:, :, rows].detach().requires_grad_(True)
                out, scores, weights = _rules(module, q, k, v, _mask_rows(mask, rows), 0.0, scaling, softcap)
                if observe is not None:
                    observe(module, scores, weights)
                gq, gk, gv = torch.autograd.grad(out, (q, k, v), grad[:, rows])
                grad_query[:, :, rows] = gq
                grad_key += gk
                grad_value += gv
        return grad_query, grad_key.to(key.dtype), grad_value.to(value.dtype), None, None, None, None, None


def _attention(state: _Pass) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """The kernel receiver of every layer (``layers.i.attn.kernel``): eager attention (query
    ``(b, heads, n, d)``, key/value ``(b, kv heads, m, d)``, an additive mask) with AttnLRP's rules; on the
    long path (``state.chunked``) through ``_ChunkedAttention`` (no weights returned)."""

    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  softcap: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        state.calls += 1
        if state.chunked and not (dropout and module.training):
            return _ChunkedAttention.apply(query, key, value, attention_mask, module, scaling, softcap,
                                           state.observe), None
        out, scores, weights = _rules(module, query, key, value, attention_mask, dropout, scaling, softcap)
        if state.observe is not None:
            state.observe(module, scores, weights)
        return out, weights

    return attention


# ------------------------------------------------------------------------------------------ hooks

def _activation(module: Any, args: Any, output: Any) -> Any:
    if not args or not isinstance(output, torch.Tensor):
        return None
    return identity(args[0], output)


def _norm(module: Any, args: Any, output: Any) -> Any:
    """The normalisation as the linear map it is with its denominator held constant."""
    if not args or not isinstance(output, torch.Tensor):
        return None
    x = args[0]
    if isinstance(module, torch.nn.LayerNorm):
        centred = x - x.mean(-1, keepdim=True)  # linear: kept in the backward pass
        sigma = torch.sqrt(x.detach().var(-1, unbiased=False, keepdim=True) + module.eps)
        gamma = parameter(module)
        scale = (gamma if gamma is not None else 1.0) / sigma
        linear = centred * scale
        return output.detach() + (linear - linear.detach())
    # RMS norms (every variant's spelling of the weight, Gemma's 1 + w included): y / x = w / rms(x)
    return identity(x, output)


def _half(module: Any, args: Any, output: Any) -> Any:
    return uniform(output) if isinstance(output, torch.Tensor) else None


def _receivers(model: Any, state: _Pass, gate: tuple[str, ...], decoder: bool) -> dict[str, Any]:
    """The pass's receivers on the hook points. Order matters on a gated feed-forward's activation (both
    the ``activations`` and the ``layers.i.mlp.gate`` point): the identity rule first, then the halving,
    as the scope installs them in this order."""
    points = hook_points(model)

    def leaf(module: Any, args: Any, output: Any) -> torch.Tensor:
        state.leaf = output.detach().requires_grad_(True)
        return state.leaf

    wanted: dict[str, Any] = {"norms": _norm, "activations": _activation}
    if gate:
        wanted.update(dict.fromkeys(points.names("mlp.gate"), _half))
    wanted.update(dict.fromkeys(points.names("attn.kernel"), _attention(state)))
    if state.chunked:  # keep each layer's input only, recompute the layer (rules and all) in the backward pass
        wanted.update(dict.fromkeys(points.names("block"), checkpointed))
    wanted["embed"] = leaf
    if decoder:
        wanted["unembed"] = lambda module, args, output: setattr(state, "unembedded", output)
    return wanted


# ------------------------------------------------------------------------------------------ entry

def _kind(model: Any) -> tuple[bool, tuple[str, ...]]:
    """(decoder?, the gated product's factors) or a sentence saying why AttnLRP cannot run."""
    row = architecture(model)
    name = model_type(model) or type(model).__name__
    if row is None or row.lrp_gate is None:
        from attnflow.hf.architectures import ARCHITECTURES

        checked = ", ".join(t for t, r in ARCHITECTURES.items() if r.lrp_gate is not None)
        raise AttnflowError(f"AttnLRP's rules are checked (conservation) for {checked} models; {name!r} is not among "
                            "them: use method='ablated-flow-estimate' or 'alti-logit'")
    kind = kind_of(model)
    if kind.lm:
        return True, row.lrp_gate
    if kind.head == "classification":
        return False, row.lrp_gate
    raise AttnflowError(f"AttnLRP explains a logit, so it needs a causal language-model or a sequence-classification "
                        f"head; {type(model).__name__} has neither")


def attnlrp(model: Any, input_ids: Any, targets: Any = None, *, tokens: Any = None, foils: Any = None,
            readout: str = "logit", observe: Callable[..., None] | None = None,
            progress: Callable[[int, int], None] | None = None, checkpoint: bool | None = None) -> LRP:
    """AttnLRP relevances of every input token (see the module docstring).

    input_ids: ``(n,)`` or ``(1, n)`` token ids. targets: a decoder's positions whose next-token logit is
        explained (default: the last); a classifier explains its class logit, read at no single
        position (one row, recorded as target 0). tokens: the explained token / class per target
        (default: the argmax). readout: ``"logit"``, or ``"contrastive"`` with ``foils`` (explains
        ``z_c - z_f``, linear in the logits, so it conserves too).
    observe: for tests and studies, called as ``observe(module, scores, weights)`` with each attention
        softmax's input and output (``(b, heads, n, m)``) during the forward pass; on the long path with
        each chunk of query rows ``(b, heads, rows, m)`` during each backward pass instead.
    progress: ``progress(done, total)`` after the forward pass and after each target's backward pass
        (``total = 1 + len(targets)``).
    checkpoint: the long path: keep only each decoder layer's input and recompute the layer, with its
        rules, in the backward pass (``layers.i.block``), and its attention chunk of query rows by chunk
        (``_ChunkedAttention``): memory is one layer's activations and a few ``CHUNK_BYTES`` instead of
        every layer's ``(heads, n, n)`` weights, for about one more forward pass of time. None: from
        ``attnflow.interventions.attribution_patching.CHECKPOINT_FROM`` positions, or where the plain pass
        would not fit the memory budget (``attnflow.interventions.costs.long_path``). The relevances are
        the same either way (up to floating-point summation order).

    Cost: one forward pass with autograd recording and one backward pass per target (on the long path,
    each backward pass recomputes every layer once).
    """
    if readout not in READOUTS:
        raise AttnflowError(f"AttnLRP's relevances sum to a logit (up to its bias terms), so readout must be one of "
                            f"{', '.join(READOUTS)}; got {readout!r}")
    decoder, gate = _kind(model)
    ids = torch.as_tensor(np.asarray(input_ids)).reshape(-1).long()
    n = ids.numel()
    if n < 1:
        raise AttnflowError("expected at least one input token")
    if decoder:
        targets = [n - 1] if targets is None else [int(t) % n if -n <= int(t) < n else int(t)
                                                    for t in np.atleast_1d(np.asarray(targets)).tolist()]
        if not targets or any(not 0 <= t < n for t in targets) or len(set(targets)) != len(targets):
            raise AttnflowError(f"targets must be distinct positions in [0, {n}); got {targets}")
        targets = sorted(targets)
    else:
        targets = [0]
    for what, given in (("tokens", tokens), ("foils", foils)):
        if given is not None and len(np.atleast_1d(given)) != len(targets):
            raise AttnflowError(f"give one of {what} per target ({len(targets)}); got {len(np.atleast_1d(given))}")
    if readout == "contrastive" and foils is None:
        raise AttnflowError(f"readout='contrastive' needs one foil token per target ({len(targets)} targets)")
    device = input_device(model)
    last = max(targets)
    positions = last + 1 if decoder else n
    state = _Pass(observe, chunked=long_path(model, positions) if checkpoint is None else bool(checkpoint))
    feed: dict[str, Any] = {"input_ids": ids[None, :last + 1 if decoder else n].to(device), "use_cache": False}
    if decoder:
        feed["logits_to_keep"] = last + 1 - min(targets)
    # eager attention's additive mask for the kernel receivers (the scope switches the model's attention)
    with torch.enable_grad(), architecture_fixes(model), \
            receiving(model, _receivers(model, state, gate, decoder), attention="eager"):
        out = model(**feed)
        if state.leaf is None or state.calls == 0:
            raise AttnflowError(f"{type(model).__name__} did not run through attnflow's attention function or its input "
                                "embedding module; AttnLRP cannot apply its rules to it")
        if decoder:
            keep = feed["logits_to_keep"]
            where = [t - last - 1 + keep for t in targets]
            z, u = out.logits[0, where], state.unembedded[0, where]
        else:
            z = u = out.logits[0][None]
        explained = z.detach().argmax(-1) if tokens is None else torch.as_tensor(np.atleast_1d(tokens)).long()
        explained = explained.to(z.device)

        def logit(which: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            zc, uc = z.gather(-1, which[:, None])[:, 0], u.gather(-1, which[:, None])[:, 0]
            # the identity rule on a soft-capped logit z = cap tanh(u / cap): d z~ / d u = z / u (1 without a cap)
            ratio = torch.where(uc != 0, zc / torch.where(uc != 0, uc, torch.ones_like(uc)), torch.ones_like(uc))
            return ratio.detach() * uc, zc.detach()

        objective, value = logit(explained)
        if readout == "contrastive":
            foil_objective, foil_value = logit(torch.as_tensor(np.atleast_1d(foils)).long().to(z.device))
            objective, value = objective - foil_objective, value - foil_value
        relevance = np.zeros((len(targets), n))
        leaf = state.leaf
        if progress is not None:
            progress(1, 1 + len(targets))
        for i in range(len(targets)):
            (grad,) = torch.autograd.grad(objective[i], leaf, retain_graph=i < len(targets) - 1)
            row = (leaf.detach() * grad)[0].sum(-1).to(torch.float64).cpu().numpy()
            relevance[i, :row.shape[0]] = row
            if progress is not None:
                progress(2 + i, 1 + len(targets))
    if decoder:
        for i, t in enumerate(targets):
            relevance[i, t + 1:] = 0.0  # a causal target never sees later sources (exact zeros already)
    return LRP(relevance=relevance, targets=targets, tokens=[int(c) for c in explained.tolist()],
               logits=value.to(torch.float64).cpu().numpy(), decoder=decoder)
