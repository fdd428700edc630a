"""The norm weighting (Kobayashi et al. 2020) against a naive per-head computation from each model's
own parameters: tiny random models from stock transformers configs, one per row of the table's
PROJECTIONS (a test below enforces it).

The oracle shares nothing with attnflow's capture: it takes the attention module's input hidden
states with its own pre-hook, the weights from ``output_attentions``, reads ``W_V``, ``b_V`` and
``W_O`` from the parameters as each family's modelling code uses them, and loops over heads, queries
and keys in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers as T
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.capture import capture
from attnflow.hf.architectures import ARCHITECTURES, PROJECTIONS
from attnflow.core.weighting import norm_weighted
from attnflow.errors import AttnflowError

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
GQA = dict(SMALL, num_key_value_heads=2)


def _linear(v: str, o: str, parent_o: bool = False):
    """Reader for separate value / output ``nn.Linear`` projections (``parent_o``: the output
    projection sits beside the attention module, BERT-style)."""
    def read(attn, parent, x):
        vp = getattr(attn, v)
        out = parent.output.dense if parent_o else getattr(attn, o)
        values = x @ vp.weight.double().T + (vp.bias.double() if vp.bias is not None else 0)
        return values, out.weight.double()
    return read


def _gpt2(attn, parent, x):  # Conv1D: x @ W + b, weight (in, out); c_attn = [q | k | v]
    hidden = x.shape[-1]
    w, b = attn.c_attn.weight.double(), attn.c_attn.bias.double()
    return x @ w[:, 2 * hidden:] + b[2 * hidden:], attn.c_proj.weight.double().T


def _phi3(attn, parent, x):  # one Linear: [q (heads*d) | k (kv*d) | v (kv*d)]
    heads, d = attn.config.num_attention_heads, attn.head_dim
    kv = attn.config.num_key_value_heads
    w = attn.qkv_proj.weight.double()[heads * d + kv * d:]
    return x @ w.T, attn.o_proj.weight.double()


def _neox(attn, parent, x):  # per head (q, k, v) rows of the fused Linear
    heads, d = attn.config.num_attention_heads, attn.head_size
    w = attn.query_key_value.weight.double().reshape(heads, 3, d, -1)[:, 2].reshape(heads * d, -1)
    b = attn.query_key_value.bias.double().reshape(heads, 3, d)[:, 2].reshape(-1)
    return x @ w.T + b, attn.dense.weight.double()


LLAMA = _linear("v_proj", "o_proj")
BERT = _linear("value", None, parent_o=True)
# model_type -> (config, model class, path of layer i's attention module, reader)
CASES = {
    "bert": (T.BertConfig(vocab_size=30522, **SMALL), T.BertModel, "encoder.layer.{}.attention.self", BERT),
    "roberta": (T.RobertaConfig(vocab_size=30522, **SMALL), T.RobertaModel, "encoder.layer.{}.attention.self", BERT),
    "electra": (T.ElectraConfig(vocab_size=30522, embedding_size=16, **SMALL), T.ElectraModel,
                "encoder.layer.{}.attention.self", BERT),
    "xlm-roberta": (T.XLMRobertaConfig(vocab_size=30522, **SMALL), T.XLMRobertaModel,
                    "encoder.layer.{}.attention.self", BERT),
    "megatron-bert": (T.MegatronBertConfig(vocab_size=30522, **SMALL), T.MegatronBertModel,
                      "encoder.layer.{}.attention.self", BERT),
    "distilbert": (T.DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=4, hidden_dim=37),
                   T.DistilBertModel, "transformer.layer.{}.attention", _linear("v_lin", "out_lin")),
    "llama": (T.LlamaConfig(vocab_size=30522, **GQA), T.LlamaForCausalLM, "model.layers.{}.self_attn", LLAMA),
    "gemma": (T.GemmaConfig(vocab_size=30522, head_dim=8, **GQA), T.GemmaForCausalLM, "model.layers.{}.self_attn",
              LLAMA),
    "qwen3": (T.Qwen3Config(vocab_size=30522, head_dim=8, **GQA), T.Qwen3ForCausalLM, "model.layers.{}.self_attn",
              LLAMA),
    "olmo": (T.OlmoConfig(vocab_size=30522, **GQA), T.OlmoForCausalLM, "model.layers.{}.self_attn", LLAMA),
    "granite": (T.GraniteConfig(vocab_size=30522, **GQA), T.GraniteForCausalLM, "model.layers.{}.self_attn", LLAMA),
    "smollm3": (T.SmolLM3Config(vocab_size=30522, pad_token_id=0, **GQA), T.SmolLM3ForCausalLM,
                "model.layers.{}.self_attn", LLAMA),
    "stablelm": (T.StableLmConfig(vocab_size=30522, **GQA), T.StableLmForCausalLM, "model.layers.{}.self_attn",
                 LLAMA),
    "mistral": (T.MistralConfig(vocab_size=30522, sliding_window=4, **GQA), T.MistralForCausalLM,
                "model.layers.{}.self_attn", LLAMA),
    "mixtral": (T.MixtralConfig(vocab_size=30522, num_local_experts=2, **{**GQA, "intermediate_size": 48}), T.MixtralForCausalLM,
                "model.layers.{}.self_attn", LLAMA),
    "starcoder2": (T.Starcoder2Config(vocab_size=30522, **GQA), T.Starcoder2ForCausalLM, "model.layers.{}.self_attn",
                   LLAMA),
    "gemma2": (T.Gemma2Config(vocab_size=30522, head_dim=8, sliding_window=4, **GQA), T.Gemma2ForCausalLM,
               "model.layers.{}.self_attn", LLAMA),
    "gemma3_text": (T.Gemma3TextConfig(vocab_size=30522, head_dim=8, sliding_window=4, **GQA), T.Gemma3ForCausalLM,
                    "model.layers.{}.self_attn", LLAMA),
    "qwen2": (T.Qwen2Config(vocab_size=30522, **GQA), T.Qwen2ForCausalLM, "model.layers.{}.self_attn", LLAMA),
    "phi": (T.PhiConfig(vocab_size=30522, **SMALL), T.PhiForCausalLM, "model.layers.{}.self_attn",
            _linear("v_proj", "dense")),
    "opt": (T.OPTConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                        word_embed_proj_dim=32), T.OPTForCausalLM, "model.decoder.layers.{}.self_attn",
            _linear("v_proj", "out_proj")),
    "gpt2": (T.GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=4), T.GPT2LMHeadModel, "transformer.h.{}.attn",
             _gpt2),
    "phi3": (T.Phi3Config(vocab_size=30522, pad_token_id=0, **GQA), T.Phi3ForCausalLM, "model.layers.{}.self_attn",
             _phi3),
    "gpt_neox": (T.GPTNeoXConfig(vocab_size=30522, **SMALL), T.GPTNeoXForCausalLM, "gpt_neox.layers.{}.attention",
                 _neox),
}
_IMAGE = dict(SMALL, image_size=8, patch_size=2, num_channels=1)
# model_type -> (config, classifier class, path of layer i's attention module); q/k/v/o_proj as in Llama
VISION = {
    "vit": (T.ViTConfig(**_IMAGE), T.ViTForImageClassification, "vit.layers.{}.attention"),
    "deit": (T.DeiTConfig(**_IMAGE), T.DeiTForImageClassification, "deit.layers.{}.attention"),
    "beit": (T.BeitConfig(**_IMAGE), T.BeitForImageClassification, "beit.layers.{}.attention"),
    "dinov2": (T.Dinov2Config(**{**_IMAGE, "mlp_ratio": 1}), T.Dinov2ForImageClassification,
               "dinov2.encoder.layer.{}.attention"),
}
TEXT = "The keys to the old cabinet are on the table"


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return T.AutoTokenizer.from_pretrained(minilm_path)


def _build(config, cls):
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    with torch.no_grad():  # the default init (std 0.02, zero biases) gives near-uniform attention and no b_V
        for name, p in model.named_parameters():
            if "norm" not in name.lower() and "ln" not in name.split(".")[-2:][0]:
                p.normal_(0, 0.3)
    return model


def naive_norm_maps(model, inputs: dict, attn_path: str, reader) -> np.ndarray:
    """``(layers, n, n)`` float64: sum over heads of ||alpha_hij * (x_j W_V^h + b_V^h) W_O^h||, rows
    normalised, by explicit loops."""
    layers = []
    n_layers = sum(1 for name, _ in model.named_modules() if name.count(".") == attn_path.count(".")
                   and name.startswith(attn_path.split("{}")[0]) and name.endswith(attn_path.split("{}")[1]))
    inputs_seen: dict[int, torch.Tensor] = {}
    handles = []
    for i in range(n_layers):
        attn = model.get_submodule(attn_path.format(i))

        def pre(module, args, kwargs, i=i):
            inputs_seen[i] = (args[0] if args else kwargs["hidden_states"]).detach()
        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    for h in handles:
        h.remove()
    for i in range(n_layers):
        name = attn_path.format(i)
        attn = model.get_submodule(name)
        parent = model.get_submodule(name.rpartition(".")[0])
        alpha = out.attentions[i][0].double()  # (heads, n, n)
        heads, n = alpha.shape[0], alpha.shape[-1]
        with torch.no_grad():
            values, w_o = reader(attn, parent, inputs_seen[i][0].double())  # (n, kv*d), (hidden, heads*d)
        d = w_o.shape[1] // heads
        kv = values.shape[1] // d
        c = np.zeros((n, n))
        for h in range(heads):
            g = h // (heads // kv)  # the key/value head that query head h reads (repeat_kv)
            w_head = w_o[:, h * d:(h + 1) * d]
            for j in range(n):
                f = w_head @ values[j, g * d:(g + 1) * d]
                for q in range(n):
                    c[q, j] += float(torch.linalg.vector_norm(alpha[h, q, j] * f))
        layers.append(c / c.sum(axis=1, keepdims=True))
    return np.stack(layers)


def test_every_projection_row_has_a_case():
    assert set(PROJECTIONS) == set(CASES) | set(VISION)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_norm_weighting_equals_naive_per_head(kind, tokenizer):
    config, cls, attn_path, reader = CASES[kind]
    model = _build(config, cls)
    maps = capture(model, tokenizer, TEXT, head_fusion="mean", weighting="norm")
    assert maps.weighting == "norm" and maps.attentions.shape[1] == 1
    inputs = dict(tokenizer(TEXT, return_tensors="pt"))  # token_type_ids too: GPT-2 embeds them
    assert inputs["input_ids"][0].tolist() == maps.input_ids.tolist()
    expected = naive_norm_maps(model, inputs, attn_path, reader)
    got = maps.attentions[:, 0].double().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    assert not np.allclose(got, capture(model, tokenizer, TEXT, head_fusion="mean").attentions[:, 0].numpy(),
                           atol=1e-3)  # the norms change the maps


def test_gqa_case_really_groups(tokenizer):
    config = CASES["llama"][0]
    assert config.num_key_value_heads < config.num_attention_heads


@pytest.mark.parametrize("kind", sorted(VISION))
def test_norm_weighting_vision_equals_naive(kind):
    from attnflow.capture.text import run_streaming

    config, cls, path = VISION[kind]
    model = _build(config, cls)
    torch.manual_seed(1)
    pixels = torch.randn(1, 1, 8, 8)
    buffer, _ = run_streaming(model, {"pixel_values": pixels}, "mean", weighting="norm")
    expected = naive_norm_maps(model, {"pixel_values": pixels}, path, LLAMA)
    np.testing.assert_allclose(buffer[0, :, 0].double().numpy(), expected, atol=1e-5)


def test_padded_batch_rows_equal_each_text_alone(tokenizer):
    config, cls, _, _ = CASES["llama"]
    model = _build(config, cls)
    texts = ["Hello there", TEXT]
    batch = capture(model, tokenizer, texts, head_fusion="mean", weighting="norm")
    for b, text in enumerate(texts):
        alone = capture(model, tokenizer, text, head_fusion="mean", weighting="norm").attentions
        n = alone.shape[-1]
        np.testing.assert_allclose(batch.attentions[b, :, :, :n, :n].numpy(), alone.numpy(), atol=1e-5)


def test_unknown_architecture_is_refused(tokenizer):
    model = _build(T.MPNetConfig(vocab_size=30522, **SMALL), T.MPNetModel)
    assert ARCHITECTURES["mpnet"].value is None
    with pytest.raises(AttnflowError, match="architecture table does not name them for 'mpnet'"):
        capture(model, tokenizer, TEXT, head_fusion="mean", weighting="norm")
    with pytest.raises(AttnflowError, match="weighting must be 'attention' or 'norm'"):
        capture(model, tokenizer, TEXT, head_fusion="mean", weighting="norms")


def test_norm_weighting_needs_fused_heads(tokenizer):
    config, cls, _, _ = CASES["bert"]
    with pytest.raises(AttnflowError, match="head_fusion"):
        capture(_build(config, cls), tokenizer, TEXT, head_fusion=None, weighting="norm")


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 4), n=st.integers(1, 7), fusion=st.sampled_from(["mean", "max", "min"]),
       seed=st.integers(0, 2**31 - 1))
def test_norm_weighted_rows_are_stochastic(heads, n, fusion, seed):
    g = torch.Generator().manual_seed(seed)
    alpha = torch.rand(heads, n, n, generator=g, dtype=torch.float64).tril() + torch.eye(n, dtype=torch.float64)
    alpha = alpha / alpha.sum(-1, keepdim=True)
    norms = torch.rand(heads, n, generator=g, dtype=torch.float64) * 10 + 1e-3
    c = norm_weighted(alpha, norms, fusion)
    assert c.shape == (n, n) and bool((c >= 0).all())
    np.testing.assert_allclose(c.sum(-1).numpy(), 1.0, atol=1e-12)
    assert bool((c.triu(1) == 0).all())  # a causal map stays causal
    # equal norms in every head: the weighting is the attention itself (mean fusion)
    same = norm_weighted(alpha, torch.full((heads, n), 3.0, dtype=torch.float64), "mean")
    np.testing.assert_allclose(same.numpy(), alpha.mean(0).numpy(), atol=1e-12)
    assert math.isclose(float(norm_weighted(alpha, norms * 7.0, fusion).sum()), float(c.sum()), rel_tol=1e-9)


@pytest.mark.parametrize("kind,strategy", [("llama", "rows"), ("llama", "incremental"), ("mistral", "rows"),
                                           ("gpt2", "incremental")])
def test_generation_with_norm_weighting_equals_one_teacher_forced_pass(kind, strategy, tokenizer):
    import attnflow

    config, cls, attn_path, reader = CASES[kind]
    model = _build(config, cls)
    torch.manual_seed(2)
    prompt = "The keys to the cabinet"
    gen = attnflow.generate(model, tokenizer, prompt, max_new_tokens=6, min_new_tokens=6, do_sample=True,
                            weighting="norm", causal_norm="keys", strategy=strategy)
    assert gen.params["weighting"] == "norm"
    m = gen.input_length
    ids = tokenizer(prompt)["input_ids"] + gen.meta["generated_ids"]
    assert len(ids) == m + 6
    if kind == "mistral":
        assert m + 6 > config.sliding_window  # the cached steps see a window, not every key
    naive = naive_norm_maps(model, {"input_ids": torch.tensor([ids])}, attn_path, reader)  # (layers, N, N)
    full = np.asarray(attnflow.rollout(torch.from_numpy(naive)[:, None], causal_norm="keys"))
    rows = gen.dense("rollout")  # (targets, layers, sources)
    np.testing.assert_allclose(rows[:, :, : m + 5], full[:, m - 1: m + 5, : m + 5].transpose(1, 0, 2), atol=1e-5)


def test_explain_with_norm_weighting(tokenizer):
    import attnflow

    config, cls, attn_path, reader = CASES["bert"]
    model = _build(config, cls)
    result = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="all", weighting="norm")
    assert result.params["weighting"] == "norm"
    naive = naive_norm_maps(model, dict(tokenizer(TEXT, return_tensors="pt")), attn_path, reader)
    expected = np.asarray(attnflow.rollout(torch.from_numpy(naive)[:, None]))[:, result.target_positions[result.target]]
    np.testing.assert_allclose(result.row("rollout"), expected, atol=1e-5)
    flow = np.asarray(attnflow.flow(torch.from_numpy(naive)[:, None], positions=[result.target_positions[result.target]], solver="networkx"))
    np.testing.assert_allclose(result.row("flow"), flow[:, 0], atol=1e-5)
    plain = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="rollout")
    assert plain.params["weighting"] == "attention"
    with pytest.raises(AttnflowError, match="grad-rollout"):
        attnflow.explain(TEXT, model, tokenizer=tokenizer, method="grad-rollout", weighting="norm")


def test_image_norm_weighting_on_the_bundled_digits_vit():
    import attnflow
    from attnflow.capture.vision import capture_images, load_vision_model
    from attnflow.data.digits import digits_split

    vit = load_vision_model()
    images = list(digits_split()["test_images"][:2])
    results = attnflow.explain_image(images, vit, method="all", weighting="norm")
    pixels = capture_images(vit, images[:1]).pixel_values
    path = next(name for name, _ in vit.named_modules() if name.endswith("0.attention")).replace(".0.", ".{}.")
    naive = naive_norm_maps(vit, {"pixel_values": pixels}, path, LLAMA)
    r = np.asarray(attnflow.rollout(torch.from_numpy(naive)[:, None]))
    first = results[0]
    assert first.params["weighting"] == "norm" and first.grid == (4, 4)
    np.testing.assert_allclose(first.row("rollout"), r[:, 0, 1:], atol=1e-5)  # CLS row over the patches
    assert np.isfinite(first.dense("flow")).all() and (first.dense("flow") >= 0).all()
    plain = attnflow.explain_image(images[0], vit)
    assert plain.params["weighting"] == "attention" and not np.allclose(plain.row(), first.row("rollout"), atol=1e-3)
    with pytest.raises(AttnflowError, match="grad-rollout"):
        attnflow.explain_image(images[0], vit, method="grad-rollout", weighting="norm")


def test_cli_weighting_norm_end_to_end(monkeypatch, capsys, tmp_path, minilm_path):
    import json

    from cli_runner import run_cli

    import attnflow

    out = tmp_path / "r.json"
    code, stdout, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", minilm_path,
                                "--weighting", "norm", "--json", str(out))
    assert code == 0, err
    saved = json.loads(out.read_text())
    assert saved["params"]["weighting"] == "norm"
    expected = attnflow.explain("The keys to the cabinet", minilm_path, weighting="norm")
    np.testing.assert_allclose(attnflow.load(out).row(), expected.row(), atol=1e-6)
    code, _, err = run_cli(monkeypatch, capsys, "explain", "x y", "--model", minilm_path, "--weighting", "norms")
    assert code == 2 and "weighting" in err and not list(tmp_path.glob("*.tmp"))
    png = tmp_path / "digit.png"
    from PIL import Image

    from attnflow.data.digits import digits_split

    Image.fromarray((digits_split()["test_images"][0] * 255).astype("uint8")).save(png)
    code, stdout, err = run_cli(monkeypatch, capsys, "explain-image", str(png), "--weighting", "norm", "--json",
                                str(tmp_path / "i.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "i.json").read_text())["params"]["weighting"] == "norm"


def test_batch_with_norm_weighting_equals_explain(tmp_path, tokenizer):
    import attnflow

    config, cls, _, _ = CASES["llama"]
    model = _build(config, cls)
    texts = ["a b", "the keys to the old cabinet are", "she said"]
    run = attnflow.batch(texts, model, tokenizer=tokenizer, out=tmp_path / "out", methods="rollout,flow",
                         engine="local", batch_size=3, weighting="norm")
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "out" / "rows").to_pylist()
    assert len(rows) == 6 and run.failed == 0
    for row in rows:
        alone = attnflow.explain(texts[row["id"]], model, tokenizer=tokenizer, method=row["method"], weighting="norm")
        np.testing.assert_allclose(np.asarray(row["scores"]), alone.row(row["method"]), atol=1e-5)
        assert run.result(row["id"]).params["weighting"] == "norm"
