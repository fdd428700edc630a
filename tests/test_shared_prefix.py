"""Re-runs that share one clean prefix (attnflow.interventions.shared_prefix) against plain softmax attention
written out, and against the path that copies the prefix into every row."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.interventions import ablation as ablation_module
from attnflow.interventions import shared_prefix
from attnflow.interventions.ablation import ablated_flow, occlusion
from attnflow.interventions.shared_prefix import shared_attention, usable
from attnflow.interventions.span_ablation import ablate_spans
from factory import tiny_model
from oracles import float32_softmax_atol


def plain_attention(query, keys, values, prefix_keys, prefix_values, scale):
    """Each row's queries over [prefix, its own keys], causal in its own part, softmax written out."""
    b, heads, s, _ = query.shape
    group = heads // keys.shape[1]
    out = torch.empty(b, s, heads, values.shape[-1], dtype=torch.float64)
    for r in range(b):
        for h in range(heads):
            k = torch.cat([prefix_keys[0, h // group], keys[r, h // group]]).double()
            v = torch.cat([prefix_values[0, h // group], values[r, h // group]]).double()
            j0 = prefix_keys.shape[2]
            for i in range(s):
                logits = (k[: j0 + i + 1] @ query[r, h, i].double()) * scale
                out[r, i, h] = torch.softmax(logits, 0) @ v[: j0 + i + 1]
    return out


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 3), kv=st.integers(1, 2), group=st.integers(1, 3), j0=st.integers(0, 9),
       s=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_split_softmax_equals_attention_over_the_whole_row(b, kv, group, j0, s, seed):
    g = torch.Generator().manual_seed(seed)
    d = 4
    query = torch.randn(b, kv * group, s, d, generator=g, dtype=torch.float64) * 2
    keys, values = (torch.randn(b, kv, s, d, generator=g, dtype=torch.float64) for _ in range(2))
    pk, pv = (torch.randn(1, kv, j0, d, generator=g, dtype=torch.float64) for _ in range(2))
    # a run from position 0 has no prefix (None)
    got = shared_attention(query, keys, values, pk if j0 else None, pv if j0 else None, 0.7)
    np.testing.assert_allclose(got, plain_attention(query, keys, values, pk, pv, 0.7), atol=1e-12)


def test_suffix_rows_in_pieces_change_nothing(monkeypatch):
    g = torch.Generator().manual_seed(0)
    query = torch.randn(5, 4, 3, 8, generator=g, dtype=torch.float64)
    keys, values = (torch.randn(5, 2, 3, 8, generator=g, dtype=torch.float64) for _ in range(2))
    pk, pv = (torch.randn(1, 2, 6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    whole = shared_attention(query, keys, values, pk, pv, None)
    monkeypatch.setattr(shared_prefix, "SUFFIX_BYTES", 1)  # one row at a time
    np.testing.assert_array_equal(shared_attention(query, keys, values, pk, pv, None), whole)


@pytest.fixture
def copying(monkeypatch):
    """Run the ablation engines on the path that copies the prefix into every row."""
    def force():
        monkeypatch.setattr(shared_prefix, "usable", lambda model: "the copying path, for comparison")
    return force


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_shared_and_copied_prefixes_give_the_same_scores(dtype, copying, monkeypatch):
    model = tiny_model("llama", dtype=dtype)  # grouped-query heads: 4 query heads over 2
    assert usable(model) == ""
    ids = torch.randint(0, 97, (21,), generator=torch.Generator().manual_seed(3)).tolist()
    calls = []
    real = shared_prefix.shared_attention
    monkeypatch.setattr(shared_prefix, "shared_attention", lambda *a: calls.append(1) or real(*a))
    copies = []
    real_copy = ablation_module.Prefix.copy
    monkeypatch.setattr(ablation_module.Prefix, "copy", lambda self, *a: copies.append(1) or real_copy(self, *a))
    runs = {
        "flow": lambda: ablated_flow(model, ids, [15, 20], batch_size=4).scores,
        "each": lambda: ablated_flow(model, ids, layers="each", batch_size=5).scores,
        "delete": lambda: occlusion(model, ids, batch_size=3).scores,
        "replace": lambda: occlusion(model, ids, replacement=torch.zeros(32, dtype=dtype), batch_size=3).scores,
        "spans": lambda: ablate_spans(model, ids, [[0, 1], [4, 5, 6], [9], [12, 17]], batch_size=2).scores,
    }
    shared = {name: run() for name, run in runs.items()}
    assert calls and not copies  # the shared path ran, and no row copied its prefix
    copying()
    for name, run in runs.items():
        copied = run()
        # the copying path runs the model's eager attention (softmax in float32), the shared one SDPA's kernel
        atol = float32_softmax_atol(10.0, len(ids)) if dtype == torch.float64 else 2e-5
        np.testing.assert_allclose(shared[name], copied, atol=atol, rtol=0, err_msg=name)
        assert np.ptp(copied) > 1e-3
    assert copies


@pytest.mark.parametrize("kind, dtype, why", [("mistral", None, "sliding-window"), ("gemma2", None, "SDPA"),
                                              ("llama", torch.bfloat16, "half precision")])
def test_models_whose_prefix_cannot_be_shared_say_why(kind, dtype, why):
    assert why in usable(tiny_model(kind, dtype=dtype))
