"""The paper's correlation protocol (section 4, Tables 1 and 2).

For each example: take the CLS row of raw attention, rollout and flow at every layer, rank its
scores over the input tokens, and compute Spearman's rho against an importance score (blank-out,
input gradients). Then report mean and standard deviation (ddof=0) over examples, per layer.

Which tokens are ranked: only the sentence's words; CLS (and any other special token) is left out.
Blank-out and gradients of CLS are not comparable to those of words (CLS is the read-out position
itself and, under the residual, rollout and flow give it a large share by construction), so keeping
it would add one outlier pair that dominates a 4-25 point rank correlation. (We could not check what
the paper's notebook did; this is our choice, applied to every method alike.)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

from attnflow.core.methods import METHODS, method_rows
from attnflow.errors import AttnflowError


def spearman(x: Any, y: Any) -> np.ndarray:
    """Spearman's rho along the last axis (ties get average ranks); NaN where either side is constant.

    ``x`` and ``y`` broadcast against each other, e.g. ``(layers, n)`` against ``(n,)``.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if x.shape[-1] < 2:
        raise AttnflowError(f"need at least 2 tokens to rank; got {x.shape[-1]}")
    rx = rankdata(x, axis=-1) - (x.shape[-1] + 1) / 2
    ry = rankdata(y, axis=-1) - (y.shape[-1] + 1) / 2
    denom = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (rx * ry).sum(-1) / np.where(denom > 0, denom, 1), np.nan)


def cls_scores(attentions: Any, *, position: int = 0, methods: Sequence[str] = METHODS,
               flow_solver: str = "auto") -> dict[str, np.ndarray]:
    """The row of ``position`` (CLS) per layer for each method: ``{method: (layers, n)}``.

    ``attentions`` is one example's stack, e.g. the Hugging Face ``output_attentions`` tuple.
    Rollout and flow use the library defaults (residual 0.5, mean over heads), as the paper did.
    """
    return {method: _numpy(method_rows(attentions, method, [position], solver=flow_solver))[:, 0]
            for method in methods}


def _numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().double().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=float)


def correlate(scores: Mapping[str, np.ndarray], importance: Mapping[str, np.ndarray],
              tokens: Sequence[int]) -> dict[tuple[str, str], np.ndarray]:
    """``{(method, importance_name): rho per layer}`` for one example, ranking only ``tokens``."""
    idx = np.asarray(tokens)
    return {(m, name): spearman(s[..., idx], imp[idx]) for m, s in scores.items() for name, imp in importance.items()}


def summarize(per_example: Iterable[Mapping[tuple[str, str], np.ndarray]]) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Mean, std (ddof=0) and count per layer over examples; NaN (a constant score) is left out."""
    stacked: dict[tuple[str, str], list[np.ndarray]] = {}
    for result in per_example:
        for key, rho in result.items():
            stacked.setdefault(key, []).append(np.asarray(rho, dtype=float))
    if not stacked:
        raise AttnflowError("no examples to summarize; evaluate at least one example")
    out = {}
    for key, rows in stacked.items():
        values = np.stack(rows)
        count = np.isfinite(values).sum(0)
        with warnings.catch_warnings():  # an all-NaN layer is reported as NaN, with n = 0
            warnings.simplefilter("ignore", RuntimeWarning)
            out[key] = {"mean": np.nanmean(values, 0), "std": np.nanstd(values, 0), "n": count}
    return out
