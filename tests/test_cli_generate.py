"""``attnflow generate`` and ``attnflow explain`` on a decoder, end to end through the console entry
point (in-process, so the model directory is reloaded but Python is not restarted)."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

SUNNY = "Context: It is sunny today, which is bad. Q: How is the weather today? A: It is"


def test_generate_end_to_end_writes_json_and_png(monkeypatch, capsys, tmp_path, smollm2_dir):
    js, png, html = tmp_path / "gen.json", tmp_path / "gen.png", tmp_path / "gen.html"
    code, out, err = run_cli(monkeypatch, capsys, "generate", SUNNY, "--model", smollm2_dir, "--max-new-tokens", "2",
                             "--token", "-1", "--json", str(js), "--png", str(png), "--html", str(html))
    assert code == 0, err
    data = json.loads(js.read_text())
    assert data["kind"] == "generation" and data["method"] == "rollout" and data["prompt"] == SUNNY
    m, k = len(data["prompt_tokens"]), len(data["generated_tokens"])
    assert k == 2 and len(data["M"]) == k and len(data["M"][0]) == m and len(data["M"][0][0]) == 30
    assert [len(r) for r in data["rows"]] == [30, 30] and {len(x) for r in data["rows"] for x in r} == {m + k}
    assert SUNNY + data["completion"] in out.replace("\n", "")
    assert data["generated_tokens"][0].strip() in out  # the per-token table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from attnflow.views.report import load_result, payload

    page = payload(load_result(str(js)))  # issue 6's report reads the JSON as written
    assert page["kind"] == "generation" and page["generated_tokens"] == data["generated_tokens"]
    assert "<html" in html.read_text().lower()


@pytest.mark.parametrize("args, message", [
    (["generate", "   ", "-n", "2"], "non-empty"),
    (["generate", "Hello", "-n", "0"], "positive"),
    (["generate", "Hello", "-n", "-3"], "positive"),
    (["generate", "Hello", "-n", "2", "--token", "zebra"], "no generated token 'zebra'"),
    (["generate", "Hello", "-n", "2", "--token", "7"], "outside the 2 generated tokens"),
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
    data = json.loads(js.read_text())
    assert [d["method"] for d in data] == ["raw", "rollout", "flow"]
    assert all(d["target"] == 4 for d in data) and "cabinet" in out
