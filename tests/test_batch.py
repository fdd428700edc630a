"""attnflow batch with the local engine (one process, no Dask): rows equal explain, inputs, refusals,
failed rows, resuming, Ctrl-C, the Parquet output read back by pyarrow, pandas, polars and DuckDB, and
`attnflow view` on one row. The Dask engine and a real cluster: test_batch_dask.py."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from batch_support import check_against_explain, cli, exactly_once, rows_of, sentences, subprocess_env
from cli_runner import run_cli

import attnflow
from attnflow.errors import AttnflowError

pa = pytest.importorskip("pyarrow")  # the scale extra; `make test` installs it


@pytest.fixture(scope="module")
def agreement():
    return attnflow.load_model(None)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_local_rows_equal_explain_and_failed_rows_say_why(tmp_path, agreement):
    texts = sentences(18)
    bad = {"empty": "  ", "number": 7, "missing": None, "long": " ".join(["the keys"] * 40)}
    records = [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)]
    records += [{"id": k, "text": v, "label": 0} for k, v in bad.items()]
    data = write_jsonl(tmp_path / "data.jsonl", records)
    run = attnflow.batch(data, out=tmp_path / "out", methods="rollout,flow", target="cls", engine="local",
                         shard_size=5, batch_size=4)
    assert (run.rows, run.explained, run.failed, run.shards, run.written) == (22, 18, 4, 5, 5)
    rows = rows_of(run.out)
    exactly_once(rows, [f"s{i}" for i in range(18)], ["rollout", "flow"])
    model, tokenizer = agreement
    worst = check_against_explain(rows, {f"s{i}": t for i, t in enumerate(texts)}, model, tokenizer)
    assert worst < 1e-6
    assert {r["label"] for r in rows} == {0, 1}
    reasons = {e["id"]: e["error"] for e in run.errors()}
    assert reasons["empty"] == "empty text"
    assert "got int 7" in reasons["number"]
    assert "missing" in reasons["missing"]
    assert "takes at most 64" in reasons["long"] and "--truncate" in reasons["long"]
    manifest = json.loads((run.out / "batch.json").read_text())
    assert manifest["totals"] == {"rows": 22, "explained": 18, "failed": 4, "shards": 5, "finished_shards": 5}


def test_one_text_per_pass_is_bit_identical_to_explain(tmp_path, agreement):
    texts = sentences(6, seed=3)
    run = attnflow.batch(texts, out=tmp_path / "out", methods=["rollout", "flow", "raw"], engine="local",
                         batch_size=1)
    model, tokenizer = agreement
    for row in rows_of(run.out):
        alone = attnflow.explain(texts[row["id"]], model, tokenizer=tokenizer, method=row["method"])
        assert np.array_equal(np.asarray(row["scores"]), alone.row(row["method"]))


def test_grad_rollout_rows_equal_explain(tmp_path, agreement):
    texts = sentences(4, seed=4)
    run = attnflow.batch(texts, out=tmp_path / "out", methods="grad-rollout", engine="local", batch_size=4)
    rows = rows_of(run.out)
    exactly_once(rows, range(4), ["grad-rollout"])
    check_against_explain(rows, dict(enumerate(texts)), *agreement)


def test_a_decoder_with_padding_targets_each_texts_last_token(tmp_path, minilm_path):
    """Right padding in a batch must leave a decoder's rows as they are alone, and 'last' must be each
    text's own last token (a tiny random Llama with MiniLM's tokenizer)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    folder = tmp_path / "llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    texts = ["a", "the keys to the old cabinet are", "she said", "the author that the critics praise is good"]
    run = attnflow.batch(texts, str(folder), out=tmp_path / "out", methods="rollout,flow", engine="local",
                         batch_size=4)
    model, tok = attnflow.load_model(str(folder))
    rows = rows_of(run.out)
    exactly_once(rows, range(4), ["rollout", "flow"])
    check_against_explain(rows, dict(enumerate(texts)), model, tok, target=None)
    assert all(r["target"] == len(r["tokens"]) - 1 for r in rows)


def test_inputs_csv_parquet_and_python_tables(tmp_path, agreement):
    import pandas as pd
    import pyarrow.parquet as pq

    texts = sentences(6, seed=5)
    frame = pd.DataFrame({"key": [10, 11, 12, 13, 14, 15], "sentence": texts, "label": ["a", "b"] * 3})
    frame.to_csv(tmp_path / "data.csv", index=False)
    pq.write_table(pa.Table.from_pandas(frame), tmp_path / "data.parquet")
    model, tokenizer = agreement
    by_key = dict(zip(frame["key"], texts))
    datasets = pytest.importorskip("datasets")
    sources = {"csv": tmp_path / "data.csv", "parquet": tmp_path / "data.parquet", "pandas": frame,
               "dataset": datasets.Dataset.from_pandas(frame), "records": frame.to_dict("records")}
    for name, source in sources.items():
        run = attnflow.batch(source, out=tmp_path / name, text_column="sentence", id_column="key", engine="local")
        rows = rows_of(run.out)
        exactly_once(rows, by_key, ["rollout"])
        check_against_explain(rows, by_key, model, tokenizer)
        assert {r["id"]: r["label"] for r in rows} == dict(zip(frame["key"], frame["label"])), name


def test_undecodable_bytes_fail_their_row_only(tmp_path):
    good = sentences(2, seed=7)
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_bytes(b'{"text": "' + good[0].encode() + b'"}\n{"text": "caf\xe9 keys"}\n{"text": "' +
                      good[1].encode() + b'"}\n')
    csv = tmp_path / "data.csv"
    csv.write_bytes(b"text\n" + good[0].encode() + b"\ncaf\xe9 keys\n" + good[1].encode() + b"\n")
    for data in (jsonl, csv):
        run = attnflow.batch(data, out=tmp_path / f"out-{data.suffix[1:]}", engine="local")
        assert (run.explained, run.failed) == (2, 1)
        (error,) = run.errors()
        assert error["row"] == 1 and "undecodable bytes" in error["error"]


@pytest.mark.parametrize("content, message", [
    ('{"text": "the keys"}\n{"text": "the key"\n', "line 2 is not valid JSON"),
    ('{"text": "the keys"}\n["the key"]\n', "line 2 is a JSON list"),
    ('{"sentence": "the keys"}\n', "has no column 'text'"),
    ('{"id": 1, "text": "the keys"}\n{"id": 1, "text": "the key"}\n', "ids must be unique"),
])
def test_a_malformed_input_is_refused_before_any_work(tmp_path, monkeypatch, capsys, content, message):
    data = tmp_path / "data.jsonl"
    data.write_text(content, encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "batch", str(data), "--out", str(tmp_path / "out"), "--engine",
                             "local")
    assert code == 2 and out == ""
    assert err.startswith("attnflow: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_refusals_name_the_problem(tmp_path, monkeypatch, capsys):
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": t} for t in sentences(4)])
    (tmp_path / "data.txt").write_text("the keys\n")
    cases = [
        (["batch", str(tmp_path / "data.txt")], "must be a .jsonl, .csv or .parquet file"),
        (["batch", str(tmp_path / "missing.jsonl")], "no such input file"),
        (["batch", str(data), "--text-column", "body"], "has no column 'body'"),
        (["batch", str(data), "--methods", "rollout,magic"], "magic"),
        (["batch", str(data), "--model", str(tmp_path / "nope")], "does not exist"),
        (["batch", str(data), "--scheduler", "tcp://127.0.0.1:1", "--engine", "local"], "local engine"),
        (["batch", str(data), "--shard-size", "0"], "(--shard-size) must be a positive integer"),
    ]
    for args, message in cases:
        code, _, err = run_cli(monkeypatch, capsys, *args, "--out", str(tmp_path / "out"))
        assert code == 2 and message in err, (args, err)
        assert not (tmp_path / "out").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    code, _, err = run_cli(monkeypatch, capsys, "batch", str(data), "--out", str(tmp_path / "busy"))
    assert code == 2 and "other files in it" in err


def test_a_rerun_finishes_what_is_missing_and_never_duplicates(tmp_path, monkeypatch, capsys):
    texts = sentences(12, seed=9)
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "out"
    args = ["batch", str(data), "--out", str(out), "--methods", "rollout,flow", "--engine", "local",
            "--shard-size", "3"]
    code, stdout, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "rows: 12 of 12 explained, 0 failed; 4 shards, 4 written now" in stdout
    parts = sorted((out / "rows").glob("part-*.parquet"))
    before = {p.name: p.stat().st_mtime_ns for p in parts}
    parts[1].unlink()  # as if the run had been stopped before this shard
    code, stdout, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "1 written now (3 finished by an earlier run)" in stdout
    after = {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("part-*.parquet")}
    assert {k for k in after if after[k] != before.get(k)} == {parts[1].name}
    exactly_once(rows_of(out), range(12), ["rollout", "flow"])
    code, stdout, _ = run_cli(monkeypatch, capsys, *args)
    assert "0 written now (4 finished by an earlier run)" in stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("part-*.parquet")} == after
    code, _, err = run_cli(monkeypatch, capsys, *args[:-2], "--shard-size", "5")
    assert code == 2 and "another input (or another --shard-size)" in err
    code, _, err = run_cli(monkeypatch, capsys, *args, "--residual", "0.3")
    assert code == 2 and "other settings (residual: 0.5 then, 0.3 now)" in err
    exactly_once(rows_of(out), range(12), ["rollout", "flow"])


def test_ctrl_c_keeps_finished_shards_and_a_rerun_completes(tmp_path):
    texts = sentences(60, seed=11)
    data = write_jsonl(tmp_path / "data.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)])
    out = tmp_path / "out"
    args = cli("batch", str(data), "--out", str(out), "--methods", "rollout,flow", "--engine", "local",
               "--shard-size", "2", "--batch-size", "1")
    # A shell that starts the tests in the background ignores SIGINT, and children inherit that: give
    # the batch process the default disposition, as in a terminal.
    process = subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not list((out / "rows").glob("part-*.parquet")) and time.time() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert "interrupted;" in err and "shards are written" in err and "no output file" not in err
    written = list((out / "rows").glob("part-*.parquet"))
    assert 0 < len(written) < 30
    assert not [p for p in out.rglob(".*") if p.name != ".lock"]  # no temporary file left behind
    finished = subprocess.run(args, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert f"({len(written)} finished by an earlier run)" in finished.stdout
    exactly_once(rows_of(out), [f"t{i}" for i in range(60)], ["rollout", "flow"])


def test_the_rows_read_back_in_pandas_polars_and_duckdb(tmp_path):
    import duckdb
    import pandas as pd
    import polars as pl

    texts = sentences(8, seed=13)
    run = attnflow.batch([{"id": f"x{i}", "text": t, "label": i % 2} for i, t in enumerate(texts)],
                         out=tmp_path / "out", methods="rollout,flow", engine="local", shard_size=3)
    glob = str(run.out / "rows" / "*.parquet")
    frame = pd.read_parquet(run.out / "rows")
    assert len(frame) == 16 and set(frame["method"]) == {"rollout", "flow"}
    assert pl.read_parquet(glob).height == 16
    top = duckdb.sql(f"SELECT id, scores[-1] AS top_layer FROM read_parquet('{glob}') "
                     "WHERE method = 'flow' ORDER BY row").fetchall()
    assert [i for i, _ in top] == [f"x{i}" for i in range(8)]
    table = run.table()
    assert table.column("row").to_pylist() == sorted(table.column("row").to_pylist())
    first = table.slice(0, 1).to_pylist()[0]
    assert np.allclose(top[0][1], first["scores"][-1] if first["method"] == "flow" else table.slice(1, 1)
                       .to_pylist()[0]["scores"][-1])


def test_view_opens_one_row_as_a_result(tmp_path, monkeypatch, capsys, agreement):
    texts = sentences(5, seed=15)
    run = attnflow.batch([{"id": f"x{i}", "text": t} for i, t in enumerate(texts)], out=tmp_path / "out",
                         methods="rollout,flow", engine="local", maps=True)
    model, tokenizer = agreement
    result = run.result("x2")
    full = attnflow.explain_maps(texts[2], model, tokenizer=tokenizer, methods=("rollout", "flow"),
                                 flow_targets="all")
    assert result.methods == ["rollout", "flow"] and result.target == full.target
    for method in ("rollout", "flow"):
        assert result.computed[method] == full.computed[method]
        assert np.abs(result.dense(method) - full.dense(method)).max() < 1e-6
    assert result.meta["id"] == "x2" and result.input == texts[2]
    code, stdout, _ = run_cli(monkeypatch, capsys, "view", str(run.out), "--id", "x2", "--html",
                              str(tmp_path / "r.html"), "--png", str(tmp_path / "r.png"), "--target", "3")
    assert code == 0 and (tmp_path / "r.html").stat().st_size > 0 and (tmp_path / "r.png").stat().st_size > 0
    code, _, err = run_cli(monkeypatch, capsys, "view", str(run.out), "--id", "nope", "--png", str(tmp_path / "n.png"))
    assert code == 2 and "no row with id 'nope'" in err and not (tmp_path / "n.png").exists()
    code, _, err = run_cli(monkeypatch, capsys, "view", str(run.out), "--png", str(tmp_path / "n.png"))
    assert code == 2 and "--id" in err


def test_images_rows_equal_explain_image(tmp_path, monkeypatch, capsys):
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    names = []
    for i in range(5):
        Image.fromarray((digits.images[i] * 255 / 16).astype(np.uint8)).save(tmp_path / f"d{i}.png")
        names.append(f"d{i}.png")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    data = write_jsonl(tmp_path / "images.jsonl", [{"image": n} for n in [*names, "broken.png", "gone.png"]])
    run = attnflow.batch(data, out=tmp_path / "out", images=True, methods="rollout,flow", engine="local",
                         batch_size=3)
    assert (run.explained, run.failed) == (5, 2)
    for row in rows_of(run.out):
        alone = attnflow.explain_image(str(tmp_path / names[row["id"]]), method=row["method"])
        assert row["tokens"] == alone.sources and row["prediction"] == alone.prediction
        assert np.abs(np.asarray(row["scores"]) - alone.row(row["method"])).max() < 1e-6
    reasons = {e["id"]: e["error"] for e in run.errors()}
    assert "not an image file" in reasons[5] and "does not exist" in reasons[6]
    code, _, _ = run_cli(monkeypatch, capsys, "view", str(run.out), "--id", "1", "--png", str(tmp_path / "o.png"))
    assert code == 0 and (tmp_path / "o.png").stat().st_size > 0


def test_python_refusals():
    with pytest.raises(AttnflowError, match="path or hub id for the Dask engine"):
        attnflow.batch(["the keys"], object(), tokenizer=object(), out="unused", engine="dask")
    with pytest.raises(AttnflowError, match="iterable of texts"):
        attnflow.batch(42, out="unused")
    with pytest.raises(AttnflowError, match="full maps are for text"):
        attnflow.batch(["x.png"], out="unused", images=True, maps=True)
