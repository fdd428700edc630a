"""The named hook points (attnflow.hf.points): receivers in a scope, and the model as it was after it."""

from __future__ import annotations

import threading

import pytest
import torch
from factory import tiny_model

from attnflow.errors import AttnflowError
from attnflow.hf.points import hook_points, installed_on, receiving


def _snapshot(model):
    """Everything a scope could leave behind on a model: hooks, instance attributes, forwards, the
    attention implementation and transformers' registries."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    modules = dict(model.named_modules())
    return {
        "hooks": {n: (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
                  for n, m in modules.items()},
        "dicts": {n: sorted(m.__dict__) for n, m in modules.items()},
        "forward": {n: m.__dict__.get("forward") for n, m in modules.items()},
        "attention": model.config._attn_implementation,
        "registries": (sorted(AttentionInterface._global_mapping), sorted(AttentionMaskInterface._global_mapping)),
        "state": {k: v.clone() for k, v in model.state_dict().items()},
    }


def _same(before, after):
    state_b, state_a = before.pop("state"), after.pop("state")
    assert before == after
    assert state_b.keys() == state_a.keys() and all(torch.equal(state_b[k], state_a[k]) for k in state_b)


def _ids(n=7):
    return torch.arange(3, 3 + n)[None, :]


def test_names_resolve_from_the_table_and_unknown_ones_are_refused():
    model = tiny_model("llama")
    points = hook_points(model)
    assert points is hook_points(model) and points.layers == 3
    assert points["layers.1.attn.value"].module is model.model.layers[1].self_attn.v_proj
    assert points["layers.2.attn.out"].module is model.model.layers[2].self_attn.o_proj
    assert points["layers.0.block"].module is model.model.layers[0]
    assert points["embed"].module is model.model.embed_tokens and points["unembed"].module is model.lm_head
    assert points.names("attn") == ["layers.0.attn", "layers.1.attn", "layers.2.attn"]
    for bad in ("layers.3.attn", "layers.x.attn", "nothing", "layers.0.attn.bogus"):
        with pytest.raises(AttnflowError):
            points[bad]
    gpt2 = tiny_model("gpt2")
    assert hook_points(gpt2)["layers.0.attn.value"].module is gpt2.transformer.h[0].attn.c_attn


def test_receivers_run_in_the_scope_only_and_nothing_is_left_behind():
    model = tiny_model("llama")
    before = _snapshot(model)
    seen = []
    names = hook_points(model).names("attn.value")
    with receiving(model, {name: (lambda m, a, out, name=name: seen.append(name)) for name in names}):
        assert set(installed_on(model)) == set(names)
        model(input_ids=_ids())
    assert seen == names
    model(input_ids=_ids())
    assert seen == names  # no receiver after the scope
    assert installed_on(model) == {}
    _same(before, _snapshot(model))


def test_an_edit_replaces_the_output_and_nested_scopes_chain():
    model = tiny_model("llama")
    clean = model(input_ids=_ids()).logits

    def zero(module, args, output):
        return torch.zeros_like(output)

    with receiving(model, {"embed": zero}):
        edited = model(input_ids=_ids()).logits
        calls = []
        with receiving(model, {"embed": lambda m, a, out: calls.append(float(out.abs().sum()))}):
            model(input_ids=_ids())
        assert calls == [0.0]  # the inner receiver sees the outer one's edit
        assert installed_on(model) == {"embed": 1}
    assert not torch.allclose(clean, edited)
    assert torch.equal(model(input_ids=_ids()).logits, clean)


def test_a_scope_that_raises_takes_everything_off():
    model = tiny_model("llama")
    before = _snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with receiving(model, {"layers.0.block": lambda forward, a, k: forward(*a, **k),
                               "layers.1.attn.kernel": lambda *a, **k: None}, attention="sdpa"):
            assert "forward" in model.model.layers[0].__dict__
            raise RuntimeError("boom")
    _same(before, _snapshot(model))


def test_around_wraps_the_block_and_restores_its_forward():
    model = tiny_model("llama")
    clean = model(input_ids=_ids()).logits
    calls = []

    def around(forward, args, kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    with receiving(model, {f"layers.{i}.block": around for i in range(3)}):
        out = model(input_ids=_ids()).logits
    assert len(calls) == 3 and torch.equal(out, clean)
    assert all("forward" not in layer.__dict__ for layer in model.model.layers)


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt2"])
def test_attention_is_switched_for_the_scope_and_back(kind):
    model = tiny_model(kind)
    model.set_attn_implementation("sdpa") if kind != "gemma2" else None
    own = model.config._attn_implementation
    before = _snapshot(model)
    clean = model(input_ids=_ids()).logits
    weights = []
    with receiving(model, {f"layers.{i}.attn": lambda m, a, out: weights.append(out[1])
                           for i in range(3)}, attention="eager") as scope:
        assert scope.attention == "eager"
        eager = model(input_ids=_ids()).logits
    assert all(isinstance(w, torch.Tensor) and w.shape[-2:] == (7, 7) for w in weights)
    # Llama's eager attention takes its softmax in float32 even for a float64 model: float32's digits
    torch.testing.assert_close(eager, clean, rtol=0, atol=1e-5)
    assert model.config._attn_implementation == own
    _same(before, _snapshot(model))


def test_a_kernel_receiver_sees_queries_and_keys_and_none_falls_through():
    model = tiny_model("llama")
    clean = model(input_ids=_ids()).logits
    kept = {}

    def keep(layer):
        def receiver(module, query, key, value, mask, **kwargs):
            kept[layer] = (query.shape, key.shape, kwargs.get("scaling"))
        return receiver

    with receiving(model, {f"layers.{i}.attn.kernel": keep(i) for i in range(3)}) as scope:
        assert scope.attention == "eager"
        out = model(input_ids=_ids()).logits
    assert kept[0][0] == (1, 4, 7, 8) and kept[0][1] == (1, 2, 7, 8)  # grouped-query: 4 query, 2 key heads
    torch.testing.assert_close(out, clean, rtol=0, atol=0)


def test_another_thread_gets_none_of_this_threads_receivers():
    model = tiny_model("llama")
    inside, outside = [], []
    started, done = threading.Event(), threading.Event()

    def other():
        started.wait(5)
        with torch.no_grad():
            model(input_ids=_ids())  # runs while this thread's scope is open
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with receiving(model, {"embed": lambda m, a, out: inside.append(threading.get_ident())}, attention="sdpa"):
        started.set()
        assert done.wait(30)
        model(input_ids=_ids())
    thread.join()
    assert inside == [threading.get_ident()] and not outside
    assert installed_on(model) == {}


def test_a_receiver_that_is_not_a_function_is_refused_before_anything_is_installed():
    model = tiny_model("llama")
    before = _snapshot(model)
    with pytest.raises(AttnflowError, match="must be a function"):
        with receiving(model, {"embed": 42}):
            pass
    _same(before, _snapshot(model))


def test_group_points_and_the_gate_and_layer_input_resolve_from_the_model():
    model = tiny_model("llama")
    points = hook_points(model)
    layer = model.model.layers[1]
    norms = points["norms"].modules
    assert {id(layer.input_layernorm), id(layer.post_attention_layernorm), id(model.model.norm)} <= set(map(id, norms))
    assert len(norms) == 2 * 3 + 1
    assert [id(m) for m in points["activations"].modules] == [id(m.mlp.act_fn) for m in model.model.layers]
    assert points["layers.1.mlp.gate"].modules == (layer.mlp.act_fn, layer.mlp.up_proj)
    assert points["fixes"].modules == ()  # Llama's row has no fixes
    with pytest.raises(AttnflowError, match="no layer_input"):
        points["layer_input"]  # a decoder has no BERT-style embeddings block
    bert = tiny_model("bert")
    assert hook_points(bert)["layer_input"].module is bert.bert.embeddings


def test_a_group_receiver_runs_on_every_module_of_the_group_and_all_come_off():
    model = tiny_model("gpt2")
    before = _snapshot(model)
    seen = []
    with receiving(model, {"norms": lambda m, a, out: seen.append(m)}):
        model(input_ids=_ids())
    assert len(seen) == 2 * 3 + 1 and all(isinstance(m, torch.nn.LayerNorm) for m in seen)
    _same(before, _snapshot(model))


def test_cross_attention_of_an_sdpa_model_runs_eager_in_the_scope():
    """The dispatching function serves every attention call of a switched model, not only the layer
    points': an encoder-decoder's cross-attention returns its weights too."""
    import transformers as T

    torch.manual_seed(0)
    config = T.BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
    model = T.BartForConditionalGeneration(config).eval()
    model.set_attn_implementation("sdpa")
    before = _snapshot(model)
    ids = _ids(5)
    with receiving(model, {}, attention="eager"):
        out = model(input_ids=ids, decoder_input_ids=ids, output_attentions=True)
    assert all(isinstance(a, torch.Tensor) and a.shape[-2:] == (5, 5) for a in out.cross_attentions)
    assert model.config._attn_implementation == "sdpa"
    before["hooks"] = _snapshot(model)["hooks"]  # transformers' own recorder hooks, from output_attentions
    before["dicts"] = _snapshot(model)["dicts"]
    _same(before, _snapshot(model))


def test_the_models_own_implementation_is_known_while_a_scope_has_it_switched():
    from attnflow.hf.points import implementation, own_implementation

    model = tiny_model("llama")
    with receiving(model, {}, attention="sdpa") as scope:
        assert scope.attention == "sdpa" and implementation(model) != "eager"  # on the dispatching function
        assert own_implementation(model) == "eager"
    assert implementation(model) == own_implementation(model) == "eager"


def test_a_scope_that_only_adds_receivers_keeps_the_enclosing_scopes_attention():
    """A kernel receiver scope opened inside an SDPA scope (the shared-prefix re-runs inside the budgeted
    method's long-input SDPA scope) runs the calls its receivers decline on SDPA, not on eager attention
    (which forms every layer's (heads, n, n) scores)."""
    from attnflow.hf.points import hook_points, receiving

    model = tiny_model("llama")
    names = hook_points(model).names("attn.kernel")
    seen = []
    real = model.model.layers[0].self_attn.forward

    def spy(module, query, key, value, mask, **kwargs):
        return None  # decline: the scope's implementation runs the call

    import transformers.integrations.sdpa_attention as sdpa_module
    original = sdpa_module.sdpa_attention_forward

    def counting(*args, **kwargs):
        seen.append("sdpa")
        return original(*args, **kwargs)

    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"], saved = counting, ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"]
    try:
        with receiving(model, {}, attention="sdpa"), receiving(model, dict.fromkeys(names, spy)) as inner:
            assert inner.attention == "sdpa"
            model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    finally:
        ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"] = saved
    assert len(seen) == len(names)
    assert model.model.layers[0].self_attn.forward == real and model.config._attn_implementation == "eager"
    with receiving(model, dict.fromkeys(names, spy)) as alone:
        assert alone.attention == "eager"  # no enclosing scope: the model's own
