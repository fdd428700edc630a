"""Terminal tables (rich): the top sources per layer, per method, or per generated token."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _cell(entries: list[tuple[int, str, float]], quoted: bool = False) -> str:
    # tokens are data, not markup: "[/INST]" or "[CLS]" must print as themselves
    return "  ".join(f"{escape(repr(tok) if quoted else tok)} [dim]{_number(score)}[/dim]" for _, tok, score in entries)


def _number(score: float) -> str:
    # two decimals read best, but would print 0.00 for small unnormalised scores (grad-rollout)
    return f"{score:.2f}" if score == 0 or abs(score) >= 0.01 else f"{score:.1e}"


def _who(result: Any, t: int) -> str:
    position = result.target_positions[t]
    label = escape(result.targets[t])
    if result.kind == "seq2seq":
        return f"target token {t} ({label})"
    return f"position {position} ({label})" if position is not None else label


def layer_table(result: Any, k: int = 5, method: str | None = None, target: Any = None) -> Table:
    """Rows = layers (top layer first), cells = the ``k`` best sources of one method."""
    method = method or result.method
    t = result.target_index(target)
    table = Table(title=f"{method}: {_who(result, t)}", title_justify="left")
    table.add_column("layer", justify="right")
    table.add_column(f"top {k} tokens")
    for layer in range(result.n_layers - 1, -1, -1):
        if layer in result.computed[method].layers:
            table.add_row(str(layer + 1), _cell(result.top(k, method=method, target=t, layer=layer)))
    return table


def method_table(result: Any, k: int = 5, layer: int = -1, target: Any = None, skip: tuple[int, ...] = (),
                 methods: Any = None) -> Table:
    """Rows = methods, cells = the ``k`` best sources at ``layer`` (the top layer by default)."""
    t = result.target_index(target)
    shown = layer % result.n_layers + 1
    table = Table(title=f"top tokens for {_who(result, t)}, layer {shown}", title_justify="left")
    table.add_column("method")
    table.add_column(f"top {k} tokens")
    for method in methods or [m for m in result.methods if t in result.computed[m].targets]:
        table.add_row(method, _cell(result.top(k, method=method, target=t, layer=layer, skip=skip)))
    return table


def generation_table(result: Any, k: int = 3, content_only: bool = False, method: str | None = None) -> Table:
    """Rows = generated (or target) tokens, cells = the ``k`` prompt (source) tokens each draws on most:
    mean over layers for a generation, the top decoder layer for an encoder-decoder result."""
    method = method or result.method
    seq2seq = result.kind == "seq2seq"
    # Rollout's source share is 1 - r^layers for every target by construction and raw's is 1; only
    # flow's says something (docs/architectures.md), so only flow gets the column.
    share_column = seq2seq and method == "flow"
    layer = -1 if seq2seq else "mean"
    where = "top decoder layer" if seq2seq else "mean over layers"
    table = Table(title=f"{method}, {where}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("token")
    table.add_column(f"top {k} {'source' if seq2seq else 'prompt'} tokens")
    if share_column:
        table.add_column("source share", justify="right")
    for i, piece in enumerate(result.targets):
        if i not in result.computed[method].targets:
            continue
        entries = result.top(k, method=method, target=i, layer=layer, content_only=content_only)
        if share_column:
            share = float(result.layer_scores(method, i, layer)[: result.input_length].sum())
            table.add_row(str(i), escape(repr(piece)), _cell(entries, quoted=True), f"{share:.2f}")
            continue
        table.add_row(str(i), escape(repr(piece)), _cell(entries, quoted=True))
    return table


def result_table(result: Any, k: int = 5, **options: Any) -> Table:
    """The table a result prints as: per generated token for a generation, per layer for one method,
    per method for several."""
    if result.kind == "generation" or (result.kind == "seq2seq" and len(result.methods) == 1):
        return generation_table(result, k, **options)
    if len(result.methods) == 1 and result.kind == "text":
        return layer_table(result, k, **options)
    return method_table(result, k, **options)


def render_text(renderable: Any, width: int = 100) -> str:
    console = Console(width=width, record=True, file=None, force_terminal=False, color_system=None)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()
