"""The decoder prediction step of faithfulness (issue 24): last-position logits only, passes sized by
memory, deletions continuing the KV cache of their shared prefix, progress with its total up front.
Oracle: one independent full forward pass per sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from attnflow.api.faithfulness import PassEstimate, estimate, model_predict, rows_per_pass
from attnflow.evaluation.faithfulness import evaluate

torch.set_num_threads(1)


def _tiny(kind: str = "llama"):
    torch.manual_seed(0)
    common = dict(vocab_size=500, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.5)
    model = (LlamaForCausalLM(LlamaConfig(**common)) if kind == "llama"
             else MistralForCausalLM(MistralConfig(**common, sliding_window=8)))
    model = model.double().eval()
    model.set_attn_implementation("eager")
    return model


def _deletions(n: int = 40, seed: int = 1) -> tuple[list[int], list[list[int]]]:
    ids = torch.randint(0, 500, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    return ids, [[t for j, t in enumerate(ids) if j != i] for i in range(n)]


def _oracle(model, seqs):
    with torch.no_grad():
        return np.stack([model(input_ids=torch.tensor([s])).logits[0, -1].numpy() for s in seqs])


def _tokens_run(model):
    seen: list[int] = []
    handle = model.model.embed_tokens.register_forward_hook(lambda m, a, o: seen.append(a[0].numel()))
    return seen, handle


def test_shared_prefixes_continue_one_cache_and_equal_full_passes():
    model = _tiny()
    ids, seqs = _deletions()
    seen, handle = _tokens_run(model)
    try:
        predict = model_predict(model, True, 4)
        got = predict(seqs)
        reused = sum(seen)
        seen.clear()
        plain = model_predict(model, True, 32, last_only=False, reuse_prefix=False)(seqs)
        full = sum(seen)
    finally:
        handle.remove()
    expected = _oracle(model, seqs)
    assert predict.reuses_prefix and reused < 0.8 * full  # the prefixes really were shared
    np.testing.assert_allclose(plain, expected, rtol=0, atol=1e-10)
    # continuing a cache changes only float32 rounding inside rotary embeddings (cos/sin are float32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


def test_last_position_logits_only_are_the_full_passes_last_row():
    model = _tiny()
    _, seqs = _deletions(20)
    got = model_predict(model, True, 8, reuse_prefix=False)(seqs)
    np.testing.assert_allclose(got, _oracle(model, seqs), rtol=0, atol=1e-10)


def test_a_sliding_window_decoder_never_continues_a_cache():
    model = _tiny("mistral")
    _, seqs = _deletions(30)
    predict = model_predict(model, True, 4)
    assert not predict.reuses_prefix
    np.testing.assert_allclose(predict(seqs), _oracle(model, seqs), rtol=0, atol=1e-10)


def test_rows_per_pass_follow_memory_and_length():
    model = _tiny()
    assert rows_per_pass(model, 10) == 32  # small sequences: the cap
    assert rows_per_pass(model, 4000, memory=2**20) == 1  # never below one
    short, long = rows_per_pass(model, 200, memory=64 * 2**20), rows_per_pass(model, 800, memory=64 * 2**20)
    assert 1 <= long < short <= 32
    assert rows_per_pass(model, 800, memory=256 * 2**20) > long
    # a model that cannot keep only the last position pays for every position's logits
    assert rows_per_pass(model, 200, last_only=False, memory=2**20) <= rows_per_pass(model, 200, memory=2**20)


def test_progress_total_is_known_up_front_and_moves_pass_by_pass():
    model = _tiny()
    ids, _ = _deletions(40)
    scores = {"a": np.random.default_rng(0).random((3, 40)), "b": np.random.default_rng(1).random((3, 40))}
    calls: list[tuple[int, int]] = []
    predict = model_predict(model, True, 8)
    found = evaluate(predict, ids, scores, progress=lambda done, total: calls.append((done, total)))
    totals = {t for _, t in calls}
    # the base (and its cached look-ups: one for the deletions, one per method), 39 deletions, and 2 per
    # method, layer and fraction
    assert totals == {1 + 1 + 39 + 2 + 2 * 6 * 3}
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(calls) > 10  # many small steps, not one jump
    plain = evaluate(model_predict(model, True, 32, last_only=False, reuse_prefix=False), ids, scores)
    np.testing.assert_allclose(found.loo, plain.loo, atol=1e-6 * np.nanmax(np.abs(plain.loo)), equal_nan=True)


def test_the_estimate_counts_the_passes_evaluate_will_make():
    model = _tiny()
    ids, _ = _deletions(40)
    found = estimate(model, ids, ranked=39, rows=6, fractions=(0.1, 0.2, 0.5), methods=2)
    assert isinstance(found, PassEstimate)
    assert found.rows == 1 + 1 + 39 + 2 + 2 * 6 * 3 and found.tokens == 40 and found.seconds > 0
    assert found.seconds_for(found.rows) == pytest.approx(found.seconds)
    assert "40 tokens" in str(found) and "forward passes" in str(found)
