"""Certified exact flow: max-flow on a sparse sub-network, certified by a cut of the full graph.

The problem (see ``attnflow.core.flow``): the maximum flow ``F`` from ``s = (top, q)`` to
``t = (0, j)`` in the layered attention graph, arcs ``(m, u) -> (m - 1, v)`` of capacity
``A_m[u, v]``. The dense graph has ``top * n^2`` arcs, and push-relabel on it (``.engine``)
scans whole rows of ``n`` arcs at every relabel, so each sink costs about a pass over the graph.

Algorithm. Attention concentrates on few arcs: a token's own column (the residual diagonal), the
source token's row, the sink token's column and "hub" columns that receive much attention
(``[CLS]``, ``[SEP]``, punctuation). For each sink, max-flow runs on the sub-network of

- the source's row at every layer (the arcs out of ``(m, q)``) and every diagonal arc,
- the arcs into and out of hub columns (in-capacity at least ``HUB`` times the layer's average, at
  most ``HUBS`` per layer),
- the sink's column at every layer (the arcs into ``(m, j)``),
- each node's ``HEAVY`` largest arcs (peaky heads send most of a row through a few arcs at
  scattered columns that no hub test finds), seeded before the first sink,
- the arcs learned for earlier sinks of the same source (step 3),

with push-relabel, phase one (current arcs, the gap heuristic on per-label node lists,
breadth-first global relabelling when relabels pile up), lowest active label first and then
highest (see "Which node next" below). Its value ``val`` is the value of
a feasible flow of the full graph, a lower bound on ``F``. Then:

1. if ``val`` reaches the cheapest cut of ``attnflow.core.flow.cuts.cut_bound`` (an upper bound),
   ``F = val``; pushing stops as soon as that happens;
2. otherwise phase one ended, and the nodes that can still reach ``t`` in the residual sub-network
   (``T``) and the other nodes the source reaches in the full graph (``S``) form a minimum cut of
   the sub-network, of capacity ``val``. Its capacity in the full graph is evaluated, per
   source-side node the cheaper of a sum over ``T`` or its row sum minus a sum over the rest; equal
   to ``val`` certifies ``F = val``;
3. otherwise some full-graph arcs cross from ``S`` to ``T`` outside the sub-network, the only way
   more flow can pass: those of at least ``GROW`` times the largest are added (and kept for later
   sinks of the same source) and the solve resumes from the current preflow. After ``ROUNDS``
   rounds, or once the sub-network outgrows its budget, the sink goes to the dense engine, exact by
   its own argument (rare: a few sinks in a thousand on MiniLM, none on random attention).

Warm starts. Successive sinks' sub-networks differ only in the sink's column. When the sink moves
from ``j`` to ``j'``, the flow on ``j``'s column arcs goes back to their tails as excess; the deficit
left at each head is cancelled along arcs that carry flow, layer by layer downwards (a node's
outflow covers the inflow it lost, and the layer-1 nodes hold the old sink's returned inflow); then
each tail sends what it got back straight into ``j'``'s column as far as the new arc takes it. What
remains is a valid preflow of the new sub-network; labels restart at the exact distances to ``j'``
(a breadth-first search, ``O(E)`` of the sparse sub-network). ``label = layer`` (valid in any
layered graph, free) was the start until issue 31: on causal and peaky attention the excess
parked in dead ends (an attention sink's chain, which reaches no later token) then ran down to
layer 1 and climbed back one relabel at a time for every sink, 4x the pushes of exact labels. Layer-1
sources are the edge capacity, layer-2 sources the closed form of ``.cuts``, and a sink whose
cut bound is 0 is 0.

Which node next. The cut bound is known before a sink is solved, so its solve is a search for a
flow of that value, and the warm preflow already holds excess next to the sink: the returned flow of
the old sink's column sits one arc from the new one, and dead ends left by earlier sinks often lie
a few arcs above it. Taking the active node of the lowest label (the closest to the sink) first
reaches the bound with those few pushes, where the highest-label rule first drains the excess
farthest away (issue 31: 1.3x to 2x fewer pushes on MiniLM and SmolLM2 rows of 256 and 512 tokens).
When the bound is not the maximum flow, phase one has to drain everything, and there the
highest-label rule needs fewer pushes (Cherkassky and Goldberg 1997): after ``LOWEST_FIRST`` pushes
per node, and in every cut-generation round, the solve takes the highest label.

Why it is exact. A feasible flow of value ``val`` and a cut of capacity ``cap`` prove
``val <= F <= cap``. A sink is certified when ``val >= cap * (1 - TOL)``, ``TOL = 1e-12``, so the
returned ``val`` is within ``1e-12 * F`` (plus float64 rounding of the sums, ``~1e-15`` relative) of
the maximum flow; every other sink goes to the exact engine. No epsilon enters the flow: pushes
saturate arcs by assignment, as in the engine. Zero capacities are never arcs, so causal masks and
padding cost nothing, and nodes the source cannot reach stay out of ``S``.

Complexity. Per sink, push-relabel on ``E = O(top * n * (3 + 2 * HUBS)) + learned`` arcs
(``O(V^2 sqrt(E))`` in the worst case) plus ``O(V)`` to move the sink, and ``O(top * n^2)`` per cut
check when the bound is not reached. Sinks of one source form a warm chain; sources, and blocks of
sinks of a lone source, run in parallel (Python threads; the solver releases the GIL).
References: Goldberg and Tarjan (1988), push-relabel; Cherkassky and Goldberg (1997), the
highest-label rule with the gap heuristic and global relabelling.
"""

from __future__ import annotations

from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numba
import numpy as np
from numba import njit

from attnflow.core.flow import engine
from attnflow.core.flow.cuts import cut_bound, layer_two, live_totals, sums
from attnflow.core.flow.push import push

TOL = 1e-12
HUB = 3.0  # a column is a hub if it receives at least this many times the average attention
HUBS = 4  # at most this many hubs per layer
GROW = 0.1  # add crossing arcs of at least this fraction of the largest one
ROUNDS = 12  # cut-generation rounds before a sink goes to the dense engine
HEAVY = 4  # each node's largest arcs seeded into every source's sub-network
LOWEST_FIRST = 8  # a sink's first solve takes the lowest active label for this many pushes per node

# The graph as every kernel reads it: capacities ``(L, n, n)``, their row and column sums and total
# (``.cuts.sums``), the hub columns (``hubs``) and the first hub of each layer (-1: none).
# ``live_total``: ``.cuts.live_totals``, the causal cut family's sums (``(0, 0)``: not causal).
Graph = namedtuple("Graph", ["capacity", "row_sums", "col_sums", "total", "hub", "hub_list", "hub_count",
                             "first_hub", "heavy", "live_total"])
# The sub-network of one source: arc ``i`` runs ``tail[i] -> head[i]`` with ``capacity[i]``; arc id
# ``2i`` is it forward and ``2i + 1`` its reverse, with residuals ``residual[2i]``, ``residual[2i + 1]``
# and far ends ``to[2i]``, ``to[2i + 1]``; node ``v``'s arc ids are ``adjacency[begin[v]:end[v]]``
# (``begin0``/``degree``: its list without a sink column; ``slot``: the free place after it for its
# arc into the sink's column; ``used``: whether it has one now).
Arcs = namedtuple("Arcs", ["tail", "head", "capacity", "residual", "to", "adjacency", "begin", "end", "begin0",
                           "degree", "slot", "used"])
# Push-relabel state per node: excess, label, current arc; the active nodes bucketed by label
# (``active_head[label]`` then ``active_next``), every node listed by label (doubly linked:
# ``level_head``, ``level_next``, ``level_prev``, for the gap heuristic) and a breadth-first queue.
Labels = namedtuple("Labels", ["excess", "label", "current", "active_next", "active_head", "level_next",
                               "level_prev", "level_head", "queue"])


def hubs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hub columns per node layer ``m`` (``1..L-1``): the columns of ``a[m]`` (arcs from layer
    ``m + 1`` into layer ``m``) with the largest in-capacity, if at least ``HUB`` times the average.
    Returns ``hub`` ``(L + 1, n)`` flags, ``hubl`` ``(L + 1, HUBS)`` lists and ``nhub`` ``(L + 1,)``."""
    n_layers, n = a.shape[0], a.shape[1]
    hub = np.zeros((n_layers + 1, n), np.bool_)
    hubl = np.zeros((n_layers + 1, HUBS), np.int64)
    nhub = np.zeros(n_layers + 1, np.int64)
    for m in range(1, n_layers):
        col = a[m].sum(axis=0, dtype=np.float64)  # float64 sums whatever the capacities' type
        mean = col.sum() / max(1, np.count_nonzero(col))
        order = np.argsort(-col, kind="stable")[:HUBS]
        chosen = order[col[order] >= HUB * mean]
        hub[m, chosen] = True
        hubl[m, :len(chosen)] = chosen
        nhub[m] = len(chosen)
    return hub, hubl, nhub


@njit(cache=True)
def _reach(a, top, q, reach):
    """``reach[m, k]``: node ``(m, k)`` is reachable from ``(top, q)`` in the full graph."""
    n = a.shape[1]
    reach[:, :] = False
    reach[top, q] = True
    for m in range(top, 0, -1):
        seen = 0
        for u in range(n):
            if reach[m, u]:
                for v in range(n):
                    if a[m - 1, u, v] > 0.0 and not reach[m - 1, v]:
                        reach[m - 1, v] = True
                        seen += 1
                if seen == n:
                    break


@njit(cache=True)
def _stable(hub, top, q, m, u, v):
    """Is ``(m, u) -> (m - 1, v)`` in every sink's sub-network (source row, diagonal, hubs)?"""
    if m == top:
        return u == q
    if m == 1:
        return False
    return u == q or v == u or hub[m, u] or hub[m - 1, v]


@njit(cache=True, inline="always")
def _learned(mark_t, m, v, u):
    """Was the arc ``(m + 1, u) -> (m, v)`` learned? ``mark_t`` ``(top, n, ceil(n / 8))`` holds one
    bit per arc (a bool per arc was a quarter of a float32 stack per thread at 4,096 tokens)."""
    return (mark_t[m, v, u >> 3] >> (u & 7)) & 1 == 1


@njit(cache=True, inline="always")
def _learn(mark_t, m, v, u):
    """Mark the arc ``(m + 1, u) -> (m, v)`` learned."""
    mark_t[m, v, u >> 3] |= np.uint8(1 << (u & 7))


@njit(cache=True)
def _in_net(hub, mark_t, top, q, j, m, u, v):
    """Is ``(m, u) -> (m - 1, v)`` in sink ``j``'s sub-network? (learned: ``_learned``.)"""
    return _stable(hub, top, q, m, u, v) or (v == j and m < top) or _learned(mark_t, m - 1, v, u)


@njit(cache=True)
def _add_stable(a, hub, hubl, nhub, reach, top, q, tl, hd, cp):
    """The sink-independent arcs of source ``(top, q)`` as arcs ``0..count-1``; returns the count."""
    n = a.shape[1]
    ne = 0
    for v in range(n):
        c = a[top - 1, q, v]
        if c > 0.0:
            tl[ne], hd[ne], cp[ne] = top * n + q, (top - 1) * n + v, c
            ne += 1
    for m in range(top - 1, 1, -1):
        base = (m - 1) * n
        for u in range(n):
            if not reach[m, u]:
                continue
            tu = m * n + u
            if u == q or hub[m, u]:
                for v in range(n):
                    c = a[m - 1, u, v]
                    if c > 0.0:
                        tl[ne], hd[ne], cp[ne] = tu, base + v, c
                        ne += 1
            else:
                c = a[m - 1, u, u]
                if c > 0.0:
                    tl[ne], hd[ne], cp[ne] = tu, base + u, c
                    ne += 1
                for i in range(nhub[m - 1]):
                    h = hubl[m - 1, i]
                    c = a[m - 1, u, h]
                    if h != u and c > 0.0:
                        tl[ne], hd[ne], cp[ne] = tu, base + h, c
                        ne += 1
    return ne


@njit(cache=True)
def _layout(nv, net, stable, learned0, ne):
    """Adjacency lists (arc ids: ``2i`` = arc ``i`` forward, ``2i + 1`` its reverse) of the arcs
    that stay in the sub-network (``0..stable-1`` and the learned ``learned0..ne-1``), with one free
    slot after every node's list for its arc into the sink's column. Returns where the column
    regions start (one per layer, filled by ``_attach``)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    deg[:nv] = 0
    for i in range(ne):
        if stable <= i < learned0:
            continue
        deg[tl[i]] += 1
        deg[hd[i]] += 1
    p = 0
    for v in range(nv):
        beg0[v] = p
        beg[v] = p
        end[v] = p
        slot[v] = p + deg[v]
        p += deg[v] + 1
    for i in range(ne):
        if stable <= i < learned0:
            continue
        t, h = tl[i], hd[i]
        adj[end[t]] = 2 * i
        end[t] += 1
        adj[end[h]] = 2 * i + 1
        end[h] += 1
        to[2 * i] = h
        to[2 * i + 1] = t
    return p


@njit(cache=True)
def _attach(n, top, q, j, hub, reach, mark_t, col, stable, regions, net, fresh, back, ex):
    """Put sink ``j``'s column into the sub-network: arc ``stable + (m - 1) n + u`` is
    ``(m, u) -> (m - 1, j)`` when that arc is not already in it; each column node gets a region
    holding its own list followed by the reverses of its new in-arcs. ``col[m - 1, u] = A_m[u, j]``.
    ``fresh``: the arcs start empty, except that the flow ``back[u]`` a tail got back from the old
    sink's column is sent straight into the new one as far as the arc takes it (a push that keeps
    the preflow valid; labels are recomputed afterwards); otherwise they keep their flow (after a
    re-layout)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    width = 3 * n + 8
    for m in range(1, top):
        if m > 1 and hub[m - 1, j]:  # all its in-arcs are hub arcs already
            continue
        c = (m - 1) * n + j
        r = regions + (m - 1) * width
        p = r
        for x in range(beg[c], end[c]):
            adj[p] = adj[x]
            p += 1
        for u in range(n):
            tail = m * n + u
            returned = back[tail]
            back[tail] = 0.0
            if not reach[m, u]:
                continue
            if m > 1 and (u == q or u == j or hub[m, u] or _learned(mark_t, m - 1, j, u)):
                continue
            cap = col[m - 1, u]
            if cap <= 0.0:
                continue
            i = stable + (m - 1) * n + u
            tl[i], hd[i], cp[i] = tail, c, cap
            if fresh:
                res[2 * i], res[2 * i + 1] = cap, 0.0
                x = min(returned, ex[tail])
                if x >= cap:  # saturated: exact assignment
                    res[2 * i], res[2 * i + 1] = 0.0, cap
                    ex[tail] -= cap
                    ex[c] += cap
                elif x > 0.0:
                    res[2 * i], res[2 * i + 1] = cap - x, x
                    ex[tail] -= x
                    ex[c] += x
            to[2 * i], to[2 * i + 1] = c, tail
            adj[slot[tail]] = 2 * i
            end[tail] = slot[tail] + 1
            used[tail] = True
            adj[p] = 2 * i + 1
            p += 1
        beg[c], end[c] = r, p


@njit(cache=True)
def _detach(n, top, j, net):
    """Undo ``_attach`` for sink ``j`` (its arcs must carry no flow)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    for m in range(1, top):
        c = (m - 1) * n + j
        beg[c], end[c] = beg0[c], beg0[c] + deg[c]
        for u in range(n):
            v = m * n + u
            end[v] = beg0[v] + deg[v]
            used[v] = False


@njit(cache=True)
def _cancel(n, top, j, stable, net, ex, back):
    """Take sink ``j``'s column arcs out of the preflow: their flow returns to their tails as excess,
    and each deficit left at a head is cancelled along arcs that carry flow, layer by layer
    downwards (a node's outflow covers what it lost; the layer-1 nodes hold the old sink's
    returned inflow, which covers what reaches them)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    for m in range(1, top):
        for u in range(n):
            i = stable + (m - 1) * n + u
            v = m * n + u
            if not used[v]:
                continue
            f = res[2 * i + 1]
            back[v] = f
            if f > 0.0:
                ex[v] += f
                if m > 1:
                    ex[(m - 1) * n + j] -= f
                res[2 * i + 1] = 0.0
                res[2 * i] = cp[i]
    for m in range(top - 1, 0, -1):
        for k in range(n):
            v = m * n + k
            if ex[v] >= 0.0:
                continue
            need = -ex[v]
            ex[v] = 0.0
            if m == 1:  # only rounding can leave a deficit here
                continue
            for x in range(beg[v], end[v]):
                e = adj[x]
                if e & 1 or res[e + 1] <= 0.0:  # a reverse arc, or no flow
                    continue
                f = res[e + 1]
                if f <= need:  # all of it: assigned 0 exactly
                    res[e + 1] = 0.0
                    res[e] = cp[e >> 1]
                    ex[to[e]] -= f
                    need -= f
                else:
                    res[e + 1] = f - need
                    res[e] += need
                    ex[to[e]] -= need
                    need = 0.0
                if need <= 0.0:
                    break


@njit(cache=True)
def _bfs(nv, net, t, d, queue):
    """Exact distances to ``t`` in the residual graph (``nv``: cannot reach it); returns how many
    nodes were reached (listed in ``queue`` by distance)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    d[:nv] = nv
    d[t] = 0
    queue[0] = t
    tail = 1
    head = 0
    while head < tail:
        v = queue[head]
        head += 1
        dv = d[v] + 1
        for x in range(beg[v], end[v]):
            e = adj[x]
            u = to[e]
            if d[u] == nv and res[e ^ 1] > 0.0:
                d[u] = dv
                queue[tail] = u
                tail += 1
    return tail


@njit(cache=True)
def _global_relabel(nv, net, labels, s, t):
    """Exact labels; rebuild the active buckets and the per-label node lists.
    Returns (highest active label, highest label)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    ex, d, cur, anext, ahead, lnext, lprev, lhead, queue = labels
    reached = _bfs(nv, net, t, d, queue)
    d[s] = nv
    ahead[:] = -1
    lhead[:] = -1
    highest = -1
    for i in range(reached):
        v = queue[i]
        if v == s:
            continue
        dv = d[v]
        cur[v] = beg[v]
        lnext[v] = lhead[dv]
        lprev[v] = -1
        if lhead[dv] >= 0:
            lprev[lhead[dv]] = v
        lhead[dv] = v
        if ex[v] > 0.0 and v != t:
            anext[v] = ahead[dv]
            ahead[dv] = v
            highest = max(highest, dv)
    return highest, d[queue[reached - 1]]


@njit(cache=True)
def _push_relabel(nv, n, net, labels, s, t, target, arcs, stats, lowest):
    """Push-relabel (phase one) from the current preflow, until no node that can reach ``t``
    holds excess or ``ex[t] >= target``: the lowest active label first for ``lowest`` pushes,
    then the highest (see the module docstring, which node next). Every arc joins adjacent
    layers, so labels keep their layer's parity and a relabel stops at the first residual
    neighbour one label up (see ``.engine``). ``highest`` bounds the active labels from above
    in both orders (a gap empties every bucket above it)."""
    tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used = net
    ex, d, cur, anext, ahead, lnext, lprev, lhead, queue = labels
    big = nv
    # Exact labels from the start (see the module docstring, warm starts): O(E) of the sparse
    # sub-network, against thousands of wasted pushes per sink from ``label = layer``.
    highest, top_label = _global_relabel(nv, net, labels, s, t)
    work = 0
    budget = 2 * nv + 4 * arcs
    floor = 0  # no active node below this label
    pushed = stats[0] + lowest  # the push count at which the lowest-first order ends
    while True:
        if stats[0] < pushed:
            while floor <= highest and ahead[floor] < 0:
                floor += 1
            if floor > highest:
                break
            label = floor
        else:
            while highest >= 0 and ahead[highest] < 0:
                highest -= 1
            if highest < 0:
                break
            label = highest
        u = ahead[label]
        ahead[label] = anext[u]
        stop = end[u]
        while ex[u] > 0.0:
            x = cur[u]
            if x == stop:  # relabel
                old = d[u]
                p, nn = lprev[u], lnext[u]
                if p >= 0:
                    lnext[p] = nn
                else:
                    lhead[old] = nn
                if nn >= 0:
                    lprev[nn] = p
                stats[1] += 1
                if lhead[old] < 0:  # gap: nothing at or above ``old`` can reach the sink
                    for lab in range(old + 1, top_label + 1):
                        w = lhead[lab]
                        while w >= 0:
                            d[w] = big
                            w = lnext[w]
                        lhead[lab] = -1
                        ahead[lab] = -1
                    top_label = old - 1
                    d[u] = big
                    highest = old
                    break
                low = big
                y = beg[u]
                while y < stop:
                    e = adj[y]
                    if res[e] > 0.0:
                        dv = d[to[e]]
                        if dv < low:
                            low = dv
                            cur[u] = y
                            if dv <= old + 1:
                                break
                    y += 1
                work += y - beg[u] + 12
                if low + 1 >= big:
                    d[u] = big
                    break
                d[u] = low + 1
                lnext[u] = lhead[low + 1]
                lprev[u] = -1
                if lhead[low + 1] >= 0:
                    lprev[lhead[low + 1]] = u
                lhead[low + 1] = u
                top_label = max(top_label, low + 1)
                continue
            e = adj[x]
            v = to[e]
            r = res[e]
            if r > 0.0 and d[u] == d[v] + 1:
                stats[0] += 1
                idle = ex[v] == 0.0
                push(res, e, res, e ^ 1, cp[e >> 1], ex, u, v)  # the pair's residuals sum to the capacity
                if v == t:
                    if ex[t] >= target:
                        return ex[t]
                elif idle:
                    anext[v] = ahead[d[v]]
                    ahead[d[v]] = v
                    highest = max(highest, d[v])
                    floor = min(floor, d[v])
                if ex[u] == 0.0:
                    break
            cur[u] = x + 1
        if work > budget:  # labels drift from distances: recompute them exactly
            work = 0
            stats[2] += 1
            highest, top_label = _global_relabel(nv, net, labels, s, t)
            floor = 0
    return ex[t]


@njit(cache=True)
def _sink_side(n, top, nv, d, tlist, tcnt):
    """Per-layer lists of the nodes that can reach the sink (``d < nv``)."""
    tcnt[:top + 1] = 0
    for v in range(nv):
        if d[v] < nv:
            m = v // n
            tlist[m, tcnt[m]] = v % n
            tcnt[m] += 1


@njit(cache=True)
def _cut(a, rows, reach, top, q, j, n, d, nv, tlist, tcnt):
    """Full-graph capacity of the cut (S, T): T = nodes with ``d < nv``, S = the other nodes the
    source reaches. Per source-side node, the cheaper of summing over T or over its complement."""
    cut = 0.0
    for m in range(top, 0, -1):
        w = a[m - 1]
        few = tcnt[m - 1] <= n // 2
        for u in range(n):
            if (m == top and u != q) or not reach[m, u] or d[m * n + u] < nv:
                continue
            if m == 1:
                cut += w[u, j]
            elif few:
                for i in range(tcnt[m - 1]):
                    cut += w[u, tlist[m - 1, i]]
            else:
                part = 0.0
                for v in range(n):
                    if d[(m - 1) * n + v] >= nv:
                        part += w[u, v]
                cut += max(0.0, rows[m - 1, u] - part)
    return cut


@njit(cache=True)
def _grow(a, hub, mark_t, reach, top, q, j, n, d, nv, tlist, tcnt, net, ne):
    """Add the full-graph arcs that cross the cut outside the sub-network, those of at least
    ``GROW`` times the largest; they stay for later sinks. Returns the new arc count."""
    tl, hd, cp, res = net.tail, net.head, net.capacity, net.residual
    largest = 0.0
    for sweep in range(2):
        threshold = GROW * largest
        for m in range(top, 1, -1):  # the layer-1 arcs into the sink are all in the sub-network
            w = a[m - 1]
            for u in range(n):
                if (m == top and u != q) or not reach[m, u] or d[m * n + u] < nv:
                    continue
                for i in range(tcnt[m - 1]):
                    v = tlist[m - 1, i]
                    c = w[u, v]
                    if c <= 0.0 or (sweep == 0 and c <= largest) or (sweep == 1 and c < threshold):
                        continue
                    if _in_net(hub, mark_t, top, q, j, m, u, v):
                        continue
                    if sweep == 0:
                        largest = c
                    elif ne < len(cp):
                        _learn(mark_t, m - 1, v, u)
                        tl[ne], hd[ne], cp[ne] = m * n + u, (m - 1) * n + v, c
                        res[2 * ne], res[2 * ne + 1] = c, 0.0
                        ne += 1
        if largest == 0.0:
            break
    return ne


@njit(cache=True)
def _seed(a, heavy, hub, mark_t, reach, top, q, n, net, ne):
    """Add each reachable node's ``HEAVY`` largest arcs (below the top layer, above layer 1) as
    learned arcs before the first sink. Why: peaky attention (real heads, Dirichlet rows) sends
    most of a row through a few arcs at scattered columns that are no hub, and learning them one
    cut check at a time cost most of a row (9,000 learned arcs on a Dirichlet(0.1) 12 x 128 row).
    Returns the new arc count."""
    tl, hd, cp, res = net.tail, net.head, net.capacity, net.residual
    for m in range(top - 1, 1, -1):
        for u in range(n):
            if not reach[m, u]:
                continue
            for i in range(heavy.shape[2]):
                v = heavy[m - 1, u, i]
                c = a[m - 1, u, v]
                if c <= 0.0 or ne >= len(cp) or _in_net(hub, mark_t, top, q, -1, m, u, v):
                    continue
                _learn(mark_t, m - 1, v, u)
                tl[ne], hd[ne], cp[ne] = m * n + u, (m - 1) * n + v, c
                res[2 * ne], res[2 * ne + 1] = c, 0.0
                ne += 1
    return ne


@njit(cache=True)
def _largest(a, k, out):
    """``out[m, u]``: the columns of the ``k`` largest off-diagonal entries of row ``u`` of ``a[m]``
    (largest first; ties keep the lower column), in one pass and no temporary of the graph's size."""
    layers, n = a.shape[0], a.shape[1]
    best = np.empty(k)
    for m in range(layers):
        for u in range(n):
            best[:] = -1.0
            for v in range(n):
                c = a[m, u, v]
                if v == u or c <= best[k - 1]:
                    continue
                i = k - 1
                while i > 0 and best[i - 1] < c:
                    best[i] = best[i - 1]
                    out[m, u, i] = out[m, u, i - 1]
                    i -= 1
                best[i] = c
                out[m, u, i] = v


def heavy_arcs(a: np.ndarray, k: int = HEAVY) -> np.ndarray:
    """``(L, n, k)``: the columns of the ``k`` largest off-diagonal entries of every row of ``a``
    (an entry may repeat the diagonal's column when a row has fewer than ``k`` positive entries;
    ``_seed`` skips zero and present arcs)."""
    n = a.shape[-1]
    k = min(k, n - 1)
    out = np.zeros(a.shape[:2] + (max(k, 0),), np.int64)
    for m in range(a.shape[0]):
        out[m, :, :] = np.arange(n)[:, None]  # the diagonal: never seeded twice (it is stable)
    if k > 0:
        _largest(a, k, out)
    return out


def graph_of(a: np.ndarray) -> Graph:
    """Everything the kernels read about ``a`` ``(L, n, n)``, computed once per graph."""
    row_sums, col_sums, total = sums(a)
    hub, hubl, nhub = hubs(a)
    return Graph(a, row_sums, col_sums, total, hub, hubl, nhub, np.where(nhub > 0, hubl[:, 0], -1), heavy_arcs(a),
                 live_totals(a, col_sums))


@njit(cache=True, nogil=True)  # called from Python too (solve_sinks): see engine._source_sinks
def _source_row(graph, top, q, sinks, out, stats, rounds, cancel):
    """Flow from ``(top, q)`` to each token in ``sinks`` (one warm chain) into ``out``; -1 marks a
    sink left to the dense engine. ``stats``: pushes, relabels, global relabels, cut checks,
    sinks left, learned arcs. Returns early, between sinks, once ``cancel[0]`` is set."""
    a, rows, cols, total, hub, hubl, nhub, hub1, heavy, live_total = graph
    n = a.shape[1]
    if top == 1:
        for j in sinks:
            out[j] = a[0, q, j]
        return
    if top == 2:
        for j in sinks:
            out[j] = layer_two(a, q, j)
        return
    nv = (top + 1) * n
    s = top * n + q
    reach = np.zeros((top + 1, n), np.bool_)
    _reach(a, top, q, reach)
    cap = nv * (2 * HUBS + 24)
    tl, hd, cp = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap)
    res, to = np.empty(2 * cap), np.empty(2 * cap, np.int64)
    adj = np.empty(2 * cap + nv + top * (3 * n + 8), np.int64)
    beg, end, beg0 = np.empty(nv, np.int64), np.empty(nv, np.int64), np.empty(nv, np.int64)
    deg, slot, used = np.empty(nv, np.int64), np.empty(nv, np.int64), np.zeros(nv, np.bool_)
    ex, d, cur, back = np.zeros(nv), np.empty(nv, np.int64), np.empty(nv, np.int64), np.zeros(nv)
    anext, ahead = np.empty(nv, np.int64), np.empty(nv + 2, np.int64)
    lnext, lprev, lhead = np.empty(nv, np.int64), np.empty(nv, np.int64), np.empty(nv + 2, np.int64)
    queue = np.empty(nv, np.int64)
    tlist, tcnt = np.empty((top + 1, n), np.int64), np.empty(top + 1, np.int64)
    mark_t = np.zeros((top, n, (n + 7) // 8), np.uint8)
    col = np.empty((top, n))
    block = np.empty((top, 8, n))  # columns of 8 consecutive sinks: one strided pass per block
    blocked = -1
    net = Arcs(tl, hd, cp, res, to, adj, beg, end, beg0, deg, slot, used)
    labels = Labels(ex, d, cur, anext, ahead, lnext, lprev, lhead, queue)

    stable = _add_stable(a, hub, hubl, nhub, reach, top, q, tl, hd, cp)
    for i in range(stable):
        if tl[i] == s:  # saturate the source's arcs once: phase one never undoes them
            res[2 * i], res[2 * i + 1] = 0.0, cp[i]
            ex[hd[i]] += cp[i]
        else:
            res[2 * i], res[2 * i + 1] = cp[i], 0.0
    learned0 = stable + (top - 1) * n
    ne = _seed(a, heavy, hub, mark_t, reach, top, q, n, net, learned0)
    regions = _layout(nv, net, stable, learned0, ne)
    old = -1
    for j in sinks:
        if cancel[0]:
            break
        ub = cut_bound(a, rows, cols, total, hub1, top, q, j, live_total)
        if ub <= 0.0:
            out[j] = 0.0
            continue
        if j // 8 != blocked:
            blocked = j // 8
            width = min(8, n - 8 * blocked)
            for m in range(top):
                for u in range(n):
                    for b in range(width):
                        block[m, b, u] = a[m, u, 8 * blocked + b]
        col[:, :] = block[:, j % 8, :]
        if old >= 0:
            _cancel(n, top, old, stable, net, ex, back)
            _detach(n, top, old, net)
        _attach(n, top, q, j, hub, reach, mark_t, col, stable, regions, net, True, back, ex)
        old = j
        value = -1.0
        for round_ in range(rounds):
            target = ub * (1.0 - TOL)
            lowest = LOWEST_FIRST * nv if round_ == 0 else 0
            value = _push_relabel(nv, n, net, labels, s, j, target, ne, stats, lowest)
            if value >= target:
                break
            _bfs(nv, net, j, d, queue)
            _sink_side(n, top, nv, d, tlist, tcnt)
            stats[3] += 1
            ub = min(ub, _cut(a, rows, reach, top, q, j, n, d, nv, tlist, tcnt))
            if value >= ub * (1.0 - TOL):
                break
            grown = _grow(a, hub, mark_t, reach, top, q, j, n, d, nv, tlist, tcnt, net, ne)
            if grown == ne:
                value = -1.0
                break
            ne = grown
            regions = _layout(nv, net, stable, learned0, ne)
            used[:] = False
            _attach(n, top, q, j, hub, reach, mark_t, col, stable, regions, net, False, back, ex)
        else:
            value = -1.0
        if value < 0.0:
            stats[4] += 1
        out[j] = value
    stats[5] += ne - learned0


@njit(cache=True, nogil=True)
def _tasks(graph, tops, qs, lo, hi, row, out, stats, rounds, cancel):
    """Task ``t``: sinks ``lo[t]..hi[t]-1`` of row ``row[t]``, one warm chain each. It releases the
    GIL, so Python threads run tasks side by side (``solve``)."""
    for t in range(len(lo)):
        r = row[t]
        _source_row(graph, tops[r], qs[r], np.arange(lo[t], hi[t]), out[r], stats[t], rounds, cancel)


def split(rows: int, n: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tasks for ``rows`` rows of ``n`` sinks: whole rows, or contiguous blocks of sinks when there
    are fewer rows than threads (a lone row still keeps every core busy)."""
    parts = max(1, min(n, -(-threads // rows)))
    edges = np.linspace(0, n, parts + 1).astype(np.int64)
    row = np.repeat(np.arange(rows, dtype=np.int64), parts)
    return np.tile(edges[:-1], rows), np.tile(edges[1:], rows), row


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool of ``threads`` Python threads per process, kept between calls (idle threads wait on
    a queue: they neither spin nor cost anything). Python threads, not prange: ``_tasks``
    releases the GIL, and threads cost no second (parallel) compilation of the solver."""
    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="attnflow-certified")
    return _POOLS[threads]


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, stats: np.ndarray | None = None,
          rounds: int = ROUNDS, cancel: np.ndarray | None = None, graph: Graph | None = None) -> np.ndarray:
    """Same contract as ``attnflow.core.flow.oracle.solve``. ``stats`` (optional, ``(6,)``
    int64) accumulates pushes, relabels, global relabels, cut checks, sinks left to the engine
    and learned arcs; ``rounds``: cut-generation rounds per sink before it goes to the engine;
    ``cancel``: as in ``attnflow.core.flow.oracle.solve``; ``graph``: ``graph_of`` of
    ``a`` when the caller already has it (a caller that solves one graph in parts)."""
    a = engine.capacities(a)
    cancel = engine.never() if cancel is None else cancel
    n = a.shape[-1]
    graph = graph_of(a) if graph is None else graph

    def rows(tops: np.ndarray, qs: np.ndarray, out: np.ndarray, serial: bool, threads: int) -> None:
        fixed = (graph, tops, qs)
        if serial:  # small work: one warm chain per row on this thread (waking threads costs more than it saves)
            lo, hi, row = split(len(tops), n, 1)
            task_stats = np.zeros((len(lo), 6), np.int64)
            _tasks(*fixed, lo, hi, row, out, task_stats, rounds, cancel)
        else:  # one task at a time per thread: rows differ in cost, so no fixed split
            lo, hi, row = split(len(tops), n, threads)
            task_stats = np.zeros((len(lo), 6), np.int64)

            def task(t: int) -> None:
                _tasks(*fixed, lo[t:t + 1], hi[t:t + 1], row[t:t + 1], out, task_stats[t:t + 1], rounds, cancel)

            list(_pool(threads).map(task, range(len(lo))))
        if cancel[0]:
            return
        for r in range(len(tops)):  # sinks no cut certified (rare): the dense engine
            left = np.flatnonzero(out[r] < 0)
            if len(left):
                engine._source_sinks(a, tops[r], qs[r], left, out[r], cancel)
        if stats is not None:
            stats[:] += task_stats.sum(axis=0)

    return engine.in_chunks(rows, n, layers, positions, progress, cancel)


def solve_sinks(a: np.ndarray, top: int, q: int, sinks: np.ndarray, cancel: np.ndarray | None = None,
                graph: Graph | None = None) -> np.ndarray:
    """Flow from ``(top, q)`` to the given tokens, on this thread (``(len(sinks),)``); ``cancel``
    and ``graph`` as in ``solve`` (``cancel`` is read between sinks)."""
    out = np.zeros(a.shape[-1])
    a = engine.capacities(a)
    cancel = engine.never() if cancel is None else cancel
    graph = graph_of(a) if graph is None else graph
    _source_row(graph, top, q, np.asarray(sinks, dtype=np.int64), out, np.zeros(6, np.int64), ROUNDS, cancel)
    left = np.flatnonzero(out < 0)
    if len(left) and not cancel[0]:
        engine._source_sinks(a, top, q, left, out, cancel)
    return out[sinks]
