"""`attnflow reproduce` end to end through the CLI, as a user runs it."""

import csv
import os
import subprocess
import sys

from typer.testing import CliRunner

from attnflow.cli import app

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def test_reproduce_20_examples_writes_csv_and_png(tmp_path):
    """The default: the paper protocol on the bundled pre-LN model, whose |sum_d grad| is flagged as residue."""
    result = CliRunner().invoke(app, ["reproduce", "--examples", "20", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Table 1: vs blank-out" in result.output and "Table 2: vs input gradients" in result.output
    assert "model agreement, protocol paper" in result.output and "rounding residue" in result.output
    rows = list(csv.DictReader((tmp_path / "reproduction.csv").open()))
    flow_l6 = next(r for r in rows if (r["importance"], r["method"], r["layer"]) == ("gradients", "flow", "6"))
    assert f"{float(flow_l6['mean']):.2f}±{float(flow_l6['std']):.2f}" in result.output  # printed = written
    assert len(rows) == 2 * 3 * 6 and {(r["protocol"], r["gradient"]) for r in rows} == {("paper", "sum")}
    assert all(int(r["n"]) == 20 for r in rows)  # the paper's formula is defined on every example
    assert (tmp_path / "reproduction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reproduction.csv", "reproduction.png"]  # no temp files


def test_reproduce_the_bert_model_with_the_words_protocol(tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "--examples", "10", "--model", "agreement_bert", "--protocol",
                                      "words", "--gradient", "norm", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "model agreement_bert, protocol words" in result.output and "rounding residue" not in result.output
    rows = list(csv.DictReader((tmp_path / "reproduction.csv").open()))
    assert all(5 <= int(r["n"]) <= 10 and -1 <= float(r["mean"]) <= 1 for r in rows)
    assert {(r["protocol"], r["gradient"]) for r in rows} == {("words", "norm")}


def test_bad_protocol_choices_are_one_line_errors(tmp_path, monkeypatch, capsys):
    from cli_runner import run_cli

    for args, message in ((["--protocol", "tokens"], "--protocol must be one of paper, words"),
                          (["--gradient", "l1"], "--gradient must be one of sum, norm"),
                          (["--include-cls"], "--include-cls applies to --protocol words"),
                          (["--model", "agreement_gpt5"], "no bundled model named 'agreement_gpt5'")):
        code, _, err = run_cli(monkeypatch, capsys, "reproduce", "--examples", "1", "--out", str(tmp_path / "o"), *args)
        assert code == 2 and err.startswith("attnflow: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_bad_examples_is_one_line_and_nonzero_exit(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnflow", "reproduce", "--examples", "999999", "--out",
                           str(tmp_path)], check=False, capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "examples must be between 1 and" in proc.stderr
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())


def test_out_under_a_file_fails_before_the_run(tmp_path, monkeypatch, capsys):
    from cli_runner import run_cli

    (tmp_path / "so.txt").write_text("x")
    code, _, err = run_cli(monkeypatch, capsys, "reproduce", "--examples", "1", "--out", str(tmp_path / "so.txt" / "sub"))
    assert code == 2 and err.startswith("attnflow: error: --out must be a folder") and err.count("\n") == 1


def test_reproduce_the_distilled_model_by_name_matches_the_python_api(tmp_path):
    """`--model agreement_distilled` (the bundled student of online distillation) through the CLI prints
    what reproduce() computes in Python on the same examples."""
    from attnflow.reproduction import reproduce

    result = CliRunner().invoke(app, ["reproduce", "--examples", "6", "--model", "agreement_distilled",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "model agreement_distilled, protocol paper" in result.output
    rows = {(r["importance"], r["method"], r["layer"]): r["mean"]
            for r in csv.DictReader((tmp_path / "reproduction.csv").open())}
    run = reproduce("agreement_distilled", examples=6)
    for (method, importance), cell in run.summary.items():
        for layer, mean in enumerate(cell["mean"], start=1):
            # the CSV keeps 4 decimals: the CLI's cell is the Python value as written there
            assert rows[(importance, method, str(layer))] == f"{mean:.4f}"
