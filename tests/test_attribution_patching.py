"""The one-pass estimate of ablated flow (attnflow.interventions.attribution_patching) against plain edited
forward passes: in the linear regime, zeroing ``eps * v`` instead of ``v`` drops the logit by
``eps * estimate + O(eps^2)``. The slope at 0 is read as ``2 D(eps) - D(2 eps)`` with ``D(eps) = drop / eps``
(Richardson: the ``O(eps)`` remainder cancels, ``O(eps^2)`` is left) at ``eps = 1e-3``; smaller steps drown
in float32 round-off, since most families compute their norms and attention softmax in float32 even in a
float64 model (about 1e-3 of the scale here, never above 2e-3 absolute). The tolerance, 1 % of the scores'
scale plus 5e-3, is several times that and far below the error of a gradient that misses a path (e.g.
through later layers' values: 0.1 to 0.8 on these models).

The oracle shares nothing with attnflow's capture: per family it names the value projection of layer
``l`` and the columns of its output that are values (written here from each family's modelling code),
and scales token ``j``'s values by ``1 - eps`` with a hook of its own, one full forward pass (no cache)
per source, layer and ``eps``, in float64.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import transformers as T

from attnflow.interventions.ablation import ablated_flow
from attnflow.hf.architectures import ARCHITECTURES, PROJECTIONS
from attnflow.interventions.attribution_patching import attribution_patching
from attnflow.errors import AttnflowError
from tests.oracles import edited_logit_drop, float32_softmax_atol

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
GQA = dict(SMALL, num_key_value_heads=2)
VOCAB = 97


def _all(out, heads, kv, d):  # the module outputs the values only
    return out


def _concat(out, heads, kv, d):  # [q (heads*d) | k (kv*d) | v (kv*d)]
    return out[..., heads * d + kv * d:]


def _interleaved(out, heads, kv, d):  # per head (q, k, v)
    return out.view(*out.shape[:-1], heads, 3, d)[..., 2, :]


ATTN = "model.layers.{}.self_attn"
# model_type -> (config, model class, layer l's value projection, its value columns)
CASES = {
    "llama": (T.LlamaConfig(**GQA), T.LlamaForCausalLM, ATTN + ".v_proj", _all),
    "gemma": (T.GemmaConfig(head_dim=8, **GQA), T.GemmaForCausalLM, ATTN + ".v_proj", _all),
    "qwen3": (T.Qwen3Config(head_dim=8, **GQA), T.Qwen3ForCausalLM, ATTN + ".v_proj", _all),
    "olmo": (T.OlmoConfig(**GQA), T.OlmoForCausalLM, ATTN + ".v_proj", _all),
    "granite": (T.GraniteConfig(**GQA), T.GraniteForCausalLM, ATTN + ".v_proj", _all),
    "smollm3": (T.SmolLM3Config(pad_token_id=0, **GQA), T.SmolLM3ForCausalLM, ATTN + ".v_proj", _all),
    "stablelm": (T.StableLmConfig(**GQA), T.StableLmForCausalLM, ATTN + ".v_proj", _all),
    "mistral": (T.MistralConfig(sliding_window=4, **GQA), T.MistralForCausalLM, ATTN + ".v_proj", _all),
    # eager experts: the default grouped matrix product refuses float64
    "mixtral": (T.MixtralConfig(num_local_experts=2, experts_implementation="eager",
                                **{**GQA, "intermediate_size": 48}), T.MixtralForCausalLM,
                ATTN + ".v_proj", _all),
    "starcoder2": (T.Starcoder2Config(**GQA), T.Starcoder2ForCausalLM, ATTN + ".v_proj", _all),
    "gemma2": (T.Gemma2Config(head_dim=8, sliding_window=4, **GQA), T.Gemma2ForCausalLM, ATTN + ".v_proj", _all),
    "gemma3_text": (T.Gemma3TextConfig(head_dim=8, sliding_window=4, **GQA), T.Gemma3ForCausalLM,
                    ATTN + ".v_proj", _all),
    "qwen2": (T.Qwen2Config(**GQA), T.Qwen2ForCausalLM, ATTN + ".v_proj", _all),
    "phi": (T.PhiConfig(**SMALL), T.PhiForCausalLM, ATTN + ".v_proj", _all),
    "opt": (T.OPTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                        word_embed_proj_dim=32), T.OPTForCausalLM, "model.decoder.layers.{}.self_attn.v_proj", _all),
    "gpt2": (T.GPT2Config(n_embd=32, n_layer=2, n_head=4), T.GPT2LMHeadModel, "transformer.h.{}.attn.c_attn",
             _concat),
    "phi3": (T.Phi3Config(pad_token_id=0, **GQA), T.Phi3ForCausalLM, ATTN + ".qkv_proj", _concat),
    "gpt_neox": (T.GPTNeoXConfig(**SMALL), T.GPTNeoXForCausalLM, "gpt_neox.layers.{}.attention.query_key_value",
                 _interleaved),
}
DECODERS = sorted(t for t in PROJECTIONS if ARCHITECTURES[t].family == "decoder")


def _build(kind):
    config, cls, _, _ = CASES[kind]
    config.vocab_size = VOCAB
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).double().eval()
    with torch.no_grad():  # the default init (std 0.02) gives near-uniform attention: outputs barely depend on x
        for name, p in model.named_parameters():
            if "norm" not in name.lower() and "ln" not in name.split(".")[-2:][0]:
                p.normal_(0, 0.3)
    return model


def _ids(n=8, seed=1):
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def slope(model, kind, ids, target, token, j, layer=None, eps=1e-3):
    """The derivative of the drop in the scale of the edit at 0, to O(eps^2) (Richardson)."""
    return (2 * scaled_drop(model, kind, ids, target, token, j, eps, layer) / eps
            - scaled_drop(model, kind, ids, target, token, j, 2 * eps, layer) / (2 * eps))


def scaled_drop(model, kind, ids, target, token, j, eps, layer=None):
    """z_token(clean) - z_token(token j's values scaled by 1 - eps at ``layer``, or every layer), at
    ``target``: two plain forward passes of ids[:target + 1], no cache."""
    _, _, path, columns = CASES[kind]
    config = model.config
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    d = config.hidden_size // heads
    return edited_logit_drop(model, path, lambda out: columns(out, heads, kv, d), ids, target, token, [j],
                             scale=1 - eps, layers=None if layer is None else [layer])


def test_every_decoder_row_with_value_projections_has_a_case():
    assert set(DECODERS) <= set(CASES)


@pytest.mark.parametrize("kind", DECODERS)
def test_the_estimate_is_the_first_order_of_value_zeroing(kind):
    model = _build(kind)
    ids = _ids()
    n = len(ids)
    each = attribution_patching(model, ids, targets=[4, n - 1], layers="each")
    every = attribution_patching(model, ids, targets=[4, n - 1])
    _is_the_first_order(model, kind, ids, each, every)


def _is_the_first_order(model, kind, ids, each, every):
    """Both estimates (per layer, every layer at once) against the oracle's slopes at each target."""
    n = len(ids)
    assert each.scores.shape == (2, 2, n) and every.scores.shape == (2, 1, n)
    np.testing.assert_allclose(every.scores[:, 0], each.scores.sum(1), atol=1e-12)
    for i, t in enumerate(each.targets):
        c = each.tokens[i]
        scale = np.abs(each.scores[i]).max()
        assert scale > 1e-3  # the estimate is not flat: the oracle bites
        for layer in range(2):
            expected = [slope(model, kind, ids, t, c, j, layer) if j <= t else 0.0 for j in range(n)]
            np.testing.assert_allclose(each.scores[i, layer], expected, atol=1e-2 * scale + 5e-3, rtol=0)
        expected = [slope(model, kind, ids, t, c, j) if j <= t else 0.0 for j in range(n)]
        np.testing.assert_allclose(every.scores[i, 0], expected, atol=1e-2 * scale + 5e-3, rtol=0)


def test_the_error_of_the_first_order_shrinks_with_eps_and_is_large_at_full_zeroing():
    """What "to first order" means: the gap between drop / eps and the estimate falls about tenfold
    when eps does (second-order remainder), and at eps = 1 (the real ablation) it is what ablated
    flow measures exactly."""
    model = _build("llama")
    ids = _ids(10, seed=3)
    est = attribution_patching(model, ids).scores[0, 0]
    c = int(attribution_patching(model, ids).tokens[0])
    gaps = [max(abs(scaled_drop(model, "llama", ids, 9, c, j, eps) / eps - est[j]) for j in range(10))
            for eps in (1e-2, 1e-3)]
    assert 5 < gaps[0] / gaps[1] < 20
    run = ablated_flow(model, ids)
    exact = run.scores[0, 0]
    full = [scaled_drop(model, "llama", ids, 9, c, j, 1.0) for j in range(10)]
    # the plain passes' eager attention takes its softmax in float32 (oracles.py), the exact re-runs attend
    # to their shared prefix in the model's float64
    np.testing.assert_allclose(exact, full, atol=float32_softmax_atol(run.clean[0], len(ids)))


def test_readouts_and_tokens_follow_ablated_flow(minilm_path):
    from tests.factory import tiny_decoder

    model, tokenizer = tiny_decoder(minilm_path)
    ids = tokenizer("the keys to the old cabinet are")["input_ids"]
    for readout, foils in (("logprob", None), ("contrastive", [7])):
        est = attribution_patching(model, ids, readout=readout, tokens=[5], foils=foils)
        assert est.tokens == [5] and est.readout == readout
        exact = ablated_flow(model, ids, readout=readout, tokens=[5], foils=foils)
        np.testing.assert_allclose(est.clean, exact.clean, atol=1e-10)
        assert np.ptp(est.scores) > 1e-3


def test_the_kept_cache_and_logits_are_the_clean_ones(minilm_path, monkeypatch):
    import transformers.utils.generic as generic

    from tests.factory import tiny_decoder

    logged = []  # transformers >= 5.24 logs a deprecation once per process when an output's old cache name is read
    monkeypatch.setattr(generic.logger, "warning_once", lambda message, *a, **k: logged.append(str(message)))
    model, tokenizer = tiny_decoder(minilm_path)
    ids = tokenizer("the keys to the old cabinet are")["input_ids"]
    est = attribution_patching(model, ids, keep_cache=True)
    assert not [m for m in logged if "deprecated" in m]
    exact = ablated_flow(model, ids, cache=est.cache, clean_logits=est.logits)
    plain = ablated_flow(model, ids)
    np.testing.assert_allclose(exact.scores, plain.scores, atol=1e-10)
    assert est.cache.get_seq_length() == len(ids)


def test_bad_input_is_refused_in_one_sentence():
    model = _build("llama")
    with pytest.raises(AttnflowError, match="layers must be 'all'"):
        attribution_patching(model, _ids(), layers="top")
    with pytest.raises(AttnflowError, match="targets must be distinct positions"):
        attribution_patching(model, _ids(), targets=[8])


@pytest.mark.parametrize("kind", ["llama", "gpt2", "gemma2"])
def test_checkpointed_layers_give_the_same_estimate(kind):
    model = _build(kind)
    ids = _ids(10)
    calls = []
    model.get_submodule(CASES[kind][2].format(0)).register_forward_hook(lambda *a: calls.append(1))
    plain = attribution_patching(model, ids, targets=[5, 9], layers="each", checkpoint=False)
    assert len(calls) == 1
    recomputed = attribution_patching(model, ids, targets=[5, 9], layers="each", checkpoint=True, keep_cache=True,
                                      sdpa=False)
    assert len(calls) > 2  # layer 0 ran again in the backward passes
    np.testing.assert_allclose(recomputed.scores, plain.scores, atol=1e-12)
    assert np.ptp(plain.scores) > 1e-3
    # the cache a checkpointed pass keeps comes from its attention kernels (the model's own would be written twice
    # by the recomputed layers): the same keys and values, layer by layer, as the plain pass's cache
    kept = attribution_patching(model, ids, targets=[5, 9], checkpoint=False, keep_cache=True).cache
    assert len(recomputed.cache.layers) == len(kept.layers) == model.config.num_hidden_layers
    assert max(layer.keys.shape[-2] for layer in recomputed.cache.layers) == 10
    for mine, theirs in zip(recomputed.cache.layers, kept.layers):
        assert mine.keys.shape == theirs.keys.shape  # a sliding layer keeps its window (Gemma 2)
        torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-12, rtol=0)
        torch.testing.assert_close(mine.values, theirs.values, atol=1e-12, rtol=0)
    # on SDPA (the default when checkpointing, where the family allows it): the same up to eager attention's
    # float32 softmax (most families' eager attention runs it in float32 even in a float64 model; GPT-2's not)
    fused = attribution_patching(model, ids, targets=[5, 9], layers="each", checkpoint=True)
    assert fused.attention == ("eager" if kind == "gemma2" else "sdpa")
    np.testing.assert_allclose(fused.scores, plain.scores, atol=1e-5 * np.abs(plain.scores).max())


# ---------------------------------------------------------------- long inputs: attention on SDPA
# From CHECKPOINT_FROM positions the pass runs attention on torch's scaled_dot_product_attention
# (attnflow.interventions.efficient_attention), whose backward pass keeps no (heads, n, n) weights. The oracle
# above still runs the model's own eager attention, so agreeing with it also checks that SDPA computes
# the same function (grouped-query heads, a sliding window shorter than the input, fused projections).


@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2", "qwen2", "phi3", "gpt_neox", "gemma2"])
def test_the_long_input_pass_on_sdpa_is_the_first_order_of_value_zeroing(kind, monkeypatch):
    from attnflow.interventions import attribution_patching as module

    monkeypatch.setattr(module, "CHECKPOINT_FROM", 4)  # tiny inputs take the long-input path
    model = _build(kind)
    ids = _ids(10, seed=2)
    if kind == "mistral":
        assert model.config.sliding_window < len(ids)  # the window is honoured, not just never reached
    each = attribution_patching(model, ids, targets=[4, 9], layers="each")
    every = attribution_patching(model, ids, targets=[4, 9])
    # Gemma 2 soft-caps its attention logits (SDPA cannot): it stays on eager attention
    expected = "eager" if kind == "gemma2" else "sdpa"
    assert each.attention == every.attention == expected
    assert model.config._attn_implementation == "eager"  # restored after the pass
    _is_the_first_order(model, kind, ids, each, every)


def test_a_soft_capped_config_stays_on_eager_attention():
    from attnflow.interventions.efficient_attention import why_not

    model = _build("gemma3_text")
    assert why_not(model) == ""
    model.config.attn_logit_softcapping = 20.0
    assert "soft-capped" in why_not(model)
    est = attribution_patching(model, _ids(), checkpoint=True)
    assert est.attention == "eager"
    assert "does not support SDPA" in why_not(_build("gemma2"))


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_the_sdpa_pass_never_forms_attention_weights_and_eager_does(kind):
    """The profiler's operators: on SDPA, the fused kernel forward and backward and no softmax anywhere
    (the readout is a logit: the only softmax a pass runs is attention's); the eager pass runs one per
    layer, so the check bites."""
    from torch.profiler import ProfilerActivity, profile

    model = _build(kind)
    ids = _ids(10)

    def operators(checkpoint):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            est = attribution_patching(model, ids, targets=[9], checkpoint=checkpoint)
        return est, {e.name for e in prof.events()}

    est, ops = operators(True)
    assert est.attention == "sdpa"
    assert {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward"} <= ops
    assert not any("softmax" in op for op in ops), sorted(op for op in ops if "softmax" in op)
    est, ops = operators(False)
    assert est.attention == "eager" and "aten::_softmax" in ops
    assert "aten::scaled_dot_product_attention" not in ops


def test_the_attention_implementation_is_restored_when_the_pass_raises():
    from attnflow.hf.points import installed_on

    model = _build("llama")
    seen = []

    def fail(module, args, output):
        seen.append(model.config._attn_implementation)
        raise RuntimeError("stop")

    handle = model.get_submodule("model.layers.1.mlp").register_forward_hook(fail)
    with pytest.raises(RuntimeError, match="stop"):
        attribution_patching(model, _ids(), checkpoint=True)
    handle.remove()
    assert seen == ["attnflow_eager"]  # it was on the hook points' dispatching attention (SDPA) when it failed
    assert model.config._attn_implementation == "eager" and installed_on(model) == {}
    assert attribution_patching(model, _ids(), checkpoint=True).attention == "sdpa"  # and still works


@pytest.mark.parametrize("attention", [None, "sdpa"])
def test_a_layer_recomputed_on_another_thread_still_sees_the_pass(attention):
    """autograd may run a backward pass, where checkpointed layers are recomputed, on a thread of its own
    (one per CUDA device): the recomputation must still add the pass's zero leaf, refresh the values the
    gradient hooks read and run on the pass's attention, all of which the calling thread's scope holds.
    Here the backward pass runs on another thread by hand; the scores must equal those of a backward pass
    on the calling thread."""
    import threading

    from attnflow.hf.points import receiving
    from attnflow.interventions.ablation import value_projections
    from attnflow.interventions.attribution_patching import _Pass, _receivers

    model = _build("llama")
    ids = torch.tensor(_ids(10))[None]

    def grads(elsewhere):
        found = value_projections(model)
        state = _Pass(found, model.config.num_attention_heads, ids.shape[1], 1, checkpoint=True)
        got = {}
        with torch.enable_grad(), receiving(model, {}, attention=attention), receiving(model, _receivers(model, state)):
            logit = model(input_ids=ids, use_cache=False).logits[0, -1, 3]

            def backward():
                try:
                    torch.autograd.grad(logit, [state.first])
                    got["grads"] = torch.as_tensor(state.scores)  # what each layer's gradient hook read
                except Exception as exc:  # noqa: BLE001 - reported on the calling thread
                    got["error"] = exc
            if elsewhere:
                thread = threading.Thread(target=backward)
                thread.start()
                thread.join()
            else:
                backward()
        assert "error" not in got, got.get("error")
        return got["grads"]

    here, there = grads(False), grads(True)
    # the same pass recomputed; a thread of its own may split SDPA's reductions differently (1 ulp seen)
    torch.testing.assert_close(here, there, rtol=0, atol=1e-12)
    assert float(here.abs().max()) > 1e-3 and bool((here[0] != 0).any(-1).all())  # every layer's hook read


# ---------------------------------------------------------------- long inputs: freed heap pages handed back
# A checkpointed pass keeps every layer's input between one layer's freed activations; on glibc the freed
# pages stayed resident, up to three times the live memory (attnflow.interventions.heap). Before each layer
# runs, forward and recomputed, the pass hands them back.


@pytest.mark.parametrize("targets", [[9], [5, 9]])
def test_a_checkpointed_pass_hands_freed_heap_pages_back_before_each_layer_runs(targets, monkeypatch):
    from attnflow.interventions import attribution_patching as module

    model = _build("llama")
    layers = model.config.num_hidden_layers
    calls = []
    monkeypatch.setattr(module, "release", lambda: calls.append(1) or True)
    small = attribution_patching(model, _ids(10), targets=targets, checkpoint=True, sdpa=False)
    assert calls == []  # a layer input under RELEASE_FROM bytes: its few pages are not worth faulting in again
    monkeypatch.setattr(module, "RELEASE_FROM", 0)
    plain = attribution_patching(model, _ids(10), targets=targets, checkpoint=False)
    assert calls == []  # nothing kept between layers: nothing to hand back
    kept = attribution_patching(model, _ids(10), targets=targets, checkpoint=True, sdpa=False)
    assert len(calls) == layers * (1 + len(targets))  # the forward pass, then each target's recomputation
    np.testing.assert_allclose(kept.scores, plain.scores, atol=1e-12)
    np.testing.assert_allclose(small.scores, kept.scores, atol=0)


def _resident_anonymous() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


def test_release_hands_back_the_pages_of_freed_heap_blocks_between_live_ones():
    """The fragmentation the pass meets, by hand: 64 KiB tensors (under glibc's smallest mmap threshold,
    so on the heap), every other one freed. The holes between live blocks are not the heap's top, which
    glibc trims by itself; ``release`` hands their pages back."""
    from attnflow.interventions.heap import _trim, release

    if _trim() is None or not os.path.exists("/proc/self/status"):
        pytest.skip("no glibc malloc_trim or no /proc here")
    blocks = [torch.ones(16 * 1024) for _ in range(2048)]  # 128 MiB, every page touched
    del blocks[::2]  # 64 MiB freed in 1,024 holes
    before = _resident_anonymous()
    assert release()
    assert before - _resident_anonymous() > 48 * 2**20
    assert all(float(b[-1]) == 1.0 for b in blocks)  # the live blocks untouched


@pytest.mark.parametrize("kind,long", [(kind, False) for kind in CASES]
                         + [(kind, True) for kind in ("llama", "mistral", "gpt2", "gemma2", "qwen2")])
def test_the_target_attention_is_every_heads_row_of_eager_attention(kind, long, monkeypatch):
    """What the budgeted chooser reads beside the estimate: each head's attention row of each target, kept by a
    kernel receiver from the queries and keys (grouped-query heads, a sliding window shorter than the input,
    soft-capped logits, GPT-2's scaling), equal to the weights eager attention returns; on the long path
    (checkpointed, on SDPA where it can be) the recomputed layers do not overwrite them."""
    from attnflow.interventions import attribution_patching as module

    if long:
        monkeypatch.setattr(module, "CHECKPOINT_FROM", 4)
    model = _build(kind)
    ids = _ids(10, seed=3)
    est = attribution_patching(model, ids, targets=[4, 9], target_attention=True)
    assert est.target_attention.shape == (2, model.config.num_hidden_layers, 4, 10)
    assert est.attention == ("sdpa" if long and kind != "gemma2" else "eager")
    with torch.no_grad():
        weights = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    for layer, w in enumerate(weights):
        np.testing.assert_allclose(est.target_attention[:, layer], w[0][:, [4, 9]].transpose(0, 1).numpy(),
                                   atol=1e-6)
    assert np.ptp(est.target_attention) > 0.1  # the rows differ between heads and targets: the check bites
    # the scores are those of a pass without it
    np.testing.assert_allclose(est.scores, attribution_patching(model, ids, targets=[4, 9]).scores, atol=1e-12)
    assert attribution_patching(model, ids).target_attention is None
    from attnflow.hf.points import installed_on

    assert model.config._attn_implementation == "eager" and installed_on(model) == {}  # the model as it was


def test_the_target_attention_of_a_bfloat16_model_is_float32_and_agrees_with_float64():
    model = _build("llama")
    ids = _ids(10, seed=3)
    exact = attribution_patching(model, ids, targets=[9], target_attention=True).target_attention
    half = attribution_patching(model.to(torch.bfloat16), ids, targets=[9], target_attention=True).target_attention
    assert half.dtype == np.float32 and np.ptp(exact) > 0.1
    np.testing.assert_allclose(half, exact, atol=0.05)  # bfloat16 queries and keys: about 3 significant digits
