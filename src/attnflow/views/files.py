"""Figure files: the format from the suffix, checked before drawing, written atomically.

The atomic writing itself is :mod:`attnflow.results.files` (results are saved the same way)."""

from __future__ import annotations

import os
from pathlib import Path

from attnflow.results.files import check_output, write_with

FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_format(path: str | os.PathLike) -> str:
    """The figure format named by ``path``'s extension; checked before any drawing starts."""
    check_output(path, FIGURE_FORMATS)
    return Path(path).suffix.lower().lstrip(".")


def save_figure(fig: object, path: str | os.PathLike, dpi: int = 150) -> str:
    """Write a matplotlib figure atomically (format from the extension) and close it."""
    import matplotlib.pyplot as plt

    try:
        fmt = figure_format(path)
        # "tight" so that no label or colour-bar tick is ever cut off at the edge.
        options = {"dpi": dpi, "format": fmt, "bbox_inches": "tight", "pad_inches": 0.08}
        write_with(path, lambda tmp: fig.savefig(tmp, **options))  # type: ignore[attr-defined]
    finally:
        plt.close(fig)  # type: ignore[arg-type]
    return str(path)
