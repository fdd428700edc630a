"""Which edges of the attention graph carry one node's rollout or flow (for drawing them).

The attention graph (Abnar & Zuidema 2020, section 3) has a node per (layer, position), node layer
0 being the input tokens, and an edge ``(l, i) -> (l-1, k)`` of weight ``A_l[i, k]``, the
residual-augmented head-fused attention (``attnflow.core.fusion.augmented``).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from attnflow.core.flow.oracle import layered_graph
from attnflow.core.fusion import augmented
from attnflow.core.inputs import as_stack
from attnflow.errors import AttnflowError


def attention_graph(attentions: Any, *, residual: float = 0.5, head_fusion: str = "mean") -> np.ndarray:
    """The edge weights ``(layers, n, n)`` of one input's attention graph, row = query."""
    stack = as_stack(attentions, None)
    if stack.shape[0] != 1:
        raise AttnflowError("the attention graph is drawn for one input; pass (layers, heads, n, n)")
    return augmented(stack.values, stack.mask, residual=residual, head_fusion=head_fusion)[0].double().numpy()


def _node_layer(a: np.ndarray, layer: int, position: int) -> tuple[int, int]:
    n_layers, n = a.shape[0], a.shape[-1]
    if not -n_layers <= layer <= n_layers or layer == 0 or not -n <= position < n:
        raise AttnflowError(f"node must be (layer in 1..{n_layers} or -1, position in [0, {n})); "
                            f"got ({layer}, {position})")
    return layer % (n_layers + 1) if layer > 0 else n_layers + 1 + layer, position % n


def rollout_edges(a: np.ndarray, layer: int, position: int) -> np.ndarray:
    """``(layers, n, n)``: the share of node ``(layer, position)``'s rollout carried by each edge.

    Going down from the node, ``up`` is the mass reaching each node of the current layer
    (``e_position`` at the start); edge ``(l, i) -> (l-1, k)`` carries ``up[i] * A_l[i, k]``. Each
    layer's edges carry 1 in total, and what reaches the inputs is the rollout row
    ``(A_layer ... A_1)[position]``. Layers above the node carry 0.
    """
    layer, position = _node_layer(a, layer, position)
    mass = np.zeros_like(a, dtype=float)
    up = np.zeros(a.shape[-1])
    up[position] = 1.0
    for l in range(layer, 0, -1):
        mass[l - 1] = up[:, None] * a[l - 1]
        up = mass[l - 1].sum(axis=0)
    return mass


def flow_edges(a: np.ndarray, layer: int, position: int, token: int) -> tuple[float, np.ndarray]:
    """``(value, (layers, n, n))``: one maximum flow from node ``(layer, position)`` to input token
    ``token`` (Edmonds-Karp, as the reference solver) and the flow on each edge. Max-flows are not
    unique: another maximum flow of the same value may route differently."""
    layer, position = _node_layer(a, layer, position)
    if not -a.shape[-1] <= token < a.shape[-1]:
        raise AttnflowError(f"token must be an input position in [0, {a.shape[-1]}); got {token}")
    graph = layered_graph(np.asarray(a, dtype=float), layer)
    value, flows = nx.maximum_flow(graph, (layer, position), (0, token % a.shape[-1]), capacity="capacity",
                                   flow_func=nx.algorithms.flow.edmonds_karp)
    out = np.zeros_like(a, dtype=float)
    for (l, i), targets in flows.items():
        for (_, k), f in targets.items():
            if f > 0:
                out[l - 1, i, k] = f
    return float(value), out
