"""Honest defaults, decided once, in the api, before a result is built: what a decoder's explanation
shows unless asked otherwise, and the faithfulness numbers a short input's report carries.

- ``text_methods``, the one place that decides what a call adds to what was asked: a method the
  user names runs alone (nothing added); when none is named, a decoder's explanation of its last
  position (the one that predicts the next token) computes the registry's decoder defaults (the
  records with ``decoder_default``: the paper's rollout and the method that agreed best with what the
  model uses in the decoder study, docs/decoders.md, "Study": ablated flow, value zeroing of each source
  token in every layer; above the record's ``exact_max`` tokens, or with a budget given, its
  ``long_default``, the budgeted method, in its place) unless ``paper_only`` (then rollout alone). One
  flag with one default (``PAPER_ONLY``):
  ``attnflow.explain(paper_only=...)``, ``attnflow explain --paper-only``, the app's ``paper_only``
  (the app's menus add the defaults beside the methods ticked). What was added, and why
  (``added_note``), goes into ``result.meta["added"]`` and under the printed table.
- ``faithfulness_record``: for an input of at most ``REPORT_FAITHFULNESS_MAX`` tokens on a model
  with a prediction head (a causal LM or a sequence classifier), every computed method measured
  against leave-one-out on the fly (``attnflow.evaluation.faithfulness.evaluate``; a decoder's
  deletions from the cached occlusion of ``attnflow.interventions.ablation``; no AOPC): a report's
  maps (``attnflow.explain_maps``) carry it in ``meta["faithfulness"]``, so the report shows the
  faithfulness table and the summary against position. Measured on SmolLM2 at 30 tokens: see
  docs/faithfulness.md.
"""

from __future__ import annotations

from typing import Any

from attnflow.config import registry
from attnflow.errors import AttnflowError

PAPER_ONLY = False  # the default of the one flag: Python, the CLI and the app
DECODER_METHODS = registry.decoder_default()  # ("rollout", "ablated-flow")

REPORT_FAITHFULNESS_MAX = 32  # tokens; above it a report is made without the on-the-fly numbers


def adds_defaults(*, decoder: bool, named: bool, paper_only: bool = PAPER_ONLY) -> bool:
    """Whether ``text_methods`` may add the decoder defaults to a call (then its answer waits for
    the token count and the explained target): not when methods were ``named``, not ``paper_only``, and
    only for a ``decoder`` (a causal LM)."""
    return decoder and not named and not paper_only


def text_methods(methods: list[str], *, decoder: bool, explains_last: bool, paper_only: bool = PAPER_ONLY,
                 n_tokens: int = 0, named: bool = False, budget: bool = False) -> tuple[list[str], list[str]]:
    """``(methods to compute, those added)``: ``methods`` as named (``named``: the user chose them, and
    they run alone), or, when none was named (``methods`` is then the entry point's own default), for a
    decoder (a causal LM) explaining its last position, unless ``paper_only``, the decoder defaults not
    among them (above a default's ``exact_max`` tokens, or with a ``budget`` given, its ``long_default``
    in its place: a budget given is a budget to keep)."""
    if not adds_defaults(decoder=decoder, named=named, paper_only=paper_only) or not explains_last:
        return list(methods), []
    wanted = [_stand_in(registry.get(m), n_tokens, budget) for m in DECODER_METHODS]
    added = [m for m in wanted if m not in methods]
    return [*methods, *added], added


def _stand_in(record: Any, n_tokens: int, budget: bool) -> str:
    """A decoder default's name, or its ``long_default`` above its ``exact_max`` tokens or with a budget."""
    if record.long_default and (budget or (record.exact_max is not None and n_tokens > record.exact_max)):
        return record.long_default
    return record.name


def generation_methods(methods: Any, kind: str | None, settings: Any) -> tuple[list[str], list[str]]:
    """``(methods to compute, those added)`` for a generation (``attnflow generate``, ``attnflow.generate``):
    ``methods`` as named (a name or a list; the tracked rollout is computed beside them anyway), or, when
    None, the decoder defaults: the tracked rollout and each other default that runs on a model of
    ``kind`` and reads the settings given (a ``weighting`` or ``causal_norm`` away from its default that a
    default would ignore leaves that default out rather than refusing what nobody asked for)."""
    from attnflow.api.checks import why_not
    from attnflow.config.settings import Settings

    if methods is not None:
        return ([methods] if isinstance(methods, str) else list(methods)), []
    default = Settings()
    changed = [f for f in ("weighting", "causal_norm") if getattr(settings, f) != getattr(default, f)]
    tracked = registry.tracked()
    added = [m for m in DECODER_METHODS if m != tracked and why_not(registry.get(m), kind) is None
             and all(f in registry.get(m).reads for f in changed)]
    return [tracked, *added], added


def added_note(added: list[str]) -> dict[str, Any]:
    """What ``result.meta["added"]`` says about the methods ``text_methods`` added."""
    exact = min((r.exact_max for r in map(registry.get, DECODER_METHODS) if r.exact_max is not None), default=0)
    return {"methods": list(added),
            "why": "no method was named, so a decoder's prediction gets the decoder defaults: the paper's rollout "
                   "beside ablated flow, the method that agreed best with what the model uses (docs/decoders.md); "
                   f"above {exact} tokens or with a budget given, ablated-flow-budgeted in its place. "
                   "Name a method (--method) to run it alone, or pass --paper-only for rollout alone"}


def faithfulness_record(result: Any, model: Any, tokenizer: Any, max_tokens: int = REPORT_FAITHFULNESS_MAX,
                        aopc: bool = False) -> dict | None:
    """On-the-fly faithfulness numbers for a text ``result`` of ``model`` when the input is short and
    the model has a prediction head, else None. Every method computed for the result's target is
    measured against leave-one-out (rho, partial rho given position, the position priors, the best
    method); AOPC only with ``aopc=True`` (it costs two passes per method and level; ``attnflow
    faithfulness`` gives it). ``result`` is read, not changed."""
    from attnflow.api.prediction import _head, _input_ids, _label, model_predict
    from attnflow.api.models import resolve
    from attnflow.evaluation.faithfulness import evaluate

    if result.kind != "text" or result.n_sources > max_tokens or "faithfulness" in (result.meta or {}):
        return None
    try:
        decoder = _head(resolve(model, tokenizer)) == "decoder"
    except AttnflowError:
        return None  # a bare encoder: no prediction to be faithful to
    t = result.target
    target = result.target_positions[t]
    if decoder and target != result.n_sources - 1:
        return None  # a decoder's prediction is read at the last position only
    if not isinstance(result.input, str):
        return None
    ids = _input_ids(model, tokenizer, result.input, truncate=False)  # the tokenizer call capture made
    if len(ids) != result.n_sources:
        return None
    scores = {m: result.row(m, t) for m in result.methods if t in result.computed[m].targets}
    if not scores or result.n_sources - 1 - len((result.meta or {}).get("special", [])) < 2:
        return None
    loo, output = None, None
    if decoder:
        # leave-one-out from the cached occlusion (positions before a deleted token are never
        # recomputed): about half the token steps of one full pass per deletion
        from attnflow.interventions.ablation import occlusion

        found = occlusion(model, ids, [target])
        loo, output = found.scores[0, 0], int(found.tokens[0])
    found = evaluate(model_predict(model, decoder), list(ids), scores, special=(result.meta or {}).get("special", ()),
                     target=target, loo=loo, output=output, aopc_levels=aopc)
    found.label = _label(model, tokenizer, decoder, found.output)
    found.meta = {"head": "decoder" if decoder else "classifier", "on_the_fly": True}
    return found.to_dict()


def with_faithfulness(result: Any, model: Any, tokenizer: Any, max_tokens: int = REPORT_FAITHFULNESS_MAX,
                      aopc: bool = False) -> Any:
    """``result`` with ``faithfulness_record``'s numbers in ``meta["faithfulness"]`` (a new result;
    ``result`` itself is returned when the numbers do not apply), for a result you already hold
    (``attnflow.explain_maps`` attaches them itself)."""
    from dataclasses import replace

    record = faithfulness_record(result, model, tokenizer, max_tokens, aopc)
    return result if record is None else replace(result, meta={**(result.meta or {}), "faithfulness": record})


def __getattr__(name: str) -> Any:
    if name == "EXACT_DEFAULT_MAX":  # deprecated: a field of the method's record now
        import warnings

        warnings.warn("attnflow.api.defaults.EXACT_DEFAULT_MAX is deprecated: read the decoder default's record, "
                      "attnflow.config.registry.get('ablated-flow').exact_max", DeprecationWarning, stacklevel=2)
        return registry.get("ablated-flow").exact_max
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
