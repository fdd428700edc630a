"""Layers x tokens heatmaps (matplotlib), one panel per method: the paper's raw | rollout | flow
figure for one target position of a text result."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import figure_format, pyplot, save_figure
from attnflow.views.labels import figure_title, label_room, plain, short, thinned, token_fontsize, wrapped
from attnflow.views.scale import left_out, legend, scale_limits, sink_share

# Side by side up to this many tokens (the paper's layout); above it the panels are stacked so each
# gets the full page width and long inputs keep legible columns.
SIDE_BY_SIDE_MAX = 40


def _panels(result: Any, methods: Any, target: Any) -> tuple[list[str], int]:
    if getattr(result, "kind", None) != "text":
        raise AttnflowError("layers x tokens panels are drawn for text results; "
                            f"this one is {getattr(result, 'kind', type(result).__name__)!r}")
    t = result.target_index(target)
    if methods is None:
        methods = [m for m in result.methods if t in result.computed[m].targets]
        if not methods:
            raise AttnflowError(f"no method was computed for target {t}")
    elif isinstance(methods, str):
        methods = [methods]
    for m in methods:
        result.row(m, t)  # refuses a method that is missing or was not computed for this target
    return list(methods), t


def heatmap_figure(result: Any, *, methods: Any = None, target: Any = None, title: str | None = None,
                   layout: str = "auto", sink_aware: bool = True, content_only: bool = False, ax: Any = None) -> Any:
    """One panel per method of a text ``Attribution`` for one target (default:
    the result's own target and every method computed for it): rows = the computed layers (layer 1
    at the bottom; a method without a layers axis, such as ablated flow, is one row), columns = input
    tokens, each panel on its own colour scale (methods differ in range; a method with negative
    scores gets a scale symmetric about zero, red for evidence against the prediction), the target
    column marked with a triangle. layout: ``"auto"``, ``"columns"`` (side by side) or ``"rows"``
    (stacked). sink_aware (default): the target, special tokens and a detected sink are left out of
    each panel's colour scale (drawn saturated; see ``attnflow.views.scale``), and the panel says
    so under its tokens; content_only: punctuation and very common words too. ``ax``: a matplotlib
    Axes (or one per method) to draw into instead of a new figure; returns the Figure either way."""
    plt = pyplot()

    methods, t = _panels(result, methods, target)
    if layout not in ("auto", "columns", "rows"):
        raise AttnflowError(f"layout must be 'auto', 'columns' or 'rows'; got {layout!r}")
    tokens = result.sources
    n, k, layers = len(tokens), len(methods), result.n_layers
    side = layout == "columns" or (layout == "auto" and n <= SIDE_BY_SIDE_MAX)
    fontsize = token_fontsize(n)
    panel_w = float(np.clip(0.24 * n + 1.8, 4.0, 8.0)) if side else float(np.clip(0.06 * n + 5.0, 9.0, 18.0))
    if ax is not None:
        axes = np.atleast_1d(np.asarray(ax, dtype=object)).ravel()
        if len(axes) != k:
            raise AttnflowError(f"ax must be one matplotlib Axes per method drawn ({k}: {', '.join(methods)}); "
                                f"got {len(axes)}")
        fig = axes[0].figure
    else:
        panel_h = 0.22 * min(layers, 24) + 0.14 * max(len(short(tok)) for tok in tokens) * fontsize / 9 + 1.4
        figsize = (panel_w * k, panel_h) if side else (panel_w, panel_h * k)
        fig, grid = plt.subplots(1 if side else k, k if side else 1, figsize=figsize, squeeze=False,
                                 constrained_layout=True)
        axes = grid.ravel()
    for panel, method in zip(axes, methods):
        _panel(fig, panel, result, method, t, panel_w=panel_w, fontsize=fontsize, sink_aware=sink_aware,
               content_only=content_only)
    heading = figure_title(result, title)
    if heading and ax is None:
        fig.suptitle(heading, fontsize=11)
    return fig


def _panel(fig: Any, ax: Any, result: Any, method: str, t: int, *, panel_w: float, fontsize: float,
           sink_aware: bool, content_only: bool) -> None:
    """One method's layers x tokens panel for target ``t``: only the layers it computed."""
    tokens, n = result.sources, len(result.sources)
    target = result.target_positions[t]
    computed = sorted(result.computed[method].layers)
    scores = np.asarray(result.row(method, t), dtype=float)[computed]
    excluded = left_out(result, method, t, sink_aware=sink_aware, content_only=content_only)
    vmin, vmax, signed = scale_limits(scores, excluded)
    image = ax.imshow(scores, aspect="auto", origin="lower", cmap="RdBu" if signed else "Blues", vmin=vmin,
                      vmax=vmax, interpolation="nearest")
    ax.set_title(f"{method}  (target: {short(tokens[target])} @ {target})", fontsize=10)
    if _has_layers(method) or len(computed) > 1:
        rows = thinned(len(computed), 16)
        ax.set_yticks(rows, [str(computed[i] + 1) for i in rows], fontsize=8)
        ax.set_ylabel("layer")
    else:  # one number per token for the whole model (every layer at once)
        ax.set_yticks([0], ["all"], fontsize=8)
        ax.set_ylabel("layers")
    ticks = thinned(n, label_room(panel_w - 1.2, fontsize), keep=(target,))
    ax.set_xticks(ticks, [short(tokens[i]) for i in ticks], rotation=90, fontsize=fontsize)
    ax.get_xticklabels()[ticks.index(target)].set_fontweight("bold")
    for tick, label in zip(ticks, ax.get_xticklabels()):
        if tick in excluded:
            label.set_color("#8c959f")
    note = legend(result, excluded, quote=lambda tok: repr(short(tok)), share=sink_share(result, method, t))
    if signed:
        note = "; ".join(filter(None, [note, "blue: for the prediction, red: against it"]))
    if note:
        ax.set_xlabel(plain(wrapped(note, panel_w)), fontsize=7, color="#656d76")
    # The target's column: a marker above the panel, in axes coordinates vertically.
    ax.plot([target], [1.0], marker="v", color="#b45309", markersize=7, clip_on=False,
            transform=ax.get_xaxis_transform())
    fig.colorbar(image, ax=ax, shrink=0.85, pad=0.01)


def _has_layers(method: str) -> bool:
    """Whether the method's record says its scores have a layers axis (unknown methods: yes)."""
    from attnflow.config.registry import REGISTRY

    record = REGISTRY.get(method)
    return record is None or record.layers


def save_heatmaps(result: Any, path: Any, *, methods: Any = None, target: Any = None, title: str | None = None,
                  dpi: int = 150, layout: str = "auto", sink_aware: bool = True, content_only: bool = False) -> str:
    """Write ``heatmap_figure`` to ``path`` (PNG, SVG or PDF by extension), atomically."""
    figure_format(path)
    return save_figure(heatmap_figure(result, methods=methods, target=target, title=title, layout=layout,
                                      sink_aware=sink_aware, content_only=content_only), path, dpi=dpi)
