"""The GPT-2 family (absolute positions, fused qkv, LMHeadModel naming): a tiny randomly initialised
GPT-2 (no GPT-2 weights install from PyPI) with SmolLM2's tokenizer stripped of its pad token."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers

import attnflow
from attnflow.capture.text import encode, is_causal


@pytest.fixture(scope="module")
def tiny_gpt2(smollm2):
    _, tokenizer = smollm2
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.pad_token = None
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=3, n_head=4,
                                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.set_attn_implementation("eager")
    return model, tokenizer


def test_gpt2_generation_matches_full_forward(tiny_gpt2):
    model, tokenizer = tiny_gpt2
    assert is_causal(model)
    torch.manual_seed(1)
    gen = attnflow.generate(model, tokenizer, "The keys to the cabinet", max_new_tokens=5, do_sample=True,
                            min_new_tokens=5)
    ids = encode(tokenizer, [gen.input])["input_ids"][0].tolist() + gen.meta["generated_ids"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    full = np.asarray(attnflow.rollout(out.attentions, causal_norm="keys"))
    gen_keys = attnflow.generate(model, tokenizer, gen.input, max_new_tokens=1, causal_norm="keys")
    m = gen.input_length
    np.testing.assert_allclose(gen_keys.row()[:, :m], full[:, m - 1, :m], atol=1e-5)
    full = np.asarray(attnflow.rollout(out.attentions))
    rows = gen.dense("rollout")
    np.testing.assert_allclose(rows[:, :, : m + 4], full[:, m - 1 : m + 4, : m + 4].transpose(1, 0, 2), atol=1e-5)


def test_gpt2_padded_batch_without_pad_token(tiny_gpt2):
    model, tokenizer = tiny_gpt2
    texts = ["Hello there", "The keys to the old cabinet are"]
    batch = attnflow.capture(model, tokenizer, texts)
    r = np.asarray(attnflow.rollout(batch))
    for b, text in enumerate(texts):
        alone = np.asarray(attnflow.rollout(attnflow.capture(model, tokenizer, text)))
        n = alone.shape[-1]
        np.testing.assert_allclose(r[b][:, :n, :n], alone, atol=1e-5)  # absolute positions unchanged
        assert np.all(r[b][:, :, n:] == 0.0)
