"""The faithfulness tables (what ``attnflow faithfulness`` prints; the report shows the same): per
layer, each method's Spearman with leave-one-out and its AOPC comprehensiveness / sufficiency; and at
the top layer, each method against position (bootstrap interval, partial rho given position, rho with
position and its note, the two position priors, and the method that agrees best on this input)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from attnflow.errors import AttnflowError
from attnflow.evaluation.position import NOTE, POSITION_NOTE, PRIORS


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


def _interval(pair: Any) -> str:
    if not pair or any(v is None for v in pair):
        return ""
    return f" [{pair[0]:+.2f}, {pair[1]:+.2f}]"


def summary_rows(data: dict) -> list[dict]:
    """At the top layer, per method and position prior: ``{"name", "spearman", "interval", "partial",
    "position", "note"}`` (None where undefined; ``note``: "this ranking mostly reflects position" when
    ``|position| >= 0.9``). Priors have no partial (it is undefined for position itself)."""
    rows = []
    for name, v in data["methods"].items():
        where = (v.get("position") or [None])[-1]
        rows.append({"name": name, "spearman": v["spearman"][-1], "interval": v.get("interval"),
                     "partial": (v.get("partial") or [None])[-1], "position": where,
                     "note": NOTE if where is not None and abs(where) >= POSITION_NOTE else ""})
    for name, v in (data.get("priors") or {}).items():
        rows.append({"name": name, "spearman": v.get("spearman"), "interval": v.get("interval"), "partial": None,
                     "position": 1.0 if name == PRIORS[0] else -1.0, "note": ""})
    return rows


def best_line(data: dict) -> str:
    """"Agrees best with leave-one-out on this input: X (rho ...)", plus a warning when that is a prior."""
    best = data.get("best")
    if not best:
        return ""
    line = f"agrees best with leave-one-out on this input: {best['method']} (rho {_value(best['spearman'])})"
    if best["method"] in PRIORS:
        line += ": no method ranks the tokens better than their position does"
    return line


def faithfulness_summary(result: Any) -> Table | None:
    """The top layer at a glance: each method's rho with its bootstrap interval over the ranked tokens,
    the partial rho given position, rho with position (and the position note), and the two position
    priors for scale. None for records written before these numbers existed."""
    data = faithfulness_record(result)
    if not data.get("priors"):
        return None
    rows = summary_rows(data)
    noted = [r["name"] for r in rows if r["note"] == NOTE]
    lines = [best_line(data)] + ([f"{', '.join(noted)}: {NOTE} (|rho with position| >= {POSITION_NOTE})"]
                                 if noted else [])
    table = Table(title="top layer, against position (rho: with leave-one-out; interval: 95 % bootstrap over "
                  "the ranked tokens)", title_justify="left", caption=escape("\n".join(lines)), caption_justify="left")
    for column in ("method", "rho", "interval", "partial rho | position", "rho with position"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for row in rows:
        name = escape(row["name"]) + (" [yellow]*[/yellow]" if row["note"] == NOTE else "")
        table.add_row(name, _value(row["spearman"]), _interval(row["interval"]).strip(), _value(row["partial"]),
                      _value(row["position"]))
    return table
