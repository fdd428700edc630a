"""Figure files: the format from the suffix, checked before drawing, written atomically.

The atomic writing itself is ``attnflow.results.files`` (results are saved the same way)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

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


def pyplot() -> Any:
    """``matplotlib.pyplot``, on the non-interactive Agg backend unless a backend is already in use or
    this runs inside IPython/Jupyter (whose inline backend shows figures in the notebook: forcing Agg
    there would stop the user's own figures, and attnflow's, from displaying)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and "IPython" not in sys.modules:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt
