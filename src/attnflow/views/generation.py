"""Figures for one generated token: which prompt tokens its rollout row lands on.

Top panel: bar chart of the row's raw share on each prompt token, averaged over layers (with
``content_only``, punctuation and very common words are greyed out and left out of the ranking; see
:mod:`attnflow.views.words`). Bottom panel: the prompt tokens x layers heatmap (layer 1 at the bottom).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.views.files import figure_format, save_figure
from attnflow.views.labels import plain
from attnflow.views.words import is_content


def generation_figure(gen: Any, token: Any = 0, content_only: bool = False) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    i = gen.token_index(token)
    m = len(gen.prompt_tokens)
    scores = gen.prompt_scores(i)  # (m,)
    grid = gen.M[i].T  # (layers, m)
    labels = [plain(repr(t)[1:-1]) for t in gen.prompt_tokens]  # show spaces/newlines unambiguously
    keep = np.array([is_content(t) or not content_only for t in gen.prompt_tokens])
    width = min(24.0, max(7.0, 0.32 * m + 2.0))
    fig, (bar_ax, map_ax) = plt.subplots(2, 1, figsize=(width, 2.6 + 0.12 * gen.n_layers + 1.6),
                                         height_ratios=[1, 1.6], constrained_layout=True)
    colors = np.where(keep, "tab:blue", "lightgray")
    if keep.any():
        colors[int(np.flatnonzero(keep)[np.argmax(scores[keep])])] = "tab:red"
    bar_ax.bar(range(m), scores, color=colors)
    bar_ax.set_xlim(-0.5, m - 0.5)
    bar_ax.set_xticks(range(m), labels, rotation=90, fontsize=8)
    bar_ax.set_ylabel("rollout share\n(mean over layers)")
    note = "  (grey: punctuation/common words, not ranked)" if content_only else ""
    bar_ax.set_title(plain(f"generated token {i}: {gen.generated_tokens[i]!r}{note}"), fontsize=10)
    image = map_ax.imshow(grid, aspect="auto", origin="lower", cmap="Blues", vmin=0)
    map_ax.set_xticks(range(m), labels, rotation=90, fontsize=8)
    step = max(1, gen.n_layers // 10)
    map_ax.set_yticks(range(0, gen.n_layers, step), [str(k + 1) for k in range(0, gen.n_layers, step)])
    map_ax.set_ylabel("layer")
    fig.colorbar(image, ax=map_ax, shrink=0.8)
    return fig


def save_generation_figure(gen: Any, path: str, token: Any = 0, content_only: bool = False, dpi: int = 100) -> str:
    """Write :func:`generation_figure` to ``path`` (format from the extension), atomically."""

    figure_format(path)  # refuse a bad suffix before drawing
    return save_figure(generation_figure(gen, token, content_only), path, dpi=dpi)
