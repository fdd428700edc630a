"""The fast exact solver: warm-started push-relabel on the layered graph, compiled with numba.

Algorithm. Input nodes ``(0, j)`` have no outgoing edges, so the flow from a source
``s = (top, q)`` to ``(0, j)`` only uses layers ``1..top`` plus the sink's in-edges
``(1, k) -> (0, j)`` of capacity ``A_1[k, j]``. For each source we keep one preflow on the shared
upper layers (dense per-layer arrays of residual capacities, one per direction so that every scan
of a node's arcs reads a contiguous row, restricted to the nodes reachable from ``s``: causal
attention makes that set small) and swap only the sink. Each sink is solved with highest-label
push-relabel, phase one only (a maximum *preflow*), with current arcs, the gap heuristic and
breadth-first global relabelling when relabels pile up. Labels keep the parity of their layer (every
arc joins adjacent layers), so a node being relabelled, which has no admissible arc, has no residual
neighbour below ``label + 1``: the relabel scan stops at the first neighbour with that label, and
that arc becomes the current arc (no earlier arc is admissible at the new label). Between sinks,
the flow that entered the old sink is handed back as excess to the layer-1 nodes it came through, and the
preflow is the warm start for the new sink. Every residual arc joins adjacent layers, so
``label = layer`` is always a valid labelling: each sink starts from it for free and excess first
runs straight down. A sink stops as soon as all its in-arcs are saturated (the sink alone is then
a minimum cut), which on dense attention is most sinks. Layer-1 sources are trivial (the flow is
the edge capacity). Rows are spread over cores with ``prange`` (a lone row's sinks are split over
cores); Python hands numba a chunk of rows at a time so that Ctrl-C is honoured between chunks and
``progress`` ticks as rows finish.

Complexity. For a source with ``V`` reachable nodes and ``E <= top * n^2`` arcs among them, each
sink costs ``O(V^2 sqrt(E))`` in the worst case (highest-label push-relabel, Cheriyan and
Maheshwari 1989) plus ``O(E)`` per global relabel; memory is ``O(top * n^2)`` per thread. Warm
starts make a typical sink cost a few thousand pushes, so a full map costs far less than
``layers * n`` times a cold max-flow, and nothing is built in Python per pair.

Why it is exact. No epsilon is used. Every push (``.push.push``, the one push step of both
numba solvers) moves ``delta = min(excess, residual)``: when the residual is the minimum the flow
is *assigned* the capacity (or 0 on a reverse arc), so the arc is saturated exactly (its residual
is *assigned* 0 and its reverse residual the capacity; a reverse arc emptied likewise gets 0 and
the capacity); otherwise the excess is *assigned* 0. A residual reaches 0 only by such an
assignment (``r - e`` with ``e < r`` is never 0 in floating point), so a saturated arc carries
exactly its capacity and an emptied one exactly 0. The combinatorial bounds on saturating and
non-saturating pushes therefore hold in floating point, and the loop terminates. At the end
no node that can still reach the sink holds excess (or every sink arc is saturated), so the nodes
that can reach the sink in the residual graph form a cut whose forward arcs carry exactly their
capacity and whose backward arcs carry exactly 0: the sink's inflow equals that cut's capacity up
to the rounding of the additions that built it (relative ``~1e-16`` each), i.e. it is the maximum
flow to float64 precision. Zero capacities are never arcs (``> 0.0`` tests), so exact zeros
(causal masks, padding) cost nothing, and tiny capacities such as ``1e-12`` are treated like any
other.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Callable

import numba
import numpy as np
from numba import njit, prange

from attnflow.core.flow.push import push

# Below this many capacity reads per chunk (layers * n^2 summed over its rows) one thread is faster
# than waking the pool, especially on a loaded machine.
SERIAL_WORK = 200_000


# One source's preflow on the layers above the inputs: residuals ``down[m - 1, q, k]`` of the arc
# ``(m, q) -> (m - 1, k)`` and ``up[m, q, p]`` of its reverse ``(m, q) -> (m + 1, p)``; the flow into
# the sink and the capacity of each layer-1 node's arc to it; the nodes of each layer the source
# reaches (``position[m, :count[m]]``); per node ``m * n + q``: label, excess, current arc; a
# breadth-first queue; the active nodes bucketed by label (``active_head``, ``active_next``) and
# how many nodes hold each label (``at_label``, for the gap heuristic).
Preflow = namedtuple("Preflow", ["down", "up", "sink_flow", "sink_capacity", "position", "count", "label", "excess",
                                 "current", "queue", "active_head", "active_next", "at_label"])


def capacities(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled solvers read it: C-contiguous float32 or float64, never copied to a
    wider type (a float32 stack of 4,096 tokens would double in float64). The kernels do all their
    arithmetic in float64 (residuals, excesses, sums), so a float32 capacity enters exactly as its
    float64 value; other dtypes become float64."""
    a = np.asarray(a)
    return np.ascontiguousarray(a, dtype=a.dtype if a.dtype in (np.float32, np.float64) else np.float64)


def never() -> np.ndarray:
    """A cancel flag nobody sets (the compiled solvers read ``cancel[0]`` between sinks)."""
    return np.zeros(1, np.bool_)


@njit(cache=True)
def _reachable(a, top, q0):
    """Positions of each layer ``0..top`` reachable from ``(top, q0)``: ``pos[m, :cnt[m]]``."""
    n = a.shape[1]
    reach = np.zeros((top + 1, n), np.bool_)
    reach[top, q0] = True
    for m in range(top, 0, -1):
        for q in range(n):
            if reach[m, q]:
                for k in range(n):
                    if a[m - 1, q, k] > 0.0:
                        reach[m - 1, k] = True
    pos = np.zeros((top + 1, n), np.int64)
    cnt = np.zeros(top + 1, np.int64)
    for m in range(top + 1):
        for q in range(n):
            if reach[m, q]:
                pos[m, cnt[m]] = q
                cnt[m] += 1
    return pos, cnt


@njit(cache=True)
def _global_relabel(state, top, big):
    """Exact distances to the sink in the residual graph (``big``: cannot reach it)."""
    rdn, rup, fs, cs, pos, cnt, d, ex, cur, queue, head, nxt, lcount = state
    n = rdn.shape[1]
    for m in range(1, top):
        for i in range(cnt[m]):
            d[m * n + pos[m, i]] = big
    tail = 0
    for i in range(cnt[1]):
        k = pos[1, i]
        if fs[k] < cs[k]:
            d[n + k] = 1
            queue[tail] = n + k
            tail += 1
    h = 0
    while h < tail:
        v = queue[h]
        h += 1
        m, k = v // n, v % n
        dv = d[v] + 1
        if m + 1 < top:  # forward arcs (m+1, p) -> (m, k) with residual capacity
            for i in range(cnt[m + 1]):
                u = (m + 1) * n + pos[m + 1, i]
                if d[u] == big and rdn[m, pos[m + 1, i], k] > 0.0:
                    d[u] = dv
                    queue[tail] = u
                    tail += 1
        if m > 1:  # reverse arcs (m-1, r) -> (m, k): flow on (m, k) -> (m-1, r)
            for i in range(cnt[m - 1]):
                u = (m - 1) * n + pos[m - 1, i]
                if d[u] == big and rup[m - 1, pos[m - 1, i], k] > 0.0:
                    d[u] = dv
                    queue[tail] = u
                    tail += 1
    return _rebuild(state, top, n, big)


@njit(cache=True)
def _rebuild(state, top, n, big):
    """Fill the active buckets and the per-label node counts; return the highest active label."""
    rdn, rup, fs, cs, pos, cnt, d, ex, cur, queue, head, nxt, lcount = state
    head[:] = -1
    lcount[:] = 0
    highest = -1
    for m in range(1, top):
        for i in range(cnt[m]):
            u = m * n + pos[m, i]
            if d[u] < big:
                lcount[d[u]] += 1
                if ex[u] > 0.0:
                    nxt[u] = head[d[u]]
                    head[d[u]] = u
                    highest = max(highest, d[u])
    return highest


@njit(cache=True)
def _relabel(state, top, u, big):
    """New label of ``u``, one more than its lowest residual neighbour (``big`` if none), and the
    index of the first arc to that neighbour (the next current arc).

    ``u`` has no admissible arc, so every residual neighbour has a label ``>= d[u]``; labels have
    the parity of their layer and neighbours lie in adjacent layers, so that means ``>= d[u] + 1``.
    The first neighbour at exactly ``d[u] + 1`` is therefore the minimum: stop scanning there.
    """
    rdn, rup, fs, cs, pos, cnt, d, ex, cur, queue, head, nxt, lcount = state
    n = rdn.shape[1]
    m, q = u // n, u % n
    floor = d[u] + 1
    low = big
    arc = 0
    if m == 1:
        if fs[q] < cs[q]:
            return 1, 0
        base = 1
    else:
        base = cnt[m - 1]
        for i in range(cnt[m - 1]):
            k = pos[m - 1, i]
            if rdn[m - 1, q, k] > 0.0:
                dv = d[(m - 1) * n + k]
                if dv < low:
                    low = dv
                    arc = i
                    if dv <= floor:
                        return min(big, low + 1), arc
    if m + 1 < top:
        for i in range(cnt[m + 1]):
            p = pos[m + 1, i]
            if rup[m, q, p] > 0.0:
                dv = d[(m + 1) * n + p]
                if dv < low:
                    low = dv
                    arc = base + i
                    if dv <= floor:
                        break
    return min(big, low + 1), arc


@njit(cache=True)
def _max_preflow(a, state, top, big):
    """Highest-label push-relabel until no node below ``big`` has excess."""
    rdn, rup, fs, cs, pos, cnt, d, ex, cur, queue, head, nxt, lcount = state
    n = a.shape[1]
    # Once every sink arc is saturated the sink side {sink} is a minimum cut: stop there instead of
    # relabelling the stuck excess up to ``big`` (most of the work on dense attention).
    open_arcs = 0
    for i in range(cnt[1]):
        if fs[pos[1, i]] < cs[pos[1, i]]:
            open_arcs += 1
    if open_arcs == 0:
        return
    # Every residual arc joins adjacent layers, so label = layer is always valid: a free start that
    # lets excess run straight down; exact labels (BFS) only once relabels pile up.
    for m in range(1, top):
        for i in range(cnt[m]):
            d[m * n + pos[m, i]] = m
    highest = _rebuild(state, top, n, big)
    cur[:] = 0
    relabels = 0
    while highest >= 0:
        u = head[highest]
        if u < 0:
            highest -= 1
            continue
        head[highest] = nxt[u]
        m, q = u // n, u % n
        ndown = 1 if m == 1 else cnt[m - 1]
        nup = cnt[m + 1] if m + 1 < top else 0
        while ex[u] > 0.0:
            c = cur[u]
            if c == ndown + nup:
                old = d[u]
                new, arc = _relabel(state, top, u, big)
                cur[u] = arc  # arcs before it are not admissible at the new label
                relabels += 1
                lcount[old] -= 1
                d[u] = big  # u is counted at its new label only once we know there is no gap
                if lcount[old] == 0:  # gap: nothing above ``old`` can reach the sink any more
                    for m2 in range(1, top):
                        for i in range(cnt[m2]):
                            w = m2 * n + pos[m2, i]
                            if old < d[w] < big:
                                lcount[d[w]] -= 1
                                d[w] = big
                    for lab in range(old + 1, highest + 1):
                        head[lab] = -1
                    highest = old
                elif new < big:
                    d[u] = new
                    lcount[new] += 1
                if d[u] >= big:
                    break
                continue
            du = d[u]
            if c < ndown and m == 1:
                r = cs[q] - fs[q]
                if du == 1 and r > 0.0:
                    if ex[u] >= r:
                        fs[q] = cs[q]
                        ex[u] -= r
                        open_arcs -= 1
                        if open_arcs == 0:
                            return
                    else:
                        fs[q] += ex[u]
                        ex[u] = 0.0
                        break
            elif c < ndown:
                k = pos[m - 1, c]
                v = (m - 1) * n + k
                r = rdn[m - 1, q, k]
                if r > 0.0 and du == d[v] + 1:
                    was_idle = ex[v] == 0.0
                    push(rdn, (m - 1, q, k), rup, (m - 1, k, q), a[m - 1, q, k], ex, u, v)
                    if was_idle:
                        nxt[v] = head[d[v]]
                        head[d[v]] = v
                        highest = max(highest, d[v])
                    if ex[u] == 0.0:
                        break
            else:
                p = pos[m + 1, c - ndown]
                v = (m + 1) * n + p
                r = rup[m, q, p]
                if r > 0.0 and du == d[v] + 1:
                    was_idle = ex[v] == 0.0  # cancelling all the flow assigns it 0 exactly
                    push(rup, (m, q, p), rdn, (m, p, q), a[m, p, q], ex, u, v)
                    if was_idle:
                        nxt[v] = head[d[v]]
                        head[d[v]] = v
                        highest = max(highest, d[v])
                    if ex[u] == 0.0:
                        break
            cur[u] = c + 1
        if relabels > big:  # labels drift from distances: recompute them exactly
            highest = _global_relabel(state, top, big)
            cur[:] = 0
            relabels = 0
    return


@njit(cache=True)
def _source_row(a, top, q0, part, parts, out, cancel):
    """Max flow from ``(top, q0)`` to the input tokens ``j`` with ``j % parts == part``, written
    into ``out`` (``(n,)``, left 0 elsewhere)."""
    _source_sinks(a, top, q0, np.arange(part, a.shape[1], parts), out, cancel)


# nogil: Python calls it directly (solve_sinks, the certified solver's leftovers, the race), for seconds
# at a time on long inputs; holding the GIL there froze every other thread (the app's server stopped
# answering and a page's job was taken for abandoned).
@njit(cache=True, nogil=True)
def _source_sinks(a, top, q0, sinks, out, cancel):
    """Max flow from ``(top, q0)`` to each input token in ``sinks`` (one warm chain), into ``out``;
    returns early, between sinks, once ``cancel[0]`` is set (by another thread)."""
    n = a.shape[1]
    if top == 1:
        for j in sinks:
            out[j] = a[0, q0, j]
        return
    pos, cnt = _reachable(a, top, q0)
    wanted = np.zeros(n, np.bool_)
    wanted[sinks] = True
    size = (top + 1) * n
    big = 2
    for m in range(1, top):
        big += cnt[m]
    # Residual capacities, both directions, so that every scan reads a contiguous row:
    # rdn[m - 1, q, k] for the arc (m, q) -> (m - 1, k) and rup[m, q, p] for its reverse
    # (m, q) -> (m + 1, p), which is the flow on (m + 1, p) -> (m, q).
    rdn = np.empty((top, n, n))  # float64 whatever the capacities' type (exactness needs it)
    rdn[:, :, :] = a[:top]
    rup = np.zeros((top, n, n))
    ex = np.zeros(size)
    d = np.zeros(size, np.int64)
    cur = np.zeros(size, np.int64)
    queue = np.zeros(size, np.int64)
    nxt = np.zeros(size, np.int64)
    head = np.zeros(big + 1, np.int64)
    lcount = np.zeros(big + 1, np.int64)
    fs = np.zeros(n)
    cs = np.zeros(n)
    state = Preflow(rdn, rup, fs, cs, pos, cnt, d, ex, cur, queue, head, nxt, lcount)
    for i in range(cnt[top - 1]):  # saturate the source's arcs once: phase one never undoes them
        k = pos[top - 1, i]
        rdn[top - 1, q0, k] = 0.0
        rup[top - 1, k, q0] = a[top - 1, q0, k]
        ex[(top - 1) * n + k] = a[top - 1, q0, k]
    for i0 in range(cnt[0]):
        j = pos[0, i0]
        if not wanted[j]:
            continue
        if cancel[0]:
            return
        for i in range(cnt[1]):  # hand the old sink's inflow back to the nodes it came through
            k = pos[1, i]
            ex[n + k] += fs[k]
            fs[k] = 0.0
            cs[k] = a[0, k, j]
        _max_preflow(a, state, top, big)
        total = 0.0
        for i in range(cnt[1]):
            total += fs[pos[1, i]]
        out[j] = total


@njit(cache=True, parallel=True, nogil=True)
def _rows(a, tops, qs, parts, out, cancel):
    """Rows ``out[i]`` for sources ``(tops[i], qs[i])``, each split into ``parts`` sink sets so
    that a single row (the CLS row) still keeps every core busy."""
    for t in prange(len(tops) * parts):
        i, part = t // parts, t % parts
        _source_row(a, tops[i], qs[i], part, parts, out[i], cancel)


@njit(cache=True, nogil=True)
def _rows_serial(a, tops, qs, out, cancel):
    """``_rows`` on one thread, for chunks too small to pay for waking the thread pool."""
    for i in range(len(tops)):
        _source_row(a, tops[i], qs[i], 0, 1, out[i], cancel)


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as ``attnflow.core.flow.oracle.solve``."""
    a = capacities(a)
    cancel = never() if cancel is None else cancel

    def rows(tops: np.ndarray, qs: np.ndarray, out: np.ndarray, serial: bool, threads: int) -> None:
        if serial:
            _rows_serial(a, tops, qs, out, cancel)
        else:
            parts = max(1, -(-threads // len(tops)))  # split sinks only when rows are fewer than cores
            _rows(a, tops, qs, parts, out, cancel)

    return in_chunks(rows, a.shape[-1], layers, positions, progress, cancel)


def in_chunks(rows: Callable[[np.ndarray, np.ndarray, np.ndarray, bool, int], None], n: int, layers: np.ndarray,
              positions: np.ndarray, progress: Callable[[int], None] | None, cancel: np.ndarray) -> np.ndarray:
    """The row loop of every flow solver: the rows ``(layer + 1, position)`` in chunks of a few per
    thread, each chunk solved by ``rows(tops, qs, out, serial, threads)`` into its slice of ``out``
    (``serial``: work too small to pay for waking the thread pool). Numba cannot be interrupted inside a
    call, so Ctrl-C (raised between calls) and ``cancel`` act between chunks and leave nothing half-done,
    and ``progress`` ticks as rows finish. Returns ``(len(layers), len(positions), n)``."""
    tops = np.repeat(np.asarray(layers, dtype=np.int64) + 1, len(positions))
    qs = np.tile(np.asarray(positions, dtype=np.int64), len(layers))
    out = np.zeros((len(tops), n))
    threads = numba.get_num_threads()
    chunk = 4 * threads
    for start in range(0, len(tops), chunk):
        stop = min(start + chunk, len(tops))
        serial = threads == 1 or int(tops[start:stop].sum()) * n * n < SERIAL_WORK
        rows(tops[start:stop], qs[start:stop], out[start:stop], serial, threads)
        if cancel[0]:
            break
        if progress is not None:
            progress(stop - start)
    return out.reshape(len(layers), len(positions), n)


def solve_sinks(a: np.ndarray, top: int, q: int, sinks: np.ndarray, cancel: np.ndarray | None = None) -> np.ndarray:
    """Flow from ``(top, q)`` to the given tokens, on this thread (``(len(sinks),)``); ``cancel``
    as in ``solve`` (read between sinks)."""
    out = np.zeros(a.shape[-1])
    _source_sinks(capacities(a), top, q, np.asarray(sinks, dtype=np.int64), out, never() if cancel is None else cancel)
    return out[sinks]
