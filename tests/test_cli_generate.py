"""``attnflow generate`` and ``attnflow explain`` on a decoder, end to end through the console entry
point (in-process, so the model directory is reloaded but Python is not restarted)."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

import attnflow

SUNNY = "Context: It is sunny today, which is bad. Q: How is the weather today? A: It is"


def test_generate_end_to_end_writes_json_and_png(monkeypatch, capsys, tmp_path, smollm2_dir):
    js, png, html = tmp_path / "gen.json", tmp_path / "gen.png", tmp_path / "gen.html"
    code, out, err = run_cli(monkeypatch, capsys, "generate", SUNNY, "--model", smollm2_dir, "--max-new-tokens", "2",
                             "--token", "-1", "--json", str(js), "--png", str(png), "--html", str(html))
    assert code == 0, err
    data = json.loads(js.read_text())
    assert data["version"] == 2 and data["kind"] == "generation" and data["input"] == SUNNY
    saved = attnflow.load(js)
    m, k = saved.input_length, saved.n_targets
    assert k == 2 and saved.M.shape == (k, m, 30) and saved.dense("rollout").shape == (k, 30, m + k)
    assert saved.target == 1  # --token -1: the files open on the last generated token
    assert saved.params["causal_norm"] is None and saved.params["residual"] == 0.5
    assert SUNNY + saved.meta["completion"] in out.replace("\n", "")
    assert saved.targets[0].strip() in out  # the per-token table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from attnflow.views.report import payload

    page = payload(saved)  # the report reads the JSON as written
    assert page["kind"] == "generation" and page["targets"] == saved.targets and page["target"] == 1
    assert "<html" in html.read_text().lower()


@pytest.mark.parametrize("args, message", [
    (["generate", "   ", "-n", "2"], "non-empty"),
    (["generate", "Hello", "-n", "0"], "positive"),
    (["generate", "Hello", "-n", "-3"], "positive"),
    (["generate", "Hello", "-n", "2", "--token", "zebra"], "no target 'zebra'"),
    (["generate", "Hello", "-n", "2", "--token", "7"], "outside the 2 targets"),
    (["generate", "Hello", "-n", "2", "--png", "out.txt"], "must end in"),
    (["explain", "Hello", "--target", "cls"], "decoders have no CLS"),
])
def test_generate_bad_input_is_one_line_no_file(monkeypatch, capsys, tmp_path, smollm2_dir, args, message):
    js, png = tmp_path / "x.json", tmp_path / "x.png"
    extra = ["--json", str(js)] + ([] if "--png" in args else ["--png", str(png)])
    code, _, err = run_cli(monkeypatch, capsys, *args, "--model", smollm2_dir, *extra)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("attnflow: error:") and message in err
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file


def test_explain_on_decoder_defaults_to_last(monkeypatch, capsys, tmp_path, smollm2_dir):
    js = tmp_path / "e.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", smollm2_dir,
                             "--method", "all", "--json", str(js))
    assert code == 0, err
    saved = attnflow.load(js)
    assert saved.methods == ["raw", "rollout", "flow"]  # the methods named, alone (issue 45)
    assert saved.target == 4 and all(c.targets == (4,) for c in saved.computed.values()) and "cabinet" in out
