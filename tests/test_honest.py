"""Honest defaults and views: `attnflow generate` shows rollout beside ablated flow (the paper's alone one
flag away), tables note rows that mostly reflect position, and a short input's report carries
faithfulness numbers equal to attnflow.faithfulness's own."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runner import run_cli
from factory import saved, tiny_decoder
from oracles import float32_softmax_atol

import attnflow
from attnflow.api.defaults import DECODER_METHODS, with_faithfulness
from attnflow.results import Attribution, Block
from attnflow.views.table import method_table, render_text


@pytest.fixture(scope="module")
def tiny_llama(minilm_path):
    return tiny_decoder(minilm_path)


def test_a_short_reports_numbers_equal_attnflow_faithfulness(tiny_llama):
    model, tokenizer = tiny_llama
    text = "the keys to the old cabinet near the doors are"
    report = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=["raw", "rollout"], paper_only=True)
    got = report.meta["faithfulness"]  # measured by the api while it built the report
    reference = attnflow.faithfulness(text, model, tokenizer=tokenizer, method=["raw", "rollout"]).meta["faithfulness"]
    assert got["output"] == reference["output"] and got["positions"] == reference["positions"]
    # the cached occlusion's deletions equal the plain one-pass-per-deletion loop of attnflow.faithfulness, to the
    # float32 softmax of the plain passes' eager attention (the cached re-runs attend on the fused kernel in the
    # model's own precision: interventions.shared_prefix; tests/oracles.float32_softmax_atol)
    loo = np.array(reference["loo"], dtype=float)
    atol = float32_softmax_atol(np.nanmax(np.abs(loo)), len(tokenizer(text)["input_ids"]))
    np.testing.assert_allclose(np.array(got["loo"], dtype=float), loo, atol=atol)
    for m in ("raw", "rollout"):
        for key in ("spearman", "partial", "position"):
            np.testing.assert_allclose(np.array(got["methods"][m][key], dtype=float),
                                       np.array(reference["methods"][m][key], dtype=float), atol=1e-9)
        assert all(v is None for v in got["methods"][m]["comprehensiveness"])  # AOPC only when asked
    for prior, v in reference["priors"].items():
        assert got["priors"][prior]["spearman"] == pytest.approx(v["spearman"], abs=1e-9)
    assert got["meta"]["on_the_fly"]
    # a result you hold (explain: no numbers of its own) gets them as a new result, AOPC on request
    held = attnflow.explain(text, model, tokenizer=tokenizer, method=["raw", "rollout"], paper_only=True)
    again = with_faithfulness(held, model, tokenizer, aopc=True)
    assert "faithfulness" not in held.meta and again is not held
    np.testing.assert_allclose(np.array(again.meta["faithfulness"]["methods"]["rollout"]["comprehensiveness"], float),
                               np.array(reference["methods"]["rollout"]["comprehensiveness"], float), atol=1e-9)
    # long inputs are left alone, and so is a result that already carries the numbers
    long = attnflow.explain_maps(" ".join(["word"] * 40), model, tokenizer=tokenizer, methods=["rollout"])
    assert "faithfulness" not in long.meta and with_faithfulness(long, model, tokenizer) is long
    assert with_faithfulness(report, model, tokenizer) is report


def test_method_table_notes_the_rows_that_mostly_reflect_position():
    rng = np.random.default_rng(0)
    n = 8
    falling = np.linspace(1, 0.1, n)[None, None] * np.ones((1, 2, 1))
    falling[..., -1] = 0.5  # the target's own share does not count
    blocks = {"rollout": Block.rows(falling, [n - 1]), "raw": Block.rows(rng.dirichlet(np.ones(n), (1, 2)), [n - 1])}
    result = Attribution(kind="text", sources=[f"w{i}" for i in range(n)], targets=[f"w{i}" for i in range(n)],
                         target_positions=list(range(n)), blocks=blocks, n_layers=2, target=n - 1, method="rollout",
                         meta={"special": [], "causal": True})
    text = " ".join(render_text(method_table(result), width=200).split())
    rows = {line.split("│")[1].strip(): line for line in render_text(method_table(result), width=200).splitlines()
            if line.startswith("│")}
    assert "mostly position (ρ -1.00)" in rows["rollout"] and "mostly position" not in rows["raw"]
    assert "this ranking mostly reflects position" in text


def test_generate_shows_rollout_beside_ablated_flow_and_rollout_alone_one_flag_away(monkeypatch, capsys, tmp_path,
                                                                                       smollm2_dir):
    js = tmp_path / "gen.json"
    code, out, err = run_cli(monkeypatch, capsys, "generate", "My name is Putin, I am from", "--model", smollm2_dir,
                             "-n", "2", "--json", str(js))
    assert code == 0, err
    saved = attnflow.load(js)
    assert list(saved.methods) == list(DECODER_METHODS) == ["rollout", "ablated-flow"]
    flat = " ".join(out.split())
    assert "rollout" in flat and "ablated-flow" in flat
    top = saved.top(1, method="ablated-flow", target=0)[0][1]
    assert repr(top) in flat  # the faithful method's best prompt token is printed
    code, out, err = run_cli(monkeypatch, capsys, "generate", "My name is Putin, I am from", "--model", smollm2_dir,
                             "-n", "2", "--method", "rollout", "--json", str(js))
    assert code == 0, err
    assert list(attnflow.load(js).methods) == ["rollout"]
    code, _, err = run_cli(monkeypatch, capsys, "generate", "Hi", "--model", smollm2_dir, "-n", "2",
                           "--method", "bogus")
    assert code == 2 and "bogus" in err


def test_explain_on_a_decoder_shows_ablated_flow_beside_rollout_and_the_report_its_faithfulness(
        monkeypatch, capsys, tmp_path, smollm2_dir):
    js, html = tmp_path / "e.json", tmp_path / "e.html"
    code, out, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", smollm2_dir,
                             "--json", str(js), "--html", str(html))
    assert code == 0, err
    saved = attnflow.load(js)
    assert list(saved.methods) == ["rollout", "ablated-flow"]
    assert "ablated-flow" in out and "rollout" in out
    # the oracle: ablated flow computed directly, one source at a time, by the capture module's engine
    from attnflow.interventions.ablation import ablated_flow

    model, tokenizer = attnflow.load_model(smollm2_dir)
    ids = tokenizer("The keys to the cabinet")["input_ids"]
    direct = ablated_flow(model, ids, [len(ids) - 1], batch_size=1).scores[0, 0]
    # float32 scores of order 10: their last digits depend on which kernel ran a re-run (eager or the shared prefix's)
    np.testing.assert_allclose(saved.row("ablated-flow")[-1], direct, atol=1e-4, rtol=1e-4)
    from attnflow.views.report import payload

    page = payload(attnflow.load(js))
    assert page["faithfulness"] is None  # the JSON is the printed result; the report is the one with numbers
    text = html.read_text()
    assert '"priors":' in text and '"on_the_fly":true' in text and '"ablated-flow"' in text
    code, out, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", smollm2_dir,
                             "--paper-only", "--json", str(js))
    assert code == 0, err
    assert list(attnflow.load(js).methods) == ["rollout"]


def test_faithfulness_on_a_decoder_measures_ablated_flow_beside_the_papers_three(monkeypatch, capsys, tmp_path,
                                                                                 tiny_llama):
    folder = saved(*tiny_llama, tmp_path / "llama")
    js = tmp_path / "f.json"
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "the keys to the old cabinet near the doors are",
                             "--model", str(folder), "--json", str(js))
    assert code == 0, err
    record = attnflow.load(js).meta["faithfulness"]
    assert list(record["methods"]) == ["raw", "rollout", "flow", "ablated-flow"]
    best = max([(p, v["spearman"]) for p, v in record["priors"].items()]  # a tie goes to the prior
               + [(m, v["spearman"][-1]) for m, v in record["methods"].items() if v["spearman"][-1] is not None],
               key=lambda kv: round(kv[1], 12))
    assert record["best"]["method"] == best[0]
    assert "agrees best with leave-one-out on this input" in " ".join(out.split())
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "the keys to the old cabinet near the doors are",
                             "--model", str(folder), "--method", "rollout", "--json", str(js))
    assert code == 0, err
    assert list(attnflow.load(js).meta["faithfulness"]["methods"]) == ["rollout"]


def test_python_the_cli_and_the_app_give_a_decoder_the_same_methods_and_scores(monkeypatch, capsys, tmp_path,
                                                                               tiny_llama):
    """One policy (attnflow.api.defaults), one flag: the result is the same whoever asks."""
    from attnflow.app.catalog import Loaded
    from attnflow.app.jobs import Job
    from attnflow.app.options import text_request
    from attnflow.app.tasks import explain_text
    from attnflow.interventions.ablation import ablated_flow

    model, tokenizer = tiny_llama
    folder = saved(model, tokenizer, tmp_path / "llama")
    text = "the keys to the old cabinet"
    for paper_only, expected in ((False, ["rollout", "ablated-flow"]), (True, ["rollout"])):
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        code, _, err = run_cli(monkeypatch, capsys, "explain", text, "--model", str(folder), "--json", str(a),
                               *(["--paper-only"] if paper_only else []))
        assert code == 0, err
        attnflow.explain(text, str(folder), paper_only=paper_only).save(b)
        cli, python = attnflow.load(a), attnflow.load(b)
        same = attnflow.api.resolve(str(folder))  # the model the CLI and Python loaded from the folder
        app = explain_text(Job("text", "m"), Loaded(model=same.model, tokenizer=same.tokenizer),
                           text_request({"text": text, "methods": ["rollout"], "paper_only": paper_only}, False))
        assert list(cli.methods) == list(python.methods) == list(app.methods) == expected
        assert cli.target == python.target == app.target
        for method in expected:
            np.testing.assert_allclose(cli.row(method), python.row(method), atol=1e-12)
            # the app's maps hold every target (rollout as full float32 matrix products, not rows): round-off
            np.testing.assert_allclose(app.row(method), python.row(method), rtol=1e-6, atol=1e-9)
    # the oracle: ablated flow from the engine with its own clean pass, one source at a time
    ids = tokenizer(text)["input_ids"]
    direct = ablated_flow(same.model, ids, [len(ids) - 1], batch_size=1).scores[0, 0]
    # (batched edited runs against one source at a time: the engine's own 1e-5, see tests/test_ablation.py)
    np.testing.assert_allclose(attnflow.explain(text, str(folder)).row("ablated-flow")[-1], direct, atol=1e-5)


def test_a_long_decoder_input_gets_the_budgeted_method_in_place_of_exact_ablated_flow(tiny_llama, monkeypatch):
    """Above the record's exact_max tokens the decoder default is ablated flow within a budget (the record's
    long_default), so a long prompt costs a few passes, not one per source; below it, exact ablated flow.
    (The tiny model takes 64 tokens, so the threshold is lowered to 16 here.)"""
    from dataclasses import replace

    from attnflow.config import registry

    monkeypatch.setitem(registry.REGISTRY, "ablated-flow", replace(registry.get("ablated-flow"), exact_max=16))
    model, tokenizer = tiny_llama
    words = "the old keys to the big cabinet near the door".split()
    long_text = " ".join(words[i % len(words)] for i in range(30))
    long = attnflow.explain(long_text, model, tokenizer=tokenizer)
    assert long.n_sources > 16 and list(long.methods) == ["rollout", "ablated-flow-budgeted"]
    short = attnflow.explain("the keys to the old cabinet", model, tokenizer=tokenizer)
    assert list(short.methods) == ["rollout", "ablated-flow"]


def test_the_old_exact_default_max_is_a_deprecated_name_for_the_records_field():
    from attnflow.api import defaults as honest
    from attnflow.config import registry

    with pytest.warns(DeprecationWarning, match="exact_max"):
        assert honest.EXACT_DEFAULT_MAX == registry.get("ablated-flow").exact_max == 64
