"""Ablated flow and occlusion (attnflow.interventions.ablation) against naive loops written from the definitions:
one plain full forward pass per source (and layer), no batching, no key/value cache, hooks written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnflow.interventions.ablation import ablated_flow, mean_embedding, occlusion
from attnflow.errors import AttnflowError
from tests.factory import tiny_model

# Per family, written here independently of the architecture table: the value projection of layer l and
# how to zero token j's values in its output (batch 1).
VALUES = {
    "llama": ("model.layers.{}.self_attn.v_proj", lambda out, j: out[:, j].zero_()),
    "mistral": ("model.layers.{}.self_attn.v_proj", lambda out, j: out[:, j].zero_()),
    "gemma2": ("model.layers.{}.self_attn.v_proj", lambda out, j: out[:, j].zero_()),
    "gpt2": ("transformer.h.{}.attn.c_attn", lambda out, j: out[:, j, 64:].zero_()),  # [q | k | v], 32 each
}


def naive_readout(model, ids, target, token, *, zero=None, layer=None, kind=None, delete=None, embed=None,
                  readout="logit", foil=None):
    """One full forward pass of ids[:target + 1] with one edit, no cache; the readout at the target."""
    seq = list(ids[: target + 1])
    at = target
    handles = []
    if zero is not None:
        name, edit = VALUES[kind]
        for l in range(model.config.num_hidden_layers):
            if layer is None or l == layer:
                handles.append(model.get_submodule(name.format(l)).register_forward_hook(
                    lambda mod, a, out: _zeroed(out, edit, zero)))
    if delete is not None:
        del seq[delete]
        at -= 1
    if embed is not None:
        position, vector = embed
        handles.append(model.get_input_embeddings().register_forward_hook(
            lambda mod, a, out: torch.cat([out[:, :position], vector.to(out.dtype)[None, None], out[:, position + 1:]], 1)))
    try:
        with torch.no_grad():
            z = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, at].double()
    finally:
        for h in handles:
            h.remove()
    if readout == "logprob":
        z = torch.log_softmax(z, -1)
    value = float(z[token])
    return value - float(z[foil]) if readout == "contrastive" else value


def _zeroed(out, edit, j):
    out = out.clone()
    edit(out, j)
    return out


def _ids(n=11, seed=1):
    return torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module", params=sorted(VALUES))
def family(request):
    return request.param, tiny_model(request.param)


@pytest.mark.parametrize("layers", ["all", "each"])
def test_ablated_flow_equals_one_plain_pass_per_source(family, layers):
    kind, model = family
    ids = _ids()
    found = ablated_flow(model, ids, targets=[4, 10], layers=layers, batch_size=3)
    assert found.scores.shape == (2, 1 if layers == "all" else 3, 11)
    for i, t in enumerate(found.targets):
        c = found.tokens[i]
        clean = naive_readout(model, ids, t, c)
        assert c == int(np.argmax([naive_readout(model, ids, t, k) for k in range(97)]))
        for v in range(found.scores.shape[1]):
            expected = [clean - naive_readout(model, ids, t, c, zero=j, kind=kind, layer=None if layers == "all" else v)
                        if j <= t else 0.0 for j in range(11)]
            np.testing.assert_allclose(found.scores[i, v], expected, atol=1e-5, rtol=0)
    assert np.ptp(found.scores) > 1e-3  # the scores are not flat: the oracle bites


def test_mistral_past_its_window_sees_nothing_outside_the_receptive_field():
    model = tiny_model("mistral")
    found = ablated_flow(model, _ids(14), layers="each", batch_size=5)
    # window 4, 3 layers: position 13 reaches back to 13 - 3 * 3 = 4 at most; at layer 2 only to 10
    assert np.all(found.scores[0, :, :4] == 0) and np.all(found.scores[0, 2, :10] == 0)
    assert np.abs(found.scores[0, 0, 4:]).max() > 0


@pytest.mark.parametrize("readout", ["logprob", "contrastive"])
def test_other_readouts_equal_the_naive_loop(readout):
    model = tiny_model("llama")
    ids = _ids()
    found = ablated_flow(model, ids, readout=readout, tokens=[5], foils=[7] if readout == "contrastive" else None,
                         batch_size=4)
    foil = 7 if readout == "contrastive" else None
    clean = naive_readout(model, ids, 10, 5, readout=readout, foil=foil)
    expected = [clean - naive_readout(model, ids, 10, 5, zero=j, kind="llama", readout=readout, foil=foil)
                for j in range(11)]
    np.testing.assert_allclose(found.scores[0, 0], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt2"])
def test_occlusion_equals_the_naive_loop(kind):
    model = tiny_model(kind)
    ids = _ids(9)
    deleted = occlusion(model, ids, targets=[5, 8], batch_size=2)
    vector = mean_embedding(model)
    replaced = occlusion(model, ids, targets=[5, 8], replacement="mean", batch_size=4)
    for i, t in enumerate(deleted.targets):
        c = deleted.tokens[i]
        clean = naive_readout(model, ids, t, c)
        by_deletion = [clean - naive_readout(model, ids, t, c, delete=j) if j < t else 0.0 for j in range(9)]
        by_mean = [clean - naive_readout(model, ids, t, c, embed=(j, vector)) if j <= t else 0.0 for j in range(9)]
        np.testing.assert_allclose(deleted.scores[i, 0], by_deletion, atol=1e-5, rtol=0)
        np.testing.assert_allclose(replaced.scores[i, 0], by_mean, atol=1e-5, rtol=0)


def test_mean_embedding_is_the_mean_of_the_embedding_output():
    model = tiny_model("gemma2")  # Gemma scales its embeddings inside the embedding module
    module = model.get_input_embeddings()
    expected = module(torch.arange(97)[None])[0].mean(0)
    torch.testing.assert_close(mean_embedding(model, chunk=10), expected)


def test_bad_input_is_refused_in_one_sentence():
    model = tiny_model("llama")
    with pytest.raises(AttnflowError, match="readout must be one of"):
        ablated_flow(model, _ids(), readout="probability")
    with pytest.raises(AttnflowError, match="targets must be distinct positions"):
        ablated_flow(model, _ids(), targets=[11])
    with pytest.raises(AttnflowError, match="needs one foil token per target"):
        ablated_flow(model, _ids(), readout="contrastive")
    with pytest.raises(AttnflowError, match="layers must be 'all'"):
        ablated_flow(model, _ids(), layers="top")
    with pytest.raises(AttnflowError, match="32 numbers"):
        occlusion(model, _ids(), replacement=torch.zeros(5))
    with pytest.raises(AttnflowError, match="not a decoder-only language model"):
        ablated_flow(tiny_model("bert"), _ids())


def test_ablated_flow_on_smollm2_equals_the_naive_loop(smollm2):
    import copy

    model, tokenizer = smollm2
    model = copy.deepcopy(model).double()  # float64: batched and one-at-a-time passes agree to the last digits
    ids = tokenizer("The keys to the cabinet")["input_ids"]
    found = ablated_flow(model, ids, batch_size=4)
    n, c = len(ids), found.tokens[0]
    VALUES["llama_real"] = ("model.layers.{}.self_attn.v_proj", lambda out, j: out[:, j].zero_())
    clean = naive_readout(model, ids, n - 1, c)
    expected = [clean - naive_readout(model, ids, n - 1, c, zero=j, kind="llama_real") for j in range(n)]
    np.testing.assert_allclose(found.scores[0, 0], expected, atol=1e-5, rtol=0)


def test_the_receptive_field_equals_a_naive_boolean_propagation():
    """reach() against the definition: position p's output at layer l reads key j iff j <= p and
    p - j < w_l (or any j <= p without a window); the residual carries p to itself. Zeroing j's values
    at layer v can change the target iff a chain of such reads leads from j (read at layer v) to it."""
    import itertools

    from attnflow.interventions.ablation import reach

    n = 12
    for windows in itertools.product([None, 2, 3, 5], repeat=3):
        windows = list(windows)
        for t in range(n):
            up = np.zeros(n, bool)  # which layer-v outputs matter for the target, from the top down
            up[t] = True
            expected = {}
            for layer in range(len(windows) - 1, -1, -1):
                w = windows[layer]
                reads = np.array([[j <= p and (w is None or p - j < w) for j in range(n)] for p in range(n)])
                reached = (up[:, None] & reads).any(0)  # keys that layer's mattering outputs read
                expected[layer] = int(np.argmax(reached))
                up = up | reached
            expected[-1] = min(expected.values())
            assert reach(windows, t) == expected, (windows, t)
