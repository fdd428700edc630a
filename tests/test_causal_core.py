"""The pure decoder core: receptive-field normalisation and incremental rollout, against the
full-matrix rollout and naive loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow
from attnflow.core.causal import augment_last_row
from attnflow.core.fusion import augmented
from attnflow.core.incremental import IncrementalRollout, rollout_row


def causal_attention(seed: int, layers: int, heads: int, n: int) -> np.ndarray:
    """Random softmax attention under a causal mask: row q is a distribution over keys 0..q."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(layers, heads, n, n)) * 2
    logits[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def naive_augmented_row(w: np.ndarray, q: int, residual: float, norm: str | None) -> np.ndarray:
    """Row q of the augmented matrix written out from the formulas in attnflow.core.causal."""
    row = w[q, : q + 1].copy()
    if norm == "keys":
        row *= q + 1
    if norm == "sink" and q > 0:
        row[0] = 0.0
    a = (1 - residual) * row
    a[q] += residual
    out = np.zeros(w.shape[-1])
    out[: q + 1] = a / a.sum()
    return out


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 9), residual=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
       norm=st.sampled_from([None, "keys", "sink"]))
def test_augmented_matches_formula_row_by_row(seed, n, residual, norm):
    att = causal_attention(seed, 2, 3, n)
    a = augmented(torch.from_numpy(att)[None], torch.ones(1, n, dtype=torch.bool), residual=residual,
                  head_fusion="mean", causal_norm=norm)[0].numpy()
    w = att.mean(axis=1)
    for layer in range(2):
        for q in range(n):
            expected = naive_augmented_row(w[layer], q, residual, norm)
            np.testing.assert_allclose(a[layer, q], expected, atol=1e-12)
            last = augment_last_row(torch.from_numpy(w[layer, q, : q + 1]), residual, norm).numpy()
            np.testing.assert_allclose(last, expected[: q + 1], atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), m=st.integers(1, 6), extra=st.integers(1, 6),
       norm=st.sampled_from([None, "keys", "sink"]), fusion=st.sampled_from(["mean", "max", "min"]))
def test_incremental_rollout_equals_full_rollout(seed, m, extra, norm, fusion):
    n = m + extra
    att = causal_attention(seed, 4, 3, n)
    full = attnflow.rollout(att, causal_norm=norm, head_fusion=fusion)
    inc = IncrementalRollout(causal_norm=norm, head_fusion=fusion)
    inc.start(att[:, :, :m, :m])
    for t in range(m, n):
        inc.append(att[:, :, t, : t + 1])
    np.testing.assert_allclose(inc.rows.numpy(), full, atol=1e-12)
    assert np.allclose(np.triu(full, 1), 0.0)  # no mass on future positions


def test_rollout_row_reads_only_stored_rows():
    att = causal_attention(1, 3, 2, 6)
    full = attnflow.rollout(att)
    rows = torch.from_numpy(full[:, :5, :])  # rows of positions 0..4, all 6 columns
    new = rollout_row(rows, torch.from_numpy(att[:, :, 5, :]))
    np.testing.assert_allclose(new.numpy(), full[:, 5, :], atol=1e-12)


def test_sink_and_keys_change_the_result_and_keep_rows_stochastic():
    att = causal_attention(3, 3, 2, 7)
    base = attnflow.rollout(att)
    for norm in ("keys", "sink"):
        r = attnflow.rollout(att, causal_norm=norm)
        np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
        assert not np.allclose(r, base)
    # Dropping the sink can only lower the share that reaches the first token.
    assert (attnflow.rollout(att, causal_norm="sink")[:, 1:, 0] <= base[:, 1:, 0] + 1e-12).all()


def test_left_padding_matches_unpadded():
    att = causal_attention(5, 2, 2, 5)
    padded = np.zeros((1, 2, 2, 7, 7))
    padded[0, :, :, 2:, 2:] = att
    mask = np.array([[False, False, True, True, True, True, True]])
    for norm in (None, "keys", "sink"):
        r = attnflow.rollout(padded, mask=mask, causal_norm=norm)[0]
        np.testing.assert_allclose(r[:, 2:, 2:], attnflow.rollout(att, causal_norm=norm), atol=1e-12)
        f = attnflow.flow(padded, mask=mask, causal_norm=norm, positions=[-1], layers=[-1], solver="networkx")[0]
        np.testing.assert_allclose(f[..., 2:], attnflow.flow(att, causal_norm=norm, positions=[-1], layers=[-1],
                                                             solver="networkx"), atol=1e-9)


def test_bad_causal_norm_and_misuse_are_one_sentence_errors():
    att = causal_attention(0, 1, 1, 3)
    with pytest.raises(attnflow.AttnflowError, match="causal_norm must be"):
        attnflow.rollout(att, causal_norm="visible")
    inc = IncrementalRollout()
    with pytest.raises(attnflow.AttnflowError, match="start"):
        inc.append(att[:, :, 0, :1])
    inc.start(att[:, :, :2, :2])
    with pytest.raises(attnflow.AttnflowError, match="expected the new position's attention"):
        inc.append(att[:, :, 2, :2])
