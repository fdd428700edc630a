"""Relevance maps over images: the patch-grid scores drawn over the input image (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnflow.config import registry
from attnflow.errors import AttnflowError
from attnflow.views.files import pyplot, save_figure
from attnflow.views.labels import plain, settings_line


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


def _file_name(result: Any) -> str:
    return Path(str(result.input)).name if result.input else "image"


def picture(result: Any) -> np.ndarray:
    """What the scores are drawn on: the picture as given when the result keeps it, else as the model saw it."""
    return result.original if getattr(result, "original", None) is not None else result.image


def overlay_figure(results: list[Any], methods: Any = None, columns: int = 4, alpha: float = 0.6,
                   cmap: str = "inferno", inputs: bool = False, layer: int = -1) -> Any:
    """One panel per (image result, method) at ``layer`` (default the top), ``columns`` per row: the
    picture as given (``Attribution.original``, else the image as the model saw it) with the
    patch scores on top, stretched over the whole picture, the file name and method in the title and a
    colour bar of the scores beside it. With ``inputs=True`` each row starts with the bare picture of
    the row's first panel (for one image per row, one method per column). Each panel has its own
    colour scale (its min..max), so colours compare patches within a panel, not across panels.
    Patches are drawn as blocks (no smoothing): the scores are per patch."""
    plt = pyplot()

    panels = _panels(results, methods)
    cols = min(columns, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols + inputs, figsize=(3.1 * (cols + inputs), 3.0 * rows + 0.4), squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat:
        ax.axis("off")
    if inputs:
        for r in range(rows):
            first = panels[r * cols][0]
            _show_image(axes[r, 0], picture(first))
            axes[r, 0].set_title(plain(f"{_file_name(first)}\ninput"), fontsize=9)
    for i, (result, method) in enumerate(panels):
        ax = axes[i // cols, i % cols + inputs]
        extent = _show_image(ax, picture(result))
        s = np.asarray(result.grid_scores(method, layer), dtype=float)
        low, high = float(s.min()), float(s.max())
        shown = ax.imshow(s, cmap=cmap, alpha=alpha, extent=extent, interpolation="nearest", vmin=low,
                          vmax=high if high > low else low + 1e-12)
        title = f"{method}  pred {result.prediction}"
        explained = result.params.get("explained_class")
        if registry.fact(method, "classifiers_only") and explained is not None and explained != result.prediction:
            title += f" (for {explained})"
        ax.set_title(plain(f"{_file_name(result)}\n{title}"), fontsize=9)
        bar = fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.02)
        bar.ax.tick_params(labelsize=7)
        bar.solids.set_alpha(1.0)
    settings = settings_line(panels[0][0])
    if settings:
        fig.suptitle(settings, fontsize=9)
    return fig


def _show_image(ax: Any, image: Any) -> tuple[int, int, int, int]:
    image = np.asarray(image)
    extent = (0, image.shape[1], image.shape[0], 0)
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, extent=extent, interpolation="nearest", vmin=0, vmax=1)
    return extent


def save_overlays(results: Any, path: Any, dpi: int = 100, **kwargs: Any) -> str:
    """Write ``overlay_figure`` as a PNG to ``path``, atomically (one result or a list)."""
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if not results:
        raise AttnflowError("no image results to draw")
    if Path(path).suffix.lower() != ".png":
        raise AttnflowError(f"overlay path must end in .png; got {str(path)!r}")
    return save_figure(overlay_figure(results, **kwargs), path, dpi=dpi)
