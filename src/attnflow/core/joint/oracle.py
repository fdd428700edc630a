"""The reference joint-graph flow: networkx, one Edmonds-Karp max-flow per (decoder node, input) pair,
on the joint encoder-decoder graph built as such (not the layered embedding the fast path uses).

Nodes: ``("x", k, j)`` encoder layer ``k = 0..Le`` at source position ``j``; ``("y", l, u)`` decoder
layer ``l = 0..Ld`` at decoder position ``u``; layer 0 is the embeddings, which are the sinks. Edges
(capacities, see ``attnflow.core.joint``): ``("x", k, q) -> ("x", k-1, j)``: ``A^enc_k[q, j]``;
``("y", l, t) -> ("x", Le, j)``: ``(1 - r) C_l[t, j]``; ``("y", l, t) -> ("y", l-1, u)``: ``r A_l[t, u]``.

Slow on purpose (``O(V E^2)`` per pair): the test oracle for ``attnflow.core.joint.joint_flow``.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from attnflow.core.joint import JointGraph


def joint_graph(graph: JointGraph) -> nx.DiGraph:
    """The joint attention graph of ``graph``'s matrices as a networkx DiGraph with ``capacity`` edges."""
    enc = graph.encoder.numpy()
    cross = graph.cross.numpy()
    self_a = graph.self_attention.numpy()
    r, s, t = graph.residual, graph.n_source, graph.n_decoder
    le, ld = graph.n_encoder_layers, graph.n_decoder_layers
    g = nx.DiGraph()
    g.add_nodes_from(("x", k, j) for k in range(le + 1) for j in range(s))
    g.add_nodes_from(("y", layer, u) for layer in range(ld + 1) for u in range(t))

    def edge(a: tuple, b: tuple, capacity: float) -> None:
        if capacity > 0.0:
            g.add_edge(a, b, capacity=float(capacity))

    for k in range(1, le + 1):
        for q in range(s):
            for j in range(s):
                edge(("x", k, q), ("x", k - 1, j), enc[k - 1, q, j])
    for layer in range(1, ld + 1):
        for q in range(t):
            for j in range(s):
                edge(("y", layer, q), ("x", le, j), (1.0 - r) * cross[layer - 1, q, j])
            for u in range(t):
                edge(("y", layer, q), ("y", layer - 1, u), r * self_a[layer - 1, q, u])
    return g


def joint_flow_oracle(graph: JointGraph, layers: list[int], positions: list[int], normalize: bool = True) -> np.ndarray:
    """``(len(layers), len(positions), S + T)``: max-flow from decoder node ``(layers[i] + 1,
    positions[p])`` to each source embedding, then each decoder-input embedding."""
    g = joint_graph(graph)
    s, t = graph.n_source, graph.n_decoder
    sinks = [("x", 0, j) for j in range(s)] + [("y", 0, u) for u in range(t)]
    out = np.zeros((len(layers), len(positions), s + t))
    for i, layer in enumerate(layers):
        for p, q in enumerate(positions):
            source = ("y", int(layer) + 1, int(q))
            for j, sink in enumerate(sinks):
                out[i, p, j] = nx.maximum_flow_value(g, source, sink, capacity="capacity",
                                                     flow_func=nx.algorithms.flow.edmonds_karp)
    if normalize:
        sums = out.sum(axis=-1, keepdims=True)
        out = np.divide(out, sums, out=np.zeros_like(out), where=sums > 0)
    return out
