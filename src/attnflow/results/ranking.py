"""Ranking sources by score: the one place ``top`` tokens are chosen."""

from __future__ import annotations

from typing import Callable

import numpy as np


def ranked(scores: np.ndarray, labels: list[str], k: int,
           keep: Callable[[int], bool] = lambda i: True) -> list[tuple[int, str, float]]:
    """The ``k`` highest ``(position, label, score)`` among the positions ``keep`` accepts; ties keep
    source order."""
    order = [int(i) for i in np.argsort(-np.asarray(scores), kind="stable") if keep(int(i))]
    return [(i, labels[i], float(scores[i])) for i in order[:k]]
