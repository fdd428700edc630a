"""Correlation-vs-layer plots for evaluation results: one line per method with a +-1 std band,
optional reference lines dashed (e.g. the numbers a paper reports)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.config import registry
from attnflow.errors import AttnflowError
from attnflow.views.files import figure_format, pyplot, save_figure

# The same method keeps the same colour in every figure (and in the report's legend order).
COLOURS = {m.name: m.colour for m in registry.methods() if m.colour}


def _series(name: str, values: Any, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise AttnflowError(f"{what} for {name!r} must be a non-empty list with one number per layer; "
                            f"got shape {array.shape}")
    return array


def correlation_figure(results: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                       reference: Mapping[str, float | Sequence[float]] | None = None,
                       ylabel: str = "Spearman correlation", title: str | None = None) -> Any:
    """results: method -> (mean per layer, std per layer); reference: name -> one number (a dashed
    horizontal line) or one number per layer (a dashed curve). Layers are numbered from 1."""
    plt = pyplot()

    if not results:
        raise AttnflowError("a correlation plot needs at least one method's results")
    fig, ax = plt.subplots(figsize=(6.4, 4.0), constrained_layout=True)
    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"][3:])
    colours: dict[str, str] = {}
    n_layers = 1
    for name, pair in results.items():
        try:
            mean, std = pair
        except (TypeError, ValueError) as exc:
            raise AttnflowError(f"results[{name!r}] must be a pair (mean per layer, std per layer)") from exc
        mean, std = _series(name, mean, "the mean"), _series(name, std, "the std")
        if mean.shape != std.shape:
            raise AttnflowError(f"{name!r} has {mean.size} means but {std.size} stds; give one of each per layer")
        layers = np.arange(1, mean.size + 1)
        n_layers = max(n_layers, mean.size)
        colour = colours[name] = COLOURS.get(name) or next(cycle)
        ax.plot(layers, mean, marker="o", markersize=4, color=colour, label=name)
        ax.fill_between(layers, mean - std, mean + std, color=colour, alpha=0.18, linewidth=0)
    for name, value in (reference or {}).items():
        colour = colours.get(name.split()[0], "#24292f")  # "flow (paper)" shares flow's colour
        values = np.asarray(value, dtype=float)
        if values.ndim == 0:
            ax.axhline(float(values), color=colour, linestyle="--", linewidth=1.2, label=name)
        else:
            values = _series(name, values, "the reference")
            ax.plot(np.arange(1, values.size + 1), values, color=colour, linestyle="--", linewidth=1.2, label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_xticks(np.arange(1, n_layers + 1) if n_layers <= 16 else np.linspace(1, n_layers, 8).round())
    ax.axhline(0.0, color="#d0d7de", linewidth=0.8, zorder=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def save_correlation_plot(results: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str,
                          reference: Mapping[str, float | Sequence[float]] | None = None,
                          ylabel: str = "Spearman correlation", title: str | None = None, dpi: int = 150) -> str:
    """Write ``correlation_figure`` to ``path`` (PNG, SVG or PDF by extension), atomically."""
    figure_format(path)
    return save_figure(correlation_figure(results, reference, ylabel, title), path, dpi=dpi)
