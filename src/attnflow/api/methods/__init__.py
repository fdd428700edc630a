"""The functions behind the method registry (:mod:`attnflow.config.registry`): each takes a
:class:`~attnflow.config.registry.Context` and returns ``(layers, targets, sources)`` scores. See the
registry's docstring for how to add one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.config.registry import Method
from attnflow.results import Block


def as_block(record: Method, values: Any, targets: Sequence[int], n_layers: int) -> Block:
    """A method function's ``(layers, len(targets), sources)`` scores as a result :class:`Block`; a
    method without a layers axis (``record.layers`` False) returns one "layer", kept as the top one."""
    values = np.asarray(values, dtype=float).transpose(1, 0, 2)
    layers = tuple(range(n_layers)) if record.layers else (n_layers - 1,)
    return Block(values, tuple(int(t) for t in targets), layers)
