"""The functions behind the method registry (``attnflow.config.registry``): each takes a
``Context`` and returns ``(layers, targets, sources)`` scores. See the
registry's docstring for how to add one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.config.registry import FORWARD_BACKWARD, Context, Method
from attnflow.results import Block


def as_block(record: Method, values: Any, targets: Sequence[int], n_layers: int) -> Block:
    """A method function's ``(layers, len(targets), sources)`` scores as a result ``Block``; a
    method without a layers axis (``record.layers`` False) returns one "layer", kept as the top one."""
    values = np.asarray(values, dtype=float).transpose(1, 0, 2)
    layers = tuple(range(n_layers)) if record.layers else (n_layers - 1,)
    return Block(values, tuple(int(t) for t in targets), layers)


def run_method(record: Method, context: Context, targets: Sequence[int] | None = None) -> Block:
    """The one step from a method to a result's ``Block``: ``record``'s function on ``context``
    (rows ``context.rows``, every layer or, without a layers axis, the top one of
    ``context.n_layers``), stored under ``targets`` (default: the rows themselves; a generation
    stores generated token ``i`` as target ``i``)."""
    from attnflow.interventions.costs import fit_to_budget

    rows = context.rows if targets is None else targets
    context = fit_to_budget(record, context)  # a model-based method: its estimate, memory budget and batch size
    # one pass and its backward, with no steps to count inside: progress says when it starts and ends (a
    # method with one backward pass per row counts its passes itself)
    staged = (record.cost == FORWARD_BACKWARD and not record.backward_per_row and context.progress is not None
              and context.model is not None)
    if staged:
        context.progress(0, 2)
    values = record(context)
    if staged:
        context.progress(2, 2)
    return as_block(record, values, rows, int(context.n_layers))
