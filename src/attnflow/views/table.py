"""Terminal tables (rich): the top tokens per layer, or per method."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _cell(entries: list[tuple[int, str, float]]) -> str:
    # tokens are data, not markup: "[/INST]" or "[CLS]" must print as themselves
    return "  ".join(f"{escape(tok)} [dim]{_number(score)}[/dim]" for _, tok, score in entries)


def _number(score: float) -> str:
    # two decimals read best, but would print 0.00 for small unnormalised scores (grad-rollout)
    return f"{score:.2f}" if score == 0 or abs(score) >= 0.01 else f"{score:.1e}"


def layer_table(expl: Any, k: int = 5) -> Table:
    """Rows = layers (top layer first), cells = the ``k`` best tokens with their scores."""
    table = Table(title=f"{expl.method}: position {expl.target} ({escape(expl.tokens[expl.target])})", title_justify="left")
    table.add_column("layer", justify="right")
    table.add_column(f"top {k} tokens")
    for layer in range(expl.n_layers - 1, -1, -1):
        table.add_row(str(layer + 1), _cell(expl.top(k, layer)))
    return table


def method_table(explanations: list[Any], k: int = 5, layer: int = -1, skip: tuple[int, ...] = ()) -> Table:
    """Rows = methods, cells = the ``k`` best tokens at ``layer`` (the top layer by default)."""
    first = explanations[0]
    shown = layer % first.n_layers + 1
    table = Table(title=f"top tokens for position {first.target} ({escape(first.tokens[first.target])}), layer {shown}",
                  title_justify="left")
    table.add_column("method")
    table.add_column(f"top {k} tokens")
    for expl in explanations:
        table.add_row(expl.method, _cell(expl.top(k, layer, skip)))
    return table


def render_text(renderable: Any, width: int = 100) -> str:
    console = Console(width=width, record=True, file=None, force_terminal=False, color_system=None)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()
