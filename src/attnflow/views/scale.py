"""Sink-aware colour scales: which sources the figures, the report and the tables keep out of the scale.

A few sources can take most of a row's mass for reasons that say little about the input: the target
itself (under the residual, rollout and flow give every position a large share of its own row), special
tokens (``[CLS]``, ``[SEP]``), and an *attention sink*, a token on which heads park attention (a
decoder's first token; SmolLM2 puts 0.8 of every generated token's rollout row on it). Scaled to such a
token, every other source is near white. By default the views leave these sources out of the colour
scale (they are drawn saturated, their values unchanged) and say so in the legend.

A source is the row's **sink** when it is not the target and holds more than half (``SINK_SHARE``) of the
row's mass (the sum over every source) at the top computed layer. At most one source can.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SINK_SHARE = 0.5


def dominant(values: Any, skip: Any = ()) -> tuple[int, float] | None:
    """``(position, share)`` of the one source, outside ``skip``, holding more than ``SINK_SHARE`` of
    the row's mass ``values`` (NaN ignored), or None."""
    row = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0)
    total = float(np.abs(row).sum())
    if total <= 0:
        return None
    j = int(np.argmax(row))
    share = float(row[j]) / total
    return (j, share) if share > SINK_SHARE and j not in set(int(s) for s in skip) else None


def _top_layer_row(result: Any, method: str, t: int) -> np.ndarray | None:
    block = result.blocks[method]
    if t not in block.targets:
        return None
    top = max(block.layers)
    return block.values[block.targets.index(t), list(block.layers).index(top)]


def target_source(result: Any, t: int) -> int | None:
    """The source position that is target ``t`` itself (its own column), if the result has one."""
    if result.kind == "image":
        return None
    p = result.target_positions[t]
    return p if p is not None and 0 <= p < result.n_sources else None


def sink_of(result: Any, method: str, t: int) -> tuple[int, float] | None:
    """``(position, share of the top layer's row)`` of the sink of target ``t``'s ``method`` row (see
    the module docstring), or None."""
    if result.kind == "image":
        return None
    row = _top_layer_row(result, method, t)
    if row is None:
        return None
    me = target_source(result, t)
    return dominant(row, () if me is None else (me,))


def sink(result: Any, method: str, t: int) -> int | None:
    """The sink's position (``sink_of``), or None."""
    found = sink_of(result, method, t)
    return None if found is None else found[0]


def left_out(result: Any, method: str, t: int, *, sink_aware: bool = True,
             content_only: bool = False) -> dict[int, str]:
    """Source position -> why it is kept out of the colour scale ("target", "special", "sink",
    "common": punctuation or a very common word, with ``content_only``). Images: nothing."""
    out: dict[int, str] = {}
    if result.kind == "image":
        return out
    if content_only:
        from attnflow.results.words import is_content

        out.update({j: "common" for j, s in enumerate(result.sources[: result.input_length]) if not is_content(s)})
    if sink_aware:
        out.update({int(j): "special" for j in (result.meta or {}).get("special", []) if 0 <= int(j) < result.n_sources})
        found = sink(result, method, t)
        if found is not None:
            out[found] = "sink"
        me = target_source(result, t)
        if me is not None:
            out[me] = "target"
    return out


def scale_max(values: Any, excluded: Any) -> float:
    """The colour scale's top: the largest score outside ``excluded`` columns (the last axis), or of
    every column when all are excluded."""
    values = np.asarray(values, dtype=float)
    keep = np.ones(values.shape[-1], dtype=bool)
    keep[[int(j) for j in excluded if 0 <= int(j) < values.shape[-1]]] = False
    chosen = values[..., keep] if keep.any() else values
    finite = chosen[np.isfinite(chosen)]
    top = float(finite.max()) if finite.size else 0.0
    return top if top > 0 else 1.0


def scale_limits(values: Any, excluded: Any) -> tuple[float, float, bool]:
    """``(vmin, vmax, signed)`` of a panel's colour scale: ``(0, scale_max)`` for scores that are never
    negative; symmetric about zero (``signed``) when a kept score is negative, so that evidence against
    the prediction (an ablation that raises the logit) never looks like no effect."""
    values = np.asarray(values, dtype=float)
    keep = np.ones(values.shape[-1], dtype=bool)
    keep[[int(j) for j in excluded if 0 <= int(j) < values.shape[-1]]] = False
    chosen = values[..., keep] if keep.any() else values
    finite = chosen[np.isfinite(chosen)]
    if finite.size and float(finite.min()) < 0:
        top = float(np.abs(finite).max())
        return -top, top, True
    return 0.0, scale_max(values, excluded), False


def sink_share(result: Any, method: str, t: int) -> float | None:
    """The share of target ``t``'s top-layer row that its sink holds (None without a sink)."""
    found = sink_of(result, method, t)
    return None if found is None else found[1]


def legend(result: Any, excluded: dict[int, str], quote: Any = repr, share: float | None = None) -> str:
    """One sentence for a legend: what the colour scale leaves out, or "" when nothing. ``share``: the
    sink's share of the top layer's row (``sink_share``)."""
    if not excluded:
        return ""
    parts = []
    held = f" (holds {share:.2f} of the top layer's row)" if share is not None else ""
    for reason, what, extra in (("target", "the target", ""), ("special", "special tokens", ""),
                                ("sink", "the dominant token", held), ("common", "punctuation/common words", "")):
        where = [j for j, r in sorted(excluded.items()) if r == reason]
        if where:
            names = " ".join(quote(result.sources[j]) for j in where[:4]) + (" ..." if len(where) > 4 else "")
            parts.append(f"{what} {names}{extra}")
    return "colour scale leaves out " + ", ".join(parts) + ": drawn saturated"
