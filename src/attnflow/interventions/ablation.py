"""Ablated flow and occlusion: what the prediction loses when one source token is taken away.

**Ablated flow** (the interventional counterpart of the paper's attention flow; value zeroing,
Mohebbi et al. 2023): for a target position ``t`` and a source token ``j``, zero ``j``'s value
vectors ``v_j = x_j W_V + b_V`` (every head; every layer at once, or one layer at a time) and read
how the target's prediction changes. Nothing else is edited: ``j`` still enters every query's
softmax, its residual stream and its keys are kept, so the score measures what flows *out of* ``j``
through attention. **Occlusion** (leave-one-out) removes the token itself: ``"delete"`` drops it
from the sequence, a replacement vector puts that vector in place of its input embedding (the
output of the model's input-embedding module).

Readouts (``readout``), each "clean minus edited", so a positive score means the source supports
the explained token ``c`` (the model's argmax at ``t``, a given token, or the generated one):

- ``"logit"``: ``z_c(x) - z_c(x with j edited)``
- ``"logprob"``: the same with ``log softmax(z)_c``
- ``"contrastive"``: with ``z_c - z_f`` for a foil token ``f`` per target (``foils``)

**Exact, batched, cached.** A causal decoder's positions before ``j`` never see ``j``, so an edit of
``j`` leaves the prefix ``[0, j)`` as it was. The sources are sorted and taken ``batch_size`` at a
time (fewer on a long input: ``rows_per_call``); a chunk whose first source is ``j0`` starts from
the clean key/value cache of ``[0, j0)`` (built once, growing chunk by chunk; every row of the chunk
attends to that one prefix, ``attnflow.interventions.shared_prefix``, or where it cannot, a copy per row)
and runs only positions ``j0 .. t`` for every element of the chunk at once. One target costs about ``n^2 / 2`` token steps
over all sources instead of ``n^2`` (plus a clean pass); several targets (a generation) share each
source's run, since one run over ``[j, N)`` gives the edited logits at every later position. The
numbers equal one plain full forward pass per source and variant (no batch, no cache) to float
round-off: ``tests/test_ablation.py`` checks 1e-5 on tiny Llama (grouped-query), Mistral past its
sliding window, GPT-2, Gemma 2 and SmolLM2.

Which module is the value projection (and how a fused query/key/value projection lays out its
output) is the architecture table's row (``attnflow.hf.architectures.PROJECTIONS``).

API (stable; the explain/generate integration and the decoder study use it)::

    ablated_flow(model, input_ids, targets=None, *, layers="all", readout="logit", tokens=None,
                 foils=None, batch_size=16, progress=None, cache=None, clean_logits=None) -> Ablation
    occlusion(model, input_ids, targets=None, *, replacement=None, readout="logit", tokens=None,
              foils=None, batch_size=16, progress=None, cache=None, clean_logits=None) -> Ablation
    mean_embedding(model) -> (hidden,) the mean input embedding over the vocabulary
    Ablation.scores  # (len(targets), variants, n): variants = 1 ("all" / occlusion) or layers ("each")
    Ablation.targets, Ablation.tokens, Ablation.clean   # positions, explained ids, clean readouts
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import architecture, layer_windows, model_type, refuse_unsupported
from attnflow.capture.streaming import architecture_fixes, attention_modules, scoped
from attnflow.interventions.shared_prefix import sharing
from attnflow.capture.values import projections
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.hf.points import receiving
from attnflow.hf.weights import input_device, refuse_overflow

READOUTS = ("logit", "logprob", "contrastive")
LAYER_MODES = ("all", "each")
BATCH = 16

Progress = Callable[[int, int], None]


@dataclass
class Ablation:
    """Scores of an ablation run. ``scores[i, v, j]``: how much target ``targets[i]``'s readout drops
    when source ``j`` is edited in variant ``v`` (ablated flow ``layers="each"``: zeroed at layer
    ``v`` only; otherwise one variant: every layer at once / the occluded token). Sources after the
    target (which it cannot see) and, for deletion, the target itself score 0."""

    scores: np.ndarray
    targets: list[int]
    tokens: list[int]
    clean: np.ndarray
    readout: str
    method: str


# ------------------------------------------------------------------------------------ edits

@dataclass
class Edit:
    """The edit of one batch: ``zero[layer]`` = (batch rows, positions) whose values are zeroed at that
    layer (all layers: key -1); ``embed`` = (rows, positions, vector) replacing input embeddings."""

    zero: dict[int, tuple[torch.Tensor, torch.Tensor]]
    embed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


_EDIT: ContextVar[Edit | None] = ContextVar("attnflow_ablation", default=None)


def _value_columns(x: torch.Tensor, qkv: str | None, hd: int, heads: int) -> torch.Tensor:
    """A view of the value part of a value projection's output ``(batch, s, width)``: ``(batch, s, ...)``."""
    if qkv == "concat":  # queries (heads * d), keys, values (each (width - hd) / 2)
        return x[..., hd + (x.shape[-1] - hd) // 2:]
    if qkv == "interleaved":  # per head: query, key, value
        return x.view(*x.shape[:-1], heads, 3, x.shape[-1] // (3 * heads))[..., 2, :]
    return x


def _value_hook(layer: int, qkv: str | None, hd: int, heads: int) -> Any:
    def hook(module: Any, args: Any, output: Any) -> Any:
        edit = _EDIT.get()
        if edit is None:
            return None
        for key in (layer, -1):
            found = edit.zero.get(key)
            if found is not None and len(found[0]):
                out = output.clone()
                _value_columns(out, qkv, hd, heads)[found[0], found[1]] = 0
                output = out
        return output
    return hook


def _embed_hook(module: Any, args: Any, output: Any) -> Any:
    edit = _EDIT.get()
    if edit is None or edit.embed is None:
        return None
    rows, positions, vector = edit.embed
    out = output.clone()
    out[rows, positions] = vector.to(dtype=out.dtype, device=out.device)
    return out


@contextmanager
def editing(model: Any, values: bool) -> Iterator[None]:
    """For the block, receivers on the model's ``embed`` and (``values``) ``layers.i.attn.value`` hook
    points (``attnflow.hf.points``) that apply the ``Edit`` made active by ``edited``; idle
    while none is, and per thread, so threads sharing a model never see each other's edits."""
    receivers: dict[str, Any] = {"embed": _embed_hook}
    if values:
        config = getattr(model.config, "text_config", None) or model.config
        heads = int(getattr(config, "num_attention_heads", 0) or 0)
        for layer, projection in enumerate(value_projections(model)):
            receivers[f"layers.{layer}.attn.value"] = _value_hook(layer, projection.qkv, projection.w_o.shape[1], heads)
    with receiving(model, receivers):
        yield


def edited(edit: Edit) -> Any:
    """The context in which ``edit`` is the one applied (inside ``editing``), one batch at a time."""
    return scoped(_EDIT, edit)


def value_projections(model: Any) -> list[Any]:
    """Each layer's value projection (``attnflow.capture.values.Projection``), or a sentence saying
    why ablated flow cannot zero values in this model."""
    row = architecture(model)
    if row is None or row.value is None:
        raise AttnflowError(f"ablated flow zeroes each layer's value vectors, and the architecture table does not "
                            f"name the value projection of {model_type(model) or type(model).__name__!r} models; "
                            "use method='occlusion'")
    return projections(model, attention_modules(model))


# ---------------------------------------------------------------------------------- readouts

def readout_values(logits: torch.Tensor, tokens: torch.Tensor, foils: torch.Tensor | None,
                   readout: str) -> torch.Tensor:
    """``logits (..., vocab)``, ``tokens (...)`` -> ``(...)`` float64."""
    z = logits.to(torch.float64)
    if readout == "logprob":
        z = torch.log_softmax(z, dim=-1)
    value = z.gather(-1, tokens[..., None])[..., 0]
    if readout == "contrastive":
        value = value - z.gather(-1, foils[..., None])[..., 0]
    return value


def checked_inputs(model: Any, input_ids: Any, targets: Any, readout: str, tokens: Any, foils: Any,
           batch_size: int) -> tuple[torch.Tensor, list[int]]:
    refuse_unsupported(model)
    if not kind_of(model).lm:
        raise AttnflowError(f"ablated flow and occlusion reuse a causal decoder's key/value cache; "
                            f"{type(model).__name__} is not a decoder-only language model: `attnflow methods --model MODEL` "
                            "lists what it can run (attnflow.api.checks.runnable in Python)")
    if readout not in READOUTS:
        raise AttnflowError(f"readout must be one of {', '.join(READOUTS)}; got {readout!r}")
    ids = torch.as_tensor(input_ids).reshape(-1).long()
    n = ids.numel()
    if n < 1:
        raise AttnflowError("expected at least one input token")
    if targets is None:
        targets = [n - 1]
    targets = [int(t) % n if -n <= int(t) < n else int(t) for t in np.atleast_1d(np.asarray(targets)).tolist()]
    if not targets or any(not 0 <= t < n for t in targets) or len(set(targets)) != len(targets):
        raise AttnflowError(f"targets must be distinct positions in [0, {n}); got {targets}")
    if tokens is not None and len(np.atleast_1d(tokens)) != len(targets):
        raise AttnflowError(f"give one explained token per target ({len(targets)}); got {len(np.atleast_1d(tokens))}")
    if readout == "contrastive" and (foils is None or len(np.atleast_1d(foils)) != len(targets)):
        raise AttnflowError(f"readout='contrastive' needs one foil token per target ({len(targets)} targets)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AttnflowError(f"batch_size must be a positive integer; got {batch_size!r}")
    return ids, sorted(targets)


# ------------------------------------------------------------------------------------ engine

def cache_keyword(model: Any, *, required: bool = False) -> str | None:
    """The keyword ``model.forward`` takes its key/value cache by: ``cache`` under transformers >= 5.24
    (``past_key_values``, deprecated there, still passes through a shim that warns), ``past_key_values``
    for a forward that names only that (older modelling code), None for one that names neither (no cache
    can be handed to it by name; refused when ``required``)."""
    import inspect

    try:
        taken = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        taken = {}
    keyword = next((k for k in ("cache", "past_key_values") if k in taken), None)
    if keyword is None and required:
        raise AttnflowError(f"{type(model).__name__}.forward takes no key/value cache by name (cache or "
                            "past_key_values), which ablated flow continues from the clean prefix")
    return keyword


class Prefix:
    """The clean key/value cache of ``ids[:built]``, grown chunk by chunk, and the clean logits read
    on the way at the target positions. ``given``: a cache of the same sequence already computed (a
    generation's own): copies of it are cropped to each chunk's prefix instead, when its layers allow
    cropping (sliding-window layers keep only their window and do not)."""

    def __init__(self, model: Any, ids: torch.Tensor, targets: list[int], given: Any = None) -> None:
        from transformers import DynamicCache

        self.model, self.ids, self.targets = model, ids, targets
        self.given = given if given is not None and getattr(given, "is_croppable", False) else None
        self.cache = DynamicCache(config=model.config)
        self.built = 0
        self.logits: dict[int, torch.Tensor] = {}

    def grow(self, to: int) -> None:
        if to <= self.built or self.given is not None:
            return
        device = input_device(self.model)
        # logits at the targets in this stretch only (every position's: n x vocab, 1.6 GB at 8,192 tokens of
        # SmolLM2); none wanted: the last one (logits_to_keep=0 would mean all)
        inside = [t for t in self.targets if self.built <= t < to]
        keep = to - min(inside) if inside else 1
        out = self.model(input_ids=self.ids[None, self.built:to].to(device), use_cache=True, logits_to_keep=keep,
                         **{cache_keyword(self.model, required=True): self.cache})
        for t in inside:
            self.logits[t] = out.logits[0, t - to + keep].detach()
        self.built = to

    def kv(self, j0: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The clean keys and values of ``ids[:j0]`` per layer, ``(1, kv_heads, j0, head_dim)`` views of
        the given or grown cache (no copy), for re-runs that share them
        (``attnflow.interventions.shared_prefix``)."""
        if self.given is None:
            self.grow(j0)
        layers = (self.given or self.cache).layers
        return [(layer.keys[:, :, :j0], layer.values[:, :, :j0]) for layer in layers]

    def start(self, batch: int, j0: int, shared: Any = None) -> Any:
        """The cache a batch of ``batch`` rows starts from at ``j0``: the shared prefix's (``shared``, a
        ``attnflow.interventions.shared_prefix.SharedPrefix``), else a copy per row (None: no prefix)."""
        if shared is not None:
            return shared.cache(self.kv(j0) if j0 else None)
        return self.copy(batch, j0)

    def copy(self, batch: int, j0: int) -> Any:
        """The clean cache of ``ids[:j0]``, repeated ``batch`` times (None for an empty prefix)."""
        if j0 == 0:
            return None
        cache = None
        if self.given is not None:
            cache = copy.deepcopy(self.given)
            try:
                remove = cache.get_seq_length() - j0
                if remove > 0:
                    cache.crop(-remove)  # negative: drop that many positions from the end
            except (ValueError, RuntimeError):  # sliding-window layers past their window keep no past
                self.given, cache = None, None
        if cache is None:
            self.grow(j0)
            cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(batch)
        return cache


CALL_POSITIONS = 8192  # rows x positions of one edited call, at most (unless one row is longer)


def rows_per_call(batch_size: int, length: int) -> int:
    """Rows of one edited call over ``length`` positions: ``batch_size``, fewer on a long input so that a
    call's activations stay those of about ``CALL_POSITIONS`` positions (a 16-row batch of 8,192
    positions would hold 16 times a forward pass's activations; the multiply-accumulates are the same)."""
    return max(1, min(batch_size, CALL_POSITIONS // max(length, 1)))


def running(shared: Any, cache: Any) -> Any:
    """The context of an edited call from ``cache``: the shared prefix's, or none."""
    return nullcontext() if shared is None else shared.running(cache)


def _run(model: Any, ids: torch.Tensor, targets: list[int], elements: list[tuple[int, int]], *, delete: bool,
         replacement: torch.Tensor | None, readout: str, tokens: Any, foils: Any, batch_size: int,
         progress: Progress | None, variants: int, method: str, cache: Any = None,
         clean_logits: Any = None) -> Ablation:
    """Every element ``(source j, variant v)``: one edited run over ``[j0, last target]`` from the clean
    prefix cache of its chunk; ``v`` is the layer zeroed (-1: all layers, or an embedding edit)."""
    n = ids.numel()
    last = max(targets)
    device = input_device(model)
    scores = np.zeros((len(targets), variants, n))
    index = {t: i for i, t in enumerate(targets)}
    elements = sorted(elements)
    with (torch.no_grad(), architecture_fixes(model), editing(model, values=not delete and replacement is None),
          sharing(model) as shared):
        if clean_logits is None:  # the clean readouts: one pass (a generation gives its own logits)
            prefix = Prefix(model, ids, targets)
            prefix.grow(last + 1)
            clean_logits = torch.stack([prefix.logits[t] for t in targets])
        clean_logits = torch.as_tensor(clean_logits)
        # a float16 model that overflowed: refused now, not after one pass per source (and layer)
        refuse_overflow(model, clean_logits, f"{method}'s clean pass gave infinite or NaN logits")
        explained = (clean_logits.argmax(-1).cpu() if tokens is None
                     else torch.as_tensor(np.atleast_1d(tokens)).long())
        foil_ids = None if foils is None else torch.as_tensor(np.atleast_1d(foils)).long()
        clean = readout_values(clean_logits.cpu(), explained, foil_ids, readout)
        prefix = Prefix(model, ids, targets, given=cache)  # clean prefixes, chunk by chunk
        done = 0
        start = 0
        while start < len(elements):
            j0 = elements[start][0]
            chunk = elements[start:start + rows_per_call(batch_size, last + 1 - j0)]
            start += len(chunk)
            prefix.grow(j0)
            rows = torch.arange(len(chunk))
            sources = torch.tensor([j for j, _ in chunk])
            suffix = ids[j0:last + 1]
            if delete:
                batch_ids = torch.stack([torch.cat([suffix[: j - j0], suffix[j - j0 + 1:]]) for j, _ in chunk])
            else:
                batch_ids = suffix[None].expand(len(chunk), -1)
            zero: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            embed = None
            if replacement is not None:
                embed = (rows, sources - j0, replacement)
            elif not delete:
                for key in sorted({v for _, v in chunk}):
                    keep = torch.tensor([v == key for _, v in chunk])
                    zero[key] = (rows[keep], (sources - j0)[keep])
            # which positions of the run hold each target's logits (deletion shifts those after j by one)
            wanted = [t for t in targets if t >= j0]
            # logits only at the trailing positions that hold targets (the unembedding is a large share of
            # a small model's step): the last `keep` positions of the run, target t at t - last - 1 + keep
            keep = min(last + 1 - max(j0, wanted[0]), batch_ids.shape[1])
            cache_in = prefix.start(len(chunk), j0, shared)  # before the edit is active: it may run the prefix
            with edited(Edit(zero=zero, embed=embed)), running(shared, cache_in):
                out = model(input_ids=batch_ids.to(device), use_cache=True, logits_to_keep=keep,
                            **{cache_keyword(model, required=True): cache_in})
            logits = out.logits.detach().cpu()
            for b, (j, v) in enumerate(chunk):
                for t in wanted:
                    if t < j or (delete and t == j):
                        continue  # the target cannot see j (or is the deleted token itself): no change
                    at = t - last - 1 + keep
                    i = index[t]
                    changed = readout_values(logits[b, at], explained[i], None if foil_ids is None else foil_ids[i],
                                             readout)
                    scores[i, max(v, 0) if variants > 1 else 0, j] = float(clean[i] - changed)
            done += len(chunk)
            if progress is not None:
                progress(done, len(elements))
    return Ablation(scores=scores, targets=targets, tokens=[int(c) for c in explained.tolist()],
                    clean=clean.numpy(), readout=readout, method=method)


def _sources(targets: list[int]) -> list[int]:
    return list(range(max(targets) + 1))


def ablated_flow(model: Any, input_ids: Any, targets: Any = None, *, layers: str = "all", readout: str = "logit",
                 tokens: Any = None, foils: Any = None, batch_size: int = BATCH,
                 progress: Progress | None = None, cache: Any = None, clean_logits: Any = None) -> Ablation:
    """Ablated flow of a causal decoder (see the module docstring).

    input_ids: ``(n,)`` or ``(1, n)`` token ids. targets: positions to explain (default: the last;
        several share each source's run). layers: ``"all"`` (zero the source's values in every layer
        at once: one score per source, the headline) or ``"each"`` (one layer at a time: a layers
        axis, ``layers x`` the cost). readout, tokens, foils: see the module docstring (tokens
        default to the model's argmax at each target). batch_size: edited sequences per forward call.
    progress(done, total): called after every batch.
    cache, clean_logits: a key/value cache of ``input_ids`` already computed (a generation's own; used
        when its layers can be cropped) and the clean logits at the targets ``(len(targets), vocab)``
        in sorted target order, so that neither is computed again.

    Returns an ``Ablation`` with ``scores (len(targets), 1 or layers, n)``.
    """
    ids, targets = checked_inputs(model, input_ids, targets, readout, tokens, foils, batch_size)
    if layers not in LAYER_MODES:
        raise AttnflowError(f"layers must be 'all' (every layer at once) or 'each' (one at a time); got {layers!r}")
    n_layers = len(value_projections(model))
    variants = [-1] if layers == "all" else list(range(n_layers))
    lowest = [reach(layer_windows(model), t) for t in targets]  # per target, per variant: what can reach it
    elements = [(j, v) for j in _sources(targets) for v in variants if any(j >= low[v] for low in lowest)]
    found = _run(model, ids, targets, elements, delete=False, replacement=None, readout=readout, tokens=tokens,
                 foils=foils, batch_size=batch_size, progress=progress, variants=len(variants), method="ablated-flow",
                 cache=cache, clean_logits=clean_logits)
    for i, low in enumerate(lowest):  # outside the receptive field the effect is zero in the maths: exactly 0 here
        for k, v in enumerate(variants):
            found.scores[i, k, : low[v]] = 0.0
    return found


def reach(windows: list[int | None], target: int) -> dict[int, int]:
    """The lowest source position whose values can reach ``target``'s output, per variant: ``-1`` for
    every layer at once, ``l`` for layer ``l`` alone. A sliding-window layer ``l`` (window ``w``: a
    query sees itself and the ``w - 1`` keys before it) lets position ``p``'s output read only keys
    ``>= p - w + 1``; through the layers above, the target's output reads layer ``l``'s outputs at
    positions ``>= R_l`` only, so zeroing ``j``'s values in layer ``l`` changes nothing when
    ``j < R_l - w + 1``. Layers with full attention (``None``) reach back to 0. A source below this
    has an effect of exactly zero, whatever float round-off a run would show."""
    low, out = target, {}
    for layer in range(len(windows) - 1, -1, -1):
        w = windows[layer]
        low = 0 if w is None else max(0, low - (w - 1))
        out[layer] = low
    out[-1] = min(out.values(), default=0)
    return out


def mean_embedding(model: Any, chunk: int = 8192) -> torch.Tensor:
    """The mean over the vocabulary of what the input-embedding module outputs (scaled embeddings
    included, e.g. Gemma's), the usual "uninformative token" for replacement occlusion."""
    module = model.get_input_embeddings()
    vocab = module.weight.shape[0]
    device = input_device(model)
    total = None
    with torch.no_grad():
        for start in range(0, vocab, chunk):
            ids = torch.arange(start, min(vocab, start + chunk), device=device)
            part = module(ids[None])[0].to(torch.float64).sum(0)
            total = part if total is None else total + part
    return (total / vocab).to(module.weight.dtype)


def occlusion(model: Any, input_ids: Any, targets: Any = None, *, replacement: Any = None, readout: str = "logit",
              tokens: Any = None, foils: Any = None, batch_size: int = BATCH,
              progress: Progress | None = None, cache: Any = None, clean_logits: Any = None) -> Ablation:
    """Leave-one-out occlusion of a causal decoder: the readout's drop when source ``j`` is deleted
    (``replacement=None``) or its input embedding replaced by ``replacement`` (a ``(hidden,)``
    vector, or ``"mean"`` for ``mean_embedding``, ``"zero"`` for zeros). Batched and cached as
    ``ablated_flow``; ``scores (len(targets), 1, n)``."""
    ids, targets = checked_inputs(model, input_ids, targets, readout, tokens, foils, batch_size)
    vector = None
    if replacement is not None:
        hidden = model.get_input_embeddings().weight.shape[1]
        if isinstance(replacement, str):
            if replacement not in ("mean", "zero"):
                raise AttnflowError(f"replacement must be None (delete), 'mean', 'zero' or a vector; "
                                    f"got {replacement!r}")
            vector = mean_embedding(model) if replacement == "mean" else torch.zeros(hidden)
        else:
            vector = torch.as_tensor(replacement).reshape(-1)
            if vector.numel() != hidden:
                raise AttnflowError(f"the replacement embedding must have {hidden} numbers (the model's hidden size); "
                                    f"got {vector.numel()}")
    last = max(targets)  # deleting the last target itself leaves nothing to read; it scores 0
    elements = [(j, -1) for j in range(last if vector is None else last + 1)]
    return _run(model, ids, targets, elements, delete=vector is None, replacement=vector, readout=readout,
                tokens=tokens, foils=foils, batch_size=batch_size, progress=progress, variants=1,
                method="occlusion", cache=cache, clean_logits=clean_logits)
