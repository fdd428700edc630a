"""Drawing the attention graph: node layers as rows of tokens, edges as lines whose width and
opacity grow with their weight, optionally with the paths that carry one node's rollout or flow.

Only the strongest edges are drawn (``edges_per_node`` per node, and nothing under ``min_weight``)
so that the picture stays readable; the figure's caption says how many were left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.config import registry
from attnflow.core.paths import flow_edges, rollout_edges
from attnflow.errors import AttnflowError
from attnflow.views.files import figure_format, pyplot, save_figure
from attnflow.views.labels import short, thinned

PATH_COLOUR = "#b45309"


def _strongest(weights: np.ndarray, per_node: int, min_weight: float) -> np.ndarray:
    """Boolean mask of the ``per_node`` strongest outgoing edges of every node with weight >= min_weight."""
    keep = np.zeros(weights.shape, dtype=bool)
    order = np.argsort(-weights, axis=-1, kind="stable")[..., :per_node]
    np.put_along_axis(keep, order, True, axis=-1)
    return keep & (weights >= min_weight) & (weights > 0)


def _segments(keep: np.ndarray) -> tuple[np.ndarray, list[tuple[tuple[int, int], tuple[int, int]]]]:
    idx = np.argwhere(keep)  # (layer-1, i, k): edge (layer, i) -> (layer-1, k)
    return idx, [((i, l + 1), (k, l)) for l, i, k in idx]


def graph_figure(a: Any, tokens: list[str], *, node: tuple[int, int] | None = None, method: str = "rollout",
                 token: int | None = None, edges_per_node: int = 3, min_weight: float = 0.05,
                 path_min_share: float = 0.02, title: str | None = None) -> Any:
    """a: ``(layers, n, n)`` edge weights of the residual-augmented graph (see
    ``attnflow.core.paths.attention_graph``), row = query. node: ``(layer, position)`` with
    layer 1..L (or -1 for the top) whose paths are drawn on top, for ``method`` "rollout" (every path,
    width = share of the node's rollout) or "flow" (one maximum flow to input ``token``, default the
    token with the largest rollout share)."""
    plt = pyplot()
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgb

    a = np.asarray(a, dtype=float)
    if a.ndim != 3 or a.shape[1:] != (len(tokens), len(tokens)):
        raise AttnflowError(f"the graph needs weights of shape (layers, {len(tokens)}, {len(tokens)}) for "
                            f"{len(tokens)} tokens; got {a.shape}")
    drawable = [m.name for m in registry.methods() if m.paths]
    if method not in drawable:
        raise AttnflowError(f"paths can be drawn for {' or '.join(map(repr, drawable))}; got {method!r}")
    n_layers, n = a.shape[0], a.shape[-1]
    fig, ax = plt.subplots(figsize=(float(np.clip(0.5 * n + 1.5, 5.0, 16.0)), 0.75 * (n_layers + 1) + 1.6),
                           constrained_layout=True)
    keep = _strongest(a, edges_per_node, min_weight)
    idx, segs = _segments(keep)
    weights = a[tuple(idx.T)] if len(idx) else np.zeros(0)
    base = "#8c959f" if node is not None else "#1d4ed8"
    colours = [(*to_rgb(base), float(0.15 + 0.75 * w)) for w in weights]
    ax.add_collection(LineCollection(segs, linewidths=0.3 + 3.0 * weights, colors=colours, zorder=1))
    caption = f"{int(keep.sum())} of {int((a > 0).sum())} edges drawn (per node the {edges_per_node} strongest, " \
              f"weight >= {min_weight:g})"
    if node is not None:
        layer = node[0] % (n_layers + 1) if node[0] > 0 else n_layers + 1 + node[0]
        where = f"layer {layer}, {short(tokens[node[1] % n])} @ {node[1] % n}"
        mass = rollout_edges(a, *node)
        label = f"paths of the rollout of ({where})"
        if registry.get(method).cost == registry.MAX_FLOW:
            # Default sink: the input with the largest rollout share other than the node's own token,
            # which the residual self-loops make trivially large.
            share = mass[0].sum(axis=0)
            share[node[1] % n] = -1.0 if n > 1 else share[node[1] % n]
            sink = int(np.argmax(share)) if token is None else int(token)
            value, mass = flow_edges(a, node[0], node[1], sink)
            label = f"a maximum flow from ({where}) to input {short(tokens[sink])} @ {sink}, value {value:.3f}"
        # Path edges carrying less than path_min_share of the busiest edge are left out: a maximum
        # flow spreads over hundreds of thin edges that would hide the main routes.
        path_keep = mass >= path_min_share * mass.max()
        pidx, psegs = _segments(path_keep)
        share = mass[tuple(pidx.T)] / mass.max()
        ax.add_collection(LineCollection(psegs, linewidths=0.6 + 4.5 * share, zorder=2,
                                         colors=[(*to_rgb(PATH_COLOUR), float(0.3 + 0.7 * s))
                                                 for s in share]))
        ax.scatter([node[1] % n], [layer], s=160, facecolor="none", edgecolor=PATH_COLOUR, linewidth=2, zorder=4)
        caption = f"{label}\n{caption}; path edges under {path_min_share:.0%} of the busiest left out"
    xs, ys = np.meshgrid(np.arange(n), np.arange(n_layers + 1))
    ax.scatter(xs.ravel(), ys.ravel(), s=18, color="#24292f", zorder=3)
    ticks = thinned(n, int(fig.get_figwidth() * 72 / 14))
    ax.set_xticks(ticks, [short(tokens[i]) for i in ticks], rotation=90, fontsize=8 if n <= 30 else 6)
    ax.set_yticks(range(n_layers + 1), ["input"] + [f"layer {l}" for l in range(1, n_layers + 1)], fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(-0.4, n_layers + 0.4)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or "attention graph (residual-augmented, heads averaged)", fontsize=10)
    ax.set_xlabel(caption, fontsize=8)
    return fig


def save_graph(a: Any, tokens: list[str], path: str, dpi: int = 150, **kwargs: Any) -> str:
    """Write ``graph_figure`` to ``path`` (PNG, SVG or PDF by extension), atomically."""
    figure_format(path)
    return save_figure(graph_figure(a, tokens, **kwargs), path, dpi=dpi)
