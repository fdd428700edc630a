"""Attention flow (Abnar & Zuidema 2020, section 3): attention weights as capacities.

The layered attention graph has a node per (layer, position), layer 0 being the input tokens, and
an edge from ``(l, q)`` to ``(l-1, k)`` with capacity ``A_l[q, k]``, the residual-augmented,
head-fused attention of layer ``l`` (see ``attnflow.core.fusion``). The flow value of input token
``j`` for node ``(l, q)`` is the maximum flow from ``(l, q)`` down to ``(0, j)``. With
``normalize=True`` each row is divided by its sum, as the paper's code does.

Solvers (all return the same unnormalised values; see each module for its algorithm):

- ``"networkx"``: ``.oracle``, the paper's semantics, one Edmonds-Karp per pair; the test oracle.
- ``"scipy"``: ``.scipy_pairs``, one integer-scaled scipy max-flow per pair (the peer baseline).
- ``"engine"``: ``.engine``, warm-started push-relabel on the dense graph, compiled with numba.
- ``"certified"``: ``.certified``, max-flow on a sparse sub-network certified by a cut of the
  full graph (``.cuts`` gives the cut bounds and the layer-1/layer-2 closed forms).
- ``"torch"``: ``.batched``, synchronous push-relabel on dense tensors, many pairs at once, on a
  CUDA device when one is present (the path for a GPU; exact, slow on a CPU).
- ``"auto"``: ``.auto``, the faster of the two numba solvers per layer; the default.

How a call is run is not decided here: ``flow`` builds a ``FlowJob`` (the solver, the
graphs, the output and a cancel flag) and hands it to a ``runner``. Without one the job runs on
the calling thread. The api passes ``attnflow.api.flowrun.run``, which estimates the work
first, warns about long runs and solves on a thread it can cancel on Ctrl-C; the compiled solvers
check the job's cancel flag between sinks. This package itself starts no process and touches no
signal.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from attnflow.core.fusion import augmented
from attnflow.core.inputs import as_stack
from attnflow.core.maps import check_fusion
from attnflow.errors import AttnflowError

# solver name -> its module (imported on first use: numba, networkx and scipy load only when a flow
# is computed), or a function with the same contract
SOLVERS: dict[str, str | Callable[..., np.ndarray]] = {
    "networkx": "oracle",
    "scipy": "scipy_pairs",
    "engine": "engine",
    "certified": "certified",
    "torch": "batched",
    "auto": "auto",
}


class FlowCancelled(Exception):
    """Raised inside a ``FlowJob`` whose cancel flag was set (the runner turns it into
    ``KeyboardInterrupt`` in the caller)."""


@dataclass
class FlowJob:
    """The work of one ``flow`` call, for a runner: ``run()`` fills ``out``.

    solve: the solver (``solve(a, layers, positions, progress=..., cancel=...)``); a:
    ``(batch, heads, L, n, n)`` capacities (float32, or float64 when the maps are); mask
    ``(batch, n)``; layers, positions: the requested rows; out ``(batch, heads, len(layers), len(positions), n)``; tick(k): k more rows
    done; progress: the caller's progress callback (a runner may hand it an estimate); cancel:
    ``(1,)`` bool, set ``cancel[0] = True`` from any thread to stop the run between sinks (``run``
    then raises ``FlowCancelled``).
    """

    solve: Callable[..., np.ndarray]
    a: np.ndarray
    mask: np.ndarray
    layers: np.ndarray
    positions: np.ndarray
    out: np.ndarray
    tick: Callable[[int], None]
    progress: Any = None
    cancel: np.ndarray = field(default_factory=lambda: np.zeros(1, np.bool_))

    def first_graph(self) -> tuple[np.ndarray, list[int]]:
        """Graph 0 without its padding (no copy when nothing is padded), and the positions in it:
        what an estimate times."""
        if self.mask[0].all():
            return self.a[0, 0], [int(p) for p in self.positions]
        real = np.flatnonzero(self.mask[0])
        index = -np.ones(self.mask.shape[1], dtype=np.int64)
        index[real] = np.arange(len(real))
        inside = [int(index[p]) for p in self.positions if index[p] >= 0] or [len(real) - 1]
        return np.ascontiguousarray(self.a[0, 0][:, real[:, None], real]), inside

    @property
    def graphs(self) -> int:
        return self.a.shape[0] * self.a.shape[1]

    def run(self) -> None:
        """Solve every requested row into ``out``, one layer per solver call (progress ticks and
        the cancel flag is read after every layer, and by the compiled solvers between sinks)."""
        _solve_all(self)


def run_here(job: FlowJob) -> None:
    """The plain runner: the job on the calling thread."""
    job.run()


def _solver(name: str) -> Callable[..., np.ndarray]:
    if name not in SOLVERS:
        raise AttnflowError(f"solver must be one of {sorted(SOLVERS)}; got {name!r}")
    found = SOLVERS[name]
    if isinstance(found, str):
        return importlib.import_module(f"attnflow.core.flow.{found}").solve
    return found


def resolve_indices(given: Any, size: int, what: str) -> np.ndarray:
    if given is None:
        return np.arange(size)
    values = np.atleast_1d(np.asarray(given))
    if values.size == 0 or values.dtype.kind not in "iu" or values.ndim != 1:
        raise AttnflowError(f"{what} must be a non-empty list of integers; got {given!r}")
    if (values < -size).any() or (values >= size).any():
        raise AttnflowError(f"{what} must lie in [{-size}, {size}); got {given!r}")
    return values % size


def normalize_rows(values: np.ndarray) -> np.ndarray:
    """Divide each row (last axis) by its sum; all-zero rows stay zero."""
    sums = values.sum(axis=-1, keepdims=True)
    return np.divide(values, sums, out=np.zeros_like(values), where=sums > 0)


def flow(attentions: Any, *, residual: float = 0.5, head_fusion: str | None = "mean", positions: Any = None,
         layers: Any = None, normalize: bool = True, solver: str = "auto", mask: Any = None,
         progress: Callable[[int, int], None] | None = None, causal_norm: str | None = None,
         runner: Callable[[FlowJob], None] | None = None) -> Any:
    """Attention flow from chosen (layer, position) nodes to every input token.

    The layered attention graph has a node per (layer, position), layer 0 being the input tokens, and
    an edge from ``(l, q)`` to ``(l-1, k)`` with capacity ``A_l[q, k]``, the head-fused attention of
    layer ``l`` with the residual added. The flow value of input token ``j`` for node ``(l, q)`` is
    the maximum flow from ``(l, q)`` down to ``(0, j)``.

    Args:
        attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a Hugging Face
            per-layer tuple, or ``AttentionMaps``. Row = query, column = key.
        residual: As in [`rollout`][attnflow.core.rollout.rollout].
        head_fusion: As in [`rollout`][attnflow.core.rollout.rollout]; None gives per-head flow.
        positions: Query positions (sources); None: all. Negative indices count from the end.
        layers: 0-based layer indices (``-1`` = top layer); None: all.
        normalize: Divide each row by its sum (the paper's code does); False returns raw max-flow
            values.
        solver: ``"auto"`` (the faster of the two numba solvers per layer), ``"certified"``,
            ``"engine"``, ``"torch"`` (a GPU's), ``"networkx"`` (the paper's semantics, the test
            oracle) or ``"scipy"``; every one but ``"scipy"`` is exact.
        mask: Optional padding mask, True for real tokens; padded tokens are left out of the graph
            and their rows and columns in the result are 0.
        progress: Called as ``progress(done_rows, total_rows)``. With the api's runner
            (``attnflow.flow`` passes it), a ``progress.estimate`` method is called once with the
            ``FlowEstimate`` before solving, runs estimated above 10 s warn (``LongFlowWarning``)
            and Ctrl-C stops any run between sinks.
        causal_norm: Receptive-field normalisation for decoders (None, ``"keys"``, ``"sink"``),
            applied to the capacities; see ``attnflow.core.causal``.
        runner: Called as ``runner(job)`` to run the ``FlowJob``; None: on this thread
            (``run_here``).

    Returns:
        ``(len(layers), len(positions), n)`` (``(len(layers), heads, len(positions), n)`` when
            ``head_fusion`` is None), with a leading batch axis for batched input.

    Raises:
        AttnflowError: Attention of another shape, positions or layers out of range, or an unknown
            solver.

    Examples:
        >>> import attnflow, torch
        >>> attentions = torch.rand(6, 8, 7, 7).softmax(-1)  # (layers, heads, n, n)
        >>> F = attnflow.flow(attentions, positions=[0])  # the first position's rows
        >>> F.shape  # (layers, positions, n)
        torch.Size([6, 1, 7])
    """
    check_fusion(attentions, head_fusion)
    stack = as_stack(attentions, mask)
    batch, n_layers, heads, n, _ = stack.shape
    layer_idx = resolve_indices(layers, n_layers, "layers")
    pos_idx = resolve_indices(positions, n, "positions")
    solve = _solver(solver)
    if not isinstance(normalize, bool):
        raise AttnflowError(f"normalize must be True or False; got {normalize!r}")
    a = augmented(stack.values, stack.mask, residual=residual, head_fusion=head_fusion, causal_norm=causal_norm)
    # The capacities stay in the maps' precision (float32 from capture): the solvers read them as
    # they are and do their arithmetic in float64, so the values are those of a float64 copy, bit for
    # bit, without a float64 stack twice the maps' size. Half precisions widen to float32 (exact).
    a = a.detach().cpu()
    if a.dtype not in (torch.float32, torch.float64):
        a = a.to(torch.float32)
    a = a.numpy()
    if head_fusion is None:
        a = a.transpose(0, 2, 1, 3, 4)  # (batch, heads, layers, n, n)
    else:
        a = a[:, None]
    mask_np = stack.mask.cpu().numpy()

    total = batch * a.shape[1] * len(pos_idx) * len(layer_idx)
    done = [0]

    def tick(k: int) -> None:
        done[0] += k
        if progress is not None:
            progress(done[0], total)

    out = np.zeros((batch, a.shape[1], len(layer_idx), len(pos_idx), n))
    # numba's OpenMP threading layer shares the OpenMP runtime with torch, and starting it resets
    # torch's intra-op thread count to numba's: a caller's torch.set_num_threads(1) would be lost,
    # and on a busy machine every later small torch op then waits ~8 ms for a second thread.
    torch_threads = torch.get_num_threads()
    job = FlowJob(solve=solve, a=a, mask=mask_np, layers=layer_idx, positions=pos_idx, out=out, tick=tick,
                  progress=progress)
    try:
        (runner or run_here)(job)
    finally:
        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
    if normalize:
        out = normalize_rows(out)
    out = out.transpose(0, 2, 1, 3, 4) if head_fusion is None else out[:, 0]
    return stack.out(out)


def _solve_all(job: FlowJob) -> None:
    """Fill ``job.out`` (batch, heads, layers, positions, n) layer by layer, padding removed."""
    a, mask_np, pos_idx, out, cancel = job.a, job.mask, job.positions, job.out, job.cancel
    n = a.shape[-1]

    def tick(k: int) -> None:
        if cancel[0]:
            raise FlowCancelled("flow cancelled")
        job.tick(k)

    for b in range(a.shape[0]):
        real = np.flatnonzero(mask_np[b])
        new_index = -np.ones(n, dtype=np.int64)
        new_index[real] = np.arange(len(real))
        keep = mask_np[b, pos_idx]  # requested positions that are real tokens
        sub_pos = new_index[pos_idx[keep]]
        for h in range(a.shape[1]):
            # Nothing padded (the usual case): the graph as it is, without two copies of it.
            sub = np.ascontiguousarray(a[b, h] if len(real) == n else a[b, h][:, real[:, None], real])
            for li, layer in enumerate(job.layers):
                if len(sub_pos):
                    values = job.solve(sub, np.asarray([layer]), sub_pos, progress=tick, cancel=cancel)
                    if cancel[0]:
                        raise FlowCancelled("flow cancelled")
                    full = np.zeros((len(sub_pos), n))
                    full[:, real] = values[0]
                    out[b, h, li][keep] = full
                skipped = len(pos_idx) - len(sub_pos)
                if skipped:
                    tick(skipped)
