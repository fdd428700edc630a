"""``solver="auto"``: the fastest exact solver for each layer of a request.

Both exact solvers are fast in different places (``benchmarks/flow.py`` measures them):

- :mod:`.certified` (sparse certificates, cut bounds, closed forms) wins wherever the cut bound of
  :mod:`.cuts` is usually reached on a sparse sub-network: the top layers of real models and every
  layer of diffuse attention, by up to 10x, more as ``n`` grows; layer-1 and layer-2 sources are
  closed forms there.
- :mod:`.engine` (dense warm-started push-relabel) wins by up to 1.6x for sources at layers 3 and
  4 of peaky real attention (MiniLM), where minimum cuts are irregular and the certificate has to
  grow towards the dense graph.

A request with at least ``RACE_ROWS`` sources in one layer (a full map) races the two on the first
``PROBE`` tokens of that layer's first source, in process CPU time, and gives the layer to the
faster; smaller requests (single rows, the common case) go to :mod:`.certified`. Both are exact, so
the choice changes only the time.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from attnflow.core.flow import certified, engine

RACE_ROWS = 16
PROBE = 16


def faster(a: np.ndarray, layer: int, position: int) -> str:
    """Which solver is faster on ``PROBE`` tokens of the source ``(layer + 1, position)``."""
    sinks = np.arange(min(PROBE, a.shape[-1]))
    times = {}
    for name, run in (("certified", certified.solve_sinks), ("engine", engine.solve_sinks)):
        start = time.process_time()
        run(a, layer + 1, position, sinks)
        times[name] = time.process_time() - start
    return min(times, key=times.get)


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as :func:`attnflow.core.flow.oracle.solve`."""
    a = engine.capacities(a)
    layers, positions = np.asarray(layers), np.asarray(positions)
    if len(positions) < RACE_ROWS:
        return certified.solve(a, layers, positions, progress, cancel=cancel)
    out = np.zeros((len(layers), len(positions), a.shape[-1]))
    for i, layer in enumerate(layers):
        use = certified if layer < 2 or faster(a, int(layer), int(positions[0])) == "certified" else engine
        out[i] = use.solve(a, np.array([layer]), positions, progress, cancel=cancel)[0]
    return out
