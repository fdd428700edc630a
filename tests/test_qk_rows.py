"""Rows from queries and keys (attnflow.core.qk_rows) against rollout_rows / raw_rows on the eager maps of the
same queries and keys, the naive loop, and invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import naive_rollout

from attnflow.core.qk_rows import QK, chunk_size, target_rows
from attnflow.core.raw import raw_rows
from attnflow.core.rollout import rollout_rows
from attnflow.errors import AttnflowError


def random_layers(seed: int, layers: int = 4, heads: int = 4, kv_heads: int = 2, n: int = 11, d: int = 5,
                  windows=None, softcap=None, scale: float = 1.5) -> list[QK]:
    g = torch.Generator().manual_seed(seed)
    windows = windows or [None] * layers
    return [QK(scale * torch.randn(heads, n, d, generator=g, dtype=torch.float64),
               scale * torch.randn(kv_heads, n, d, generator=g, dtype=torch.float64), scaling=d ** -0.5,
               softcap=softcap, window=windows[i]) for i in range(layers)]


def eager_maps(layers: list[QK], causal: bool = True, key_mask=None) -> torch.Tensor:
    """(layers, heads, n, n): each head's softmax written out head by head, the full matrix at once."""
    out = []
    for qk in layers:
        heads, n, _ = qk.query.shape
        group = heads // qk.key.shape[0]
        per_head = []
        for h in range(heads):
            s = (qk.query[h] @ qk.key[h // group].T) * qk.scaling
            if qk.softcap is not None:
                s = qk.softcap * torch.tanh(s / qk.softcap)
            i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            hidden = (j > i) if causal else torch.zeros(n, n, dtype=torch.bool)
            if causal and qk.window is not None:
                hidden |= j <= i - qk.window
            if key_mask is not None:
                hidden |= ~key_mask[None, :]
            s = s.masked_fill(hidden, float("-inf"))
            p = torch.softmax(s, dim=-1)
            per_head.append(torch.nan_to_num(p, nan=0.0))
        out.append(torch.stack(per_head))
    return torch.stack(out)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("options", [
    dict(), dict(residual=0.0), dict(residual=0.8, start_layer=2), dict(causal_norm="keys", residual=0.3),
    dict(causal_norm="sink"), dict(windows=[3, None, 2, None]), dict(softcap=2.0, windows=[None, 4, None, 4]),
    dict(causal=False),
])
def test_rows_equal_rollout_rows_and_raw_rows_of_the_eager_maps(fusion, options):
    layer_options = {k: options.pop(k) for k in ("windows", "softcap") if k in options}
    causal = options.pop("causal", True)
    layers = random_layers(1, **layer_options)
    maps = eager_maps(layers, causal=causal)
    positions = [10, 3] if causal else [0, 10, 6]
    # a few queries per chunk: many chunks, the skipped ones included
    got = target_rows(layers, positions, head_fusion=fusion, causal=causal, memory=2_000, dtype=torch.float64,
                      **options)
    assert chunk_size(4, 11, 8, 2_000) < 5
    start = options.pop("start_layer", 0)
    expected = rollout_rows(maps, positions, head_fusion=fusion, start_layer=start, **options)
    torch.testing.assert_close(got["rollout"], expected, atol=1e-12, rtol=0)
    raw = raw_rows(maps, positions, head_fusion=fusion, causal_norm=options.get("causal_norm"))
    torch.testing.assert_close(got["raw"], raw, atol=1e-12, rtol=0)


def test_rows_equal_the_naive_loop_on_a_hand_sized_case():
    layers = random_layers(2, layers=3, heads=2, kv_heads=1, n=6, d=3)
    maps = eager_maps(layers).numpy()
    got = target_rows(layers, [5, 2], dtype=torch.float64)["rollout"].numpy()
    expected = naive_rollout(maps, 0.5, "mean")
    np.testing.assert_allclose(got, expected[:, [5, 2]], atol=1e-12)


def test_padded_keys_match_the_padded_rollout():
    layers = random_layers(3, n=9)
    key_mask = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1], dtype=torch.bool)  # left padding
    maps = eager_maps(layers, key_mask=key_mask)
    for options in (dict(), dict(causal_norm="keys"), dict(causal_norm="sink", residual=0.0)):
        got = target_rows(layers, [8, 1, 4], key_mask=key_mask, memory=3_000, dtype=torch.float64, **options)
        expected = rollout_rows(maps, [8, 1, 4], mask=key_mask, **options)
        torch.testing.assert_close(got["rollout"], expected, atol=1e-12, rtol=0)
        raw = raw_rows(maps, [8, 1, 4], mask=key_mask, causal_norm=options.get("causal_norm"))
        torch.testing.assert_close(got["raw"], raw, atol=1e-12, rtol=0)
        assert float(got["rollout"][:, 1].abs().sum()) == 0.0  # the padded target's rows


def test_one_method_alone_and_low_precision_inputs():
    layers = random_layers(4)
    both = target_rows(layers, [10], dtype=torch.float64)
    assert set(target_rows(layers, [10], methods=["raw"])) == {"raw"}
    torch.testing.assert_close(target_rows(layers, [10], methods=["raw"], dtype=torch.float64)["raw"], both["raw"])
    # bfloat16 queries and keys are accumulated in float32: rows still sum to 1 to float32 precision
    low = [QK(qk.query.bfloat16(), qk.key.bfloat16(), qk.scaling) for qk in layers]
    rows = target_rows(low, [10])["rollout"]
    assert rows.dtype == torch.float32
    torch.testing.assert_close(rows.sum(-1), torch.ones(4, 1), atol=1e-6, rtol=0)
    assert float((rows - both["rollout"].float()).abs().max()) < 0.05


def test_refusals():
    layers = random_layers(5)
    with pytest.raises(AttnflowError, match="methods must be among"):
        target_rows(layers, [1], methods=["flow"])
    with pytest.raises(AttnflowError, match="fuse the heads"):
        target_rows(layers, [1], head_fusion=None)
    with pytest.raises(AttnflowError, match="multiple of kv_heads"):
        QK(torch.zeros(3, 4, 2), torch.zeros(2, 4, 2), 1.0)
    with pytest.raises(AttnflowError, match="positions must lie"):
        target_rows(layers, [11])
    with pytest.raises(AttnflowError, match="has 5 positions"):
        target_rows([QK(torch.zeros(4, 5, 5), torch.zeros(2, 5, 5), 1.0)] + layers[1:], [1])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 12), st.sampled_from(["mean", "max", "min"]),
       st.floats(0.0, 1.0), st.booleans(), st.integers(200, 20_000))
def test_rows_are_distributions(seed, n_layers, n, fusion, residual, windowed, memory):
    layers = random_layers(seed, layers=n_layers, n=n, windows=[2 if windowed else None] * n_layers, scale=3.0)
    target = seed % n
    got = target_rows(layers, [target], head_fusion=fusion, residual=residual, memory=memory)
    rows, raw = got["rollout"], got["raw"]
    assert bool((rows >= 0).all()) and bool((raw >= 0).all())
    assert float(rows[..., target + 1:].abs().sum()) == 0.0  # causal: nothing after the target
    torch.testing.assert_close(rows.sum(-1), torch.ones(n_layers, 1), atol=1e-5, rtol=0)
    if fusion == "mean":
        torch.testing.assert_close(raw.sum(-1), torch.ones(n_layers, 1), atol=1e-5, rtol=0)
