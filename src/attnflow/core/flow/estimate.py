"""How long a flow computation will take, said before it starts.

Flow costs one max-flow per (row, input token), a row being one (target position, layer) node of
one graph (per example, per head when heads are not fused): ``rows x n`` max-flows, each on a graph
of up to ``layer x n^2`` arcs. No formula predicts a max-flow solver's time on real attention well
(it depends on how peaky the attention is and how much each warm start saves), so the estimate is
measured: rows at up to six requested layers (the lowest, the highest and others spread between)
and up to three requested positions (spread inside the requested ones) are timed with the same
solver on the same attention cut down to 16, 32, 64, ... tokens (evenly spaced tokens, rows
re-normalised; a causal map stays causal), doubling while the next size fits a time budget (10 % of
a rough guess of the run, between 0.5 and 3 s per size); the growth exponent ``alpha`` is
fitted from the CPU times of the last two sizes (clipped to [1, 4]; CPU time barely moves when other
processes share the machine, wall time does) and the wall time extrapolated as
``t(n) = t(s) (n / s)^alpha``, the other layers' rows interpolated between the timed ones. Inputs up
to 128 tokens are timed at their own size when the budget allows. The rough guess
(``UNIT_SECONDS * layer * n^3`` per row) also decides whether to measure at all.

On MiniLM and SmolLM2 inputs of 128 to 512 tokens (benchmarks/long_flow.py) the real time was 0.4 to
1.0 times the estimate: it errs long, most on decoders, whose flow grows more slowly at larger sizes
than the small calibration graphs show. Treat it as an order of magnitude.

Why six layers and three positions (issue 31): a row's cost is not monotone in its layer (on MiniLM
the middle layers' rows cost 2-3x the top layer's) and differs between positions, so three layers
of one position gave full maps (MiniLM, 117 tokens, every position of every layer) estimates up to
2 times too short (wall/estimate 0.97 to 2.03 on four kinds of text); six layers of three positions
gave 0.80 to 1.27, for about 1 s of a 30 s run (`benchmarks/flow.py --only full` prints the ratio;
docs/long-inputs.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

CALIBRATION_TOKENS = 128
# Seconds per unit of ``layer * n^3`` for one row: the engine measured 0.6e-9 to 2.8e-9 on the
# benchmark cases of docs/performance.md; the larger end, so that a job is calibrated rather than
# guessed whenever it might be long.
UNIT_SECONDS = 3e-9
CALIBRATION_SECONDS = 0.5  # the least time one calibration size may take
CALIBRATION_SHARE = 0.1  # calibration may take this share of the (guessed) run
CALIBRATION_MAX = 3.0  # and at most this long for one size
CALIBRATE_ABOVE = 0.5  # seconds (cheap guess) above which the estimate is measured
WARN_SECONDS = 10.0  # Python flow() warns when a run is estimated to take longer than this
SAMPLE_LAYERS = 6  # requested layers timed (the rest interpolated)
SAMPLE_POSITIONS = 3  # requested positions timed per layer (their mean stands for every position)


@dataclass(frozen=True)
class FlowEstimate:
    """The work of one flow call and its expected duration.

    rows: (target position, layer) rows, over every example and head; tokens: the input length n;
    max_flows: ``rows * tokens``; seconds: expected wall time; longest_row: expected time of the
    costliest single row (what one uninterruptible solver call may take); how: how it was obtained.
    """

    rows: int
    tokens: int
    max_flows: int
    seconds: float
    longest_row: float
    how: str
    layer_seconds: tuple[float, ...] = ()  # one row at each requested layer, in solving order
    positions: int = 1  # rows per layer and graph

    def seconds_for(self, done: int) -> float:
        """Expected time of the first ``done`` rows in the order flow solves them (graph by graph,
        layer by layer, every position): rows of higher layers cost more, so a plain rate would
        promise the end too early."""
        per_graph = len(self.layer_seconds) * self.positions
        if not per_graph:
            return self.seconds * done / max(self.rows, 1)
        graphs, rest = divmod(int(done), per_graph)
        layers, partial = divmod(rest, self.positions)
        one_graph = sum(self.layer_seconds) * self.positions
        spent = graphs * one_graph + sum(self.layer_seconds[:layers]) * self.positions
        if layers < len(self.layer_seconds):
            spent += self.layer_seconds[layers] * partial
        # the worker's start-up, if any, is in ``seconds`` but in no row
        return spent * self.seconds / max(one_graph * self.rows / per_graph, 1e-12)

    def __str__(self) -> str:
        return (f"attention flow: {self.rows:,} rows x {self.tokens:,} tokens = {self.max_flows:,} max-flows, "
                f"estimated {format_duration(self.seconds)} ({self.how})")


def format_duration(seconds: float) -> str:
    """``0.4 s``, ``42 s``, ``5.2 min``, ``3.1 h``, ``4.2 days``, ``2.3 years``."""
    for unit, size, above in (("years", 365.25 * 86400, 2.0), ("days", 86400, 2.0), ("h", 3600, 2.0),
                              ("min", 60, 100 / 60)):
        if seconds >= above * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def guess_seconds(n: int, layers: Sequence[int], per_layer_rows: int) -> float:
    """The rough guess, not timed: ``UNIT_SECONDS * (layer + 1) * n^3`` per row (generous for long
    rows; short ones are dominated by fixed costs it leaves out)."""
    return UNIT_SECONDS * per_layer_rows * sum(layer + 1 for layer in layers) * float(n) ** 3


def subgraph(a: np.ndarray, size: int, position: int) -> tuple[np.ndarray, int]:
    """``size`` evenly spaced tokens of ``a`` ``(layers, n, n)`` (the last one and ``position``
    included), rows re-normalised; returns it and where ``position`` landed."""
    n = a.shape[-1]
    keep = np.unique(np.concatenate([np.linspace(0, n - 1, size).round().astype(int), [position]]))
    if len(keep) > size:  # drop a neighbour of ``position`` to keep the size
        drop = np.flatnonzero(keep != position)[np.argmin(np.abs(keep[keep != position] - position))]
        keep = np.delete(keep, drop)
    sub = a[:, keep[:, None], keep[None, :]]  # one gather: a[:, keep] first was (L, size, n), 50 MB at 4,096 tokens
    sums = sub.sum(axis=-1, keepdims=True)
    sub = np.divide(sub, sums, out=np.zeros_like(sub), where=sums > 0)
    return np.ascontiguousarray(sub), int(np.flatnonzero(keep == position)[0])


def _spread(values: Sequence[int], k: int, ends: bool = True) -> list[int]:
    """``k`` of the values, evenly spread: the lowest and the highest among them and the others
    between, or with ``ends=False`` evenly inside them (the ends left out when there are more than
    ``k``: the first and last tokens are often special, ``[CLS]``, ``[SEP]``, a sink)."""
    ordered = sorted(set(int(x) for x in values))
    if ends or len(ordered) <= k:
        picks = np.linspace(0, len(ordered) - 1, min(k, len(ordered)))
    else:
        picks = np.linspace(0, len(ordered) - 1, k + 2)[1:-1]
    return [ordered[i] for i in sorted(set(picks.round().astype(int).tolist()))]


def _time_rows(solve: Callable, a: np.ndarray, layers: list[int], position: int) -> tuple[list[float], float]:
    """Wall time of one row per layer, and the process CPU time of them all (other processes on a
    shared machine inflate the first, barely the second)."""
    times = []
    cpu = time.process_time()
    for layer in layers:
        start = time.perf_counter()
        solve(a, np.array([layer]), np.array([position]))
        times.append(time.perf_counter() - start)
    return times, time.process_time() - cpu


def _time_positions(solve: Callable, a: np.ndarray, size: int, layers: list[int],
                    positions: list[int]) -> tuple[list[float], float, float]:
    """``_time_rows`` on ``size`` tokens of ``a`` around each position: the mean wall time per
    layer over the positions, the longest single row, and the CPU time of them all."""
    walls, spent = [], 0.0
    for position in positions:
        sub, q = (a, position) if size == a.shape[-1] else subgraph(a, size, position)
        times, cpu = _time_rows(solve, sub, layers, q)
        walls.append(times)
        spent += cpu
    return list(np.mean(walls, axis=0)), float(np.max(walls)), spent


def calibrate(solve: Callable, a: np.ndarray, layers: Sequence[int], position: int | Sequence[int],
              per_layer_rows: int, budget: float = CALIBRATION_SECONDS) -> FlowEstimate:
    """Measure the time of ``per_layer_rows`` rows at each of ``layers`` of graph ``a`` ``(L, n, n)``
    (float64, padding removed) with ``solve`` (the contract of ``attnflow.core.flow.oracle.solve``),
    timing rows of ``position`` (one, or a few standing for all: their mean time per layer).

    Sizes 32, 64, 128, ... tokens are tried in turn (the input's own size when it is at most
    ``CALIBRATION_TOKENS``, else up to half of it) while the next size is expected to take at most
    ``budget`` seconds, so that slow solvers (networkx) are calibrated on small graphs and fast ones
    on larger ones, closer to the input (the growth exponent often falls as graphs grow)."""
    n = a.shape[-1]
    layers = [int(x) for x in layers]
    positions = [int(position)] if np.ndim(position) == 0 else [int(p) for p in position]
    sampled = _spread(layers, SAMPLE_LAYERS)
    solve(subgraph(a, min(n, 4), positions[0])[0], np.array(sampled[-1:]), np.array([0]))  # compile / load caches
    if n <= CALIBRATION_TOKENS:
        sizes = [s for s in (16, 32, 64) if s < n] + [n]
    else:  # never the input itself: doubling up to half its size at most (16 is all overheads)
        sizes = [s for s in (32, 64, 128, 256, 512, 1024) if s <= n // 2]
    measured: list[tuple] = []  # (size, seconds of all rows, of the longest timed row, of one row per layer)
    cpu: list[float] = []  # CPU seconds of the sampled rows at each size
    for size in sizes:
        times, longest, spent = _time_positions(solve, a, size, sampled, positions)
        per_layer = np.interp(layers, sampled, times)  # the layers between timed ones
        measured.append((size, float(per_layer.sum()) * per_layer_rows, longest, tuple(per_layer)))
        cpu.append(spent)
        growth = cpu[-1] / max(cpu[-2], 1e-9) if len(cpu) >= 2 else 8.0
        if len(cpu) >= 2 and sum(times) * max(growth, 2.0) > budget:  # the next size would not fit
            break
    rows = len(layers) * per_layer_rows
    size, seconds, longest, per_layer = measured[-1]
    scale = 1.0
    timed = len(sampled) * len(positions)
    if size == n:
        how = f"{timed} rows timed"
    else:
        (s0, *_), (s1, *_) = measured[-2], measured[-1]
        # the growth from CPU time (steady on a shared machine), the level from wall time
        alpha = float(np.clip(math.log(max(cpu[-1], 1e-9) / max(cpu[-2], 1e-9)) / math.log(s1 / s0), 1.0, 4.0))
        scale = (n / s1) ** alpha
        how = f"{timed} rows timed on {s0} and {s1} of the {n:,} tokens; time grows as n^{alpha:.1f}"
    return FlowEstimate(rows=rows, tokens=n, max_flows=rows * n, seconds=seconds * scale,
                        longest_row=longest * scale, how=how, layer_seconds=tuple(t * scale for t in per_layer),
                        positions=per_layer_rows)  # one graph's positions: estimate() says how many


def estimate(solve: Callable, a: np.ndarray, layers: Sequence[int], positions: Sequence[int],
             graphs: int = 1) -> FlowEstimate:
    """The estimate for rows ``positions x layers`` on each of ``graphs`` graphs like ``a``
    ``(L, n, n)``: the cheap guess when it is small, else ``calibrate``."""
    n = a.shape[-1]
    per_layer_rows = len(positions) * graphs
    guess = guess_seconds(n, layers, per_layer_rows)
    if guess <= CALIBRATE_ABOVE:
        rows = len(layers) * per_layer_rows
        return FlowEstimate(rows=rows, tokens=n, max_flows=rows * n, seconds=guess,
                            longest_row=guess_seconds(n, [max(layers)], 1), how="rough guess, not timed",
                            layer_seconds=tuple(guess_seconds(n, [layer], 1) for layer in layers),
                            positions=len(positions))
    budget = float(np.clip(CALIBRATION_SHARE * guess, CALIBRATION_SECONDS, CALIBRATION_MAX))
    timed = _spread(positions, SAMPLE_POSITIONS, ends=False)
    return replace(calibrate(solve, a, layers, timed, per_layer_rows, budget), positions=len(positions))
