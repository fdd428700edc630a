"""Honest defaults: what a decoder's explanation shows unless asked otherwise, and the faithfulness
numbers a short input's report carries.

- ``DECODER_METHODS``: the paper's rollout beside the method that agreed best with what the model
  uses in the decoder study (docs/decoders.md, "Study": ablated flow, value zeroing of each source
  token in every layer). ``attnflow generate`` and the app's generation show both; ``method="rollout"``
  (``--method rollout``) gives the paper's alone. :func:`with_decoder_methods` adds ablated flow
  beside an explained decoder text (``attnflow explain``; ``--paper-only`` leaves it out).
- :func:`with_faithfulness`: for an input of at most ``REPORT_FAITHFULNESS_MAX`` tokens on a model
  with a prediction head (a causal LM or a sequence classifier), measure every computed method
  against leave-one-out on the fly (:func:`attnflow.evaluation.faithfulness.evaluate`; a decoder's
  deletions from the cached occlusion of :mod:`attnflow.capture.ablation`; no AOPC) and attach
  the record to ``result.meta["faithfulness"]``, so the report shows the faithfulness table and the
  summary against position. Measured on SmolLM2 at 30 tokens: see docs/faithfulness.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.api.models import resolve
from attnflow.config.registry import DECODER_DEFAULT as DECODER_METHODS
from attnflow.errors import AttnflowError

REPORT_FAITHFULNESS_MAX = 32  # tokens; above it a report is made without the on-the-fly numbers


def with_faithfulness(result: Any, model: Any, tokenizer: Any, max_tokens: int = REPORT_FAITHFULNESS_MAX,
                      aopc: bool = False) -> bool:
    """Attach on-the-fly faithfulness numbers to a text ``result`` of ``model`` when the input is short
    and the model has a prediction head; returns whether it did. Every method computed for the
    result's target is measured against leave-one-out (rho, partial rho given position, the position
    priors, the best method); AOPC only with ``aopc=True`` (it costs two passes per method and level;
    ``attnflow faithfulness`` gives it). An input, model or target it does not apply to is left as it was."""
    if result.kind != "text" or result.n_sources > max_tokens or "faithfulness" in (result.meta or {}):
        return False
    # here, not at the top: `attnflow explain` imports this module, and scipy.stats and the
    # faithfulness code cost a second of start-up that a plain explain never uses
    from attnflow.api.faithfulness import _head, _input_ids, _label, model_predict
    from attnflow.evaluation.faithfulness import evaluate

    try:
        decoder = _head(resolve(model, tokenizer)) == "decoder"
    except AttnflowError:
        return False  # a bare encoder: no prediction to be faithful to
    t = result.target
    target = result.target_positions[t]
    if decoder and target != result.n_sources - 1:
        return False  # a decoder's prediction is read at the last position only
    if not isinstance(result.input, str):
        return False
    ids = _input_ids(model, tokenizer, result.input, truncate=False)  # the tokenizer call capture made
    if len(ids) != result.n_sources:
        return False
    scores = {m: result.row(m, t) for m in result.methods if t in result.computed[m].targets}
    if not scores or result.n_sources - 1 - len((result.meta or {}).get("special", [])) < 2:
        return False
    loo, output = None, None
    if decoder:
        # leave-one-out from the cached occlusion (positions before a deleted token are never
        # recomputed): about half the token steps of one full pass per deletion
        from attnflow.capture.ablation import occlusion

        found = occlusion(model, ids, [target])
        loo, output = found.scores[0, 0], int(found.tokens[0])
    found = evaluate(model_predict(model, decoder), list(ids), scores, special=(result.meta or {}).get("special", ()),
                     target=target, loo=loo, output=output, aopc_levels=aopc)
    found.label = _label(model, tokenizer, decoder, found.output)
    found.meta = {"head": "decoder" if decoder else "classifier", "on_the_fly": True}
    result.meta["faithfulness"] = found.to_dict()
    return True


def with_decoder_methods(result: Any, model: Any, tokenizer: Any, methods: Any = DECODER_METHODS) -> list[str]:
    """Add, beside a decoder text result's own methods, the measured-faithful ones of ``methods``
    (``"ablated-flow"``: value zeroing of each source in every layer at once, the drop of the target's
    predicted-token logit) for the result's target, placed at the top layer. Returns the names added
    (none for an encoder, a classifier, or a target other than the last position)."""
    from attnflow.capture.ablation import ablated_flow
    from attnflow.capture.text import is_causal
    from attnflow.results import Block

    wanted = [m for m in methods if m == DECODER_METHODS[-1] and m not in result.blocks]
    if result.kind != "text" or not wanted or not isinstance(result.input, str):
        return []
    try:
        loaded = resolve(model, tokenizer)
    except AttnflowError:
        return []
    if not is_causal(loaded.model):
        return []  # not a decoder; checked before the faithfulness imports, which an encoder never needs
    from attnflow.api.faithfulness import _head, _input_ids

    try:
        if _head(loaded) != "decoder":
            return []
    except AttnflowError:
        return []
    t = result.target
    position = result.target_positions[t]
    ids = _input_ids(model, tokenizer, result.input, truncate=False)
    if len(ids) != result.n_sources or position != len(ids) - 1:
        return []
    found = ablated_flow(model, ids, [position], layers="all", readout="logit")
    result.blocks[wanted[0]] = Block(np.asarray(found.scores, dtype=float), (t,), (result.n_layers - 1,))
    return wanted
