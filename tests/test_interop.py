"""Where researchers already work: a TransformerLens cache (and its stacked patterns) and an nnsight
trace give the same scores as attnflow.explain on the same model; what would be a silent wrong answer
(TransformerLens's layers-first stack read as a batch) and a bridge passed as a model are refused in a
sentence that says what to pass."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import attnflow
from attnflow.errors import AttnflowError
from factory import tiny_model

TEXT = "the keys to the old cabinet are"


@pytest.fixture(scope="module")
def decoder(minilm_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    return tiny_model("llama", vocab=tokenizer.vocab_size), tokenizer


@pytest.fixture(scope="module")
def bridge(decoder, tmp_path_factory):
    from transformer_lens.model_bridge import TransformerBridge

    model, tokenizer = decoder
    folder = tmp_path_factory.mktemp("bridge")
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # a copy: booting a bridge rewires the Hugging Face model's modules in place
    return TransformerBridge.boot_transformers(str(folder), hf_model=copy.deepcopy(model), tokenizer=tokenizer,
                                               device="cpu", dtype=torch.float64)


def test_a_transformerlens_cache_gives_explains_scores(decoder, bridge):
    model, tokenizer = decoder
    expected = attnflow.explain(TEXT, model, tokenizer=tokenizer, method=["raw", "rollout", "flow"])
    ids = torch.tensor([tokenizer(TEXT)["input_ids"]])
    _, cache = bridge.run_with_cache(ids)  # token ids: no BOS added, the same positions as explain's
    found = attnflow.explain_attentions(cache, expected.sources, methods=["raw", "rollout", "flow"])
    assert found.target == expected.target == len(expected.sources) - 1  # causal read off the maps
    for m in ("raw", "rollout", "flow"):
        np.testing.assert_allclose(found.row(m, found.target), expected.row(m), atol=1e-6)

    stacked = cache.stack_activation("pattern")  # (layers, batch, heads, n, n)
    with pytest.raises(AttnflowError, match="layout='layers-first'"):
        attnflow.rollout(stacked)  # read as 3 inputs of a one-layer model, it would be a wrong answer
    ordered = attnflow.as_stack(stacked, layout="layers-first")
    np.testing.assert_allclose(attnflow.rollout(ordered)[:, -1].numpy(), expected.row("rollout"), atol=1e-6)
    same = attnflow.explain_attentions(stacked, expected.sources, layout="layers-first", methods="rollout")
    np.testing.assert_allclose(same.row("rollout", same.target), expected.row("rollout"), atol=1e-6)


def test_a_bridge_as_a_model_is_refused_with_what_to_pass(decoder, bridge):
    _, tokenizer = decoder
    with pytest.raises(AttnflowError, match="not a Hugging Face model: pass the Hugging Face model it wraps"):
        attnflow.explain(TEXT, bridge, tokenizer=tokenizer)


def test_an_nnsight_trace_and_model_give_explains_scores(decoder):
    from nnsight import TransformersModel  # nnsight 0.8's name for LanguageModel (deprecated, warns)

    model, tokenizer = decoder
    expected = attnflow.explain(TEXT, model, tokenizer=tokenizer, method=["rollout", "flow"])
    traced = TransformersModel(copy.deepcopy(model), tokenizer=tokenizer, task="text-generation")
    with traced.trace(tokenizer(TEXT, return_tensors="pt")["input_ids"], output_attentions=True):
        output = traced.output.save()
    found = attnflow.explain_attentions(output.attentions, expected.sources, methods=["rollout", "flow"])
    for m in ("rollout", "flow"):
        np.testing.assert_allclose(found.row(m, found.target), expected.row(m), atol=1e-6)
    wrapped = attnflow.explain(TEXT, traced, tokenizer=tokenizer, method="rollout")
    np.testing.assert_allclose(wrapped.row("rollout"), expected.row("rollout"), atol=1e-12)


def test_explain_attentions_reads_causal_maps_and_can_be_told():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, 5) + torch.triu(torch.full((5, 5), -torch.inf), 1)
    causal = attnflow.explain_attentions(logits.softmax(-1), methods="rollout")
    assert causal.target == 4 and causal.meta["causal"]
    told = attnflow.explain_attentions(logits.softmax(-1), methods="rollout", causal=False)
    assert told.target == 0 and not told.meta["causal"]
    full = attnflow.explain_attentions(torch.rand(2, 3, 5, 5).softmax(-1), methods="rollout")
    assert full.target == 0 and not full.meta["causal"]
