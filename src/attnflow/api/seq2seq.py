"""Encoder-decoder models in, an ``Attribution`` of kind "seq2seq" out.

    result = attnflow.explain("the keys to the cabinet", model, tokenizer=tok,
                              target_text="die Schlüssel zum Schrank")       # teacher forcing
    result = attnflow.generate(model, tok, "the keys to the cabinet")       # the model's own output
    result.top(3, target=0)       # source tokens target token 0 draws on (top decoder layer)

Sources are the source tokens, then the decoder's start token, then the target tokens
(``input_length`` = the number of source tokens); target ``i`` is explained by the decoder position
that predicted it (``target_positions[i] = S + i``, reading the start token and targets ``< i``), at
every decoder layer, with the joint rollout / flow of ``attnflow.core.joint``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from attnflow.api.methods import run_method
from attnflow.api.models import is_name, resolve
from attnflow.capture.seq2seq import capture_seq2seq, track_seq2seq_generation
from attnflow.config import registry
from attnflow.config.registry import Context
from attnflow.config.settings import UNSET, Settings
from attnflow.core.methods import FLOW_ALL_MAX
from attnflow.errors import AttnflowError
from attnflow.results import Attribution, Block
from attnflow.results.attribution import label_index

Progress = Callable[[int, int], None]


def _loaded(model: Any, tokenizer: Any, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any, str]:
    if model is None:
        raise AttnflowError("pass an encoder-decoder model (a folder, hub id or loaded model)")
    if is_name(model):
        _refuse_not_seq2seq(str(model))
    loaded = resolve(model, tokenizer, task="seq2seq", device=device, dtype=dtype)
    return loaded.model, loaded.tokenizer, str(model) if is_name(model) else loaded.name


def _refuse_not_seq2seq(name: str) -> None:
    """From the config alone: a target text needs an encoder-decoder model (an encoder or a decoder would
    otherwise fail inside transformers with "Unrecognized configuration class")."""
    from attnflow.hf.load import is_encoder_decoder_path, model_task, resolve_model

    folder = resolve_model(name)
    task = model_task(folder)
    if task and not is_encoder_decoder_path(folder):
        kind = {"causal-lm": "a decoder", "classification": "a classifier"}.get(task, "an encoder")
        raise AttnflowError(f"a target text (--target-text, target_text=) is for encoder-decoder models (T5, BART, "
                            f"Marian, ...); {name!r} is {kind}: drop --target-text to explain the text itself"
                            + (" (or use attnflow generate to explain what it writes)" if task == "causal-lm" else ""))


def _padded(block: Block) -> Block:
    """A block over the sources ``S + T`` -> one over ``S + T + 1``: the last target token is never read
    by the decoder, so its column is 0."""
    values = np.concatenate([block.values, np.zeros(block.values.shape[:2] + (1,))], axis=-1)
    return Block(values, block.targets, block.layers)


@Settings.keywords
def explain_seq2seq(source: str, target_text: str | None, model: Any, *, tokenizer: Any = None,
                    method: Any = "rollout", target: Any = None, flow_targets: str = "auto", residual: float = UNSET,
                    head_fusion: str = UNSET, solver: str = UNSET, truncate: bool = UNSET,
                    progress: Progress | None = None, settings: Settings | None = None) -> Attribution:
    """Teacher-force ``target_text`` after ``source`` and explain every target token over the source
    tokens and the target prefix, at every decoder layer.

    method: "raw" (each decoder layer's cross-attention), "rollout" / "flow" (over the joint graph),
        "all" or a list. Raw and rollout are computed for every target token; flow for every target
        while the source and target together have at most ``FLOW_ALL_MAX`` tokens (``flow_targets``
        "auto"), else for ``target`` only ("all" / "target" force either).
    target: the target token shown by default (index or text; default the first).
    settings: as in ``attnflow.explain`` (its target is not used: ``target`` picks a token).
    """
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, solver=solver, truncate=truncate)
    methods, shown = registry.resolve(method, "seq2seq")
    if target_text is None:
        raise AttnflowError("an encoder-decoder model explains a given output: pass target_text= (CLI: --target-text), "
                            "or let the model write its own with attnflow.generate (CLI: attnflow generate)")
    if flow_targets not in ("auto", "all", "target"):
        raise AttnflowError(f"flow_targets must be 'auto', 'all' or 'target'; got {flow_targets!r}")
    model, tokenizer, name = _loaded(model, tokenizer, settings.device, settings.dtype)
    maps = capture_seq2seq(model, tokenizer, source, target_text, truncate=settings.truncate)
    s, t = len(maps.source_tokens), len(maps.target_tokens)
    chosen = label_index(maps.target_tokens, _target_keyword(target), 0)
    attn = (maps.encoder.double().numpy(), maps.decoder.double().numpy(), maps.cross.double().numpy())
    every = list(range(t))
    blocks = {}
    for m in methods:
        costly = registry.get(m).cost == registry.MAX_FLOW
        rows = every if not costly or flow_targets == "all" or (flow_targets == "auto" and s + t <= FLOW_ALL_MAX) \
            else [chosen]
        context = Context(kind="seq2seq", attentions=attn, settings=settings, rows=rows, progress=progress,
                          model=model, tokenizer=tokenizer, target_tokens=t, n_layers=int(maps.decoder.shape[0]))
        blocks[m] = _padded(run_method(registry.get(m), context))
    return Attribution(
        kind="seq2seq", sources=maps.source_tokens + [maps.start_token] + maps.target_tokens,
        targets=maps.target_tokens, target_positions=[s + i for i in range(t)], blocks=blocks,
        n_layers=int(maps.decoder.shape[0]), target=chosen, method=shown, input=source, input_length=s, model=name,
        params={**settings.as_dict(), "target": target, "teacher_forcing": True},
        meta={"target_text": target_text, "encoder_layers": int(maps.encoder.shape[0]),
              "predicted_tokens": maps.predicted_tokens, "source_ids": maps.source_ids, "target_ids": maps.target_ids})


@Settings.keywords
def generate_seq2seq(model: Any, tokenizer: Any, source: str, max_new_tokens: int = 20, *, residual: float = UNSET,
                     head_fusion: str = UNSET, truncate: bool = UNSET, settings: Settings | None = None,
                     **generate_kwargs: Any) -> Attribution:
    """Let an encoder-decoder model generate an output for ``source`` and track the joint rollout of
    every generated token through the KV cache (equal to one teacher-forced pass over the output)."""
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, truncate=truncate)
    model, tokenizer, name = _loaded(model, tokenizer)
    trace = track_seq2seq_generation(model, tokenizer, source, max_new_tokens, residual=settings.residual,
                                     head_fusion=settings.head_fusion, truncate=settings.truncate, **generate_kwargs)
    s, n = len(trace.source_ids), len(trace.new_ids)
    return Attribution(
        kind="seq2seq", sources=trace.source_tokens + [trace.start_token] + trace.generated_tokens,
        targets=trace.generated_tokens, target_positions=[s + i for i in range(n)],
        blocks={"rollout": Block.full(trace.rows)}, n_layers=int(trace.rows.shape[1]), input=source, input_length=s,
        model=name, params={**settings.as_dict(), "do_sample": trace.do_sample, "max_new_tokens": max_new_tokens,
                            "teacher_forcing": False},
        meta={"completion": trace.completion, "generated_ids": trace.new_ids, "source_ids": trace.source_ids,
              "encoder_layers": trace.n_encoder_layers})


def _target_keyword(target: Any) -> Any:
    """``--target``'s keywords, as documented, before a target token's text: "last" is the last target
    token; "cls" names no target of an encoder-decoder model and is refused in a sentence."""
    if isinstance(target, str) and target.strip().lower() == "last":
        return -1
    if isinstance(target, str) and target.strip().lower() == "cls":
        raise AttnflowError("an encoder-decoder model has no CLS target: --target (target=) picks a target token "
                            "by index, by its text, or 'last'")
    return target
