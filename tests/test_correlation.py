"""The correlation protocol against scipy's spearmanr and hand-computed summaries."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import spearmanr

from attnflow.evaluation.correlation import cls_scores, correlate, spearman, spearman_dense, summarize


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@settings(max_examples=200, deadline=None)
@given(st.integers(2, 25).flatmap(lambda n: st.tuples(
    arrays(np.int64, n, elements=st.integers(0, 4)),  # small integers: plenty of ties
    arrays(np.float64, n, elements=st.floats(-1, 1)))))
def test_spearman_matches_scipy(pair):
    x, y = pair
    expected = spearmanr(x, y).statistic
    got = spearman(x, y)
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_spearman_broadcasts_layers_against_one_importance_vector():
    rng = np.random.default_rng(0)
    layers, imp = rng.random((6, 9)), rng.random(9)
    np.testing.assert_allclose(spearman(layers, imp), [spearmanr(row, imp).statistic for row in layers])


def test_correlate_ranks_only_the_given_tokens():
    scores = {"raw": np.array([[100.0, 1, 2, 3]])}  # CLS at position 0 would break the ranking
    imp = {"blank_out": np.array([np.nan, 0.1, 0.2, 0.3])}
    assert correlate(scores, imp, [1, 2, 3])[("raw", "blank_out")] == pytest.approx([1.0])


def test_summarize_is_mean_and_population_std_skipping_nan():
    per = [{("flow", "g"): np.array([0.5, 1.0])}, {("flow", "g"): np.array([-0.5, np.nan])},
           {("flow", "g"): np.array([1.0, 0.0])}]
    s = summarize(per)[("flow", "g")]
    np.testing.assert_allclose(s["mean"], [np.mean([0.5, -0.5, 1.0]), 0.5])
    np.testing.assert_allclose(s["std"], [np.std([0.5, -0.5, 1.0]), 0.5])
    np.testing.assert_array_equal(s["n"], [3, 2])


def test_cls_scores_take_row_zero_of_each_method():
    rng = np.random.default_rng(1)
    att = rng.random((3, 2, 5, 5))
    att /= att.sum(-1, keepdims=True)
    hf_tuple = tuple(torch.from_numpy(a)[None] for a in att)  # what output_attentions gives
    got = cls_scores(hf_tuple, flow_solver="networkx")
    np.testing.assert_allclose(got["raw"], att.mean(1)[:, 0])
    # rollout by hand: A = 0.5 W + 0.5 I, R_l = A_l @ R_{l-1}
    a = 0.5 * att.mean(1) + 0.5 * np.eye(5)
    r = [a[0], a[1] @ a[0], a[2] @ a[1] @ a[0]]
    np.testing.assert_allclose(got["rollout"], np.stack(r)[:, 0])
    assert got["flow"].shape == (3, 5)
    np.testing.assert_allclose(got["flow"].sum(-1), 1.0)
    np.testing.assert_allclose(got["flow"][0], got["rollout"][0])  # one layer: flow = rollout = A_1


def test_spearman_dense_is_the_papers_formula_on_a_hand_worked_example():
    # CLS, two tied words, the end token (blank-out score 0); dense ranks x -> [3, 2, 2, 1], y -> [4, 2, 3, 1]
    x, y = np.array([0.5, 0.1, 0.1, 0.0]), np.array([3.0, 1.0, 2.0, 0.0])
    assert spearman_dense(x, y) == pytest.approx(1 - 6 * 2 / (4 * 15))  # d = (-1, 0, -1, 0): 0.8
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert abs(spearman(x, y) - 0.8) > 0.01  # the tie rule changes the value: which one is used matters
    # a constant side gives a number, not NaN (ranks all 1); and the layer axis broadcasts
    assert spearman_dense(np.ones(4), y) == pytest.approx(1 - 6 * (9 + 1 + 4 + 0) / 60)
    np.testing.assert_allclose(spearman_dense(np.stack([x, y]), y), [0.8, 1.0])


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 25).flatmap(lambda n: st.tuples(st.permutations(range(n)), st.permutations(range(n)))))
def test_spearman_dense_equals_spearman_without_ties(pair):
    x, y = (np.asarray(p, dtype=float) for p in pair)
    assert spearman_dense(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
