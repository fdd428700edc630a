"""The figure of an encoder-decoder result: which source tokens (and which earlier target tokens)
every target token draws on.

Left: the targets x sources map at one decoder layer (default the top one), like a translation's
alignment matrix; a line separates the source tokens from the decoder's own inputs (the start token
and the target prefix), and the chosen target's row is marked. Right: that target's decoder layers x
sources map (layer 1 at the bottom).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.views.files import figure_format, pyplot, save_figure
from attnflow.views.labels import label_room, plain, short, thinned, token_fontsize
from attnflow.views.scale import left_out, legend, scale_max, sink_share


def seq2seq_figure(result: Any, target: Any = None, method: str | None = None, layer: int = -1,
                   title: str | None = None, sink_aware: bool = True) -> Any:
    """``result``: an Attribution of kind "seq2seq"; ``target``: the target token (index or text;
    default the result's own); ``layer``: the decoder layer of the left panel (0-based, -1 = top).
    sink_aware (default): the right panel's colour scale leaves out the target's own input position,
    special tokens and a dominant token (``attnflow.views.scale``), and says so."""
    plt = pyplot()

    if getattr(result, "kind", None) != "seq2seq":
        raise AttnflowError("this figure is drawn for encoder-decoder (seq2seq) results")
    method = method or result.method
    t = result.target_index(target)
    block = result.block(method)
    n_layers = result.n_layers
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -n_layers <= layer < n_layers:
        raise AttnflowError(f"layer must be an integer in [{-n_layers}, {n_layers}); got {layer!r}")
    layer = int(layer) % n_layers
    if t not in block.targets:
        raise AttnflowError(f"{method} was not computed for target {t}; computed: {list(block.targets)}")
    dense = result.dense(method)  # (targets, layers, sources), NaN where not computed
    s, n = result.input_length, result.n_sources
    width = n - 1  # the last target token is never read by the decoder: its column is always 0
    labels = [short(tok) for tok in result.sources[:width]]
    fontsize = token_fontsize(width)
    panel_w = float(np.clip(0.22 * width + 2.0, 4.5, 11.0))
    rows_h = float(np.clip(0.22 * result.n_targets + 1.8, 3.0, 9.0))
    fig, (left, right) = plt.subplots(1, 2, figsize=(2 * panel_w, rows_h), constrained_layout=True)
    grid = np.ma.masked_invalid(dense[:, layer, :width])
    image = left.imshow(grid, aspect="auto", cmap="Blues", vmin=0, interpolation="nearest")
    ticks = thinned(width, label_room(panel_w - 1.2, fontsize))
    for ax in (left, right):
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=fontsize)
        ax.axvline(s - 0.5, color="#b45309", linewidth=1.2)
    target_labels = [short(tok) for tok in result.targets]
    rows = thinned(result.n_targets, int(rows_h * 72 / 14), keep=(t,))
    left.set_yticks(rows, [target_labels[i] for i in rows], fontsize=fontsize)
    left.get_yticklabels()[rows.index(t)].set_fontweight("bold")
    left.set_ylabel("target token (predicted)")
    left.set_title(f"{method}, decoder layer {layer + 1}: source | start + target prefix", fontsize=10)
    fig.colorbar(image, ax=left, shrink=0.85, pad=0.01)
    per_layer = np.ma.masked_invalid(dense[t, :, :width])
    excluded = left_out(result, method, t, sink_aware=sink_aware)
    image = right.imshow(per_layer, aspect="auto", origin="lower", cmap="Blues", vmin=0,
                         vmax=scale_max(dense[t, :, :width], excluded), interpolation="nearest")
    note = legend(result, excluded, quote=lambda tok: repr(short(tok)), share=sink_share(result, method, t))
    if note:
        right.set_xlabel(plain(note), fontsize=7, color="#656d76", wrap=True)
    step = max(1, n_layers // 10)
    right.set_yticks(range(0, n_layers, step), [str(k + 1) for k in range(0, n_layers, step)])
    right.set_ylabel("decoder layer")
    share = float(np.nansum(dense[t, layer, :s]))
    right.set_title(plain(f"target {t}: {result.targets[t]!r}  (source share at layer {layer + 1}: {share:.2f})"),
                    fontsize=10)
    fig.colorbar(image, ax=right, shrink=0.85, pad=0.01)
    if title:
        fig.suptitle(plain(title), fontsize=11)
    return fig


def save_seq2seq_figure(result: Any, path: Any, target: Any = None, method: str | None = None, layer: int = -1,
                        title: str | None = None, dpi: int = 120, sink_aware: bool = True) -> str:
    """Write ``seq2seq_figure`` to ``path`` (PNG, SVG or PDF by extension), atomically."""
    figure_format(path)
    return save_figure(seq2seq_figure(result, target, method, layer, title, sink_aware), path, dpi=dpi)
