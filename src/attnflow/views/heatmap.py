"""Layers x tokens heatmaps (matplotlib), one panel per explanation: the paper's raw | rollout | flow
figure for one target position."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import FIGURE_FORMATS as FORMATS  # noqa: F401  (other views and the CLI import it)
from attnflow.views.files import figure_format, save_figure
from attnflow.views.labels import label_room, plain, short, thinned, token_fontsize

# Side by side up to this many tokens (the paper's layout); above it the panels are stacked so each
# gets the full page width and long inputs keep legible columns.
SIDE_BY_SIDE_MAX = 40


def _check(explanations: list[Any]) -> None:
    if not explanations:
        raise AttnflowError("a heatmap needs at least one explanation")
    first = explanations[0]
    for e in explanations:
        scores = np.asarray(e.scores)
        if scores.ndim != 2 or scores.shape[1] != len(first.tokens) or list(e.tokens) != list(first.tokens):
            raise AttnflowError("explanations in one figure must be of the same input, with scores (layers, tokens)")


def heatmap_figure(explanations: list[Any], title: str | None = None, layout: str = "auto") -> Any:
    """One panel per explanation: rows = layers 1..L (layer 1 at the bottom), columns = input tokens,
    each panel on its own colour scale (methods differ in range), the target column marked with a
    triangle. layout: ``"auto"``, ``"columns"`` (side by side) or ``"rows"`` (stacked)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    _check(explanations)
    if layout not in ("auto", "columns", "rows"):
        raise AttnflowError(f"layout must be 'auto', 'columns' or 'rows'; got {layout!r}")
    n, k = len(explanations[0].tokens), len(explanations)
    layers = int(np.asarray(explanations[0].scores).shape[0])
    side = layout == "columns" or (layout == "auto" and n <= SIDE_BY_SIDE_MAX)
    fontsize = token_fontsize(n)
    panel_w = float(np.clip(0.24 * n + 1.8, 4.0, 8.0)) if side else float(np.clip(0.06 * n + 5.0, 9.0, 18.0))
    panel_h = 0.22 * min(layers, 24) + 0.14 * max(len(short(t)) for t in explanations[0].tokens) * fontsize / 9 + 1.4
    figsize = (panel_w * k, panel_h) if side else (panel_w, panel_h * k)
    fig, axes = plt.subplots(1 if side else k, k if side else 1, figsize=figsize, squeeze=False,
                             constrained_layout=True)
    for ax, expl in zip(axes.ravel(), explanations):
        scores = np.asarray(expl.scores, dtype=float)
        image = ax.imshow(scores, aspect="auto", origin="lower", cmap="Blues", vmin=0,
                          interpolation="nearest")
        target = int(expl.target)
        ax.set_title(f"{expl.method}  (target: {short(expl.tokens[target])} @ {target})", fontsize=10)
        rows = thinned(layers, 16)
        ax.set_yticks(rows, [str(i + 1) for i in rows], fontsize=8)
        ax.set_ylabel("layer")
        ticks = thinned(n, label_room(panel_w - 1.2, fontsize), keep=(target,))
        ax.set_xticks(ticks, [short(expl.tokens[i]) for i in ticks], rotation=90, fontsize=fontsize)
        ax.get_xticklabels()[ticks.index(target)].set_fontweight("bold")
        # The target's column: a marker above the panel, in axes coordinates vertically.
        ax.plot([target], [1.0], marker="v", color="#b45309", markersize=7, clip_on=False,
                transform=ax.get_xaxis_transform())
        fig.colorbar(image, ax=ax, shrink=0.85, pad=0.01)
    if title:
        fig.suptitle(plain(title), fontsize=11)
    return fig


def save_heatmaps(explanations: list[Any], path: str, title: str | None = None, dpi: int = 150,
                  layout: str = "auto") -> str:
    """Write :func:`heatmap_figure` to ``path`` (PNG, SVG or PDF by extension), atomically."""
    figure_format(path)
    return save_figure(heatmap_figure(explanations, title, layout), path, dpi=dpi)
