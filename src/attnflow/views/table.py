"""Terminal tables (rich): the top sources per layer, per method, or per generated token."""

from __future__ import annotations

import io

from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnflow.evaluation.position import NOTE, POSITION_NOTE
from attnflow.views.position import position_note, row_position_rho
from attnflow.views.scale import dominant, target_source


def _cell(entries: list[tuple[int, str, float]], quoted: bool = False) -> str:
    # tokens are data, not markup: "[/INST]" or "[CLS]" must print as themselves
    return "  ".join(f"{escape(repr(tok) if quoted else tok)} [dim]{_number(score)}[/dim]" for _, tok, score in entries)


def _number(score: float) -> str:
    # two decimals read best, but would print 0.00 for small unnormalised scores (grad-rollout)
    return f"{score:.2f}" if score == 0 or abs(score) >= 0.01 else f"{score:.1e}"


def _flag(result: Any, method: str, t: int, layer: Any) -> str:
    """A warning for a row dominated by one token other than the target (more than half its mass;
    see ``attnflow.views.scale``): its ranking then says more about that token than the input."""
    me = target_source(result, t)
    values = result.layer_scores(method, t, layer)
    if np.nanmin(values) < 0:  # signed scores (logit drops, attributions) have no shares of a mass
        return ""
    found = dominant(values, () if me is None else (me,))
    if found is None:
        return ""
    j, share = found
    return f"[bold yellow]{escape(repr(result.sources[j]))} {share:.2f}[/bold yellow]"


def _note(result: Any, method: str, t: int, layer: Any) -> str:
    rho = row_position_rho(result, method, t, layer)
    return f"[yellow]mostly position (ρ {rho:+.2f})[/yellow]" if position_note(result, method, t, layer) else ""


def _add_rows(table: Table, rows: list[tuple[list[str], str, str]]) -> Table:
    """Add ``(cells, flag, note)`` rows; a "dominated by" column and a "position" column (each with
    a caption line saying what it means) only when some row has one."""
    flagged = any(flag for _, flag, _ in rows)
    noted = any(note for _, _, note in rows)
    captions = []
    if flagged:
        table.add_column("dominated by")
        captions.append("dominated by: one token other than the target holds more than half of the row's mass")
    if noted:
        table.add_column("position")
        captions.append(f"mostly position: {NOTE} (|Spearman| of its ranking with token position >= {POSITION_NOTE})")
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    for cells, flag, note in rows:
        table.add_row(*cells, *([flag] if flagged else []), *([note] if noted else []))
    return table


def _specials(result: Any) -> tuple[int, ...]:
    """Special tokens ([CLS], [SEP]): never content, so ``content_only`` leaves them out too."""
    return tuple(int(j) for j in (result.meta or {}).get("special", []))


def _who(result: Any, t: int) -> str:
    position = result.target_positions[t]
    label = escape(result.targets[t])
    if result.kind == "seq2seq":
        return f"target token {t} ({label})"
    return f"position {position} ({label})" if position is not None else label


def layer_table(result: Any, k: int = 5, method: str | None = None, target: Any = None,
                content_only: bool = False) -> Table:
    """Rows = layers (top layer first), cells = the ``k`` best sources of one method (with
    ``content_only``, punctuation and very common words left out); a row where one token other than
    the target holds more than half of the mass is flagged."""
    method = method or result.method
    t = result.target_index(target)
    table = Table(title=f"{method}: {_who(result, t)}", title_justify="left")
    table.add_column("layer", justify="right")
    table.add_column(f"top {k} tokens")
    skip = _specials(result) if content_only else ()
    rows = [([str(layer + 1), _cell(result.top(k, method=method, target=t, layer=layer, skip=skip,
                                               content_only=content_only))], _flag(result, method, t, layer),
             _note(result, method, t, layer))
            for layer in range(result.n_layers - 1, -1, -1) if layer in result.computed[method].layers]
    return _add_rows(table, rows)


def method_table(result: Any, k: int = 5, layer: int = -1, target: Any = None, skip: tuple[int, ...] = (),
                 methods: Any = None, content_only: bool = False) -> Table:
    """Rows = methods, cells = the ``k`` best sources at ``layer`` (the top layer by default); rows
    dominated by one token are flagged as in ``layer_table``."""
    t = result.target_index(target)
    shown = layer % result.n_layers + 1
    table = Table(title=f"top tokens for {_who(result, t)}, layer {shown}", title_justify="left")
    table.add_column("method")
    table.add_column(f"top {k} tokens")
    skip = (*skip, *(_specials(result) if content_only else ()))
    rows = [([method, _cell(result.top(k, method=method, target=t, layer=layer, skip=skip, content_only=content_only))],
             _flag(result, method, t, layer), _note(result, method, t, layer))
            for method in methods or [m for m in result.methods if t in result.computed[m].targets]]
    return _add_rows(table, rows)


def generation_table(result: Any, k: int = 3, content_only: bool = False, method: str | None = None,
                     methods: Any = None) -> Table:
    """Rows = generated (or target) tokens, cells = the ``k`` prompt (source) tokens each draws on most:
    mean over layers for a generation, the top decoder layer for an encoder-decoder result. A
    generation computed with several methods (``attnflow.generate(method=[...])``) gets one column per
    method, side by side (``methods`` picks them; ``method`` one); rows whose ranking mostly reflects
    position are noted."""
    if methods is None:
        methods = [method] if method else (list(result.methods) if result.kind == "generation" else [result.method])
    seq2seq = result.kind == "seq2seq"
    # Rollout's source share is 1 - r^layers for every target by construction and raw's is 1; only
    # flow's says something (docs/architectures.md), so only flow gets the column.
    share_column = seq2seq and methods == ["flow"]
    layer = -1 if seq2seq else "mean"
    where = "top decoder layer" if seq2seq else "mean over layers"
    table = Table(title=f"{', '.join(methods)}, {where}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("token")
    for m in methods:
        table.add_column(f"top {k} {'source' if seq2seq else 'prompt'} tokens" + (f": {m}" if len(methods) > 1 else ""))
    if share_column:
        table.add_column("source share", justify="right")
    rows = []
    for i, piece in enumerate(result.targets):
        shown = [m for m in methods if i in result.computed[m].targets]
        if not shown:
            continue
        cells = [str(i), escape(repr(piece))]
        for m in methods:
            entries = result.top(k, method=m, target=i, layer=layer, content_only=content_only) if m in shown else []
            cells.append(_cell(entries, quoted=True) if m in shown else "–")
        if share_column:
            cells.append(f"{float(result.layer_scores(methods[0], i, layer)[: result.input_length].sum()):.2f}")
        flags = [(m, f) for m, f in ((m, _flag(result, m, i, layer)) for m in shown) if f]
        flags = [f if len(methods) == 1 else f"{escape(m)}: {f}" for m, f in flags]
        notes = [(m, _note(result, m, i, layer)) for m in shown]
        notes = [n if len(methods) == 1 else f"{escape(m)}: {n}" for m, n in notes if n]
        rows.append((cells, "  ".join(flags), "  ".join(notes)))
    return _add_rows(table, rows)


def result_table(result: Any, k: int = 5, **options: Any) -> Table:
    """The table a result prints as: per generated token for a generation, per layer for one method,
    per method for several."""
    if result.kind == "generation" or (result.kind == "seq2seq" and len(result.methods) == 1):
        table = generation_table(result, k, **options)
    elif len(result.methods) == 1 and result.kind == "text":
        table = layer_table(result, k, **options)
    else:
        table = method_table(result, k, **options)
    meta = result.meta or {}
    lines = []
    added = meta.get("added")
    if added and added.get("methods"):  # what the call computed beyond what was asked, and why (api.defaults)
        lines.append(f"added: {', '.join(added['methods'])} ({added.get('why', '')})")
    for method in result.methods:  # a method that keeps a budget says what it spent, in which unit
        spent = meta.get(method)
        if isinstance(spent, dict) and "budget" in spent and "unit" in spent:
            exact = spent.get("exact") or []
            lines.append(f"{method}: spent {spent['cost']:.1f} of a budget of {spent['budget']:g} {spent['unit']}; "
                         f"{sum(exact)} of {len(exact)} scores exact, the rest estimated")
    if lines:
        table.caption = "\n".join([*([table.caption] if table.caption else []), *lines])
        table.caption_justify = "left"
    return table


def render_text(renderable: Any, width: int = 100) -> str:
    """Plain text of a rich renderable. Never Jupyter's display: inside a notebook rich would otherwise
    send an (empty) output of its own beside the text that ``print(result)`` prints."""
    console = Console(width=width, file=io.StringIO(), force_terminal=False, force_jupyter=False, color_system=None)
    console.print(renderable)
    return console.file.getvalue()
