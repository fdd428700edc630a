"""Position as a rival explanation: priors, partial rank correlation given position, bootstrap intervals.

On causal decoders rollout and flow rank prompt tokens almost exactly by reverse position, so their
agreement with leave-one-out follows where a prompt puts its evidence, not what the model reads.
Three numbers keep that honest:

- **position priors**: two rankings that know nothing of the input, ``later first`` (score = position)
  and ``earlier first`` (score = -position). A method that does not beat the better prior has not
  shown it reads anything but position.
- **partial Spearman given position**: Spearman's rho of a method's scores with leave-one-out once
  position is regressed out of both rankings. With ``r_xy``, ``r_xz``, ``r_yz`` the Spearman
  correlations of scores ``x``, importance ``y`` and position ``z``,

      rho_xy.z = (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2) (1 - r_yz^2))

  (the first-order partial correlation applied to ranks; e.g. Conover, "Practical Nonparametric
  Statistics", and pingouin's ``partial_corr(method="spearman")``). It equals the Pearson correlation
  of the residuals of ``rank(x)`` and ``rank(y)`` after a least-squares fit on ``[1, rank(z)]``.
  NaN where a ranking is constant or is (up to sign) position itself.
- **bootstrap interval**: a percentile interval of a correlation, resampling the ranked tokens (for
  one input) or the prompts (for a study) with replacement; a fixed seed makes it reproducible.

``position_rho`` (Spearman of a ranking with position) is what the views use for the note "this
ranking mostly reflects position" (``|rho| >= POSITION_NOTE``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import rankdata, spearman

POSITION_NOTE = 0.9  # |Spearman with position| at or above this: "this ranking mostly reflects position"
NOTE = "this ranking mostly reflects position"
PRIORS = ("position: later first", "position: earlier first")


def priors(positions: Sequence[int]) -> dict[str, np.ndarray]:
    """The two position priors over ``positions``: ``{name: (m,)}`` scores (higher = ranked first)."""
    z = np.asarray(positions, dtype=float)
    return {PRIORS[0]: z, PRIORS[1]: -z}


def position_rho(scores: Any, positions: Sequence[int]) -> np.ndarray:
    """Spearman of each row of ``scores`` (``(..., m)``, already restricted to ``positions``) with position."""
    return np.asarray(spearman(scores, np.asarray(positions, dtype=float)))


def partial_spearman(x: Any, y: Any, z: Any) -> np.ndarray:
    """Spearman's rho of ``x`` and ``y`` given ``z``, along the last axis (broadcasting, like
    ``spearman``); NaN where it is undefined."""
    x, y, z = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(z, dtype=float))
    if x.shape[-1] < 3:
        raise AttnflowError(f"a partial correlation needs at least 3 tokens; got {x.shape[-1]}")
    rxy, rxz, ryz = spearman(x, y), spearman(x, z), spearman(y, z)
    denom = (1 - rxz**2) * (1 - ryz**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (rxy - rxz * ryz) / np.sqrt(np.where(denom > 1e-12, denom, np.nan))
    return np.clip(out, -1.0, 1.0)


def residual_rank_correlation(x: Any, y: Any, z: Any) -> float:
    """The same partial correlation, computed the other way (for tests and readers): Pearson of the
    least-squares residuals of ``rank(x)`` and ``rank(y)`` on ``[1, rank(z)]``. 1-D inputs."""
    rx, ry, rz = (rankdata(np.asarray(v, dtype=float)) for v in (x, y, z))
    design = np.column_stack([np.ones_like(rz), rz])
    ex = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    ey = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    denom = np.sqrt((ex**2).sum() * (ey**2).sum())
    return float((ex * ey).sum() / denom) if denom > 1e-9 else float("nan")


def bootstrap_interval(statistic: Callable[[np.ndarray], float], count: int, *, resamples: int = 1000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``statistic(indices)`` over ``resamples`` draws of ``count`` indices with
    replacement. Draws where the statistic is NaN (e.g. a constant resample) are left out; NaN, NaN if
    fewer than half remain."""
    if count < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, count, count)) for _ in range(resamples)], dtype=float)
    return _percentiles(values, resamples, level)


def spearman_interval(x: Any, y: Any, **options: Any) -> tuple[float, float]:
    """Bootstrap interval of Spearman's rho of two 1-D rankings, resampling their tokens together."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return _interval(lambda i: spearman(x[i], y[i]), len(x), **options)


def mean_interval(values: Any, **options: Any) -> tuple[float, float]:
    """Bootstrap interval of the mean of ``values`` (NaN left out), resampling them (e.g. prompts)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return _interval(lambda i: v[i].mean(-1), len(v), **options)


def _interval(statistic: Callable[[np.ndarray], np.ndarray], count: int, *, resamples: int = 1000,
              level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """``bootstrap_interval`` with every resample at once: ``statistic`` takes ``(resamples, count)``
    indices and returns ``(resamples,)``. The same draws as ``bootstrap_interval`` with the same seed."""
    if count < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = np.stack([rng.integers(0, count, count) for _ in range(resamples)])
    return _percentiles(np.asarray(statistic(draws), dtype=float), resamples, level)


def _percentiles(values: np.ndarray, resamples: int, level: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if len(values) < resamples / 2:
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))
