"""Text in, an ``Attribution`` out.

    result = attnflow.explain("The keys to the cabinet", method="all", target="cls")
    result.print(); result.plot("panels.png"); result.to_html("report.html")

- ``explain``: every requested method for one target position (cheap: one row per method).
- ``explain_maps``: every method for every target position, so that a report can switch target
  (flow, one max-flow per target, source and layer, is computed for every target only while that
  is cheap: see ``flow_targets``).
- ``explain_attentions``: the same from attention you already have, no model needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.api.methods import run_method
from attnflow.api.capture_plan import row_capture
from attnflow.api.checks import check_computed, check_methods, check_options, check_text_model, refuse_causal_norm
from attnflow.api.defaults import PAPER_ONLY
from attnflow.api.models import ModelInfo, inspect, is_name, loaded_name, resolve, unwrap
from attnflow.capture import capture
from attnflow.hf.load import cached_tokenizer
from attnflow.capture.text import max_length
from attnflow.units.vocabulary import warn_unknown_words
from attnflow.config import registry
from attnflow.config.registry import Context
from attnflow.config.settings import UNSET, Settings, is_default
from attnflow.core.maps import AttentionMaps
from attnflow.core.methods import FLOW_ALL_MAX
from attnflow.errors import AttnflowError
from attnflow.results import Attribution, Block

# Methods explain() offers for text (read from the registry: attnflow.config.registry).
TEXT_METHODS = registry.names("text")

# Above this many tokens explain_maps(targets="auto") computes the explained target only: every
# target of a 2,048-token, 30-layer input is 250 million numbers per method, more than a report can
# usefully carry (a 512-token one is 16 million for raw and rollout, a 6.6 MiB report).
MAPS_ALL_MAX = 1024

Progress = Callable[[int, int], None]


def resolve_methods(method: Any, kind: str = "text", *, model_free: bool = False) -> tuple[list[str], str]:
    """``attnflow.config.registry.resolve`` (the registry) for results of ``kind``."""
    return registry.resolve(method, kind, model_free=model_free)


def resolve_target(target: Any, maps: AttentionMaps, tokenizer: Any = None) -> int:
    """``"cls"`` -> the classifier token's position; ``"last"`` -> the last real token; an int
    (negative counts from the end) -> that position; None -> "last" for decoders (the position that
    predicts the next token; decoders have no CLS), "cls" otherwise."""
    ids = maps.input_ids.tolist() if maps.input_ids is not None else []
    return resolve_position(target, len(maps.tokens), ids, maps.causal, tokenizer)


def resolve_position(target: Any, n: int, ids: list[int], causal: bool, tokenizer: Any = None) -> int:
    """``resolve_target`` from a token count and ids (known from the tokenizer alone, so that a
    target outside the input is refused before the model loads). ``target`` as ``Settings``
    checked it (no second check here)."""
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


def _shown(methods: Any, method: str | None, model_free: bool = False) -> tuple[list[str], str]:
    """Methods of a maps result and the one its report opens on (``method``; default rollout)."""
    names, _ = resolve_methods(list(methods) if not isinstance(methods, str) else methods, model_free=model_free)
    if method is not None and method not in names:
        raise AttnflowError(f"method {method!r} must be one of the computed methods {names}")
    return names, method or registry.shown_first(names)


def _prediction(maps: AttentionMaps, model: Any) -> str | None:
    logits = maps.logits
    if logits is None or logits.dim() != 1:  # token-level outputs (LM heads) have no single label
        return None
    label = int(logits.argmax())
    id2label = getattr(model.config, "id2label", None) or {}
    return str(id2label.get(label, label))


@dataclass
class CapturedInput:
    """One captured input with its target resolved and the model's prediction read, ready for the
    methods (``attribute``)."""

    maps: AttentionMaps
    target: int
    prediction: str | None
    model: Any
    name: str
    text: str
    tokenizer: Any = None
    lm: bool = False  # a decoder with its language-model head (the honest defaults apply)


def _check_text(text: Any) -> None:
    if not isinstance(text, str):
        raise AttnflowError(f"explain takes one text (a string); got {type(text).__name__}. "
                            "For a batch, use attnflow.capture(model, tokenizer, texts) and the core methods")
    if not text.strip():
        raise AttnflowError("text must be a non-empty string")


def _ids(text: str, config: Any, tokenizer: Any, settings: Settings) -> list[int]:
    """The token ids capture will run on (truncated as it truncates: ``config`` a loaded model's or
    a config dict)."""
    limit = max_length(config, tokenizer) if settings.truncate else None
    return list(tokenizer(text, truncation=limit is not None, max_length=limit)["input_ids"])


def captured_input(maps: AttentionMaps, text: str, model: Any, tokenizer: Any, *, target: Any,
                   lm: bool = False) -> CapturedInput:
    """One text's captured maps (captured alone, or sliced from a batch by ``attnflow.batch``)
    with its target resolved and the model's prediction read, ready for ``attribute``."""
    return CapturedInput(maps=maps, target=resolve_target(target, maps, tokenizer),
                         prediction=_prediction(maps, model), model=model, name=loaded_name(model), text=text,
                         tokenizer=tokenizer, lm=lm)


def _blocks(attentions: AttentionMaps, methods: list[str], rows_for: Callable[[str], list[int]],
            settings: Settings, progress: Progress | None, run: CapturedInput | None = None,
            spans: list[list[int]] | None = None, notes: dict | None = None) -> dict[str, Block]:
    """method -> ``Block`` of the rows ``rows_for(method)`` at every layer, each computed by its
    registry function (``attnflow.config.registry``); ``run`` gives model-based methods the model;
    ``spans`` (token groups) go to the methods whose record ablates by span, which report into ``notes``."""
    n = len(attentions.tokens)
    blocks = {}
    for method in methods:
        rows = rows_for(method)
        if hasattr(progress, "method"):  # a bar (the CLI's) names the method whose steps it counts
            progress.method(method, "rows" if registry.get(method).cost == registry.MAX_FLOW else "runs")
        # the capture pass's last-position logits: the clean readout a method explaining that row reuses
        clean = attentions.last_logits[None] if list(rows) == [n - 1] and attentions.last_logits is not None \
            else None
        context = Context(kind="text", attentions=attentions, settings=settings, rows=rows, progress=progress,
                          n_layers=attentions.n_layers, clean_logits=clean,
                          model=run.model if run is not None else None,
                          tokenizer=run.tokenizer if run is not None else None,
                          input_ids=attentions.input_ids if run is not None else None,
                          spans=spans if registry.get(method).spans else None, notes=notes)
        blocks[method] = run_method(registry.get(method), context)
        if run is not None:
            refuse_overflow(blocks[method].values, method, run.model)
    return blocks


def refuse_overflow(values: np.ndarray, method: str, model: Any) -> None:
    """A model in float16 or bfloat16 whose numbers overflowed gives infinite or NaN scores: refused in a
    sentence with the next step, not returned (float32 and wider models are left as they compute)."""
    from attnflow.hf.weights import refuse_overflow as refuse

    refuse(model, values, f"{method} gave infinite or NaN scores")


def refuse_capture_overflow(maps: AttentionMaps, model: Any) -> None:
    """The same refusal from the capture pass, before any method runs: a float16 model that overflowed
    there gives NaN maps, rows or logits, which flow's input check would refuse without saying why, and
    on which a per-source method would run all of its passes before its scores were refused."""
    from attnflow.hf.weights import refuse_overflow as refuse

    rows = maps.rows.values.values() if maps.rows is not None else ()
    for values in (maps.attentions, *rows, maps.last_logits):
        if values is not None:
            refuse(model, values, "the capture pass gave infinite or NaN attention weights or logits")


def _rows_for(targets: Any, flow_targets: str, target: int, n: int,
              explained_only: Sequence[str] = ()) -> Callable[[str], list[int]]:
    """Which target rows each method computes: ``targets`` "target" (the explained one), "all", or
    positions; with "all", flow follows ``flow_targets`` ("auto": all while n <= FLOW_ALL_MAX);
    ``explained_only`` methods (the honest defaults added beside the requested ones) the explained
    target alone."""
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
        if method in explained_only:
            return [target]
        cheap_only = registry.get(method).rows == registry.WHILE_CHEAP
        if cheap_only and isinstance(targets, str) and targets == "all" and not every_flow:
            return [target]  # e.g. flow: one max-flow per target, source and layer: the explained target only
        return chosen

    return rows_for


def _text_result(maps: AttentionMaps, blocks: dict[str, Block], *, target: int, method: str, text: Any,
                 prediction: str | None, model: str | None, params: dict[str, Any],
                 faithfulness: dict | None = None, notes: dict | None = None) -> Attribution:
    tokens = [str(t) for t in maps.tokens]
    n_layers = maps.n_layers
    meta = {"special": [int(i) for i in maps.special], "causal": bool(maps.causal), **(notes or {})}
    if faithfulness is not None:
        meta["faithfulness"] = faithfulness
    return Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(len(tokens))),
                       blocks=blocks, n_layers=n_layers, target=target, method=method, input=text,
                       prediction=prediction, model=model, params=params, meta=meta)


@dataclass
class _Plan:
    """What one explanation computes (``_Decision``) on the token ids capture runs on."""

    methods: list[str]
    added: list[str]
    ids: list[int]  # the token ids capture runs on
    target: int | None  # None: not resolvable from the ids (refused after capture, naming the tokens)


class _Decision:
    """What one explanation computes, decided once (``attnflow.api.defaults``) and checked once
    (``attnflow.api.checks``), each as soon as what it depends on is known:

    - ``kind_known`` (from a named model's config, before its tokenizer and weights load; else once
      it is loaded): the methods named against the model's kind, and the receptive-field
      normalisation; when no decoder default can be added (methods named, ``paper_only``, a model that
      is no causal LM: ``attnflow.api.defaults.adds_defaults``), the methods are the ones asked for
      and the options are checked against them now.
    - ``ids_known``: the explained target; where defaults may be added, the decision
      (``attnflow.api.defaults.text_methods``, which needs the token count) and then the check of
      the options against what the call computes."""

    def __init__(self, asked: list[str], settings: Settings, *, named: bool, paper_only: bool, spans: Any) -> None:
        self.asked, self.settings, self.named, self.paper_only, self.spans = asked, settings, named, paper_only, spans
        self.methods: list[str] | None = None
        self.added: list[str] = []

    def kind_known(self, bound: Any) -> None:
        """``bound``: a ``ModelInfo`` or a ``Loaded``, carrying its ``ModelKind``."""
        from attnflow.api.defaults import adds_defaults

        check_methods(self.asked, self.settings, bound, spans=self.spans, decided_later=True)
        kind = _kind(bound)
        refuse_causal_norm(self.settings.causal_norm, kind, _name(bound))
        if not adds_defaults(decoder=kind.lm, named=self.named, paper_only=self.paper_only):
            self.methods = list(self.asked)
            check_computed(self.asked, self.settings, self.methods, spans=self.spans)

    def ids_known(self, bound: Any, tokenizer: Any, ids: list[int]) -> _Plan:
        from attnflow.api.defaults import text_methods

        settings = self.settings
        try:
            target = resolve_position(settings.target, len(ids), ids, _kind(bound).causal, tokenizer)
        except AttnflowError:
            target = None
        if self.methods is None:
            self.methods, self.added = text_methods(
                self.asked, decoder=_kind(bound).lm, explains_last=target == len(ids) - 1, named=self.named,
                paper_only=self.paper_only, n_tokens=len(ids), budget=not is_default("budget", settings.budget))
            check_computed(self.asked, settings, self.methods, spans=self.spans)
        return _Plan(methods=self.methods, added=self.added, ids=ids, target=target)


def _kind(bound: Any) -> Any:
    return bound.loads_as if isinstance(bound, ModelInfo) else bound.model_kind


def _name(bound: Any) -> str:
    return repr(bound.path) if isinstance(bound, ModelInfo) else type(bound.model).__name__


def _explain(text: str, model: Any, tokenizer: Any, settings: Settings, *, methods: list[str], shown: str,
             targets: Any, flow_targets: str, progress: Progress | None, paper_only: bool,
             measured: bool, spans: Any = None, preview: Callable[[Attribution], None] | None = None,
             named: bool = True) -> Attribution:
    """Bind the model once, decide once what the call computes and check each thing once
    (``_Decision``: the honest policy of ``attnflow.api.defaults``, ``methods`` alone when
    ``named``, else the decoder defaults beside them unless ``paper_only``), leave out a default that
    cannot fit the memory budget, capture (the target's rows alone where every method can take them),
    then ``attribute``; when ``measured`` (a report's maps), with the on-the-fly faithfulness
    numbers of a short input. ``preview``: see ``attribute``."""
    from attnflow.units.spans import checked_spans

    spans = checked_spans(spans)
    _check_text(text)
    decision = _Decision(methods, settings, named=named, paper_only=paper_only, spans=spans)
    plan = None
    if is_name(model):
        info = inspect(model)
        if info.config:  # its kind, from the config alone: before the tokenizer and the weights load
            decision.kind_known(info)
        check_text_model(info, weighting=settings.weighting)
        tokenizer = cached_tokenizer(info)
        if not settings.truncate:  # truncation changes the length; the target is then checked after capture
            ids = list(tokenizer(text)["input_ids"])
            resolve_position(settings.target, len(ids), ids, info.causal, tokenizer)
        warn_unknown_words(text, tokenizer, info.path)
        if info.config:
            plan = decision.ids_known(info, tokenizer, _ids(text, info.config, tokenizer, settings))
        loaded = resolve(info, device=settings.device, dtype=settings.dtype)
    else:
        loaded = resolve(model, tokenizer, device=settings.device, dtype=settings.dtype)
        warn_unknown_words(text, loaded.tokenizer, str(getattr(loaded.model, "name_or_path", "") or ""))
    model, tokenizer = loaded.model, loaded.tokenizer
    if plan is None:
        decision.kind_known(loaded)
        plan = decision.ids_known(loaded, tokenizer, _ids(text, model, tokenizer, settings))
    left_out = _check_memory_budget(plan, model, settings, progress)
    chosen = [m for m in plan.methods if m not in left_out]
    rows = None
    if targets == "target" and plan.target is not None:  # one target (not explain_maps): its rows alone?
        rows = row_capture(chosen, loaded, settings)
    if rows is not None:
        from attnflow.capture.rows import capture_rows

        maps = capture_rows(model, tokenizer, text, plan.target, rows, truncate=settings.truncate,
                            residual=settings.residual, head_fusion=settings.head_fusion,
                            causal_norm=settings.causal_norm, progress=progress)
    else:
        # Heads are fused while the model runs: explaining never needs per-head maps (see capture.streaming).
        maps = capture(model, tokenizer, text, truncate=settings.truncate, head_fusion=settings.head_fusion,
                       weighting=settings.weighting)
    run = captured_input(maps, text, model, tokenizer, target=settings.target, lm=loaded.model_kind.lm)
    added = [m for m in plan.added if m not in left_out]
    return attribute(run, settings, methods=chosen, shown=shown, targets=targets, flow_targets=flow_targets,
                     progress=progress, explained_only=added, measured=measured, spans=spans, preview=preview)


def _check_memory_budget(plan: _Plan, model: Any, settings: Settings, progress: Progress | None = None) -> list[str]:
    """Before the capture pass (on a long input the capture alone takes minutes and gigabytes), each
    planned method's working memory on the plan's ``ids`` against the memory budget
    (``attnflow.interventions.costs.refuse_over_budget``): a method asked for that cannot fit is
    refused now, not after the others have run; a decoder default the honest policy added is left
    out, with a warning saying why. Returns the defaults left out. A per-source method is checked up
    to the explained target (the check after capture, on the method's own rows, stays). A progress
    callback that takes estimates (``progress.estimate``: the CLI's bar) gets each model-based method's
    time and memory now, before the capture pass, which on a long input alone takes minutes."""
    import warnings

    from attnflow.interventions.costs import refuse_over_budget

    if plan.target is None:
        return []  # the target is refused after capture, as before, with the captured tokens to name
    ids, target = plan.ids, plan.target
    n = len(ids)
    left_out = []
    for name in plan.methods:
        try:
            refuse_over_budget(registry.get(name), model, n, target + 1)
        except AttnflowError as refused:
            if name not in plan.added:
                raise
            warnings.warn(f"the decoder default {name} is left out: {refused}", stacklevel=4)
            left_out.append(name)
    if hasattr(progress, "estimate"):
        from attnflow.interventions.costs import fit_to_budget as estimate

        for name in plan.methods:
            if name not in left_out:  # the same estimate the method's run makes (its own bar counts down from it)
                estimate(registry.get(name), Context(kind="text", attentions=None, settings=settings, rows=[target],
                                                     model=model, input_ids=ids, progress=progress))
    return left_out


def attribute(run: CapturedInput, settings: Settings, *, methods: list[str], shown: str, targets: Any,
              flow_targets: str, progress: Progress | None, explained_only: Sequence[str] = (),
              measured: bool = False, spans: Any = None,
              preview: Callable[[Attribution], None] | None = None) -> Attribution:
    """The methods on one captured input (the part of ``explain`` / ``explain_maps`` after
    capture; ``attnflow batch`` calls it on each text of a batched forward pass); ``explained_only``
    methods for the explained target alone; ``measured``: with the on-the-fly faithfulness numbers
    (``attnflow.api.defaults.faithfulness_record``) when they apply. ``spans``: see
    ``attnflow.units.spans`` (``result.meta["spans"]`` then lists the token groups, ``"span_labels"``
    their text, ``"span_methods"`` the methods that scored them).

    ``preview``: called once with a first result before the methods whose cost grows with every
    target (flow: one max-flow per target, source and layer) are computed for more targets than the
    explained one: that result holds them for the explained target alone (as above
    ``FLOW_ALL_MAX`` tokens) and every other method in full, without the faithfulness numbers. An
    app shows it while the rest runs (on MiniLM at 117 tokens, flow for every target is ~25 s of
    CPU; for the explained one, well under a second). Not called when nothing is left to do later."""
    from attnflow.units.spans import groups_for

    rows_for = _rows_for(targets, flow_targets, run.target, len(run.maps.tokens), explained_only)
    found = groups_for(spans, run.text, run.tokenizer, len(run.maps.tokens))
    notes: dict[str, Any] = {} if found is None else {
        "spans": found[0], "span_labels": found[1], "span_methods": [m for m in methods if registry.get(m).spans]}
    if explained_only:
        from attnflow.api.defaults import added_note

        notes["added"] = added_note(list(explained_only))
    later = [] if preview is None else [m for m in methods if registry.get(m).rows == registry.WHILE_CHEAP
                                        and rows_for(m) != [run.target]]

    def first_rows(method: str) -> list[int]:
        return [run.target] if method in later else rows_for(method)

    def built(blocks: dict[str, Block], faithfulness: dict | None = None) -> Attribution:
        return _text_result(run.maps, blocks, target=run.target, method=shown, text=run.text,
                            prediction=run.prediction, model=run.name, params=settings.as_dict(),
                            faithfulness=faithfulness, notes=notes)

    refuse_capture_overflow(run.maps, run.model)
    blocks = _blocks(run.maps, methods, first_rows, settings, progress, run=run,
                     spans=None if found is None else found[0], notes=notes)
    if later:
        preview(built(dict(blocks)))
        blocks.update(_blocks(run.maps, later, rows_for, settings, progress, run=run))
    if not measured:
        return built(blocks)
    from attnflow.api.defaults import faithfulness_record

    return built(blocks, faithfulness_record(built(blocks), run.model, run.tokenizer))


def explain(text: str, model: Any = None, *, method: Any = None, settings: Settings | None = None,
            tokenizer: Any = None, target_text: str | None = None, paper_only: bool = PAPER_ONLY, spans: Any = None,
            progress: Progress | None = None, **overrides: Any) -> Attribution:
    """Explain which input tokens position ``target`` draws on, layer by layer.

    Args:
        text: The input. For an encoder-decoder model with ``target_text``, the source.
        model: A local path or hub id (loaded with eager attention), a loaded model together with
            ``tokenizer``, or what ``attnflow.api.resolve`` returns (a ``Loaded``, bound once and
            reused). None uses the default model, the bundled agreement classifier.
        method: "raw", "rollout", "flow", "grad-rollout" (gradient-weighted rollout for the predicted
            class; sequence classifiers only), any other registered method
            ([`attnflow.methods()`][attnflow.config.registry.methods]), "all" (the paper's three) or a
            list of these; the result holds every one of them and nothing else. None (not named):
            rollout, and on a decoder's last position the decoder defaults beside it (see
            ``paper_only``).
        settings: A [`Settings`][attnflow.config.settings.Settings] holding every setting; None: the
            paper's. The keyword arguments below go on top of it.
        tokenizer: The tokenizer of a loaded ``model``.
        target_text: Encoder-decoder models (T5, BART, Marian, ...) only: the output to explain,
            teacher forced; ``text`` is then the source and the result is of kind "seq2seq" (see
            ``attnflow.api.seq2seq.explain_seq2seq``; ``target`` picks a target token).
        paper_only: With no ``method`` named, a decoder explaining its last position also computes
            ablated flow (value zeroing, the method the decoder study found faithful; above the
            record's ``exact_max`` tokens (64) or with a budget given, the budgeted method;
            ``attnflow.api.defaults``) beside rollout, unless True: then rollout alone. A method named
            runs alone either way; ``result.meta["added"]`` says what was added and why. CLI
            ``--paper-only``.
        spans: Decoders: "word", "sentence", a list of passages of the text (or character ranges), or
            a file of passages: ablated flow, its estimate and the budgeted method remove each span at
            once and every token carries its span's score (``attnflow.units.spans``). None: each token.
        progress: Called as ``progress(done, total)`` while each method runs (flow's rows, an
            ablation's runs).
        **overrides: Any setting by its name (the keyword arguments below), on top of ``settings``;
            a name that is no setting is refused.

    Keyword Args:
        target (Any): "cls", "last", a token position, or None: "last" for decoders (the position
            that predicts the next token), "cls" for encoders. Defaults to None.
        residual (float): Weight of the identity in ``A = (1 - residual) W + residual I``, as in
            [`rollout`][attnflow.core.rollout.rollout] (0.5: the paper's ``(W + I) / 2``). Defaults
            to 0.5.
        head_fusion (str): "mean" (the paper's), "max" or "min" over heads. Defaults to 'mean'.
        weighting (str): "attention" (the paper's: each layer's attention weights) or "norm": each
            key's weight times the length of its transformed value vector
            ``||(x_j W_V^h + b_V^h) W_O^h||``, summed over heads, rows normalised (Kobayashi et al.
            2020), then the residual and the methods as before; see ``attnflow.core.weighting``.
            Recorded in ``result.params``. Defaults to 'attention'.
        causal_norm (str | None): Receptive-field normalisation for decoders (None, "keys", "sink");
            see ``attnflow.core.causal``. Defaults to None.
        solver (str): The max-flow solver of [`flow`][attnflow.core.flow.flow] ("auto" picks the
            fastest exact one). Defaults to 'auto'.
        truncate (bool): Cut a text longer than the model's maximum instead of refusing it. Defaults
            to False.
        device (str): Where a model given by name runs ("auto": a GPU when torch sees one; "cpu",
            "cuda", "cuda:N", "mps"); a loaded model stays where it is (a device it is not on is
            refused). Defaults to 'auto'.
        dtype (str): What a model given by name is loaded in ("auto": the checkpoint's; "float32",
            "bfloat16", "float16"); a loaded model keeps its own (another dtype is refused). Defaults
            to 'auto'.
        budget (float): What ``ablated-flow-budgeted`` may spend, in forward passes of the input.
            Defaults to 5.0.

    Returns:
        An [`Attribution`][attnflow.results.attribution.Attribution] whose methods are computed for
            ``target`` only; ``result.params`` is ``settings.as_dict()``.

    Raises:
        AttnflowError: A setting outside its allowed values, a keyword that is no setting, a method
            the model cannot run, or a text longer than the model takes (without ``truncate``).

    Examples:
        The bundled agreement classifier, explaining its [CLS] position:

        >>> import attnflow
        >>> result = attnflow.explain("the keys to the cabinet", method="all")
        >>> result.methods, result.prediction
        (['raw', 'rollout', 'flow'], 'plural')
        >>> [token for _, token, _ in result.top(2, method="rollout")]
        ['keys', 'the']
        >>> result.row("flow").shape  # (layers, tokens)
        (6, 7)
    """
    from attnflow.units.spans import checked_spans

    named = method is not None
    method = method if named else registry.tracked()  # not named: rollout (and a decoder's defaults beside it)
    bound = _inspected(model)
    if target_text is not None or _encoder_decoder(bound):
        from attnflow.api.seq2seq import explain_seq2seq

        # a seq2seq target picks a target token by index or by its text: not a Settings target
        target = overrides.pop("target", None)
        settings = Settings.build(settings, **overrides)
        refuse_seq2seq_settings(settings)
        check_options({"spans": checked_spans(spans), **settings.as_dict()}, resolve_methods(method, "seq2seq")[0])
        model, tokenizer = unwrap(model, tokenizer)
        return explain_seq2seq(text, target_text, model, tokenizer=tokenizer, method=method, settings=settings,
                               target=None if target is UNSET else target, progress=progress)
    settings = Settings.build(settings, **overrides)
    methods, shown = resolve_methods(method)
    return _explain(text, bound, tokenizer, settings, methods=methods, shown=shown, targets="target",
                    flow_targets="target", progress=progress, paper_only=paper_only, measured=False, spans=spans,
                    named=named)


def explain_as_asked(text: str, model: Any = None, **keywords: Any) -> Attribution:
    """Deprecated: ``explain`` (a method named runs alone there too). Kept for one release."""
    import warnings

    warnings.warn("attnflow.api.text.explain_as_asked is deprecated: call attnflow.explain (a method named runs "
                  "alone there too)", DeprecationWarning, stacklevel=2)
    return explain(text, model, **keywords)


def refuse_seq2seq_settings(settings: Settings) -> None:
    """Encoder-decoder rollout has no receptive-field normalisation and no norm weighting."""
    if settings.causal_norm is not None:
        raise AttnflowError("causal_norm is for decoder-only models; encoder-decoder rollout has no such option")
    if settings.weighting != "attention":
        raise AttnflowError("the norm weighting is for encoder-only and decoder-only models; encoder-decoder "
                            "rollout uses attention weights (weighting='attention')")


def _inspected(model: Any) -> Any:
    """The ``ModelInfo`` of a model named by the user, inspected once for the whole call; a
    loaded model or a ``Loaded`` as it is, and a name refused as it is (then ``_explain``
    refuses it again, after the text, so that errors come in the order a user fixes them)."""
    if not is_name(model) or isinstance(model, ModelInfo):
        return model
    try:
        return inspect(model)
    except AttnflowError:
        return model


def _encoder_decoder(model: Any) -> bool:
    """Whether ``model`` (a loaded model, a ``Loaded`` or a ``ModelInfo``) is an encoder-decoder
    model."""
    if model is None:
        return False
    from attnflow.api.models import describe

    try:
        return describe(model)[0] == "encoder-decoder"
    except AttnflowError:  # no config.json here: a hub id, or a path that loading refuses with its sentence
        return False


@Settings.keywords
def explain_maps(text: str, model: Any = None, *, tokenizer: Any = None,
                 methods: Any = None, method: str | None = None, target: Any = UNSET,
                 flow_targets: str = "auto", residual: float = UNSET, head_fusion: str = UNSET, solver: str = UNSET,
                 truncate: bool = UNSET, progress: Progress | None = None,
                 causal_norm: str | None = UNSET, targets: str = "auto", weighting: str = UNSET,
                 settings: Settings | None = None, paper_only: bool = PAPER_ONLY, device: str = UNSET,
                 dtype: str = UNSET, spans: Any = None, preview: Callable[[Attribution], None] | None = None,
                 defaults: bool | None = None) -> Attribution:
    """Like [`explain`][attnflow.api.text.explain], but every method's scores for every target
    position, so a report can switch target.

    One forward pass, plus one differentiable pass when ``methods`` includes "grad-rollout" (sequence
    classifiers only). A short input (at most ``attnflow.api.defaults.REPORT_FAITHFULNESS_MAX``
    tokens) on a model with a prediction head carries the on-the-fly faithfulness numbers in
    ``meta["faithfulness"]``, which the report shows.

    Args:
        text: The input.
        model: As in [`explain`][attnflow.api.text.explain]; None uses the default model.
        tokenizer: The tokenizer of a loaded ``model``.
        methods: Method names, "all" or a list. None: the paper's three (not named: a decoder's
            defaults come beside them).
        method: The one a report opens on. None: rollout when computed, else the first of
            ``methods``.
        target: The explained target ("cls", "last" or a position); None: each model's default, as
            in [`explain`][attnflow.api.text.explain].
        flow_targets: "auto" computes flow for every target up to ``FLOW_ALL_MAX`` (128) tokens and
            for ``target`` only above, "all" always for every target, "target" for ``target`` only.
        residual: Weight of the identity in ``A = (1 - residual) W + residual I`` (a setting).
        head_fusion: "mean", "max" or "min" over heads (a setting).
        solver: The max-flow solver of [`flow`][attnflow.core.flow.flow] (a setting).
        truncate: Cut a text longer than the model's maximum instead of refusing it (a setting).
        progress: Called as ``progress(done, total)`` while each method runs.
        causal_norm: Receptive-field normalisation for decoders: None, "keys" or "sink" (a setting).
        targets: "auto" computes every target up to ``MAPS_ALL_MAX`` (1024) tokens and the explained
            one above, "all" always every target.
        weighting: "attention" or "norm", as in [`explain`][attnflow.api.text.explain] (a setting).
        settings: A [`Settings`][attnflow.config.settings.Settings]; the settings passed as keywords
            go on top of it, one left out keeps its value there.
        paper_only: As in [`explain`][attnflow.api.text.explain] (the decoder defaults are computed
            for the explained target alone).
        device: Where a model given by name runs, as in [`explain`][attnflow.api.text.explain] (a
            setting).
        dtype: What a model given by name is loaded in, as in
            [`explain`][attnflow.api.text.explain] (a setting).
        spans: As in [`explain`][attnflow.api.text.explain].
        preview: Called as ``preview(result)`` first with flow for the explained target alone and every
            other method in full, when flow for more targets is still to come (what the app shows
            while the rest runs; see ``attnflow.api.text.attribute``).
        defaults: True adds the decoder defaults beside the ``methods`` given too (a menu's ticks,
            which a user did not name one by one: the app), False never, None when ``methods`` is
            None.

    Returns:
        An [`Attribution`][attnflow.results.attribution.Attribution] with every method's scores for
            every target (flow as ``flow_targets`` says); its default target is the explained one.

    Raises:
        AttnflowError: A setting outside its allowed values, ``targets`` other than "auto" or "all",
            a ``preview`` that is not a function, or a method the model cannot run.

    Examples:
        >>> import attnflow
        >>> maps = attnflow.explain_maps("the keys to the cabinet")
        >>> maps.methods, maps.scores["flow"].shape  # (targets, layers, tokens)
        (['raw', 'rollout', 'flow'], (7, 6, 7))
        >>> [token for _, token, _ in maps.with_target("keys").top(2, method="rollout")]
        ['keys', 'the']
    """
    settings = Settings.build(settings, device=device, dtype=dtype, target=target, residual=residual,
                              head_fusion=head_fusion,
                              solver=solver,
                              truncate=truncate, causal_norm=causal_norm, weighting=weighting)
    named = methods is not None if defaults is None else not defaults
    names, shown = _shown(registry.ALL if methods is None else methods, method)
    if preview is not None and not callable(preview):
        raise AttnflowError(f"preview must be a function of the first result (or None); got {type(preview).__name__}")
    if targets not in ("auto", "all"):
        raise AttnflowError(f"explain_maps targets must be 'auto' or 'all'; got {targets!r} "
                            "(use explain for one target)")
    return _explain(text, _inspected(model), tokenizer, settings, methods=names, shown=shown,
                    targets=targets, flow_targets=flow_targets, progress=progress, paper_only=paper_only,
                    measured=True, spans=spans, preview=preview, named=named)


@Settings.keywords
def explain_attentions(attentions: Any, tokens: Sequence[str] | None = None, *, target: int | None = None,
                       methods: Any = registry.ALL, targets: Any = "all", flow_targets: str = "auto",
                       residual: float = UNSET, head_fusion: str = UNSET, solver: str = UNSET,
                       causal_norm: str | None = UNSET, progress: Progress | None = None, prediction: str | None = None,
                       model: str | None = None, text: str | None = None, settings: Settings | None = None,
                       causal: bool | None = None, layout: str | None = None) -> Attribution:
    """An [`Attribution`][attnflow.results.attribution.Attribution] from attention you already have.

    Only the methods that need no model (the registry's ``needs_model`` is False) apply.

    Args:
        attentions: ``(layers, heads, n, n)`` (row = query), the Hugging Face tuple of one input,
            ``AttentionMaps``, or a TransformerLens ``ActivationCache`` (its patterns; TransformerLens
            prepends a BOS token unless ``prepend_bos=False``: pass ``tokens`` as
            ``model.to_str_tokens`` gives them).
        tokens: Labels of the positions. None: the maps' tokens, else "0", "1", ...
        target: The explained position. None: the last position (the one that predicts the next
            token) when the maps are causal, else 0.
        methods: Method names, "all" or a list.
        targets: "all", "target" or a list of positions (flow for every target follows
            ``flow_targets``).
        flow_targets: As in [`explain_maps`][attnflow.api.text.explain_maps].
        residual: Weight of the identity in ``A = (1 - residual) W + residual I`` (a setting).
        head_fusion: "mean", "max" or "min" over heads (a setting).
        solver: The max-flow solver of [`flow`][attnflow.core.flow.flow] (a setting).
        causal_norm: Receptive-field normalisation for decoders: None, "keys" or "sink" (a setting).
        progress: Called as ``progress(done, total)`` while each method runs.
        prediction: The model's output, recorded in the result.
        model: The model's name, recorded in the result.
        text: The input text, recorded in the result.
        settings: A [`Settings`][attnflow.config.settings.Settings]; the settings passed as keywords
            go on top of it.
        causal: Whether the maps come from a decoder. None: read off the maps, causal when nothing
            lies above the diagonal.
        layout: How a 5-D stack is ordered when that is ambiguous ("batch-first" or "layers-first";
            [`as_stack`][attnflow.core.inputs.as_stack]; TransformerLens's
            ``cache.stack_activation("pattern")`` is ``layout="layers-first"``).

    Returns:
        An [`Attribution`][attnflow.results.attribution.Attribution] of kind "text".

    Raises:
        AttnflowError: Attention of a batch, labels that do not match the positions, a target
            outside them, or a method that needs a model.

    Examples:
        >>> import attnflow, torch
        >>> attentions = torch.rand(6, 8, 7, 7).softmax(-1)  # (layers, heads, n, n)
        >>> result = attnflow.explain_attentions(attentions)
        >>> result.methods, result.scores["rollout"].shape  # (targets, layers, sources)
        (['raw', 'rollout', 'flow'], (7, 6, 7))
    """
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, solver=solver,
                              causal_norm=causal_norm)
    maps = attentions if isinstance(attentions, AttentionMaps) else None
    if maps is None:
        from attnflow.core.inputs import as_stack

        stack = as_stack(attentions, layout=layout)
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
    if causal is None:
        causal = bool(maps.causal) or _lower_triangular(maps.attentions)
    if bool(causal) != bool(maps.causal):
        maps = AttentionMaps(**{**maps.__dict__, "causal": bool(causal)})
    if target is None:
        target = n - 1 if causal else 0
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not -n <= target < n:
        raise AttnflowError(f"target must be a position in [{-n}, {n}); got {target!r}")
    target = int(target) % n
    names, shown = _shown(methods, None, model_free=True)
    blocks = _blocks(maps, names, _rows_for(targets, flow_targets, target, n), settings, progress)
    params = {k: v for k, v in settings.as_dict().items() if k not in ("target", "truncate", "weighting")}
    return _text_result(maps, blocks, target=target, method=shown, text=text, prediction=prediction, model=model,
                        params=params)


def _lower_triangular(attentions: Any) -> bool:
    """Whether no query attends to a later key in any layer or head (a decoder's maps)."""
    import torch

    values = torch.as_tensor(attentions)
    n = values.shape[-1]
    return n > 1 and not bool(torch.triu(values, diagonal=1).abs().max() > 0)
