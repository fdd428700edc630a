"""The image commands as a user runs them: through attnflow.cli.main, so errors are checked as the
one line a user sees."""

import sys

import numpy as np
import pytest
import torch
from cli_runner import run_cli
from PIL import Image

from attnflow.data.digits import digits_split

torch.set_num_threads(1)


@pytest.fixture
def digit_png(tmp_path):
    image = digits_split()["test_images"][0]
    path = tmp_path / "digit.png"
    Image.fromarray(np.rint(image * 255).astype(np.uint8)).resize((64, 64), Image.NEAREST).save(path)
    return path


@pytest.mark.parametrize("method", ["raw", "rollout", "flow", "grad-rollout"])
def test_explain_image_writes_png(digit_png, tmp_path, method, monkeypatch, capsys):
    out_png = tmp_path / "out.png"
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(digit_png), "--method", method, "--png", str(out_png))
    assert code in (0, None), err
    assert "prediction 2" in out and f"wrote {out_png}" in out
    with Image.open(out_png) as img:
        assert img.format == "PNG"


def test_explain_image_json_round_trips_and_view_draws_it(digit_png, tmp_path, monkeypatch, capsys):
    import attnflow

    js, html = tmp_path / "d.json", tmp_path / "d.html"
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(digit_png), "--method", "all",
                             "--json", str(js), "--html", str(html))
    assert code in (0, None), err
    saved = attnflow.load(js)
    direct = attnflow.explain_image(str(digit_png), method="all")
    assert saved.kind == "image" and saved.methods == ["raw", "rollout", "flow"] and saved.grid == (4, 4)
    for m in saved.methods:
        np.testing.assert_allclose(saved.row(m), direct.row(m), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(saved.image, direct.image)
    assert saved.input == str(digit_png) and saved.prediction == direct.prediction
    assert "attnflow-data" in html.read_text()
    png = tmp_path / "v.png"
    code, out, err = run_cli(monkeypatch, capsys, "view", str(js), "--png", str(png))
    assert code in (0, None), err
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(digit_png), str(digit_png), "--json",
                             str(tmp_path / "two.json"))
    assert code == 2 and "one image's result" in err and not (tmp_path / "two.json").exists()


@pytest.mark.parametrize("case", ["missing image", "not an image", "unknown method", "missing model", "bad out"])
def test_explain_image_errors(case, digit_png, tmp_path, monkeypatch, capsys):
    text = tmp_path / "notes.png"
    text.write_text("hello")
    args = {"missing image": [str(tmp_path / "nope.png")],
            "not an image": [str(text)],
            "unknown method": [str(digit_png), "--method", "saliency"],
            "missing model": [str(digit_png), "--model", str(tmp_path / "no-model")],
            "bad out": [str(digit_png), "--png", str(tmp_path / "x.jpg")]}[case]
    out_png = tmp_path / "out.png"
    if "--png" not in args:
        args += ["--png", str(out_png)]
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", *args)
    assert code == 2
    assert err.startswith("attnflow: error: ") and err.count("\n") == 1, err
    assert not out_png.exists() and not (tmp_path / "x.jpg").exists()


def test_evaluate_perturbation_cli(tmp_path, monkeypatch, capsys):
    png, table = tmp_path / "p.png", tmp_path / "p.csv"
    code, out, err = run_cli(monkeypatch, capsys, "evaluate-perturbation", "--limit", "20", "--method", "rollout", "--method", "random",
                          "--png", str(png), "--csv", str(table))
    assert code in (0, None), err
    assert "rollout" in out and "random" in out and png.stat().st_size > 0
    assert table.read_text().startswith("method,order,fraction_removed,accuracy,auc")
    code, out, err = run_cli(monkeypatch, capsys, "evaluate-perturbation", "--method", "lime")
    assert code == 2 and "methods must be among" in err


def test_explain_image_as_a_real_process(digit_png, tmp_path):
    import os
    import subprocess

    import attnflow

    out_png = tmp_path / "real.png"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "attnflow", "explain-image", str(digit_png), "--method", "flow",
                             "--png", str(out_png)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    expl = attnflow.explain_image(str(digit_png), method="flow")
    r, c = divmod(int(expl.grid_scores().argmax()), 4)
    assert f"prediction {expl.prediction}" in result.stdout and f"top patch (row {r}, col {c})" in result.stdout
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_perturbation_checks_every_output_first(tmp_path, monkeypatch, capsys):
    (tmp_path / "d.csv").mkdir()
    code, _, err = run_cli(monkeypatch, capsys, "evaluate-perturbation", "--limit", "5", "--method", "random",
                           "--png", str(tmp_path / "p.png"), "--csv", str(tmp_path / "d.csv"))
    assert code == 2 and "it is a folder" in err
    assert not (tmp_path / "p.png").exists()
