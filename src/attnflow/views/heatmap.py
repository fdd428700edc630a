"""Layers x tokens heatmaps (matplotlib), one panel per explanation, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnflow.views.files import check_output, write_with

FORMATS = ("png", "svg", "pdf")


def _tick_step(n: int, max_labels: int = 60) -> int:
    return max(1, int(np.ceil(n / max_labels)))


def heatmap_figure(explanations: list[Any], title: str | None = None) -> Any:
    """A figure with one panel per explanation: rows = layers 1..L (layer 1 at the bottom),
    columns = input tokens. Token labels are thinned above 60 tokens so long inputs stay readable."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n = len(explanations[0].tokens)
    layers = explanations[0].n_layers
    width = min(40.0, max(4.0, 0.28 * n + 1.5))
    fig, axes = plt.subplots(1, len(explanations), figsize=(width * len(explanations), 0.35 * layers + 2.2),
                             squeeze=False, constrained_layout=True)
    step = _tick_step(n)
    for ax, expl in zip(axes[0], explanations):
        image = ax.imshow(np.asarray(expl.scores), aspect="auto", origin="lower", cmap="Blues", vmin=0)
        ax.set_title(expl.method)
        ax.set_yticks(range(layers), [str(i + 1) for i in range(layers)])
        ax.set_ylabel("layer")
        ticks = list(range(0, n, step))
        ax.set_xticks(ticks, [expl.tokens[i] for i in ticks], rotation=90, fontsize=8 if n < 40 else 6)
        if expl.target in ticks:
            ax.get_xticklabels()[ticks.index(expl.target)].set_fontweight("bold")
        fig.colorbar(image, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def save_heatmaps(explanations: list[Any], path: str, title: str | None = None, dpi: int = 150) -> str:
    """Write :func:`heatmap_figure` to ``path`` (format from the extension), atomically."""
    import matplotlib.pyplot as plt

    check_output(path, FORMATS)
    suffix = Path(path).suffix.lower().lstrip(".")
    fig = heatmap_figure(explanations, title)
    try:
        write_with(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=suffix))
    finally:
        plt.close(fig)
    return str(path)
