"""The cost of the methods that run the model again on long inputs (cost classes ``PER_SOURCE`` and
``FORWARD_BACKWARD`` of ``attnflow.config.registry``): before the work, an estimate of its time
and memory; during it, progress; always, memory held under a budget.

``fit_to_budget`` is called by ``attnflow.api.methods.run_method`` for every such method on a model:

- **Time**: timed forward passes (batch 1, no gradients) over the first 128 and 256 tokens give a
  pass's per-token and per-key costs (``pass_costs``), summed over the cost class's token steps: ``PER_SOURCE`` runs, for each source ``j`` (and each layer, for
  ``ablated-flow-layers``), the positions from ``j`` to the last target from the clean key/value
  cache of the prefix, so about ``n / 2`` passes per variant; ``FORWARD_BACKWARD`` is one forward
  and one backward pass (about 3 passes) plus the decomposition. The estimate goes to
  ``progress.estimate`` when the progress callback has that method (the CLI prints it and its bar
  counts down from it, as for flow).
- **Memory**: the budget is ``ATTNFLOW_MEMORY_BUDGET`` (bytes, or with a unit: ``512M``, ``4G``) or,
  unset, half the machine's memory, at most ``DEFAULT_BUDGET``; it bounds the method's working
  memory, not the model's weights. ``PER_SOURCE``: each edited sequence of a batch holds a copy of
  the prefix's key/value cache (``2 x layers x kv heads x head dim`` numbers per token) and one
  layer's attention scores at a time, so the batch size is the number of such sequences that fit
  (``BATCH`` at most); even one sequence over the budget is refused. ``FORWARD_BACKWARD``
  keeps what its record's ``keeps`` fact says (``backward_memory``): the logit-path methods
  (``attnflow.interventions.logit_paths``, ``logit_paths_memory``) the targets' attention rows and
  every layer's values, ALTI-Logit also every layer's ``(n, n)`` scores, each with one layer's attention
  at a time; grad-rollout every layer's attention ``(layers, heads, n, n)`` in float64 and float32 kept by
  autograd; AttnLRP autograd's activations of every layer, or on its long path every layer's input and one
  layer's activations with its attention in chunks of query rows (``chunked_memory``);
  the one-pass estimate (and the budgeted chooser that runs it) one layer's at a time from
  ``CHECKPOINT_FROM`` positions, and there no attention weights at all where it runs attention on SDPA
  (``attnflow.interventions.efficient_attention``); the budgeted chooser's exact runs, a per-source
  run's memory, in batches that fit. None is chunked within a layer, so an input whose estimate exceeds
  the budget is refused, saying the estimate, the budget and what to do.
- **Ctrl-C**: the methods run in Python between layers and batches, so ``KeyboardInterrupt``
  arrives within one layer's work; nothing is written before a result is complete.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from attnflow.interventions.ablation import BATCH  # the largest batch of edited sequences: the engine's own default
from attnflow.config.registry import BUDGETED, FORWARD_BACKWARD, PER_SOURCE, Context, Method
from attnflow.errors import AttnflowError

DEFAULT_BUDGET = 8 * 2**30  # bytes: the most a method's working memory may take unless told otherwise
TIMED_MIN_TOKENS = 16       # shorter inputs are quick whatever the method: no timed pass
TIMED_TOKENS = 256          # the longest timed pass (see pass_costs)
GRADIENT_PASSES = 12       # a forward + backward method's time in passes (see fit_to_budget)
BYTES_PER_ATTENTION = 48    # a decomposition method's bytes per attention number (see gradient_memory)
BYTES_AUTOGRAD = 16         # bytes per attention number autograd keeps for one backward pass (see backward_memory)
BYTES_ONE_LAYER = 40        # the same for the one layer a checkpointed backward pass recomputes at a time
CHECKPOINTED_SDPA_MARGIN = 1.75  # a checkpointed pass on SDPA: measured peak over the counted tensors (backward_memory)
PER_SOURCE_SDPA_MARGIN = 1.25   # exact runs on SDPA: measured peak over per_source_memory's count (per_source_memory)
ATTNLRP_CHUNK_BYTES = 32 * 2**20  # AttnLRP's long path: one chunk of query rows' scores in float32
CHUNK_TENSORS = 6           # AttnLRP's long path: chunk-sized tensors alive at once (see chunked_memory)
CHUNKED_MARGIN = 1.25       # its measured peak over the counted tensors, above CHUNKED_FIXED (see chunked_memory)
CHUNKED_FIXED = 512 * 2**20  # bytes its measured peaks hold whatever the length (see chunked_memory)
LOGIT_PATHS_MARGIN = 1.5    # the logit paths' measured peak over logit_paths_memory's count (see there)
LOGIT_PATHS_PASSES = 4      # their pass on eager attention, its backward and DLA: measured 2.5-4.1 plain passes
ALTI_UNIT_PASSES = 27       # ALTI's scores, in passes per unit of alti_passes's ratio (see there)
BACKWARD_PASSES = 2         # a plain forward + backward method's time in passes (measured 1.8-1.9, see prepare)
LONG_SECONDS = 60.0          # an estimate this long names a method that answers within a stated cost
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_budget() -> int:
    """The working-memory budget in bytes (see the module docstring)."""
    text = os.environ.get("ATTNFLOW_MEMORY_BUDGET", "").strip()
    if not text:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return DEFAULT_BUDGET
        return min(DEFAULT_BUDGET, total // 2)
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if found is None or float(found.group(1)) <= 0:
        raise AttnflowError(f"ATTNFLOW_MEMORY_BUDGET must be a size such as 512M or 4G (bytes without a unit); "
                            f"got {text!r}")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass(frozen=True)
class MethodEstimate:
    """The expected work of one model-based method on one input: ``rows`` progress steps (edited
    sequences, or the stages of one pass), ``seconds`` of wall time, ``memory`` bytes of working memory
    under ``budget``, ``batch`` edited sequences per forward call (per-source methods)."""

    method: str
    tokens: int
    rows: int
    seconds: float
    memory: int
    budget: int
    batch: int = 1
    pass_seconds: float = 0.0
    per_source: bool = False
    variants: int = 1
    instead: str | None = None  # a method that answers within a stated cost (the record's long_default)

    def seconds_for(self, done: int) -> float:
        """Expected time of the first ``done`` steps: a per-source method's run for source ``j``
        covers the positions from ``j`` on, so early sources cost more than late ones."""
        if not self.per_source or self.rows <= 0:
            return self.seconds * done / max(self.rows, 1)
        r = self.rows / self.variants
        d = min(done / self.variants, r)
        return self.seconds * (d * r - d * d / 2) / (r * r / 2)

    def __str__(self) -> str:
        how = (f"{self.rows} edited runs in batches of {self.batch}" if self.per_source
               else "one forward and one backward pass" if self.rows <= 2
               else f"one forward pass and {self.rows - 1} backward passes, one per explained token")
        cheaper = (f"; --method {self.instead} answers within a stated budget of passes (exact where it fits, "
                   "estimated elsewhere)") if self.instead and self.seconds >= LONG_SECONDS else ""
        return (f"{self.method} on {self.tokens} tokens: about {_clock(self.seconds)} ({how}; one pass over the input: "
                f"about {self.pass_seconds:.2f} s), working memory about {_size(self.memory)} of a "
                f"{_size(self.budget)} budget (ATTNFLOW_MEMORY_BUDGET){cheaper}")


def _shape(model: Any) -> dict[str, int]:
    config = getattr(model.config, "text_config", None) or model.config
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0) or 1)
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 1)
    kv = int(getattr(config, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(config, "head_dim", 0) or (hidden // heads if hidden else 64))
    inner = int(getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", 0) or 4 * hidden)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    return dict(hidden=hidden, heads=heads, layers=layers, kv=kv, head_dim=head_dim, inner=inner, vocab=vocab)


def _element_size(model: Any) -> int:
    try:
        return next(model.parameters()).element_size()
    except (StopIteration, AttributeError):
        return 4


def per_source_memory(model: Any, n: int, sdpa: bool = False) -> tuple[int, int]:
    """(fixed bytes, bytes per edited sequence) of a per-source run over ``n`` tokens: the clean prefix
    cache (kept and copied once per batch) and the clean pass (logits at every position), and per sequence its
    own cache of up to ``n`` positions, one layer's attention scores over the run (eager attention: scores,
    softmax and a temporary; none on SDPA, ``sdpa``), its hidden states and feed-forward activations, and the
    logits it keeps."""
    s, size = _shape(model), _element_size(model)
    kv_token = 2 * s["layers"] * s["kv"] * s["head_dim"] * size
    scores = 0 if sdpa else 3 * s["heads"] * n * n * size
    # the prefix cache and its copy, and the clean pass over the input (its logits at every position)
    fixed = 2 * kv_token * n + n * s["vocab"] * size + scores
    per = kv_token * n + scores + n * (6 * s["hidden"] + 3 * s["inner"]) * size
    per += 2 * s["vocab"] * size
    if sdpa:  # the budgeted chooser's runs, 16 a batch, SmolLM2: measured 1.59 GB at 1,024 and 2.88 GB at 2,048
        # tokens (benchmarks/long_one_pass.py), the count above gives 1.59 and 3.16 GB
        fixed, per = int(PER_SOURCE_SDPA_MARGIN * fixed), int(PER_SOURCE_SDPA_MARGIN * per)
    return fixed, per


def gradient_memory(model: Any, n: int) -> int:
    """Bytes a forward + backward method keeps on ``n`` tokens when it keeps every layer's attention
    (grad-rollout; the logit paths did until they kept only what their decompositions read):
    every layer's attention ``(layers, heads, n, n)`` as float64 for the decomposition, as the model's
    dtype kept by autograd for the backward pass (weights and scores), and one float64 working copy of
    a layer's share in the decomposition; plus the values, residual and gradients per token."""
    s = _shape(model)
    maps = s["layers"] * s["heads"] * n * n
    tokens = s["layers"] * n * (s["hidden"] + 2 * s["heads"] * s["head_dim"]) * 8
    # 8 (float64 copy) + 8 (the model's float32 weights and scores kept for backward) bytes per attention
    # number, and the decomposition's float64 working arrays: measured 41 bytes per attention number in
    # all (a 30-layer, 9-head float32 Llama at 512 tokens: 2.9 GB); 48 keeps a margin
    return maps * BYTES_PER_ATTENTION + tokens


def _logits_rows(model: Any, n: int, rows: int) -> int:
    """How many positions' logits a logit-path pass makes: the targets' where the model's forward takes
    ``logits_to_keep`` (``attnflow.interventions.logit_paths``), else every position's."""
    import inspect

    forward = getattr(model, "forward", None)
    try:
        return rows if forward is not None and "logits_to_keep" in inspect.signature(forward).parameters else n
    except (TypeError, ValueError):
        return n


def _kept_rows(model: Any, n: int, rows: int) -> int:
    """The attention rows a logit-path pass keeps per layer: a decoder's targets; a classifier's logit
    reads every position."""
    from attnflow.hf.kind import kind_of

    try:
        classifier = kind_of(model.config).head == "classification"
    except Exception:  # a stand-in without a usable config: a decoder's rows
        classifier = False
    return n if classifier else max(1, min(rows, n))


def logit_paths_memory(model: Any, n: int, rows: int = 1, alti: bool = False) -> int:
    """Bytes the logit-path methods (``attnflow.interventions.logit_paths`` and the decompositions after
    it) take above the model on ``n`` tokens explaining ``rows`` targets: what the pass keeps to the end
    (every layer's values, the output projections' inputs as autograd leaves and their gradients, the
    targets' attention rows in the model's dtype; ``alti``: every layer's ``(n, n)`` ALTI scores in
    float32), plus the largest of what exists one at a time: one layer's eager attention (its scores,
    the float32 softmax and its cast, the mask), ALTI's work on one layer (its weights, each token's
    transformed value per head ``(H, n, hidden)`` float32 and a chunk's working arrays), a feed-forward
    block, the logits, the float64 decomposition of one layer and ALTI's rollout ``(n, n)``; times
    ``LOGIT_PATHS_MARGIN``. Measured (``benchmarks/long_context.py --steps "method NAME"``, peak RSS above the
    loaded model in a fresh process): Llama-3.2-1B's shape in bfloat16 at 2,048 tokens, logit-attribution
    1.73 GB and alti-logit 1.90 GB against counts of 1.39 and 1.66 GB (1.25 and 1.15 times: one layer's eager
    attention, about 1.07 GB, is the largest part of both); SmolLM2-135M in float32 at 512 tokens, 0.08 and
    0.23 GB against 0.11 and 0.27 GB."""
    from attnflow.interventions.logit_paths import ALTI_WORKING

    s, size = _shape(model), _element_size(model)
    layers, heads, kv, d, hidden = s["layers"], s["heads"], s["kv"], s["head_dim"], s["hidden"]
    kept_rows = _kept_rows(model, n, rows)
    kept = layers * n * (kv + 2 * heads) * d * size + layers * heads * kept_rows * n * size
    kept += 2 * layers * kept_rows * heads * d * 8  # the targets' gradients and contexts in float64
    attention = heads * n * n * (2 * size + 4) + n * n * size
    ffn = n * (3 * s["inner"] + 4 * hidden) * size
    logits = 2 * _logits_rows(model, n, kept_rows) * s["vocab"] * size
    decomposition = n * heads * d * 8 + kept_rows * n * heads * 8 * 3
    largest = max(attention, ffn, logits, decomposition)
    if alti:
        kept += layers * n * n * 4
        chunk = max(1, min(64, ALTI_WORKING // (2 * n * hidden * 4)))
        work = heads * n * n * size + heads * n * (hidden + d) * 4 + 2 * chunk * n * hidden * 4 + n * n * 4
        largest = max(largest, work, 3 * n * n * 8)
    return int(LOGIT_PATHS_MARGIN * (kept + largest))


def alti_passes(model: Any, n: int) -> float:
    """ALTI's scores on ``n`` tokens in plain forward passes: ``layers n^2 heads hidden / 2`` multiply-adds
    and as many memory-bound element-wise steps (a decoder's causal half), against a pass's ``n x
    parameters`` multiply-adds, times ``ALTI_UNIT_PASSES`` (measured: 592 CPU seconds beyond the pass and DLA
    against a 25 s SDPA pass at Llama-3.2-1B's shape in bfloat16 at 2,048 tokens, a ratio of 0.87: 27 passes
    per unit; SmolLM2-135M at 512 tokens in float32: 8.5 passes in all, modelled 12)."""
    s = _shape(model)
    try:
        parameters = sum(p.numel() for p in model.parameters())
    except (AttributeError, TypeError):  # a stand-in: a decoder's weights from its shape
        parameters = s["layers"] * (4 * s["hidden"] ** 2 + 3 * s["hidden"] * s["inner"]) + s["vocab"] * s["hidden"]
    return ALTI_UNIT_PASSES * s["layers"] * n * s["heads"] * s["hidden"] / 2 / max(parameters, 1)


def backward_memory(keeps: str, model: Any, n: int, budget: int | None = None, rows: int = 1) -> int:
    """Bytes a forward + backward method keeps on ``n`` tokens, by what its record says it keeps
    (``attnflow.config.registry.KEEPS``): ``"decomposition"`` ``gradient_memory``; ``"target rows"`` and
    ``"alti scores"`` ``logit_paths_memory`` for ``rows`` targets;
    ``"autograd"`` every layer's attention as autograd keeps it for the backward pass, plus each
    layer's per-token activations and their gradients; ``"checkpointed"`` the same below
    ``attnflow.interventions.attribution_patching.CHECKPOINT_FROM`` positions, and from there one layer's
    attention at a time plus every layer's input. Measured on SmolLM2-135M (30 layers, 9 heads, float32,
    peak RSS above the loaded model): the one-pass estimate 1.0 GB at 512 tokens and 2.9 GB at 1,024
    without checkpointing (14.9 and 10.7 bytes per attention number, activations included), 0.32 GB at
    1,024 checkpointed (34 bytes per attention number of one layer); AttnLRP 2.0 GB and 3.3 GB. The
    constants keep a margin above those. From ``CHECKPOINT_FROM`` on, where the pass runs attention on
    SDPA (``attnflow.interventions.efficient_attention``), nothing ``(n, n)`` is kept or formed: every
    layer's input, every layer's values with their zero leaves and gradients, one layer's activations
    and their gradients. Measured (``benchmarks/long_one_pass.py``, SmolLM2-135M, 8,192 tokens, one
    thread): 0.25, 0.62 and 2.19 GB at 1,024, 2,048 and 8,192 tokens, 1.18 to 1.48 times the tensors
    counted here (0.21, 0.42, 1.66 GB); ``CHECKPOINTED_SDPA_MARGIN`` 1.75 gives 0.36, 0.73 and 2.91
    GB. Before SDPA that pass was modelled at 25 GB at 8,192 tokens (one layer's eager attention).
    ``"chunked"``: ``"autograd"`` where AttnLRP runs its plain pass, ``chunked_memory`` where it takes its
    long path (``long_path``, under ``budget``)."""
    if keeps == "decomposition":
        return gradient_memory(model, n)
    if keeps in ("target rows", "alti scores"):
        return logit_paths_memory(model, n, rows, alti=keeps == "alti scores")
    from attnflow.interventions.attribution_patching import CHECKPOINT_FROM

    s, size = _shape(model), _element_size(model)
    per_token = n * (6 * s["hidden"] + 3 * s["inner"]) * size * 2  # one layer's activations and their gradients
    if keeps == "chunked" and long_path(model, n, budget):
        return chunked_memory(model, n)
    if keeps == "checkpointed" and n >= CHECKPOINT_FROM:
        kept = s["layers"] * n * s["hidden"] * size  # every layer's input, kept for the recomputation
        if not _on_sdpa(model):  # eager attention: one layer's (heads, n, n) weights and softmax graph at a time
            return s["heads"] * n * n * BYTES_ONE_LAYER + per_token + kept
        # SDPA: nothing (n, n); every layer's values, their zero leaves and gradients (3 x layers x kv x head dim)
        values = 3 * s["layers"] * n * s["kv"] * s["head_dim"] * size
        return int(CHECKPOINTED_SDPA_MARGIN * (per_token + kept + values))
    return s["layers"] * (s["heads"] * n * n * BYTES_AUTOGRAD + per_token)


def long_path(model: Any, n: int, budget: int | None = None) -> bool:
    """Whether AttnLRP takes its long path (``attnflow.interventions.attnlrp``) on ``n`` positions: from
    ``CHECKPOINT_FROM`` positions, and below where its plain pass (every layer's attention kept) would
    not fit the memory budget."""
    from attnflow.interventions.attribution_patching import CHECKPOINT_FROM

    if n >= CHECKPOINT_FROM:
        return True
    return backward_memory("autograd", model, n) > (memory_budget() if budget is None else budget)


def chunked_memory(model: Any, n: int) -> int:
    """Bytes AttnLRP's long path keeps on ``n`` tokens (``attnflow.interventions.attnlrp``, from
    ``CHECKPOINT_FROM`` positions): every layer's input (kept for the recomputation) and the additive mask,
    one recomputed layer's activations and their gradients, and its attention's chunks of query rows
    (``ATTNLRP_CHUNK_BYTES`` each in float32, ``CHUNK_TENSORS`` of them alive at once: scores, weights and their
    gradients), times ``CHUNKED_MARGIN``, plus ``CHUNKED_FIXED``. Measured at the Llama-3.2-1B shape in
    bfloat16 (peak RSS above the loaded model, one thread): through ``attnflow.explain``
    (``benchmarks/long_context.py``) 0.95 GB at 1,024 tokens and 1.03 GB at 2,048 (counted here: 0.42
    and 0.65 GB; modelled: 1.06 and 1.34 GB); ``attnlrp`` alone with 2 of its 16 layers 0.58 and 0.63 GB
    (counted 0.36 and 0.53). The plain pass's ``"autograd"`` model says 11 and 39 GB there."""
    s, size = _shape(model), _element_size(model)
    kept = s["layers"] * n * s["hidden"] * size + n * n * size
    layer = n * (6 * s["hidden"] + 3 * s["inner"]) * size * 2
    chunk = CHUNK_TENSORS * min(ATTNLRP_CHUNK_BYTES, s["heads"] * n * n * max(size, 4))
    return int(CHUNKED_MARGIN * (kept + layer + chunk)) + CHUNKED_FIXED


def _on_sdpa(model: Any) -> bool:
    """Whether a long estimate pass runs ``model``'s attention on SDPA
    (``attnflow.interventions.efficient_attention.why_not``)."""
    from attnflow.interventions.efficient_attention import why_not

    try:
        return not why_not(model)
    except AttributeError:  # not a model (no config): assume eager, the larger
        return False


def _exact_run_memory(model: Any, n: int) -> tuple[int, int]:
    """``per_source_memory`` of the budgeted chooser's exact runs over ``n`` tokens: on SDPA for a
    long input where the model can be, as ``attnflow.interventions.budgeted`` runs them."""
    from attnflow.interventions.attribution_patching import long_input

    return per_source_memory(model, n, sdpa=_shares_prefix(model) or (long_input(n) and _on_sdpa(model)))


def _shares_prefix(model: Any) -> bool:
    """Whether ``model``'s exact re-runs attend to one shared prefix on the fused kernel
    (``attnflow.interventions.shared_prefix``): no attention scores per sequence."""
    from attnflow.interventions.shared_prefix import usable

    try:
        return not usable(model)
    except AttributeError:  # not a model (no config): assume the copying path, the larger
        return False


def _budgeted_batch(context: Context, n: int, budget: int) -> Context:
    """The budgeted chooser's exact runs hold a per-source run's memory (``_exact_run_memory``):
    their batch is what fits the budget (16 at most), as for ablated flow (one run over the budget was
    refused before, by ``refuse_over_budget``)."""
    from dataclasses import replace

    if context.batch_size:
        return context
    fixed, per = _exact_run_memory(context.model, n)
    return replace(context, batch_size=int(max(1, min(BATCH, (budget - fixed) // per))))


def _timed_pass(model: Any, ids: Any) -> float:
    import torch

    from attnflow.capture.streaming import architecture_fixes

    device = next(model.parameters()).device
    batch = torch.as_tensor(ids).reshape(1, -1).long().to(device)
    with torch.no_grad(), architecture_fixes(model):
        started = time.perf_counter()
        model(input_ids=batch, use_cache=False)
        return time.perf_counter() - started


def pass_costs(model: Any, ids: Any) -> tuple[float, float]:
    """``(a, b)`` of a pass's time ``a n + b n^2`` over ``n`` tokens (per-token work, attention over
    the keys), from timed passes over the first ``TIMED_TOKENS`` and half as many tokens (the whole
    input when shorter: then ``b`` is 0 and ``a n`` is the pass's time): a long input is not run
    whole just to time it."""
    n = len(ids)
    if n <= TIMED_TOKENS:
        return _timed_pass(model, ids) / n, 0.0
    m = TIMED_TOKENS
    short, long = _timed_pass(model, ids[:m // 2]), _timed_pass(model, ids[:m])
    # short = a m/2 + b m^2/4, long = a m + b m^2  ->  b = (long - 2 short) / (m^2 / 2)
    b = max(0.0, (long - 2 * short) / (m * m / 2))
    a = max(0.0, (long - b * m * m) / m)
    return a, b


def refuse_over_budget(record: Method, model: Any, tokens: int, explained: int, budget: int | None = None,
                       rows: int = 1) -> None:
    """Refuse ``record`` on ``tokens`` input tokens (``explained``: the last explained position + 1)
    when its working memory cannot fit the budget (see the module docstring), in one sentence saying
    the estimate, the budget and what to do. Reads only ``model.config`` and the parameters' element
    size, so ``attnflow.api.text.prepare`` calls it before the input is captured (a long input's
    capture is itself minutes and gigabytes) and ``fit_to_budget`` again on the method's own rows."""
    if record.cost not in (PER_SOURCE, FORWARD_BACKWARD, BUDGETED):
        return
    budget = memory_budget() if budget is None else budget
    if record.cost in (FORWARD_BACKWARD, BUDGETED):
        memory = backward_memory(record.keeps, model, tokens, budget, rows)
        if memory > budget:
            longest = int(tokens * (budget / memory) ** 0.5)
            what = {"checkpointed": "a layer's attention over the whole input at a time",
                    "target rows": "the explained rows of every layer's attention, and a layer's attention over "
                                   "the whole input at a time",
                    "chunked": "every layer's input and one layer's activations at a time",
                    "alti scores": "every layer's ALTI contributions over the whole input (layers x n x n), and a "
                                   "layer's attention at a time"}.get(record.keeps,
                                                                      "every layer's attention over the whole input")
            raise AttnflowError(
                f"{record.name} keeps {what}: about {_size(memory)} for {tokens} tokens, over the "
                f"{_size(budget)} memory budget (ATTNFLOW_MEMORY_BUDGET); explain a shorter text (about {longest} "
                "tokens fit), raise the budget if the machine has the memory, or use ablated-flow, whose memory "
                "the budget bounds")
        if record.cost != BUDGETED:
            return
    # one edited sequence (the budgeted chooser: one of its exact runs) must fit
    fixed, per = (_exact_run_memory(model, explained) if record.cost == BUDGETED
                  else per_source_memory(model, explained, sdpa=_shares_prefix(model)))
    if fixed + per > budget:
        run = "one exact run" if record.cost == BUDGETED else "one edited sequence"
        raise AttnflowError(
            f"{record.name} on {explained} tokens needs about {_size(fixed + per)} for {run}, over the "
            f"{_size(budget)} memory budget (ATTNFLOW_MEMORY_BUDGET); explain a shorter text or raise the "
            "budget")


def fit_to_budget(record: Method, context: Context) -> Context:
    """The estimate, the budget and the batch size of ``record`` on ``context`` (see the module
    docstring): refuses what cannot fit, hands the estimate to ``context.progress.estimate`` when it
    has one, and returns the context with the batch size a per-source method should use."""
    if record.cost not in (PER_SOURCE, FORWARD_BACKWARD, BUDGETED) or context.model is None \
            or context.input_ids is None:
        return context
    import numpy as np

    ids = np.asarray(context.input_ids).reshape(-1)
    rows = range(len(ids)) if context.rows is None else context.rows
    n = int(max(rows)) + 1 if len(rows) else len(ids)
    budget = memory_budget()
    model = context.model
    refuse_over_budget(record, model, len(ids), n, budget, rows=len(rows))
    if record.cost == BUDGETED:  # its runs are counted by its own progress (the chooser's plan)
        return _budgeted_batch(context, n, budget)
    if record.cost == FORWARD_BACKWARD:
        memory = backward_memory(record.keeps, model, len(ids), budget, len(rows))
        # one forward pass, then one backward pass per row (each about a pass) or one for every row
        batch, variants, steps = 1, 1, 1 + len(rows) if record.backward_per_row else 2
    else:
        fixed, per = per_source_memory(model, n, sdpa=_shares_prefix(model))
        batch = int(context.batch_size or max(1, min(BATCH, (budget - fixed) // per)))
        memory = fixed + batch * per
        variants = _shape(model)["layers"] if record.layers else 1
        steps = n * variants
    estimate = getattr(context.progress, "estimate", None)
    if estimate is not None and len(ids) >= TIMED_MIN_TOKENS:
        length = n if record.cost == PER_SOURCE else len(ids)
        a, b = pass_costs(model, ids[:length])
        took = a * length + b * length * length  # one pass over the whole input
        if record.cost == PER_SOURCE:
            # the run for source j covers positions j..n-1, position p attending to p keys:
            # sum_j (a (n - j) + b (n^2 - j^2)) = a n^2 / 2 + 2 b n^3 / 3, per variant
            seconds = variants * (a * length * (length + batch) / 2 + 2 * b * length ** 3 / 3)
        else:
            # a forward pass, a backward pass and the float64 decomposition over (L, H, n, n): measured
            # 12 passes' time on a 30-layer, 9-head float32 Llama at 512 tokens (10.7 s against 0.9 s); without
            # the decomposition, 1.8-1.9 passes (the estimate, AttnLRP: benchmarks/attnlrp_faithfulness.py)
            passes = {"decomposition": GRADIENT_PASSES, "target rows": LOGIT_PATHS_PASSES,
                      "alti scores": LOGIT_PATHS_PASSES + alti_passes(model, len(ids))}.get(record.keeps,
                                                                                         BACKWARD_PASSES)
            if record.backward_per_row:  # the forward pass once, a backward pass (passes - 1) per row
                passes = 1 + (passes - 1) * len(rows)
            seconds = passes * took
        estimate(MethodEstimate(method=record.name, tokens=len(ids), rows=steps, seconds=seconds, memory=memory,
                                budget=budget, batch=batch, pass_seconds=took,
                                per_source=record.cost == PER_SOURCE, variants=variants, instead=record.long_default))
    if record.cost == PER_SOURCE and not context.batch_size:
        from dataclasses import replace

        context = replace(context, batch_size=batch)
    return context
