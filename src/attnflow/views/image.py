"""Relevance maps over images: the patch-grid scores drawn over the input image (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import save_figure


def overlay_figure(explanations: list[Any], columns: int = 4, alpha: float = 0.7, cmap: str = "inferno",
                   inputs: bool = False) -> Any:
    """One panel per explanation, ``columns`` per row: the image in grey or colour, the scores on top,
    stretched over the whole image. With ``inputs=True`` each row starts with the bare image of the
    row's first explanation (for one image per row, one method per column). Each panel is scaled to
    its own min..max, so colours compare patches within a panel, not across panels. Patches are drawn
    as blocks (no smoothing): the scores are per patch."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cols = min(columns, len(explanations))
    rows = -(-len(explanations) // cols)
    fig, axes = plt.subplots(rows, cols + inputs, figsize=(2.6 * (cols + inputs), 2.8 * rows), squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat:
        ax.axis("off")
    panels = [axes[i // cols, i % cols + inputs] for i in range(len(explanations))]
    if inputs:
        for r in range(rows):
            _show_image(axes[r, 0], explanations[r * cols].image)
            axes[r, 0].set_title("input", fontsize=9)
    for ax, expl in zip(panels, explanations):
        extent = _show_image(ax, expl.image)
        s = np.asarray(expl.scores, dtype=float)
        span = s.max() - s.min()
        ax.imshow((s - s.min()) / span if span > 0 else np.zeros_like(s), cmap=cmap, alpha=alpha, extent=extent,
                  interpolation="nearest", vmin=0, vmax=1)
        title = f"{expl.method}  pred {expl.prediction}"
        if getattr(expl, "target", None) is not None and expl.target != expl.prediction:
            title += f" (for {expl.target})"
        ax.set_title(title, fontsize=9)
    return fig


def _show_image(ax: Any, image: Any) -> tuple[int, int, int, int]:
    image = np.asarray(image)
    extent = (0, image.shape[1], image.shape[0], 0)
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, extent=extent, interpolation="nearest", vmin=0, vmax=1)
    return extent


def save_overlays(explanations: list[Any], path: str, dpi: int = 100, **kwargs: Any) -> str:
    """Write :func:`overlay_figure` as a PNG to ``path``, atomically."""

    if not explanations:
        raise AttnflowError("no explanations to draw")
    if Path(path).suffix.lower() != ".png":
        raise AttnflowError(f"overlay path must end in .png; got {str(path)!r}")
    return save_figure(overlay_figure(explanations, **kwargs), path, dpi=dpi)
