"""The numba flow engine against the networkx oracle (the paper's semantics) and flow invariants."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow
from attnflow.core.flow import _solver, auto, certified, engine, oracle
from attnflow.errors import AttnflowError

torch.set_num_threads(1)
TOL = 1e-9


def capacities(rng: np.random.Generator, layers: int, n: int, kind: str) -> np.ndarray:
    """Non-negative ``(layers, n, n)`` capacities of one flavour (rows need not sum to 1)."""
    a = rng.random((layers, n, n))
    if kind == "sparse":
        a *= rng.random(a.shape) < 0.35
    elif kind == "ties":  # equal capacities: many minimum cuts of equal value
        a = rng.choice([0.0, 0.25, 0.5], size=a.shape)
    elif kind == "tiny":  # capacities ~1e-12 next to O(1) ones
        a = np.where(rng.random(a.shape) < 0.5, a * 1e-12, a)
    elif kind == "causal":  # lower-triangular, as decoders give
        a = np.tril(a * (rng.random(a.shape) < 0.8))
    elif kind == "stochastic":  # residual-augmented rows, as attnflow.flow builds them
        w = rng.dirichlet(np.ones(n), size=(layers, n))
        a = 0.5 * w + 0.5 * np.eye(n)
    return a


KINDS = ["dense", "sparse", "ties", "tiny", "causal", "stochastic"]


def random_case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    layers, n = int(rng.integers(1, 9)), int(rng.integers(1, 11))
    a = capacities(rng, layers, n, KINDS[seed % len(KINDS)])
    # The oracle costs a networkx max-flow per pair: ask big graphs for a few rows only.
    layer_idx = np.arange(layers) if layers * n <= 24 else rng.choice(layers, size=min(layers, 2), replace=False)
    pos_idx = np.arange(n) if layers * n <= 24 else rng.choice(n, size=min(n, 3), replace=False)
    return a, layer_idx, pos_idx


@functools.lru_cache(maxsize=None)
def seeded(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`random_case` and its oracle values, computed once per test session (every exact
    solver is checked on the same graphs)."""
    a, layer_idx, pos_idx = random_case(seed)
    return a, layer_idx, pos_idx, oracle.solve(a, layer_idx, pos_idx)


@pytest.mark.parametrize("block", range(8))
def test_engine_matches_oracle_on_seeded_graphs(block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):  # 400 graphs in all
        a, layer_idx, pos_idx, want = seeded(seed)
        got = engine.solve(a, layer_idx, pos_idx)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"seed {seed}")


def test_engine_is_scale_exact_on_tiny_capacities() -> None:
    # An absolute 1e-9 check is blind at 1e-12: compare the scaled-up values instead.
    for seed in range(20):
        rng = np.random.default_rng(1000 + seed)
        a = capacities(rng, 3, 5, "sparse" if seed % 2 else "dense")
        everything = np.arange(3), np.arange(5)
        got = engine.solve(a * 1e-12, *everything) / 1e-12
        np.testing.assert_allclose(got, oracle.solve(a, *everything), rtol=0, atol=TOL)


@pytest.mark.parametrize("solve", [engine.solve, certified.solve], ids=["engine", "certified"])
def test_thread_pool_path_matches_oracle(solve, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small graphs normally take the one-thread path; force the threads, where a lone row is split
    # into per-thread blocks of sinks (one warm chain each) and many rows are spread over threads.
    monkeypatch.setattr(engine, "SERIAL_WORK", 0)
    rng = np.random.default_rng(7)
    for kind in KINDS:
        a = capacities(rng, 5, 9, kind)
        for layer_idx, pos_idx in [(np.array([4]), np.array([8])), (np.array([1, 4]), np.arange(9))]:
            np.testing.assert_allclose(solve(a, layer_idx, pos_idx), oracle.solve(a, layer_idx, pos_idx),
                                       rtol=0, atol=TOL)


@st.composite
def attention_inputs(draw):
    """Per-head attention ``(batch, layers, heads, n, n)`` plus a padding mask and a request."""
    batch, layers, heads, n = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                               draw(st.integers(1, 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = rng.dirichlet(np.ones(n), size=(batch, layers, heads, n))
    if draw(st.booleans()):  # causal: exact zeros above the diagonal, rows re-normalised
        w = np.tril(w)
        w /= w.sum(-1, keepdims=True)
    if draw(st.booleans()):  # ties
        w = np.round(w * 4) / 4
    mask = None
    if draw(st.booleans()):
        mask = rng.random((batch, n)) < 0.7
        mask[:, 0] = True
    layer_sel = draw(st.none() | st.lists(st.integers(-layers, layers - 1), min_size=1, max_size=3))
    pos_sel = draw(st.none() | st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
    options = dict(residual=draw(st.sampled_from([0.0, 0.5, 0.9])),
                   head_fusion=draw(st.sampled_from(["mean", "max", "min", None])),
                   layers=layer_sel, positions=pos_sel, mask=mask)
    # batch-first said out loud: a (2, 1, ...) stack is otherwise refused as TransformerLens's layers-first
    return attnflow.as_stack(w, layout="batch-first"), options


@settings(deadline=None, max_examples=150)
@given(attention_inputs())
def test_public_flow_engine_matches_oracle(case) -> None:
    w, options = case
    got = attnflow.flow(w, normalize=False, solver="engine", **options)
    want = attnflow.flow(w, normalize=False, solver="networkx", **options)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


@settings(deadline=None, max_examples=100)
@given(st.integers(1, 6), st.integers(1, 8), st.sampled_from(KINDS), st.integers(0, 2**32 - 1))
def test_flow_is_bounded_by_source_and_sink_capacity(layers: int, n: int, kind: str, seed: int) -> None:
    a = capacities(np.random.default_rng(seed), layers, n, kind)
    values = engine.solve(a, np.arange(layers), np.arange(n))  # (layers, n sources, n sinks)
    out_cap = a.sum(axis=2)[:, :, None]  # source (l+1, q): its row of a[l]
    in_cap = a[0].sum(axis=0)[None, None, :]  # sink (0, j): column j of a[0]
    assert (values >= 0).all()
    assert (values <= np.minimum(out_cap, in_cap) + TOL).all()


@settings(deadline=None, max_examples=60)
@given(attention_inputs())
def test_normalised_flow_is_a_distribution_and_layer_one_is_rollout(case) -> None:
    w, options = case
    options.update(layers=None, positions=None)
    values = attnflow.flow(w, solver="engine", **options)
    assert (values >= 0).all() and (values <= 1 + TOL).all()
    roll = attnflow.rollout(w, residual=options["residual"], head_fusion=options["head_fusion"],
                            mask=options["mask"])
    # Axis 1 is the layer (inputs are batched). One layer: the flow is the edge, as rollout says.
    np.testing.assert_allclose(values[:, 0], roll[:, 0], rtol=0, atol=TOL)


def test_solver_names_and_bad_names_fail() -> None:
    assert _solver("auto") is auto.solve
    assert _solver("engine") is engine.solve
    assert _solver("certified") is certified.solve
    with pytest.raises(AttnflowError, match="solver must be one of"):
        attnflow.flow(np.ones((1, 1, 2, 2)) / 2, solver="engin")


def test_progress_counts_every_row_and_ctrl_c_propagates() -> None:
    w = np.random.default_rng(3).dirichlet(np.ones(6), size=(3, 2, 6))
    ticks: list[tuple[int, int]] = []
    attnflow.flow(w, progress=lambda done, total: ticks.append((done, total)))
    assert ticks[-1] == (18, 18) and [d for d, _ in ticks] == sorted(d for d, _ in ticks)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attnflow.flow(w, progress=interrupt)
    # A run after the interruption is unaffected: no state survives between calls.
    np.testing.assert_allclose(attnflow.flow(w, normalize=False), attnflow.flow(w, normalize=False, solver="networkx"),
                               rtol=0, atol=TOL)


@pytest.mark.parametrize("kind", ["stochastic", "dense", "ties", "sparse"])
def test_relabel_heavy_rows_match_oracle(kind: str) -> None:
    # Wider graphs than the seeded ones: each sink needs hundreds of relabels, so the relabel
    # scan's early stop (first neighbour at label + 1) and its current-arc hand-off are exercised
    # far from the trivial cases; a wrong minimum would give a wrong label and a wrong flow.
    rng = np.random.default_rng(11)
    for layers, n in [(4, 24), (6, 16)]:
        a = capacities(rng, layers, n, kind)
        layer_idx, pos_idx = np.array([layers - 1]), np.array([0, n - 1])
        np.testing.assert_allclose(engine.solve(a, layer_idx, pos_idx), oracle.solve(a, layer_idx, pos_idx),
                                   rtol=0, atol=TOL)


def test_flow_leaves_torch_thread_count_alone() -> None:
    # numba's OpenMP layer shares the runtime with torch, and starting it (once per process, hence
    # a fresh interpreter) reset torch's thread count behind the caller's back, which also slowed
    # every later small torch op on a busy machine.
    code = (
        "import numpy as np, torch, attnflow\n"
        "from attnflow.core.flow import engine\n"
        "engine.SERIAL_WORK = 0\n"  # take the thread-pool path
        "torch.set_num_threads(1)\n"
        "w = np.random.default_rng(5).dirichlet(np.ones(6), size=(3, 2, 6))\n"
        "attnflow.flow(w, layers=[-1], positions=[0])\n"
        "print(torch.get_num_threads())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(attnflow.__file__).parents[1]),
                                                                  os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "1"
