"""``solver="auto"``: the fastest exact solver for each layer of a request.

Both exact solvers are fast in different places (``benchmarks/flow.py`` measures them):

- ``.certified`` (sparse certificates, cut bounds, closed forms) wins wherever the cut bound of
  ``.cuts`` is usually reached on a sparse sub-network: the top layers of real models and every
  layer of diffuse attention, by up to 10x, more as ``n`` grows; layer-1 and layer-2 sources are
  closed forms there.
- ``.engine`` (dense warm-started push-relabel) wins by up to 1.6x for sources at layers 3 and
  4 of peaky real attention (MiniLM), where minimum cuts are irregular and the certificate has to
  grow towards the dense graph.

A request with at least ``RACE_ROWS`` sources in one layer (a full map) races the two on
``SAMPLE`` whole rows of that layer (the same sources for both, spread over the requested
positions), in process CPU time per pair, keeps the winner's values for those rows and gives it the
rest of the layer; smaller requests (single rows, the common case) go to ``.certified``. Both
are exact, so the choice changes only the time. Until issue 31 the race ran on the first 16 tokens
of the layer's first source: a ``[CLS]`` row over the first tokens is not what the layer costs,
and on MiniLM at 117 tokens it gave layer 5 to the engine, 1.3x slower there than the certified
solver on the whole layer. Rows differ in cost by 1.5x and more, so the two run the same rows: a
race on different rows (tried, so that no row is solved twice) gave MiniLM's layer 3 to the
engine, 1.4x slower there on the whole layer.

Direction. A layer's full map, every position to every token, is also the map of the reversed
graph (``reversed_graph``: arcs turned round, so the input tokens are the sources and the
layer's positions the sinks), whose rows are the map's columns. The solvers' sub-networks, cut
bounds and warm chains see a different graph there, and on real attention it is often the cheaper
one: MiniLM at 117 tokens, one thread, the certified solver took 4.4-5.6 s for layer 6 forwards and
2.5-3.7 s backwards, 10.4-14.2 s and 7.1-10.1 s for layer 4 (four text kinds); at layer 3 the
engine forwards is mostly the fastest. So a full map (every position requested) races backwards
too, first, the certified solver on ``SAMPLE`` columns (kept); the forward race follows, each
solver stopped between two rows once it can no longer beat the fastest so far (the engine at the
top layers costs 2-3x the certified solver, and racing it to the end there cost a sixth of the
layer), and the rest of the layer goes to the direction and solver with the lowest time per pair.
(The engine backwards was the fastest of the four on 4 of those 16 layers, by 1.02-1.21x over the
next; it is not raced: 4 more rows in every layer for a small gain in a few.)
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
         graph: certified.Graph | None = None, names: tuple[str, ...] = ("certified", "engine"),
         beat: float = np.inf) -> tuple[dict[str, float], np.ndarray | None]:
    """The solvers ``names`` in turn, each on every token of the same sources ``(layer + 1, p)``
    for ``p`` in ``positions``, timed in process CPU time: seconds per pair of each, and the rows
    ``(len(positions), n)`` of the fastest (all are the exact flow). A solver stops between two
    rows once it can no longer beat ``beat`` seconds per pair or a faster one before it (its time
    is then ``inf``; rows ``None`` when none finished). ``cancel``: as in
    ``attnflow.core.flow.oracle.solve``; ``graph``: ``.certified.graph_of`` of ``a`` when
    the caller has it (prepared here otherwise, outside either solver's time)."""
    n = a.shape[-1]
    sinks = np.arange(n)
    graph = certified.graph_of(a) if graph is None else graph
    runs = {"certified": partial(certified.solve_sinks, graph=graph), "engine": engine.solve_sinks}
    per_pair, best = {}, None
    for name in names:
        limit = min([beat, *per_pair.values()]) * len(positions) * n
        rows = np.zeros((len(positions), n))
        start = time.process_time()
        for k, p in enumerate(positions):
            if time.process_time() - start > limit:
                per_pair[name] = np.inf
                break
            rows[k] = runs[name](a, layer + 1, int(p), sinks, cancel)
        else:
            per_pair[name] = (time.process_time() - start) / (len(positions) * n)
            if per_pair[name] <= limit / (len(positions) * n):
                best = rows
    return per_pair, best


def reversed_graph(a: np.ndarray, top: int) -> np.ndarray:
    """The layers below ``top`` with every arc turned round, as a stack the solvers read: arc
    ``(m, u) -> (m - 1, v)`` of capacity ``A_m[u, v]`` becomes ``(top - m + 1, v) -> (top - m, u)``,
    so the flow from ``(top, j)`` to ``(0, q)`` here is the flow from ``(top, q)`` to ``(0, j)`` in
    ``a`` (a flow's arcs turned round are a flow of the same value, and a cut's are a cut)."""
    return np.ascontiguousarray(a[:top][::-1].transpose(0, 2, 1))


def _sample(count: int) -> np.ndarray:
    """``SAMPLE`` indices evenly inside ``0..count-1`` (neither end)."""
    return np.unique(np.linspace(0, count - 1, SAMPLE + 2).round().astype(np.int64)[1:-1])


def _layer(a: np.ndarray, layer: int, positions: np.ndarray, graph: certified.Graph,
           progress: Callable[[int], None] | None, cancel: np.ndarray) -> np.ndarray:
    """One layer of a full map ``(len(positions), n)``: when ``positions`` is every token, the
    certified solver backwards on ``SAMPLE`` columns (``reversed_graph``: sources at input
    tokens, every position a sink), then the race forwards (sources at ``positions``, every sink,
    both solvers on the same rows, each stopped once it cannot win); the solver and direction with
    the lowest time per pair solve the rest."""
    n = a.shape[-1]
    out = np.zeros((len(positions), n))
    sample = _sample(len(positions))
    ways, beat = {}, np.inf
    if len(positions) == n and (positions == np.arange(n)).all():
        # backwards first: the fastest way on most layers of real models, and a time to beat
        b = reversed_graph(a, layer + 1)
        b_graph = certified.graph_of(b)
        tokens = _sample(n)
        back, columns = race(b, layer, tokens, cancel, b_graph, names=("certified",))
        out[:, tokens] = columns.T
        ways[("backwards", "certified")] = (b, b_graph, back["certified"])
        beat = back["certified"]
    if not cancel[0]:
        forward, rows = race(a, layer, positions[sample], cancel, graph, beat=beat)
        if rows is not None:
            out[sample] = rows
        ways.update({("forwards", name): (a, graph, seconds) for name, seconds in forward.items()})
    if cancel[0]:
        return out
    if progress is not None:
        progress(len(sample))
    (direction, name), (g, prepared, _) = min(ways.items(), key=lambda way: way[1][2])
    solve_rest = partial(certified.solve, graph=prepared) if name == "certified" else engine.solve
    if direction == "forwards":
        rest = np.setdiff1d(np.arange(len(positions)), sample)
        out[rest] = solve_rest(g, np.array([layer]), positions[rest], progress, cancel=cancel)[0]
    else:  # the reversed rows are columns here, as many as the rows left (both samples are _sample(n))
        rest = np.setdiff1d(np.arange(n), tokens)
        out[:, rest] = solve_rest(g, np.array([layer]), rest, progress, cancel=cancel)[0].T
    return out


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as ``attnflow.core.flow.oracle.solve``."""
    a = engine.capacities(a)
    cancel = engine.never() if cancel is None else cancel
    layers, positions = np.asarray(layers), np.asarray(positions)
    if len(positions) < RACE_ROWS:
        return certified.solve(a, layers, positions, progress, cancel=cancel)
    out = np.zeros((len(layers), len(positions), a.shape[-1]))
    graph = certified.graph_of(a)  # one preparation for every layer, race and rest alike
    for i, layer in enumerate(layers):
        if layer < 2:  # closed forms
            out[i] = certified.solve(a, np.array([layer]), positions, progress, cancel=cancel, graph=graph)[0]
        else:
            out[i] = _layer(a, int(layer), positions, graph, progress, cancel)
        if cancel[0]:
            break
    return out
