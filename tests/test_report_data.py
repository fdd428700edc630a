"""What the report embeds: escaping, validation of results and files, full maps, packing."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
import torch

import attnflow
from attnflow import AttnflowError, Explanation, ExplanationMaps
from attnflow.explanation_maps import maps_from_attentions
from attnflow.views.report import load_result, payload, report_html
from attnflow.views.report.data import PLAIN_MAX


def _embedded(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="attnflow-data">(.*?)</script>', html, flags=re.S)
    return json.loads(block.group(1))


def _expl(tokens, method="rollout", target=0, layers=2, seed=0):
    rng = np.random.default_rng(seed)
    return Explanation(tokens=list(tokens), scores=rng.dirichlet(np.ones(len(tokens)), size=layers), method=method,
                       target=target)


def test_json_block_cannot_be_closed_by_a_token():
    tokens = ["</script><script>alert(1)</script>", "</SCRIPT >", "<!--", "&lt;", "@@DATA@@", "\u2028"]
    html = report_html(_expl(tokens))
    assert len(re.findall(r"</script", html, flags=re.I)) == 2  # the page's own data and code blocks
    assert "<!--" not in html.split('id="attnflow-data">')[1].split("</script>")[0]
    assert _embedded(html)["tokens"] == tokens  # the escapes decode back to the same text
    assert "<title>attnflow: &lt;/script&gt;" in html


def test_page_needs_no_network():
    html = report_html(_expl(["a", "b"]))
    assert not re.search(r"(src|href)\s*=|https?://|@import|url\(", html, flags=re.I)
    assert "default-src 'none'" in html  # and the browser is told to refuse any fetch


def test_several_explanations_become_one_page_with_methods_in_paper_order():
    tokens = ["[CLS]", "x", "y"]
    data = payload([_expl(tokens, "flow"), _expl(tokens, "raw"), _expl(tokens, "rollout")])
    assert [m["name"] for m in data["methods"]] == ["raw", "rollout", "flow"]
    assert all(m["targets"] == [0] and "position 0 only" in m["note"] for m in data["methods"])
    with pytest.raises(AttnflowError, match="same input"):
        payload([_expl(tokens), _expl(["other", "x", "y"])])


@pytest.mark.parametrize("bad, message", [
    (Explanation(["a", "b"], np.ones((2, 3)), "raw", 0), "3 columns but there are 2 tokens"),
    (Explanation(["a", "b"], np.array([[0.5, np.nan]]), "raw", 0), "NaN"),
    (Explanation(["a", "b"], np.ones((1, 2)), "raw", 5), "outside"),
    (Explanation(["a", "b"], np.ones(2), "raw", 0), "2-d"),
    ("not a result", "cannot make a report"),
])
def test_bad_results_are_refused(bad, message):
    with pytest.raises(AttnflowError, match=message):
        report_html(bad)


@pytest.mark.parametrize("content, message", [
    (None, "no such result file"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "explanation objects"),
    ("42", "JSON object"),
    ('{"tokens": ["a"], "method": "raw"}', "missing"),
    ('{"tokens": ["a", "b"], "method": "raw", "target": 0, "scores": [[1, 2], [3]]}', "does not hold"),
    ('{"tokens": ["a", "b"], "method": "raw", "target": "x", "scores": [[1, 2]]}', "does not hold"),
    ('{"kind": "generation", "prompt_tokens": ["a"]}', "missing"),
    ('{"kind": "generation", "prompt_tokens": ["a"], "generated_tokens": ["b"], "method": "rollout", '
     '"M": [[[0.1], [0.2]]]}', "shape"),
    ('{"kind": "maps", "tokens": ["a"]}', "maps"),
])
def test_bad_result_files_are_refused(tmp_path, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AttnflowError, match=message):
        load_result(path)


def test_maps_round_trip_through_json_keeps_missing_flow_rows_missing():
    torch.manual_seed(0)
    maps = maps_from_attentions(torch.rand(2, 2, 5, 5).softmax(-1), list("abcde"), 2, flow_targets="target")
    again = ExplanationMaps.from_dict(json.loads(maps.to_json()))
    assert again.computed == maps.computed and again.computed["flow"] == [2]
    for m in maps.methods:
        np.testing.assert_array_equal(np.isnan(again.maps[m]), np.isnan(maps.maps[m]))
        np.testing.assert_allclose(np.nan_to_num(again.maps[m]), np.nan_to_num(maps.maps[m]))
    with pytest.raises(AttnflowError, match="only"):
        maps.explanation("flow", 3)


def test_large_maps_are_packed_as_float16_that_decodes_to_the_values():
    n = 240  # per method 240 targets x 2 layers x 240 tokens > PLAIN_MAX numbers
    torch.manual_seed(0)
    maps = maps_from_attentions(torch.rand(2, 1, n, n).softmax(-1), [f"t{i}" for i in range(n)], 0,
                                methods=("raw", "rollout"))
    assert n * 2 * n > PLAIN_MAX
    data = _embedded(maps.to_html())
    for entry in data["methods"]:
        packed = entry["rows"]
        assert packed["dtype"] == "float16" and packed["shape"] == [n, 2, n]
        decoded = np.frombuffer(base64.b64decode(packed["base64"]), dtype="<f2").reshape(packed["shape"])
        expected = maps.maps[entry["name"]].transpose(1, 0, 2)  # (targets, layers, n)
        np.testing.assert_allclose(decoded, expected, rtol=5e-4, atol=1e-7)


def test_explain_maps_agrees_with_explain_for_every_method(minilm):
    model, tokenizer = minilm
    text = "The keys to the cabinet are here"
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, target="cls")
    assert all(c == list(range(len(maps.tokens))) for c in maps.computed.values())  # short: flow everywhere
    for method in ("raw", "rollout", "flow"):
        for target in (0, 3):
            expected = attnflow.explain(text, model, tokenizer=tokenizer, method=method, target=target)
            got = maps.explanation(method, target)
            assert got.tokens == expected.tokens
            np.testing.assert_allclose(got.scores, expected.scores, atol=1e-9)


def test_a_result_object_with_to_dict_is_read_through_it():
    # How a Generation object (issue 5) reaches the report: its to_dict is the generation schema.
    class Result:
        def to_dict(self):
            return {"kind": "generation", "prompt_tokens": ["a", "b"], "generated_tokens": ["c"],
                    "method": "rollout", "M": [[[0.25, 0.5], [0.75, 0.5]]], "rows": [[[0.25, 0.75, 0.0],
                                                                                     [0.5, 0.5, 0.0]]]}

    data = payload(Result())
    assert data["kind"] == "generation" and data["M"] == [[[0.25, 0.5], [0.75, 0.5]]] and data["n_layers"] == 2
