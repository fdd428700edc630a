"""Streaming capture (capture/streaming.py) against transformers' own ``output_attentions`` tuple.

Tiny random-weight models from stock configs (encoders, decoders, grouped-query attention, a model
without ``_can_record_outputs`` that takes the fallback path) and the real MiniLM and SmolLM2: the
per-head maps must equal the tuple and the fused maps its head mean / max / min, within 1e-6, and no
layer's attention weights may still exist once the next layer runs.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
import transformers

import attnflow
from attnflow.capture.streaming import attention_modules
from attnflow.capture.text import encode
from attnflow.errors import AttnflowError

TEXTS = ["the keys to the cabinet are on the table", "a short one"]
SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64)


def _tiny(name: str, vocab: int):
    configs = {
        "bert": (transformers.BertConfig, transformers.BertModel, SMALL),
        "distilbert": (transformers.DistilBertConfig, transformers.DistilBertForSequenceClassification,
                       dict(dim=32, n_layers=3, n_heads=4, hidden_dim=64)),
        "llama-gqa": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(SMALL, num_key_value_heads=2)),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(SMALL, num_key_value_heads=1)),
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel, dict(n_embd=32, n_layer=3, n_head=4)),
        # Bloom's classes declare no _can_record_outputs: the fallback through output_attentions
        "bloom": (transformers.BloomConfig, transformers.BloomForCausalLM, dict(hidden_size=32, n_layer=3, n_head=4)),
    }
    config_cls, model_cls, kwargs = configs[name]
    torch.manual_seed(0)
    config = config_cls(vocab_size=vocab, **kwargs)
    model = model_cls(config).eval()
    model.set_attn_implementation("eager")
    return model


@pytest.fixture(scope="module")
def tokenizer(minilm):
    return minilm[1]


def _reference(model, tokenizer, texts):
    enc = encode(tokenizer, texts)
    enc.pop("special_tokens_mask")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    return torch.stack([a.float() for a in out.attentions], dim=1)  # (batch, layers, heads, n, n)


def _check(model, tokenizer, texts):
    ref = _reference(model, tokenizer, texts)
    batch = attnflow.capture(model, tokenizer, texts)
    np.testing.assert_allclose(batch.attentions.numpy(), ref.numpy(), atol=1e-6, rtol=0)
    one = attnflow.capture(model, tokenizer, texts[0])
    n0 = len(one.tokens)
    np.testing.assert_allclose(one.attentions.numpy(), _reference(model, tokenizer, texts[:1])[0].numpy(), atol=1e-6)
    for fusion, reduce in (("mean", ref.mean(dim=2)), ("max", ref.amax(dim=2)), ("min", ref.amin(dim=2))):
        fused = attnflow.capture(model, tokenizer, texts, head_fusion=fusion)
        assert fused.head_fusion == fusion and fused.attentions.shape[2] == 1
        np.testing.assert_allclose(fused.attentions[:, :, 0].numpy(), reduce.numpy(), atol=1e-6, rtol=0)
    # the methods read fused maps as they read the per-head ones
    fused = attnflow.capture(model, tokenizer, texts[0], head_fusion="mean")
    np.testing.assert_allclose(np.asarray(attnflow.rollout(fused)), np.asarray(attnflow.rollout(one)), atol=1e-6)
    assert fused.attentions.shape[-1] == n0


@pytest.mark.parametrize("name", ["bert", "distilbert", "llama-gqa", "qwen2", "gpt2", "bloom"])
def test_streaming_equals_output_attentions_on_tiny_models(tokenizer, name):
    model = _tiny(name, len(tokenizer))
    assert bool(attention_modules(model)) == (name != "bloom")
    _check(model, tokenizer, TEXTS)


def test_streaming_equals_output_attentions_on_minilm(minilm):
    model, tokenizer = minilm
    assert len(attention_modules(model)) == 6
    _check(model, tokenizer, TEXTS)


def test_streaming_equals_output_attentions_on_smollm2(smollm2):
    model, tokenizer = smollm2
    assert len(attention_modules(model)) == 30
    text = "Sara asked John to return her book. He said he would give it back to"
    ref = _reference(model, tokenizer, [text])[0]
    maps = attnflow.capture(model, tokenizer, text, head_fusion="mean")
    assert maps.attentions.shape == (30, 1, ref.shape[-1], ref.shape[-1]) and maps.causal
    np.testing.assert_allclose(maps.attentions[:, 0].numpy(), ref.mean(dim=1).numpy(), atol=1e-6, rtol=0)
    heads = attnflow.capture(model, tokenizer, text)
    assert heads.attentions.shape[1] == 9  # grouped-query heads come expanded to the 9 query heads
    np.testing.assert_allclose(heads.attentions.numpy(), ref.numpy(), atol=1e-6, rtol=0)
    assert maps.logits is None  # a language model's n x vocabulary logits are not kept


@pytest.mark.parametrize("name", ["llama-gqa", "bloom"])
def test_no_layer_attention_survives_the_next_layer(tokenizer, name):
    """When layer i's hook runs, layer i-1's weights tensor is already gone: the peak holds one
    layer's attention beside the buffer, and nothing of transformers' tuple survives the pass."""
    model = _tiny(name, len(tokenizer))
    seen: list[weakref.ref] = []
    alive_when_next_ran: list[bool] = []

    def spy(module, args, output):
        gc.collect()
        if seen:
            alive_when_next_ran.append(seen[-1]() is not None)
        seen.append(weakref.ref(output[1]))

    modules = [m.module for m in attention_modules(model)] or [layer.self_attention for layer in model.transformer.h]
    handles = [m.register_forward_hook(spy) for m in modules]
    try:
        maps = attnflow.capture(model, tokenizer, TEXTS[0], head_fusion="mean")
    finally:
        for h in handles:
            h.remove()
    gc.collect()
    assert maps.attentions.shape[0] == 3 and len(seen) == 3
    assert all(ref() is None for ref in seen), "a layer's attention weights outlived the capture"
    if name != "bloom":  # the fallback holds transformers' tuple until the pass ends (and no longer)
        assert alive_when_next_ran == [False, False]


def test_asking_fused_maps_for_another_fusion_is_refused(minilm):
    model, tokenizer = minilm
    maps = attnflow.capture(model, tokenizer, "hello there", head_fusion="mean")
    with pytest.raises(AttnflowError, match="fused by 'mean'"):
        attnflow.rollout(maps, head_fusion="max")
    with pytest.raises(AttnflowError, match="per-head results"):
        attnflow.flow(maps, head_fusion=None, positions=[0])
    with pytest.raises(AttnflowError, match="head_fusion must be"):
        attnflow.capture(model, tokenizer, "hello there", head_fusion="median")


def test_encoder_decoder_models_are_refused_with_a_sentence(tokenizer):
    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64)
    model = transformers.BartModel(config).eval()
    owners = {m.owner for m in attention_modules(model)}
    assert owners == {"encoder", "decoder"}
    with pytest.raises(AttnflowError, match="is an encoder-decoder model: explain it with a target text"):
        attnflow.capture(model, tokenizer, "hello there")


def test_threads_sharing_a_model_get_their_own_maps(minilm):
    """The app runs jobs in parallel threads on one loaded model: each capture must see only the
    layers of its own forward pass."""
    from concurrent.futures import ThreadPoolExecutor

    model, tokenizer = minilm
    texts = ["the keys to the cabinet are on the table", "a short one", "every river ran toward the hills"] * 4
    alone = [attnflow.capture(model, tokenizer, t, head_fusion="mean").attentions for t in texts]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(lambda t: attnflow.capture(model, tokenizer, t, head_fusion="mean").attentions, texts))
    for a, b in zip(alone, together):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_heads_are_fused_before_anything_leaves_the_models_device():
    """On a GPU the (batch, heads, q, k) maps never cross to the host: only the fused (batch, q, k) map
    is moved. A tensor subclass records the shape of everything moved to a device."""
    import torch

    from attnflow.capture.streaming import Reducer

    class Tracked(torch.Tensor):
        moved: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.to and "device" in kwargs:
                cls.moved.append(tuple(args[0].shape))
            return super().__torch_function__(func, types, args, kwargs)

    weights = torch.rand(2, 4, 5, 5).softmax(-1)
    reducer = Reducer(n_layers=1, head_fusion="mean")
    reducer.layer(0, weights.as_subclass(Tracked))
    assert Tracked.moved == [(2, 5, 5)]
    torch.testing.assert_close(reducer.buffer[:, 0, 0], weights.mean(1))
