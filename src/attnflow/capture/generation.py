"""Run a decoder's own ``generate`` and track attention rollout incrementally.

A forward hook on the model receives each forward call's attentions while ``model.generate`` runs:
the first call is the prompt (``(layers, heads, m, m)``, rolled out once), each later call is one
KV-cached step whose single query row extends the rollout by one position
(:class:`attnflow.core.incremental.IncrementalRollout`). The prefix is never run again, and the
attentions of earlier steps are not kept. Everything ``model.generate`` takes (greedy, sampling,
temperature, top-k/p, stopping) works; beam search and assisted decoding, whose steps are not one
query per call, are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.capture.architectures import architecture_fixes, layer_windows, refuse_unsupported
from attnflow.capture.load import ensure_eager
from attnflow.capture.text import encode, is_causal, max_length, token_strings
from attnflow.core.incremental import IncrementalRollout
from attnflow.errors import AttnflowError

_REFUSED = {"num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "assistant_model": None,
            "prompt_lookup_num_tokens": None}


@dataclass
class GenerationTrace:
    """What :func:`track_generation` saw. Positions: the prompt is ``0..m-1``, generated token ``i``
    sits at ``m + i`` and is predicted by position ``m - 1 + i``.

    rows: ``(n_new, layers, m + n_new)``: the rollout row of the position that predicted generated
        token ``i``, at every layer, over every position (zero from column ``m + i`` on, the
        positions it could not see); each row sums to 1.
    """

    prompt_ids: list[int]
    new_ids: list[int]
    prompt_tokens: list[str]
    generated_tokens: list[str]
    completion: str
    rows: np.ndarray
    do_sample: bool


@contextmanager
def _quiet_generate_warning() -> Iterator[None]:
    """transformers warns that ``output_attentions`` "may be ignored" without
    ``return_dict_in_generate``; it is not ignored (the hook receives it), and asking for the dict
    would make transformers keep every step's attention, which is what we avoid."""
    import transformers

    before = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(before)


def _check(prompt: Any, max_new_tokens: Any, kwargs: dict) -> None:
    if not isinstance(prompt, str) or not prompt.strip():
        raise AttnflowError("the prompt must be a non-empty string")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise AttnflowError(f"max_new_tokens must be a positive integer; got {max_new_tokens!r}")
    for key, allowed in _REFUSED.items():
        if kwargs.get(key, allowed) != allowed:
            raise AttnflowError(f"generate tracks one sequence one token per step; {key}={kwargs[key]!r} is not supported")


def track_generation(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int = 20, *,
                     residual: float = 0.5, head_fusion: str = "mean", causal_norm: str | None = None,
                     **generate_kwargs: Any) -> GenerationTrace:
    """Generate a completion of ``prompt`` with a loaded causal LM and roll out attention for every
    generated token (see :class:`GenerationTrace`).

    max_new_tokens: how many tokens to generate at most (generation may stop earlier at EOS).
    residual, head_fusion, causal_norm: as in :func:`attnflow.rollout`.
    generate_kwargs: passed to ``model.generate`` (``do_sample=True, top_k=50``, ...); seed with
        ``torch.manual_seed`` for reproducible sampling.
    """
    _check(prompt, max_new_tokens, generate_kwargs)
    if tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    refuse_unsupported(model)
    if not is_causal(model):
        raise AttnflowError(f"generate needs a causal language model; {type(model).__name__} is not one")
    ensure_eager(model)
    enc = encode(tokenizer, [prompt])
    m = enc["input_ids"].shape[1]
    limit = max_length(model, tokenizer)
    if limit is not None and m + max_new_tokens > limit:
        raise AttnflowError(f"prompt ({m} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's {limit}")
    tracker = IncrementalRollout(residual=residual, head_fusion=head_fusion, causal_norm=causal_norm,
                                 windows=layer_windows(model))

    def hook(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        attentions = getattr(output, "attentions", None)
        if not attentions:
            raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
        if attentions[0].shape[0] != 1:  # e.g. beams from the model's own generation_config
            raise AttnflowError(f"generate tracks one sequence; the model ran {attentions[0].shape[0]} at once "
                                "(pass num_beams=1 and num_return_sequences=1)")
        queries = attentions[0].shape[-2]
        if tracker.n == 0:
            tracker.start(torch.stack([a[0].detach().cpu() for a in attentions]))
        elif queries == 1:
            # one block per layer: sliding-window layers return only their window's keys
            tracker.append([a[0, :, -1, :].detach().cpu() for a in attentions])
        else:
            raise AttnflowError(f"a generation step fed {queries} tokens at once; only one-token cached steps are supported")

    device = next(model.parameters()).device
    kwargs = {"do_sample": False, **generate_kwargs, "max_new_tokens": max_new_tokens,
              "output_attentions": True, "return_dict_in_generate": False, "use_cache": True}
    if kwargs.get("pad_token_id") is None and tokenizer.pad_token_id is None:
        kwargs["pad_token_id"] = tokenizer.eos_token_id  # transformers' own fallback, without its warning
    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad(), _quiet_generate_warning(), architecture_fixes(model):
            sequences = model.generate(input_ids=enc["input_ids"].to(device),
                                       attention_mask=enc["attention_mask"].to(device), **kwargs)
    finally:
        handle.remove()
    new_ids = sequences[0, m:].tolist()
    n_new = len(new_ids)
    if tracker.n != m + n_new - 1:
        raise AttnflowError(f"expected {n_new} forward steps for {n_new} new tokens; saw {tracker.n - m + 1}")
    rows = torch.zeros(n_new, tracker.rows.shape[0], m + n_new, dtype=torch.float64)
    rows[:, :, : m + n_new - 1] = tracker.rows[:, m - 1:, :].transpose(0, 1)
    prompt_ids = enc["input_ids"][0].tolist()
    return GenerationTrace(prompt_ids=prompt_ids, new_ids=new_ids, prompt_tokens=token_strings(tokenizer, prompt_ids),
                           generated_tokens=token_strings(tokenizer, new_ids),
                           completion=tokenizer.decode(new_ids, skip_special_tokens=True), rows=rows.numpy(),
                           do_sample=bool(kwargs["do_sample"]))
