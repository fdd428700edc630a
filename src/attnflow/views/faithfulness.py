"""The faithfulness table: per layer, each method's Spearman with leave-one-out and its AOPC
comprehensiveness / sufficiency (what ``attnflow faithfulness`` prints; the report shows the same)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from attnflow.errors import AttnflowError


def _value(x: Any) -> str:
    return "–" if x is None else f"{x:+.2f}"


def faithfulness_record(result: Any) -> dict:
    """The plain faithfulness dict a result carries (``meta["faithfulness"]``)."""
    data = result.meta.get("faithfulness") if isinstance(getattr(result, "meta", None), dict) else None
    if not isinstance(data, dict) or "methods" not in data:
        raise AttnflowError("this result carries no faithfulness numbers; make it with attnflow faithfulness")
    return data


def faithfulness_table(result: Any) -> Table:
    """Rows = layers (top first); per method: rho (Spearman with the leave-one-out logit drop, higher
    is better), compr. (AOPC comprehensiveness, higher is better), suff. (AOPC sufficiency, lower is
    better)."""
    data = faithfulness_record(result)
    levels = "/".join(f"{round(100 * f)}" for f in data["fractions"])
    what = "next token" if (data.get("meta") or {}).get("head") == "decoder" else "class"
    title = f"faithfulness to the predicted {what} {escape(repr(data['label']))} (p = {data['probability']:.2f})"
    caption = (f"rho: Spearman with the leave-one-out logit drop (higher is better); compr. / suff.: AOPC "
               f"comprehensiveness (higher is better) / sufficiency (lower is better), top {levels} % deleted / kept")
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    table.add_column("layer", justify="right")
    methods = list(data["methods"])
    for m in methods:  # one column per method keeps 80 columns enough for three methods
        table.add_column(f"{m}\nrho  compr  suff", justify="right")
    layers = len(next(iter(data["methods"].values()))["spearman"])
    for layer in range(layers - 1, -1, -1):
        cells = []
        for m in methods:
            v = data["methods"][m]
            cells.append(" ".join(_value(v[key][layer]) for key in ("spearman", "comprehensiveness", "sufficiency")))
        table.add_row(str(layer + 1), *cells)
    return table
