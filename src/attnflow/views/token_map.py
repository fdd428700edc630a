"""The token x token map of one layer: every target position (rows) over every input token (columns)."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import figure_format, pyplot, save_figure
from attnflow.views.labels import label_room, plain, short, thinned, token_fontsize


def token_map_figure(matrix: Any, tokens: list[str], title: str | None = None) -> Any:
    """``matrix``: ``(n, n)``, row = target (query) position, column = input token. Rows that were not
    computed (NaN, e.g. flow for positions other than the captured target) are drawn grey."""
    plt = pyplot()

    values = np.asarray(matrix, dtype=float)
    n = len(tokens)
    if values.shape != (n, n):
        raise AttnflowError(f"a token map needs a ({n}, {n}) matrix for {n} tokens; got shape {values.shape}")
    fontsize = token_fontsize(n)
    side = float(np.clip(0.22 * n + 2.5, 5.0, 13.0))
    fig, ax = plt.subplots(figsize=(side + 1.2, side), constrained_layout=True)
    cmap = plt.get_cmap("Blues").with_extremes(bad="#d0d7de")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, interpolation="nearest")
    ticks = thinned(n, label_room(side - 1.5, fontsize))
    labels = [short(tokens[i]) for i in ticks]
    ax.set_xticks(ticks, labels, rotation=90, fontsize=fontsize)
    ax.set_yticks(ticks, labels, fontsize=fontsize)
    ax.set_xlabel("input token")
    ax.set_ylabel("target position")
    fig.colorbar(image, ax=ax, shrink=0.8)
    if title:
        ax.set_title(plain(title), fontsize=10)
    return fig


def save_token_map(result: Any, path: Any, method: str = "rollout", layer: int = -1, title: str | None = None,
                   dpi: int = 150) -> str:
    """Write the token map of ``method`` at ``layer`` (0-based, -1 = top) from a text
    ``Attribution`` with every target (``attnflow.explain_maps``), PNG/SVG/PDF
    by extension, atomically."""
    figure_format(path)
    if getattr(result, "kind", None) != "text":
        raise AttnflowError("a token map is drawn for text results")
    if method not in result.methods:
        raise AttnflowError(f"this result holds the methods {result.methods}; got {method!r}")
    n_layers = result.n_layers
    if not -n_layers <= layer < n_layers:
        raise AttnflowError(f"layer must be in [{-n_layers}, {n_layers}); got {layer}")
    shown = layer % n_layers + 1
    title = title or f"{method}, layer {shown}: each target position over the input tokens"
    return save_figure(token_map_figure(result.scores[method][:, layer], result.sources, title), path, dpi=dpi)
