"""Capture from encoder-decoder models (T5, BART, Marian, mBART, Pegasus, ...): encoder self-, decoder
self- and cross-attention, by teacher forcing a given target or while the model generates.

Positions: the source has ``S`` tokens; the decoder reads ``[start] + target[:-1]`` (``T`` positions)
and decoder position ``i`` predicts target token ``i``. The joint rollout itself is pure tensor maths
in ``attnflow.core.joint``; generation tracks it with the KV cache
(``attnflow.core.joint.incremental.IncrementalJointRollout``): the encoder runs once (its rollout
``E`` is computed once), then each cached decoder step hands the hook the new position's
self-attention row and cross-attention row. Beam search is refused, as for decoders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import refuse_unsupported, stack_attentions
from attnflow.capture.generation import check_generation, quiet_generate_warning
from attnflow.capture.streaming import architecture_fixes, attention_for_weights, eager
from attnflow.hf.points import receiving
from attnflow.capture.text import encode, max_length, token_strings
from attnflow.core.joint.incremental import IncrementalJointRollout
from attnflow.core.rollout import rollout
from attnflow.errors import AttnflowError
from attnflow.hf.weights import input_device


@dataclass
class Seq2SeqMaps:
    """Attention of one teacher-forced pass. ``encoder``: ``(Le, heads, S, S)``; ``decoder``:
    ``(Ld, heads, T, T)`` (causal); ``cross``: ``(Ld, heads, T, S)``; row = query.

    decoder_tokens: what the decoder read (``[start] + target[:-1]``); target_tokens: what each decoder
    position had to predict; predicted_tokens: what the model would have predicted there (argmax).
    """

    encoder: torch.Tensor
    decoder: torch.Tensor
    cross: torch.Tensor
    source_tokens: list[str]
    start_token: str
    target_tokens: list[str]
    source_ids: list[int]
    target_ids: list[int]
    predicted_tokens: list[str]

    @property
    def decoder_tokens(self) -> list[str]:
        return [self.start_token, *self.target_tokens[:-1]]


@dataclass
class Seq2SeqTrace:
    """What ``track_seq2seq_generation`` saw. ``rows``: ``(n_new, Ld, S + 1 + n_new)``: the joint
    rollout row of the decoder position that predicted generated token ``i`` at every decoder layer,
    over the source tokens, the decoder start token and the generated tokens (zero from column
    ``S + 1 + i`` on)."""

    source_ids: list[int]
    new_ids: list[int]
    source_tokens: list[str]
    start_token: str
    generated_tokens: list[str]
    completion: str
    rows: np.ndarray
    do_sample: bool
    n_encoder_layers: int


def check_seq2seq(model: Any, tokenizer: Any) -> None:
    if tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    refuse_unsupported(model)
    if not bool(getattr(model.config, "is_encoder_decoder", False)):
        raise AttnflowError(f"{type(model).__name__} is not an encoder-decoder model; target_text and source/target "
                            "attribution are for encoder-decoder models (T5, BART, Marian, ...)")
    if not hasattr(model, "get_encoder"):
        raise AttnflowError(f"{type(model).__name__} has no language-model head; load it with "
                            "AutoModelForSeq2SeqLM (attnflow.load_model does)")


def decoder_start_id(model: Any) -> int:
    for config in (getattr(model, "generation_config", None), model.config):
        value = getattr(config, "decoder_start_token_id", None)
        if isinstance(value, int):
            return value
    raise AttnflowError(f"{type(model).__name__}'s config has no decoder_start_token_id; set it to the token its "
                        "decoder starts from")


def _source(model: Any, tokenizer: Any, source: str, truncate: bool) -> dict:
    if not isinstance(source, str) or not source.strip():
        raise AttnflowError("the source text must be a non-empty string")
    enc = encode(tokenizer, [source])
    limit = max_length(model, tokenizer)
    n = enc["input_ids"].shape[1]
    if limit is not None and n > limit:
        if not truncate:
            raise AttnflowError(f"the source is {n} tokens long but the model takes at most {limit}; shorten it or pass "
                                "truncate=True (--truncate)")
        enc = encode(tokenizer, [source], max_length=limit)
    device = input_device(model)
    return {"input_ids": enc["input_ids"].to(device), "attention_mask": enc["attention_mask"].to(device)}


def _cross(attentions: Any, model: Any) -> torch.Tensor:
    shapes = {tuple(a.shape) for a in attentions}
    if len(shapes) != 1:
        raise AttnflowError(f"{type(model).__name__} returned cross-attention of different shapes per layer: {sorted(shapes)}")
    return torch.stack([a.detach().float().cpu() for a in attentions], dim=1)


def capture_seq2seq(model: Any, tokenizer: Any, source: str, target: str, *, truncate: bool = False) -> Seq2SeqMaps:
    """Teacher-force ``target`` after ``source`` and return the three kinds of attention (see
    ``Seq2SeqMaps``). The target is tokenized as the model's labels (``text_target``), special
    tokens (e.g. the final ``</s>``) included."""
    check_seq2seq(model, tokenizer)
    if not isinstance(target, str) or not target.strip():
        raise AttnflowError("the target text must be a non-empty string (encoder-decoder models explain a given "
                            "output: pass target_text, or use generate)")
    inputs = _source(model, tokenizer, source, truncate)
    target_ids = list(tokenizer(text_target=target)["input_ids"])
    if not target_ids:
        raise AttnflowError(f"the target text {target!r} has no tokens")
    start = decoder_start_id(model)
    device = inputs["input_ids"].device
    decoder_ids = torch.tensor([[start, *target_ids[:-1]]], device=device)
    with torch.no_grad(), architecture_fixes(model), eager(model):
        out = model(**inputs, decoder_input_ids=decoder_ids, output_attentions=True)
    if not getattr(out, "encoder_attentions", None) or not getattr(out, "cross_attentions", None):
        raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
    source_ids = inputs["input_ids"][0].tolist()
    predicted = out.logits[0].argmax(-1).tolist() if getattr(out, "logits", None) is not None else []
    return Seq2SeqMaps(encoder=stack_attentions(out.encoder_attentions, model)[0],
                       decoder=stack_attentions(out.decoder_attentions, model)[0],
                       cross=_cross(out.cross_attentions, model)[0],
                       source_tokens=token_strings(tokenizer, source_ids), start_token=token_strings(tokenizer, [start])[0],
                       target_tokens=token_strings(tokenizer, target_ids), source_ids=source_ids, target_ids=target_ids,
                       predicted_tokens=token_strings(tokenizer, predicted) if predicted else [])


def track_seq2seq_generation(model: Any, tokenizer: Any, source: str, max_new_tokens: int = 20, *,
                             residual: float = 0.5, head_fusion: str = "mean", truncate: bool = False,
                             **generate_kwargs: Any) -> Seq2SeqTrace:
    """Generate an output for ``source`` with the model's own ``generate`` (greedy by default; one
    beam, whatever the model's generation config says) and track the joint rollout of every decoder
    position with the KV cache (see ``Seq2SeqTrace``). ``generate_kwargs`` go to ``model.generate``."""
    check_generation(source, max_new_tokens, generate_kwargs)
    check_seq2seq(model, tokenizer)
    inputs = _source(model, tokenizer, source, truncate)
    with torch.no_grad(), architecture_fixes(model), eager(model):
        encoder_outputs = model.get_encoder()(**inputs, output_attentions=True, return_dict=True)
    if not getattr(encoder_outputs, "attentions", None):
        raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
    encoder = stack_attentions(encoder_outputs.attentions, model)[0]
    e = torch.as_tensor(rollout(encoder.double(), residual=residual, head_fusion=head_fusion))[-1]
    tracker: list[IncrementalJointRollout] = []

    def hook(module: Any, args: Any, output: Any) -> None:
        self_att, cross = getattr(output, "decoder_attentions", None), getattr(output, "cross_attentions", None)
        if not self_att or not cross:
            raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
        if self_att[0].shape[0] != 1:
            raise AttnflowError(f"generate tracks one sequence; the model ran {self_att[0].shape[0]} at once "
                                "(pass num_beams=1 and num_return_sequences=1)")
        if not tracker:
            tracker.append(IncrementalJointRollout(e, len(self_att), residual=residual, head_fusion=head_fusion))
        done = tracker[0].n
        # A call may feed several decoder tokens (a forced prefix): each row is one position, in order.
        for i in range(self_att[0].shape[-2]):
            tracker[0].append([a[0, :, i, : done + i + 1].detach().cpu() for a in self_att],
                              torch.stack([c[0, :, i, :].detach().cpu() for c in cross]))

    kwargs = {"do_sample": False, "num_beams": 1, **generate_kwargs, "max_new_tokens": max_new_tokens,
              "output_attentions": True, "return_dict_in_generate": False, "use_cache": True}
    with torch.no_grad(), quiet_generate_warning(), architecture_fixes(model), \
            receiving(model, {"output": hook}, attention=attention_for_weights(model)):
        sequences = model.generate(**inputs, encoder_outputs=encoder_outputs, **kwargs)
    decoded = sequences[0].tolist()
    new_ids = decoded[1:]
    n_new = len(new_ids)
    if not tracker or tracker[0].n != n_new:
        raise AttnflowError(f"expected {n_new} decoder steps for {n_new} new tokens; saw {tracker[0].n if tracker else 0}")
    rows = tracker[0].rows  # (Ld, n_new, S + n_new): the last generated token is never read
    s = rows.shape[-1] - n_new
    out = torch.zeros(n_new, rows.shape[0], s + 1 + n_new, dtype=torch.float64)
    out[:, :, : s + n_new] = rows.transpose(0, 1)
    source_ids = inputs["input_ids"][0].tolist()
    return Seq2SeqTrace(source_ids=source_ids, new_ids=new_ids, source_tokens=token_strings(tokenizer, source_ids),
                        start_token=token_strings(tokenizer, [decoded[0]])[0],
                        generated_tokens=token_strings(tokenizer, new_ids),
                        completion=tokenizer.decode(new_ids, skip_special_tokens=True), rows=out.numpy(),
                        do_sample=bool(kwargs["do_sample"]), n_encoder_layers=int(encoder.shape[0]))
