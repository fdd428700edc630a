"""The one result type: axes, reading, ranking, selection, and every file form round-tripping.

Each kind (text with one target, text with every target, generation, image) goes result -> JSON ->
result and result -> .npz -> result with equal arrays and labels; every JSON file the 0.1 release
wrote (tests/data/legacy_v1, produced by that release's CLI and API) still loads, with its numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnflow
from attnflow import AttnflowError, Attribution
from attnflow.results import Block
from attnflow.results.words import is_content

LEGACY = Path(__file__).parent / "data" / "legacy_v1"


def generation() -> Attribution:
    prompt = ["The", " keys", " to", " the", " cabinet", ","]
    rows = np.zeros((2, 3, 8))
    rows[:, :, :6] = [0.40, 0.10, 0.20, 0.05, 0.15, 0.10]  # every layer alike
    rows[1, :, 5] = 0.05
    rows[1, :, 6] = 0.05  # the second generated token also draws on the first
    return Attribution(kind="generation", sources=prompt + [" are", " old"], targets=[" are", " old"],
                       target_positions=[5, 6], blocks={"rollout": Block.full(rows)}, n_layers=3,
                       input="".join(prompt), input_length=6, model="m", meta={"completion": " are old"})


def text_maps() -> Attribution:
    torch.manual_seed(0)
    return attnflow.explain_attentions(torch.rand(3, 2, 5, 5).softmax(-1), list("abcde"), target=2,
                                       flow_targets="target")


def image() -> Attribution:
    rng = np.random.default_rng(0)
    pixels = (rng.integers(0, 256, size=(8, 8, 3)) / 255.0).astype(np.float32)  # as PIL gives them
    return Attribution(kind="image", sources=[f"p{i}" for i in range(4)], targets=["[CLS]"], target_positions=[0],
                       blocks={"rollout": Block.full(rng.dirichlet(np.ones(4), size=(1, 2))),
                               "flow": Block(rng.random((1, 1, 4)), (0,), (1,))},
                       n_layers=2, input="x.png", prediction="7", grid=(2, 2), image=pixels)


def assert_same(a: Attribution, b: Attribution) -> None:
    for name in ("kind", "sources", "targets", "target_positions", "n_layers", "target", "method", "input",
                 "input_length", "prediction", "model", "params", "grid", "meta"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.methods == b.methods
    for m in a.methods:
        assert a.computed[m] == b.computed[m]
        np.testing.assert_array_equal(a.blocks[m].values, b.blocks[m].values)
        np.testing.assert_array_equal(np.isnan(a.scores[m]), np.isnan(b.scores[m]))
    if a.image is None:
        assert b.image is None
    else:
        np.testing.assert_array_equal(a.image, b.image)


@pytest.mark.parametrize("make", [text_maps, generation, image], ids=["text", "generation", "image"])
@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_every_kind_round_trips_through_files(make, suffix, tmp_path):
    result = make()
    path = tmp_path / f"r.{suffix}"
    result.save(path)
    assert_same(result, Attribution.load(path))
    if suffix == "json":
        assert_same(result, Attribution.from_json(result.to_json()))
        assert json.loads(path.read_text())["version"] == 2


def test_one_target_text_round_trips(minilm, tmp_path):
    model, tokenizer = minilm
    result = attnflow.explain("The keys to the cabinet", model, tokenizer=tokenizer, method="all", target=2)
    assert result.computed["flow"].targets == (2,) and result.method == "rollout"
    again = Attribution.from_json(result.to_json())
    assert_same(result, again)
    assert np.isnan(again.scores["flow"][0]).all() and not np.isnan(again.scores["flow"][2]).any()


def test_scores_are_nan_exactly_where_not_computed():
    result = text_maps()
    assert result.computed["flow"].targets == (2,) and result.computed["rollout"].targets == tuple(range(5))
    dense = result.scores["flow"]
    assert dense.shape == (5, 3, 5)
    assert np.isnan(dense[[0, 1, 3, 4]]).all() and np.isfinite(dense[2]).all()
    with pytest.raises(AttnflowError, match="computed for targets"):
        result.row("flow", 3)
    img = image()
    assert np.isnan(img.scores["flow"][0, 0]).all() and np.isfinite(img.scores["flow"][0, 1]).all()
    with pytest.raises(AttnflowError, match="not computed at layer 0"):
        img.grid_scores("flow", 0)
    np.testing.assert_array_equal(img.grid_scores("flow"), img.blocks["flow"].values[0, 0].reshape(2, 2))


def test_top_and_content_only_for_a_generation():
    gen = generation()
    assert [t for _, t, _ in gen.top(3)] == ["The", " to", " cabinet"]  # prompt only, mean over layers
    assert [t for _, t, _ in gen.top(3, content_only=True)] == [" cabinet", " keys"]
    assert gen.M.shape == (2, 6, 3) and gen.M[1, 5, 0] == pytest.approx(0.05)
    assert gen.top(1, target=1, layer=0)[0][1] == "The"


def test_target_index_by_position_or_label():
    gen = generation()
    assert [gen.target_index(x) for x in (0, -1, "1", " old", "are", None)] == [0, 1, 1, 1, 0, 0]
    for bad, msg in [(2, "outside"), ("-3", "outside"), ("new", "no target"), (1.5, "index or")]:
        with pytest.raises(AttnflowError, match=msg):
            gen.target_index(bad)


def test_is_content():
    assert [is_content(t) for t in ["The", " keys", " to", ",", "Ġcabinet", "?!", " 42", "\n"]] == \
        [False, True, False, False, True, False, True, False]


def test_select_keeps_axes_and_restricts_blocks():
    result = text_maps()
    one = result.select(methods=["flow", "raw"], targets=[2])
    assert one.methods == ["flow", "raw"] and one.computed["raw"].targets == (2,) and one.n_targets == 5
    np.testing.assert_array_equal(one.row("raw", 2), result.row("raw", 2))
    with pytest.raises(AttnflowError, match="not computed for any"):
        result.select(methods=["flow"], targets=[0])
    with pytest.raises(AttnflowError, match="holds the methods"):
        result.select(methods=["nope"])


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "video"}, "kind must be"),
    ({"sources": []}, "at least one source"),
    ({"target_positions": [0]}, "target positions"),
    ({"blocks": {}}, "at least one method"),
    ({"blocks": {"raw": Block(np.ones((1, 2, 3)), (0,), (0, 1))}}, "shape"),
    ({"blocks": {"raw": Block(np.ones((1, 2, 2)), (5,), (0, 1))}}, "target indices"),
    ({"blocks": {"raw": Block(np.full((1, 2, 2), np.nan), (0,), (0, 1))}}, "NaN"),
    ({"target": 2}, "target must be"),
    ({"method": "flow"}, "not among"),
    ({"grid": (3, 3)}, "grid"),
])
def test_invalid_results_are_refused(kwargs, message):
    base = dict(kind="text", sources=["a", "b"], targets=["a", "b"], target_positions=[0, 1],
                blocks={"raw": Block(np.ones((1, 2, 2)), (0,), (0, 1))}, n_layers=2)
    with pytest.raises(AttnflowError, match=message):
        Attribution(**{**base, **kwargs})


@pytest.mark.parametrize("content, message", [
    (None, "no such result file"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "explanation objects"),
    ("42", "JSON object"),
    ('{"tokens": ["a"], "method": "raw"}', "missing"),
    ('{"tokens": ["a", "b"], "method": "raw", "target": 0, "scores": [[1, 2], [3]]}', "does not hold"),
    ('{"tokens": ["a", "b"], "method": "raw", "target": "x", "scores": [[1, 2]]}', "does not hold"),
    ('{"tokens": ["a", "b"], "method": "raw", "target": 0, "scores": [[1, 2, 3]]}', "2 tokens"),
    ('{"kind": "generation", "prompt_tokens": ["a"]}', "missing"),
    ('{"kind": "generation", "prompt_tokens": ["a"], "generated_tokens": ["b"], "method": "rollout", '
     '"M": [[[0.1], [0.2]]]}', "shape"),
    ('{"kind": "maps", "tokens": ["a"]}', "maps"),
    ('{"schema": "attnflow.attribution", "version": 9}', "version 9"),
])
def test_bad_result_files_are_refused(tmp_path, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AttnflowError, match=message):
        Attribution.load(path)


# ---------------------------------------------------------------------- files of attnflow 0.1

def _legacy(name: str) -> tuple[object, Attribution]:
    path = LEGACY / name
    return json.loads(path.read_text()), Attribution.load(path)


@pytest.mark.parametrize("name", ["explain_rollout.json", "explain_flow_target2.json", "explain_grad_rollout.json",
                                  "explain_decoder_sink.json"])
def test_legacy_single_explanations_load_with_their_numbers(name):
    old, result = _legacy(name)
    assert result.kind == "text" and result.sources == old["tokens"] and result.methods == [old["method"]]
    assert result.target == old["target"] and result.prediction == old.get("prediction")
    np.testing.assert_array_equal(result.row(), np.asarray(old["scores"]))
    assert result.input == old["params"]["text"] and result.model == old["params"]["model"]


def test_legacy_method_all_list_becomes_one_result_with_three_methods():
    old, result = _legacy("explain_all.json")
    assert result.methods == [e["method"] for e in old] == ["raw", "rollout", "flow"]
    for e in old:
        np.testing.assert_array_equal(result.row(e["method"], e["target"]), np.asarray(e["scores"]))


def test_legacy_maps_load_every_target():
    old, result = _legacy("maps.json")
    assert result.computed["flow"].targets == tuple(old["computed"]["flow"])
    for method, rows in old["maps"].items():
        for t, values in rows.items():
            np.testing.assert_array_equal(result.row(method, int(t)), np.asarray(values))


def test_legacy_generation_loads_rows_and_m():
    old, result = _legacy("generate_smollm2.json")
    assert result.kind == "generation" and result.targets == old["generated_tokens"]
    assert result.sources[: result.input_length] == old["prompt_tokens"]
    np.testing.assert_array_equal(result.dense("rollout"), np.asarray(old["rows"]))
    np.testing.assert_array_equal(result.M, np.asarray(old["M"]))
    assert result.meta["completion"] == old["completion"]


def test_every_legacy_file_renders_a_report_and_a_figure(tmp_path):
    for path in sorted(LEGACY.glob("*.json")):
        result = Attribution.load(path)
        assert "attnflow-data" in result.to_html()
        result.plot(tmp_path / f"{path.stem}.png")
        assert (tmp_path / f"{path.stem}.png").read_bytes()[:4] == b"\x89PNG"


def test_to_xarray_has_named_axes_and_labels():
    xr = pytest.importorskip("xarray")
    da = text_maps().to_xarray("flow")
    assert isinstance(da, xr.DataArray) and da.dims == ("target", "layer", "source")
    assert list(da.coords["source_label"].values) == list("abcde")
