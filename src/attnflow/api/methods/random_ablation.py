"""Random ablation: a chance baseline for ablated flow.

Each source position ``j`` a target ``t`` sees (``j <= t``) gets the ablated-flow score (value
zeroing in every layer, :mod:`attnflow.api.methods.ablation`) of the source ``pi_t(j)``, where
``pi_t`` is a permutation of ``0..t`` drawn with a fixed seed: the same numbers as ablated flow,
assigned to no token in particular. A method that agrees with leave-one-out no better than this
does no better than chance. ``(1, rows, n)``: no layers axis, like ablated flow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.api.methods.ablation import ablated_flow

SEED = 0


def random_ablation(context: Any) -> np.ndarray:
    scores = ablated_flow(context)
    rows = list(range(scores.shape[-1])) if context.rows is None else [int(r) for r in context.rows]
    rng = np.random.default_rng(SEED)
    out = np.zeros_like(scores)
    for i, t in enumerate(rows):
        out[:, i, :t + 1] = scores[:, i, rng.permutation(t + 1)]
    return out
