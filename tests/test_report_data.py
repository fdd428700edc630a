"""What the report embeds: escaping, validation, every kind of result, full maps, packing."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
import torch
from factory import text_result
from test_results import generation, image

import attnflow
from attnflow import AttnflowError
from attnflow.views.report import payload, report_html
from attnflow.views.report.data import PLAIN_MAX


def _embedded(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="attnflow-data">(.*?)</script>', html, flags=re.S)
    return json.loads(block.group(1))


def test_json_block_cannot_be_closed_by_a_token():
    tokens = ["</script><script>alert(1)</script>", "</SCRIPT >", "<!--", "&lt;", "@@DATA@@", "\u2028"]
    html = report_html(text_result(tokens))
    assert len(re.findall(r"</script", html, flags=re.I)) == 2  # the page's own data and code blocks
    assert "<!--" not in html.split('id="attnflow-data">')[1].split("</script>")[0]
    assert _embedded(html)["sources"] == tokens  # the escapes decode back to the same text
    assert "<title>attnflow: &lt;/script&gt;" in html


def test_page_needs_no_network():
    for result in (text_result(["a", "b"]), generation(), image()):
        html = report_html(result)
        # the image is the page's own data: URI (allowed by the policy); nothing else may load
        stripped = re.sub(r'"data:image/png;base64,[A-Za-z0-9+/=]+"', '""', html)
        assert not re.search(r"(src|href)\s*=|https?://|@import|url\(", stripped, flags=re.I)
        assert "default-src 'none'" in html and "img-src data:" in html


def test_methods_in_paper_order_with_notes_for_partial_ones():
    data = payload(text_result(["[CLS]", "x", "y"], methods=("flow", "raw", "rollout")))
    assert [m["name"] for m in data["methods"]] == ["raw", "rollout", "flow"]
    assert all(m["targets"] == [0] and "position 0 only" in m["note"] for m in data["methods"])
    assert data["method"] == "rollout" and data["targets_are_sources"]


def test_every_kind_has_its_payload():
    gen = payload(generation())
    assert gen["kind"] == "generation" and gen["input_length"] == 6 and gen["targets"] == [" are", " old"]
    np.testing.assert_allclose(gen["methods"][0]["rows"], generation().blocks["rollout"].values, rtol=1e-3)
    img = payload(image())
    assert img["kind"] == "image" and img["grid"] == [2, 2] and img["image"].startswith("data:image/png;base64,")
    flow = next(m for m in img["methods"] if m["name"] == "flow")
    assert flow["layers"] == [1]  # flow at the top layer only: the page says so for layer 1


def test_bad_results_are_refused():
    with pytest.raises(AttnflowError, match="cannot make a report"):
        report_html("not a result")
    with pytest.raises(AttnflowError, match="cannot make a report"):
        report_html([text_result(["a"])])


def test_maps_keep_missing_flow_rows_missing():
    torch.manual_seed(0)
    maps = attnflow.explain_attentions(torch.rand(2, 2, 5, 5).softmax(-1), list("abcde"), target=2,
                                       flow_targets="target")
    data = payload(maps)
    flow = next(m for m in data["methods"] if m["name"] == "flow")
    assert flow["targets"] == [2] and "position 2 only" in flow["note"]
    assert next(m for m in data["methods"] if m["name"] == "raw")["targets"] == [0, 1, 2, 3, 4]


def test_large_maps_are_packed_as_float16_that_decodes_to_the_values():
    n = 240  # per method 240 targets x 2 layers x 240 tokens > PLAIN_MAX numbers
    torch.manual_seed(0)
    maps = attnflow.explain_attentions(torch.rand(2, 1, n, n).softmax(-1), [f"t{i}" for i in range(n)],
                                       methods=("raw", "rollout"))
    assert n * 2 * n > PLAIN_MAX
    data = _embedded(maps.to_html())
    for entry in data["methods"]:
        packed = entry["rows"]
        assert packed["dtype"] == "float16" and packed["shape"] == [n, 2, n]
        decoded = np.frombuffer(base64.b64decode(packed["base64"]), dtype="<f2").reshape(packed["shape"])
        np.testing.assert_allclose(decoded, maps.scores[entry["name"]], rtol=5e-4, atol=1e-7)


def test_explain_maps_agrees_with_explain_for_every_method(minilm):
    model, tokenizer = minilm
    text = "The keys to the cabinet are here"
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, target="cls")
    n = maps.n_sources
    assert all(c.targets == tuple(range(n)) for c in maps.computed.values())  # short: flow everywhere
    for method in ("raw", "rollout", "flow"):
        for target in (0, 3):
            expected = attnflow.explain(text, model, tokenizer=tokenizer, method=method, target=target)
            assert maps.sources == expected.sources
            np.testing.assert_allclose(maps.row(method, target), expected.row(), atol=1e-9)


def test_explain_attentions_equals_the_core_methods():
    torch.manual_seed(1)
    att = torch.rand(3, 2, 6, 6).softmax(-1)
    maps = attnflow.explain_attentions(att, targets=[1, 4], target=1)
    np.testing.assert_allclose(maps.row("rollout", 4), np.asarray(attnflow.rollout(att))[:, 4], atol=1e-6)
    np.testing.assert_allclose(maps.row("flow", 1), np.asarray(attnflow.flow(att, positions=[1]))[:, 0], atol=1e-9)
    assert maps.computed["raw"].targets == (1, 4) and maps.sources == [str(i) for i in range(6)]
    with pytest.raises(AttnflowError, match="positions in"):
        attnflow.explain_attentions(att, targets=[9])
    with pytest.raises(AttnflowError, match="2 tokens"):
        attnflow.explain_attentions(att, ["a", "b"])
