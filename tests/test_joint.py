"""Rollout and flow over the joint encoder-decoder graph (attnflow.core.joint): a hand-worked example,
a naive loop, the networkx oracle on the joint graph itself, the incremental tracker, invariants."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import naive_joint_rollout, random_attention

from attnflow import AttnflowError
from attnflow.core.incremental import IncrementalRollout, place_window
from attnflow.core.joint import JointGraph, joint_flow, joint_raw, joint_rollout, stacked_rollout
from attnflow.core.joint.incremental import IncrementalJointRollout
from attnflow.core.joint.oracle import joint_flow_oracle

# The hand-worked example (docs/architectures.md): 2 source tokens, 2 decoder positions, 1 encoder
# layer, 2 decoder layers, one head, residual 0.5. Columns of the results: x0, x1 (source), y0, y1.
ENC = np.array([[[[0.5, 0.5], [0.5, 0.5]]]])  # (1, 1, 2, 2)
DEC = np.array([[[[1.0, 0], [0.5, 0.5]]], [[[1.0, 0], [1.0, 0]]]])  # (2, 1, 2, 2), causal
CROSS = np.array([[[[1.0, 0], [0, 1.0]]], [[[0.5, 0.5], [1.0, 0]]]])  # (2, 1, 2, 2)


def test_hand_worked_joint_rollout():
    # A_enc = E = [[.75, .25], [.25, .75]]; A_1 = [[1, 0], [.25, .75]]; A_2 = [[1, 0], [.5, .5]];
    # D_1 = .5 C_1 [E|0] + .5 A_1 D_0 and D_2 = .5 C_2 [E|0] + .5 A_2 D_1, worked out on paper.
    d = joint_rollout(ENC, DEC, CROSS)
    np.testing.assert_allclose(d[0], [[0.375, 0.125, 0.5, 0], [0.125, 0.375, 0.125, 0.375]])
    np.testing.assert_allclose(d[1], [[0.4375, 0.3125, 0.25, 0], [0.5, 0.25, 0.15625, 0.09375]])


def test_hand_worked_joint_flow():
    # From decoder node (layer 1, y0): 0.5 into the encoder's x0 node, which passes at most 0.75 to x0
    # and 0.25 to x1; 0.5 straight to y0. Max-flows 0.5, 0.25, 0.5, 0 (sum 1.25). From (1, y1): 0.5 into
    # x1's node (0.25 on to x0, 0.75 to x1), 0.125 to y0, 0.375 to y1.
    raw_values = joint_flow(ENC, DEC, CROSS, layers=[0], normalize=False, solver="networkx")
    np.testing.assert_allclose(raw_values[0], [[0.5, 0.25, 0.5, 0], [0.25, 0.5, 0.125, 0.375]])
    np.testing.assert_allclose(joint_flow(ENC, DEC, CROSS, layers=[0])[0], [[0.4, 0.2, 0.4, 0], [0.2, 0.4, 0.1, 0.3]])


def _random(seed: int, le: int = 2, ld: int = 3, s: int = 4, t: int = 3, heads: int = 2):
    rng = np.random.default_rng(seed)
    return (random_attention(rng, le, heads, s), random_attention(rng, ld, heads, t, causal=True),
            rng.dirichlet(np.ones(s), size=(ld, heads, t)))


@pytest.mark.parametrize("residual", [0.0, 0.3, 0.5, 1.0])
def test_joint_rollout_matches_naive_loop(residual):
    enc, dec, cross = _random(1)
    np.testing.assert_allclose(joint_rollout(enc, dec, cross, residual=residual),
                               naive_joint_rollout(enc, dec, cross, residual), atol=1e-12)


def test_stacked_graph_rolls_out_to_the_joint_rollout():
    enc, dec, cross = _random(2)
    np.testing.assert_allclose(stacked_rollout(JointGraph(enc, dec, cross)).numpy(), joint_rollout(enc, dec, cross),
                               atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_joint_flow_equals_the_networkx_oracle_on_the_joint_graph(seed):
    enc, dec, cross = _random(seed + 10, le=2, ld=2, s=4, t=3)
    graph = JointGraph(enc, dec, cross)
    oracle = joint_flow_oracle(graph, [0, 1], [0, 1, 2])
    np.testing.assert_allclose(joint_flow(enc, dec, cross), oracle, atol=1e-9)
    np.testing.assert_allclose(joint_flow(enc, dec, cross, solver="networkx"), oracle, atol=1e-12)
    raw_oracle = joint_flow_oracle(graph, [1], [2], normalize=False)
    np.testing.assert_allclose(joint_flow(enc, dec, cross, layers=[1], positions=[2], normalize=False), raw_oracle,
                               atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), le=st.integers(1, 3), ld=st.integers(1, 3), s=st.integers(1, 5),
       t=st.integers(1, 4), residual=st.sampled_from([0.2, 0.5, 0.8]))
def test_joint_invariants(seed, le, ld, s, t, residual):
    enc, dec, cross = _random(seed, le, ld, s, t)
    d = joint_rollout(enc, dec, cross, residual=residual)
    np.testing.assert_allclose(d.sum(-1), 1.0, atol=1e-12)  # rows stochastic
    for u in range(t):  # causal: nothing on decoder inputs after the position itself
        assert np.all(d[:, u, s + u + 1:] == 0.0)
    # the split between source and target prefix is fixed by the residual: 1 - r^l on the source
    np.testing.assert_allclose(d[:, :, :s].sum(-1), (1 - residual ** np.arange(1, ld + 1))[:, None] * np.ones(t),
                               atol=1e-12)
    f = joint_flow(enc, dec, cross, residual=residual)
    np.testing.assert_allclose(f.sum(-1), 1.0, atol=1e-12)
    assert np.all(f >= 0) and all(np.all(f[:, u, s + u + 1:] < 1e-12) for u in range(t))
    # at decoder layer 1 each decoder input is reached by one edge only, so its max-flow is that
    # edge's capacity, which is also the rollout's value; flow never exceeds the node's capacity 1
    unnormalised = joint_flow(enc, dec, cross, residual=residual, layers=[0], normalize=False)
    np.testing.assert_allclose(unnormalised[0, :, s:], d[0, :, s:], atol=1e-12)
    assert np.all(joint_flow(enc, dec, cross, residual=residual, normalize=False) <= 1.0 + 1e-12)


@pytest.mark.parametrize("fusion", ["mean", "max"])
def test_incremental_joint_rollout_equals_the_full_pass(fusion):
    enc, dec, cross = _random(5, le=2, ld=3, s=5, t=20)  # more than the buffer's first 16 rows
    graph = JointGraph(enc, dec, cross, head_fusion=fusion)
    tracker = IncrementalJointRollout(graph.encoder_rollout(), 3, head_fusion=fusion)
    for u in range(20):
        tracker.append(torch.tensor(dec[:, :, u, : u + 1]), torch.tensor(cross[:, :, u, :]))
    np.testing.assert_allclose(tracker.rows.numpy(), joint_rollout(enc, dec, cross, head_fusion=fusion), atol=1e-12)
    with pytest.raises(AttnflowError, match="cross-attention of shape"):
        tracker.append(torch.tensor(dec[:, :, 0, :1]).expand(3, 2, 21), torch.zeros(3, 2, 4))


def test_joint_raw_is_the_cross_attention():
    cross = _random(6)[2]
    r = joint_raw(cross, 3)
    np.testing.assert_allclose(r[..., :4], cross.mean(axis=1))
    assert np.all(r[..., 4:] == 0.0)


def test_bad_shapes_are_refused():
    enc, dec, cross = _random(7)
    with pytest.raises(AttnflowError, match="cross-attention of shape"):
        joint_rollout(enc, dec, cross[:, :, :, :3])
    with pytest.raises(AttnflowError, match="must be square"):
        joint_rollout(enc[..., :3], dec, cross)
    with pytest.raises(AttnflowError, match="head_fusion"):
        joint_rollout(enc, dec, cross, head_fusion=None)


def test_place_window_puts_columns_at_absolute_positions():
    rows = [torch.tensor([[0.2, 0.8]]), torch.tensor([[0.1, 0.2, 0.3, 0.4]])]
    placed = place_window(rows, 4, windows=[2, None])
    np.testing.assert_allclose(placed[0, 0], [0, 0, 0.2, 0.8])
    np.testing.assert_allclose(placed[1, 0], [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(AttnflowError, match="layer 1 \\(full attention\\) returned attention over 2 keys"):
        place_window([torch.ones(1, 2), torch.ones(1, 2)], 4, windows=[2, None])
    with pytest.raises(AttnflowError, match="sliding window of 3"):
        place_window([torch.ones(1, 2)], 4, windows=[3])


def test_incremental_rollout_with_sliding_windows_equals_the_full_rollout():
    # A 2-layer causal map whose first layer only sees the 3 most recent keys (zeros outside, as a
    # one-pass forward returns it); the tracker gets only the window's columns.
    import attnflow

    rng = np.random.default_rng(8)
    att = random_attention(rng, 2, 2, 9, causal=True)
    band = np.tril(np.ones((9, 9))) * np.triu(np.ones((9, 9)), -2)
    att[0] = att[0] * band
    att[0] /= att[0].sum(-1, keepdims=True)
    tracker = IncrementalRollout(windows=[3, None])
    tracker.start(att[:, :, :4, :4])
    for t in range(4, 9):
        tracker.append([torch.tensor(att[0, :, t, max(0, t - 2): t + 1]), torch.tensor(att[1, :, t, : t + 1])])
    np.testing.assert_allclose(tracker.rows.numpy(), attnflow.rollout(att), atol=1e-12)
