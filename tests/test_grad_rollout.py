"""Gradient-weighted rollout: the pure formula against a hand loop, and the captured gradients
against a naive per-layer torch.autograd.grad on a real model (digits ViT) and a text classifier."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.capture.gradients import capture_gradients
from attnflow.capture.vision import capture_images, load_vision_model
from attnflow.core.gradient import grad_rollout
from attnflow.data.digits import digits_split
from attnflow.errors import AttnflowError

torch.set_num_threads(1)


def naive_grad_rollout(attentions, gradients):
    """Chefer et al. 2021b eqs. 5-6 written out with plain loops over layers and heads (numpy)."""
    layers, heads, n, _ = attentions.shape
    r = np.eye(n)
    out = []
    for layer in range(layers):
        cam = np.zeros((n, n))
        for h in range(heads):
            cam += np.maximum(gradients[layer, h] * attentions[layer, h], 0.0) / heads
        r = r + cam @ r
        out.append(r.copy())
    return np.stack(out)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 6), st.integers(0, 10_000))
def test_formula_matches_hand_loop(layers, heads, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.random((layers, heads, n, n))
    a /= a.sum(-1, keepdims=True)
    g = rng.normal(size=a.shape)
    np.testing.assert_allclose(grad_rollout(a, g), naive_grad_rollout(a, g), rtol=1e-10, atol=1e-12)


def test_hand_worked_two_tokens():
    # One layer, one head: positive part of G*A = [[0, .5], [0, 0]], so R = I + that.
    a = np.array([[[[0.5, 0.5], [0.2, 0.8]]]])
    g = np.array([[[[-1.0, 1.0], [0.0, -2.0]]]])
    np.testing.assert_allclose(grad_rollout(a, g)[0], [[1.0, 0.5], [0.0, 1.0]])


def test_gradient_shape_mismatch_is_an_error():
    a = np.full((2, 1, 3, 3), 1 / 3)
    with pytest.raises(AttnflowError, match="gradients must have"):
        grad_rollout(a, np.zeros((2, 1, 3, 2)))
    with pytest.raises(AttnflowError, match="one gradient per layer"):
        grad_rollout(a, [np.zeros((1, 3, 3))])


def per_layer_autograd(model, inputs, target):
    """The independent oracle: a fresh forward pass, then each layer's gradient asked for separately
    with torch.autograd.grad on that layer's own attention tensor."""
    out = model(**inputs, output_attentions=True)
    logit = out.logits.gather(1, target[:, None]).sum()
    grads = [torch.autograd.grad(logit, out.attentions[l], retain_graph=True)[0] for l in range(len(out.attentions))]
    return (torch.stack([a.detach() for a in out.attentions], 1).double(),
            torch.stack(grads, 1).double())


@pytest.fixture(scope="module")
def vit():
    return load_vision_model()


def test_vit_gradients_are_paired_with_their_layers(vit):
    images = list(digits_split()["test_images"][:5])
    maps = capture_images(vit, images, gradients=True)
    attn, grads = per_layer_autograd(vit, {"pixel_values": maps.pixel_values}, maps.target)
    expected = naive_grad_rollout_batch(attn, grads)
    got = np.asarray(grad_rollout(maps.attentions, maps.gradients))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # The check has teeth: pairing gradients with layers in reverse order gives another answer.
    reversed_pairing = np.asarray(grad_rollout(maps.attentions, maps.gradients.flip(1)))
    assert not np.allclose(reversed_pairing[:, -1], expected[:, -1], rtol=1e-2, atol=1e-3)
    # The top layer's gradient reaches only the CLS row (the classifier reads only CLS there).
    assert maps.gradients[:, -1, :, 1:].abs().max() == 0 and maps.gradients[:, 0, :, 1:].abs().max() > 0


def naive_grad_rollout_batch(attn, grads):
    return np.stack([naive_grad_rollout(a.numpy(), g.numpy()) for a, g in zip(attn, grads)])


def test_vit_explicit_target_class_changes_the_gradient(vit):
    images = list(digits_split()["test_images"][:2])
    predicted = capture_images(vit, images, gradients=True)
    other = (predicted.target + 1) % 10
    chosen = capture_images(vit, images, gradients=True, target=other.tolist())
    assert chosen.target.tolist() == other.tolist()
    attn, grads = per_layer_autograd(vit, {"pixel_values": chosen.pixel_values}, other)
    np.testing.assert_allclose(chosen.gradients.double().numpy(), grads.numpy(), rtol=1e-4, atol=1e-6)
    assert not torch.allclose(chosen.gradients, predicted.gradients)


def test_text_classifier_grad_rollout():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=32, num_labels=3, attn_implementation="eager",
                        initializer_range=0.5)  # the default 0.02 gives gradients too small to compare
    model = BertForSequenceClassification(config).eval()
    inputs = {"input_ids": torch.tensor([[2, 7, 9, 11, 3, 0], [2, 5, 6, 8, 12, 3]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])}
    got = capture_gradients(model, inputs, target=1)
    assert got.gradients.shape == got.attentions.shape == (2, 3, 2, 6, 6)
    attn, grads = per_layer_autograd(model, inputs, torch.tensor([1, 1]))
    np.testing.assert_allclose(got.gradients.double().numpy(), grads.numpy(), rtol=1e-4, atol=1e-6)
    mask = inputs["attention_mask"].bool()
    r = np.asarray(grad_rollout(got.attentions, got.gradients, mask=mask))
    expected = naive_grad_rollout_batch(attn, grads)
    assert np.abs(expected[1, -1] - np.eye(6)).max() > 0.05  # the gradients really move R away from I
    reversed_pairing = np.asarray(grad_rollout(got.attentions, got.gradients.flip(1)))
    assert not np.allclose(reversed_pairing[1, -1], expected[1, -1], rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(r[1], expected[1], rtol=1e-4, atol=1e-5)  # the unpadded example
    real = mask[0].numpy()
    np.testing.assert_allclose(r[0][:, real][:, :, real], expected[0][:, real][:, :, real], rtol=1e-4, atol=1e-5)
    assert np.all(r[0][:, ~real] == 0) and np.all(r[0][:, :, ~real] == 0)
    with pytest.raises(AttnflowError, match="target class"):
        capture_gradients(model, inputs, target=7)


def test_explain_offers_grad_rollout_for_text_classifiers(smollm2):
    """explain(method="grad-rollout") on the bundled BERT agreement classifier equals grad_rollout on a
    separately tokenized, separately differentiated pass; the report maps hold the same rows; a
    causal LM (no class logits) is refused with a sentence. (On that model grad-rollout's top word is
    the subject; on the pre-LN default model it is a determiner, see docs/reproduction.md.)"""
    import attnflow
    from attnflow.hf import load_model
    from attnflow.models import bundled_model_path

    model, tokenizer = load_model(str(bundled_model_path("agreement_bert")))
    text = "the keys to the cabinet"
    expl = attnflow.explain(text, model, tokenizer=tokenizer, method="grad-rollout")
    enc = tokenizer([text], return_tensors="pt")
    g = capture_gradients(model, dict(enc), target=None)
    expected = np.asarray(grad_rollout(g.attentions, g.gradients))[0][:, 0, :]
    np.testing.assert_allclose(expl.row(), expected, rtol=1e-5, atol=1e-9)
    words = expl.row()[-1, 1:]
    assert expl.sources[1 + int(np.argmax(words))] == "keys" and words.min() > 0
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("rollout", "grad-rollout"))
    np.testing.assert_allclose(maps.row("grad-rollout", 0), expl.row(), rtol=1e-5, atol=1e-9)
    lm, lm_tokenizer = smollm2
    with pytest.raises(AttnflowError, match="grad-rollout runs on classifiers and image classifiers only, and this model is a decoder"):
        attnflow.explain("the keys", lm, tokenizer=lm_tokenizer, method="grad-rollout")
