"""The faithfulness check against an independent leave-one-out / deletion loop, on a tiny random decoder
and on the bundled classifier; bad input refused in one line; the numbers reach JSON and the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from scipy.stats import spearmanr
from transformers import AutoTokenizer, BertConfig, BertModel

import attnflow
from attnflow.api import faithfulness_report
from attnflow.errors import AttnflowError
from attnflow.evaluation.faithfulness import TIE_ULPS, evaluate, merge_ties
from tests.cli_runner import run_cli
from tests.factory import tiny_decoder

TEXT = "the keys to the old cabinet near the big doors are"


@pytest.fixture(scope="module")
def tiny_llama(minilm_path):
    return tiny_decoder(minilm_path)


def _oracle(model, ids, special, target, rows, decoder, percents=(10, 20, 50)):
    """Naive loops written from the definitions: one forward pass per deleted token, per AOPC level."""

    def logits(seq):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([seq])).logits[0].double()
        return out[-1] if decoder else out

    full = logits(ids)
    c = int(full.argmax())
    ranked = [i for i in range(len(ids)) if i not in special and i != target]
    loo = np.array([float(full[c] - logits([t for j, t in enumerate(ids) if j != i])[c]) for i in ranked])
    loo = _tied(loo, TIE_ULPS * np.finfo(np.float64).eps * max(1.0, float(full.abs().max())))
    p = lambda seq: float(logits(seq).softmax(-1)[c])  # noqa: E731
    base = p(ids)
    out = {}
    for method, row in rows.items():
        rho, compr, suff = [], [], []
        for layer_scores in row:
            rho.append(spearmanr(layer_scores[ranked], loo).statistic)
            order = [ranked[j] for j in np.argsort(-layer_scores[ranked], kind="stable")]
            drops_c, drops_s, seen = [], [], []
            for pct in percents:
                k = len(ranked) * pct // 100
                top = set(order[:k])
                if k == 0 or top in seen[-1:]:
                    continue
                seen.append(top)
                drops_c.append(base - p([t for j, t in enumerate(ids) if j not in top]))
                drops_s.append(base - p([t for j, t in enumerate(ids) if j in top or j not in ranked]))
            compr.append(np.mean(drops_c))
            suff.append(np.mean(drops_s))
        out[method] = (np.array(rho), np.array(compr), np.array(suff))
    return c, loo, ranked, out


def _tied(values, tol):
    """Ties as the product defines them, by a naive pairwise closure: values linked by a chain of
    neighbours within ``tol`` are one value (their mean)."""
    group = list(range(len(values)))
    for i in range(len(values)):
        for j in range(len(values)):
            if abs(values[i] - values[j]) <= tol:
                old, new = group[j], group[i]
                group = [new if g == old else g for g in group]
    return np.array([np.mean([values[k] for k in range(len(values)) if group[k] == group[i]])
                     for i in range(len(values))])


def test_leave_one_out_noise_is_a_tie_and_real_differences_are_kept():
    noise = 1e-15
    values = np.array([3.0, -5.6e-7, -5.6e-7 + noise, 1.0, -5.6e-7 - noise, 1.0 + 1e-6])
    merged = merge_ties(values, 1e-12)
    assert len({merged[1], merged[2], merged[4]}) == 1 and merged[3] != merged[5]
    np.testing.assert_allclose(merged, _tied(values, 1e-12), rtol=0, atol=0)
    rng = np.random.default_rng(0)
    for _ in range(50):  # the sort-and-chain rule equals the pairwise closure
        v = np.round(rng.normal(size=12), 1) + rng.normal(scale=1e-14, size=12)
        np.testing.assert_allclose(merge_ties(v, 1e-12), _tied(v, 1e-12), rtol=0, atol=1e-15)


def _check(result, model, tokenizer, decoder):
    found = faithfulness_report(result)
    ids = tokenizer(TEXT)["input_ids"]
    rows = {m: result.row(m) for m in result.methods}
    target = result.target_positions[result.target]
    c, loo, ranked, expected = _oracle(model, ids, result.meta["special"], target, rows, decoder)
    assert found.output == c and found.positions == ranked
    np.testing.assert_allclose(found.loo[ranked], loo, rtol=1e-9, atol=1e-9)
    assert np.isnan(np.delete(found.loo, ranked)).all()
    for m, (rho, compr, suff) in expected.items():
        np.testing.assert_allclose(found.spearman[m], rho, atol=1e-12)
        np.testing.assert_allclose(found.comprehensiveness[m], compr, atol=1e-9)
        np.testing.assert_allclose(found.sufficiency[m], suff, atol=1e-9)
    assert np.ptp(loo) > 0 and any(np.ptp(v[0]) > 0 for v in expected.values())  # the numbers are not flat


def test_decoder_numbers_equal_an_independent_loop(tiny_llama):
    model, tokenizer = tiny_llama
    result = attnflow.faithfulness(TEXT, model, tokenizer=tokenizer, method="all")
    assert result.target_positions[result.target] == result.n_sources - 1  # the next-token position
    _check(result, model, tokenizer, decoder=True)


def test_classifier_numbers_equal_an_independent_loop():
    import copy

    from attnflow.hf.load import cached_model

    model, tokenizer = cached_model(None)  # the bundled agreement classifier
    # float64 so that one pass per sequence (the oracle) and batched passes agree to the last digits
    model = copy.deepcopy(model).double()
    result = attnflow.faithfulness(TEXT, model, tokenizer=tokenizer, method=["rollout", "flow"])
    assert result.methods == ["rollout", "flow"] and result.meta["faithfulness"]["label"] in ("singular", "plural")
    _check(result, model, tokenizer, decoder=False)


def test_evaluate_takes_plain_scores_and_replacement():
    """A toy 'model' whose logit is a tenth of the sum of the ids it sees: LOO = id / 10, so a score equal
    to the ids correlates perfectly and its reverse perfectly negatively; replacement by id 0 = deletion."""
    predict = lambda batch: np.array([[sum(s) / 10, 0.0] for s in batch])  # noqa: E731
    ids = [5, 3, 9, 1, 7, 2]
    scores = {"same": np.array(ids, float), "reverse": -np.array(ids, float)}
    found = evaluate(predict, ids, scores, output=0, target=5)
    np.testing.assert_allclose(found.loo[:5], np.array(ids[:5]) / 10)
    assert found.spearman["same"][0] == pytest.approx(1) and found.spearman["reverse"][0] == pytest.approx(-1)
    assert found.comprehensiveness["same"][0] > found.comprehensiveness["reverse"][0]
    assert found.sufficiency["same"][0] < found.sufficiency["reverse"][0]
    # ties go to the earlier position: with flat scores the top 1 is position 0, the top 2 positions 0, 1
    flat = evaluate(predict, ids, {"flat": np.ones(6)}, output=0, target=5)
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731  (p of output 0 when the other logit is 0)
    full = sigmoid(2.7)
    assert flat.comprehensiveness["flat"][0] == pytest.approx(np.mean([full - sigmoid(2.2), full - sigmoid(1.9)]))
    assert flat.sufficiency["flat"][0] == pytest.approx(np.mean([full - sigmoid(0.7), full - sigmoid(1.0)]))
    replaced = evaluate(predict, ids, scores, output=0, target=5, fill_id=0)
    np.testing.assert_allclose(replaced.loo, found.loo)
    with pytest.raises(AttnflowError, match="at least 2 tokens"):
        evaluate(predict, ids[:2], {"a": [1.0, 2.0]}, output=0, target=1)
    with pytest.raises(AttnflowError, match="fractions"):
        evaluate(predict, ids, scores, fractions=(0.0,))


def test_a_bare_encoder_is_refused_from_python(minilm_path):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    bare = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=32)).eval()
    with pytest.raises(AttnflowError, match="no sequence-classification or language-model head"):
        attnflow.faithfulness("the keys", bare, tokenizer=tokenizer)


@pytest.mark.parametrize("case", ["bare encoder", "over-long text"])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(monkeypatch, capsys, tmp_path, minilm_path, case):
    out = tmp_path / "f.json"
    html = tmp_path / "f.html"
    if case == "bare encoder":
        args = ["faithfulness", "the keys to the cabinet", "--model", minilm_path]
        expected = "without a prediction head"
    else:
        args = ["faithfulness", "the keys " * 40]  # the bundled model takes at most 64 tokens
        expected = "tokens long but the model takes at most 64"
    code, stdout, stderr = run_cli(monkeypatch, capsys, *args, "--json", str(out), "--html", str(html))
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("attnflow: error: ") and expected in stderr
    assert not out.exists() and not html.exists() and list(tmp_path.iterdir()) == []


def test_cli_prints_the_table_and_writes_json_and_report(monkeypatch, capsys, tmp_path):
    out, html = tmp_path / "f.json", tmp_path / "f.html"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "faithfulness", TEXT, "--method", "rollout",
                                   "--json", str(out), "--html", str(html))
    assert code == 0, stderr
    flat = " ".join(stdout.split())
    assert "faithfulness to the predicted class 'plural'" in flat and "rho compr suff" in flat
    loaded = attnflow.load(out)
    again = faithfulness_report(loaded)
    data = json.loads(out.read_text())["meta"]["faithfulness"]
    np.testing.assert_allclose(again.spearman["rollout"], [np.nan if v is None else v
                                                           for v in data["methods"]["rollout"]["spearman"]])
    page = html.read_text()
    assert '"faithfulness"' in page and "leave-one-out" in page


# Other families (learned positions, sliding windows, hybrid local/global layers, encoder classifiers):
# the same independent loop, so nothing in the glue assumes the Llama layout. Norm weighting too.
FAMILIES = {
    "gpt2": lambda v: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=v, n_embd=32, n_layer=2, n_head=4, n_positions=64, initializer_range=0.5)),
    "mistral-window": lambda v: transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, sliding_window=4, initializer_range=0.5)),
    "gemma2-hybrid": lambda v: transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4, initializer_range=0.5)),
    "bert-classifier": lambda v: transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=v, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, num_labels=3, initializer_range=0.5)),
    "distilbert-classifier": lambda v: transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=v, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, num_labels=2,
        initializer_range=0.5)),
}


@pytest.mark.parametrize("weighting", ["attention", "norm"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_other_families_equal_an_independent_loop(family, weighting, minilm_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    model = FAMILIES[family](tokenizer.vocab_size).double().eval()
    model.set_attn_implementation("eager")
    decoder = not family.endswith("classifier")
    result = attnflow.faithfulness(TEXT, model, tokenizer=tokenizer, method=["raw", "rollout"], weighting=weighting)
    assert result.params["weighting"] == weighting
    _check(result, model, tokenizer, decoder=decoder)
