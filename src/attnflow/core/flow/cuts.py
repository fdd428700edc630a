"""Cut bounds and closed forms for attention flow: what the layered graph gives away for free.

Notation as in :mod:`attnflow.core.flow`: node ``(m, k)`` (layer ``m``, position ``k``), arcs
``(m, u) -> (m - 1, v)`` of capacity ``A_m[u, v] = a[m - 1, u, v]``, source ``s = (top, q)``, sink
``t = (0, j)``. ``F`` is the maximum ``s``-``t`` flow.

Closed forms (exact, used instead of a max-flow):

- ``top = 1``: the only path is the arc itself, ``F = A_1[q, j]``.
- ``top = 2``: the paths ``s -> (1, k) -> t`` share no arc, so each carries the smaller of its two
  capacities: ``F = sum_k min(A_2[q, k], A_1[k, j])``.

Upper bounds. Every set ``S`` of nodes with ``s`` in ``S`` and ``t`` outside is a cut, and its capacity
(the arcs leaving ``S``) bounds ``F`` (max-flow min-cut, Ford and Fulkerson 1956). :func:`cut_bound`
minimises over a family of ``2^(3 top)`` cuts in ``O(top)``: split every layer into three groups,
``{q}``, ``{j}`` and the rest, and put each group on either side independently. The capacity between
two groups of adjacent layers needs only entries of rows ``q`` and ``j``, columns ``q`` and ``j``,
and the row, column and total sums of each matrix (computed once per graph by :func:`sums`), so a
dynamic programme over layers (8 states per layer, 64 transitions) finds the best cut of the
family. The family contains the two obvious cuts, ``{s}`` (the source's out-capacity) and
"everything but ``t``" (the sink's in-capacity, ``sum_k A_1[k, j]``), and the source's own column
``{(m, q)}``, the usual minimum on native attention where a token keeps most of its attention on
itself. The bound is exact whenever some minimum cut lies in the family, which on real attention
is most pairs near the top layer and few near the bottom; a flow of the same value certifies it.

Rounding: the group sums are differences of row/column sums, so the bound is a cut capacity up to a
few ulps of those sums (``~1e-16`` relative); certificates allow for this (see :mod:`.certified`).
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
def _groups(n, q, j, h):
    """The group representatives of one layer: ``{q}``, ``{j}``, ``{h}`` (a hub), each dropped when
    it repeats an earlier one or is absent (``-1``); group 3 is every other position."""
    g = np.full(3, -1, np.int64)
    g[0] = q
    if j != q:
        g[1] = j
    if h >= 0 and h != q and h != j:
        g[2] = h
    return g


@njit(cache=True)
def _group_caps(w, rows, cols, total, gu, gv, c):
    """``c[x, y]``: capacity from group ``x`` (representatives ``gu``) of a layer to group ``y``
    (``gv``) of the layer below, through the matrix ``w``; group 3 is the rest."""
    c[:, :] = 0.0
    for x in range(3):
        if gu[x] < 0:
            continue
        rest = rows[gu[x]]
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
def cut_bound(a, rows, cols, total, hub, top, q, j):
    """Smallest capacity over the cut family of the module docstring; ``top >= 2``.
    ``hub[m]``: a hub position of node layer ``m`` or -1."""
    n = a.shape[1]
    c = np.zeros((4, 4))
    weight = np.zeros((16, 4))  # weight[s, y]: capacity from the groups in state s into group y
    best = np.full(16, np.inf)  # best[s]: cheapest cut of the layers above, s = groups in S
    best[1] = 0.0  # the source alone on the source side of the top layer
    new = np.empty(16)
    upper = _groups(n, q, j, -1)
    for m in range(top, 2, -1):  # grouped layers down to layer 2
        lower = _groups(n, q, j, hub[m - 1])
        _group_caps(a[m - 1], rows[m - 1], cols[m - 1], total[m - 1], upper, lower, c)
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
        for p in range(n):
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
