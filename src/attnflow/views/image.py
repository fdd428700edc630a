"""Relevance maps over images: the patch-grid scores drawn over the input image (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import save_figure


def _panels(results: list[Any], methods: Any) -> list[tuple[Any, str]]:
    if not results:
        raise AttnflowError("no image results to draw")
    panels = []
    for result in results:
        if getattr(result, "kind", None) != "image":
            raise AttnflowError("overlays are drawn for image results")
        names = result.methods if methods is None else [methods] if isinstance(methods, str) else list(methods)
        panels += [(result, m) for m in names]
    return panels


def overlay_figure(results: list[Any], methods: Any = None, columns: int = 4, alpha: float = 0.7,
                   cmap: str = "inferno", inputs: bool = False, layer: int = -1) -> Any:
    """One panel per (image result, method) at ``layer`` (default the top), ``columns`` per row: the
    image in grey or colour with the scores on top, stretched over the whole image. With
    ``inputs=True`` each row starts with the bare image of the row's first panel (for one image per
    row, one method per column). Each panel is scaled to its own min..max, so colours compare
    patches within a panel, not across panels. Patches are drawn as blocks (no smoothing): the
    scores are per patch."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    panels = _panels(results, methods)
    cols = min(columns, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols + inputs, figsize=(2.6 * (cols + inputs), 2.8 * rows), squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat:
        ax.axis("off")
    if inputs:
        for r in range(rows):
            _show_image(axes[r, 0], panels[r * cols][0].image)
            axes[r, 0].set_title("input", fontsize=9)
    for i, (result, method) in enumerate(panels):
        ax = axes[i // cols, i % cols + inputs]
        extent = _show_image(ax, result.image)
        s = np.asarray(result.grid_scores(method, layer), dtype=float)
        span = s.max() - s.min()
        ax.imshow((s - s.min()) / span if span > 0 else np.zeros_like(s), cmap=cmap, alpha=alpha, extent=extent,
                  interpolation="nearest", vmin=0, vmax=1)
        title = f"{method}  pred {result.prediction}"
        explained = result.params.get("explained_class")
        if method == "grad-rollout" and explained is not None and explained != result.prediction:
            title += f" (for {explained})"
        ax.set_title(title, fontsize=9)
    return fig


def _show_image(ax: Any, image: Any) -> tuple[int, int, int, int]:
    image = np.asarray(image)
    extent = (0, image.shape[1], image.shape[0], 0)
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, extent=extent, interpolation="nearest", vmin=0, vmax=1)
    return extent


def save_overlays(results: Any, path: Any, dpi: int = 100, **kwargs: Any) -> str:
    """Write :func:`overlay_figure` as a PNG to ``path``, atomically (one result or a list)."""
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if not results:
        raise AttnflowError("no image results to draw")
    if Path(path).suffix.lower() != ".png":
        raise AttnflowError(f"overlay path must end in .png; got {str(path)!r}")
    return save_figure(overlay_figure(results, **kwargs), path, dpi=dpi)
