"""The two reproduction protocols, checked against a by-hand recomputation on tiny random models."""

import numpy as np
import pytest
import torch
from transformers import MegatronBertConfig, MegatronBertForSequenceClassification

from attnflow.capture import capture
from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import cls_scores, spearman, spearman_dense
from attnflow.reproduction.protocol import evaluate_example
from attnflow.reproduction.training.agreement import build_tokenizer

TEXT = "the keys to the old cabinet"


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer pre-LN (Megatron-BERT) classifier with random weights and the bundled model's tokenizer
    (``[CLS] words [EOS]``)."""
    tokenizer = build_tokenizer("gpt2-blocks")
    torch.manual_seed(0)
    config = MegatronBertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=32, type_vocab_size=1, num_labels=2,
                                hidden_act="gelu_new", initializer_range=0.5)  # large weights: scores spread out
    return MegatronBertForSequenceClassification(config).eval(), tokenizer


def _probs(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None]).logits.double().softmax(-1)[0]


def _gradient(model, ids):
    """d(p0 - p1)/d(word embedding) by autograd on a separate pass, ``(n, d)``."""
    e = model.get_input_embeddings()(ids[None]).detach().requires_grad_(True)
    p = model(inputs_embeds=e).logits.double().softmax(-1)[0]
    (g,) = torch.autograd.grad(p[0] - p[1], e)
    return g[0]


def test_paper_protocol_ranks_every_token_blanks_all_but_the_end_token_and_uses_dense_ranks(tiny):
    model, tokenizer = tiny
    label = 1
    ids = torch.tensor(tokenizer(TEXT)["input_ids"])
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    assert tokens[0] == "[CLS]" and tokens[-1] == "[EOS]"
    n = len(ids)
    base = _probs(model, ids)[label]
    blank = np.zeros(n)  # the end token is never blanked and scores 0
    for i in range(n - 1):  # CLS and every word
        changed = ids.clone()
        changed[i] = tokenizer.unk_token_id
        blank[i] = abs(float(base - _probs(model, changed)[label]))
    norm = _gradient(model, ids).norm(dim=-1).double().numpy()
    scores = cls_scores(capture(model, tokenizer, TEXT).attentions)
    got = evaluate_example(model, tokenizer, TEXT, label, protocol="paper", gradient="norm").rho
    for method, rows in scores.items():
        np.testing.assert_allclose(got[(method, "blank_out")], spearman_dense(rows, blank), atol=1e-12)
        np.testing.assert_allclose(got[(method, "gradients")], spearman_dense(rows, norm), atol=1e-12)
    assert blank[:-1].min() > 0 and norm.min() > 0  # the hand-made vectors are not degenerate
    # The paper's |sum_d g| is LayerNorm-invariant residue here: its ranks follow the summation order,
    # so it is checked by size, not by value.
    assert evaluate_example(model, tokenizer, TEXT, label, gradient="sum").gradient_residue < 1e-5


def test_words_protocol_ranks_only_the_words_with_average_ranks(tiny):
    model, tokenizer = tiny
    ids = torch.tensor(tokenizer(TEXT)["input_ids"])
    n = len(ids)
    words = list(range(1, n - 1))
    base = _probs(model, ids)[0]
    blank = np.full(n, np.nan)
    for i in words:
        changed = ids.clone()
        changed[i] = tokenizer.unk_token_id
        blank[i] = abs(float(base - _probs(model, changed)[0]))
    scores = cls_scores(capture(model, tokenizer, TEXT).attentions)
    got = evaluate_example(model, tokenizer, TEXT, 0, protocol="words").rho
    for method, rows in scores.items():
        np.testing.assert_allclose(got[(method, "blank_out")], spearman(rows[:, words], blank[words]), atol=1e-12)
    with_cls = evaluate_example(model, tokenizer, TEXT, 0, protocol="words", include_cls=True).rho
    assert not np.allclose(with_cls[("rollout", "blank_out")], got[("rollout", "blank_out")])


def test_protocol_choices_are_checked(tiny):
    model, tokenizer = tiny
    with pytest.raises(AttnflowError, match="protocol must be one of paper, words"):
        evaluate_example(model, tokenizer, TEXT, 0, protocol="cls")
    with pytest.raises(AttnflowError, match="gradient must be one of sum, norm"):
        evaluate_example(model, tokenizer, TEXT, 0, gradient="l1")
    with pytest.raises(AttnflowError, match="include_cls applies to the words protocol"):
        evaluate_example(model, tokenizer, TEXT, 0, protocol="paper", include_cls=True)
