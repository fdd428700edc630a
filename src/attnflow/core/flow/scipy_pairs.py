"""The peer baseline: one ``scipy.sparse.csgraph.maximum_flow`` call per (node, input token) pair.

scipy's max-flow takes integer capacities, so capacities are scaled by ``2**24`` and rounded, as
peers do. Each capacity is then off by up to ``2**-25``, and a flow value by up to that times the
number of edges in its minimum cut, so results are close to, not equal to, the exact flow; use the
networkx oracle or the default engine for exact values. Kept as the speed baseline for
``benchmarks/flow.py``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

SCALE = 2**24


def _graph(a: np.ndarray, top: int) -> sp.csr_matrix:
    """Integer-capacity graph of node layers ``0..top``; node ``(l, k)`` has index ``l * n + k``."""
    n = a.shape[-1]
    rows, cols, caps = [], [], []
    for layer in range(1, top + 1):
        cap = np.rint(np.asarray(a[layer - 1], dtype=np.float64) * SCALE).astype(np.int64)
        q, k = np.nonzero(cap)
        rows.append(layer * n + q)
        cols.append((layer - 1) * n + k)
        caps.append(cap[q, k])
    size = (top + 1) * n
    return sp.csr_matrix(
        (np.concatenate(caps).astype(np.int32), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size)
    )


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as ``attnflow.core.flow.oracle.solve``."""
    n = a.shape[-1]
    out = np.zeros((len(layers), len(positions), n))
    for li, layer in enumerate(layers):
        top = int(layer) + 1
        g = _graph(a, top)
        for pi, q in enumerate(positions):
            for j in range(n):
                if cancel is not None and cancel[0]:
                    return out
                out[li, pi, j] = maximum_flow(g, top * n + int(q), j, method="dinic").flow_value / SCALE
            if progress is not None:
                progress(1)
    return out
