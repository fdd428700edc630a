"""The reference attention-flow solver: networkx, one max-flow per (node, input token) pair.

This keeps the semantics of the paper's code (Abnar & Zuidema 2020): the layered attention graph
has a node per (layer, position), layer 0 being the input tokens; node ``(l, q)`` has an edge to
every ``(l-1, k)`` with capacity ``A_l[q, k]`` (the residual-augmented, head-fused attention). The
flow value of input token ``j`` for ``(l, q)`` is the maximum flow from ``(l, q)`` to ``(0, j)``,
computed with Edmonds-Karp, ``O(V E^2)`` per pair.

It is slow on purpose: every faster solver in ``attnflow.core.flow`` is tested against it.
"""

from __future__ import annotations

from typing import Callable

import networkx as nx
import numpy as np


def layered_graph(a: np.ndarray, top: int) -> nx.DiGraph:
    """The attention graph up to node layer ``top`` (1-based); ``a``: ``(layers, n, n)``, row = query."""
    n = a.shape[-1]
    g = nx.DiGraph()
    g.add_nodes_from((layer, k) for layer in range(top + 1) for k in range(n))
    for layer in range(1, top + 1):
        for q in range(n):
            for k in range(n):
                capacity = float(a[layer - 1, q, k])
                if capacity > 0.0:
                    g.add_edge((layer, q), (layer - 1, k), capacity=capacity)
    return g


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Unnormalised flow values ``(len(layers), len(positions), n)``.

    ``a``: ``(L, n, n)`` augmented attention (float32 or float64); ``layers``: 0-based indices into ``a`` (entry
    ``i`` is node layer ``i + 1``); ``positions``: query positions. ``progress(k)`` is called after
    each finished row with the number of rows finished by that call. ``cancel`` (``(1,)`` bool):
    when ``cancel[0]`` is set (from another thread) the solver returns early, leaving the rest 0.
    """
    n = a.shape[-1]
    out = np.zeros((len(layers), len(positions), n))
    for li, layer in enumerate(layers):
        g = layered_graph(a, int(layer) + 1)
        for pi, q in enumerate(positions):
            source = (int(layer) + 1, int(q))
            for j in range(n):
                if cancel is not None and cancel[0]:
                    return out
                out[li, pi, j] = nx.maximum_flow_value(
                    g, source, (0, j), capacity="capacity", flow_func=nx.algorithms.flow.edmonds_karp
                )
            if progress is not None:
                progress(1)
    return out
