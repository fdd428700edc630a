"""The new-user campaign, kept: bad input to every command (and to the app's HTTP endpoints) is one line
that says what was expected, what was given and what to do, exit status 2, and nothing left behind in
the working folder; where a run was refused, the corrected run into the same output folder works.

A new command or option gets its bad cases here, tried the same way (issue 24)."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from attnflow.models import bundled_model_path
from cli_runner import run_cli

TEXTS = ["the keys to the cabinet are", "the key to the cabinets is"]


def _config_folder(root: Path, name: str, config: dict) -> Path:
    """A model folder whose config.json alone decides the refusal (no weights: nothing may load)."""
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture()
def work(tmp_path, monkeypatch):
    """The working folder a user runs the commands in, with the inputs and refusable model folders
    kept apart in ``inputs/`` so that "nothing left behind" is checked on the folder itself."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    (inputs / "bad.jsonl").write_text('{"text": "fine"}\n{"text": oops}\n')
    (inputs / "notes.json").write_text(json.dumps({"hello": "world"}))
    (inputs / "notes.txt").write_text("not json at all\n")
    _config_folder(inputs, "mamba", {"model_type": "mamba", "architectures": ["MambaForCausalLM"]})
    _config_folder(inputs, "t5", {"model_type": "t5", "is_encoder_decoder": True,
                                  "architectures": ["T5ForConditionalGeneration"]})
    # Falcon is explained with attention weights, but the table names no value projections for it
    _config_folder(inputs, "falcon", {"model_type": "falcon", "architectures": ["FalconForCausalLM"]})
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder, inputs


def _free_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused(monkeypatch, capsys, folder: Path, args: list[str], message: str) -> str:
    code, out, err = run_cli(monkeypatch, capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2, (args, code, err)
    assert len(lines) == 1 and lines[0].startswith("attnflow: error: "), (args, err)
    assert message in lines[0], (args, lines[0])
    assert not lines[0].rstrip().endswith(("got", "got:", ":")), lines[0]  # says what was given
    assert sorted(p.name for p in folder.iterdir()) == [], (args, list(folder.iterdir()))  # nothing left
    return lines[0]


def test_batch_refuses_up_front_leaves_nothing_and_the_corrected_rerun_works(work, monkeypatch, capsys):
    import torch

    folder, inputs = work
    data = str(inputs / "data.jsonl")
    out = ["--out", "run"]
    port = _free_port()
    cases = [
        (["--residual", "2"], "'--residual'"),
        (["--weighting", "norm", "--model", str(inputs / "falcon")], "the norm weighting needs"),
        (["--model", str(inputs / "t5")], "is an encoder-decoder model"),
        (["--model", str(inputs / "mamba")], "'mamba' models cannot be explained"),
        (["--model", str(bundled_model_path("digits_vit"))], "is a vision model"),
        (["--scheduler", f"tcp://127.0.0.1:{port}"], f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"),
        (["--scheduler", "127.0.0.1"], "must be an address like tcp://HOST:8786"),
        (["--scheduler", str(inputs / "notes.json")], "is not a Dask scheduler file"),
        (["--scheduler", str(inputs / "notes.txt")], "is not a Dask scheduler file"),
        (["--scheduler", str(inputs / "missing.json")], "does not exist"),
        (["--shard-size", "0"], "shard_size (--shard-size) must be a positive integer; got 0"),
        (["--target", "middle"], "target must be 'cls', 'last' or a token position"),
        (["--head-fusion", "median"], "'--head-fusion'"),
        (["--device", "tpu"], "device (--device) must be auto, cpu, cuda, cuda:N or mps"),
        (["--engine", "ray"], "engine (--engine) must be one of auto, dask, local"),
    ]
    if not torch.cuda.is_available():  # this machine: a CPU-only torch
        cases.append((["--device", "cuda"], "asks for a CUDA GPU"))
    for args, message in cases:
        _refused(monkeypatch, capsys, folder, ["batch", data, *out, *args], message)
    code, stdout, err = run_cli(monkeypatch, capsys, "batch", data, *out, "--engine", "local",
                                 "--methods", "rollout,raw")
    assert code == 0 and "rows: 2 of 2 explained, 0 failed" in stdout, err
    # the input's own mistakes: say which option fixes them
    _refused_keep = [
        (["batch", data, "--text-column", "body"], "name the column that holds the inputs with --text-column"),
        (["batch", str(inputs / "bad.jsonl")], "line 2 is not valid JSON (Expecting value, column 10)"),
    ]
    for args, message in _refused_keep:
        code, _, err = run_cli(monkeypatch, capsys, *args, "--out", "other")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (folder / "other").exists()
    # a missing id names each id once (a row per method used to repeat them)
    code, _, err = run_cli(monkeypatch, capsys, "view", "run", "--id", "99", "--png", "one.png")
    assert code == 2 and "no row with id" in err
    shown = err.split("ids look like ")[1].split(";")[0].split(", ")
    assert len(shown) == len(set(shown)) == 2, err


def test_python_batch_failing_before_its_first_shard_leaves_no_trace(work, minilm_path):
    """The checks pass (a decoder's config and a tokenizer), the weights are missing: the run fails
    after the output folder was set up, so that folder must be taken down again, lock included."""
    import attnflow

    folder, inputs = work
    model = inputs / "no-weights"
    shutil.copytree(minilm_path, model, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "config.json"))
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                   "vocab_size": 30522}))
    for out in (folder / "run", folder / "nested" / "run"):
        with pytest.raises(attnflow.AttnflowError, match="could not load model"):
            attnflow.batch(TEXTS, str(model), out=out, engine="local")
        assert sorted(folder.iterdir()) == []
    (folder / "mine").mkdir()  # a folder the user made stays, empty
    with pytest.raises(attnflow.AttnflowError, match="could not load model"):
        attnflow.batch(TEXTS, str(model), out=folder / "mine", engine="local")
    assert sorted(folder.iterdir()) == [folder / "mine"] and list((folder / "mine").iterdir()) == []
    run = attnflow.batch(TEXTS, out=folder / "mine", engine="local")  # the lock was released
    assert run.explained == 2
    for settings, message in (({"residual": 2}, r"residual must be a number in \[0, 1\]"),
                              ({"head_fusion": "median"}, "head_fusion must be"),
                              ({"weighting": "norm", "methods": "grad-rollout"}, "no norm weighting"),
                              ({"device": "cuda:7"}, "CUDA")):
        with pytest.raises(attnflow.AttnflowError, match=message):
            attnflow.batch(TEXTS, out=folder / "settings", engine="local", **settings)
        assert not (folder / "settings").exists()
    with pytest.raises(attnflow.AttnflowError, match="cannot reach the Dask scheduler"):
        attnflow.batch(TEXTS, out=folder / "dask", scheduler=f"tcp://127.0.0.1:{_free_port()}")
    assert not (folder / "dask").exists()


def test_explain_faithfulness_generate_reproduce_view_refusals(work, monkeypatch, capsys, minilm_path):
    folder, inputs = work
    cases = [
        (["explain", "the keys", "--target-text", "die Schlüssel", "--model", minilm_path],
         "is for encoder-decoder models"),
        (["explain", "the keys", "--model", str(bundled_model_path("digits_vit"))], "is a vision model"),
        (["explain", "the keys", "--weighting", "norm", "--model", str(inputs / "falcon")],
         "the norm weighting needs"),
        (["explain", "the keys", "--model", str(inputs / "mamba")], "'mamba' models cannot be explained"),
        (["explain-image", str(inputs), "--png", "x.png"], "is a folder; give an image file"),
        (["faithfulness", "the keys", "--model", str(inputs / "t5")], "encoder-decoder"),
        (["generate", "the keys", "--max-new-tokens", "0"], "--max-new-tokens must be a positive integer"),
        (["reproduce", "--solver", "magic", "--out", "repro"], "--solver must be one of"),
        (["reproduce", "--examples", "0", "--out", "repro"], "--examples must be at least 1"),
        (["view", str(inputs / "missing.json"), "--png", "x.png"], "missing.json"),
        (["faithfulness", "the"], "needs at least 2; 'the' has 1"),
    ]
    for args, message in cases:
        _refused(monkeypatch, capsys, folder, args, message)


def test_a_target_text_target_may_be_a_token(work, monkeypatch, capsys, minilm_path):
    """``--target`` with ``--target-text`` names a target token by index or text, as the help says."""
    import transformers

    folder, inputs = work
    model = inputs / "tiny-bart"
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    config = transformers.BartConfig(vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32, max_position_embeddings=64,
                                     pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
                                     eos_token_id=tokenizer.sep_token_id,
                                     decoder_start_token_id=tokenizer.cls_token_id)
    transformers.BartForConditionalGeneration(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the cabinet", "--target-text",
                             "the keys", "--target", "keys", "--model", str(model))
    assert code == 0, err
    assert "keys" in out
    assert sorted(p.name for p in folder.iterdir()) == []
    # the documented keywords: "last" is the last target token, "cls" names none and is refused
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the cabinet", "--target-text",
                             "the keys", "--target", "last", "--model", str(model))
    assert code == 0, err
    _refused(monkeypatch, capsys, folder, ["explain", "the keys to the cabinet", "--target-text", "the keys",
                                           "--target", "cls", "--model", str(model)], "has no CLS target")


def test_top_level_help_has_no_dangling_example_lines(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "--help")
    assert code == 0
    summaries = [line.strip("│ ").strip() for line in out.splitlines()]
    assert not any(s.endswith(("Example:", "Examples:")) for s in summaries), out


# ------------------------------------------------------------------------------- the app, over HTTP

@pytest.fixture(scope="module")
def app_server():
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from attnflow.app.process import AppProcess

    app = AppProcess(["--threads", "1", "--workers", "1"])
    try:
        app.start()
        yield app
    finally:
        app.stop()
        os.unlink(app.log)


def _http(server, path: str, body: object = None, content_type: str = "application/json") -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_app_endpoints_answer_bad_requests_with_one_sentence(app_server, tmp_path):
    mamba = _config_folder(tmp_path, "mamba", {"model_type": "mamba", "architectures": ["MambaForCausalLM"]})
    (tmp_path / "file.txt").write_text("x")
    cases = [
        ("api/models", {"path": str(mamba)}, "'mamba' models cannot be explained"),
        ("api/models", {"path": str(tmp_path / "nope")}, "does not exist"),
        ("api/models", {"path": str(tmp_path)}, "config.json"),
        ("api/models", {"path": ""}, "type the path of a local model folder"),
        ("api/jobs", b"{not json", "JSON"),
        ("api/jobs", {"model": "nope", "text": "hi"}, "no model 'nope' in the list"),
        ("api/jobs", {"model": "agreement", "text": "hi", "methods": []}, "choose at least one method"),
        ("api/jobs", {"model": "agreement", "text": "hi", "methods": ["rollout"], "residual": 1.5},
         "residual must lie between 0 and 1"),
        ("api/jobs/nope", None, "no such job"),
        ("api/jobs", {"model": "smollm2", "text": "hi"}, "send the text as \"prompt\""),
        ("api/jobs/nope/top?k=0", None, "no such job"),
    ]
    for path, body, message in cases:
        status, answer = _http(app_server, path, body)
        assert 400 <= status < 500, (path, status, answer)
        error = answer.get("error", "")
        assert message in error and "\n" not in error and "Traceback" not in error, (path, answer)
    status, answer = _http(app_server, "api/models")
    assert status == 200 and "mamba" not in json.dumps(answer["models"])  # a refused family is never listed


# ------------------------------------------------------------------ every method draws; all outputs or none

@pytest.fixture(scope="module")
def tiny_folders(minilm_path, tmp_path_factory):
    """A saved tiny decoder (Llama) and a saved tiny classifier (BERT), over MiniLM's vocabulary."""
    from transformers import AutoTokenizer

    from factory import tiny_model

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    folders = {}
    for kind in ("llama", "bert"):
        folder = tmp_path_factory.mktemp(f"tiny-{kind}")
        tiny_model(kind, vocab=tokenizer.vocab_size).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[kind] = folder
    return folders


def _offered(kind: str) -> list[str]:
    """The text methods the registry says run on a decoder (llama) or a classifier (bert)."""
    from attnflow.config import registry

    head = "decoder" if kind == "llama" else "classifier"
    return [m.name for m in registry.methods("text") if head in m.models]


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_png_draws_every_method_on_a_decoder_and_a_classifier(work, monkeypatch, capsys, tiny_folders, kind):
    """Methods without a layers axis (ablated flow, occlusion) draw as one row, each on its own scale."""
    import matplotlib.image as mpimg

    folder, _ = work
    for method in _offered(kind):
        png = folder / f"{method}.png"
        # a method named runs alone (nothing added beside it), --paper-only or not
        code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the old cabinet are", "--model",
                                 str(tiny_folders[kind]), "--method", method, "--png", str(png), "--paper-only")
        assert code == 0, (method, err)
        picture = mpimg.imread(png)
        assert picture.shape[0] > 100 and picture.std() > 0.01, method  # a drawn figure, not an empty page


def test_a_signed_method_gets_a_scale_symmetric_about_zero():
    """Negative scores (the logit rises when a token goes) are drawn apart from zero."""
    import numpy as np

    from attnflow.results import Attribution, Block
    from attnflow.views.heatmap import heatmap_figure

    tokens = ["a", "b", "c", "d"]
    row = np.array([[[0.0, -2.0, 1.0, 0.5]]])
    result = Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(4)),
                         blocks={"ablated-flow": Block(row, (3,), (2,))}, n_layers=3, target=3,
                         method="ablated-flow")
    fig = heatmap_figure(result, sink_aware=False)
    image = fig.axes[0].images[0]
    assert image.get_array().shape == (1, 4)  # the one computed row, not 2 empty ones beside it
    assert image.get_clim() == (-2.0, 2.0) and image.get_cmap().name == "RdBu"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["all"]


def test_a_failing_output_leaves_no_other_output(work, monkeypatch, capsys):
    """When the figure fails after the JSON could have been written, neither file is left."""
    from attnflow.errors import AttnflowError
    from attnflow.results import attribution

    folder, _ = work

    def broken(self, path=None, **options):
        raise AttnflowError("the figure could not be drawn")

    monkeypatch.setattr(attribution.Attribution, "plot", broken)
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the cabinet", "--json", "a.json",
                             "--png", "a.png", "--html", "a.html")
    assert code == 2 and "the figure could not be drawn" in err
    assert sorted(p.name for p in folder.iterdir()) == []


# ------------------------------------------------------------------ Python refusals are sentences, not raw errors

def test_python_refusals_are_attnflow_errors_that_say_what_was_given(tmp_path):
    import gc
    import warnings

    import attnflow
    from attnflow.errors import AttnflowError
    from factory import text_result

    with pytest.raises(AttnflowError, match="heads must map model class names to heads.*got 'causal-lm'"):
        attnflow.register_architecture("newfam", "decoder", heads="causal-lm")
    result = text_result(["a", "b", "c"])
    saved = tmp_path / "r.npz"
    result.save(saved)
    cut = tmp_path / "cut.npz"
    cut.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # the damaged file is closed, not left open
        with pytest.raises(AttnflowError, match="damaged"):
            attnflow.load(cut)
        gc.collect()
    data = json.loads(result.to_json())
    for change, message in (({"version": "2"}, "must be a whole number.*got '2' \\(str\\)"),
                            ({"schema": "other.thing"}, "not an attnflow result: its schema is 'other.thing'")):
        path = tmp_path / "changed.json"
        path.write_text(json.dumps({**data, **change}))
        with pytest.raises(AttnflowError, match=message):
            attnflow.load(path)
    with pytest.raises(AttnflowError, match="is a folder; pass a result file"):
        attnflow.load(tmp_path)


# ------------------------------------------------------------------ text people write: readable tokens

def test_non_ascii_tokens_read_as_the_text_they_cover(smollm2, tmp_path):
    """SmolLM2's byte-level BPE splits 'Ü' and '😀' into two tokens each, each alone an invalid UTF-8
    piece; every view shows the characters (numbered over the run) and the ids stay unchanged."""
    import attnflow
    from attnflow.views.heatmap import heatmap_figure

    model, tokenizer = smollm2
    text = "Ünïcödé 😀"
    result = attnflow.explain(text, model, tokenizer=tokenizer, method="rollout")
    ids = tokenizer(text)["input_ids"]
    assert len(result.sources) == len(ids)  # one label per token id: nothing merged away
    assert not any("\ufffd" in s for s in result.sources), result.sources
    assert result.sources[:2] == ["Ü(1/2)", "Ü(2/2)"] and result.sources[-2:] == [" 😀(1/2)", " 😀(2/2)"]
    path = tmp_path / "u.json"
    result.to_json(path)
    assert json.loads(path.read_text(encoding="utf-8"))["sources"] == result.sources
    assert "Ü(1/2)" in str(result) and "\ufffd" not in str(result)
    page = result.to_html()
    assert "\ufffd" not in page and ("Ü(1/2)" in page or json.dumps("Ü(1/2)") in page)
    labels = [t.get_text() for ax in heatmap_figure(result).axes for t in ax.get_xticklabels()]
    assert "Ü(1/2)" in labels and not any("\ufffd" in label for label in labels)


# ------------------------------------------------------------------ a setting or method that cannot apply (issue 33)

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def test_a_method_or_setting_that_cannot_apply_is_refused_by_every_command(work, monkeypatch, capsys, minilm_path):
    """Config-only folders: each refusal comes before any weight is read (there are none to read)."""
    folder, inputs = work
    llama = str(_config_folder(inputs, "llama", LLAMA))
    t5, data = str(inputs / "t5"), str(inputs / "data.jsonl")
    cases = [
        (["explain", "the keys", "--method", "ablated-flow", "--weighting", "norm", "--model", llama],
         "weighting='norm' (--weighting) does not change ablated-flow"),
        (["explain", "the keys", "--method", "alti-logit", "--causal-norm", "sink", "--model", llama],
         "causal_norm='sink' (--causal-norm) does not change alti-logit"),
        (["explain", "the keys", "--method", "occlusion", "--budget", "3", "--model", llama],
         "budget=3.0 (--budget) changes none of the methods this call computes (occlusion)"),
        (["explain", "the keys", "--method", "logit-attribution", "--by", "word", "--html", "r.html", "--model",
          llama],
         "spans='word' (--by/--spans) changes none of the methods this call computes "
         "(raw, rollout, logit-attribution)"),
        (["explain", "the keys", "--by", "sentence", "--model", minilm_path],
         "spans='sentence' (--by/--spans) changes none of the methods this call computes (rollout)"),
        (["generate", "the keys", "--method", "ablated-flow", "--model", t5],
         "ablated-flow runs on decoders (causal language models) only, and this model is an encoder-decoder"),
        (["generate", "the keys", "--method", "alti-logit", "--model", t5], "alti-logit runs on decoders"),
        (["generate", "the keys", "--method", "occlusion", "--weighting", "norm", "--model", llama],
         "does not change occlusion"),
        (["batch", data, "--out", "run", "--methods", "ablated-flow", "--model", minilm_path],
         f"ablated-flow runs on decoders (causal language models) only, and this model is an encoder, so batch "
         f"cannot compute it; `attnflow methods --model {minilm_path}`"),
        (["batch", data, "--out", "run", "--methods", "rollout,occlusion", "--weighting", "norm", "--model", llama],
         "does not change occlusion"),
        (["batch", data, "--out", "run", "--methods", ""], "methods (--methods) names no method"),
        (["batch", data, "--out", "run", "--methods", " , "], "methods (--methods) names no method"),
        (["faithfulness", "the keys to the cabinet are", "--method", "ablated-flow"],
         "ablated-flow runs on decoders (causal language models) only, and this model is a classifier"),
    ]
    for args, message in cases:
        _refused(monkeypatch, capsys, folder, args, message)
    # what the same settings do with methods they change: accepted past the check (then the weights are missing)
    code, _, err = run_cli(monkeypatch, capsys, "explain", "the keys", "--method", "rollout", "--weighting", "norm",
                           "--model", llama)
    assert code != 0 and "does not change" not in err and "changes none" not in err, err


def test_python_entry_points_make_the_same_check(work, minilm_path):
    import attnflow
    from attnflow.errors import AttnflowError

    folder, inputs = work
    llama = str(_config_folder(inputs, "llama", LLAMA))
    with pytest.raises(AttnflowError, match="runs on decoders .* this model is an encoder, so batch"):
        attnflow.batch(TEXTS, minilm_path, methods="ablated-flow", out=folder / "run", engine="local")
    assert not (folder / "run").exists()
    with pytest.raises(AttnflowError, match="does not change ablated-flow"):
        attnflow.explain("the keys", llama, method="ablated-flow", weighting="norm")
    with pytest.raises(AttnflowError, match="budget=3.0 .* changes none of the methods"):
        attnflow.explain("the keys", llama, method=["rollout", "alti-logit"], settings=attnflow.Settings(budget=3))
    with pytest.raises(AttnflowError, match="spans='word' .* changes none of the methods"):
        attnflow.explain_maps("the keys", llama, methods=["rollout", "occlusion"], spans="word")
    with pytest.raises(AttnflowError, match="alti-logit runs on decoders .* an encoder-decoder, so generate"):
        attnflow.generate(str(inputs / "t5"), prompt="the keys", method="alti-logit")
    with pytest.raises(AttnflowError, match="causal_norm='keys' .* does not change logit-attribution"):
        attnflow.generate(llama, prompt="the keys", method=["rollout", "logit-attribution"], causal_norm="keys")


def _runs_on(stdout: str) -> dict[str, bool]:
    """method -> whether `attnflow methods --model` says the model runs it (its last column)."""
    out = {}
    for line in stdout.splitlines()[2:]:
        if not line.strip():
            break  # the table ends; a decoder's capture path follows
        name = line.split()[0]
        out[name] = not line.split("  ")[-1].strip().startswith("no:")
    return out


def test_methods_lists_the_registry_and_what_a_model_can_run(work, monkeypatch, capsys, minilm_path):
    folder, inputs = work
    llama = str(_config_folder(inputs, "llama", LLAMA))
    code, stdout, err = run_cli(monkeypatch, capsys, "methods")
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[0].split() == ["method", "cost", "layers", "reference"]
    by_name = {line.split()[0]: line for line in lines[1:] if line.strip() and not line.startswith("(")}
    assert {"raw", "rollout", "flow", "ablated-flow", "alti-logit", "occlusion"} <= set(by_name)
    assert "one pass per source token" in by_name["ablated-flow"] and "Mohebbi et al. 2023" in by_name["ablated-flow"]
    assert by_name["ablated-flow"].split("  ")[2:] and " no " in by_name["ablated-flow"]  # no layers axis
    assert "Abnar & Zuidema 2020, eq. 1" in by_name["rollout"]
    # what each kind of model runs, written out by hand (not read from the registry)
    paper = {"raw", "rollout", "flow"}
    expected = {minilm_path: paper,  # a bare encoder: no prediction to ablate or attribute
                str(inputs / "t5"): paper,
                llama: set(by_name) - {"grad-rollout"},
                str(bundled_model_path("agreement")): paper | {"grad-rollout", "alti-logit", "logit-attribution"}}
    for model, runs in expected.items():
        code, stdout, err = run_cli(monkeypatch, capsys, "methods", "--model", model)
        assert code == 0, err
        found = _runs_on(stdout)
        assert {m for m, ok in found.items() if ok} == runs, (model, stdout)
        assert ("explain captures the explained target's rows on the model's fast attention" in stdout) == (
            model == llama), stdout
        for line in stdout.splitlines()[2:]:
            if "no:" in line:
                assert "runs on" in line and "this model is" in line, line  # says why
    assert sorted(p.name for p in folder.iterdir()) == []


# ------------------------------------------------------------------ --device on every command that runs a model

def test_every_command_that_runs_a_model_takes_device_and_refuses_a_gpu_it_lacks(work, monkeypatch, capsys):
    """On a CPU-only torch (this machine, CI) --device cuda is refused in one line before anything loads
    or binds; --device cpu runs. The project never needs a GPU."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the refusal is for machines without one")
    folder, inputs = work
    image = inputs / "digit.png"
    from PIL import Image

    Image.new("L", (8, 8), 128).save(image)
    for args in (["explain", "the keys"], ["generate", "the keys", "--max-new-tokens", "1"],
                 ["faithfulness", "the keys to the cabinet"], ["explain-image", str(image), "--png", "x.png"],
                 ["app", "--port", "0"]):
        _refused(monkeypatch, capsys, folder, [*args, "--device", "cuda"], "asks for a CUDA GPU")
    _refused(monkeypatch, capsys, folder, ["explain", "the keys", "--device", "tpu"], "cuda:N or mps; got 'tpu'")
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the cabinet", "--device", "cpu")
    assert code == 0, err


def test_python_device_loads_by_name_there_and_leaves_a_loaded_model_where_it_is(minilm_path):
    import attnflow
    from attnflow.errors import AttnflowError

    on_cpu = attnflow.explain("the keys to the cabinet", device="cpu")
    assert on_cpu.params["device"] == "cpu"
    with pytest.raises(AttnflowError, match="must be auto, cpu, cuda, cuda:N or mps; got 'gpu'"):
        attnflow.explain("the keys", device="gpu")
    model, tokenizer = attnflow.load_model(minilm_path)
    with pytest.raises(AttnflowError, match="the model passed is on cpu, and device 'cuda' was asked for"):
        attnflow.explain("the keys", model, tokenizer=tokenizer, device="cuda")


def test_the_gpu_benchmark_runs_every_case_on_the_cpu(minilm_path, tmp_path):
    """benchmarks/gpu.py runs only where a GPU is (rarely lent): each of its cases runs here on the CPU,
    on a tiny decoder saved to a folder, so a case the API refuses (as ``paper_only`` beside a decoder
    method once was) is found before a GPU is."""
    import sys

    from factory import saved, tiny_decoder

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import gpu

    folder = saved(*tiny_decoder(minilm_path), tmp_path / "decoder")
    todo = gpu.cases(folder, long_text="the keys to the cabinet " * 3, short="the keys to the cabinet", new_tokens=2)
    assert len(todo) >= 4 and any(label.startswith("defaults:") for label, _ in todo)
    for label, run in todo:
        assert gpu.difference(run("cpu"), run("cpu")) == "0.0e+00", label
