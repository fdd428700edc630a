"""Batched exact flow in torch: synchronous push-relabel on dense tensors, many pairs at once.

The path for a GPU (``solver="torch"``; it runs on any torch device and is tested on the CPU, where
the numba solvers are much faster). One problem per (source, sink) pair: all the sinks of a few
sources of one layer are solved together, as a batch of dense layered graphs, so every step is a
handful of tensor operations over ``(batch, layers, n, n)``.

Algorithm: the synchronous ("pulse") form of push-relabel (Goldberg and Tarjan 1988, section 6).
State per problem: the flow ``f[m, u, v]`` on each arc ``(m + 1, u) -> (m, v)``, the excess of each
node and a valid labelling ``d`` (``d(x) <= d(y) + 1`` on every residual arc ``x -> y``). A pulse:

1. every active node (excess, label below ``big``, neither terminal) pushes along its admissible
   arcs (residual and ``d(x) = d(y) + 1``), down-arcs first, then up-arcs (cancelling flow), in
   column order: the push on an arc is ``min(residual, excess left before it)`` (an exclusive
   cumulative sum), so a node either saturates an arc or spends its excess on it;
2. every node still holding excess is relabelled to one more than its lowest residual neighbour.

Two nodes never push along the same arc in one pulse (that would need ``d(x) = d(y) + 1`` and
``d(y) = d(x) + 1``), so the pushes of a pulse are those of some sequential order, and labels
computed from the pre-relabel snapshot stay valid because labels only grow. Exact labels (the
breadth-first distance to the sink, by repeated relaxation) start the run and are recomputed every
``2 * (layers + 1)`` pulses. When no node can push any more the preflow is maximum and the sink's
excess is the flow value (phase one of push-relabel).

Why it is exact: as for ``.engine``, no epsilon is used: a saturating push assigns the flow its
capacity (or 0 on a reverse arc) and a node that spends its excess is assigned 0, so residuals and
excesses reach 0 exactly and the usual bounds (``O(V^2)`` pulses) hold in floating point.

Memory: ``3 * batch * layers * n^2`` doubles; batches are sized to ``MEMORY`` elements.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

MEMORY = 2**25  # elements of one (batch, layers, n, n) tensor


def _exact_labels(cap: torch.Tensor, f: torch.Tensor, q: torch.Tensor, j: torch.Tensor, big: int) -> torch.Tensor:
    """Breadth-first distance to the sink in the residual graph, ``big`` where it cannot be reached.
    ``d``: ``(batch, top + 1, n)``."""
    b, top, n, _ = f.shape
    d = torch.full((b, top + 1, n), big, dtype=torch.long, device=f.device)
    rows = torch.arange(b, device=f.device)
    d[rows, 0, j] = 0
    down = cap - f > 0  # (m + 1, u) -> (m, v) residual
    up = f > 0  # (m, v) -> (m + 1, u) residual
    for _ in range((top + 1) * n):
        via_down = torch.where(down, d[:, :-1, None, :] + 1, big).amin(-1)  # nodes of layers 1..top
        via_up = torch.where(up, d[:, 1:, :, None] + 1, big).amin(-2)  # nodes of layers 0..top-1
        new = d.clone()
        new[:, 1:] = torch.minimum(new[:, 1:], via_down)
        new[:, :-1] = torch.minimum(new[:, :-1], via_up)
        new[rows, 0, j] = 0
        new = new.clamp(max=big)
        if torch.equal(new, d):
            break
        d = new
    d[rows, top, q] = big  # the source is never relabelled nor pushed into
    return d


def _max_flow(cap: torch.Tensor, q: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Maximum flow of each problem: ``cap`` ``(batch, top, n, n)`` (already restricted to the
    source's row at the top and the sink's column at the bottom), sources ``(top, q)``, sinks
    ``(0, j)``."""
    b, top, n, _ = cap.shape
    dev, rows = cap.device, torch.arange(b, device=cap.device)
    big = (top + 1) * n
    f = torch.zeros_like(cap)
    f[rows, top - 1, q] = cap[rows, top - 1, q]  # saturate the source's arcs
    ex = torch.zeros((b, top + 1, n), dtype=cap.dtype, device=dev)
    ex[:, top - 1] = cap[rows, top - 1, q]
    terminal = torch.zeros((b, top + 1, n), dtype=torch.bool, device=dev)
    terminal[rows, top, q] = True
    terminal[rows, 0, j] = True
    d = _exact_labels(cap, f, q, j, big)
    pulse = 0
    while True:
        active = (ex > 0) & (d < big) & ~terminal
        if not bool(active.any()):
            break
        pulse += 1
        if pulse % (2 * (top + 1)) == 0:
            d = _exact_labels(cap, f, q, j, big)
            continue
        # Admissible residuals: down[:, m, u, v] for (m + 1, u) -> (m, v); up[:, m, v, u] for (m, v) -> (m + 1, u).
        down = torch.where(d[:, 1:, :, None] == d[:, :-1, None, :] + 1, cap - f, 0.0)
        up = torch.where(d[:, :-1, :, None] == d[:, 1:, None, :] + 1, f.transpose(2, 3), 0.0)
        down = torch.where(active[:, 1:, :, None], down, 0.0)
        up = torch.where(active[:, :-1, :, None], up, 0.0)
        # Arcs of node (m, x), down first: a zero-width down list at layer 0, none up at the top.
        arcs = torch.zeros((b, top + 1, n, 2 * n), dtype=cap.dtype, device=dev)
        arcs[:, 1:, :, :n] = down
        arcs[:, :-1, :, n:] = up
        before = arcs.cumsum(-1) - arcs
        push = torch.minimum(arcs, (ex[..., None] - before).clamp(min=0.0))
        spent = before[..., -1] + arcs[..., -1] >= ex  # the node's excess runs out on these arcs
        pd, pu = push[:, 1:, :, :n], push[:, :-1, :, n:]
        # Saturating pushes assign the capacity (or 0 on a reverse arc) exactly.
        f = torch.where((pd > 0) & (pd == down), cap, f + pd)
        pu_t = pu.transpose(2, 3)
        f = torch.where((pu_t > 0) & (pu_t == up.transpose(2, 3)), 0.0, f - pu_t)
        received = torch.zeros_like(ex)
        received[:, :-1] += pd.sum(2)
        received[:, 1:] += pu.sum(2)
        left = torch.where(spent, 0.0, ex - push.sum(-1))
        ex = torch.where(active, left, ex) + received
        # Relabel every node still holding excess: one more than its lowest residual neighbour.
        still = (ex > 0) & (d < big) & ~terminal
        low = torch.full_like(d, big - 1)
        low[:, 1:] = torch.where(cap - f > 0, d[:, :-1, None, :], big - 1).amin(-1)
        low[:, :-1] = torch.minimum(low[:, :-1], torch.where(f > 0, d[:, 1:, :, None], big - 1).amin(-2))
        d = torch.where(still, torch.maximum(d, low + 1), d)
    return ex[rows, 0, j]


def solve(a: np.ndarray, layers: np.ndarray, positions: np.ndarray,
          progress: Callable[[int], None] | None = None, device: str | torch.device | None = None,
          cancel: np.ndarray | None = None) -> np.ndarray:
    """Same contract as ``attnflow.core.flow.oracle.solve``; runs on ``device`` (default: CUDA
    when available, else the CPU)."""
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    w = torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64), device=dev)
    n = w.shape[-1]
    out = np.zeros((len(layers), len(positions), n))
    for li, layer in enumerate(np.asarray(layers)):
        top = int(layer) + 1
        if top == 1:
            out[li] = w[0][torch.as_tensor(np.asarray(positions), device=dev)].cpu().numpy()
            if progress is not None:
                progress(len(positions))
            continue
        pairs = len(positions) * n
        chunk = max(1, MEMORY // (top * n * n))  # problems per batch
        flat = np.zeros(pairs)
        for start in range(0, pairs, chunk):
            if cancel is not None and cancel[0]:
                return out
            k = torch.arange(start, min(start + chunk, pairs), device=dev)
            q = torch.as_tensor(np.asarray(positions), device=dev)[k // n]
            j = k % n
            cap = w[:top].unsqueeze(0).repeat(len(k), 1, 1, 1)
            rows = torch.arange(len(k), device=dev)
            keep = torch.zeros((len(k), n), dtype=torch.bool, device=dev)
            keep[rows, q] = True
            cap[:, top - 1] *= keep[:, :, None]  # only the source's arcs leave the top layer
            keep = torch.zeros((len(k), n), dtype=torch.bool, device=dev)
            keep[rows, j] = True
            cap[:, 0] *= keep[:, None, :]  # only the sink's in-arcs enter the input layer
            flat[start:start + len(k)] = _max_flow(cap, q, j).cpu().numpy()
            if progress is not None:
                progress(int((start + len(k)) // n - start // n))
        out[li] = flat.reshape(len(positions), n)
    return out
