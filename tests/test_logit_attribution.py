"""Logit attribution (DLA and ALTI-Logit) against oracles written here from each family's equations:
the attention part of the logit per layer (norms frozen at the input, read from hooked modules), each
token's share by naive per-head loops, and ALTI's contribution matrix by naive loops."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnflow.interventions.logit_paths import logit_paths
from attnflow.core.logit_attribution import (
    alti_contributions,
    alti_logit,
    alti_normalised,
    direct_logit_attribution,
)
from attnflow.errors import AttnflowError
from tests.factory import tiny_model


def _rms_scale(norm, x, gemma=False):
    """RMSNorm's frozen scale at x: gamma / rms(x) (Gemma spells gamma as 1 + weight)."""
    gamma = (1 + norm.weight) if gemma else norm.weight
    eps = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps")
    return gamma.double() / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _ln(norm, x):
    """LayerNorm's frozen linear map at x, as a function of a vector."""
    sigma = torch.sqrt(x.var(-1, unbiased=False) + norm.eps)
    return lambda v: norm.weight.double() * (v - v.mean(-1)) / sigma


# Per family: attention module path, value reader (out -> (n, kv, d)), W_O per head (D, H, d) and the output
# bias, and how to build the frozen linear map from layer l's attention output (minus bias) to the logit.
FAMILIES = {
    "llama": "model.layers.{}.self_attn", "mistral": "model.layers.{}.self_attn", "gemma2": "model.layers.{}.self_attn",
    "gpt2": "transformer.h.{}.attn", "bert": "bert.encoder.layer.{}.attention",
}


def _record(model, names):
    """Forward hooks that keep the inputs and outputs of the named modules."""
    seen, handles = {}, []
    for name in names:
        handles.append(model.get_submodule(name).register_forward_hook(
            lambda m, a, out, name=name: seen.__setitem__(name, (a[0].detach(), out.detach() if isinstance(out, torch.Tensor) else out))))
    return seen, handles


def oracle(kind, model, ids, target):
    """(attention part per layer (L,), per-token DLA (L, n), explained token) from the family's equations."""
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    n = len(ids)
    path = FAMILIES[kind]
    if kind == "gpt2":
        values = [path.format(l) + ".c_attn" for l in range(L)]
        outs = [path.format(l) + ".c_proj" for l in range(L)]
        norms = ["transformer.ln_f"]
    elif kind == "bert":
        values = [path.format(l) + ".self.value" for l in range(L)]
        outs = [path.format(l) + ".output.dense" for l in range(L)]
        norms = [f"bert.encoder.layer.{l}.{w}.LayerNorm" for l in range(L) for w in ("attention.output", "output")]
        norms += ["bert.pooler.activation"]
    else:
        values = [path.format(l) + ".v_proj" for l in range(L)]
        outs = [path.format(l) + ".o_proj" for l in range(L)]
        norms = ["model.norm"] + ([f"model.layers.{l}.post_attention_layernorm" for l in range(L)]
                                  if kind == "gemma2" else [])
    seen, handles = _record(model, values + outs + norms)
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    att = [a[0].double() for a in out.attentions]
    D = model.config.hidden_size
    d = D // H if kind != "gemma2" else model.config.head_dim
    if kind == "bert":
        c = int(out.logits[0].argmax())
        pos = 0
    else:
        c = int(out.logits[0, target].argmax())
        pos = target
    parts, dla = np.zeros(L), np.zeros((L, n))
    with torch.no_grad():
        _shares(kind, model, seen, norms, values, outs, att, out, pos, c, D, H, d, n, parts, dla)
    return parts, dla, c


def _shares(kind, model, seen, norms, values, outs, att, out, pos, c, D, H, d, n, parts, dla):
    for l in range(len(outs)):
        x_in, o = seen[outs[l]]
        mod = model.get_submodule(outs[l])
        if kind == "gpt2":
            w = mod.weight.double().T.reshape(D, H, d)  # Conv1D (in, out)
            v = seen[values[l]][1][0, :, 2 * D:].double().reshape(n, H, d)
        else:
            w = mod.weight.double().reshape(D, H, d)
            v = seen[values[l]][1][0].double()
            v = v.reshape(n, v.shape[-1] // d, d)
        bias = mod.bias.double() if getattr(mod, "bias", None) is not None else 0.0
        a = o[0, pos].double() - bias
        lin = _linear_map(kind, model, seen, norms, l, pos, c, out, a_full=o[0, pos].double())
        parts[l] = lin(a)
        for j in range(n):
            vec = torch.zeros(D, dtype=torch.float64)
            for h in range(H):
                vec += att[l][h, pos, j] * (w[:, h] @ v[j, h // (H // v.shape[1])])
            dla[l, j] = lin(vec)


def _linear_map(kind, model, seen, norms, l, pos, c, out, a_full):
    L = model.config.num_hidden_layers
    if kind == "bert":
        chain = []
        for k in range(l, L):
            for w in ("attention.output", "output") if k == l else ("attention.output", "output"):
                name = f"bert.encoder.layer.{k}.{w}.LayerNorm"
                chain.append(_ln(model.get_submodule(name), seen[name][0][0, pos].double()))
        pre, act = seen["bert.pooler.activation"]
        ratio = act[0].double() / pre[0].double()
        w_p = model.bert.pooler.dense.weight.double()
        w_c = model.classifier.weight.double()[c]

        def lin(v):
            for f in chain:
                v = f(v)
            return float(w_c @ (ratio * (w_p @ v)))
        return lin
    w_u = model.get_output_embeddings().weight.double()[c]
    x_final = seen[norms[0]][0][0, pos].double()
    if kind == "gpt2":
        final = _ln(model.transformer.ln_f, x_final)
        return lambda v: float(w_u @ final(v))
    gemma = kind == "gemma2"
    scale = _rms_scale(model.model.norm, x_final, gemma)
    u = float(w_u @ (scale * x_final))
    ratio = float(out.logits[0, pos, c]) / u  # Gemma 2's soft-cap, exact at this input
    if gemma:
        name = f"model.layers.{l}.post_attention_layernorm"
        post = _rms_scale(model.get_submodule(name), seen[name][0][0, pos].double(), True)
        return lambda v: ratio * float(w_u @ (scale * (post * v)))
    return lambda v: ratio * float(w_u @ (scale * v))


def _ids(n=9, seed=3):
    return torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_per_layer_contributions_sum_to_the_attention_part_of_the_logit(kind):
    model = tiny_model(kind)
    ids = _ids()
    target = len(ids) - 1 if kind != "bert" else 0
    parts, naive_dla, c = oracle(kind, model, ids, target)
    found = logit_paths(model, ids, targets=None, alti=True)
    assert found.tokens == [c]
    dla = direct_logit_attribution(found.attentions, found.values, found.grads, found.select)[0].numpy()
    np.testing.assert_allclose(found.attention_part[0], parts, atol=1e-6)  # Gemma norms run in float32
    np.testing.assert_allclose(dla.sum(-1), parts, atol=1e-4)
    np.testing.assert_allclose(dla, naive_dla, atol=1e-6)
    contributions = torch.stack([alti_normalised(s) for s in found.alti])  # made layer by layer in the pass
    np.testing.assert_allclose(contributions.sum(-1).numpy(), 1.0, atol=1e-12)
    alti = alti_logit(torch.as_tensor(dla)[None], contributions)[0].numpy()
    np.testing.assert_allclose(alti.sum(-1), parts, atol=1e-4)
    assert np.ptp(parts) > 1e-3 and np.abs(alti - dla).max() > 1e-6  # not flat; ALTI moves the shares


def _full(model, ids):
    """Every layer's full attention ``(L, H, n, n)``, values ``(L, n, kv, d)``, ``W_O`` per head ``(L, D, H,
    d)`` and input ``(L, n, D)`` of a tiny decoder (``FAMILIES``' module names), from transformers' own
    outputs and hooks on the value projections."""
    kind = model.config.model_type
    path = FAMILIES[kind]
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    d = getattr(model.config, "head_dim", None) or model.config.hidden_size // H
    seen, handles = _record(model, [path.format(l) + ".v_proj" for l in range(L)])
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    v = torch.stack([seen[path.format(l) + ".v_proj"][1][0].reshape(len(ids), -1, d) for l in range(L)])
    w = torch.stack([model.get_submodule(path.format(l) + ".o_proj").weight.reshape(-1, H, d) for l in range(L)])
    return (torch.stack([a[0] for a in out.attentions]).detach(), v.detach(), w.detach(),
            torch.stack(out.hidden_states[:L])[:, 0].detach())


def test_alti_contributions_equal_naive_loops():
    model = tiny_model("llama")
    a, v, w, x = _full(model, _ids())
    L, H, n, _ = a.shape
    expected = np.zeros((L, n, n))
    for l in range(L):
        for t in range(n):
            T = []
            for j in range(n):
                vec = sum(a[l, h, t, j] * (w[l, :, h] @ v[l, j, h // (H // v.shape[2])]) for h in range(H))
                if j == t:
                    vec = vec + x[l, t]
                T.append(vec)
            y = sum(T)
            s = np.array([max(0.0, float(y.abs().sum() - (y - T[j]).abs().sum())) for j in range(n)])
            expected[l, t] = s / s.sum()
    np.testing.assert_allclose(alti_contributions(a, v, w, x, chunk=3, dtype=torch.float64).numpy(), expected,
                               atol=1e-12)
    np.testing.assert_allclose(alti_contributions(a, v, w, x).numpy(), expected, atol=1e-5)  # float32 by default
    # the logit paths' scores, made layer by layer while the model ran, are the same
    found = logit_paths(model, _ids(), alti=True)
    np.testing.assert_allclose(torch.stack([alti_normalised(s) for s in found.alti]).numpy(), expected, atol=1e-5)


def test_several_targets_share_one_pass_and_equal_each_alone():
    model = tiny_model("gpt2")
    ids = _ids(10)
    both = logit_paths(model, ids, targets=[5, 9])
    for i, t in enumerate([5, 9]):
        alone = logit_paths(model, ids, targets=[t])
        np.testing.assert_allclose(both.attention_part[i], alone.attention_part[0], atol=1e-12)
        dla_both = direct_logit_attribution(both.attentions, both.values, both.grads, both.select)[i]
        dla_alone = direct_logit_attribution(alone.attentions, alone.values, alone.grads, alone.select)[0]
        torch.testing.assert_close(dla_both, dla_alone)


def test_contrastive_logit_is_the_difference():
    model = tiny_model("llama")
    ids = _ids()
    one = logit_paths(model, ids, tokens=[4])
    other = logit_paths(model, ids, tokens=[8])
    both = logit_paths(model, ids, tokens=[4], foils=[8])
    np.testing.assert_allclose(both.attention_part, one.attention_part - other.attention_part, atol=1e-12)
    np.testing.assert_allclose(both.logits, one.logits - other.logits, atol=1e-12)


def test_models_without_a_logit_are_refused():
    import transformers as T

    bare = T.BertModel(T.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                    intermediate_size=37)).eval()
    with pytest.raises(AttnflowError, match="needs a decoder-only causal language-model or a sequence-classification head"):
        logit_paths(bare, _ids())


def test_on_smollm2_the_layers_sum_to_the_attention_part(smollm2):
    model, tokenizer = smollm2  # LlamaForCausalLM, float32: the Llama oracle, float32 round-off
    ids = tokenizer("The keys to the cabinet")["input_ids"]
    parts, naive_dla, c = oracle("llama", model, ids, len(ids) - 1)
    found = logit_paths(model, ids)
    assert found.tokens == [c]
    dla = direct_logit_attribution(found.attentions, found.values, found.grads, found.select)[0].numpy()
    np.testing.assert_allclose(dla.sum(-1), parts, atol=2e-4)
    np.testing.assert_allclose(dla, naive_dla, atol=2e-4)


class _Made(TorchDispatchMode):
    """The shape and dtype of every tensor any operation creates while active."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.made.append((tuple(t.shape), t.dtype))
        return out


def _beyond_one_layer(made, n, layers, heads):
    """Tensors with two axes of length n (query and key) that hold more than one layer's heads, or a
    float64 square per layer: what keeping every layer's attention (or contributions) forms."""
    return [(s, dtype) for s, dtype in made if sum(d == n for d in s) >= 2
            and (int(np.prod(s)) > heads * n * n or (dtype == torch.float64 and layers in s))]


@pytest.mark.parametrize("method", ["logit_attribution", "alti_logit"])
def test_a_decoder_target_never_forms_every_layers_attention(method, monkeypatch):
    """Both methods through their registry functions, explaining two decoder targets of 61 tokens: no
    tensor with every layer's (or several layers') ``(n, n)`` weights or a float64 ``(layers, n, n)`` is
    formed; one layer's ``(heads, n, n)`` (the model's own, float64 here) and ALTI's float32 ``(layers, n,
    n)`` scores are the most. What the pass returns is several times smaller than the full tensors the
    decompositions used to read (every layer's weights and inputs in float64)."""
    from attnflow.api.methods import logit
    from attnflow.interventions import logit_paths as paths_module

    model = tiny_model("llama")  # 3 layers, 4 heads, hidden 32: no axis of length 61
    monkeypatch.setattr(paths_module, "ALTI_WORKING", 8 * 61 * 32 * 4 * 2)  # ALTI's chunks of 8 query rows
    ids = _ids(61)
    n, L, H = len(ids), model.config.num_hidden_layers, model.config.num_attention_heads
    context = SimpleNamespace(model=model, input_ids=ids, rows=[40, n - 1], layers=None, tokens=None, foils=None)
    with _Made() as new:
        scores = getattr(logit, method)(context)
    assert len(new.made) > 100 and (1, H, n, n) in [s for s, _ in new.made]  # the model's own layer, no more
    assert not _beyond_one_layer(new.made, n, L, H), _beyond_one_layer(new.made, n, L, H)
    found = logit_paths(model, ids, targets=[40, n - 1], alti=method == "alti_logit")
    np.testing.assert_allclose(scores[-1].sum(-1), found.attention_part.sum(-1), atol=1e-10)
    kept = sum(t.numel() * t.element_size() for t in (found.attentions, found.values, found.grads, found.alti)
               if t is not None)
    # 4.9x (ALTI: its float32 (layers, n, n) scores) and 11x (DLA) here, with 3 layers of 4 heads; at Llama-3.2-1B's
    # shape (16 layers of 32 heads) in bfloat16 at 2,048 tokens, 17.7 GB against 0.30 GB and 0.04 GB
    assert 4 * kept < L * H * n * n * 8 + L * n * model.config.hidden_size * 8
    with _Made() as full:  # the check bites: the full tensors and contributions form both
        alti_contributions(*_full(model, ids))
    found = _beyond_one_layer(full.made, n, L, H)
    assert ((L, H, n, n), torch.float64) in found and ((L, n, n), torch.float64) in found
