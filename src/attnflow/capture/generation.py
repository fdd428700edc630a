"""Run a decoder's own ``generate`` and track attention rollout for every generated token.

Streaming hooks on the attention modules (``attnflow.capture.streaming``) see each forward call of
``model.generate`` layer by layer: the first call is the prompt (one ``(heads, m, m)`` map per layer,
fused into ``(m, m)`` at once and dropped), each later call is one KV-cached step whose single query
adds one row per layer. The prefix is never run again, transformers is never asked for its attention
tuple, and earlier steps' attentions are not kept. Everything ``model.generate`` takes (greedy,
sampling, temperature, top-k/p, stopping) works; beam search and assisted decoding, whose steps are
not one query per call, are refused.

Two ways to turn the captured rows into rollout rows give the same numbers (tested against one
teacher-forced pass); ``strategy="auto"`` takes the cheaper:

- ``"rows"``: keep the fused maps ``W`` ``(layers, N, N)`` float32 (``N = m + max_new_tokens``; the
  prompt block plus one row per step) and, once generation ends, compute the rows of the ``k``
  predicting positions top-down by vector-matrix products (``attnflow.core.rollout.rollout_rows``):
  ``4 L N^2`` bytes and ``k L (L + 1) / 2 N^2`` multiply-adds. At a 4,096-token prompt on
  SmolLM2-135M (30 layers) that is 2.0 GB and a few seconds for 20 new tokens.
- ``"replay"``: generate on the model's own attention with nothing captured, then run the whole sequence
  once more through the row capture (``attnflow.capture.rows``: one SDPA pass keeping each layer's
  queries and keys, then every predicting position's rows top down, ``attnflow.core.qk_rows``): the
  teacher-forced pass every strategy is tested against, in memory that grows with ``N`` (the queries
  and keys) instead of ``N^2``, for one more forward pass. Chosen when the fused maps of ``"rows"`` would
  exceed ``REPLAY_FROM_BYTES`` and the model takes the row capture (weighting "attention").
- ``"incremental"``: roll out the prompt once and extend it by one row per layer and step
  (``attnflow.core.incremental.IncrementalRollout``): ``L m^3`` multiply-adds for the prompt,
  ``L N^2`` per step, and ``L (2N)^2`` float64 numbers at most (its buffer doubles as it grows).
  Cheaper for short prompts and long generations; chosen only while that buffer stays under
  ``INCREMENTAL_MAX_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import layer_windows, refuse_unsupported, why_not_rows
from attnflow.capture.streaming import (architecture_fixes, checked_weights, pending_norms, replay_attentions,
                                   streamable_modules, streaming)
from attnflow.hf.load import output_cache
from attnflow.capture.text import encode, is_causal, max_length, token_strings
from attnflow.capture.values import projections
from attnflow.core.fusion import check_head_fusion, fuse_heads
from attnflow.core.incremental import IncrementalRollout, window_columns
from attnflow.core.rollout import rollout_rows
from attnflow.core.weighting import check_weighting, norm_weighted
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.hf.weights import input_device

_REFUSED = {"num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "assistant_model": None,
            "prompt_lookup_num_tokens": None}
STRATEGIES = ("auto", "rows", "incremental", "replay")
INCREMENTAL_MAX_BYTES = 2 * 2**30
REPLAY_FROM_BYTES = 2**30  # the fused maps of "rows" above which "auto" replays the sequence instead


@dataclass
class GenerationTrace:
    """What ``track_generation`` saw. Positions: the prompt is ``0..m-1``, generated token ``i``
    sits at ``m + i`` and is predicted by position ``m - 1 + i``.

    rows: ``(n_new, layers, m + n_new)``: the rollout row of the position that predicted generated
        token ``i``, at every layer, over every position (zero from column ``m + i`` on, the
        positions it could not see); each row sums to 1.
    strategy: how the rows were computed ("rows" or "incremental", see the module docstring).
    cache, logits: with ``keep_cache=True``, the generation's key/value cache (every position but the
        last) and its logits ``(n_new, vocab)`` at the predicting positions, for methods that reuse them.
    """

    prompt_ids: list[int]
    new_ids: list[int]
    prompt_tokens: list[str]
    generated_tokens: list[str]
    completion: str
    rows: np.ndarray
    do_sample: bool
    strategy: str = "rows"
    cache: Any = None
    logits: Any = None


@contextmanager
def quiet_generate_warning() -> Iterator[None]:
    """transformers warns that ``output_attentions`` "may be ignored" without
    ``return_dict_in_generate``; it is not ignored (the hook receives it), and asking for the dict
    would make transformers keep every step's attention, which is what we avoid. (Only models whose
    classes declare no attention modules are run with ``output_attentions``.)"""
    import transformers

    before = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(before)


def check_generation(prompt: Any, max_new_tokens: Any, kwargs: dict) -> None:
    """Refuse, in one sentence, a blank prompt (or source), a ``max_new_tokens`` that is not a positive
    integer, or a ``generate`` keyword that would not track one sequence one token per step."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise AttnflowError("the prompt must be a non-empty string")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise AttnflowError(f"max_new_tokens must be a positive integer; got {max_new_tokens!r}")
    for key, allowed in _REFUSED.items():
        if kwargs.get(key, allowed) != allowed:
            raise AttnflowError(f"generate tracks one sequence one token per step; {key}={kwargs[key]!r} is not supported")


def choose_strategy(m: int, new: int, n_layers: int, replayable: bool = False) -> str:
    """The cheaper way for an ``m``-token prompt and ``new`` tokens (see the module docstring); ``replayable``:
    the model takes the row capture, so maps too big to keep are replaced by one more pass."""
    n = m + new
    if replayable and 4 * n_layers * n * n > REPLAY_FROM_BYTES:
        return "replay"
    rows = new * n_layers * (n_layers + 1) / 2 * n * n
    incremental = n_layers * float(m) ** 3 + new * n_layers * n * n
    fits = n_layers * (2 * n) ** 2 * 8 <= INCREMENTAL_MAX_BYTES
    return "incremental" if fits and incremental < rows else "rows"


class _Steps:
    """Receives each layer's fused attention of every forward call of ``generate`` and keeps it
    as the chosen strategy needs: ``W[l, q, :q+1]`` for the prompt block and each cached row."""

    def __init__(self, n_layers: int, m: int, capacity: int, head_fusion: str, strategy: str,
                 tracker: IncrementalRollout, from_output: bool, windows: list[int | None] | None = None,
                 projections: list[Any] | None = None) -> None:
        self.from_output = from_output
        # Norm weighting: each call's value projection outputs (only the new positions: earlier keys are
        # cached), turned into per-head norms kept for every position, since later steps attend to them.
        self.projections, self.pending = projections, {}
        self.norms: torch.Tensor | None = None  # (layers, heads, capacity)
        self.capacity = capacity
        self.windows = list(windows or [])  # per layer: the sliding window, or None (full attention)
        self.n_layers, self.m, self.head_fusion = n_layers, m, head_fusion
        self.strategy, self.tracker = strategy, tracker
        size = capacity if strategy == "rows" else m
        self.w = torch.zeros(n_layers, size, size, dtype=torch.float32)
        self.row = torch.zeros(n_layers, capacity, dtype=torch.float32)  # the current step's row per layer
        self.position = 0  # the query position of the current call (prompt: 0)
        self.calls = 0
        self.layers_seen = 0

    def values(self, layer: int, projected: Any) -> None:
        self.pending[layer] = projected.detach()

    def _norms(self, layer: int, w: torch.Tensor, first: int) -> torch.Tensor:
        """Store the norms of this call's new positions (from ``first``) and return layer ``layer``'s
        norms ``(heads, positions so far)``."""
        new = pending_norms(self.pending, self.projections, layer, w.shape[0])[0]  # (heads, new positions)
        if self.norms is None:
            self.norms = torch.zeros(self.n_layers, w.shape[0], self.capacity, dtype=torch.float32)
        self.norms[layer, :, first:first + new.shape[-1]] = new
        return self.norms[layer, :, :first + new.shape[-1]]

    def layer(self, layer: int, weights: Any) -> None:
        weights = checked_weights(weights)
        if weights.shape[0] != 1:  # e.g. beams from the model's own generation_config
            raise AttnflowError(f"generate tracks one sequence; the model ran {weights.shape[0]} at once "
                                "(pass num_beams=1 and num_return_sequences=1)")
        w = weights[0].to(dtype=torch.float32)  # (heads, queries, keys), on the model's device until fused
        queries, keys = w.shape[-2:]
        self.layers_seen += 1
        if self.calls == 0:
            if queries != self.m or keys != self.m:
                raise AttnflowError(f"the prompt pass gave attention over {queries} x {keys} positions; expected "
                                    f"{self.m} x {self.m}")
            self.w[layer, : self.m, : self.m] = self._fuse(layer, w, slice(0, self.m), 0)
            return
        if queries != 1:
            raise AttnflowError(f"a generation step fed {queries} tokens at once; only one-token cached steps "
                                "are supported")
        t = self.position
        # a sliding-window layer's cached step returns only its window's keys: the most recent ones
        window = self.windows[layer] if layer < len(self.windows) else None
        columns = window_columns(keys, t + 1, window, layer)
        self.row[layer, : t + 1] = 0
        self.row[layer, columns] = self._fuse(layer, w, columns, t)[0]

    def _fuse(self, layer: int, w: torch.Tensor, columns: slice, first: int) -> torch.Tensor:
        """``(queries, keys)``: the heads of ``w`` fused, or norm-weighted over the keys at ``columns``."""
        if self.projections is None:
            return fuse_heads(w, self.head_fusion).to(device="cpu")
        norms = self._norms(layer, w, first)[:, columns].to(w.device)
        return norm_weighted(w, norms, self.head_fusion).to(device="cpu")

    def end_call(self, output: Any) -> None:
        """After each forward call: every layer must have reported; store the new row."""
        if self.from_output:  # no declared attention modules: this call's tuple, layer by layer
            replay_attentions(output, self)
        if self.layers_seen != self.n_layers:
            raise AttnflowError(f"expected {self.n_layers} attention layers per forward call; saw {self.layers_seen}")
        self.layers_seen = 0
        t = self.position
        if self.calls == 0:
            if self.strategy == "incremental":
                self.tracker.start(self.w[:, None])
                self.w = self.w[:, :0, :0]  # the tracker holds the rollout now
            self.position = self.m
        else:
            if self.strategy == "incremental":
                self.tracker.append(self.row[:, None, : t + 1])
            else:
                self.w[:, t, : t + 1] = self.row[:, : t + 1]
            self.position = t + 1
        self.calls += 1


def track_generation(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int = 20, *,
                     residual: float = 0.5, head_fusion: str = "mean", causal_norm: str | None = None,
                     strategy: str = "auto", weighting: str = "attention", keep_cache: bool = False,
                     **generate_kwargs: Any) -> GenerationTrace:
    """Generate a completion of ``prompt`` with a loaded causal LM and roll out attention for every
    generated token (see ``GenerationTrace``).

    max_new_tokens: how many tokens to generate at most (generation may stop earlier at EOS).
    residual, head_fusion, causal_norm: as in ``attnflow.rollout``.
    strategy: "auto" (the cheaper), "rows" or "incremental"; see the module docstring. Same numbers.
    weighting: "attention" or "norm" (each layer's map weighted by the lengths of the transformed
        value vectors, ``attnflow.core.weighting``; the norms of earlier positions are kept, as
        their keys and values are cached).
    keep_cache: keep the generation's key/value cache and logits in the trace (see ``GenerationTrace``).
    generate_kwargs: passed to ``model.generate`` (``do_sample=True, top_k=50``, ...); seed with
        ``torch.manual_seed`` for reproducible sampling.
    """
    check_generation(prompt, max_new_tokens, generate_kwargs)
    if tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    refuse_unsupported(model)
    if not is_causal(model):
        raise AttnflowError(f"generate needs a causal language model; {type(model).__name__} is not one")
    if strategy not in STRATEGIES:
        raise AttnflowError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    check_head_fusion(head_fusion)
    check_weighting(weighting)
    enc = encode(tokenizer, [prompt])
    m = enc["input_ids"].shape[1]
    limit = max_length(model, tokenizer)
    if limit is not None and m + max_new_tokens > limit:
        raise AttnflowError(f"prompt ({m} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's {limit}")
    tracker = IncrementalRollout(residual=residual, head_fusion=head_fusion, causal_norm=causal_norm)
    modules = streamable_modules(model)
    found = projections(model, modules) if weighting == "norm" else None
    n_layers = len(modules) or int(model.config.num_hidden_layers)
    replayable = weighting == "attention" and bool(modules) and not why_not_rows(model, kind_of(model).family)
    if strategy == "auto":
        strategy = choose_strategy(m, max_new_tokens, n_layers, replayable)
    elif strategy == "replay" and not replayable:
        raise AttnflowError(f"strategy 'replay' runs the row capture, which {type(model).__name__} with weighting "
                            f"{weighting!r} does not take; use 'rows' or 'incremental'")
    steps = _Steps(n_layers, m, m + max_new_tokens, head_fusion, strategy, tracker, from_output=not modules,
                   windows=layer_windows(model), projections=found)
    device = input_device(model)
    kwargs = {"do_sample": False, **generate_kwargs, "max_new_tokens": max_new_tokens,
              "return_dict_in_generate": False, "use_cache": True}
    if not modules:
        kwargs["output_attentions"] = True
    keep_cache = keep_cache and bool(modules)  # the dict would also keep every step's attention tuple
    if keep_cache:
        kwargs.update(return_dict_in_generate=True, output_logits=True)
    if kwargs.get("pad_token_id") is None and tokenizer.pad_token_id is None:
        kwargs["pad_token_id"] = tokenizer.eos_token_id  # transformers' own fallback, without its warning
    replay = strategy == "replay"
    with torch.no_grad(), quiet_generate_warning(), architecture_fixes(model), \
            nullcontext() if replay else streaming(model, modules, steps):
        sequences = model.generate(input_ids=enc["input_ids"].to(device),
                                   attention_mask=enc["attention_mask"].to(device), **kwargs)
    cache = logits = None
    if keep_cache:
        cache, logits = output_cache(sequences), torch.stack([x[0] for x in sequences.logits]).detach().cpu()
        sequences = sequences.sequences
    new_ids = sequences[0, m:].tolist()
    n_new = len(new_ids)
    if replay:
        steps.calls = n_new  # nothing was captured while generating: the sequence is replayed below
    if steps.calls != n_new:
        raise AttnflowError(f"expected {n_new} forward steps for {n_new} new tokens; saw {steps.calls}")
    seen = m + n_new - 1  # positions that ran as queries (the last new token never does)
    rows = torch.zeros(n_new, n_layers, m + n_new, dtype=torch.float64)
    if replay:
        from attnflow.capture.rows import run_rows

        replayed, _, _ = run_rows(model, {"input_ids": sequences[:, :seen]}, list(range(m - 1, seen)), ["rollout"],
                                  residual=residual, head_fusion=head_fusion, causal_norm=causal_norm,
                                  logits_to_keep=1, use_cache=False)
        rows[:, :, :seen] = replayed.values["rollout"].transpose(0, 1).to(torch.float64)
    elif strategy == "incremental":
        rows[:, :, :seen] = tracker.rows[:, m - 1:, :].transpose(0, 1)
    else:
        w = steps.w[:, None, :seen, :seen]  # (layers, 1, n, n): the heads were fused in the hooks
        computed = rollout_rows(w, list(range(m - 1, seen)), residual=residual, head_fusion=head_fusion,
                                causal_norm=causal_norm)
        rows[:, :, :seen] = computed.transpose(0, 1).to(torch.float64)
    prompt_ids = enc["input_ids"][0].tolist()
    return GenerationTrace(prompt_ids=prompt_ids, new_ids=new_ids, prompt_tokens=token_strings(tokenizer, prompt_ids),
                           generated_tokens=token_strings(tokenizer, new_ids),
                           completion=tokenizer.decode(new_ids, skip_special_tokens=True), rows=rows.numpy(),
                           do_sample=bool(kwargs["do_sample"]), strategy=strategy, cache=cache, logits=logits)
