"""What the report embeds: escaping, validation, every kind of result, full maps, packing."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from factory import text_result
from test_results import generation, image

import attnflow
from attnflow import AttnflowError
from attnflow.views.report import data as report_data
from attnflow.views.report import payload, report_html


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


def _chunks(html: str) -> dict[str, str]:
    pattern = r'<script type="application/octet-stream" id="attnflow-chunk-([\w-]+)">([^<]*)</script>'
    return dict(re.findall(pattern, html))


@pytest.mark.parametrize("encoding", ["f16", "log8"])
def test_long_inputs_embed_the_opening_target_and_pack_the_rest(monkeypatch, encoding):
    """Above LAZY_ABOVE numbers only the opening target is in the JSON (4 digits); every other
    target is in deflated chunks that decode to the values within the encoding's precision."""
    if encoding == "log8":
        monkeypatch.setattr(report_data, "F16_MAX", 0)
    n = 240  # per method 240 targets x 2 layers x 240 tokens > PLAIN_MAX numbers
    torch.manual_seed(0)
    maps = attnflow.explain_attentions(torch.rand(2, 1, n, n).softmax(-1) ** 3, [f"t{i}" for i in range(n)],
                                       methods=("raw", "rollout"), target=7)
    assert 2 * n * 2 * n > report_data.LAZY_ABOVE
    html = maps.to_html()
    data, chunks = _embedded(html), _chunks(html)
    assert "chunks" not in data
    for entry in data["methods"]:
        assert entry["embedded"] == [7] and entry["targets"] == list(range(n))
        np.testing.assert_allclose(entry["rows"][0], maps.row(entry["name"], 7), rtol=5e-4)
        lazy = entry["lazy"]
        assert lazy["encoding"] == encoding
        covered = sorted(t for c in lazy["chunks"] for t in c["targets"])
        assert covered == [t for t in range(n) if t != 7]
        for chunk in lazy["chunks"]:
            got = report_data.decode_chunk(chunks[chunk["id"]], encoding, (len(chunk["targets"]), 2, n))
            want = maps.scores[entry["name"]][chunk["targets"]]
            if encoding == "f16":
                np.testing.assert_allclose(got, want, rtol=5e-4, atol=6e-8)
            else:
                top = want.max(-1, keepdims=True)
                visible = want >= top * 2.0 ** -report_data.LOG8_OCTAVES
                np.testing.assert_allclose(got[visible], want[visible], rtol=0.028)
                assert (got[~visible] == 0).all()


def test_log8_keeps_exact_zeros_and_maxima():
    values = np.array([[[0.0, 1e-9, 0.25, 0.5, 1.0]], [[0.0, 0.0, 0.0, 0.0, 0.0]]])
    got = report_data.decode_chunk(report_data.encode_chunk(values, "log8"), "log8", values.shape)
    assert got[0, 0, 0] == 0 and got[0, 0, 1] == 0 and (got[1] == 0).all()
    assert got[0, 0, 4] == 1.0  # each row's maximum is stored exactly
    np.testing.assert_allclose(got[0, 0, 2:4], [0.25, 0.5], rtol=0.028)


def test_a_512_token_30_layer_report_stays_under_10_mb():
    """Raw and rollout for every target of a 512-token, 30-layer decoder, from random causal
    attention with peaky rows (benchmarks/memory.py measures the same on SmolLM2's own)."""
    n, layers = 512, 30
    torch.manual_seed(0)
    logits = torch.randn(layers, 1, n, n) * 3 + torch.triu(torch.full((n, n), -torch.inf), 1)
    maps = attnflow.explain_attentions(logits.softmax(-1), [f"t{i}" for i in range(n)], target=n - 1,
                                       methods=("raw", "rollout"))
    html = report_html(maps)
    assert len(html.encode()) < 10 * 2**20
    data = _embedded(html)
    assert [m["lazy"]["encoding"] for m in data["methods"]] == ["log8", "log8"]
    assert len(data["methods"][0]["rows"][0]) == layers


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
            # explain's rollout rows are vector-matrix products, the maps' matrix products (float32)
            tolerance = 1e-6 if method == "rollout" else 1e-9
            np.testing.assert_allclose(maps.row(method, target), expected.row(), atol=tolerance)


def test_a_preview_has_flow_for_the_explained_target_before_the_rest(minilm, smollm2, monkeypatch):
    from attnflow.api import text as api_text

    model, tokenizer = minilm
    text = "The keys to the cabinet are here"
    seen = []

    def preview(result):
        seen.append((result, flows.copy()))

    flows = []
    real = api_text._blocks

    def counted(attentions, methods, rows_for, *args, **kwargs):  # which flow rows each pass asked for
        flows.extend(rows_for(m) for m in methods if m == "flow")
        return real(attentions, methods, rows_for, *args, **kwargs)

    monkeypatch.setattr(api_text, "_blocks", counted)
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, target=3, methods=("raw", "rollout", "flow"),
                                 preview=preview)
    n = maps.n_sources
    assert len(seen) == 1
    first, asked = seen[0]
    assert asked == [[3]]  # when it was handed over, flow had run for the explained target alone
    assert first.computed["flow"].targets == (3,) and first.target == 3 and first.methods == maps.methods
    assert first.computed["raw"].targets == first.computed["rollout"].targets == tuple(range(n))
    assert maps.computed["flow"].targets == tuple(range(n))
    for method in ("raw", "rollout", "flow"):
        np.testing.assert_allclose(first.row(method, 3), maps.row(method, 3), atol=0)
    np.testing.assert_allclose(first.row("rollout", 5), maps.row("rollout", 5), atol=0)

    with pytest.raises(AttnflowError, match="preview must be a function of the first result"):
        attnflow.explain_maps(text, model, tokenizer=tokenizer, preview="yes")

    # nothing left for later: no preview (no flow; flow for the target alone; above FLOW_ALL_MAX tokens)
    seen.clear()
    attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("raw", "rollout"), preview=preview)
    attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("flow",), flow_targets="target", preview=preview)
    monkeypatch.setattr(api_text, "FLOW_ALL_MAX", 4)
    attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("rollout", "flow"), preview=preview)
    assert seen == []

    # a decoder's first look has its defaults (added beside a menu's ticks, as the app asks), and the
    # faithfulness numbers only in the whole result
    monkeypatch.undo()
    lm, lm_tokenizer = smollm2
    whole = attnflow.explain_maps("The keys to the cabinet", lm, tokenizer=lm_tokenizer,
                                  methods=("rollout", "flow"), preview=preview, defaults=True)
    first = seen[0][0]
    assert first.methods == whole.methods and "ablated-flow" in first.methods
    assert "faithfulness" in whole.meta and "faithfulness" not in first.meta
    np.testing.assert_allclose(first.row("ablated-flow"), whole.row("ablated-flow"), atol=0)


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


def test_explain_maps_keeps_to_the_target_above_maps_all_max(minilm, monkeypatch):
    from attnflow.api import text as api_text

    model, tokenizer = minilm
    monkeypatch.setattr(api_text, "MAPS_ALL_MAX", 4)
    text = "The keys to the cabinet are here"
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, target="cls", methods=("raw", "rollout"))
    assert all(c.targets == (0,) for c in maps.computed.values())
    every = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("raw",), targets="all")
    assert every.computed["raw"].targets == tuple(range(every.n_sources))
    with pytest.raises(AttnflowError, match="targets must be 'auto' or 'all'"):
        attnflow.explain_maps(text, model, tokenizer=tokenizer, targets="target")
