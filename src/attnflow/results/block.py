"""The computed part of one method's scores, and the record of what was computed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError


@dataclass(frozen=True)
class Block:
    """The computed part of one method: ``values[i, k, :]`` is target ``targets[i]`` at layer
    ``layers[k]`` over every source."""

    values: np.ndarray  # (len(targets), len(layers), sources)
    targets: tuple[int, ...]
    layers: tuple[int, ...]

    @classmethod
    def full(cls, values: Any) -> Block:
        """Every target and every layer: ``values`` of shape ``(targets, layers, sources)``."""
        values = np.asarray(values, dtype=float)
        if values.ndim != 3:
            raise AttnflowError(f"expected scores of shape (targets, layers, sources); got {values.shape}")
        return cls(values, tuple(range(values.shape[0])), tuple(range(values.shape[1])))

    @classmethod
    def rows(cls, values: Any, targets: Sequence[int], n_layers: int | None = None) -> Block:
        """Some targets at every layer: ``values`` of shape ``(len(targets), layers, sources)``."""
        values = np.asarray(values, dtype=float)
        if values.ndim != 3:
            raise AttnflowError(f"expected scores of shape (targets, layers, sources); got {values.shape}")
        return cls(values, tuple(int(t) for t in targets), tuple(range(n_layers or values.shape[1])))


@dataclass(frozen=True)
class Computed:
    """Which targets and layers of a method hold scores (every pair of the two)."""

    targets: tuple[int, ...]
    layers: tuple[int, ...]
