"""Ablated flow by span (attnflow.interventions.span_ablation) against a naive loop: one plain full forward
pass per span (and layer), no batching, no cache, with a hook written here that zeroes the values of
every position of the span; and the word / sentence units (attnflow.units.segments) on real
tokenizers' offsets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.interventions.ablation import ablated_flow
from attnflow.units.segments import char_spans, segments
from attnflow.interventions.span_ablation import ablate_spans, batches, refine_top_spans
from attnflow.errors import AttnflowError
from tests.factory import tiny_decoder, tiny_model
from tests.oracles import edited_logit_drop, float32_softmax_atol

# written here from each family's modelling code: layer l's value projection, its value columns
VALUES = {
    "llama": ("model.layers.{}.self_attn.v_proj", lambda out: out),
    "mistral": ("model.layers.{}.self_attn.v_proj", lambda out: out),
    "gpt2": ("transformer.h.{}.attn.c_attn", lambda out: out[..., 64:]),  # [q | k | v], 32 each
}
TEXT = "Sara asked John to return her book. He said he would give it back to her. She thanked him"


def naive_drop(model, kind, ids, target, token, span, layer=None):
    """z_token(clean) - z_token(every position of ``span`` with zeroed values), at ``target``."""
    path, columns = VALUES[kind]
    return edited_logit_drop(model, path, columns, ids, target, token, span,
                             layers=None if layer is None else [layer])


@pytest.fixture(scope="module")
def decoder(minilm_path):
    return tiny_decoder(minilm_path)


def _sentence_spans(tokenizer, text=TEXT):
    enc = tokenizer(text, return_offsets_mapping=True)
    return enc["input_ids"], segments(text, enc["offset_mapping"], "sentence")


@pytest.mark.parametrize("layers", ["all", "each"])
def test_span_scores_equal_one_plain_pass_per_span(decoder, layers):
    model, tokenizer = decoder
    ids, spans = _sentence_spans(tokenizer)
    spans = spans + [[2, 5, 9], [len(ids) - 1]]  # a scattered span and the last token alone
    n = len(ids)
    found = ablate_spans(model, ids, spans, targets=[12, n - 1], layers=layers, batch_size=2)
    assert found.scores.shape == (2, 1 if layers == "all" else 3, len(spans))
    for i, t in enumerate(found.targets):
        for v in range(found.scores.shape[1]):
            expected = [naive_drop(model, "llama", ids, t, found.tokens[i], s, None if layers == "all" else v)
                        for s in spans]
            # the float32 softmax of transformers' eager attention bounds the agreement (oracles.py)
            atol = float32_softmax_atol(found.clean[i], n)
            np.testing.assert_allclose(found.scores[i, v], expected, atol=atol, rtol=0)
    assert np.ptp(found.scores) > 1e-3


@pytest.mark.parametrize("kind", ["mistral", "gpt2"])
def test_span_scores_on_other_families(kind):
    model = tiny_model(kind)  # mistral: a sliding window of 4 (its cache cannot be cropped)
    ids = torch.randint(0, 97, (13,), generator=torch.Generator().manual_seed(2)).tolist()
    spans = [[0, 1, 2], [3, 4], [5, 6, 7, 8], [9], [10, 11, 12]]
    found = ablate_spans(model, ids, spans, batch_size=3)
    expected = [naive_drop(model, kind, ids, 12, found.tokens[0], s) for s in spans]
    # cached and plain passes sum in different orders, and the norms and softmax run in float32
    np.testing.assert_allclose(found.scores[0, 0], expected, atol=1e-5, rtol=0)
    assert np.ptp(found.scores) > 1e-3


def test_one_token_spans_are_ablated_flow_and_a_given_cache_saves_the_prefix_runs(decoder):
    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    n = len(ids)
    exact = ablated_flow(model, ids)
    plain = ablate_spans(model, ids, range(n))
    np.testing.assert_allclose(plain.scores, exact.scores, atol=1e-10)
    from attnflow.interventions.attribution_patching import attribution_patching

    est = attribution_patching(model, ids, keep_cache=True)
    reused = ablate_spans(model, ids, [n - 3, 4], cache=est.cache, clean_logits=est.logits)
    # the estimate's cache comes from its own pass on the model's eager attention, ablated flow grows its
    # prefix on SDPA (interventions.shared_prefix): the same function, float32 sums in other orders
    np.testing.assert_allclose(reused.scores[0, 0], exact.scores[0, 0, [n - 3, 4]], atol=1e-5)
    assert reused.steps == 2 * (n - 4)  # one call of the two edited runs; no clean pass, no prefix run


def test_refining_the_top_span_scores_its_tokens_one_by_one(decoder):
    model, tokenizer = decoder
    ids, spans = _sentence_spans(tokenizer)
    found = ablate_spans(model, ids, spans)
    inside = refine_top_spans(model, ids, found, top=1, batch_size=3)
    best = spans[int(np.argmax(found.scores[0, 0]))]
    assert [s[0] for s in inside.spans] == best and len(best) > 1
    expected = [naive_drop(model, "llama", ids, found.targets[0], found.tokens[0], [p]) for p in best]
    # the oracle's eager attention takes its softmax in float32 (oracles.py); the re-runs' shared prefix is
    # attended in the model's float64
    atol = float32_softmax_atol(found.clean[0], len(ids))
    np.testing.assert_allclose(inside.scores[0, 0], expected, atol=atol, rtol=0)


def test_batches_keep_far_apart_starts_in_separate_runs():
    assert batches([0, 1, 2, 3], last=99, batch_size=2) == [[0, 1], [2, 3]]
    assert batches([90, 3, 50, 4], last=99, batch_size=16) == [[1, 3], [2, 0]]  # 50 and 90: 2 x 50 positions
    assert batches([0, 300, 150, 1], last=999, batch_size=16) == [[0, 3], [2], [1]]
    assert batches([0, 1, 2, 5], last=7, batch_size=16) == [[0, 1, 2, 3]]  # a short input: one call


def test_words_and_sentences_from_offsets(minilm_path, smollm2_dir):
    from transformers import AutoTokenizer

    text = "Sara asked John. Don't  worry!\nreturn x + 1"
    for path in (minilm_path, smollm2_dir):
        tokenizer = AutoTokenizer.from_pretrained(path)
        enc = tokenizer(text, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]

        def pieces(group):  # the text a unit covers (special tokens cover none)
            found = [offsets[i] for i in group if offsets[i][1] > offsets[i][0]]
            return text[found[0][0]:found[-1][1]].strip() if found else ""

        words = [pieces(g) for g in segments(text, offsets, "word")]
        sentences = [pieces(g) for g in segments(text, offsets, "sentence")]
        assert [w for w in words if w] == ["Sara", "asked", "John", ".", "Don't", "worry", "!", "return", "x", "+", "1"]
        assert [s for s in sentences if s] == ["Sara asked John.", "Don't  worry!", "return x + 1"]
        assert "asked John" in [pieces(g) for g in char_spans(text, offsets, [(5, 15)])]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab .!?\n'", max_size=40), st.sampled_from(["word", "sentence"]))
def test_units_partition_the_tokens_into_runs(text, by):
    offsets = [(0, 0)] + [(i, i + 1) for i in range(len(text))] + [(0, 0)]  # one token per character, specials
    groups = segments(text, offsets, by)
    assert [p for g in groups for p in g] == list(range(len(offsets)))
    assert groups[0] == [0] and groups[-1] == [len(offsets) - 1]


def test_bad_spans_are_refused_in_one_sentence(decoder):
    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    with pytest.raises(AttnflowError, match="non-empty set of positions"):
        ablate_spans(model, ids, [[0, 1], [len(ids)]])
    with pytest.raises(AttnflowError, match="by must be one of"):
        segments(TEXT, [(0, 1)], "paragraph")
    with pytest.raises(AttnflowError, match="non-overlapping character ranges"):
        char_spans(TEXT, [(0, 1)], [(0, 10), (5, 12)])
