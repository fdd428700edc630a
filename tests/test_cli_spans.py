"""``attnflow explain --by word|sentence|spans FILE`` and ``--budget`` end to end on a tiny decoder saved
to a folder, against the interventions called directly (themselves tested against plain passes)."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow
from attnflow.units.segments import segments
from attnflow.interventions.span_ablation import ablate_spans
from tests.cli_runner import run_cli
from tests.factory import saved, tiny_decoder

TEXT = "Sara asked John to return her book. He said he would give it back to"


@pytest.fixture(scope="module")
def folder(minilm_path, tmp_path_factory):
    return saved(*tiny_decoder(minilm_path), tmp_path_factory.mktemp("tiny"))


def test_explain_by_sentence_ablates_each_sentence_at_once(monkeypatch, capsys, tmp_path, folder):
    js = tmp_path / "s.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", TEXT, "--model", folder, "--method", "ablated-flow",
                             "--by", "sentence", "--json", str(js))
    assert code == 0, err
    saved = attnflow.load(js)
    model, tokenizer = attnflow.load_model(folder)
    enc = tokenizer(TEXT, return_offsets_mapping=True)
    groups = segments(TEXT, enc["offset_mapping"], "sentence")
    assert saved.meta["spans"] == groups and saved.meta["span_methods"] == ["ablated-flow"]
    direct = ablate_spans(model, enc["input_ids"], groups).scores[0, 0]
    row = saved.row("ablated-flow")[-1]
    for s, g in enumerate(groups):
        np.testing.assert_allclose(row[g], direct[s], atol=1e-6)
    assert "ablated-flow, top 5 of 4 spans:" in out and "Sara asked John to return her book." in out


def test_explain_by_a_file_of_passages_with_a_budget(monkeypatch, capsys, tmp_path, folder):
    from attnflow.interventions.compute import Shapes
    from tests.test_budgeted import in_positions

    # priced in positions (the capture pass 1, the estimate 2): the tiny decoder's logits would make runs free
    monkeypatch.setattr(Shapes, "of", classmethod(lambda cls, model: in_positions(model)))
    passages = tmp_path / "p.txt"
    passages.write_text("asked John\nwould give it\n", encoding="utf-8")
    js = tmp_path / "p.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", TEXT, "--model", folder, "--method",
                             "ablated-flow-budgeted", "--by", "spans", "--spans", str(passages), "--budget", "3",
                             "--json", str(js))
    assert code == 0, err
    saved = attnflow.load(js)
    report = saved.meta["ablated-flow-budgeted"]
    # the capture pass and the estimate's forward and backward pass fit 3 forward passes, no more
    assert saved.params["budget"] == 3.0 and report["budget"] == 3.0 and report["cost"] == 3.0
    assert report["plan"] == "estimate+refine" and not any(report["exact"])
    assert "asked John" in out and "[estimate]" in out


@pytest.mark.parametrize("args", [["--by", "paragraph"], ["--by", "spans"], ["--spans", "missing.txt"]])
def test_bad_span_options_are_refused_in_one_line(monkeypatch, capsys, folder, args):
    code, out, err = run_cli(monkeypatch, capsys, "explain", TEXT, "--model", folder, *args)
    assert code == 2 and ("--by" in err or "--spans" in err) and "Traceback" not in err
