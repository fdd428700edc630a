"""Cut bounds and closed forms for attention flow: what the layered graph gives away for free.

Notation as in ``attnflow.core.flow``: node ``(m, k)`` (layer ``m``, position ``k``), arcs
``(m, u) -> (m - 1, v)`` of capacity ``A_m[u, v] = a[m - 1, u, v]``, source ``s = (top, q)``, sink
``t = (0, j)``. ``F`` is the maximum ``s``-``t`` flow.

Closed forms (exact, used instead of a max-flow):

- ``top = 1``: the only path is the arc itself, ``F = A_1[q, j]``.
- ``top = 2``: the paths ``s -> (1, k) -> t`` share no arc, so each carries the smaller of its two
  capacities: ``F = sum_k min(A_2[q, k], A_1[k, j])``.

Upper bounds. Every set ``S`` of nodes with ``s`` in ``S`` and ``t`` outside is a cut, and its capacity
(the arcs leaving ``S``) bounds ``F`` (max-flow min-cut, Ford and Fulkerson 1956). ``cut_bound``
minimises over a family of cuts in ``O(256 top + 16 n)``:

- layers ``top .. 2`` are split into four groups, ``{q}``, ``{j}``, the layer's largest hub column
  (if it has one, see ``attnflow.core.flow.certified.hubs``) and the rest, each group on either
  side; a dynamic programme over layers (16 states, 256 transitions per layer) finds the cheapest
  choice. The capacity between two groups of adjacent layers needs only the entries of the
  special rows and columns and the row, column and total sums of each matrix (``sums``, once
  per graph).
- on causal attention (every matrix lower triangular, ``is_causal``) the positions before the
  sink token cannot reach it: they go to the source side at no cost, and the four groups are formed
  among the positions from ``j`` on (issue 31; the totals between them are suffix sums of the column
  sums, ``live_totals``, computed once per graph);
- layer 1 is free: given which groups of layer 2 are on the source side, each layer-1 node ``p`` is
  put on its cheaper side, ``S`` (cutting its arc to the sink, ``A_1[p, j]``) or ``T`` (cutting the
  arcs into it from the source side of layer 2).

The family contains the two obvious cuts, ``{s}`` (the source's out-capacity) and "everything but
``t``" (the sink's in-capacity ``sum_k A_1[k, j]``), the source's own column ``{(m, q)}`` (the usual
minimum on native attention, where a token keeps much of its attention on itself), and the cuts
that put a hub column on the source side. On MiniLM at 128 tokens (every fourth source, every sink)
the bound equals the maximum flow for 72%, 66%, 95% and 100% of the pairs whose source is at layer
3, 4, 5 and 6 (the three-group family without the free layer: 1%, 10%, 43%, 99.9%); on random
attention for every pair tried.
A flow of the same value certifies it (``.certified``).

Rounding: the group sums are differences of row/column sums, so the bound is a cut capacity up to a
few ulps of those sums (``~1e-16`` relative); certificates allow for this (see ``.certified``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def sums(a):
    """Row sums, column sums and totals of every layer: ``(L, n)``, ``(L, n)``, ``(L,)``."""
    layers, n = a.shape[0], a.shape[1]
    rows = np.zeros((layers, n))
    cols = np.zeros((layers, n))
    total = np.zeros(layers)
    for m in range(layers):
        for u in range(n):
            s = 0.0
            for v in range(n):
                x = a[m, u, v]
                s += x
                cols[m, v] += x
            rows[m, u] = s
            total[m] += s
    return rows, cols, total


@njit(cache=True)
def layer_two(a, q, j):
    """Exact flow from ``(2, q)`` to ``(0, j)``: two-hop paths share no arc."""
    n = a.shape[1]
    s = 0.0
    for k in range(n):
        s += min(a[1, q, k], a[0, k, j])
    return s


@njit(cache=True)
def _groups(q, j, h, live):
    """The group representatives of one layer: ``{q}``, ``{j}``, ``{h}`` (a hub), each dropped when
    it repeats an earlier one, is absent (``-1``) or lies below ``live`` (a dead position of causal
    attention, always on the source side); group 3 is every other position from ``live`` on."""
    g = np.full(3, -1, np.int64)
    if q >= live:
        g[0] = q
    if j != q and j >= live:
        g[1] = j
    if h >= live and h != q and h != j:
        g[2] = h
    return g


def live_totals(a: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``(L, n)``: for causal ``a`` (``is_causal``), the capacity of ``a[m]`` among positions
    ``>= j`` (the suffix sums of the column sums: a column ``v`` receives only from rows ``>= v``);
    ``(0, 0)`` for any other graph (the bound then uses the plain family)."""
    if not is_causal(a):
        return np.zeros((0, 0))
    return np.ascontiguousarray(np.cumsum(cols[:, ::-1], axis=1)[:, ::-1])


@njit(cache=True)
def is_causal(a):
    """Whether every matrix of ``a`` is lower triangular (no arc to a later position)."""
    layers, n = a.shape[0], a.shape[1]
    for m in range(layers):
        for u in range(n):
            for v in range(u + 1, n):
                if a[m, u, v] != 0.0:
                    return False
    return True


@njit(cache=True)
def _live_rows(w, rows, gu, live, out):
    """``out[x]``: the capacity from position ``gu[x]`` into positions ``>= live`` (its whole row
    sum when ``live`` is 0)."""
    for x in range(3):
        if gu[x] < 0:
            continue
        if live == 0:
            out[x] = rows[gu[x]]
            continue
        s = 0.0
        for v in range(live, w.shape[1]):
            s += w[gu[x], v]
        out[x] = s


@njit(cache=True)
def _group_caps(w, rows, cols, total, gu, gv, c):
    """``c[x, y]``: capacity from group ``x`` (representatives ``gu``) of a layer to group ``y``
    (``gv``) of the layer below, through the matrix ``w``; group 3 is the rest. ``rows[x]``: the
    capacity out of ``gu[x]`` into the groups below, ``cols``: the column sums, ``total``: the
    capacity between the groups of the two layers (see ``cut_bound`` for causal attention)."""
    c[:, :] = 0.0
    for x in range(3):
        if gu[x] < 0:
            continue
        rest = rows[x]
        for y in range(3):
            if gv[y] >= 0:
                c[x, y] = w[gu[x], gv[y]]
                rest -= c[x, y]
        c[x, 3] = max(0.0, rest)
    for y in range(3):
        if gv[y] < 0:
            continue
        rest = cols[gv[y]]
        for x in range(3):
            rest -= c[x, y]
        c[3, y] = max(0.0, rest)
    c[3, 3] = max(0.0, total - c.sum())


@njit(cache=True)
def cut_bound(a, rows, cols, total, hub, top, q, j, live_total=None):
    """Smallest capacity over the cut family of the module docstring; ``top >= 2``.
    ``hub[m]``: a hub position of node layer ``m`` or -1.

    Causal attention (``live_total`` given and not empty: ``live_total[m, j]``, the capacity of ``a[m]`` among
    positions ``>= j``, i.e. the suffix sums of its column sums, for graphs where
    ``is_causal``): positions before ``j`` cannot reach the sink and carry no arc to a position
    ``>= j``, so they are put on the source side at no cost and the groups (``{q}``, ``{j}``, the hub,
    the rest) are formed among the positions ``>= j`` only. The old family put those dead positions
    in the rest group, whose arcs into them were then counted whenever the rest was on the sink
    side: on SmolLM2 12 x 64 and 12 x 128 last-token rows it reached the flow on 50-62 % of the
    pairs, the causal groups on 94-97 %."""
    n = a.shape[1]
    if live_total is None:
        causal = np.zeros((0, 0))
    else:
        causal = live_total  # (0, 0): not causal
    live = 0
    if causal.shape[0] > 0:
        if q < j:
            return 0.0  # causal: no path from q to a later position
        live = j
    c = np.zeros((4, 4))
    out_of = np.zeros(3)
    weight = np.zeros((16, 4))  # weight[s, y]: capacity from the groups in state s into group y
    best = np.full(16, np.inf)  # best[s]: cheapest cut of the layers above, s = groups in S
    best[1] = 0.0  # the source alone on the source side of the top layer
    new = np.empty(16)
    upper = _groups(q, j, -1, live)
    for m in range(top, 2, -1):  # grouped layers down to layer 2
        lower = _groups(q, j, hub[m - 1], live)
        _live_rows(a[m - 1], rows[m - 1], upper, live, out_of)
        between = total[m - 1] if causal.shape[0] == 0 else causal[m - 1, j]
        _group_caps(a[m - 1], out_of, cols[m - 1], between, upper, lower, c)
        for s in range(16):
            for y in range(4):
                acc = 0.0
                for x in range(4):
                    if s >> x & 1:
                        acc += c[x, y]
                weight[s, y] = acc
        new[:] = np.inf
        for s in range(16):
            if best[s] == np.inf:
                continue
            for t in range(16):
                cost = best[s]
                for y in range(4):
                    if not t >> y & 1:
                        cost += weight[s, y]
                if cost < new[t]:
                    new[t] = cost
        best[:] = new
        upper = lower
    # Layer 1 is free: given the groups of layer 2 on the source side, each layer-1 node p is put
    # on the cheaper side: S (its arc to the sink is cut) or T (the arcs into it from S are cut).
    w2, w1 = a[1], a[0]
    result = np.inf
    for s in range(16):
        if best[s] == np.inf:
            continue
        cost = best[s]
        for p in range(live, n):  # a dead p has no arc to the sink (causal)
            into = 0.0
            special = 0.0
            for x in range(3):
                if upper[x] >= 0:
                    special += w2[upper[x], p]
                    if s >> x & 1:
                        into += w2[upper[x], p]
            if s >> 3 & 1:
                into += max(0.0, cols[1, p] - special)
            cost += min(w1[p, j], into)
            if cost >= result:
                break
        result = min(result, cost)
    return result
