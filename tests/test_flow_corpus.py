"""Every exact flow solver equals the networkx oracle on the benchmark corpus (issue 31), at sizes
the oracle can take: real attention of the bundled model, MiniLM and SmolLM2 on the corpus's four
kinds of text (benchmarks/texts.py), peaky Dirichlet(0.1-0.3) graphs and smooth ones. The flow
benchmark times the same kinds at full size."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnflow.core.flow import auto, certified, engine, oracle
from attnflow.core.fusion import augmented

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import inputs  # noqa: E402
import texts  # noqa: E402

TOL = 1e-9
N = 16  # tokens: a networkx max-flow per pair stays in milliseconds
LAYERS = 4


def fused(w: np.ndarray, causal: bool = False) -> np.ndarray:
    n = w.shape[-1]
    return augmented(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float64))[None],
                     torch.ones(1, n, dtype=torch.bool), residual=0.5, head_fusion="mean")[0].numpy()


def check_every_solver(a: np.ndarray, target: int) -> None:
    """The target's row and one other row at layers 2, 3 and the top (layer 1 is the edge itself),
    every token, against networkx."""
    n = a.shape[-1]
    layers = np.unique([1, 2, len(a) - 1])
    positions = np.unique([target, n // 2])
    want = oracle.solve(a, layers, positions)
    assert want.max() > 0
    for solve in (certified.solve, engine.solve, auto.solve):
        got = solve(a, layers, positions)
        assert np.abs(got - want).max() <= TOL, solve.__module__
    # the single-row path the CLS-row benchmark times (one warm chain over every sink)
    row = certified.solve_sinks(a, len(a), target, np.arange(n))
    assert np.abs(row - want[-1, list(positions).index(target)]).max() <= TOL


@pytest.fixture(scope="module")
def bundled():
    from attnflow.hf.load import default_model_path, load_model

    return load_model(default_model_path())


@pytest.mark.parametrize("kind", texts.KINDS)
def test_bundled_model_on_every_text_kind(bundled, kind: str) -> None:
    w = inputs.attention(*bundled, kind, N)[:LAYERS]
    check_every_solver(fused(w), 0)


@pytest.mark.parametrize("kind", texts.KINDS)
def test_minilm_on_every_text_kind(minilm, kind: str) -> None:
    w = inputs.attention(*minilm, kind, N)[:LAYERS]
    check_every_solver(fused(w), 0)


@pytest.mark.parametrize("kind", texts.KINDS)
def test_smollm2_on_every_text_kind(smollm2, kind: str) -> None:
    # causal, with an attention sink at the first token: the decoder's last-token row
    w = inputs.attention(*smollm2, kind, N)[:LAYERS]
    assert np.all(np.triu(w, 1) == 0)
    check_every_solver(fused(w), N - 1)


@pytest.mark.parametrize("alpha", inputs.PEAKY)
def test_peaky_random_graphs(alpha: float) -> None:
    rng = np.random.default_rng(int(alpha * 10))
    check_every_solver(fused(inputs.peaky(rng, 5, N, alpha)), 0)


def test_smooth_random_graphs() -> None:
    check_every_solver(fused(inputs.smooth(np.random.default_rng(5), 5, N)), 0)


def test_heavy_arcs_are_the_largest_off_diagonal_entries() -> None:
    # the sub-network seeds of the certified solver: a wrong pick costs speed only, so check it here
    rng = np.random.default_rng(0)
    a = fused(inputs.peaky(rng, 3, 16, 0.2))
    heavy = certified.heavy_arcs(a, 4)
    off = a.copy()
    off[:, np.arange(16), np.arange(16)] = -1.0
    for m in range(3):
        for u in range(16):
            assert set(heavy[m, u]) == set(np.argsort(-off[m, u], kind="stable")[:4]) or \
                np.isclose(np.sort(off[m, u, heavy[m, u]]), np.sort(off[m, u])[-4:]).all()


def fused32(w: np.ndarray) -> np.ndarray:
    """The capacities as ``attnflow.flow`` hands them to the solvers from captured maps: float32."""
    n = w.shape[-1]
    return augmented(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))[None],
                     torch.ones(1, n, dtype=torch.bool), residual=0.5, head_fusion="mean")[0].numpy()


@pytest.mark.parametrize("kind", texts.KINDS)
def test_float32_capacities_are_read_exactly(minilm, smollm2, kind: str) -> None:
    # issue 31, item 4: the solvers read float32 capacities (no float64 stack of twice the maps'
    # size); they must equal networkx and give the very numbers of the float64 copy of the same values
    for model, target in ((minilm, 0), (smollm2, N - 1)):
        a = fused32(inputs.attention(*model, kind, N)[:LAYERS])
        assert a.dtype == np.float32
        check_every_solver(a, target)
        wide = a.astype(np.float64)
        layers, positions = np.array([1, 2, LAYERS - 1]), np.array([target, N // 2])
        for solve in (certified.solve, engine.solve, auto.solve):
            assert np.array_equal(solve(a, layers, positions), solve(wide, layers, positions)), solve.__module__


def test_flow_hands_the_solvers_the_maps_precision() -> None:
    import attnflow
    from attnflow.core.flow import flow

    seen = []

    def runner(job):
        seen.append(job.a.dtype)
        job.run()

    w = torch.from_numpy(inputs.peaky(np.random.default_rng(2), 3, N, 0.2).astype(np.float32))
    got = flow(w, runner=runner, layers=[-1], positions=[0])
    assert seen == [np.float32]
    wide = attnflow.flow(w.double(), layers=[-1], positions=[0])  # float64 maps stay float64
    assert np.abs(np.asarray(got) - np.asarray(wide)).max() < 1e-6  # float32 vs float64 fusion only
