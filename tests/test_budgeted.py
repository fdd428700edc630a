"""The budgeted chooser (attnflow.interventions.budgeted): every score it marks exact equals one plain
forward pass with that source's (or span's) values zeroed (tests/test_spans.naive_drop, no cache), every
other score is the one-pass estimate, and what it spends stays within the budget."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from attnflow.interventions import budgeted
from attnflow.interventions.attribution_patching import attribution_patching
from attnflow.hf.architectures import layer_windows
from attnflow.interventions.budgeted import TAIL, alternating, attention_shares, budgeted_ablated_flow, runs_compute
from attnflow.interventions.compute import CALL_POSITIONS, Shapes
from attnflow.units.segments import segments
from attnflow.errors import AttnflowError
from tests.factory import tiny_decoder, tiny_model
from tests.oracles import float32_softmax_atol
from tests.test_spans import TEXT, naive_drop

REAL_OF = Shapes.of  # before the fixture below prices in positions


@pytest.fixture(scope="module")
def decoder(minilm_path):
    return tiny_decoder(minilm_path)


def in_positions(model):
    """A cost model in token positions: a pass of the input costs 1, a backward pass as much as a forward
    pass, logits and attention nothing (the chooser's plans as they were counted before MACs): the tiny
    models' logits (30,522 words of 32 numbers) would otherwise dwarf their layers and make everything exact."""
    layers = len(layer_windows(model))
    return Shapes(linear=1.0, pair=(0.0,) * layers, windows=(None,) * layers, logits=0.0)


@pytest.fixture(autouse=True)
def positions(monkeypatch):
    monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, model: in_positions(model)))


def _check_against_oracles(model, kind, ids, found, atol=None):
    est = attribution_patching(model, ids, found.targets).scores[:, 0]
    for i, t in enumerate(found.targets):
        # exact scores: the float32 softmax of eager attention bounds the agreement (tests/oracles.py);
        # estimates are the same computation as the oracle's and agree to float64 rounding
        exact_bound = atol or float32_softmax_atol(found.clean[i], len(ids))
        for s, span in enumerate(found.spans):
            if found.exact[s]:
                expected = naive_drop(model, kind, ids, t, found.tokens[i], span)
            else:
                expected = est[i, span].sum()
            bound = exact_bound if found.exact[s] else atol or 1e-8
            assert abs(found.scores[i, 0, s] - expected) < bound, (s, span, found.exact[s])


def test_a_short_input_within_the_budget_is_exact(decoder):
    model, tokenizer = decoder
    ids = tokenizer("the keys to the")["input_ids"]  # 6 tokens: the clean pass, then 6 rows of 6 in one call: 7
    cost = 1 + runs_compute(in_positions(model), list(range(6)), [5], 16, rebuild=False) / 6
    assert cost == pytest.approx(7)  # as batched: a small call's rows all run from the first start
    found = budgeted_ablated_flow(model, ids, budget=7)
    assert found.plan == "exact" and found.exact.all() and found.cost == pytest.approx(7)
    assert budgeted_ablated_flow(model, ids, budget=6.9).plan == "estimate+refine"
    _check_against_oracles(model, "llama", ids, found)


def test_a_long_input_is_estimated_and_refined_within_the_budget(decoder):
    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]  # 23 tokens: exact would cost 13 passes
    m = len(ids)
    previous = -1
    for budget in (3, 5, 8):
        found = budgeted_ablated_flow(model, ids, budget=budget, batch_size=4)
        assert found.plan == "estimate+refine" and found.cost <= budget
        k = int(found.exact.sum())
        assert 1 <= k < len(ids) and k > previous  # more budget, more re-scored
        previous = k
        _check_against_oracles(model, "llama", ids, found)
        # the tail: the latest sources whose runs, batched as they run, fit TAIL of what the estimate left
        share, tail = TAIL * (budget - 2) * m, 0
        while runs_compute(in_positions(model), list(range(m - 1, m - tail - 2, -1)), [m - 1], 4, False) <= share:
            tail += 1
        assert tail >= 1 and found.exact[m - tail:].all()
    exact = 1 + runs_compute(in_positions(model), list(range(m)), [m - 1], 16, False) / m
    assert budgeted_ablated_flow(model, ids, budget=exact).plan == "exact"


def test_the_tail_share_splits_the_refinement_between_the_latest_sources_and_the_top(decoder):
    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    est = attribution_patching(model, ids).scores[0, 0]
    # tail 0: the re-scored ones are the estimate's top (as re-ranked while refining): the first is its argmax
    top = budgeted_ablated_flow(model, ids, budget=5, tail=0.0, batch_size=4)
    assert top.exact[int(np.argmax(est))] and top.cost <= 5
    _check_against_oracles(model, "llama", ids, top)
    # tail 1: all of it on the latest sources: what is exact is a suffix of the input (the next one would not fit)
    latest = budgeted_ablated_flow(model, ids, budget=5, tail=1.0, batch_size=4)
    k = int(latest.exact.sum())
    assert k >= 1 and latest.exact[len(ids) - k:].all() and latest.cost <= 5
    _check_against_oracles(model, "llama", ids, latest)
    # nothing is left unspent that could still pay for a source: every source not exact costs more than what is left
    for found in (top, budgeted_ablated_flow(model, ids, budget=5, batch_size=4)):
        left = (5 - found.cost) * len(ids)
        assert all(len(ids) - j > left + 1e-9 for j in range(len(ids)) if not found.exact[j])
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(AttnflowError, match="tail must be a share"):
            budgeted_ablated_flow(model, ids, budget=5, tail=bad)


def test_sentences_and_several_targets(decoder):
    model, tokenizer = decoder
    enc = tokenizer(TEXT, return_offsets_mapping=True)
    ids, spans = enc["input_ids"], segments(TEXT, enc["offset_mapping"], "sentence")
    n = len(ids)
    cost = 1 + runs_compute(in_positions(model), [s[0] for s in spans], [10, n - 1], 16, False) / n
    exact = budgeted_ablated_flow(model, ids, [10, n - 1], spans=spans, budget=cost)
    assert exact.plan == "exact" and exact.scores.shape == (2, 1, len(spans))
    _check_against_oracles(model, "llama", ids, exact)
    mixed = budgeted_ablated_flow(model, ids, [10, n - 1], budget=4)
    assert mixed.plan == "estimate+refine" and mixed.cost <= 4
    _check_against_oracles(model, "llama", ids, mixed)


def test_attended_spans_take_turns_with_the_top_of_the_scores(decoder):
    """With ``attended`` (the span methods) the top phase alternates between the current scores' order and
    the target's attention (a span's largest share of one head's row, the first position left out): the most
    attended span is re-run exactly even where its estimate ranks it low; the scores stay the exact runs' and
    the estimate's."""
    model, tokenizer = decoder
    enc = tokenizer(TEXT, return_offsets_mapping=True)
    ids, spans = enc["input_ids"], segments(TEXT, enc["offset_mapping"], "word")
    est = attribution_patching(model, ids, target_attention=True)
    rows = est.target_attention  # (1, layers, heads, n)
    shares = attention_shares(rows, spans)
    naive = [max(sum(rows[0, layer, head, p] for p in span if p != 0) for layer in range(rows.shape[1])
                 for head in range(rows.shape[2])) for span in spans]
    np.testing.assert_allclose(shares, naive, atol=1e-12)
    most = int(np.argmax(shares))
    by_score = np.argsort([-est.scores[0, 0, s].sum() for s in spans], kind="stable")
    assert most != by_score[0]  # the estimate's order alone would not take it first
    plain = budgeted_ablated_flow(model, ids, spans=spans, budget=3, tail=0.0, batch_size=4)
    found = budgeted_ablated_flow(model, ids, spans=spans, budget=3, tail=0.0, batch_size=4, attended=True)
    assert found.exact[most] and not plain.exact[most] and found.cost <= 3
    _check_against_oracles(model, "llama", ids, found)
    assert alternating([3, 1, 2], [1, 0, 3]) == [3, 1, 0, 2]


def test_a_sliding_window_model_rebuilds_its_prefixes_within_the_budget():
    import torch

    model = tiny_model("mistral")
    ids = torch.randint(0, 97, (16,), generator=torch.Generator().manual_seed(4)).tolist()
    found = budgeted_ablated_flow(model, ids, budget=4, batch_size=4)
    assert found.plan == "estimate+refine" and found.cost <= 4 and found.exact.sum() >= 1
    est = attribution_patching(model, ids).scores[0, 0]
    for j in range(16):
        expected = naive_drop(model, "mistral", ids, 15, found.tokens[0], [j]) if found.exact[j] else est[j]
        assert abs(found.scores[0, 0, j] - expected) < 1e-5


def test_a_budget_below_the_estimate_is_refused(decoder):
    model, tokenizer = decoder
    with pytest.raises(AttnflowError, match="budget must be at least 2.00 forward passes"):
        budgeted_ablated_flow(model, tokenizer(TEXT)["input_ids"], budget=1.5)


def test_a_checkpointed_estimate_pass_keeps_its_kernels_cache_where_the_budget_can_use_it(decoder, monkeypatch):
    from attnflow.interventions import attribution_patching as patching

    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    plain = budgeted_ablated_flow(model, ids, budget=5)
    monkeypatch.setattr(patching, "CHECKPOINT_FROM", 8)  # this input counts as long
    kernels, caches = [], []
    real, estimate = budgeted.efficient_attention, budgeted.attribution_patching

    @contextmanager
    def spy(model, enabled=True):  # the exact re-scoring runs' attention
        with real(model, enabled) as kernel:
            yield kernel
        kernels.append(kernel)

    def kept(*args, **kwargs):  # the estimate pass: whether it kept a cache
        found = estimate(*args, **kwargs)
        caches.append(found.cache)
        return found

    monkeypatch.setattr(budgeted, "efficient_attention", spy)
    monkeypatch.setattr(budgeted, "attribution_patching", kept)
    long = budgeted_ablated_flow(model, ids, budget=5)
    assert long.cost <= 5 and 1 <= long.exact.sum() <= plain.exact.sum()
    assert caches[-1] is not None  # from the kernels: no prefix rebuilt
    assert kernels and all(k.used and k.calls > 0 for k in kernels)  # on SDPA, as the estimate pass
    assert model.config._attn_implementation == "eager"
    _check_against_oracles(model, "llama", ids, long, atol=1e-5)
    # a budget the estimate takes whole keeps no cache (its memory would buy nothing) and re-scores nothing
    least = budgeted.estimate_compute(in_positions(model), [len(ids) - 1]) / in_positions(model).forward(len(ids))
    bare = budgeted_ablated_flow(model, ids, budget=least)
    assert caches[-1] is None and not bare.exact.any()
    # a sliding window's cache cannot be cropped: prefixes are rebuilt, and counted within the budget
    model = tiny_model("mistral")
    window = [int(t) for t in np.random.default_rng(4).integers(0, 97, 16)]
    found = budgeted_ablated_flow(model, window, budget=4, batch_size=4)
    assert caches[-1] is None and found.cost <= 4 and found.exact.sum() >= 1


def test_the_unit_is_a_forward_pass_counted_in_multiply_accumulates(decoder):
    from attnflow.interventions.compute import _causal_keys

    model, _ = decoder
    c = model.config
    h, heads, kv, d, inner, layers = (c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                                      c.hidden_size // c.num_attention_heads, c.intermediate_size,
                                      c.num_hidden_layers)
    shapes = REAL_OF(model)  # this module prices in positions otherwise
    per_layer = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * inner  # q, k, v, o; gate, up, down
    assert shapes.linear == layers * per_layer and shapes.pair == (2 * heads * d,) * layers
    assert shapes.logits == h * c.vocab_size
    n = 23
    # the unit: a forward pass predicting the next token (the last position's logits)
    assert shapes.forward(n) == n * layers * per_layer + layers * 2 * heads * d * n * (n + 1) / 2 + h * c.vocab_size
    # a run from a cache attends to the cached keys too; rows multiply it
    assert shapes.run(20, 23, rows=4) == 4 * (3 * layers * per_layer + layers * 2 * heads * d * (21 + 22 + 23))
    # each batch of exact runs also pays a call's fixed price (CALL_POSITIONS positions' linear work)
    assert shapes.call == CALL_POSITIONS * layers * per_layer
    two = runs_compute(shapes, [20, 21, 22], [22], 2, rebuild=False)  # batches [20, 21] and [22]
    assert two == shapes.run(20, 23, rows=2, logits=1) + shapes.run(22, 23, logits=1) + 2 * shapes.call
    # a sliding window caps the keys a query sees
    assert _causal_keys(0, 10, 4) == 1 + 2 + 3 + 4 * 7 and _causal_keys(5, 10, None) == 6 + 7 + 8 + 9 + 10
    assert _causal_keys(2, 6, 3) == 3 + 3 + 3 + 3 and _causal_keys(0, 3, 8) == 6
