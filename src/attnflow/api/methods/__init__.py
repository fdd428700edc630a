"""The functions behind the method registry (:mod:`attnflow.config.registry`): each takes a
:class:`~attnflow.config.registry.Context` and returns ``(layers, targets, sources)`` scores. See the
registry's docstring for how to add one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.config.registry import Context, Method
from attnflow.results import Block


def as_block(record: Method, values: Any, targets: Sequence[int], n_layers: int) -> Block:
    """A method function's ``(layers, len(targets), sources)`` scores as a result :class:`Block`; a
    method without a layers axis (``record.layers`` False) returns one "layer", kept as the top one."""
    values = np.asarray(values, dtype=float).transpose(1, 0, 2)
    layers = tuple(range(n_layers)) if record.layers else (n_layers - 1,)
    return Block(values, tuple(int(t) for t in targets), layers)


def run_method(record: Method, context: Context, targets: Sequence[int] | None = None) -> Block:
    """The one step from a method to a result's :class:`Block`: ``record``'s function on ``context``
    (rows ``context.rows``, every layer or, without a layers axis, the top one of
    ``context.n_layers``), stored under ``targets`` (default: the rows themselves; a generation
    stores generated token ``i`` as target ``i``)."""
    rows = context.rows if targets is None else targets
    return as_block(record, record(context), rows, int(context.n_layers))
