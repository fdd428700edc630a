"""Views of perturbation curves: a rich table of AUCs, accuracy-vs-removed plots, CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

from rich.table import Table

from attnflow.results.files import write_text
from attnflow.views.files import pyplot, save_figure


def curves_table(curves: list[Any], fill: str | None = None) -> Table:
    """One row per method: AUC of the positive curve (lower is better) and the negative (higher is better)."""
    title = "Patch perturbation test: area under accuracy vs fraction of patches removed"
    table = Table(title=title + (f" (fill: {fill})" if fill else ""))
    table.add_column("method")
    table.add_column("positive AUC (lower better)", justify="right")
    table.add_column("negative AUC (higher better)", justify="right")
    table.add_column("accuracy, nothing removed", justify="right")
    by_method: dict[str, dict[str, Any]] = {}
    for c in curves:
        by_method.setdefault(c.method, {})[c.order] = c
    for method, pair in by_method.items():
        first = next(iter(pair.values()))
        table.add_row(method, *(f"{pair[o].auc:.3f}" if o in pair else "-" for o in ("positive", "negative")),
                      f"{first.accuracy[0]:.3f}")
    return table


def curves_csv(curves: list[Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["method", "order", "fraction_removed", "accuracy", "auc"])
    for c in curves:
        for f, a in zip(c.fractions, c.accuracy):
            writer.writerow([c.method, c.order, f"{f:.2f}", f"{a:.4f}", f"{c.auc:.4f}"])
    return out.getvalue()


def save_curves_csv(curves: list[Any], path: str) -> str:
    return write_text(path, curves_csv(curves))


def save_curves_plot(curves: list[Any], path: str, dpi: int = 120) -> str:
    """Two panels (positive, negative): accuracy against the fraction of patches removed, one line per method."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True, constrained_layout=True)
    for ax, order in zip(axes, ("positive", "negative")):
        for c in (c for c in curves if c.order == order):
            ax.plot(c.fractions, c.accuracy, marker="o", ms=3, label=f"{c.method} (AUC {c.auc:.3f})",
                    linestyle="--" if c.method == "random" else "-")
        ax.set_title(f"{order}: {'most' if order == 'positive' else 'least'} relevant removed first")
        ax.set_xlabel("fraction of patches removed")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("accuracy")
    return save_figure(fig, path, dpi=dpi)
