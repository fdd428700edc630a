"""Capture attention from Hugging Face text models (encoders; decoders share the same forward pass).

Attention is collected by streaming hooks (``attnflow.capture.streaming``): each layer's weights are
fused (or copied, per head) into one float32 buffer while the model runs, so no tuple of every
layer's attention is ever held.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from attnflow.hf.architectures import check_text_model
from attnflow.capture.streaming import (Reducer, architecture_fixes, eager, replay_attentions, streamable_modules,
                                        streaming)
from attnflow.capture.values import projections
from attnflow.core.fusion import check_head_fusion
from attnflow.core.maps import AttentionMaps
from attnflow.core.weighting import check_weighting
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.hf.weights import input_device


def is_causal(model: Any) -> bool:
    """True for decoders, whose queries see only earlier keys: the architecture table's family (or a
    config that says ``is_decoder``)."""
    return kind_of(model).causal


def token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    """How tokens are shown: WordPiece/word-level vocabularies as their entries (``##ing`` marks a
    word piece), byte-level BPE and SentencePiece decoded one id at a time (``' cabinet'`` rather
    than ``'Ġcabinet'``), so that spaces read as spaces. A character split over several byte tokens
    ("😀" as two tokens of SmolLM2's byte-level BPE, each alone an invalid UTF-8 piece that decodes
    to "\ufffd") is shown on each of them as the text the run covers, numbered: ``'😀(1/2)'``,
    ``'😀(2/2)'``; the ids stay as they are."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    kind = type(backend.model).__name__ if backend is not None else ""
    if kind in ("WordPiece", "WordLevel") or not hasattr(tokenizer, "decode"):
        return tokenizer.convert_ids_to_tokens(ids)
    shown = [tokenizer.decode([i]) for i in ids]
    i = 0
    while i < len(ids):
        run = _byte_run(tokenizer, ids, shown, i)
        if run is None:
            i += 1
            continue
        end, text = run
        k = end - i
        shown[i:end] = [text] if k == 1 else [f"{text}({m + 1}/{k})" for m in range(k)]
        i = end
    return shown


BYTE_RUN_MAX = 8  # a UTF-8 character is at most 4 bytes; a few more tokens for pieces that carry two


def _byte_run(tokenizer: Any, ids: list[int], shown: list[str], i: int) -> tuple[int, str] | None:
    """``(end, text)``: the shortest run ``ids[i:end]`` that decodes to valid text, when token ``i``
    alone is an incomplete UTF-8 piece; None when it is whole (or no short run completes it)."""
    if "\ufffd" not in shown[i]:
        return None
    for end in range(i + 1, min(len(ids), i + BYTE_RUN_MAX) + 1):
        text = tokenizer.decode(ids[i:end])
        if "\ufffd" not in text:
            return end, text
    return None


def max_length(model: Any, tokenizer: Any) -> int | None:
    """The longest input the model takes (a loaded model, or its config as a dict): position embeddings,
    or the tokenizer's limit if smaller."""
    limits = []
    config = model if isinstance(model, dict) else model.config  # a loaded model, or a config read before it loads
    positions = config.get("max_position_embeddings") if isinstance(config, dict) else \
        getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limits.append(positions)
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 10**6:  # transformers uses ~1e30 for "unset"
        limits.append(tok_limit)
    return min(limits) if limits else None


def encode(tokenizer: Any, texts: list[str], *, side: str = "right", max_length: int | None = None) -> dict:
    """Tokenize ``texts`` and pad them by hand on ``side`` ("right" or "left").

    Padding by hand makes tokenizers without a pad token (GPT-2, many Llama tokenizers) work
    without mutating them: the pad id is only a placeholder, since ``attention_mask`` is always passed
    and hides it from the model. Returns tensors ``input_ids``, ``attention_mask``,
    ``special_tokens_mask`` (and ``token_type_ids`` when the tokenizer makes them).
    """
    enc = tokenizer(texts, truncation=max_length is not None, max_length=max_length,
                    return_special_tokens_mask=True)
    n = max(len(ids) for ids in enc["input_ids"])
    pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)
    fill = {"input_ids": pad_id, "attention_mask": 0, "special_tokens_mask": 1, "token_type_ids": 0}
    out = {}
    for key, value in fill.items():
        if key not in enc:
            continue
        rows = []
        for seq in enc[key]:
            pad = [value] * (n - len(seq))
            rows.append(pad + list(seq) if side == "left" else list(seq) + pad)
        out[key] = torch.tensor(rows, dtype=torch.long)
    return out


def run_streaming(model: Any, inputs: dict, head_fusion: str | None, *, weighting: str = "attention",
                  **forward: Any) -> tuple[torch.Tensor, Any]:
    """One forward pass of ``model`` on ``inputs`` (already on the model's device) with the attention
    reduced layer by layer (``attnflow.capture.streaming.Reducer``). Returns the buffer
    ``(batch, layers, 1 or heads, n, n)`` and the model's output (which holds no attentions).
    ``weighting="norm"`` keeps the norm-based maps instead (``attnflow.core.weighting``)."""
    check_weighting(weighting)
    modules = streamable_modules(model)
    found = projections(model, modules) if weighting == "norm" else None
    owners = sorted({m.owner or type(model).__name__ for m in modules})
    if len(owners) > 1:
        raise AttnflowError(f"{type(model).__name__} has {len(owners)} self-attention stacks ({', '.join(owners)}), "
                            "e.g. an encoder and a decoder; this capture takes one stack (encoders or decoders)")
    with torch.no_grad():
        if modules:
            reducer = Reducer(len(modules), head_fusion, found)
            with streaming(model, modules, reducer):
                out = model(**inputs, **forward)  # no output_attentions: transformers keeps no tuple
            if reducer.calls != len(modules) or reducer.buffer is None:
                raise AttnflowError(f"expected {len(modules)} attention layers to run once each; they ran "
                                    f"{reducer.calls} times in total")
            return reducer.buffer, out
        # A model whose class declares no attention modules: take transformers' tuple, but reduce and
        # drop each layer's entry in turn, so that the tuple and the buffer never both hold everything.
        with eager(model):
            out = model(**inputs, output_attentions=True, **forward)
        reducer = Reducer(len(getattr(out, "attentions", None) or ()), head_fusion)
        replay_attentions(out, reducer)
        return reducer.buffer, out


def forward_takes(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def capture(model: Any, tokenizer: Any, text: str | list[str], *, truncate: bool = False,
            head_fusion: str | None = None, weighting: str = "attention") -> AttentionMaps:
    """Run ``model`` on ``text`` (a string or a list of strings) and return its attention maps.

    One string gives ``attentions`` of shape ``(layers, heads, n, n)``; a list gives a RIGHT-padded
    batch ``(batch, layers, heads, n, n)`` with ``mask`` marking real tokens (for every model,
    decoders included: the attention mask is passed, so no real token attends to padding, and in a
    decoder right padding also leaves every real token's position unchanged, so each row equals the
    text's row alone). Texts longer than the
    model's maximum length are refused with an error, or cut to it with a warning when
    ``truncate=True``. The model runs on eager attention for the call (transformers returns no
    attention weights under sdpa) and is back on its own implementation after it.

    head_fusion: None keeps every head; ``"mean"``, ``"max"`` or ``"min"`` fuses the heads of each
        layer while the model runs (the heads axis then has length 1 and ``maps.head_fusion`` says
        how), which is all that the methods need unless per-head results are wanted: ``heads`` times
        less memory (see ``attnflow.capture.streaming``).
    weighting: ``"attention"`` (the weights) or ``"norm"``: each key's weight times the length of
        its transformed value vector, summed over heads, rows normalised (Kobayashi et al. 2020; see
        ``attnflow.core.weighting``); needs a fused ``head_fusion``.

    ``logits`` are kept for models with one output per input (classifiers); language models'
    per-position logits (``n x vocabulary`` numbers) are not computed beyond the last position, which
    one text's maps keep as ``last_logits``.
    """
    check_head_fusion(head_fusion)
    check_weighting(weighting)
    if weighting == "norm" and head_fusion is None:
        raise AttnflowError("the norm weighting sums the heads while the model runs; pass head_fusion 'mean', "
                            "'max' or 'min'")
    given = encoded(model, tokenizer, text, truncate=truncate)
    with architecture_fixes(model):
        stacked, out = run_streaming(model, given.inputs, head_fusion, weighting=weighting, **given.forward)
    return maps_of(given, tokenizer, text, out, stacked, head_fusion=head_fusion, weighting=weighting)


@dataclass
class Encoded:
    """Texts tokenized for a capture pass: ``enc`` (CPU tensors: ids, attention mask, ...), ``special``
    (the special-tokens mask), ``inputs`` (on the model's device), ``causal`` (a decoder) and the
    ``forward`` keywords (a language model's ``logits_to_keep=1``)."""

    enc: dict
    special: torch.Tensor
    inputs: dict
    causal: bool
    forward: dict


def encoded(model: Any, tokenizer: Any, text: str | list[str], *, truncate: bool = False) -> Encoded:
    """Check ``text`` and ``model`` for a capture, tokenize, and refuse or cut (``truncate``) a text longer
    than the model takes; the inputs go to the model's input device."""
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise AttnflowError("text must be a non-empty string (or a list of non-empty strings)")
    check_text_model(model)
    limit = max_length(model, tokenizer)
    enc = encode(tokenizer, texts)
    n = enc["input_ids"].shape[1]
    if limit is not None and n > limit:
        if not truncate:
            raise AttnflowError(
                f"the text is {n} tokens long but the model takes at most {limit}; shorten it or pass truncate=True (--truncate)"
            )
        warnings.warn(f"text truncated from {n} to {limit} tokens (the model's maximum)", stacklevel=3)
        enc = encode(tokenizer, texts, max_length=limit)
    special = enc.pop("special_tokens_mask")
    device = input_device(model)
    causal = is_causal(model)
    forward = {"logits_to_keep": 1} if causal and forward_takes(model, "logits_to_keep") else {}
    return Encoded(enc, special, {k: v.to(device) for k, v in enc.items()}, causal, forward)


def maps_of(given: Encoded, tokenizer: Any, text: str | list[str], out: Any, stacked: Any, *,
            head_fusion: str | None, weighting: str = "attention", rows: Any = None) -> AttentionMaps:
    """The ``AttentionMaps`` of a capture pass: ``stacked`` ``(batch, layers, heads, n, n)`` (or
    None, with ``rows`` computed instead) and the model's output ``out``."""
    enc, causal = given.enc, given.causal
    mask = enc["attention_mask"].bool()
    tokens = [token_strings(tokenizer, ids) for ids in enc["input_ids"].tolist()]
    special_idx = [row.nonzero().flatten().tolist() for row in (given.special.bool() & mask)]
    logits = getattr(out, "logits", None)
    # a decoder's last-position logits, in the model's dtype: the clean readout of ablation (see maps)
    last = logits[0, -1].detach().cpu() if logits is not None and causal and isinstance(text, str) else None
    logits = logits.detach().float().cpu() if logits is not None and not causal else None
    del out
    if isinstance(text, str):
        return AttentionMaps(None if stacked is None else stacked[0], tokens[0], mask=None, causal=causal,
                             special=special_idx[0], input_ids=enc["input_ids"][0],
                             logits=None if logits is None else logits[0], last_logits=last,
                             head_fusion=head_fusion, weighting=weighting, rows=rows)
    return AttentionMaps(stacked, tokens, mask=mask, causal=causal, special=special_idx,
                         input_ids=enc["input_ids"], logits=logits, head_fusion=head_fusion, weighting=weighting)
