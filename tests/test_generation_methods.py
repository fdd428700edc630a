"""The decoder methods through a generation equal one teacher-forced computation per generated token:
for token i, the method on prompt + generated[:i] alone, explaining the token that was generated."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import attnflow
from attnflow.interventions.ablation import ablated_flow, occlusion
from attnflow.interventions.logit_paths import logit_paths
from attnflow.core.logit_attribution import (
    alti_logit,
    alti_normalised,
    direct_logit_attribution,
)
from tests.factory import tiny_model

PROMPT = "the keys to the old cabinet"
METHODS = ["ablated-flow", "ablated-flow-layers", "occlusion", "occlusion-mean", "alti-logit", "logit-attribution"]


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def teacher_forced(model, ids, token, method):
    """(layers or 1, len(ids)) for the last position of ids alone, explaining ``token``."""
    if method in ("ablated-flow", "ablated-flow-layers"):
        return ablated_flow(model, ids, layers="all" if method == "ablated-flow" else "each", tokens=[token],
                            batch_size=1).scores[0]
    if method.startswith("occlusion"):
        return occlusion(model, ids, replacement="mean" if method == "occlusion-mean" else None, tokens=[token],
                         batch_size=1).scores[0]
    p = logit_paths(model, ids, tokens=[token], alti=method == "alti-logit")
    dla = direct_logit_attribution(p.attentions, p.values, p.grads, p.select)
    if method == "alti-logit":
        dla = alti_logit(dla, [alti_normalised(s) for s in p.alti])
    return dla[0].cumsum(0).numpy()


@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_every_method_equals_one_teacher_forced_pass_per_token(kind, tokenizer, monkeypatch):
    from attnflow.api.methods import ablation

    monkeypatch.setattr(ablation, "BATCH", 3)  # several chunks: prefixes cropped from the generation's cache
    model = tiny_model(kind, vocab=tokenizer.vocab_size, dtype=torch.float64)
    seen = []
    result = attnflow.generate(model, tokenizer, PROMPT, 4, method=METHODS, progress=lambda d, t: seen.append((d, t)))
    assert result.methods == ["rollout", *METHODS] and result.method == "ablated-flow"
    assert seen and seen[-1][0] == seen[-1][1]
    m, k, L = result.input_length, result.n_targets, result.n_layers
    ids = result.meta["prompt_ids"] + result.meta["generated_ids"]
    for method in METHODS:
        dense = result.scores[method]
        assert result.M.shape == (k, m, L)
        for i in range(k):
            prefix = ids[: m + i]
            expected = teacher_forced(model, prefix, ids[m + i], method)
            if expected.shape[0] == 1:  # no layers axis: the top layer only
                got = dense[i, L - 1, : m + i]
                assert np.isnan(dense[i, : L - 1]).all()
            else:
                got = dense[i, :, : m + i]
            np.testing.assert_allclose(got, expected[-1] if expected.shape[0] == 1 else expected, atol=1e-5)
            assert np.all(dense[i, :, m + i:][~np.isnan(dense[i, :, m + i:])] == 0)  # positions it cannot see
    assert np.abs(result.scores["ablated-flow"][:, L - 1, :m]).max() > 1e-3


def test_the_generation_cache_is_cropped_not_recomputed(tokenizer, monkeypatch):
    """Ablated flow in a generation runs no clean pass of its own: the clean logits are the generation's
    and each chunk's prefix is cropped from the generation's key/value cache."""
    from attnflow.api.methods import ablation as methods
    from attnflow.interventions import ablation

    monkeypatch.setattr(methods, "BATCH", 2)
    ran = []
    original = ablation.Prefix.grow

    def grow(self, to):
        ran.append(self.given is None and to > self.built)
        return original(self, to)

    monkeypatch.setattr(ablation.Prefix, "grow", grow)
    model = tiny_model("llama", vocab=tokenizer.vocab_size)
    attnflow.generate(model, tokenizer, PROMPT, 3, method="ablated-flow")
    assert ran and not any(ran)


def test_rollout_alone_is_unchanged(tokenizer):
    model = tiny_model("llama", vocab=tokenizer.vocab_size)
    result = attnflow.generate(model, tokenizer, PROMPT, 3)
    assert result.methods == ["rollout"] and result.method == "rollout" and "added" not in result.meta
    # None (the command line without --method): the decoder defaults, and the result says what was added
    found = attnflow.generate(model, tokenizer, PROMPT, 3, method=None)
    assert found.methods == ["rollout", "ablated-flow"] and found.meta["added"]["methods"] == ["ablated-flow"]


def test_unknown_generation_method_is_refused(tokenizer):
    model = tiny_model("llama", vocab=tokenizer.vocab_size)
    with pytest.raises(attnflow.AttnflowError, match="generate explains each token with rollout or ablated-flow"):
        attnflow.generate(model, tokenizer, PROMPT, 2, method="flow")
