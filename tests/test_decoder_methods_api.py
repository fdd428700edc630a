"""The decoder methods through explain and the CLI: the same numbers as the interventions (whose own
oracle tests are tests/test_ablation.py and tests/test_logit_attribution.py), placed on the result's
axes as documented, and `attnflow explain --method NAME` end to end on a saved tiny decoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

import attnflow
from attnflow.interventions.ablation import ablated_flow
from tests.cli_runner import run_cli
from tests.factory import saved, tiny_model

TEXT = "the keys to the old cabinet are"


@pytest.fixture(scope="module")
def decoder(minilm_path, tmp_path_factory):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = tiny_model("llama", vocab=tokenizer.vocab_size)
    return model, tokenizer, saved(model, tokenizer, tmp_path_factory.mktemp("tiny-llama"))


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


@pytest.mark.parametrize("method", ["alti-logit", "logit-attribution"])
def test_logit_methods_through_explain_are_cumulative_over_layers(decoder, minilm_path, method):
    from attnflow.interventions.logit_paths import logit_paths

    model, tokenizer, _ = decoder
    classifier = tiny_model("bert", vocab=tokenizer.vocab_size)
    for m, target in ((model, None), (classifier, "cls")):
        result = attnflow.explain(TEXT, m, tokenizer=tokenizer, method=method, target=target)
        row = result.row(method)  # (layers, n): layers 1..l+1
        paths = logit_paths(m, tokenizer(TEXT)["input_ids"])
        np.testing.assert_allclose(np.diff(row, axis=0, prepend=0).sum(-1), paths.attention_part[0], atol=1e-4)
        np.testing.assert_allclose(row[-1].sum(), paths.attention_part[0].sum(), atol=1e-4)


def test_every_decoder_method_through_explain_maps(decoder):
    model, tokenizer, _ = decoder
    names = ["ablated-flow", "ablated-flow-layers", "occlusion", "occlusion-mean", "alti-logit", "logit-attribution"]
    result = attnflow.explain_maps(TEXT, model, tokenizer=tokenizer, methods=names)
    n = result.n_sources
    for name in names:
        assert result.computed[name].targets == tuple(range(n))
    ids = tokenizer(TEXT)["input_ids"]
    every = ablated_flow(model, ids, targets=list(range(n))).scores[:, 0]  # one run per source, every target
    np.testing.assert_allclose(result.scores["ablated-flow"][:, -1], every, atol=1e-12)


def test_cli_generate_with_decoder_methods(decoder, monkeypatch, capsys, tmp_path):
    _, _, folder = decoder
    out = tmp_path / "g.json"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "generate", TEXT, "--model", str(folder), "-n", "3",
                                   "--method", "ablated-flow", "--method", "alti-logit", "--json", str(out))
    assert code == 0, stderr
    loaded = attnflow.Attribution.load(out)
    assert loaded.methods == ["rollout", "ablated-flow", "alti-logit"] and loaded.method == "ablated-flow"
    assert loaded.M.shape[0] == 3
    code, _, stderr = run_cli(monkeypatch, capsys, "generate", TEXT, "--model", str(folder), "--method", "flow")
    assert code == 2 and "flow" in stderr
