"""The decoder methods through explain and the CLI: the same numbers as the capture functions (whose own
oracle tests are tests/test_ablation.py and tests/test_logit_attribution.py), placed on the result's
axes as documented, and `attnflow explain --method NAME` end to end on a saved tiny decoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

import attnflow
from attnflow.capture.ablation import ablated_flow
from tests.cli_runner import run_cli
from tests.factory import tiny_model

TEXT = "the keys to the old cabinet are"


@pytest.fixture(scope="module")
def decoder(minilm_path, tmp_path_factory):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = tiny_model("llama", vocab=tokenizer.vocab_size)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer, folder


def test_ablated_flow_through_explain_sits_at_the_top_layer(decoder):
    model, tokenizer, _ = decoder
    result = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="ablated-flow")
    ids = tokenizer(TEXT)["input_ids"]
    expected = ablated_flow(model, ids).scores[0, 0]
    row = result.row("ablated-flow")
    assert result.n_layers == 3 and result.computed["ablated-flow"].layers == (2,)
    np.testing.assert_allclose(row[2], expected, atol=1e-12)
    assert np.isnan(row[:2]).all()
    assert result.top(1)[0][0] == int(np.argmax(expected))


def test_cli_explain_with_ablated_flow(decoder, monkeypatch, capsys, tmp_path):
    _, tokenizer, folder = decoder
    out = tmp_path / "r.json"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "explain", TEXT, "--model", str(folder), "--method",
                                   "ablated-flow", "--json", str(out))
    assert code == 0, stderr
    assert "ablated-flow" in stdout
    data = json.loads(out.read_text())
    assert "ablated-flow" in json.dumps(data)
