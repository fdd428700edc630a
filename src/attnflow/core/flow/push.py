"""The push step of push-relabel, shared by the dense engine and the certified solver.

``push(forward, f, backward, b, capacity, ex, u, v)`` sends ``delta = min(ex[u], forward[f])``
from node ``u`` to node ``v`` along an arc whose residual capacity is ``forward[f]`` and whose
reverse residual is ``backward[b]`` (``f`` and ``b`` are indices of any dimension: ``(layer, row,
column)`` in the engine's dense residual arrays, an arc number and its pair ``e ^ 1`` in the
certified solver's arc list; the two arrays may be one).

Why it is exact (the argument ``.engine`` relies on): no epsilon is used. When the residual is
the smaller the push *saturates*: the residual is assigned 0 and the reverse residual the arc's
capacity (the pair always sums to it), and the excess drops by ``r``. Otherwise the excess is
*assigned* 0 and moves whole. A residual therefore reaches 0 only by assignment (``r - e`` with
``e < r`` is never 0 in floating point), so a saturated arc carries exactly its capacity and an
emptied one exactly 0, and the combinatorial bounds of push-relabel hold in floating point.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def push(forward, f, backward, b, capacity, ex, u, v):
    """Send ``min(ex[u], forward[f])`` from ``u`` to ``v``; returns True when the arc saturated."""
    r = forward[f]
    if ex[u] >= r:  # saturate: the flow is assigned the capacity exactly
        forward[f] = 0.0
        backward[b] = capacity
        ex[u] -= r
        ex[v] += r
        return True
    forward[f] = r - ex[u]
    backward[b] += ex[u]
    ex[v] += ex[u]
    ex[u] = 0.0
    return False
