"""The command line as a user runs it: a real subprocess for the happy path, in-process for errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from cli_runner import run_cli

import attnflow


def run_subprocess(*args, cwd=None):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "attnflow", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_explain_json_equals_rollout_on_the_models_own_attentions(tmp_path, minilm, minilm_path):
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    result = run_subprocess("explain", "The keys to the cabinet are here", "--model", minilm_path,
                     "--method", "rollout", "--json", str(out), "--png", str(png))
    assert result.returncode == 0, result.stderr
    assert "rollout" in result.stdout and "[CLS]" in result.stdout
    data = json.loads(out.read_text())
    assert data["version"] == 2 and data["kind"] == "text" and list(data["scores"]) == ["rollout"]
    saved = attnflow.load(out)
    model, tokenizer = minilm
    enc = tokenizer("The keys to the cabinet are here", return_tensors="pt")
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    expected = attnflow.rollout(attentions)[:, saved.target, :].numpy()
    np.testing.assert_allclose(saved.row(), expected, atol=1e-6)
    assert saved.sources == tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert saved.params["residual"] == 0.5 and saved.params["head_fusion"] == "mean" and saved.model == minilm_path
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_method_all_writes_one_result_with_three_methods(tmp_path, minilm_path):
    out = tmp_path / "all.json"
    result = run_subprocess("explain", "the key to the cabinets", "--model", minilm_path, "--method", "all",
                     "--target", "last", "--json", str(out))
    assert result.returncode == 0, result.stderr
    saved = attnflow.load(out)
    assert saved.methods == ["raw", "rollout", "flow"] and saved.method == "rollout"
    assert saved.target == saved.n_sources - 1 and saved.n_layers == 6
    np.testing.assert_allclose(saved.row("flow").sum(-1), 1.0, atol=1e-6)


def test_help_teaches():
    result = run_subprocess("explain", "--help")
    assert result.returncode == 0
    for word in ("--method", "--target", "--json", "--png", "rollout", "flow"):
        assert word in result.stdout


@pytest.mark.parametrize("args, message", [
    (["explain", ""], "non-empty"),
    (["explain", "hello", "--target", "middle"], "target must be"),
    (["explain", "hello", "--target", "40"], "outside"),
    (["explain", "word " * 600], "at most 512"),
    (["explain", "hello", "--model", "/no/such/model"], "does not exist"),
    (["explain", "hello", "--png", "out.gif"], "must end in one of"),
    (["explain", "hello", "--json", "missing-folder/out.json"], "does not exist"),
])
def test_bad_input_is_one_line_nonzero_and_writes_nothing(monkeypatch, capsys, tmp_path, minilm_path, args, message):
    monkeypatch.chdir(tmp_path)
    if "--model" not in args:
        args = [*args, "--model", minilm_path]
    if "--json" not in args:
        args = [*args, "--json", "ok.json"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("attnflow: error:") and message in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_unknown_method_is_rejected_by_the_parser(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "explain", "hello", "--method", "saliency", "--json", "x.json")
    assert code == 2 and "saliency" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_grad_rollout_from_the_command_line(monkeypatch, capsys, tmp_path):
    out = tmp_path / "g.json"
    code, stdout, err = run_cli(monkeypatch, capsys, "explain", "the key to the cabinets", "--method", "grad-rollout",
                                "--json", str(out), "--html", str(tmp_path / "g.html"))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["method"] == "grad-rollout" and data["prediction"] == "singular"
    assert "grad-rollout" in (tmp_path / "g.html").read_text()
