"""Text in, an :class:`~attnflow.results.Attribution` out.

    result = attnflow.explain("The keys to the cabinet", method="all", target="cls")
    result.print(); result.plot("panels.png"); result.to_html("report.html")

- :func:`explain`: every requested method for one target position (cheap: one row per method).
- :func:`explain_maps`: every method for every target position, so that a report can switch target
  (flow, one max-flow per target, source and layer, is computed for every target only while that
  is cheap: see ``flow_targets``).
- :func:`explain_attentions`: the same from attention you already have, no model needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.api.checks import check_settings, check_target, check_text_model
from attnflow.capture import capture
from attnflow.capture.load import cached_model, cached_tokenizer, resolve_model
from attnflow.capture.text import is_causal
from attnflow.capture.vocabulary import warn_unknown_words
from attnflow.core.maps import AttentionMaps
from attnflow.core.methods import FLOW_ALL_MAX, METHODS, method_rows
from attnflow.core.methods import resolve_methods as _resolve_methods
from attnflow.core.weighting import check_weighting
from attnflow.errors import AttnflowError
from attnflow.results import Attribution, Block

# Methods explain() offers for text: the paper's three plus gradient-weighted rollout (classifiers).
TEXT_METHODS = (*METHODS, "grad-rollout")

# Above this many tokens explain_maps(targets="auto") computes the explained target only: every
# target of a 2,048-token, 30-layer input is 250 million numbers per method, more than a report can
# usefully carry (a 512-token one is 16 million for raw and rollout, a 6.6 MiB report).
MAPS_ALL_MAX = 1024

Progress = Callable[[int, int], None]


def resolve_methods(method: Any, allowed: Sequence[str] = TEXT_METHODS) -> tuple[list[str], str]:
    """:func:`attnflow.core.methods.resolve_methods` with the text methods allowed by default."""
    return _resolve_methods(method, allowed)


def resolve_target(target: Any, maps: AttentionMaps, tokenizer: Any = None) -> int:
    """``"cls"`` -> the classifier token's position; ``"last"`` -> the last real token; an int
    (negative counts from the end) -> that position; None -> "last" for decoders (the position that
    predicts the next token; decoders have no CLS), "cls" otherwise."""
    ids = maps.input_ids.tolist() if maps.input_ids is not None else []
    return resolve_position(target, len(maps.tokens), ids, maps.causal, tokenizer)


def resolve_position(target: Any, n: int, ids: list[int], causal: bool, tokenizer: Any = None) -> int:
    """:func:`resolve_target` from a token count and ids (known from the tokenizer alone, so that a
    target outside the input is refused before the model loads)."""
    target = check_target(target)
    if target is None:
        target = "last" if causal else "cls"
    if isinstance(target, (int, np.integer)):
        if not -n <= target < n:
            raise AttnflowError(f"target position {target} is outside the input's {n} tokens")
        return int(target) % n
    if target == "last":
        return n - 1
    cls_id = getattr(tokenizer, "cls_token_id", None) if tokenizer is not None else None
    if cls_id is not None and cls_id in ids:
        return ids.index(cls_id)
    if causal:
        raise AttnflowError("decoders have no CLS token; use target='last' (the default for decoders) or a position")
    raise AttnflowError("this model's input has no CLS token; use target='last' or a position")


def _shown(methods: Any, method: str | None, allowed: Sequence[str]) -> tuple[list[str], str]:
    """Methods of a maps result and the one its report opens on (``method``; default rollout)."""
    names, _ = resolve_methods(list(methods) if not isinstance(methods, str) else methods, allowed)
    if method is not None and method not in names:
        raise AttnflowError(f"method {method!r} must be one of the computed methods {names}")
    return names, method or ("rollout" if "rollout" in names else names[0])


def _prediction(maps: AttentionMaps, model: Any) -> str | None:
    logits = maps.logits
    if logits is None or logits.dim() != 1:  # token-level outputs (LM heads) have no single label
        return None
    label = int(logits.argmax())
    id2label = getattr(model.config, "id2label", None) or {}
    return str(id2label.get(label, label))


@dataclass
class Prepared:
    """One captured input, ready for the methods."""

    maps: AttentionMaps
    target: int
    prediction: str | None
    model: Any
    name: str
    text: str

    def grad_rollout(self) -> np.ndarray:
        """``(layers, n, n)`` gradient-weighted rollout (Chefer et al. 2021) for the predicted class,
        from a second, differentiable pass over the same token ids. Needs a sequence classifier."""
        from attnflow.capture.gradients import capture_gradients
        from attnflow.core.gradient import grad_rollout

        ids = self.maps.input_ids[None].to(next(self.model.parameters()).device)
        g = capture_gradients(self.model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, target=None)
        return np.asarray(grad_rollout(g.attentions, g.gradients))[0]


def _check_text(text: Any) -> None:
    if not isinstance(text, str):
        raise AttnflowError(f"explain takes one text (a string); got {type(text).__name__}. "
                            "For a batch, use attnflow.capture(model, tokenizer, texts) and the core methods")
    if not text.strip():
        raise AttnflowError("text must be a non-empty string")


def _before_loading(text: str, name: str, *, target: Any, truncate: bool, causal_norm: str | None,
                    weighting: str = "attention") -> None:
    """What can be refused from the config and the tokenizer alone, before the model's weights load
    (:func:`attnflow.api.checks.check_text_model`, as :func:`attnflow.batch` does), then a target
    outside the input."""
    task = check_text_model(name, weighting=weighting, causal_norm=causal_norm)
    tokenizer = cached_tokenizer(name)
    if not truncate:  # truncation changes the length; the target is then checked after capture
        ids = tokenizer(text)["input_ids"]
        resolve_position(target, len(ids), list(ids), task == "causal-lm", tokenizer)


def prepare(text: str, model: Any, tokenizer: Any, *, target: Any, head_fusion: str | None,
            truncate: bool, causal_norm: str | None = None, residual: float = 0.5,
            weighting: str = "attention") -> Prepared:
    """Load the model if given by name or path (reused between calls, see
    :func:`attnflow.capture.load.cached_model`), capture ``text`` and resolve ``target``. Everything
    that can be refused without the model is refused before it loads."""
    _check_text(text)
    target = check_settings(residual=residual, head_fusion=head_fusion, weighting=weighting, causal_norm=causal_norm,
                            target=target)
    if model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        name = resolve_model(model)
        _before_loading(text, name, target=target, truncate=truncate, causal_norm=causal_norm, weighting=weighting)
        tokenizer = cached_tokenizer(name)
        warn_unknown_words(text, tokenizer, name)
        model, tokenizer = cached_model(name)
    elif tokenizer is None:
        raise AttnflowError("pass the tokenizer together with a loaded model")
    else:
        warn_unknown_words(text, tokenizer, str(getattr(model, "name_or_path", "") or ""))
    if causal_norm is not None and not is_causal(model):
        raise AttnflowError(f"causal_norm (--causal-norm) is for decoders; {type(model).__name__} is not one "
                            "(its queries see the whole input)")
    # Heads are fused while the model runs: explaining never needs per-head maps (see capture.hooks).
    maps = capture(model, tokenizer, text, truncate=truncate, head_fusion=head_fusion, weighting=weighting)
    return prepared(maps, text, model, tokenizer, target=target)


def prepared(maps: AttentionMaps, text: str, model: Any, tokenizer: Any, *, target: Any) -> Prepared:
    """One text's captured maps (captured alone, or sliced from a batch by :mod:`attnflow.api.batching`)
    with its target resolved and the model's prediction read, ready for :func:`attribute`."""
    name = str(getattr(model, "name_or_path", "") or type(model).__name__)
    return Prepared(maps=maps, target=resolve_target(target, maps, tokenizer), prediction=_prediction(maps, model),
                    model=model, name=name, text=text)


def _blocks(attentions: Any, methods: list[str], rows_for: Callable[[str], list[int]], *, residual: float,
            head_fusion: str | None, solver: str, causal_norm: str | None, progress: Progress | None,
            grad: Callable[[], np.ndarray] | None = None) -> dict[str, Block]:
    """method -> :class:`Block` of the rows ``rows_for(method)`` at every layer."""
    blocks = {}
    for method in methods:
        rows = rows_for(method)
        if method == "grad-rollout":
            if grad is None:
                raise AttnflowError("grad-rollout needs the model (a sequence classifier); use attnflow.explain")
            values = grad()[:, rows, :]
        else:
            values = np.asarray(method_rows(attentions, method, rows, residual=residual, head_fusion=head_fusion,
                                            solver=solver, causal_norm=causal_norm, progress=progress), dtype=float)
        blocks[method] = Block.rows(np.asarray(values, dtype=float).transpose(1, 0, 2), rows)
    return blocks


def _rows_for(targets: Any, flow_targets: str, target: int, n: int) -> Callable[[str], list[int]]:
    """Which target rows each method computes: ``targets`` "target" (the explained one), "all", or
    positions; with "all", flow follows ``flow_targets`` ("auto": all while n <= FLOW_ALL_MAX)."""
    if flow_targets not in ("auto", "all", "target"):
        raise AttnflowError(f"flow_targets must be 'auto', 'all' or 'target'; got {flow_targets!r}")
    if isinstance(targets, str) and targets == "auto":
        targets = "all" if n <= MAPS_ALL_MAX else "target"
    if isinstance(targets, str):
        if targets not in ("target", "all"):
            raise AttnflowError(f"targets must be 'auto', 'target', 'all' or a list of positions; got {targets!r}")
        chosen = [target] if targets == "target" else list(range(n))
    else:
        values = np.atleast_1d(np.asarray(targets))
        if values.size == 0 or values.dtype.kind not in "iu" or not ((values >= -n) & (values < n)).all():
            raise AttnflowError(f"targets must be positions in [{-n}, {n}); got {targets!r}")
        chosen = sorted(set((values % n).tolist()) | {target})
    every_flow = flow_targets == "all" or (flow_targets == "auto" and n <= FLOW_ALL_MAX)

    def rows_for(method: str) -> list[int]:
        if method == "flow" and isinstance(targets, str) and targets == "all" and not every_flow:
            return [target]  # one max-flow per target, source and layer: the explained target only
        return chosen

    return rows_for


def _text_result(maps: AttentionMaps, blocks: dict[str, Block], *, target: int, method: str, text: Any,
                 prediction: str | None, model: str | None, params: dict[str, Any]) -> Attribution:
    tokens = [str(t) for t in maps.tokens]
    n_layers = next(iter(blocks.values())).values.shape[1]
    return Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(len(tokens))),
                       blocks=blocks, n_layers=n_layers, target=target, method=method, input=text,
                       prediction=prediction, model=model, params=params,
                       meta={"special": [int(i) for i in maps.special], "causal": bool(maps.causal)})


def _explain(text: str, model: Any, tokenizer: Any, *, methods: list[str], shown: str, target: Any, targets: Any,
             flow_targets: str, residual: float, head_fusion: str, solver: str, truncate: bool,
             progress: Progress | None, causal_norm: str | None, weighting: str = "attention") -> Attribution:
    check_settings(weighting=weighting, methods=methods)
    run = prepare(text, model, tokenizer, target=target, head_fusion=head_fusion, truncate=truncate,
                  causal_norm=causal_norm, residual=residual, weighting=weighting)
    return attribute(run, methods=methods, shown=shown, targets=targets, flow_targets=flow_targets, residual=residual,
                     head_fusion=head_fusion, solver=solver, truncate=truncate, progress=progress,
                     causal_norm=causal_norm)


def attribute(run: Prepared, *, methods: list[str], shown: str, targets: Any, flow_targets: str, residual: float,
              head_fusion: str, solver: str, truncate: bool, progress: Progress | None,
              causal_norm: str | None) -> Attribution:
    """The methods on one prepared input (the part of :func:`explain` / :func:`explain_maps` after
    capture; ``attnflow batch`` calls it on each text of a batched forward pass)."""
    text = run.text
    rows_for = _rows_for(targets, flow_targets, run.target, len(run.maps.tokens))
    blocks = _blocks(run.maps, methods, rows_for, residual=residual, head_fusion=head_fusion, solver=solver,
                     causal_norm=causal_norm, progress=progress, grad=run.grad_rollout)
    params = {"residual": residual, "head_fusion": head_fusion, "causal_norm": causal_norm, "solver": solver,
              "truncate": truncate, "weighting": run.maps.weighting}
    return _text_result(run.maps, blocks, target=run.target, method=shown, text=text, prediction=run.prediction,
                        model=run.name, params=params)


def explain(text: str, model: Any = None, *, tokenizer: Any = None, method: Any = "rollout", target: Any = None,
            residual: float = 0.5, head_fusion: str = "mean", solver: str = "auto", truncate: bool = False,
            progress: Progress | None = None, causal_norm: str | None = None,
            target_text: str | None = None, weighting: str = "attention") -> Attribution:
    """Explain which input tokens position ``target`` draws on, layer by layer.

    model: a local path or hub id (loaded with eager attention), or a loaded model together with
        ``tokenizer``; None uses the default model.
    method: "raw", "rollout", "flow", "grad-rollout" (gradient-weighted rollout for the predicted
        class; sequence classifiers only), "all" (the paper's three) or a list of these; the result
        holds every one of them.
    target: "cls", "last", a token position, or None: "last" for decoders (the position that predicts
        the next token), "cls" for encoders.
    causal_norm: receptive-field normalisation for decoders (None, "keys", "sink"); see
        :mod:`attnflow.core.causal`. Other arguments as in :func:`attnflow.rollout` / :func:`attnflow.flow`.
    weighting: "attention" (the paper's: each layer's attention weights) or "norm": each key's
        weight times the length of its transformed value vector ``||(x_j W_V^h + b_V^h) W_O^h||``,
        summed over heads, rows normalised (Kobayashi et al. 2020), then the residual and the
        methods as before; see :mod:`attnflow.core.weighting`. Recorded in ``result.params``.

    target_text: encoder-decoder models (T5, BART, Marian, ...) only: the output to explain, teacher
        forced; ``text`` is then the source and the result is of kind "seq2seq" (see
        :func:`attnflow.api.seq2seq.explain_seq2seq`; ``target`` picks a target token).

    Returns an :class:`~attnflow.results.Attribution` whose methods are computed for ``target`` only.
    """
    if target_text is not None or _encoder_decoder(model):
        from attnflow.api.seq2seq import explain_seq2seq

        if causal_norm is not None:
            raise AttnflowError("causal_norm is for decoder-only models; encoder-decoder rollout has no such option")
        refuse_seq2seq_norm(weighting)
        return explain_seq2seq(text, target_text, model, tokenizer=tokenizer, method=method, target=target,
                               residual=residual, head_fusion=head_fusion, solver=solver, truncate=truncate,
                               progress=progress)
    methods, shown = resolve_methods(method)
    return _explain(text, model, tokenizer, methods=methods, shown=shown, target=target, targets="target",
                    flow_targets="target",
                    residual=residual, head_fusion=head_fusion, solver=solver, truncate=truncate, progress=progress,
                    causal_norm=causal_norm, weighting=weighting)


def refuse_seq2seq_norm(weighting: str) -> None:
    check_weighting(weighting)
    if weighting != "attention":
        raise AttnflowError("the norm weighting is for encoder-only and decoder-only models; encoder-decoder "
                            "rollout uses attention weights (weighting='attention')")


def _encoder_decoder(model: Any) -> bool:
    """Whether ``model`` (a loaded model or a model folder) is an encoder-decoder model."""
    if model is None:
        return False
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        from attnflow.capture.load import is_encoder_decoder_path

        return is_encoder_decoder_path(str(model))
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def explain_maps(text: str, model: Any = None, *, tokenizer: Any = None,
                 methods: Any = ("raw", "rollout", "flow"), method: str | None = None, target: Any = None,
                 flow_targets: str = "auto", residual: float = 0.5, head_fusion: str = "mean", solver: str = "auto",
                 truncate: bool = False, progress: Progress | None = None,
                 causal_norm: str | None = None, targets: str = "auto", weighting: str = "attention") -> Attribution:
    """Like :func:`explain`, but every method's scores for every target position (flow as
    ``flow_targets`` says: "auto" computes it for every target up to ``FLOW_ALL_MAX`` tokens and for
    ``target`` only above, "all" always, "target" never), so a report can switch target. ``method``
    names the one a report opens on (default: rollout when computed, else the first of ``methods``).
    ``targets="auto"`` computes every target up to ``MAPS_ALL_MAX`` tokens and the explained one
    above (``"all"`` always). One forward pass, plus one differentiable pass when ``methods``
    includes "grad-rollout" (sequence classifiers only). ``weighting`` as in :func:`explain`."""
    names, shown = _shown(methods, method, TEXT_METHODS)
    if targets not in ("auto", "all"):
        raise AttnflowError(f"explain_maps targets must be 'auto' or 'all'; got {targets!r} "
                            "(use explain for one target)")
    return _explain(text, model, tokenizer, methods=names, shown=shown, target=target,
                    targets=targets, flow_targets=flow_targets, residual=residual, head_fusion=head_fusion,
                    solver=solver, truncate=truncate, progress=progress, causal_norm=causal_norm, weighting=weighting)


def explain_attentions(attentions: Any, tokens: Sequence[str] | None = None, *, target: int = 0,
                       methods: Any = ("raw", "rollout", "flow"), targets: Any = "all", flow_targets: str = "auto",
                       residual: float = 0.5, head_fusion: str = "mean", solver: str = "auto",
                       causal_norm: str | None = None, progress: Progress | None = None, prediction: str | None = None,
                       model: str | None = None, text: str | None = None) -> Attribution:
    """An :class:`~attnflow.results.Attribution` from attention you already have: ``(layers, heads,
    n, n)``, the Hugging Face tuple of one input, or :class:`AttentionMaps`. ``tokens`` label the
    positions (default: the maps' tokens, else "0", "1", ...); ``targets`` "all", "target" or a list of
    positions (flow for every target follows ``flow_targets``, as in :func:`explain_maps`)."""
    maps = attentions if isinstance(attentions, AttentionMaps) else None
    if maps is None:
        from attnflow.core.inputs import as_stack

        stack = as_stack(attentions)
        if stack.batched:
            raise AttnflowError("explain_attentions takes the attention of one input, not a batch")
        n = stack.shape[-1]
        maps = AttentionMaps(attentions=stack.values[0], tokens=list(tokens) if tokens is not None else
                             [str(i) for i in range(n)])
    elif tokens is not None:
        maps = AttentionMaps(**{**maps.__dict__, "tokens": list(tokens)})
    n = maps.attentions.shape[-1]
    if len(maps.tokens) != n:
        raise AttnflowError(f"{len(maps.tokens)} tokens for attention over {n} positions")
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not -n <= target < n:
        raise AttnflowError(f"target must be a position in [{-n}, {n}); got {target!r}")
    target = int(target) % n
    names, shown = _shown(methods, None, METHODS)
    blocks = _blocks(maps, names, _rows_for(targets, flow_targets, target, n), residual=residual,
                     head_fusion=head_fusion, solver=solver, causal_norm=causal_norm, progress=progress)
    params = {"residual": residual, "head_fusion": head_fusion, "causal_norm": causal_norm, "solver": solver}
    return _text_result(maps, blocks, target=target, method=shown, text=text, prediction=prediction, model=model,
                        params=params)
