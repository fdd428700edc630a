"""Figures for one generated token: which prompt tokens its row lands on.

Top panel: bar chart of the row's raw share on each prompt token, averaged over layers (with
``content_only``, punctuation and very common words are greyed out and left out of the ranking; see
``attnflow.results.words``). Bottom panel: the prompt tokens x layers heatmap (layer 1 at the bottom).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.results.words import is_content
from attnflow.views.files import figure_format, pyplot, save_figure
from attnflow.views.labels import figure_title, plain, wrapped
from attnflow.views.scale import left_out, legend, scale_max, sink_share


def generation_figure(result: Any, target: Any = None, method: str | None = None, content_only: bool = False,
                      title: str | None = None, sink_aware: bool = True) -> Any:
    """``result``: an Attribution of kind "generation"; ``target``: the generated token (index or
    text; default the result's target). sink_aware (default): the predicting position itself, special
    tokens and a detected sink (e.g. a decoder's first token) are left out of the bar axis and the
    map's colour scale (see ``attnflow.views.scale``); the bars that exceed the axis are hatched and
    carry their value."""
    plt = pyplot()

    if getattr(result, "kind", None) != "generation":
        raise AttnflowError("this figure is drawn for generation results")
    i = result.target_index(target)
    method = method or result.method
    m = result.input_length
    prompt = result.sources[:m]
    rows = result.row(method, i)[:, :m]  # (layers, m)
    scores = np.nanmean(rows, axis=0)
    labels = [plain(repr(t)[1:-1]) for t in prompt]  # show spaces/newlines unambiguously
    keep = np.array([is_content(t) or not content_only for t in prompt])
    width = min(24.0, max(7.0, 0.32 * m + 2.0))
    fig, (bar_ax, map_ax) = plt.subplots(2, 1, figsize=(width, 2.6 + 0.12 * result.n_layers + 1.6),
                                         height_ratios=[1, 1.6], constrained_layout=True)
    colors = np.where(keep, "tab:blue", "lightgray")
    if keep.any():
        colors[int(np.flatnonzero(keep)[np.argmax(scores[keep])])] = "tab:red"
    excluded = {j: r for j, r in left_out(result, method, i, sink_aware=sink_aware).items() if j < m}
    top = scale_max(scores, excluded)
    bars = bar_ax.bar(range(m), scores, color=colors)
    for j in excluded:
        bars[j].set_hatch("//")
        bars[j].set_facecolor("lightgray")
        if scores[j] > top * 1.15:
            bar_ax.annotate(f"{scores[j]:.2f}", (j, top * 1.15), ha="center", va="top", fontsize=7)
    bar_ax.set_ylim(0, top * 1.15)
    bar_ax.set_xlim(-0.5, m - 0.5)
    bar_ax.set_xticks(range(m), labels, rotation=90, fontsize=8)
    bar_ax.set_ylabel(f"{method} share\n(mean over layers)")
    note = "  (grey: punctuation/common words, not ranked)" if content_only else ""
    scale_note = legend(result, excluded, share=sink_share(result, method, i) if sink_aware else None)
    bar_ax.set_title(plain(f"generated token {i}: {result.targets[i]!r}{note}"
                           + (f"\n{wrapped(scale_note + '; hatched bars exceed the axis', width)}"
                              if scale_note else "")), fontsize=10)
    image = map_ax.imshow(rows, aspect="auto", origin="lower", cmap="Blues", vmin=0, vmax=scale_max(rows, excluded))
    map_ax.set_xticks(range(m), labels, rotation=90, fontsize=8)
    step = max(1, result.n_layers // 10)
    map_ax.set_yticks(range(0, result.n_layers, step), [str(k + 1) for k in range(0, result.n_layers, step)])
    map_ax.set_ylabel("layer")
    fig.colorbar(image, ax=map_ax, shrink=0.8)
    heading = figure_title(result, title)
    if heading:
        fig.suptitle(heading, fontsize=11)
    return fig


def save_generation_figure(result: Any, path: Any, target: Any = None, method: str | None = None,
                           content_only: bool = False, title: str | None = None, dpi: int = 100,
                           sink_aware: bool = True) -> str:
    """Write ``generation_figure`` to ``path`` (format from the extension), atomically."""
    figure_format(path)  # refuse a bad suffix before drawing
    return save_figure(generation_figure(result, target, method, content_only, title, sink_aware), path, dpi=dpi)
