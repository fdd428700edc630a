"""Ablated flow's one-pass estimate and the budgeted chooser as registry functions (see
``attnflow.interventions.attribution_patching`` and ``attnflow.interventions.budgeted``).

Each takes the registry's ``Context`` (``model``, ``input_ids``, ``rows``, ``layers``, ``progress``,
``spans``, ``notes``) and returns ``(layers, rows, n)`` scores in ablated flow's sign (positive:
zeroing the source's values lowers the explained token's logit):

- ``ablated_flow_estimate``: ``(1, rows, n)``, first order of zeroing in every layer at once;
- ``ablated_flow_estimate_layers``: ``(layers, rows, n)``, first order of zeroing in one layer;
- ``ablated_flow_budgeted``: ``(1, rows, n)``, exact ablated flow when it fits ``settings.budget``
  (default 5), else the estimate with its latest sources, then its top sources, re-scored exactly
  (with spans, the top taken alternately by the estimate and by the target's attention, and the
  default budget at least ``RERUN`` pass beyond what the capture and the estimate spend).
  The budget is the compute of the whole call in forward passes of the input (``UNIT``,
  ``attnflow.interventions.compute``): on a text, the capture pass that ``attnflow.explain`` has already
  run counts as 1 (it is the unit: every position, the last one's logits), and the chooser gets what is left. Which sources were re-scored goes into ``context.notes`` when the caller gives a dict there (key
  ``"ablated-flow-budgeted"``: ``exact`` per source, ``cost`` and ``budget`` in that unit, ``unit``,
  ``plan``, ``tail``, ``attended``).

The context may give ``tokens`` (explained token per row), ``readout``, ``foils`` as for ablated flow,
and ``spans`` (groups of positions; ``attnflow.units.spans``): each token then carries its span's score.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnflow.api.methods.ablation import _needs_decoder, _options, _place, _rows, _sorted_tokens
from attnflow.units.spans import spread
from attnflow.interventions.attribution_patching import attribution_patching
from attnflow.interventions.budgeted import BUDGET, budgeted_ablated_flow, estimate_compute
from attnflow.interventions.compute import Shapes
from attnflow.config.settings import is_default
from attnflow.errors import AttnflowError

# What the budget counts (help, table and result.meta say it): the passes of the whole call, each token position
# run through the model counted as 1 / the explained length; a backward pass counted as one forward pass.
UNIT = ("forward passes of the input (the next token's: the last position's logits; compute counted from the "
        "model's shapes, on SDPA a forward pass's time): the capture pass, the estimate's forward and backward "
        "passes, the exact re-runs as batched")
CAPTURE = 1.0  # the capture pass: every position, the last one's logits
RERUN = 1.0  # by span with the default budget: the passes of exact re-runs it buys at least, beyond the estimate


def _estimate(context: Any, layers: str) -> np.ndarray:
    _needs_decoder(context, "the ablated-flow estimate")
    rows = _rows(context)
    options = _sorted_tokens(rows, _options(context))
    found = attribution_patching(context.model, context.input_ids, sorted(rows), layers=layers,
                                 readout=options["readout"], tokens=options["tokens"], foils=options["foils"],
                                 progress=context.progress)
    groups = _groups(context)
    if groups is not None:  # the first order is additive: a span's estimate is the sum of its tokens'
        n = found.scores.shape[-1]
        found.scores = spread(np.stack([found.scores[..., g].sum(-1) for g in groups], -1), groups, n)
    return _place(found, rows, context.layers)


def _groups(context: Any) -> list[list[int]] | None:
    return None if context.spans is None else [list(g) for g in context.spans]


def ablated_flow_estimate(context: Any) -> np.ndarray:
    return _estimate(context, "all")


def ablated_flow_estimate_layers(context: Any) -> np.ndarray:
    return _estimate(context, "each")


def ablated_flow_budgeted(context: Any) -> np.ndarray:
    _needs_decoder(context, "budgeted ablated flow")
    rows = _rows(context)
    options = _sorted_tokens(rows, _options(context))
    asked = float(getattr(context.settings, "budget", BUDGET))
    n = len(np.asarray(context.input_ids).reshape(-1))
    shapes = Shapes.of(context.model)
    unit = shapes.forward(n)
    # the capture pass explain ran for these maps is the unit itself (every position, the last one's logits; a
    # generation's own passes are not explaining), then the estimate: one forward and one backward pass per row
    spent = CAPTURE if context.attentions is not None else 0.0
    least = spent + estimate_compute(shapes, sorted(rows)) / unit
    # a budget the user gave is kept or refused; the default rises to what the call spends at least
    # (a long input's checkpointed estimate alone passes 5 from about 16,000 tokens on SmolLM2)
    if asked < least and len(rows) == 1 and not is_default("budget", asked):
        enough = math.ceil(least * 100) / 100  # the least, rounded up to what a user types
        raise AttnflowError(f"budget {asked:g} is below what ablated-flow-budgeted spends here at least: about "
                            f"{enough:g} forward passes (the capture pass, the estimate's forward and backward "
                            f"pass); give --budget {enough:g} or more")
    # several rows (every target of a report, a generation), or the default budget: the estimate's price is the
    # least it can spend; by span, the default buys a pass of exact re-runs beyond it: on SmolLM2 the capture and a
    # long input's checkpointed estimate take 4.24 passes at 1,024 tokens, 4.86 at 8,192 and 5.09 at 16,384, and the
    # span the target reads (a key sentence far back) would otherwise go unrun (interventions.budgeted)
    groups = _groups(context)
    budget = max(asked, least + (RERUN if groups is not None and is_default("budget", asked) else 0.0))
    found = budgeted_ablated_flow(context.model, context.input_ids, sorted(rows), budget=budget - spent,
                                  spans=[[j] for j in range(n)] if groups is None else groups,
                                  attended=groups is not None,
                                  readout=options["readout"], tokens=options["tokens"], foils=options["foils"],
                                  batch_size=options["batch_size"], progress=options["progress"])
    if context.notes is not None:  # per source (per span with spans): whether its score is exact
        context.notes["ablated-flow-budgeted"] = {
            "exact": [bool(e) for e in found.exact], "cost": spent + float(found.cost), "budget": budget,
            **({"asked": asked} if budget != asked else {}), "unit": UNIT, "plan": found.plan, "tail": found.tail,
            "attended": found.attended}
    found.scores = spread(found.scores, found.spans, n)
    return _place(found, rows, None)
