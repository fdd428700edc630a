"""Exact where it is cheap, estimated where it is not, refined where it matters: ablated flow within a
stated cost budget.

Costs are counted in *forward passes of the input*: the multiply-accumulates of what is run, counted
from the model's shapes (``attnflow.interventions.compute``), over those of one forward pass of the whole
input computing the last position's logits (as the capture pass does), so one clean forward pass is 1 (on SDPA, where these counts and the
time agree, also in time). The plan:

- **exact** ablated flow (``attnflow.interventions.span_ablation``, by token or by span) costs one clean
  pass plus the runs as ``attnflow.interventions.span_ablation.batches`` groups them (a batch's rows all
  run from its first span's start to the last target: the padding is counted), plus, on models whose
  key/value cache cannot be cropped (sliding-window layers), the clean prefix rebuilt up to the last
  batch's start. When that fits the budget, every span is scored exactly.
- otherwise the **one-pass estimate** (``attnflow.interventions.attribution_patching``; one forward pass
  and one backward pass per target, and on a long, checkpointed input each layer's forward again per
  backward pass) scores every span, and the rest of the budget re-scores spans exactly, in two phases:

  1. **the tail**: a share ``tail`` of what is left (default ``TAIL``) goes to the latest spans,
     latest first, while their runs fit. The first order is weak there: on SmolLM2's 168-token
     document question it agrees with exact ablated flow at Spearman +0.72 to +0.79 on the middle
     quarters of the prompt and +0.24 on the last (the question, the answer's first words), where a
     zeroed token reaches the target through few positions, strongly and non-linearly (one token's
     exact score is -2.7, its estimate -0.02). Those spans are also the cheapest to run exactly: a
     span starting at ``s`` costs ``(m - s) / m``, so the last ``L`` tokens cost about
     ``L^2 / (2 m)`` passes. The share 0.75 was chosen on three prompts of 168-253 tokens (0, 0.25,
     0.5, 0.75, 1 compared at budgets 3, 5 and 8) and checked on three others;
     ``benchmarks/estimators.py`` and ``docs/one-pass.md`` have the numbers and the estimators tried.
  2. **the top**: in rounds, the highest-scoring spans not yet exact (by the current scores, so a
     span that an exact score pushes down makes room for the next) are re-run exactly while their
     runs fit what is left; a span whose run no longer fits is passed over for cheaper ones after it.

     With ``attended`` (the span methods, ``--by sentence`` / ``--by spans``), each round takes spans
     alternately from that order and from the order of the **target's attention**: a span's largest
     share of one head's attention from a target, in any layer, the input's first position left out
     (a head with nothing to read rests its attention there, the "attention sink" of Xiao et al. 2024,
     "Efficient Streaming Language Models with Attention Sinks"). The estimate pass reads that attention
     from the queries and keys its kernel receives (no ``(heads, n, n)`` formed). Why: where the target
     retrieves a span (a password stated once in an 8,192-token document), one head reads that span with
     most of its attention, the span's exact effect is the largest of those run, and the first order
     can miss it entirely (an estimate of -0.07 where the exact effect is +15.3; rank 236 of 250
     sentences), so the estimate's top never reaches it. The attention only chooses what is re-run: the
     scores stay the exact runs' and the estimate's.

  Re-runs start from the estimate pass's own clean cache and logits, so they cost only their edited
  runs. How many get re-scored follows from the budget and from where the spans start. On a long,
  checkpointed pass the cache is filled from the keys and values its attention kernels receive (the
  model's own would be written twice by the recomputed layers); before that, such a pass kept none and
  every round of re-runs first rebuilt the clean prefix (about a pass), so from 1,024 tokens a budget of 5
  re-scored nothing on SmolLM2. The cache is kept only where the budget left after the estimate pays for
  the cheapest re-run (memory: 377 MB at 8,192 tokens on SmolLM2 in float32).

What is counted is what runs: each re-scoring's batches are priced before they are chosen as they
will be run (each batch with a call's fixed price, ``attnflow.interventions.compute.CALL_POSITIONS``:
the short re-runs of the latest spans cost far more than their multiply-accumulates), and added as they
run. What the counts leave out: element-wise work (norms, softmax, the
position encoding: a few percent), and, on models whose rows cannot share the clean prefix
(``attnflow.interventions.shared_prefix.usable``), the copies of the clean key/value cache that every row
of a batch starts from (memory traffic, not multiply-accumulates); ``benchmarks/budget.py`` measures
the whole call's time against a forward pass.

The result says per span which was done (``exact``) and what was planned (``cost``, in passes).
With spans, a span's estimate is the sum of its tokens' (the first order is additive).

API::

    budgeted_ablated_flow(model, input_ids, targets=None, *, budget=5.0, spans=None, tail=0.75,
                          attended=False, readout="logit", tokens=None, foils=None, batch_size=16,
                          progress=None) -> Budgeted
    Budgeted.scores (len(targets), 1, len(spans)); .exact (len(spans),) bool; .cost (forward passes); .plan
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.interventions.ablation import BATCH, Progress, checked_inputs
from attnflow.hf.architectures import layer_windows
from attnflow.interventions.attribution_patching import attribution_patching, long_input
from attnflow.interventions.efficient_attention import efficient_attention
from attnflow.interventions.compute import Shapes
from attnflow.interventions.span_ablation import SpanAblation, ablate_spans, batches, checked_spans
from attnflow.errors import AttnflowError

BUDGET = 5.0
TAIL = 0.75  # share of the refinement budget spent on the latest spans first


@dataclass
class Budgeted(SpanAblation):
    """Scores per span, ``exact[s]`` whether span ``s`` was scored exactly (else estimated), ``cost``
    in forward passes of the input (see the module docstring), ``plan``: ``"exact"`` or ``"estimate+refine"``, ``tail``: the
    share of the refinement budget given to the latest spans first, ``attended``: whether the top phase also
    took spans by the target's attention."""

    exact: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    cost: float = 0.0
    budget: float = BUDGET
    plan: str = "exact"
    tail: float = TAIL
    attended: bool = False


def runs_compute(shapes: Shapes, starts: list[int], targets: list[int], batch_size: int, rebuild: bool) -> float:
    """MACs of the exact runs of spans starting at ``starts`` as ``ablate_spans`` runs them: in the
    batches of ``attnflow.interventions.span_ablation.batches`` (a batch's rows all run from its first
    start: padding counted), each with its logits and a call's fixed price; ``rebuild``: the clean
    prefix is run up to each batch's start (no clean cache to crop)."""
    last, total = max(targets), 0.0
    groups = batches(starts, last, batch_size)
    for group in groups:
        j0 = starts[group[0]]
        keep = last + 1 - min(t for t in targets if t >= j0)
        total += shapes.run(j0, last + 1, rows=len(group), logits=keep) + shapes.call
    if rebuild and starts:
        total += shapes.run(0, max(starts[g[0]] for g in groups), logits=len(groups))
    return total


def estimate_compute(shapes: Shapes, targets: list[int]) -> float:
    """MACs of the one-pass estimate over ``[0, last target]``: its forward pass (logits from the first
    target on), one backward pass per target, and on a long input (checkpointed, on SDPA) each layer's
    forward pass again in every backward pass."""
    m = max(targets) + 1
    keep = m - min(targets)
    long = long_input(m)
    forward = shapes.run(0, m, logits=keep)
    again = shapes.run(0, m) if long else 0.0  # the layers, not the logits
    # a call's fixed price once: the pass and its backward passes run in one call of the model's graph
    return forward + len(targets) * (shapes.backward(m, sdpa=long, logits=keep) + again) + shapes.call


def attention_shares(attention: np.ndarray, spans: list[list[int]]) -> np.ndarray:
    """Per span, its largest share of one head's attention from a target in any layer: ``attention``
    ``(targets, layers, heads, m)`` summed over the span's positions (those below ``m``), the input's
    first position left out (the attention sink: see the module docstring)."""
    weights = attention.reshape(-1, attention.shape[-1]).astype(np.float64, copy=True)
    weights[:, 0] = 0.0
    m = weights.shape[1]
    return np.array([weights[:, [p for p in span if p < m]].sum(1).max() if span[0] < m else 0.0 for span in spans])


def alternating(first: Any, second: Any) -> list[int]:
    """The two orders merged, one from each in turn (``first``'s first), each index once."""
    out: list[int] = []
    seen: set[int] = set()
    for pair in zip(first, second):
        for s in pair:
            if int(s) not in seen:
                seen.add(int(s))
                out.append(int(s))
    return out


def _croppable(model: Any) -> bool:
    return not any(w is not None for w in layer_windows(model))


def budgeted_ablated_flow(model: Any, input_ids: Any, targets: Any = None, *, budget: float = BUDGET,
                          spans: Any = None, tail: float = TAIL, attended: bool = False, readout: str = "logit",
                          tokens: Any = None, foils: Any = None, batch_size: int = BATCH,
                          progress: Progress | None = None) -> Budgeted:
    """Ablated flow within ``budget`` passes (see the module docstring).

    spans: None (every token up to the last target is a span) or a sequence of spans (positions).
    budget: the most forward passes of the input to spend, at least the estimate's price (about 2 on a
        short input for one target, more for more targets and on a long, checkpointed input).
    tail: the share of the budget left after the estimate that goes to the latest spans first, in
        ``[0, 1]`` (0: the estimate's top spans only, as before the tail phase existed).
    attended: the top phase also takes spans by the target's attention, alternately with the scores'
        order (see the module docstring).
    Other arguments as ``attnflow.interventions.span_ablation.ablate_spans``.
    """
    ids, sorted_targets = checked_inputs(model, input_ids, targets, readout, tokens, foils, batch_size)
    last = max(sorted_targets)
    m = last + 1
    spans = checked_spans(range(m) if spans is None else spans, ids.numel())
    shapes = Shapes.of(model)
    unit = shapes.forward(ids.numel())  # one forward pass of the input, the last logits: the budget's unit
    estimate_cost = estimate_compute(shapes, sorted_targets) / unit
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget >= estimate_cost * (1 - 1e-9):
        raise AttnflowError(f"budget must be at least {estimate_cost:.2f} forward passes here (the estimate's "
                            f"forward pass and one backward pass per target); got {budget!r}")
    if isinstance(tail, bool) or not isinstance(tail, (int, float)) or not 0.0 <= tail <= 1.0:
        raise AttnflowError(f"tail must be a share of the refinement budget in [0, 1]; got {tail!r}")
    starts = [s[0] for s in spans if s[0] <= last]
    croppable = _croppable(model)
    # the exact plan: one clean pass (its logits from the first target on), then the runs, their prefixes
    # cropped from the clean pass's cache (or rebuilt where layers cannot be cropped)
    exact_cost = (shapes.run(0, m, logits=m - min(sorted_targets))
                  + runs_compute(shapes, starts, sorted_targets, batch_size, rebuild=not croppable)) / unit
    common = dict(readout=readout, tokens=tokens, foils=foils, batch_size=batch_size)
    if exact_cost <= budget:
        found = ablate_spans(model, ids, spans, sorted_targets, progress=progress, **common)
        return Budgeted(**vars(found), exact=np.ones(len(spans), dtype=bool), cost=exact_cost, budget=budget,
                        plan="exact")
    # the clean cache is kept where the budget left after the estimate pays for a re-run at all (the latest span's,
    # the cheapest): at 8,192 tokens on SmolLM2 it holds 377 MB, and at the default budget by token from about
    # 16,000 tokens the estimate takes all of it; a sliding window's cache cannot be cropped: prefixes are rebuilt
    cheapest = runs_compute(shapes, [max(starts)], sorted_targets, batch_size, rebuild=False) / unit
    keep = croppable and budget - estimate_cost >= cheapest
    est = attribution_patching(model, ids, sorted_targets, readout=readout, tokens=tokens, foils=foils,
                               keep_cache=keep, target_attention=bool(attended))
    rebuild = est.cache is None
    per_token = est.scores[:, 0]  # (targets, n)
    scores = np.stack([[per_token[i, s].sum() for s in spans] for i in range(len(sorted_targets))])[:, None]
    exact = np.zeros(len(spans), dtype=bool)
    spent = estimate_cost * unit  # MACs: the estimate, then each batch of exact runs as it is run
    run = 0  # token positions run
    visible = np.array([s[0] <= last for s in spans])
    clean_logits, explained = est.logits, est.tokens

    def compute(chosen: list[int]) -> float:
        return runs_compute(shapes, [spans[k][0] for k in chosen], sorted_targets, batch_size, rebuild)

    def rescore(chosen: list[int]) -> None:
        nonlocal spent, run
        # a long input's runs on SDPA too (where it is eager's function): no (rows, heads, positions, n) scores
        with efficient_attention(model, long_input(m)):
            found = ablate_spans(model, ids, [spans[k] for k in chosen], sorted_targets, readout=readout,
                                 tokens=explained, foils=foils, batch_size=batch_size, cache=est.cache,
                                 clean_logits=clean_logits)
        spent += compute(chosen)
        run += found.steps
        scores[:, :, chosen] = found.scores
        exact[chosen] = True
        if progress is not None:
            progress(int(exact.sum()), len(spans))

    def fitting(order: Any, limit: float, stop: int | None, skip: bool) -> list[int]:
        """Spans of ``order`` not yet exact, in that order, while their exact runs (batched as they will
        run) fit ``limit`` MACs; ``skip``: pass over a span that does not fit and go on to later, cheaper
        ones, else stop at it."""
        chosen: list[int] = []
        for s in order:
            if exact[s] or not visible[s]:
                continue
            trial = chosen + [int(s)]
            if spent + compute(trial) > limit:
                if skip:
                    continue
                break
            chosen = trial
            if stop is not None and len(chosen) == stop:
                break
        return chosen

    # 1. the tail: the latest spans, latest first, within `tail` of what the estimate left
    latest = sorted(range(len(spans)), key=lambda k: (-spans[k][0], k))
    chosen = fitting(latest, spent + tail * (budget * unit - spent), None, skip=False)
    if chosen:
        rescore(chosen)
    # 2. the top: rounds of the highest current scores (alternating with the target's attention), within the
    # whole budget
    read = None if est.target_attention is None else np.argsort(-attention_shares(est.target_attention, spans),
                                                                kind="stable")
    while True:
        order = np.argsort(-scores[:, 0].max(0), kind="stable")
        chosen = fitting(order if read is None else alternating(read, order), budget * unit, batch_size, skip=True)
        if not chosen:
            break
        rescore(chosen)
    exact |= ~visible  # a span after every target scores 0 exactly
    return Budgeted(scores=scores, targets=sorted_targets, tokens=list(explained), clean=est.clean, readout=readout,
                    method="ablated-flow", spans=spans, steps=int(run), exact=exact, cost=spent / unit,
                    budget=budget, plan="estimate+refine", tail=float(tail),
                    attended=read is not None)
