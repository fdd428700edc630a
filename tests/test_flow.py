import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracles import naive_augment, random_attention
from test_rollout import HAND

import attnflow
from attnflow import AttnflowError

# Solvers other than the exact oracle are compared at this tolerance; scipy scales capacities to
# integers (2**24), so it is only close. Exact solvers get their own 1e-9 tests.
SOLVER_TOL = {"scipy": 1e-6, "auto": 1e-6}


def test_hand_worked_example_flow():
    # Worked on paper (see test_rollout.HAND): from node (2, 0) each input token can receive 0.5,
    # where rollout gives [0.5, 0.25, 0.25] — flow ignores how paths share capacity.
    values = attnflow.flow(HAND, normalize=False, solver="networkx")
    np.testing.assert_allclose(values[1], [[0.5, 0.5, 0.5], [1.0, 0.5, 0.0], [0.5, 1.0, 0.5]])
    np.testing.assert_allclose(values[0], [[1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5]])
    normalized = attnflow.flow(HAND, solver="networkx")
    np.testing.assert_allclose(normalized[1], [[1 / 3, 1 / 3, 1 / 3], [2 / 3, 1 / 3, 0], [0.25, 0.5, 0.25]])


def _paper_flow(att, residual=0.5):
    """The paper's recipe written independently: one big networkx graph, one max-flow per pair."""
    mats = naive_augment(att, residual)
    layers, n = len(mats), att.shape[-1]
    g = nx.DiGraph()
    for layer in range(1, layers + 1):
        for q in range(n):
            for k in range(n):
                if mats[layer - 1][q, k] > 0:
                    g.add_edge(layer * n + q, (layer - 1) * n + k, capacity=mats[layer - 1][q, k])
    out = np.zeros((layers, n, n))
    for layer in range(1, layers + 1):
        for q in range(n):
            for j in range(n):
                if g.has_node(layer * n + q) and g.has_node(j):
                    out[layer - 1, q, j] = nx.maximum_flow_value(g, layer * n + q, j)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_networkx_solver_matches_paper_recipe(seed):
    rng = np.random.default_rng(seed)
    att = random_attention(rng, layers=3, heads=2, n=4, zeros=0.3, causal=seed % 2 == 1)
    np.testing.assert_allclose(attnflow.flow(att, normalize=False, solver="networkx"), _paper_flow(att), atol=1e-12)


@pytest.mark.parametrize("solver", ["scipy", "auto"])
@pytest.mark.parametrize("seed", range(6))
def test_solvers_match_the_oracle(solver, seed):
    rng = np.random.default_rng(100 + seed)
    att = random_attention(rng, layers=1 + seed % 4, heads=2, n=3 + seed, zeros=0.3, causal=seed % 3 == 0)
    if seed == 4:  # ties and near-zero capacities
        att = np.round(att, 1) + 1e-9
    expected = attnflow.flow(att, normalize=False, solver="networkx")
    np.testing.assert_allclose(attnflow.flow(att, normalize=False, solver=solver), expected, atol=SOLVER_TOL[solver])


def test_layers_and_positions_subsets_with_negative_indices():
    rng = np.random.default_rng(11)
    att = random_attention(rng, 4, 2, 5)
    full = attnflow.flow(att, solver="networkx")
    part = attnflow.flow(att, layers=[-1, 1], positions=[0, -1], solver="networkx")
    assert part.shape == (2, 2, 5)
    np.testing.assert_allclose(part, full[[3, 1]][:, [0, 4]])


def test_padded_batch_matches_each_example_alone():
    rng = np.random.default_rng(12)
    short = random_attention(rng, 3, 2, 3)
    long = random_attention(rng, 3, 2, 5)
    padded = np.full((3, 2, 5, 5), 0.2)
    padded[..., :3, :3] = short
    padded[..., :3, 3:] = 0.0
    out = attnflow.flow(np.stack([padded, long]), mask=[[1, 1, 1, 0, 0], [1] * 5], solver="networkx")
    assert out.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(out[0, :, :3, :3], attnflow.flow(short, solver="networkx"), atol=1e-12)
    assert np.all(out[0, :, 3:] == 0) and np.all(out[0, :, :, 3:] == 0)
    np.testing.assert_allclose(out[1], attnflow.flow(long, solver="networkx"), atol=1e-12)


def test_per_head_flow_and_torch_round_trip():
    rng = np.random.default_rng(13)
    att = random_attention(rng, 2, 3, 4)
    per_head = attnflow.flow(att, head_fusion=None, solver="networkx")
    assert per_head.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(per_head[:, 1], attnflow.flow(att[:, 1:2], solver="networkx"), atol=1e-12)
    out = attnflow.flow(torch.tensor(att), solver="networkx")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64


graphs = st.integers(1, 3).flatmap(lambda layers: st.integers(1, 5).flatmap(lambda n: hnp.arrays(
    np.float64, (layers, 2, n, n), elements=st.one_of(st.just(0.0), st.floats(1e-9, 1.0)))))


@settings(max_examples=60, deadline=None)
@given(att=graphs, residual=st.sampled_from([0.0, 0.25, 0.5]))
def test_flow_invariants(att, residual):
    values = attnflow.flow(att, residual=residual, normalize=False, solver="networkx")
    a = np.stack(naive_augment(att, residual))
    # a source cannot send more than leaves it, an input token cannot take more than enters it
    out_cap = a.sum(-1)  # (layers, n): capacity leaving (l, q)
    in_cap = a[0].sum(0)  # (n,): capacity entering input token j
    bound = np.minimum(out_cap[:, :, None], in_cap[None, None, :])
    assert (values <= bound + 1e-12).all() and (values >= 0).all()
    normalized = attnflow.flow(att, residual=residual, solver="networkx")
    assert (normalized >= 0).all() and (normalized <= 1 + 1e-12).all()
    rollout = attnflow.rollout(att, residual=residual)
    live = rollout[0].sum(-1) > 0
    np.testing.assert_allclose(normalized[0][live], rollout[0][live], atol=1e-12)


@pytest.mark.parametrize("kwargs, message", [
    ({"layers": [5]}, "layers must lie"),
    ({"positions": [3]}, "positions must lie"),
    ({"positions": []}, "non-empty"),
    ({"solver": "magic"}, "solver must be one of"),
    ({"normalize": "yes"}, "normalize"),
])
def test_bad_flow_parameters(kwargs, message):
    with pytest.raises(AttnflowError, match=message):
        attnflow.flow(np.full((2, 1, 3, 3), 1 / 3), **kwargs)


def test_progress_callback_counts_rows():
    calls = []
    attnflow.flow(np.full((2, 1, 3, 3), 1 / 3), solver="networkx", progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (6, 6) and len(calls) == 6


def test_method_rows_slices_the_same_rows_every_method_computes():
    from attnflow.core.methods import method_rows

    rng = np.random.default_rng(21)
    att = random_attention(rng, 3, 2, 5)
    for method, full in (("raw", attnflow.raw(att)), ("rollout", attnflow.rollout(att)),
                         ("flow", attnflow.flow(att, solver="networkx"))):
        rows = method_rows(att, method, [4, 0], layers=[-1, 0], solver="networkx")
        np.testing.assert_allclose(rows, full[[2, 0]][:, [4, 0]], atol=1e-12)
    batch = np.stack([att, att[:, ::-1]])
    np.testing.assert_allclose(method_rows(batch, "rollout", [1])[1], attnflow.rollout(att[:, ::-1])[:, [1]])
    with pytest.raises(AttnflowError, match="positions must lie"):
        method_rows(att, "rollout", [5])
    with pytest.raises(AttnflowError, match="method must be one of"):
        method_rows(att, "saliency", [0])
