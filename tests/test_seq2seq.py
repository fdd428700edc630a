"""Encoder-decoder models as a user meets them: a model folder (a tiny random-weight BART saved with the
MiniLM tokenizer), explain with a target text, generate, the result kind "seq2seq" in files, figures,
the report (in Chromium) and the command line. Correctness against the oracles per architecture is in
test_architectures_matrix.py; the joint maths in test_joint.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf
from cli_runner import run_cli
from test_report_browser import RTOL, Page, context  # noqa: F401  (context: the browser fixture)

import attnflow
from attnflow import AttnflowError
from attnflow.capture.text import encode
from attnflow.core.joint import joint_rollout

SOURCE = "the keys to the cabinet"
TARGET = "die schlüssel zum schrank"


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory, minilm_path):
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    config = tf.BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=3,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           max_position_embeddings=64, pad_token_id=0, eos_token_id=102, decoder_start_token_id=101,
                           forced_eos_token_id=None)
    folder = tmp_path_factory.mktemp("bart")
    tf.BartForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def bart(bart_dir):
    return attnflow.load_model(bart_dir)


def test_load_model_picks_the_seq2seq_head(bart):
    model, _ = bart
    assert type(model).__name__ == "BartForConditionalGeneration" and model.config._attn_implementation == "eager"


def test_explain_with_a_target_text(bart_dir, bart):
    result = attnflow.explain(SOURCE, bart_dir, target_text=TARGET, method="all", target="sc")
    tokenizer = bart[1]
    source = tokenizer.convert_ids_to_tokens(encode(tokenizer, [SOURCE])["input_ids"][0])
    s = len(source)
    labels = tokenizer.convert_ids_to_tokens(tokenizer(text_target=TARGET)["input_ids"])
    assert result.kind == "seq2seq" and result.model == bart_dir and result.n_layers == 3
    assert result.sources == source + ["[CLS]"] + labels and result.targets == labels
    assert result.input_length == s and result.target_positions == [s + i for i in range(len(labels))]
    assert result.targets[result.target] == "sc" and result.meta["encoder_layers"] == 2
    assert result.meta["target_text"] == TARGET and len(result.meta["predicted_tokens"]) == len(labels)
    # source + target are 17 tokens: flow is cheap enough for every target
    assert all(len(result.computed[m].targets) == len(labels) for m in result.methods)
    for method in ("rollout", "flow"):
        row = result.row(method)
        np.testing.assert_allclose(row.sum(-1), 1.0, atol=1e-9)
        assert np.all(row[:, s + result.target + 1:] == 0)  # nothing after the predicting position
    top = result.top(3)
    assert len(top) == 3 and all(pos < s for pos, _, _ in top)  # top ranks the source tokens


def test_flow_for_long_inputs_is_computed_for_the_target_only(bart, monkeypatch):
    # The threshold (FLOW_ALL_MAX, 128 tokens) lowered to 32 so a tiny model's input crosses it.
    import attnflow.api.seq2seq

    monkeypatch.setattr(attnflow.api.seq2seq, "FLOW_ALL_MAX", 32)
    model, tokenizer = bart
    long_source = " ".join(["the keys to the old cabinet"] * 5)
    result = attnflow.explain(long_source, model, tokenizer=tokenizer, target_text=TARGET, method="all", target=2)
    assert result.computed["flow"].targets == (2,) and len(result.computed["rollout"].targets) == len(result.targets)
    every = attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="flow",
                             target=1).select(targets=[1])
    assert every.computed["flow"].targets == (1,)


def test_bad_requests_are_one_sentence(bart, bart_dir, smollm2):
    model, tokenizer = bart
    with pytest.raises(AttnflowError, match="pass target_text"):
        attnflow.explain(SOURCE, model, tokenizer=tokenizer)
    with pytest.raises(AttnflowError, match="pass target_text"):
        attnflow.explain(SOURCE, bart_dir)
    with pytest.raises(AttnflowError, match="encoder-decoder model: explain it with a target text"):
        attnflow.capture(model, tokenizer, SOURCE)
    with pytest.raises(AttnflowError, match="target text must be a non-empty string"):
        attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=" ")
    with pytest.raises(AttnflowError, match="method must be one of raw, rollout, flow"):
        attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="grad-rollout")
    with pytest.raises(AttnflowError, match="causal_norm is for decoder-only models"):
        attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, causal_norm="sink")
    with pytest.raises(AttnflowError, match="no target 'zebra'"):
        attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, target="zebra")
    lm, lm_tokenizer = smollm2
    with pytest.raises(AttnflowError, match="is not an encoder-decoder model"):
        attnflow.explain("The keys", lm, tokenizer=lm_tokenizer, target_text="are")
    with pytest.raises(AttnflowError, match="one sequence one token per step; num_beams=4"):
        attnflow.generate(model, tokenizer, SOURCE, max_new_tokens=2, num_beams=4)


def test_sampled_generation_equals_one_teacher_forced_pass(bart_dir, bart):
    model, tokenizer = bart
    torch.manual_seed(3)
    gen = attnflow.generate(bart_dir, None, SOURCE, max_new_tokens=6, min_new_tokens=6, do_sample=True, top_k=50)
    assert gen.kind == "seq2seq" and gen.params["do_sample"] and len(gen.targets) == 6
    assert gen.sources[gen.input_length] == "[CLS]"  # the decoder start token (id 101 here)
    src = encode(tokenizer, [SOURCE])
    with torch.no_grad():
        out = model(input_ids=src["input_ids"], attention_mask=src["attention_mask"], output_attentions=True,
                    decoder_input_ids=torch.tensor([[101, *gen.meta["generated_ids"][:-1]]]))
    full = np.asarray(joint_rollout(out.encoder_attentions, out.decoder_attentions, out.cross_attentions))
    np.testing.assert_allclose(gen.dense("rollout")[:, :, :-1], full.transpose(1, 0, 2), atol=1e-5)
    share = np.broadcast_to(1 - 0.5 ** np.arange(1, 4), (6, 3))  # source share 1 - r^l at decoder layer l
    np.testing.assert_allclose(gen.M.sum(1), share, atol=1e-9)


@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_files_round_trip(bart, tmp_path, suffix):
    model, tokenizer = bart
    result = attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="all", target=3)
    path = tmp_path / f"r.{suffix}"
    result.save(path)
    back = attnflow.load(path)
    assert back.kind == "seq2seq" and back.sources == result.sources and back.target == 3
    assert back.input_length == result.input_length and back.meta["target_text"] == TARGET
    for method in result.methods:
        np.testing.assert_allclose(back.dense(method), result.dense(method), atol=0 if suffix == "npz" else 1e-15)
    if suffix == "json":
        assert json.loads(path.read_text())["kind"] == "seq2seq"


def test_figure_and_table(bart, tmp_path):
    model, tokenizer = bart
    result = attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="rollout")
    png = tmp_path / "s2s.png"
    result.plot(png, target=2, layer=0)
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(AttnflowError, match="layer must be an integer"):
        result.plot(tmp_path / "bad.png", layer=7)
    text = str(result)
    assert "top decoder layer" in text and "source share" not in text and "'die'" in text
    every = attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="all")
    assert "target token 0" in str(every)  # several methods: one line per method for the default target
    assert "source share" in str(every.select(methods=["flow"]))  # flow's split varies; rollout's does not


def test_report_clicks_a_target_token(context, bart, tmp_path):  # noqa: F811
    model, tokenizer = bart
    result = attnflow.explain(SOURCE, model, tokenizer=tokenizer, target_text=TARGET, method="all")
    path = tmp_path / "s2s.html"
    result.to_html(path)
    page = Page(context, path.as_uri())
    s = result.input_length
    for t in (3, 1):
        page.page.click(f".tok[data-kind='generated'][data-index='{t}']")
        assert page.page.get_attribute("body", "data-target") == str(t)
        for method in ("rollout", "flow"):
            page.page.click(f"#methods button[data-method='{method}']")
            page.set_layer(2)
            row = result.row(method, t)[2]
            np.testing.assert_allclose(page.scores(), row[:s], rtol=RTOL, atol=1e-9)
            np.testing.assert_allclose(page.scores("start"), row[s:s + 1], rtol=RTOL)  # the decoder start token
            np.testing.assert_allclose(page.scores("generated")[:t], row[s + 1: s + 1 + t], rtol=RTOL)
            assert page.scores("generated")[t:] == [None] * (len(result.targets) - t)
    page.page.click("#methods button[data-method='rollout']")
    assert "source share 0.88" in page.page.text_content("#target-label")  # rollout: 1 - 0.5^3, shown
    page.clean()


def test_cli_explain_and_generate(bart_dir, tmp_path, monkeypatch, capsys):
    out = {k: tmp_path / f"r.{k}" for k in ("json", "png", "html")}
    code, stdout, err = run_cli(monkeypatch, capsys, "explain", SOURCE, "--target-text", TARGET, "--model", bart_dir,
                                "--method", "all", "--target", "2", "--json", str(out["json"]), "--png",
                                str(out["png"]), "--html", str(out["html"]))
    assert code == 0, err
    assert "target token 2 (sc)" in stdout and all(p.is_file() for p in out.values())
    saved = attnflow.load(out["json"])
    assert saved.kind == "seq2seq" and saved.methods == ["raw", "rollout", "flow"] and saved.target == 2
    assert '"kind":"seq2seq"' in out["html"].read_text()
    code, stdout, err = run_cli(monkeypatch, capsys, "generate", SOURCE, "--model", bart_dir, "-n", "3", "--json",
                                str(tmp_path / "g.json"))
    assert code == 0, err
    assert stdout.startswith(SOURCE + "\n→ ") and "top decoder layer" in stdout
    assert attnflow.load(tmp_path / "g.json").kind == "seq2seq"
    code, stdout, err = run_cli(monkeypatch, capsys, "view", str(tmp_path / "g.json"), "--png", str(tmp_path / "v.png"))
    assert code == 0 and (tmp_path / "v.png").is_file(), err


def test_cli_without_a_target_text_is_one_line_and_exit_2(bart_dir, tmp_path, monkeypatch, capsys):
    code, stdout, err = run_cli(monkeypatch, capsys, "explain", SOURCE, "--model", bart_dir, "--json",
                                str(tmp_path / "x.json"))
    assert stdout == ""
    assert code == 2 and err.count("\n") == 1 and err.startswith("attnflow: error: ") and "--target-text" in err
    assert not (tmp_path / "x.json").exists()
