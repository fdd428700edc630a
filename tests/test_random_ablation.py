"""Random ablation (a chance baseline): ablated flow's scores, permuted over the visible sources by a
seeded permutation. Oracle: the ablation engine run one source at a time, permuted here."""

from __future__ import annotations

import numpy as np
import pytest
from factory import tiny_decoder

import attnflow
from attnflow.capture.ablation import ablated_flow


@pytest.fixture(scope="module")
def tiny_llama(minilm_path):
    return tiny_decoder(minilm_path)


def test_random_ablation_is_ablated_flow_permuted_by_its_seed(tiny_llama):
    model, tokenizer = tiny_llama
    text = "the keys to the old cabinet"
    result = attnflow.explain(text, model, tokenizer=tokenizer, method="random-ablation", paper_only=True)
    ids = tokenizer(text)["input_ids"]
    n = len(ids)
    direct = ablated_flow(model, ids, [n - 1], batch_size=1).scores[0, 0]
    expected = direct[np.random.default_rng(0).permutation(n)]
    got = result.row("random-ablation")[-1]
    np.testing.assert_allclose(got, expected, atol=1e-5)  # batched edited runs vs one at a time (test_ablation)
    assert not np.allclose(got, direct)  # a permutation that moved nothing would be no baseline
    np.testing.assert_allclose(np.sort(got), np.sort(direct), atol=1e-5)
