"""Decoders on the real SmolLM2-135M (Llama, grouped-query attention): capture, padding, explain,
and generate() against an independent oracle, rollout of one full forward pass."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import attnflow
from attnflow.capture.text import encode

PROMPT = "The keys to the cabinet"


def full_forward_rows(model, tokenizer, gen, causal_norm=None):
    """Oracle: one forward pass over prompt + generated tokens, rolled out with attnflow.rollout;
    the rows of the positions that predicted each generated token, shaped like ``gen.rows``."""
    ids = encode(tokenizer, [gen.input])["input_ids"][0].tolist() + gen.meta["generated_ids"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    r = np.asarray(attnflow.rollout(out.attentions, causal_norm=causal_norm))  # (layers, n, n)
    m, k = gen.input_length, gen.n_targets
    expected = np.zeros_like(gen.dense("rollout"))
    expected[:, :, : m + k - 1] = r[:, m - 1 : m - 1 + k, : m + k - 1].transpose(1, 0, 2)
    return expected, out.logits[0]


@pytest.mark.parametrize("causal_norm", [None, "sink"])
def test_greedy_generation_matches_full_forward(smollm2, causal_norm):
    model, tokenizer = smollm2
    gen = attnflow.generate(model, tokenizer, PROMPT, max_new_tokens=4, causal_norm=causal_norm)
    rows = gen.dense("rollout")
    assert gen.n_targets == 4 and rows.shape == (4, 30, 9)
    expected, logits = full_forward_rows(model, tokenizer, gen, causal_norm)
    np.testing.assert_allclose(rows, expected, atol=1e-5)
    np.testing.assert_allclose(gen.M, expected[:, :, :5].transpose(0, 2, 1), atol=1e-5)
    # Greedy: each generated token is the argmax of the full pass at the position that predicted it.
    m = gen.input_length
    assert logits[m - 1 : m + 3].argmax(-1).tolist() == gen.meta["generated_ids"]
    assert gen.targets[0] == " are" and gen.target_positions == [m - 1 + i for i in range(4)]
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-6)
    for i in range(4):  # no mass on positions the predicting query could not see
        assert np.all(rows[i, :, m + i :] == 0.0)


def test_sampling_matches_full_forward(smollm2):
    model, tokenizer = smollm2
    torch.manual_seed(3)
    gen = attnflow.generate(model, tokenizer, "Once upon a time", max_new_tokens=4, do_sample=True,
                            top_k=50, temperature=1.5)
    assert gen.params["do_sample"] is True and 1 <= gen.n_targets <= 4
    expected, _ = full_forward_rows(model, tokenizer, gen)
    np.testing.assert_allclose(gen.dense("rollout"), expected, atol=1e-5)


def test_capture_is_causal_and_explain_defaults_to_last(smollm2):
    model, tokenizer = smollm2
    maps = attnflow.capture(model, tokenizer, PROMPT)
    assert maps.causal and maps.attentions.shape == (30, 9, 5, 5)
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    assert maps.attentions[..., upper].abs().max() == 0.0
    f = np.asarray(attnflow.flow(maps, positions=[2], layers=[0, -1]))
    assert np.all(f[..., 3:] == 0.0)  # position 2 cannot reach later tokens
    expl = attnflow.explain(PROMPT, model, tokenizer=tokenizer, method="rollout")
    assert expl.target == 4 and expl.sources[4] == " cabinet"
    with pytest.raises(attnflow.AttnflowError, match="decoders have no CLS"):
        attnflow.explain(PROMPT, model, tokenizer=tokenizer, target="cls")


@pytest.mark.parametrize("drop_pad_token", [False, True])
def test_padded_batch_gives_each_prompt_alone(smollm2, drop_pad_token):
    model, tokenizer = smollm2
    if drop_pad_token:  # GPT-2 / Llama style tokenizers ship without one
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.pad_token = None
        assert tokenizer.pad_token_id is None
    texts = ["Hi", "The keys to the old wooden cabinet in the hall"]
    batch = attnflow.capture(model, tokenizer, texts)
    mask = batch.mask.numpy()
    assert mask[0].sum() < mask.shape[1] and mask[0, 0]  # right padding
    for norm in (None, "sink"):
        r = np.asarray(attnflow.rollout(batch, causal_norm=norm))
        for b, text in enumerate(texts):
            alone = np.asarray(attnflow.rollout(attnflow.capture(model, tokenizer, text), causal_norm=norm))
            n = int(mask[b].sum())
            np.testing.assert_allclose(r[b][:, :n, :n], alone, atol=1e-5)
            assert np.all(r[b][:, :, n:] == 0.0)  # padded positions never receive mass


def test_generate_rejects_bad_input(smollm2):
    model, tokenizer = smollm2
    for prompt, n, match in [("", 3, "non-empty"), ("  ", 3, "non-empty"), (PROMPT, 0, "positive"),
                             (PROMPT, -2, "positive"), (PROMPT, 2.5, "positive")]:
        with pytest.raises(attnflow.AttnflowError, match=match):
            attnflow.generate(model, tokenizer, prompt, max_new_tokens=n)
    for kwargs in ({"num_beams": 2}, {"num_return_sequences": 2}):
        with pytest.raises(attnflow.AttnflowError, match=next(iter(kwargs))):
            attnflow.generate(model, tokenizer, PROMPT, max_new_tokens=2, **kwargs)


def test_report_maps_honour_causal_norm(smollm2):
    """explain_maps (behind --html) applies the same receptive-field normalisation as rollout()."""
    model, tokenizer = smollm2
    text = "The keys to the cabinet"
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("raw", "rollout"), causal_norm="sink")
    captured = attnflow.capture(model, tokenizer, text)
    expected = np.asarray(attnflow.rollout(captured, causal_norm="sink"))
    np.testing.assert_allclose(maps.scores["rollout"].transpose(1, 0, 2), expected, atol=1e-6)
    assert maps.target == maps.n_sources - 1 and maps.params["causal_norm"] == "sink"
    assert not np.allclose(maps.scores["rollout"].transpose(1, 0, 2), np.asarray(attnflow.rollout(captured)),
                           atol=1e-3)
