"""Blank-out and input gradients against naive re-implementations on a tiny random BERT, and the
LayerNorm invariance that makes the paper's gradient score rounding residue."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from attnflow.errors import AttnflowError
from attnflow.evaluation.importance import blank_out, embedding_gradients, input_gradients

UNK = 1


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2,
                        initializer_range=0.3)  # large weights: scores far from 0, so the oracles bite
    return BertForSequenceClassification(config).double().eval()


IDS = torch.tensor([2, 7, 11, 5, 19, 23, 8])


def probs(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None]).logits.softmax(-1)[0]


def test_blank_out_matches_one_forward_pass_per_token(tiny):
    base = probs(tiny, IDS)
    for target in (0, 1):
        naive = []
        for i in range(len(IDS)):
            ids = IDS.clone()
            ids[i] = UNK
            naive.append(abs(float(base[target] - probs(tiny, ids)[target])))
        np.testing.assert_allclose(blank_out(tiny, IDS, unk_id=UNK, target=target), naive, atol=1e-12)
    predicted = int(base.argmax())
    np.testing.assert_array_equal(blank_out(tiny, IDS[None], unk_id=UNK),
                                  blank_out(tiny, IDS, unk_id=UNK, target=predicted))
    assert np.ptp(blank_out(tiny, IDS, unk_id=UNK, target=0)) > 0  # scores are not all equal


def test_blank_out_positions_leave_the_rest_nan(tiny):
    got = blank_out(tiny, IDS, unk_id=UNK, target=0, positions=[1, -1])
    assert np.isnan(got[[0, 2, 3, 4, 5]]).all() and np.isfinite(got[[1, 6]]).all()


def _f(model, e):
    """p_0 - p_1 with the word embeddings given."""
    p = model(inputs_embeds=e).logits.softmax(-1)[0]
    return float(p[0] - p[1])


def _f_layer_input(model, shift):
    """p_0 - p_1 with ``shift`` added to the first layer's input (the embeddings module's output)."""
    handle = model.bert.embeddings.register_forward_hook(lambda _m, _i, out: out + shift)
    try:
        p = model(input_ids=IDS[None]).logits.softmax(-1)[0]
    finally:
        handle.remove()
    return float(p[0] - p[1])


@pytest.mark.parametrize(("at", "times_input"), [("word", True), ("layer_input", False), ("layer_input", True)])
def test_input_gradients_match_finite_differences(tiny, at, times_input):
    with torch.no_grad():
        e = tiny.get_input_embeddings()(IDS[None]) if at == "word" else tiny.bert.embeddings(IDS[None])
    h = 1e-6
    naive = []
    with torch.no_grad():
        for i in range(len(IDS)):
            # d/dt f(e_i + t v) at t=0 is sum_d v_d df/de_{i,d}: v = ones (gradient) or e_i (grad x input)
            v = torch.zeros_like(e)
            v[0, i] = e[0, i] if times_input else 1.0
            if at == "word":
                diff = _f(tiny, e + h * v) - _f(tiny, e - h * v)
            else:
                diff = _f_layer_input(tiny, h * v) - _f_layer_input(tiny, -h * v)
            naive.append(abs(diff / (2 * h)))
    got = input_gradients(tiny, IDS, times_input=times_input, at=at)
    assert max(naive) > 1e-5  # the oracle measures something, so agreement is not 0 == 0
    np.testing.assert_allclose(got, naive, rtol=1e-5, atol=1e-9)


def test_gradient_norm_matches_finite_differences_in_random_directions(tiny):
    g, e = embedding_gradients(tiny, IDS, at="layer_input")
    rng = np.random.default_rng(0)
    h = 1e-6
    with torch.no_grad():
        for i in range(len(IDS)):
            v = torch.zeros(1, len(IDS), e.shape[-1], dtype=torch.float64)
            v[0, i] = torch.from_numpy(rng.standard_normal(e.shape[-1]))
            slope = (_f_layer_input(tiny, h * v) - _f_layer_input(tiny, -h * v)) / (2 * h)
            assert float(g[i] @ v[0, i].numpy()) == pytest.approx(slope, rel=1e-5, abs=1e-9)
    np.testing.assert_allclose(input_gradients(tiny, IDS, at="layer_input", reduce="norm"), np.linalg.norm(g, axis=-1))
    with pytest.raises(AttnflowError, match="reduce must be"):
        input_gradients(tiny, IDS, reduce="max")


def test_sum_over_d_is_rounding_residue_on_the_bundled_pre_ln_model():
    """Every block of the bundled agreement model reads LN(x) and the read-out reads LN_final(x), so moving
    the embedding sum e_i along the all-ones vector changes nothing: sum_d dF/de_{i,d} = 0. On the
    post-LN BERT model the first layer's input is not invariant, and the same sum is order 1."""
    from attnflow.hf import load_model
    from attnflow.models import bundled_model_path

    texts = ["the key to the cabinets", "the authors that the critic praises", "she says that some old dogs"]
    model, tokenizer = load_model(str(bundled_model_path("agreement")))
    for text in texts:
        ids = tokenizer(text, return_tensors="pt").input_ids[0]
        g, _ = embedding_gradients(model, ids, at="word")
        g_layer, _ = embedding_gradients(model, ids, at="layer_input")
        np.testing.assert_allclose(g, g_layer, rtol=1e-5, atol=1e-12)  # the first block reads the embedding sum
        norm = np.linalg.norm(g.astype(np.float64), axis=-1)
        assert norm.min() > 0
        assert (np.abs(g.astype(np.float64).sum(-1)) / norm).max() < 1e-4
    bert, bert_tokenizer = load_model(str(bundled_model_path("agreement_bert")))
    ids = bert_tokenizer(texts[0], return_tensors="pt").input_ids[0]
    g, _ = embedding_gradients(bert, ids, at="layer_input")
    assert np.median(np.abs(g.astype(np.float64).sum(-1)) / np.linalg.norm(g, axis=-1)) > 1e-2


def test_plain_word_gradient_sums_to_zero_under_bert_embedding_layernorm(tiny):
    # LayerNorm ignores shifts along the all-ones vector, so sum_d of the word-embedding gradient is 0.
    word = input_gradients(tiny, IDS, at="word")
    layer_input = input_gradients(tiny, IDS, at="layer_input")
    assert layer_input.max() > 1e-5 and word.max() < 1e-9 * layer_input.max()


def test_bad_input_raises_actionable_errors(tiny):
    with pytest.raises(AttnflowError, match="unk_id"):
        blank_out(tiny, IDS, unk_id=None)
    with pytest.raises(AttnflowError, match="one example"):
        blank_out(tiny, IDS.repeat(2, 1), unk_id=UNK)
    with pytest.raises(AttnflowError, match="target"):
        blank_out(tiny, IDS, unk_id=UNK, target=5)
    with pytest.raises(AttnflowError, match="layer_input"):
        input_gradients(tiny, IDS, at="pixels")
    tiny.train()
    try:
        with pytest.raises(AttnflowError, match="eval"):
            input_gradients(tiny, IDS)
    finally:
        tiny.eval()
