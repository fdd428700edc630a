"""Ablated flow at the price of one pass: attribution patching of value zeroing.

Ablated flow (``attnflow.interventions.ablation``) zeroes source ``j``'s value vectors and reads how the
explained logit ``z`` at a target ``t`` drops: one edited run per source. Its first-order Taylor
expansion around the clean run needs one forward and one backward pass for every source at once
(attribution patching, Nanda 2023; AtP, Kramár et al. 2024, "AtP*: An efficient and scalable method
for localizing LLM behaviour to components")::

    zeroing v[l, j] at layer l:   z(clean) - z(v[l, j] -> 0)  ~=  grad_{v[l, j]} z . v[l, j]
    zeroing it in every layer:    z(clean) - z(v[:, j] -> 0)  ~=  sum_l grad_{v[l, j]} z . v[l, j]

where ``v[l, j]`` is everything the value projection outputs for token ``j`` (every key/value head;
a grouped-query head's gradient already sums over the query heads that share it) and the gradient is
the *total* derivative: zeroing ``v[l, j]`` changes later layers' residual streams, hence their
values, keys and queries, and the gradient follows all of it. Positive = the logit drops when ``j``'s
values are zeroed, the sign of ablated flow's scores. The expansion is exact to first order: zeroing
``eps * v[l, j]`` instead of ``v[l, j]`` drops the logit by ``eps * score + O(eps^2)``
(``tests/test_attribution_patching.py`` checks it against plain edited passes on every decoder
family the architecture table names value projections for).

What AtP* corrects, and why most of it does not apply here. AtP* fixes two failure modes of
first-order patching: (1) *attention saturation* when the patched node is a query or key: the
softmax is far from linear, so AtP* recomputes the attention pattern exactly. Value zeroing edits
neither queries nor keys, and layer ``l``'s attention output is exactly linear in ``v[l, :]`` at
fixed weights, so the edited layer's own step needs no correction; what is not linear is what
comes after it (norms, feed-forward blocks, later softmaxes). (2) *Cancellation* between paths, which
GradDrop addresses by dropping the gradient through one layer's residual contribution at a time and
ranking by the mean absolute value; that discards the sign that ablated flow keeps (support vs
opposition), so it is not used. Where the first order is known to fail — very short prompts, where
zeroing a token in every layer at once is far from the sum of one-layer effects — the budgeted
chooser (``attnflow.interventions.budgeted``) runs the exact ablation instead, since it is cheap there,
and re-scores the estimate's top sources exactly on longer inputs.

Cost: one forward pass with autograd recording, then one backward pass per target (several targets
share the forward pass). Memory: the recorded activations of one pass (eager attention keeps each
layer's ``(heads, n, n)`` weights for the backward pass) unless each layer is checkpointed (from
``CHECKPOINT_FROM`` positions by default): then only each layer's input is kept and one layer's
activations at a time are recomputed in the backward pass, and attention runs on SDPA where it is the
same function (``attnflow.interventions.efficient_attention``: value zeroing needs gradients through
attention, not its weights), so no ``(heads, n, n)`` tensor is formed at all and memory grows linearly
in ``n``. Logits are computed at the target rows only (``logits_to_keep``): every position's would be
``n x vocab`` (1.6 GB at 8,192 tokens of a 49,152-token vocabulary).

API::

    attribution_patching(model, input_ids, targets=None, *, layers="all", readout="logit", tokens=None,
                         foils=None, keep_cache=False, checkpoint=None, sdpa=None) -> Patching
    Patching.scores  # (len(targets), 1 or layers, n): the estimate of ablated flow's scores
    Patching.logits  # (len(targets), vocab) the clean logits; Patching.cache: the clean key/value cache
    Patching.attention  # "sdpa" or the model's own ("eager"): what the pass's attention ran on
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnflow.interventions.ablation import LAYER_MODES, Ablation, checked_inputs, readout_values, value_projections
from attnflow.interventions.efficient_attention import efficient_attention
from attnflow.interventions.heap import release
from attnflow.capture.streaming import architecture_fixes
from attnflow.core.qk_rows import QK, head_weights
from attnflow.hf.architectures import layer_windows
from attnflow.hf.load import output_cache
from attnflow.errors import AttnflowError
from attnflow.hf.points import hook_points, own_implementation, receiving
from attnflow.hf.weights import input_device

# A layer input of at least this many bytes has the checkpointed pass release the heap before the layer runs
# (SmolLM2-135M in float32: 3,641 tokens; measured where it mattered, 4,096 and 8,192 tokens)
RELEASE_FROM = 8 * 2**20


@dataclass
class Patching(Ablation):
    """An ``Ablation`` of estimated scores, plus what the forward pass
    leaves for an exact re-scoring: the clean logits at the targets (sorted) and, when asked, the
    clean key/value cache of ``input_ids[:last target + 1]``."""

    logits: torch.Tensor | None = None
    cache: Any = field(default=None, repr=False)
    attention: str = "eager"  # what the pass's attention ran on: "sdpa" (counted calls) or the model's own
    # with target_attention: every head's attention from each target, (targets, layers, heads, last + 1) float32
    target_attention: np.ndarray | None = field(default=None, repr=False)


CHECKPOINT_FROM = 1024  # positions from which each layer is recomputed in the backward pass (memory: one layer)


def long_input(positions: int) -> bool:
    """Whether a pass over ``positions`` tokens is a long one: checkpointed, attention on SDPA where it
    can be (read at call time, so tests can lower ``CHECKPOINT_FROM``)."""
    return positions >= CHECKPOINT_FROM


class _Pass:
    """The active pass: per layer, the value projection's output (detached) and whether its gradient hook
    is on; ``first``: the zero leaf added to layer 0's values (each backward pass runs down to it);
    ``scores[target, layer, position]``, filled by the hooks during the backward pass of ``target``;
    ``checkpoint``: run each decoder layer under activation checkpointing."""

    def __init__(self, found: list[Any], heads: int, n: int, targets: int, checkpoint: bool) -> None:
        self.found, self.heads = found, heads
        self.outputs: list[torch.Tensor | None] = [None] * len(found)
        self.hooked = [False] * len(found)
        self.first: torch.Tensor | None = None
        self.scores = np.zeros((targets, len(found), n))
        self.target = 0
        self.checkpoint = checkpoint
        self.attended: list[torch.Tensor | None] = [None] * len(found)  # per layer (heads, targets, m)
        self.kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(found)  # a checkpointed pass's cache


def _value_receiver(state: _Pass, layer: int) -> Any:
    def receiver(module: Any, args: Any, output: Any) -> Any:
        # The gradient reaching the value projection's output is the total derivative d z / d v (the path
        # from earlier layers through v stays open): a hook on the output reads it as the backward pass
        # goes by, one layer at a time (no zero leaves, no every-layer gradients returned at once). Layer 0
        # adds a zero leaf of autograd, so the graph exists even when the model's weights need no gradient,
        # and each backward pass runs down to it. A checkpointed layer runs again in the backward pass: it
        # refreshes the values and must add the same leaf; the hook is the first run's (the graph's).
        state.outputs[layer] = output.detach()
        if layer == 0:
            if state.first is None or state.first.shape != output.shape:
                state.first = torch.zeros_like(output, requires_grad=True)
            output = output + state.first
        if output.requires_grad and not state.hooked[layer]:
            state.hooked[layer] = True
            output.register_hook(_gradient_hook(state, layer))
        return output if layer == 0 else None
    return receiver


def _attention_receiver(state: _Pass, layer: int, targets: torch.Tensor, window: int | None) -> Any:
    """A kernel receiver keeping every head's attention from the targets' queries (``head_weights``: the
    causal mask, the layer's window, a soft-cap where the kernel is given one); None lets the kernel run.
    A checkpointed layer's recomputation calls it again with the same queries: the first call's rows are
    kept. The mask the kernel is given is not read (the causal mask and the table's window are, as in the
    row capture, which checks them against it; a position bias such as ALiBi is not added): the rows only
    choose which spans the budgeted chooser re-runs, they score nothing."""
    def receiver(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> None:
        if state.attended[layer] is None:
            qk = QK.received(query, key, window, **kwargs)
            with torch.no_grad():
                state.attended[layer] = head_weights(qk, targets.to(query.device), 0, key.shape[-2]).cpu()
        return None
    return receiver


def _cache_receiver(state: _Pass, layer: int) -> Any:
    """A kernel receiver keeping the layer's keys and values as the kernel receives them (after the position
    encoding, grouped heads not repeated): what the model's own cache stores. For a checkpointed pass, whose
    recomputed layers would write a cache twice; the first call's are kept."""
    def receiver(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> None:
        if state.kv[layer] is None:
            state.kv[layer] = (key.detach(), value.detach())
        return None
    return receiver


def _kept_cache(model: Any, kv: list[tuple[torch.Tensor, torch.Tensor] | None]) -> Any:
    """The model's cache class filled with every layer's keys and values (as its attention would have)."""
    from transformers import DynamicCache

    if any(pair is None for pair in kv):
        raise AttnflowError("a layer's attention kernel did not run; the architecture table names the wrong module "
                            "for its attention")
    cache = DynamicCache(config=model.config)
    for layer, (key, value) in enumerate(kv):
        cache.update(key, value, layer)
    return cache


def _gradient_hook(state: _Pass, layer: int) -> Any:
    def hook(gradient: torch.Tensor) -> None:
        found = state.found[layer]
        # the value part of a fused projection's output, per key/value head: (1, n', kv, d)
        gv = found.head_values(gradient.detach(), state.heads) * found.head_values(state.outputs[layer], state.heads)
        m = gv.shape[1]
        state.scores[state.target, layer, :m] = gv[0].sum((-1, -2)).to(torch.float64).cpu().numpy()
    return hook


def checkpointed(forward: Any, args: tuple, kwargs: dict) -> Any:
    """Around a decoder layer (its ``layers.i.block`` hook point): keep only its inputs and recompute the
    rest in the backward pass (memory: one layer's activations at a time instead of every layer's; about
    one more forward pass of compute). The recomputation runs in this call's context: autograd may run it
    on a device thread of its own, where this thread's receivers and attention choice would be unseen.
    Before each run, forward and recomputed, the heap's freed pages go back to the operating system
    (``attnflow.interventions.heap``): the kept inputs would otherwise leave the freed activations
    between them resident, up to three times the pass's live memory. Only where a layer's input takes
    ``RELEASE_FROM`` bytes or more: below, the pages are few and faulting them in again costs time (at
    2,000 tokens on SmolLM2 the estimate took about 7 % longer with the release, A/B in one process)."""
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    from torch.utils.checkpoint import checkpoint

    context = contextvars.copy_context()

    def run(*a: Any, **k: Any) -> Any:
        if _layer_bytes(a) >= RELEASE_FROM:
            release()
        return context.run(forward, *a, **k)

    return checkpoint(run, *args, use_reentrant=False, **kwargs)


def _layer_bytes(args: tuple) -> int:
    """Bytes of a layer's input (its first tensor argument: the hidden states)."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return 0 if first is None else first.numel() * first.element_size()


def _receivers(model: Any, state: _Pass, targets: list[int] | None = None, cache: bool = False) -> dict[str, Any]:
    """The pass's receivers: the value projections' gradient hooks, (checkpointing) around each layer, and
    at each layer's attention kernel, with ``cache`` the keys and values (``_cache_receiver``) and with
    ``targets`` the target's attention (``_attention_receiver``)."""
    points = hook_points(model)
    wanted: dict[str, Any] = {name: _value_receiver(state, layer)
                              for layer, name in enumerate(points.names("attn.value"))}
    if state.checkpoint:
        wanted.update(dict.fromkeys(points.names("block"), checkpointed))
    kernels: dict[str, list[Any]] = {name: [] for name in points.names("attn.kernel")}
    windows = layer_windows(model)
    positions = None if targets is None else torch.as_tensor(targets, dtype=torch.long)
    for layer, name in enumerate(kernels):
        if cache:
            kernels[name].append(_cache_receiver(state, layer))
        if positions is not None:
            kernels[name].append(_attention_receiver(state, layer, positions,
                                                     windows[layer] if layer < len(windows) else None))
    wanted.update({name: found for name, found in kernels.items() if found})
    return wanted


def _detached(cache: Any) -> Any:
    """The cache with its tensors cut from the autograd graph (so it can be copied and reused)."""
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                setattr(layer, name, tensor.detach())
    return cache


def attribution_patching(model: Any, input_ids: Any, targets: Any = None, *, layers: str = "all",
                         readout: str = "logit", tokens: Any = None, foils: Any = None,
                         keep_cache: bool = False, checkpoint: bool | None = None,
                         sdpa: bool | None = None, progress: Any = None,
                         target_attention: bool = False) -> Patching:
    """The one-pass estimate of ablated flow (see the module docstring).

    input_ids: ``(n,)`` or ``(1, n)`` token ids of a causal decoder. targets: positions explained
        (default: the last). layers: ``"all"`` (the estimate of zeroing in every layer at once: one
        score per source) or ``"each"`` (per layer). readout, tokens, foils: as
        ``attnflow.interventions.ablation.ablated_flow`` (tokens default to the argmax at each target).
    keep_cache: keep the clean key/value cache of the pass (for an exact re-scoring of some sources). With
        checkpointing (a recomputed layer would write the model's cache twice) it is filled from the keys
        and values each layer's attention kernel receives in the forward pass: the same tensors.
    checkpoint: recompute each layer in the backward pass instead of keeping its activations (memory
        bounded by one layer's; about a third more time); None: from ``CHECKPOINT_FROM`` positions.
    sdpa: run attention on torch's scaled_dot_product_attention for the pass where it computes the same
        function (``attnflow.interventions.efficient_attention``): no ``(heads, n, n)`` weights kept or
        recomputed; None: when checkpointing. ``Patching.attention`` says what the pass ran on.
    progress: ``progress(done, total)`` after the forward pass and after each target's backward pass
        (``total = 1 + len(targets)``).
    target_attention: also keep every head's attention from each target over the sources, read from the
        queries and keys as the pass's attention kernel receives them (no ``(heads, n, n)`` formed; the
        budgeted chooser's second way to pick spans for exact runs): ``Patching.target_attention``,
        ``(targets, layers, heads, last + 1)`` float32 (8.8 MB for one target at 8,192 tokens of SmolLM2).

    Returns a ``Patching`` with ``scores (len(targets), 1 or layers, n)``; sources after a
    target score 0 for it.
    """
    ids, targets = checked_inputs(model, input_ids, targets, readout, tokens, foils, 1)
    if layers not in LAYER_MODES:
        raise AttnflowError(f"layers must be 'all' (every layer at once) or 'each' (one at a time); got {layers!r}")
    found = value_projections(model)
    config = getattr(model.config, "text_config", None) or model.config
    heads = int(config.num_attention_heads)
    n, last = ids.numel(), max(targets)
    device = input_device(model)
    checkpoint = long_input(last + 1) if checkpoint is None else bool(checkpoint)
    from_kernel = keep_cache and checkpoint  # the model's own cache would be written again by recomputed layers
    sdpa = checkpoint if sdpa is None else bool(sdpa)
    state = _Pass(found, heads, n, len(targets), checkpoint)
    keep = last + 1 - min(targets)
    # checkpointed (long inputs): attention on SDPA where it is the same function (no (heads, n, n) weights
    # kept or recomputed in the backward pass); the backward passes run inside the block, which recompute layers
    with torch.enable_grad(), architecture_fixes(model), efficient_attention(model, sdpa) as kernel, \
            receiving(model, _receivers(model, state, targets if target_attention else None, from_kernel)):
        out = model(input_ids=ids[None, :last + 1].to(device), use_cache=keep_cache and not from_kernel,
                    logits_to_keep=keep)
        logits = out.logits[0, [t - last - 1 + keep for t in targets]]
        explained = (logits.detach().argmax(-1).cpu() if tokens is None
                     else torch.as_tensor(np.atleast_1d(tokens)).long())
        foil_ids = None if foils is None else torch.as_tensor(np.atleast_1d(foils)).long()
        objective = readout_values(logits, explained.to(logits.device),
                             None if foil_ids is None else foil_ids.to(logits.device), readout)
        if not all(state.hooked) or state.first is None:
            raise AttnflowError("a layer's value projection did not run; the architecture table names the wrong "
                                "module for attribution patching")
        if progress is not None:
            progress(1, 1 + len(targets))
        for i in range(len(targets)):
            state.target = i
            # down to layer 0's values: every layer's values lie on the way, and their hooks score them
            torch.autograd.grad(objective[i], [state.first], retain_graph=i < len(targets) - 1, allow_unused=True)
            if progress is not None:
                progress(2 + i, 1 + len(targets))
        state.first = None
    scores = state.scores
    for i, t in enumerate(targets):
        scores[i, :, t + 1:] = 0.0  # float round-off only: a causal target never sees later sources
    if layers == "all":
        scores = scores.sum(1, keepdims=True)
    clean_logits = logits.detach().cpu()
    clean = readout_values(clean_logits, explained, foil_ids, readout)
    attended = None
    if target_attention:
        if any(a is None for a in state.attended):
            raise AttnflowError("a layer's attention kernel did not run; the architecture table names the wrong "
                                "module for its attention")
        attended = torch.stack(state.attended).permute(2, 0, 1, 3).numpy()  # (targets, layers, heads, m)
    return Patching(scores=scores, targets=targets, tokens=[int(c) for c in explained.tolist()],
                    clean=clean.numpy(), readout=readout, method="ablated-flow-estimate", logits=clean_logits,
                    cache=(_kept_cache(model, state.kv) if from_kernel else _detached(output_cache(out))) if keep_cache
                    else None,
                    attention="sdpa" if kernel.calls else own_implementation(model), target_attention=attended)
