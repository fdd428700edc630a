"""A demonstration method (added and removed again to show what a new method costs): every source
gets the same share, 1/n, at every layer. A baseline no method should lose to."""

from __future__ import annotations

import numpy as np

from attnflow.config.registry import Context


def uniform(context: Context) -> np.ndarray:
    """``(layers, rows, n)`` of ``1/n``."""
    layers, n = context.attentions.attentions.shape[0], context.attentions.attentions.shape[-1]
    rows = len(context.rows) if context.rows is not None else n
    chosen = layers if context.layers is None else len(np.atleast_1d(context.layers))
    return np.full((chosen, rows, n), 1.0 / n)
