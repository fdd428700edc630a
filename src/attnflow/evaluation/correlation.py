"""The paper's correlation protocol (section 4, Tables 1 and 2).

For each example: take the CLS row of raw attention, rollout and flow at every layer, rank its
scores over the input tokens, and compute Spearman's rho against an importance score (blank-out,
input gradients). Then report mean and standard deviation (ddof=0) over examples, per layer.

Two rank correlations: ``spearman`` (average ranks for ties, Pearson on the ranks: scipy's) and
``spearman_dense`` (the paper's notebook: dense ranks, ``1 - 6 sum d^2 / (n (n^2 - 1))`` with no
tie correction). Which tokens are ranked is the caller's choice (``attnflow.reproduction.protocol``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.config.registry import paper_methods
from attnflow.core.methods import method_rows
from attnflow.errors import AttnflowError


def rankdata(x: Any, axis: int = -1, method: str = "average") -> np.ndarray:
    """Ranks along ``axis`` from 1, ties given their average rank (``method="average"``) or
    consecutive ranks (``"dense"``); a slice holding NaN is all NaN. The same numbers as
    ``scipy.stats.rankdata`` (tested against it), without importing scipy.stats: the table of every
    ``attnflow explain`` ranks a row, and scipy.stats alone costs about a second of start-up."""
    a = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    flat = a.reshape(math.prod(a.shape[:-1]), a.shape[-1]) if a.ndim else a.reshape(1, 1)
    # every row at once (a bootstrap ranks a thousand resamples per interval): sort, mark where each
    # run of equal values starts and ends, and give each value its run's dense or average rank
    order = np.argsort(flat, axis=-1, kind="mergesort")
    ordered = np.take_along_axis(flat, order, axis=-1)
    starts = np.ones(flat.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    if method == "dense":
        sorted_ranks = starts.cumsum(axis=-1).astype(float)
    else:
        index = np.arange(flat.shape[-1])
        first = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
        ends = np.ones(flat.shape, dtype=bool)
        ends[:, :-1] = starts[:, 1:]
        last = np.minimum.accumulate(np.where(ends, index, flat.shape[-1])[:, ::-1], axis=-1)[:, ::-1]
        sorted_ranks = 0.5 * (first + last) + 1
    out = np.empty(flat.shape)
    np.put_along_axis(out, order, sorted_ranks, axis=-1)
    out[np.isnan(flat).any(axis=-1)] = np.nan
    return np.moveaxis(out.reshape(a.shape), -1, axis)


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


def spearman_dense(x: Any, y: Any) -> np.ndarray:
    """The paper's rank correlation along the last axis: ``1 - 6 sum_i d_i^2 / (n (n^2 - 1))`` with
    ``d_i`` the difference of dense ranks (ties share a rank, the next value gets the next integer).

    As in the paper's notebook (samiraabnar/Reflect, ``notebooks/attention_flow.ipynb``: pandas
    ``rank(method="dense")`` and this formula). It equals Spearman's rho when there are no ties; with
    ties it differs (the formula assumes ranks 1..n) and it is never NaN, so a constant score still
    yields a number. ``x`` and ``y`` broadcast against each other.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    n = x.shape[-1]
    if n < 2:
        raise AttnflowError(f"need at least 2 tokens to rank; got {n}")
    d = _dense_ranks(x) - _dense_ranks(y)
    return 1.0 - 6.0 * (d**2).sum(-1) / (n * (n**2 - 1.0))


def _dense_ranks(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1, x.shape[-1])
    return np.stack([rankdata(row, method="dense") for row in flat]).reshape(x.shape).astype(float)


def cls_scores(attentions: Any, *, position: int = 0, methods: Sequence[str] = paper_methods(),
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
              tokens: Sequence[int], rho: Callable[[Any, Any], np.ndarray] = spearman,
              ) -> dict[tuple[str, str], np.ndarray]:
    """``{(method, importance_name): rho per layer}`` for one example, ranking only ``tokens``."""
    idx = np.asarray(tokens)
    return {(m, name): rho(s[..., idx], imp[idx]) for m, s in scores.items() for name, imp in importance.items()}


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
