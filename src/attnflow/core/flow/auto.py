"""``solver="auto"``: the fastest exact solver for each layer of a request.

Both exact solvers are fast in different places (``benchmarks/flow.py`` measures them):

- :mod:`.certified` (sparse certificates, cut bounds, closed forms) wins wherever the cut bound of
  :mod:`.cuts` is usually reached on a sparse sub-network: the top layers of real models and every
  layer of diffuse attention, by up to 10x, more as ``n`` grows; layer-1 and layer-2 sources are
  closed forms there.
- :mod:`.engine` (dense warm-started push-relabel) wins by up to 1.6x for sources at layers 3 and
  4 of peaky real attention (MiniLM), where minimum cuts are irregular and the certificate has to
  grow towards the dense graph.

A request with at least ``RACE_ROWS`` sources in one layer (a full map) races the two on
``SAMPLE`` whole rows of that layer (sources spread over the requested positions), in process CPU
time, keeps the winner's values for those rows and gives it the rest of the layer; smaller requests
(single rows, the common case) go to :mod:`.certified`. Both are exact, so the choice changes only
the time. Until issue 31 the race ran on the first 16 tokens of the layer's first source: a
``[CLS]`` row over the first tokens is not what the layer costs, and on MiniLM at 117 tokens it gave
layer 5 to the engine, 1.3x slower there than the certified solver on the whole layer; one whole
row was still a coin toss where the two are within 1.5x of each other.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

import numpy as np

from attnflow.core.flow import certified, engine

RACE_ROWS = 16
SAMPLE = 4


def race(a: np.ndarray, layer: int, positions: np.ndarray, cancel: np.ndarray | None = None,
         graph: certified.Graph | None = None) -> tuple[str, np.ndarray]:
    """Both solvers on every token of the sources ``(layer + 1, p)`` for ``p`` in ``positions``,
    timed in process CPU time: the faster's name and its rows ``(len(positions), n)`` (both are
    the exact flow). ``cancel``: as in :func:`attnflow.core.flow.oracle.solve`; ``graph``:
    :func:`.certified.graph_of` of ``a`` when the caller has it (prepared here otherwise, once for
    all the rows and outside either solver's time)."""
    sinks = np.arange(a.shape[-1])
    graph = certified.graph_of(a) if graph is None else graph
    times, rows = {}, {}
    for name, run in (("certified", partial(certified.solve_sinks, graph=graph)), ("engine", engine.solve_sinks)):
        start = time.process_time()
        rows[name] = np.stack([run(a, layer + 1, int(p), sinks, cancel) for p in positions])
        times[name] = time.process_time() - start
    best = min(times, key=times.get)
    return best, rows[best]


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as :func:`attnflow.core.flow.oracle.solve`."""
    a = engine.capacities(a)
    layers, positions = np.asarray(layers), np.asarray(positions)
    if len(positions) < RACE_ROWS:
        return certified.solve(a, layers, positions, progress, cancel=cancel)
    out = np.zeros((len(layers), len(positions), a.shape[-1]))
    graph = certified.graph_of(a)  # one preparation for every layer, race and rest alike
    solvers = {"certified": partial(certified.solve, graph=graph), "engine": engine.solve}
    sample = np.unique(np.linspace(0, len(positions) - 1, SAMPLE + 2).round().astype(np.int64)[1:-1])
    rest = np.setdiff1d(np.arange(len(positions)), sample)
    for i, layer in enumerate(layers):
        if layer < 2:
            out[i] = solvers["certified"](a, np.array([layer]), positions, progress, cancel=cancel)[0]
            continue
        name, out[i, sample] = race(a, int(layer), positions[sample], cancel, graph)
        if cancel is not None and cancel[0]:
            break
        if progress is not None:
            progress(len(sample))
        out[i, rest] = solvers[name](a, np.array([layer]), positions[rest], progress, cancel=cancel)[0]
    return out
