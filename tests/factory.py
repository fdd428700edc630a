"""Small synthetic results for view and report tests (no model)."""

from __future__ import annotations

import numpy as np

from attnflow.results import Attribution, Block


def text_result(tokens: list[str], layers: int = 2, target: int = 0, methods=("raw", "rollout", "flow"),
                seed: int = 0, **fields) -> Attribution:
    """One target's random stochastic rows per method (every layer), like ``attnflow.explain``."""
    rng = np.random.default_rng(seed)
    n = len(tokens)
    blocks = {m: Block.rows(rng.dirichlet(np.ones(n), size=(1, layers)), [target]) for m in methods}
    return Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(n)), blocks=blocks,
                       n_layers=layers, target=target, method="rollout" if "rollout" in methods else methods[0],
                       **fields)
