"""Target-row rollout (vector-matrix products, top down) against the naive loop and the full maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import naive_rollout, random_attention

import attnflow
from attnflow.core.methods import method_rows
from attnflow.core.raw import raw_rows
from attnflow.core.rollout import rollout_rows, rows_are_cheaper


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [0.5, 0.0, 0.8])
def test_rows_equal_the_naive_loop(fusion, residual):
    rng = np.random.default_rng(3)
    att = random_attention(rng, layers=5, heads=3, n=9)
    expected = naive_rollout(att, residual, fusion)  # (layers, n, n)
    positions = [0, 4, -1]
    got = rollout_rows(att, positions, residual=residual, head_fusion=fusion)
    assert got.shape == (5, 3, 9)
    np.testing.assert_allclose(got, expected[:, [0, 4, 8]], atol=1e-12)
    top = rollout_rows(att, [2], layers=[-1], residual=residual, head_fusion=fusion)
    np.testing.assert_allclose(top[0, 0], expected[-1, 2], atol=1e-12)


@pytest.mark.parametrize("options", [
    dict(head_fusion=None), dict(start_layer=2), dict(discard_ratio=0.3), dict(causal_norm="sink"),
    dict(causal_norm="keys", residual=0.3), dict(layers=[3, 0, 1]), dict(head_fusion=None, layers=[-1]),
])
def test_rows_equal_the_full_rollout_with_every_option(options):
    rng = np.random.default_rng(5)
    att = random_attention(rng, layers=4, heads=2, n=8, causal="causal_norm" in options)
    layers = options.pop("layers", None)
    full = np.asarray(attnflow.rollout(att, **options))
    positions = [7, 1]
    got = rollout_rows(att, positions, layers=layers, **options)
    chosen = full if layers is None else full[layers]
    np.testing.assert_allclose(got, chosen[..., positions, :], atol=1e-12)


def test_rows_of_a_padded_batch_equal_the_full_rollout():
    rng = np.random.default_rng(7)
    att = torch.tensor(random_attention(rng, layers=3, heads=2, n=6), dtype=torch.float32)
    batch = torch.stack([att, att.flip(-1)])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    full = attnflow.rollout(batch, mask=mask)
    got = rollout_rows(batch, [0, 5], mask=mask)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.shape == (2, 3, 2, 6)
    torch.testing.assert_close(got, full[:, :, [0, 5]], atol=1e-6, rtol=0)
    assert float(got[0, :, 1].abs().sum()) == 0.0  # the padded position's row


def test_many_rows_fall_back_to_the_full_maps_and_agree():
    rng = np.random.default_rng(11)
    att = random_attention(rng, layers=6, heads=2, n=5)
    assert not rows_are_cheaper(5, 5, list(range(6)))
    assert rows_are_cheaper(2048, 1, list(range(30)))  # explain's case: one target of a long input
    np.testing.assert_allclose(rollout_rows(att, list(range(5))), naive_rollout(att), atol=1e-12)


def test_method_rows_take_the_row_paths():
    rng = np.random.default_rng(13)
    att = random_attention(rng, layers=3, heads=4, n=7)
    np.testing.assert_allclose(method_rows(att, "rollout", [3]), naive_rollout(att)[:, [3]], atol=1e-12)
    raw = np.asarray(attnflow.raw(att, causal_norm="keys"))
    np.testing.assert_allclose(method_rows(att, "raw", [3, 0], causal_norm="keys"), raw[:, [3, 0]], atol=1e-12)
    np.testing.assert_allclose(raw_rows(att, [1], layers=[2], head_fusion=None),
                               np.asarray(attnflow.raw(att, head_fusion=None))[[2]][:, :, [1]], atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 10), layers=st.integers(1, 5), residual=st.floats(0.05, 1.0), seed=st.integers(0, 10**6),
       fusion=st.sampled_from(["mean", "max", "min"]))
def test_rows_are_distributions_and_match_the_full_maps(n, layers, residual, seed, fusion):
    rng = np.random.default_rng(seed)
    att = random_attention(rng, layers=layers, heads=2, n=n, zeros=0.3)
    q = int(rng.integers(n))
    got = rollout_rows(att, [q], residual=residual, head_fusion=fusion)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-9)
    assert (got >= 0).all()
    full = np.asarray(attnflow.rollout(att, residual=residual, head_fusion=fusion))
    np.testing.assert_allclose(got[:, 0], full[:, q], atol=1e-12)


@pytest.mark.parametrize("causal_norm", [None, "keys"])
def test_decoder_maps_go_block_by_block_and_agree(monkeypatch, causal_norm):
    """AttentionMaps of a decoder (causal=True) take the blocked lower-triangular product."""
    import importlib

    monkeypatch.setattr(importlib.import_module("attnflow.core.rollout"), "CAUSAL_BLOCK", 3)
    rng = np.random.default_rng(17)
    att = torch.tensor(random_attention(rng, layers=4, heads=3, n=11, causal=True))
    fused = attnflow.AttentionMaps(att.mean(dim=1, keepdim=True), [str(i) for i in range(11)], causal=True,
                                   head_fusion="mean")
    expected = naive_rollout(att.numpy(), 0.5, "mean") if causal_norm is None else \
        np.asarray(attnflow.rollout(att, causal_norm=causal_norm))
    got = rollout_rows(fused, [10, 4, 0], causal_norm=causal_norm)
    np.testing.assert_allclose(got, expected[:, [10, 4, 0]], atol=1e-12)
