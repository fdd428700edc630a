"""The position note: "this ranking mostly reflects position".

On causal decoders the paper's rollout and flow rank prompt tokens almost exactly by reverse position
(docs/decoders.md, the study). A view that shows such a row as an explanation adds one line saying so
whenever the row's ranking has ``|Spearman| >= POSITION_NOTE`` (0.9) with position.

Which sources are ranked: the input sources (the prompt of a generation) that the target can see (for
a causal result, those at or before it), less the target itself and special tokens, as the
faithfulness check ranks them; at least 3 are needed, else there is no note. Works for any method's
row, whatever its scale or sign.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.evaluation.position import NOTE, POSITION_NOTE, position_rho


def ranked_sources(result: Any, t: int) -> list[int]:
    """The source positions the position note ranks for target ``t`` (module docstring)."""
    if result.kind == "image":
        return []
    meta = result.meta or {}
    me = result.target_positions[t]
    special = {int(j) for j in meta.get("special", [])}
    visible = result.input_length  # a generation's prompt: every generated token sees all of it
    if me is not None and (result.kind == "generation" or meta.get("causal", False)):
        visible = min(visible, int(me) + 1)
    return [j for j in range(visible) if j != me and j not in special]


def row_position_rho(result: Any, method: str, t: int, layer: Any = -1) -> float:
    """Spearman of target ``t``'s ``method`` row at ``layer`` with position over ``ranked_sources``;
    NaN when fewer than 3 sources are ranked, the row is constant, or not computed there."""
    keep = ranked_sources(result, t)
    if len(keep) < 3:
        return float("nan")
    try:
        values = np.asarray(result.layer_scores(method, t, layer), dtype=float)[keep]
    except Exception:  # a layer or target this method has no scores for: no note to make
        return float("nan")
    if not np.isfinite(values).all():
        return float("nan")
    return float(position_rho(values, keep))


def position_note(result: Any, method: str, t: int, layer: Any = -1) -> str:
    """``NOTE`` (with the rho) when the row mostly reflects position, else ``""``."""
    rho = row_position_rho(result, method, t, layer)
    return f"{NOTE} (ρ {rho:+.2f})" if np.isfinite(rho) and abs(rho) >= POSITION_NOTE else ""
