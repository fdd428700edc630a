"""Ablated flow by span: zero the value vectors of every token of a span at once, one run per span.

A span is any set of source positions (a word, a sentence, a passage; ``attnflow.units.segments``
finds words and sentences from the tokenizer's offsets). Its score is what the explained readout at a
target loses when all of the span's tokens have their values zeroed together (every layer at once,
or one layer at a time), "clean minus edited" as in ``attnflow.interventions.ablation``, whose edit
hooks, clean prefix cache and readouts this engine shares: a 2,000-token document of 60 sentences
costs 60 runs, not 2,000. A single-position span is ablated flow's own score for that token, so the
same engine re-scores a chosen subset of tokens exactly (``attnflow.interventions.budgeted``), and the
tokens inside the top spans on request (``refine_top_spans``).

Runs are grouped by where they start: a span whose first position is ``s`` leaves ``[0, s)`` as it
was, so its run starts from the clean key/value cache of ``[0, s)``; spans are sorted by ``s`` and a
batch holds spans whose starts are close (the batch runs from its first span's start, and a span that
starts much later would pay for positions it cannot change). ``SpanAblation.steps`` counts the token
positions run through the model (edited runs, and clean ones for the prefix and the readouts), the
cost in units of one pass over the explained sequence when divided by its length.

API::

    ablate_spans(model, input_ids, spans, targets=None, *, layers="all", readout="logit", tokens=None,
                 foils=None, batch_size=16, progress=None, cache=None, clean_logits=None) -> SpanAblation
    SpanAblation.scores  # (len(targets), 1 or layers, len(spans)); .spans, .steps
    refine_top_spans(model, input_ids, found, top=1, **options) -> SpanAblation  # token by token inside
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnflow.interventions.ablation import (BATCH, LAYER_MODES, Ablation, Edit, Prefix, Progress, cache_keyword,
                                             checked_inputs, edited, editing, readout_values, rows_per_call,
                                             running, value_projections)
from attnflow.interventions.shared_prefix import sharing
from attnflow.capture.streaming import architecture_fixes
from attnflow.errors import AttnflowError
from attnflow.hf.weights import input_device


SMALL_CALL = 256  # positions (rows x length) below which a call costs about its fixed overhead


@dataclass
class SpanAblation(Ablation):
    """An ``Ablation`` whose last axis is ``spans`` (each a sorted list
    of positions); ``steps``: token positions run through the model."""

    spans: list[list[int]] = field(default_factory=list)
    steps: int = 0


def checked_spans(spans: Any, n: int) -> list[list[int]]:
    """Spans as sorted lists of distinct positions in ``[0, n)``; a span may be an int (one token)."""
    out = []
    for span in spans:
        positions = sorted({int(p) for p in np.atleast_1d(np.asarray(span, dtype=np.int64)).tolist()})
        if not positions or positions[0] < 0 or positions[-1] >= n:
            raise AttnflowError(f"every span must be a non-empty set of positions in [0, {n}); got {span!r}")
        out.append(positions)
    if not out:
        raise AttnflowError("expected at least one span")
    return out


def batches(starts: Sequence[int], last: int, batch_size: int) -> list[list[int]]:
    """Indices into ``starts`` grouped into runs: sorted by start, at most ``batch_size`` per run and at
    most ``attnflow.interventions.ablation.CALL_POSITIONS`` positions (rows x length) unless alone, and a
    span joins a run only if its start is at most ``max(size, length // 8)`` after the run's first
    start (``size``: spans in the run so far; ``length``: the positions the run covers), or if the run
    stays within ``SMALL_CALL`` positions. Consecutive tokens share runs as in ablated flow,
    far-apart spans of a long input pay at most about an eighth for the positions before them that they
    cannot change, and a short input's spans share calls (a call that small costs its overhead, about
    what one row costs, on every machine measured here)."""
    order = sorted(range(len(starts)), key=lambda k: starts[k])
    groups: list[list[int]] = []
    for k in order:
        if groups and len(groups[-1]) < rows_per_call(batch_size, last + 1 - starts[groups[-1][0]]):
            j0 = starts[groups[-1][0]]
            length = last + 1 - j0
            if starts[k] - j0 <= max(len(groups[-1]), length // 8) or (len(groups[-1]) + 1) * length <= SMALL_CALL:
                groups[-1].append(k)
                continue
        groups.append([k])
    return groups


def ablate_spans(model: Any, input_ids: Any, spans: Any, targets: Any = None, *, layers: str = "all",
                 readout: str = "logit", tokens: Any = None, foils: Any = None, batch_size: int = BATCH,
                 progress: Progress | None = None, cache: Any = None, clean_logits: Any = None) -> SpanAblation:
    """Ablated flow of each span (see the module docstring).

    spans: a sequence of spans, each a position or a sequence of positions. targets, layers, readout,
    tokens, foils, batch_size, progress, cache, clean_logits: as
    ``attnflow.interventions.ablation.ablated_flow`` (``cache``: a clean key/value cache of ``input_ids``
    to crop prefixes from instead of running them; ``clean_logits``: the clean logits at the sorted
    targets, so that no clean pass is run for the readouts).

    Returns a ``SpanAblation`` with ``scores (len(targets), 1 or layers, len(spans))``; a span
    that starts after a target scores 0 for it.
    """
    ids, targets = checked_inputs(model, input_ids, targets, readout, tokens, foils, batch_size)
    if layers not in LAYER_MODES:
        raise AttnflowError(f"layers must be 'all' (every layer at once) or 'each' (one at a time); got {layers!r}")
    spans = checked_spans(spans, ids.numel())
    variants = [-1] if layers == "all" else list(range(len(value_projections(model))))
    last = max(targets)
    device = input_device(model)
    index = {t: i for i, t in enumerate(targets)}
    scores = np.zeros((len(targets), len(variants), len(spans)))
    # elements: (span, variant), started at the span's first position; spans after the last target skipped
    elements = [(s, v) for s in range(len(spans)) if spans[s][0] <= last for v in variants]
    steps = 0
    with torch.no_grad(), architecture_fixes(model), editing(model, values=True), sharing(model) as shared:
        prefix = Prefix(model, ids, targets, given=cache)
        if clean_logits is None:
            prefix.grow(last + 1)
            steps += last + 1
            clean_logits = torch.stack([prefix.logits[t] for t in targets])
            # the grown cache holds every position: prefixes are cropped from it (where layers allow cropping)
            prefix = Prefix(model, ids, targets, given=cache if cache is not None else prefix.cache)
        clean_logits = torch.as_tensor(clean_logits)
        explained = (clean_logits.argmax(-1).cpu() if tokens is None
                     else torch.as_tensor(np.atleast_1d(tokens)).long())
        foil_ids = None if foils is None else torch.as_tensor(np.atleast_1d(foils)).long()
        clean = readout_values(clean_logits.cpu(), explained, foil_ids, readout)
        done = 0
        for group in batches([spans[s][0] for s, _ in elements], last, batch_size):
            chunk = [elements[k] for k in group]
            j0 = spans[chunk[0][0]][0]
            before = prefix.built
            cache_in = prefix.start(len(chunk), j0, shared)  # before the edit is active: it may run the prefix
            steps += prefix.built - before
            zero: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            for key in sorted({v for _, v in chunk}):
                rows = [b for b, (_, v) in enumerate(chunk) for _ in spans[chunk[b][0]] if v == key]
                positions = [p - j0 for s, v in chunk if v == key for p in spans[s]]
                zero[key] = (torch.tensor(rows), torch.tensor(positions))
            wanted = [t for t in targets if t >= j0]
            keep = last + 1 - wanted[0]
            batch_ids = ids[j0:last + 1][None].expand(len(chunk), -1)
            with edited(Edit(zero=zero)), running(shared, cache_in):
                out = model(input_ids=batch_ids.to(device), use_cache=True, logits_to_keep=keep,
                            **{cache_keyword(model, required=True): cache_in})
            steps += batch_ids.numel()
            logits = out.logits.detach().cpu()
            for b, (s, v) in enumerate(chunk):
                for t in wanted:
                    if t < spans[s][0]:
                        continue  # the target cannot see the span: no change
                    i = index[t]
                    changed = readout_values(logits[b, t - last - 1 + keep], explained[i],
                                             None if foil_ids is None else foil_ids[i], readout)
                    scores[i, max(v, 0), s] = float(clean[i] - changed)
            done += len(chunk)
            if progress is not None:
                progress(done, len(elements))
    return SpanAblation(scores=scores, targets=targets, tokens=[int(c) for c in explained.tolist()],
                        clean=clean.numpy(), readout=readout, method="ablated-flow", spans=spans, steps=steps)


def refine_top_spans(model: Any, input_ids: Any, found: SpanAblation, top: int = 1, **options: Any) -> SpanAblation:
    """Token by token inside the ``top`` highest-scoring spans of ``found`` (ranked by the best score
    over its targets, every layer at once or the layers summed): ablated flow of each of their tokens,
    from the same targets and explained tokens. ``options`` as ``ablate_spans`` (``readout`` and
    ``foils`` default to ``found``'s). Returns a ``SpanAblation`` over those tokens alone."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise AttnflowError(f"top must be a positive number of spans; got {top!r}")
    best = np.argsort(-found.scores.sum(1).max(0), kind="stable")[:top]
    tokens = sorted({p for s in best for p in found.spans[s]})
    options.setdefault("readout", found.readout)
    return ablate_spans(model, input_ids, [[p] for p in tokens], found.targets, tokens=found.tokens, **options)
