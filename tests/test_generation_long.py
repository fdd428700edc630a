"""Generation tracking for long prompts: both strategies ("rows": fused maps kept, rows computed top
down at the end; "incremental": rollout extended row by row) against one teacher-forced pass, on
SmolLM2, a tiny grouped-query Llama with a long prompt, and a model without declared attention
modules (Bloom, read through output_attentions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import attnflow
from attnflow.capture.generation import INCREMENTAL_MAX_BYTES, choose_strategy
from attnflow.capture.text import encode
from attnflow.errors import AttnflowError


def teacher_forced(model, tokenizer, gen, causal_norm=None):
    ids = encode(tokenizer, [gen.input])["input_ids"][0].tolist() + gen.meta["generated_ids"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    r = np.asarray(attnflow.rollout(out.attentions, causal_norm=causal_norm))
    m, k = gen.input_length, gen.n_targets
    expected = np.zeros_like(gen.dense("rollout"))
    expected[:, :, : m + k - 1] = r[:, m - 1: m - 1 + k, : m + k - 1].transpose(1, 0, 2)
    return expected


def test_the_cheaper_strategy_is_chosen():
    assert choose_strategy(4096, 20, 30) == "rows"  # a long prompt, few new tokens
    assert choose_strategy(20, 128, 30) == "incremental"  # the short-prompt case of benchmarks/generation.py
    assert choose_strategy(1024, 2000, 30) == "rows"  # incremental would be cheaper but its buffer too big
    assert 30 * (2 * 3024) ** 2 * 8 > INCREMENTAL_MAX_BYTES
    # maps past REPLAY_FROM_BYTES on a model the row capture takes: one more pass instead of N^2 memory
    assert choose_strategy(8192, 20, 30, replayable=True) == "replay"
    assert choose_strategy(1024, 20, 30, replayable=True) == "rows"  # short prompts keep today's path
    assert choose_strategy(8192, 20, 30) == "rows"


@pytest.mark.parametrize("strategy", ["rows", "incremental", "replay"])
@pytest.mark.parametrize("causal_norm", [None, "keys"])
def test_both_strategies_match_one_teacher_forced_pass_on_smollm2(smollm2, strategy, causal_norm):
    model, tokenizer = smollm2
    gen = attnflow.generate(model, tokenizer, "The keys to the cabinet", max_new_tokens=3, strategy=strategy,
                            causal_norm=causal_norm)
    assert gen.meta["strategy"] == strategy
    np.testing.assert_allclose(gen.dense("rollout"), teacher_forced(model, tokenizer, gen, causal_norm), atol=1e-5)


def _tiny(config_cls, model_cls, vocab, **kwargs):
    torch.manual_seed(0)
    model = model_cls(config_cls(vocab_size=vocab, max_position_embeddings=1024, **kwargs)).eval()
    model.set_attn_implementation("eager")
    return model


def test_long_prompt_with_grouped_query_heads(minilm):
    """A 400-token prompt through a tiny grouped-query Llama: the default ("rows") path, sampled."""
    tokenizer = minilm[1]
    model = _tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM, len(tokenizer), hidden_size=32,
                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 45)
    torch.manual_seed(1)
    gen = attnflow.generate(model, tokenizer, prompt, max_new_tokens=6, do_sample=True, min_new_tokens=6)
    assert gen.input_length > 400 and gen.meta["strategy"] == "rows" and gen.n_targets == 6
    np.testing.assert_allclose(gen.dense("rollout"), teacher_forced(model, tokenizer, gen), atol=1e-5)
    rows = gen.dense("rollout")
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("strategy", ["rows", "incremental"])
def test_models_without_declared_attention_modules(minilm, strategy):
    tokenizer = minilm[1]
    torch.manual_seed(0)
    config = transformers.BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=3, n_head=4)
    config._attn_implementation = "eager"
    model = transformers.BloomForCausalLM(config).eval()
    gen = attnflow.generate(model, tokenizer, "the keys to the cabinet", max_new_tokens=4, min_new_tokens=4,
                            strategy=strategy)
    np.testing.assert_allclose(gen.dense("rollout"), teacher_forced(model, tokenizer, gen), atol=1e-5)


def test_bad_strategy_is_one_sentence(smollm2):
    model, tokenizer = smollm2
    with pytest.raises(AttnflowError, match="strategy must be one of auto, rows, incremental, replay"):
        attnflow.generate(model, tokenizer, "hi", max_new_tokens=1, strategy="fast")


@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_replay_keeps_no_maps_and_equals_the_teacher_forced_pass(minilm, kind, monkeypatch):
    """Above REPLAY_FROM_BYTES (lowered here) "auto" replays the sequence through the row capture: the same
    rows as one teacher-forced pass (grouped-query heads, a sliding window, GPT-2's fused projections), and
    the model stays on the attention it was loaded with."""
    from factory import tiny_model

    from attnflow.capture import generation

    tokenizer = minilm[1]
    model = tiny_model(kind, vocab=len(tokenizer))
    model.set_attn_implementation("sdpa")
    monkeypatch.setattr(generation, "REPLAY_FROM_BYTES", 1)
    torch.manual_seed(1)
    gen = attnflow.generate(model, tokenizer, "the keys to the cabinet are on the", max_new_tokens=5,
                            min_new_tokens=5)
    assert gen.meta["strategy"] == "replay" and model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")
    np.testing.assert_allclose(gen.dense("rollout"), teacher_forced(model, tokenizer, gen), atol=1e-5)
