import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracles import naive_augment, naive_rollout, random_attention

import attnflow
from attnflow import AttnflowError

# The hand-worked 3-token, 2-layer example (one head, residual 0.5); see test_flow.py for its flow.
W1 = np.array([[1.0, 0, 0], [1, 0, 0], [0, 1, 0]])
W2 = np.array([[0.0, 0, 1], [1, 0, 0], [0, 1, 0]])
HAND = np.stack([W1, W2])[:, None]  # (layers=2, heads=1, 3, 3)


def test_hand_worked_example():
    r = attnflow.rollout(HAND)
    # A1 = (W1 + I)/2 and A2 = (W2 + I)/2; R2 = A2 @ A1 worked out on paper.
    np.testing.assert_allclose(r[0], [[1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5]])
    np.testing.assert_allclose(r[1], [[0.5, 0.25, 0.25], [0.75, 0.25, 0], [0.25, 0.5, 0.25]])


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [0.0, 0.3, 0.5, 1.0])
def test_rollout_matches_naive_loop(fusion, residual):
    rng = np.random.default_rng(7)
    att = random_attention(rng, layers=4, heads=3, n=6, zeros=0.2)
    np.testing.assert_allclose(attnflow.rollout(att, residual=residual, head_fusion=fusion),
                               naive_rollout(att, residual, fusion), atol=1e-12)


def test_raw_is_the_fused_attention():
    rng = np.random.default_rng(1)
    att = random_attention(rng, 3, 4, 5)
    np.testing.assert_allclose(attnflow.raw(att), att.mean(axis=1))
    np.testing.assert_allclose(attnflow.raw(att, head_fusion="max"), att.max(axis=1))
    assert attnflow.raw(att, head_fusion=None).shape == (3, 4, 5, 5)


def test_head_fusion_none_is_per_head_rollout():
    rng = np.random.default_rng(2)
    att = random_attention(rng, 3, 2, 4)
    per_head = attnflow.rollout(att, head_fusion=None)
    assert per_head.shape == (3, 2, 4, 4)
    for h in range(2):
        np.testing.assert_allclose(per_head[:, h], naive_rollout(att[:, h:h + 1]), atol=1e-12)


def test_numpy_in_numpy_out_torch_in_torch_out():
    rng = np.random.default_rng(3)
    att = random_attention(rng, 2, 2, 4)
    out_np = attnflow.rollout(att)
    assert isinstance(out_np, np.ndarray) and out_np.dtype == np.float64
    out_t = attnflow.rollout(torch.tensor(att, dtype=torch.float32))
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    np.testing.assert_allclose(out_t.numpy(), out_np, atol=1e-5)


def test_hugging_face_tuple_and_batch_forms():
    rng = np.random.default_rng(4)
    att = random_attention(rng, 3, 2, 5)
    hf_tuple = tuple(torch.tensor(att[layer][None]) for layer in range(3))  # (1, heads, n, n) per layer
    np.testing.assert_allclose(attnflow.rollout(hf_tuple).numpy(), attnflow.rollout(att), atol=1e-12)
    batch = np.stack([att, att[:, ::-1]])
    out = attnflow.rollout(batch)
    assert out.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(out[1], attnflow.rollout(att[:, ::-1]), atol=1e-12)


def test_padding_matches_unpadded_example():
    rng = np.random.default_rng(5)
    short = random_attention(rng, 3, 2, 4)
    long = random_attention(rng, 3, 2, 6)
    padded = np.zeros((3, 2, 6, 6))
    padded[..., :4, :4] = short
    padded[..., 4:, :] = 1 / 6  # junk in padded rows must not leak anywhere
    padded[..., :4, 4:] = 0.05  # nor may attention to padded keys count
    mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6])
    out = attnflow.rollout(np.stack([padded, long]), mask=mask)
    expected = naive_rollout(padded[..., :4, :4] / padded[..., :4, :4].sum(-1, keepdims=True))
    np.testing.assert_allclose(out[0, :, :4, :4], expected, atol=1e-12)
    assert np.all(out[0, :, 4:, :] == 0) and np.all(out[0, :, :, 4:] == 0)
    np.testing.assert_allclose(out[1], naive_rollout(long), atol=1e-12)


def test_discard_ratio_protects_diagonal_and_zeroes_the_smallest():
    att = np.array([[[[0.1, 0.2, 0.7], [0.05, 0.9, 0.05], [0.3, 0.3, 0.4]]]])  # one layer, one head
    # off-diagonal entries: 0.2, 0.7, 0.05, 0.05, 0.3, 0.3; floor(0.5 * 6) = 3 smallest go: 0.05, 0.05, 0.2
    out = attnflow.rollout(att, residual=0.0, discard_ratio=0.5)[0]
    kept = np.array([[0.1, 0, 0.7], [0, 0.9, 0], [0.3, 0.3, 0.4]])
    np.testing.assert_allclose(out, kept / kept.sum(-1, keepdims=True))


def test_start_layer_skips_lower_layers():
    rng = np.random.default_rng(6)
    att = random_attention(rng, 4, 2, 5)
    out = attnflow.rollout(att, start_layer=2)
    np.testing.assert_allclose(out[0], np.eye(5))
    np.testing.assert_allclose(out[3], naive_rollout(att[2:])[1], atol=1e-12)


attention_arrays = st.integers(1, 4).flatmap(lambda layers: st.integers(1, 3).flatmap(
    lambda heads: st.integers(1, 6).flatmap(lambda n: hnp.arrays(
        np.float64, (layers, heads, n, n), elements=st.floats(0, 1, allow_subnormal=False)))))


@settings(max_examples=150, deadline=None)
@given(att=attention_arrays, residual=st.floats(0.05, 1.0), fusion=st.sampled_from(["mean", "max", "min"]))
def test_rollout_rows_are_distributions(att, residual, fusion):
    r = attnflow.rollout(att, residual=residual, head_fusion=fusion)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-9)
    assert (r >= 0).all()


@pytest.mark.parametrize("bad, message", [
    (np.full((2, 1, 3, 3), np.nan), "NaN"),
    (np.where(np.eye(3) > 0, np.nan, 0.5)[None, None], "NaN"),  # one NaN per row among valid weights
    (np.where(np.eye(3) > 0, np.inf, 0.5)[None, None], "infinite"),
    (np.where(np.eye(3) > 0, -np.inf, 0.5)[None, None], "infinite"),
    (np.where(np.eye(3) > 0, np.nan, -0.5)[None, None], "NaN"),  # NaN is reported before negatives
    (-np.ones((2, 1, 3, 3)), "non-negative"),
    (np.ones((2, 3, 3)), "expected attentions of shape"),
    (np.ones((2, 1, 3, 4)), "square"),
    ((), "empty tuple"),
    (None, "attentions=None"),
    ((np.ones((1, 2, 3, 3)), np.ones((1, 3, 3, 3))), "same heads"),
])
def test_bad_attentions_are_refused_with_a_sentence(bad, message):
    with pytest.raises(AttnflowError, match=message):
        attnflow.rollout(bad)


@pytest.mark.parametrize("kwargs, message", [
    ({"head_fusion": "median"}, "head_fusion"),
    ({"residual": 1.5}, "residual"),
    ({"discard_ratio": 1.0}, "discard_ratio"),
    ({"discard_ratio": "a"}, "discard_ratio"),
    ({"start_layer": 9}, "start_layer"),
    ({"mask": np.ones(4)}, "padding mask"),
])
def test_bad_parameters_are_refused(kwargs, message):
    att = np.full((2, 1, 3, 3), 1 / 3)
    with pytest.raises(AttnflowError, match=message):
        attnflow.rollout(att, **kwargs)


def test_naive_augment_is_row_stochastic():
    rng = np.random.default_rng(8)
    for a in naive_augment(random_attention(rng, 2, 2, 4), 0.5, "max"):
        np.testing.assert_allclose(a.sum(-1), 1.0)


def test_numpy_integer_start_layer_is_accepted():
    att = np.full((3, 1, 3, 3), 1 / 3)
    np.testing.assert_allclose(attnflow.rollout(att, start_layer=np.int64(1)), attnflow.rollout(att, start_layer=1))
